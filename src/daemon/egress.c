/* egress.c - network policies and the egress proxy (see egress.h). */
#define _GNU_SOURCE
#include "egress.h"
#include "log.h"
#include "netopen.h"
#include "../lib/cleanup.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 256
#define HEAD_MAX (64 * 1024)  /* a request head larger than this is refused */
#define HEAD_TIMEOUT_MS 30000 /* for the client to say where it goes */
#define CONNECT_TIMEOUT_MS 10000
/* Connections one sandbox may hold open through the proxy (each is a
 * thread of sbxd's): beyond, new ones are closed at once. */
#define MAX_CONNS_PER_BOX 256

/* ---- policies ------------------------------------------------------------ */

typedef struct cidr {
    int family;
    unsigned char addr[16];
    int prefix;
    char text[64];
} cidr;

struct sbx_net_policy {
    bool allowlist, open;
    char **cidr_text[2];     /* deny, allow: for netopen.c's rules */
    int refs;
    char **allow_dom, **deny_dom;
    size_t n_allow_dom, n_deny_dom;
    cidr *allow_net, *deny_net;
    size_t n_allow_net, n_deny_net;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* policies' refs, the listeners */

void sbx_net_policy_free(sbx_net_policy *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_allow_dom; i++)
        free(p->allow_dom[i]);
    for (size_t i = 0; i < p->n_deny_dom; i++)
        free(p->deny_dom[i]);
    free(p->cidr_text[0]);
    free(p->cidr_text[1]);
    free(p->allow_dom);
    free(p->deny_dom);
    free(p->allow_net);
    free(p->deny_net);
    free(p);
}

static void put_policy(sbx_net_policy *p)
{
    pthread_mutex_lock(&lock);
    bool last = p && --p->refs == 0;
    pthread_mutex_unlock(&lock);
    if (last)
        sbx_net_policy_free(p);
}

bool sbx_net_policy_is_allowlist(const sbx_net_policy *p)
{
    return p && p->allowlist;
}

bool sbx_net_policy_is_open(const sbx_net_policy *p)
{
    return p && p->open;
}

const char *const *sbx_net_policy_cidrs(const sbx_net_policy *p, bool allow, size_t *n)
{
    *n = allow ? p->n_allow_net : p->n_deny_net;
    return (const char *const *) p->cidr_text[allow];
}



static bool parse_cidr(const char *s, cidr *c)
{
    char buf[64];
    if (strlen(s) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "%s", s);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash++ = '\0';
    memset(c, 0, sizeof *c);
    if (inet_pton(AF_INET, buf, c->addr) == 1)
        c->family = AF_INET;
    else if (inet_pton(AF_INET6, buf, c->addr) == 1)
        c->family = AF_INET6;
    else
        return false;
    int max = c->family == AF_INET ? 32 : 128;
    c->prefix = max;
    if (slash) {
        char *end;
        long v = strtol(slash, &end, 10);
        if (!*slash || *end || v < 0 || v > max)
            return false;
        c->prefix = (int) v;
    }
    snprintf(c->text, sizeof c->text, "%s", s);
    return true;
}

/* example.com or *.example.com: letters, digits, '-', '.', one leading "*." */
static bool valid_domain(const char *s)
{
    const char *d = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t n = strlen(d);
    if (n == 0 || n > 253 || d[0] == '.' || d[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char) d[i]) && d[i] != '-' && d[i] != '.')
            return false;
    return true;
}

static int add_rules(json_t *arr, const char *what, char ***doms, size_t *nd, cidr **nets, size_t *nn,
                     sbx_error *err)
{
    if (!arr)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > MAX_RULES)
        return sbx_error_set(err, EINVAL, "network '%s' must be an array of at most %d domains and CIDRs", what,
                             MAX_RULES);
    *doms = calloc(json_array_size(arr) + 1, sizeof **doms);
    *nets = calloc(json_array_size(arr) + 1, sizeof **nets);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = json_string_value(v);
        if (!s || strlen(s) != json_string_length(v))
            return sbx_error_set(err, EINVAL, "network '%s'[%zu] must be a string", what, i);
        if (parse_cidr(s, &(*nets)[*nn])) {
            (*nn)++;
        } else if (valid_domain(s)) {
            char *low = strdup(s);
            for (char *c = low; *c; c++)
                *c = (char) tolower((unsigned char) *c);
            size_t l = strlen(low);
            if (l > 1 && low[l - 1] == '.')
                low[l - 1] = '\0';
            (*doms)[(*nd)++] = low;
        } else {
            return sbx_error_set(err, EINVAL, "network '%s'[%zu] \"%s\" is neither a domain (example.com, "
                                              "*.example.com) nor a CIDR (10.0.0.0/8, 2001:db8::/32)", what, i, s);
        }
    }
    return 0;
}

int sbx_net_policy_parse(json_t *j, sbx_net_policy **out, sbx_error *err)
{
    sbx_net_policy *p = calloc(1, sizeof *p);
    p->refs = 1;
    *out = NULL;
    const char *mode = json_is_string(j) ? json_string_value(j) : json_string_value(json_object_get(j, "mode"));
    if (!json_is_string(j) && !json_is_object(j)) {
        sbx_net_policy_free(p);
        return sbx_error_set(err, EINVAL, "'network' must be \"none\" or {\"mode\", \"allow\", \"deny\"}");
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            if (strcmp(k, "mode") && strcmp(k, "allow") && strcmp(k, "deny")) {
                sbx_net_policy_free(p);
                return sbx_error_set(err, EINVAL, "unknown field 'network.%s' (mode, allow, deny)", k);
            }
        }
    }
    if (!mode || (strcmp(mode, "none") && strcmp(mode, "allowlist") && strcmp(mode, "open"))) {
        sbx_net_policy_free(p);
        return sbx_error_set(err, EINVAL, "network mode must be \"none\" (loopback only), \"allowlist\" (through "
                                          "sbx's egress proxy) or \"open\" (the internet, minus deny)");
    }
    p->allowlist = strcmp(mode, "allowlist") == 0;
    p->open = strcmp(mode, "open") == 0;
    if (add_rules(json_object_get(j, "allow"), "allow", &p->allow_dom, &p->n_allow_dom, &p->allow_net,
                  &p->n_allow_net, err) < 0 ||
        add_rules(json_object_get(j, "deny"), "deny", &p->deny_dom, &p->n_deny_dom, &p->deny_net, &p->n_deny_net,
                  err) < 0) {
        sbx_net_policy_free(p);
        return -1;
    }
    if (!p->allowlist && !p->open && (p->n_allow_dom || p->n_allow_net || p->n_deny_dom || p->n_deny_net)) {
        sbx_net_policy_free(p);
        return sbx_error_set(err, EINVAL, "mode \"none\" takes no allow or deny rules");
    }
    if (p->open && (p->n_allow_dom || p->n_deny_dom)) {
        sbx_net_policy_free(p);
        return sbx_error_set(err, EINVAL, "mode \"open\" takes CIDR rules only (domains need names, which only "
                                          "the allowlist's proxy sees)");
    }
    for (int k = 0; k < 2; k++) {
        size_t n = k ? p->n_allow_net : p->n_deny_net;
        cidr *c = k ? p->allow_net : p->deny_net;
        p->cidr_text[k] = calloc(n + 1, sizeof *p->cidr_text[k]);
        for (size_t i = 0; i < n && p->cidr_text[k]; i++)
            p->cidr_text[k][i] = c[i].text;
    }
    *out = p;
    return 0;
}

json_t *sbx_net_policy_json(const sbx_net_policy *p)
{
    json_t *o = json_pack("{s:s}", "mode", p && p->allowlist ? "allowlist" : p && p->open ? "open" : "none");
    if (!p || (!p->allowlist && !p->open))
        return o;
    json_t *allow = json_array(), *deny = json_array();
    for (size_t i = 0; i < p->n_allow_dom; i++)
        json_array_append_new(allow, json_string(p->allow_dom[i]));
    for (size_t i = 0; i < p->n_allow_net; i++)
        json_array_append_new(allow, json_string(p->allow_net[i].text));
    for (size_t i = 0; i < p->n_deny_dom; i++)
        json_array_append_new(deny, json_string(p->deny_dom[i]));
    for (size_t i = 0; i < p->n_deny_net; i++)
        json_array_append_new(deny, json_string(p->deny_net[i].text));
    json_object_set_new(o, "allow", allow);
    json_object_set_new(o, "deny", deny);
    return o;
}

static bool ascii_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool sbx_net_host_normalize(const char *in, size_t len, char *out, size_t out_len)
{
    if (len >= out_len || memchr(in, '\0', len))
        return false;
    if (memchr(in, ':', len)) { /* an IPv6 literal: what inet_pton reads and nothing else (no zone) */
        unsigned char a[16];
        memcpy(out, in, len);
        out[len] = '\0';
        for (char *c = out; *c; c++)
            *c = (char) tolower((unsigned char) *c);
        return len < INET6_ADDRSTRLEN && inet_pton(AF_INET6, out, a) == 1;
    }
    /* one trailing dot is the DNS root: "evil.com." is "evil.com", and a
     * rule for one is a rule for the other */
    if (len && in[len - 1] == '.')
        len--;
    if (len == 0 || len > 253)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '.') {
            if (label == 0) /* an empty label: ".a", "a..b" */
                return false;
            label = 0;
        } else if (ascii_alnum(c) || c == '-' || c == '_') { /* what http_parser takes in a host */
            if (++label > 63)
                return false;
        } else {
            return false;
        }
        out[i] = (char) tolower((unsigned char) c);
    }
    out[len] = '\0';
    return label > 0; /* "a.b.." ends in an empty label */
}

static bool domain_matches(const char *rule, const char *host)
{
    if (strncmp(rule, "*.", 2) == 0) {
        size_t r = strlen(rule + 1), h = strlen(host); /* ".example.com" */
        return h > r && strcasecmp(host + h - r, rule + 1) == 0;
    }
    return strcasecmp(rule, host) == 0;
}

static bool in_cidr(const cidr *c, int family, const unsigned char *a)
{
    if (c->family != family)
        return false;
    int full = c->prefix / 8, bits = c->prefix % 8;
    if (memcmp(c->addr, a, (size_t) full) != 0)
        return false;
    if (!bits)
        return true;
    unsigned char mask = (unsigned char) (0xff << (8 - bits));
    return (c->addr[full] & mask) == (a[full] & mask);
}

/* Ranges no policy reaches unless an allow CIDR names them. */
static const char *const special_nets[] = {
    "0.0.0.0/8",     "10.0.0.0/8",    "100.64.0.0/10", "127.0.0.0/8",     "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24",  "192.0.2.0/24",  "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4",   "240.0.0.0/4",   "::/128",        "::1/128",         "::/96",          "64:ff9b::/96",
    "64:ff9b:1::/48", "100::/64",     "2001:db8::/32", "fc00::/7",        "fe80::/10",      "fec0::/10",
    "ff00::/8",
    /* 6to4 and Teredo carry an IPv4 address inside (RFC 3056, RFC 4380):
     * a relay would take the connection to it, whatever range it is in */
    "2002::/16",     "2001::/32",
};
static const size_t n_special_nets = sizeof special_nets / sizeof *special_nets;

const char *const *sbx_net_special_ranges(size_t *n)
{
    *n = n_special_nets;
    return special_nets;
}

static const char *special_range(int family, const unsigned char *a)
{
    for (size_t i = 0; i < sizeof special_nets / sizeof *special_nets; i++) {
        cidr c;
        parse_cidr(special_nets[i], &c);
        if (in_cidr(&c, family, a))
            return special_nets[i];
    }
    return NULL;
}

/* The address bytes of sa, and their family: ::ffff:a.b.c.d is a.b.c.d. */
static int address_of(const struct sockaddr *sa, unsigned char a[16])
{
    if (sa->sa_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        return AF_INET;
    }
    memcpy(a, &((const struct sockaddr_in6 *) sa)->sin6_addr, 16);
    static const unsigned char v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (memcmp(a, v4mapped, 12) == 0) {
        memmove(a, a + 12, 4);
        return AF_INET;
    }
    return AF_INET6;
}

bool sbx_net_policy_allows(const sbx_net_policy *p, const char *host, const struct sockaddr *sa, bool mapped,
                           char *reason, size_t reason_len)
{
    unsigned char a[16];
    int family = address_of(sa, a);
    char addr[INET6_ADDRSTRLEN];
    inet_ntop(family, a, addr, sizeof addr);
    if (!p || !p->allowlist) {
        snprintf(reason, reason_len, "network mode is none");
        return false;
    }
    char norm[256];
    if (host && !sbx_net_host_normalize(host, strlen(host), norm, sizeof norm)) {
        snprintf(reason, reason_len, "not a valid host name");
        return false;
    }
    if (host)
        host = norm;
    for (size_t i = 0; i < p->n_deny_dom; i++)
        if (host && domain_matches(p->deny_dom[i], host)) {
            snprintf(reason, reason_len, "%s is denied by rule %s", host, p->deny_dom[i]);
            return false;
        }
    for (size_t i = 0; i < p->n_deny_net; i++)
        if (in_cidr(&p->deny_net[i], family, a)) {
            snprintf(reason, reason_len, "address %s is denied by rule %s", addr, p->deny_net[i].text);
            return false;
        }
    bool net_allowed = false;
    for (size_t i = 0; i < p->n_allow_net && !net_allowed; i++)
        net_allowed = in_cidr(&p->allow_net[i], family, a);
    const char *special = mapped ? NULL : special_range(family, a);
    if (special && !net_allowed) {
        if (host && strcmp(host, addr) != 0)
            snprintf(reason, reason_len, "%s resolves to %s, which is in %s: a private, loopback, link-local or "
                     "reserved range (allow it with a CIDR rule)", host, addr, special);
        else
            snprintf(reason, reason_len, "%s is in %s: a private, loopback, link-local or reserved range (allow it "
                     "with a CIDR rule)", addr, special);
        return false;
    }
    if (net_allowed)
        return true;
    for (size_t i = 0; i < p->n_allow_dom; i++)
        if (host && domain_matches(p->allow_dom[i], host))
            return true;
    snprintf(reason, reason_len, "not in allowlist");
    return false;
}

int sbx_net_policy_name_verdict(const sbx_net_policy *p, const char *host, char *reason, size_t reason_len)
{
    if (!p || !p->allowlist) {
        snprintf(reason, reason_len, "network mode is none");
        return SBX_NAME_DENIED;
    }
    char norm[256];
    if (!sbx_net_host_normalize(host, strlen(host), norm, sizeof norm)) {
        snprintf(reason, reason_len, "not a valid host name");
        return SBX_NAME_DENIED;
    }
    for (size_t i = 0; i < p->n_deny_dom; i++)
        if (domain_matches(p->deny_dom[i], norm)) {
            snprintf(reason, reason_len, "%s is denied by rule %s", norm, p->deny_dom[i]);
            return SBX_NAME_DENIED;
        }
    for (size_t i = 0; i < p->n_allow_dom; i++)
        if (domain_matches(p->allow_dom[i], norm))
            return SBX_NAME_ALLOWED;
    if (p->n_allow_net)
        return SBX_NAME_BY_ADDRESS;
    snprintf(reason, reason_len, "not in allowlist");
    return SBX_NAME_DENIED;
}

bool sbx_net_policy_cidr_allows(const sbx_net_policy *p, const struct sockaddr *sa)
{
    unsigned char a[16];
    int family = address_of(sa, a);
    for (size_t i = 0; p && i < p->n_allow_net; i++)
        if (in_cidr(&p->allow_net[i], family, a))
            return true;
    return false;
}

/* ---- listeners ----------------------------------------------------------- */

typedef struct box_net {
    char id[33];
    char key_id[17];
    int fds[2];              /* HTTP, SOCKS5 listeners (in the sandbox's netns) */
    sbx_net_policy *policy;  /* guarded by lock */
    int active;              /* connections being served; guarded by lock */
    pid_t pid;               /* the sandbox's sbx-init (its network namespace) */
    pid_t slirp_pid;         /* mode open: its slirp4netns (netopen.c), else 0 */
    int exit_fd;             /* closing it ends slirp4netns */
    int log_fd;              /* mode open: its connection log (netopen.c), else -1 */
    struct box_net *next;
} box_net;

static box_net *boxes;
static sbx_store *store_;
static pthread_t acceptor;
static int wake[2] = { -1, -1 };
static bool running;
static char *test_hosts; /* SBX_TEST_EGRESS_HOSTS */
/* Mode open's tables are made from a policy and the host's addresses: one
 * maker at a time (a policy change, a change of the host's addresses), so
 * that the last table made is from the policy in force. */
static pthread_mutex_t rules_lock = PTHREAD_MUTEX_INITIALIZER;
static int addr_watch = -1;              /* rtnetlink: the host's addresses changed */
static bool refresh_wanted, refreshing;  /* guarded by lock */
static unsigned addr_gen;                /* changes seen; guarded by lock */
static void want_refresh(void);

static void poke(void)
{
    if (wake[1] >= 0 && write(wake[1], "x", 1) < 0) {
        /* full: the acceptor is awake already */
    }
}

struct listen_args {
    pid_t pid;
    int fds[2];
    int err;
};

struct netns_run {
    pid_t pid;
    void (*fn)(void *);
    void *arg;
    int err;
};

static void *netns_thread(void *arg)
{
    struct netns_run *r = arg;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int) r->pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) < 0) {
        r->err = errno;
        if (ns >= 0)
            close(ns);
        return NULL;
    }
    close(ns);
    r->fn(r->arg);
    return NULL;
}

int sbx_netns_run(pid_t pid, void (*fn)(void *), void *arg)
{
    struct netns_run r = { pid, fn, arg, 0 };
    pthread_t t;
    if (pthread_create(&t, NULL, netns_thread, &r) != 0)
        return EAGAIN;
    pthread_join(t, NULL);
    return r.err;
}

/* The two listeners, made inside the sandbox's namespace (sbx_netns_run). */
static void listen_in_netns(void *arg)
{
    struct listen_args *a = arg;
    const int ports[2] = { SBX_EGRESS_HTTP_PORT, SBX_EGRESS_SOCKS_PORT };
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) ports[i]),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0 || listen(fd, 128) < 0) {
            a->err = errno;
            if (fd >= 0)
                close(fd);
            if (i == 1)
                close(a->fds[0]);
            return;
        }
        a->fds[i] = fd;
    }
}

struct dial_args {
    pid_t pid;
    int port, fd, err;
};

static void dial_in_netns(void *arg)
{
    struct dial_args *a = arg;
    a->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t) a->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    /* loopback: a connect is answered at once, accepted or refused */
    if (a->fd < 0 || connect(a->fd, (struct sockaddr *) &sin, sizeof sin) < 0) {
        a->err = errno;
        if (a->fd >= 0)
            close(a->fd);
        a->fd = -1;
    }
}

int sbx_netns_connect(pid_t pid, int port, sbx_error *err)
{
    struct dial_args a = { .pid = pid, .port = port, .fd = -1 };
    int e = sbx_netns_run(pid, dial_in_netns, &a);
    if (e)
        return sbx_error_set(err, e, "enter the network namespace of sandbox process %d", (int) pid);
    if (a.fd < 0)
        return sbx_error_set(err, a.err, "connect to 127.0.0.1:%d in the sandbox", port);
    return a.fd;
}

static box_net *find_box(const char *id)
{
    for (box_net *b = boxes; b; b = b->next)
        if (strcmp(b->id, id) == 0)
            return b;
    return NULL;
}

static void unlink_box(box_net *b)
{
    for (box_net **pp = &boxes; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            return;
        }
}

static void teardown(box_net *b, pid_t pid)
{
    if (b->fds[0] >= 0)
        close(b->fds[0]);
    if (b->fds[1] >= 0)
        close(b->fds[1]);
    if (b->log_fd >= 0)
        close(b->log_fd);
    if (b->slirp_pid > 0) { /* (no table made again behind its back: rules_lock) */
        pthread_mutex_lock(&rules_lock);
        sbx_netopen_stop(pid, b->slirp_pid, b->exit_fd);
        pthread_mutex_unlock(&rules_lock);
    }
    put_policy(b->policy);
    free(b);
}

int sbx_egress_set(const char *id, const char *key_id, pid_t pid, sbx_net_policy *p, sbx_error *err)
{
    bool want_proxy = sbx_net_policy_is_allowlist(p), want_open = sbx_net_policy_is_open(p);
    pthread_mutex_lock(&lock);
    box_net *b = find_box(id);
    if (b && want_proxy && b->fds[0] >= 0) { /* a new policy for the listeners it has */
        sbx_net_policy *old = b->policy;
        b->policy = p;
        pthread_mutex_unlock(&lock);
        put_policy(old);
        return 0;
    }
    if (b && want_open && b->slirp_pid > 0) { /* new rules for the network it has */
        pid_t sp = b->slirp_pid;
        int fd = b->exit_fd;
        pthread_mutex_unlock(&lock);
        pthread_mutex_lock(&rules_lock);
        if (sbx_netopen_start(pid, p, &sp, &fd, err) < 0) {
            pthread_mutex_unlock(&rules_lock);
            put_policy(p);
            return -1;
        }
        pthread_mutex_lock(&lock);
        sbx_net_policy *old = p;
        if (find_box(id) == b) { /* (else it ended meanwhile) */
            old = b->policy;
            b->policy = p;
        }
        pthread_mutex_unlock(&lock);
        pthread_mutex_unlock(&rules_lock);
        put_policy(old);
        return 0;
    }
    if (b)
        unlink_box(b);
    pthread_mutex_unlock(&lock);
    if (b) {
        poke(); /* the acceptor stops polling its listeners; then they close */
        teardown(b, pid);
    }
    if (!want_proxy && !want_open) {
        put_policy(p);
        return 0;
    }
    b = calloc(1, sizeof *b);
    snprintf(b->id, sizeof b->id, "%s", id);
    snprintf(b->key_id, sizeof b->key_id, "%s", key_id);
    b->fds[0] = b->fds[1] = b->exit_fd = b->log_fd = -1;
    b->pid = pid;
    b->policy = p;
    pthread_mutex_lock(&lock);
    unsigned gen = addr_gen; /* a change from here on may have missed its table */
    pthread_mutex_unlock(&lock);
    if (want_proxy) {
        struct listen_args a = { .pid = pid, .fds = { -1, -1 } };
        int e = sbx_netns_run(pid, listen_in_netns, &a);
        if (e)
            a.err = e;
        if (a.err) {
            teardown(b, 0);
            return sbx_error_set(err, a.err, "listen on 127.0.0.1:%d/%d in sandbox %s", SBX_EGRESS_HTTP_PORT,
                                 SBX_EGRESS_SOCKS_PORT, id);
        }
        b->fds[0] = a.fds[0];
        b->fds[1] = a.fds[1];
    } else if (sbx_netopen_start(pid, p, &b->slirp_pid, &b->exit_fd, err) < 0) {
        teardown(b, pid);
        return -1;
    } else {
        sbx_error lerr = { 0 };
        b->log_fd = sbx_netopen_log_open(pid, &lerr);
        if (b->log_fd < 0) /* the network works; only its events are missing: say so, go on */
            sbx_log("warn", "event=netopen_log sandbox=%s error=\"%s\"", id, lerr.msg);
    }
    pthread_mutex_lock(&lock);
    box_net *dup = find_box(id); /* a racing set: the later one wins */
    if (dup)
        unlink_box(dup);
    b->next = boxes;
    boxes = b;
    bool stale = want_open && addr_gen != gen;
    pthread_mutex_unlock(&lock);
    if (stale)
        want_refresh();
    poke();
    if (dup)
        teardown(dup, 0);
    return 0;
}

/* The host's addresses changed: every open sandbox's table is made again
 * (with the policy it has), so that an address the host just gained is
 * rejected too.  One thread at a time, for as long as changes come. */
static void *refresh_rules(void *arg)
{
    (void) arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        if (!refresh_wanted || !running) {
            refreshing = false;
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        refresh_wanted = false;
        size_t n = 0, done = 0;
        for (box_net *b = boxes; b; b = b->next)
            n += b->slirp_pid > 0;
        char (*ids)[33] = calloc(n + 1, sizeof *ids);
        n = 0;
        for (box_net *b = boxes; b && ids; b = b->next)
            if (b->slirp_pid > 0)
                snprintf(ids[n++], sizeof ids[0], "%s", b->id);
        pthread_mutex_unlock(&lock);
        for (size_t i = 0; i < n; i++) {
            pthread_mutex_lock(&rules_lock);
            pthread_mutex_lock(&lock);
            box_net *b = find_box(ids[i]);
            sbx_net_policy *p = b && b->slirp_pid > 0 ? b->policy : NULL;
            pid_t pid = b ? b->pid : 0, sp = b ? b->slirp_pid : 0;
            int fd = b ? b->exit_fd : -1;
            if (p)
                p->refs++;
            pthread_mutex_unlock(&lock);
            sbx_error err = { 0 };
            if (p && sbx_netopen_start(pid, p, &sp, &fd, &err) == 0) /* sp > 0: the table only */
                done++;
            else if (p)
                sbx_log("error", "event=host_addresses_rules_failed sandbox=%s error=\"%s\"", ids[i], err.msg);
            pthread_mutex_unlock(&rules_lock);
            put_policy(p);
        }
        free(ids);
        sbx_log("info", "event=host_addresses_changed open_sandboxes_updated=%zu", done);
    }
}

static void want_refresh(void)
{
    pthread_mutex_lock(&lock);
    refresh_wanted = true;
    bool start = !refreshing;
    refreshing = true;
    pthread_mutex_unlock(&lock);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (start && pthread_create(&t, &attr, refresh_rules, NULL) != 0) {
        pthread_mutex_lock(&lock);
        refreshing = false;
        pthread_mutex_unlock(&lock);
        sbx_log("error", "event=host_addresses_rules_failed error=\"no thread\"");
    }
    pthread_attr_destroy(&attr);
}

static void addresses_changed(void)
{
    if (!sbx_netopen_addr_changed(addr_watch))
        return;
    pthread_mutex_lock(&lock);
    addr_gen++;
    pthread_mutex_unlock(&lock);
    want_refresh();
}

void sbx_egress_forget(const char *id)
{
    sbx_error ignored = { 0 };
    sbx_net_policy *none = NULL;
    json_t *j = json_string("none");
    sbx_net_policy_parse(j, &none, &ignored);
    json_decref(j);
    sbx_egress_set(id, "", 0, none, &ignored);
}

void sbx_egress_envs(json_t *env)
{
    static const char http[] = "http://127.0.0.1:3128", socks[] = "socks5h://127.0.0.1:1080";
    static const char no_proxy[] = "localhost,127.0.0.1,::1";
    /* curl, wget, Python (urllib, requests, pip), Node's tools and git read
     * the *_proxy forms; pip and npm have their own too.  git reads
     * http(s)_proxy itself, and its http.proxy setting (given here as
     * GIT_CONFIG_COUNT/KEY/VALUE: no file written) holds even for a
     * command that drops the proxy variables.  git:// and ssh:// have no
     * proxy here: they fail to resolve the name (docs/api.md). */
    const char *const kv[][2] = {
        { "HTTP_PROXY", http },        { "HTTPS_PROXY", http },          { "http_proxy", http },
        { "https_proxy", http },       { "ALL_PROXY", socks },           { "all_proxy", socks },
        { "NO_PROXY", no_proxy },      { "no_proxy", no_proxy },         { "PIP_PROXY", http },
        { "npm_config_proxy", http },  { "npm_config_https_proxy", http }, { "GIT_CONFIG_COUNT", "1" },
        { "GIT_CONFIG_KEY_0", "http.proxy" }, { "GIT_CONFIG_VALUE_0", http },
    };
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        json_object_set_new(env, kv[i][0], json_string(kv[i][1]));
}

/* ---- one connection ------------------------------------------------------ */

typedef struct conn {
    int fd;                  /* the sandbox's side */
    int kind;                /* 0 HTTP, 1 SOCKS5 */
    char box[33], key_id[17];
    sbx_net_policy *policy;  /* referenced */
} conn;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read at least one byte within the deadline; 0 on EOF, -1 on error/timeout. */
static ssize_t read_by(int fd, void *buf, size_t len, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        struct pollfd pf = { fd, POLLIN, 0 };
        int r = poll(&pf, 1, left > 0 ? (int) left : 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = read(fd, buf, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        return n;
    }
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            poll(&pf, 1, 1000);
            continue;
        }
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t) n;
    }
    return 0;
}

/* What an attempt came to. */
enum verdict { ALLOWED, DENIED, FAILED };

/* len bytes (anything, NULs included) with every byte a log line or a
 * JSON string could not carry as it is - control bytes, '"', anything
 * beyond ASCII (invalid UTF-8 among it) - written as \xNN.  Hosts are
 * checked before they get here, but what a check refused is shown too, and
 * an event is never dropped for its bytes.  ('\\' stays: text already
 * written this way is left as it is.) */
static const char *printable_n(const char *in, size_t len, char *out, size_t out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < out_len; i++) {
        unsigned char ch = (unsigned char) in[i];
        if (ch < 0x20 || ch > 0x7e || ch == '"')
            o += (size_t) snprintf(out + o, out_len - o, "\\x%02x", ch);
        else
            out[o++] = (char) ch;
    }
    out[o] = '\0';
    return out;
}

static const char *printable(const char *text, char *out, size_t out_len)
{
    return printable_n(text ? text : "", text ? strlen(text) : 0, out, out_len);
}

/* The sentence a denial or failure is explained with, to the client and
 * in the event: "sbx: egress to HOST:PORT denied by sandbox network
 * policy (REASON)". */
static void explain(char *out, size_t len, const char *host, int port, enum verdict v, const char *reason)
{
    unsigned char a6[16];
    bool v6 = inet_pton(AF_INET6, host, a6) == 1;
    snprintf(out, len, "sbx: egress to %s%s%s:%d %s (%s)", v6 ? "[" : "", host, v6 ? "]" : "", port,
             v == DENIED ? "denied by sandbox network policy" : "failed", reason);
}

/* A `net` event of sandbox box.  up and down < 0: not counted (open
 * mode: the kernel lets connections out, no proxy sees their bytes). */
static void net_event(const char *box, const char *key_id, const char *proto, const char *host, const char *addr,
                      int port, enum verdict v, const char *reason, int64_t up, int64_t down)
{
    static const char *const names[] = { "allowed", "denied", "failed" };
    char h[1100], r[2100], m[3300];
    printable(host, h, sizeof h);
    printable(reason, r, sizeof r);
    json_t *o = json_pack("{s:s, s:s, s:s?, s:i, s:s}", "proto", proto, "host", h, "address",
                          addr && *addr ? addr : NULL, "port", port, "verdict", names[v]);
    json_object_set_new(o, "bytes_out", up < 0 ? json_null() : json_integer(up));
    json_object_set_new(o, "bytes_in", down < 0 ? json_null() : json_integer(down));
    if (v != ALLOWED) {
        json_object_set_new(o, "reason", json_string(r));
        explain(m, sizeof m, h[0] ? h : addr ? addr : "?", port, v, r);
        json_object_set_new(o, "message", json_string(m));
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s)
        sbx_store_event(store_, box, key_id, "net", s);
    else /* cannot happen with the text made printable; said loudly if it does */
        sbx_log("error", "event=egress_event_lost sandbox=%s", box);
    free(s);
    sbx_log(v == ALLOWED ? "info" : "warn", "event=egress sandbox=%s proto=%s host=%s address=%s port=%d verdict=%s%s%s%s",
            box, proto, h, addr ? addr : "", port, names[v], v != ALLOWED ? " reason=\"" : "", v != ALLOWED ? r : "",
            v != ALLOWED ? "\"" : "");
}

static void event(conn *c, const char *proto, const char *host, const char *addr, int port, enum verdict v,
                  const char *reason, uint64_t up, uint64_t down)
{
    net_event(c->box, c->key_id, proto, host, addr, port, v, reason, (int64_t) up, (int64_t) down);
}

/* A name from SBX_TEST_EGRESS_HOSTS, as a numeric address; NULL if none.
 * *trusted: it stands for a public address. */
static const char *test_host(const char *host, char *buf, size_t len, bool *trusted)
{
    *trusted = false;
    if (!test_hosts)
        return NULL;
    for (const char *p = test_hosts; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (eq && (size_t) (eq - p) == strlen(host) && strncasecmp(p, host, strlen(host)) == 0) {
            snprintf(buf, len, "%.*s", (int) (n - (size_t) (eq + 1 - p)), eq + 1);
            *trusted = buf[0] != '@';
            return buf[0] == '@' ? buf + 1 : buf;
        }
        p = end ? end + 1 : p + n;
    }
    return NULL;
}

/* Whether addr is one of this host's own (a connection to it reaches the
 * host's services, sbxd's API among them): it is if a socket can be bound
 * to it.  Asked of the kernel at each connection, so an address the host
 * gained a moment ago counts; fd is left unbound when the answer is no. */
static bool host_address(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_storage ss;
    memcpy(&ss, addr, len);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *) &ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *) &ss)->sin6_port = 0;
    int one = 1; /* take no port: the answer is all we want */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    return bind(fd, (struct sockaddr *) &ss, len) == 0 || errno == EADDRINUSE;
}

/* Decide, resolve, connect to the first allowed address.  host is
 * canonical (sbx_net_host_normalize).  The name rules come first: a name
 * they deny never reaches a resolver (a DNS query is a way out of the
 * sandbox too).  The fd, or -1 with *denied (a policy verdict, reason
 * filled) or not (a failure). */
static int dial(conn *c, const char *host, int port, char *addr_out, size_t addr_len, bool *denied, char *reason,
                size_t reason_len)
{
    *denied = false;
    addr_out[0] = '\0';
    /* A name made of digits, dots and hex is an address (inet_aton reads
     * "2130706433", "0x7f.1", "127.1"): it is judged as one, never as a
     * domain rule's name, and never resolved. */
    struct in_addr v4;
    bool literal = inet_aton(host, &v4) == 1 || strchr(host, ':');
    if (!literal && sbx_net_policy_name_verdict(c->policy, host, reason, reason_len) == SBX_NAME_DENIED) {
        *denied = true;
        return -1;
    }
    char mapped[128];
    bool trusted = false;
    const char *name = literal ? NULL : test_host(host, mapped, sizeof mapped, &trusted);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = literal || name ? AI_NUMERICHOST : 0 };
    struct addrinfo *res = NULL;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%d", port);
    int g = getaddrinfo(name ? name : host, portstr, &hints, &res);
    if (g != 0) {
        snprintf(reason, reason_len, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    char why[300] = "";
    snprintf(reason, reason_len, "%s has no address", host);
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        char addr[INET6_ADDRSTRLEN] = "";
        getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
        snprintf(addr_out, addr_len, "%s", addr);
        /* policies are immutable once made: no lock to read one */
        bool ok = sbx_net_policy_allows(c->policy, literal ? NULL : host, ai->ai_addr, name && trusted, why,
                                        sizeof why);
        if (ok)
            fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (ok && fd >= 0 && !(name && trusted) && !sbx_net_policy_cidr_allows(c->policy, ai->ai_addr) &&
            host_address(fd, ai->ai_addr, ai->ai_addrlen)) {
            snprintf(why, sizeof why, "%s is an address of this host (allow it with a CIDR rule)", addr);
            ok = false;
            close(fd);
            fd = -1;
        }
        if (!ok) {
            *denied = true;
            snprintf(reason, reason_len, "%s", why);
            continue;
        }
        *denied = false;
        if (fd < 0)
            continue;
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            int e = 0;
            socklen_t el = sizeof e;
            if (poll(&pf, 1, CONNECT_TIMEOUT_MS) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
                snprintf(reason, reason_len, "cannot connect to %s port %d: %s", addr, port,
                         e ? strerror(e) : "timed out");
                close(fd);
                fd = -1;
            }
        } else if (r < 0) {
            snprintf(reason, reason_len, "cannot connect to %s port %d: %s", addr, port, strerror(errno));
            close(fd);
            fd = -1;
        }
        if (fd >= 0)
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    }
    freeaddrinfo(res);
    return fd;
}

/* Copy both ways until both sides are done; bytes counted.  splice()
 * through a pipe per direction: the bytes never enter sbxd's memory (on a
 * small machine the copies are what a proxy costs). */
struct way {
    int from, to, pipe[2];
    size_t pending;  /* in the pipe, not yet written on */
    bool reading;    /* from is still open */
    uint64_t *count;
};

static bool way_step(struct way *w, short rev_from, short rev_to)
{
    if (w->reading && w->pending == 0 && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = splice(w->from, NULL, w->pipe[1], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            w->pending = (size_t) n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            w->reading = false;
            shutdown(w->to, SHUT_WR);
            if (n < 0) /* a reset: the other way is over too */
                return false;
        }
    }
    if (w->pending && (rev_to & POLLOUT || w->pending)) {
        ssize_t n = splice(w->pipe[0], NULL, w->to, NULL, w->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            w->pending -= (size_t) n;
            *w->count += (uint64_t) n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return false;
        }
    }
    return true;
}

void sbx_relay(int a, int b, uint64_t *up, uint64_t *down)
{
    struct way w[2] = { { a, b, { -1, -1 }, 0, true, up }, { b, a, { -1, -1 }, 0, true, down } };
    for (int i = 0; i < 2; i++) {
        if (pipe2(w[i].pipe, O_CLOEXEC | O_NONBLOCK) < 0)
            goto out;
        fcntl(w[i].pipe[1], F_SETPIPE_SZ, 1 << 20);
    }
    while (w[0].reading || w[1].reading || w[0].pending || w[1].pending) {
        /* read from a side while its pipe is empty, write to a side while
         * there is something for it; a side that said all it will is not
         * polled for reading again (its HUP would wake us forever) */
        struct pollfd pf[2] = { { a, 0, 0 }, { b, 0, 0 } };
        for (int i = 0; i < 2; i++) {
            if (w[i].reading && !w[i].pending)
                pf[i].events |= POLLIN;
            if (w[i].pending)
                pf[1 - i].events |= POLLOUT;
        }
        if (!pf[0].events)
            pf[0].fd = -1;
        if (!pf[1].events)
            pf[1].fd = -1;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (!way_step(&w[0], pf[0].revents, pf[1].revents) || !way_step(&w[1], pf[1].revents, pf[0].revents))
            break;
    }
out:
    for (int i = 0; i < 2; i++) {
        if (w[i].pipe[0] >= 0)
            close(w[i].pipe[0]);
        if (w[i].pipe[1] >= 0)
            close(w[i].pipe[1]);
    }
}

/* The message goes in the body and in the reason phrase too: many clients
 * (pip and requests: "403 Client Error: <reason>", curl -i, git with
 * GIT_CURL_VERBOSE) show only the status line of a failed proxy answer. */
static void http_reply(int fd, int status, const char *text, const char *msg)
{
    char reason[600];
    snprintf(reason, sizeof reason, "%s (%s)", text, msg);
    for (char *c = reason; *c; c++)
        if ((unsigned char) *c < 0x20 || (unsigned char) *c > 0x7e)
            *c = '?'; /* a reason phrase is printable ASCII */
    char out[2048]; /* one write: a client reading once gets it all */
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Sbx-Egress: %s\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                     status, reason, status == 403 ? "denied" : "failed", strlen(msg) + 1, msg);
    write_all(fd, out, (size_t) (n < (int) sizeof out ? n : (int) sizeof out - 1));
}

/* The parsed head of a proxy request. */
struct head {
    char url[8192];
    size_t url_len;
    bool done, too_long;
};

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct head *h = p->data;
    if (h->url_len + len >= sizeof h->url) {
        h->too_long = true;
        return 1;
    }
    memcpy(h->url + h->url_len, at, len);
    h->url_len += len;
    h->url[h->url_len] = '\0';
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    ((struct head *) p->data)->done = true;
    http_parser_pause(p, 1); /* stop at the end of the head: the body is relayed as bytes */
    return 0;
}

/* Headers a proxy must not pass on (RFC 9110 7.6.1), and Connection: the
 * upstream connection serves this one request. */
static bool hop_by_hop(const char *line, size_t len)
{
    static const char *const names[] = { "proxy-connection:", "proxy-authorization:", "connection:",
                                         "keep-alive:", "te:", "upgrade:" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t n = strlen(names[i]);
        if (len >= n && strncasecmp(line, names[i], n) == 0)
            return true;
    }
    return false;
}

/* A plain-HTTP request's Host header must name the host (and port) it is
 * sent to: a server that serves many names would otherwise answer for the
 * one in Host, not the allowed one the request went to (domain fronting).
 * 0: it does, or there is none (*has tells); -1: reason says what it names. */
static int check_host_header(const char *head, const char *end, const char *host, int port, bool *has, char *reason,
                             size_t reason_len)
{
    *has = false;
    const char *line = strstr(head, "\r\n");
    for (line = line ? line + 2 : end; line < end;) {
        const char *eol = strstr(line, "\r\n");
        if (!eol || eol == line)
            break;
        if (eol - line >= 5 && strncasecmp(line, "host:", 5) == 0) {
            const char *v = line + 5, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            const char *hs = v, *he = ve, *colon = NULL;
            if (v < ve && *v == '[') { /* [v6]:port */
                const char *close = memchr(v, ']', (size_t) (ve - v));
                hs = v + 1;
                he = close ? close : ve;
                colon = close && close + 1 < ve && close[1] == ':' ? close + 1 : NULL;
            } else {
                colon = memrchr(v, ':', (size_t) (ve - v));
                he = colon ? colon : ve;
            }
            char name[256], shown[300];
            long hport = 80;
            if (colon) {
                char *pe;
                char digits[8];
                snprintf(digits, sizeof digits, "%.*s", (int) (ve - colon - 1), colon + 1);
                hport = strtol(digits, &pe, 10);
                if (!digits[0] || *pe || ve - colon - 1 > 5)
                    hport = -1;
            }
            if (*has || !sbx_net_host_normalize(hs, (size_t) (he - hs), name, sizeof name) || hport != port ||
                strcmp(name, host) != 0) {
                printable_n(v, (size_t) (ve - v), shown, sizeof shown);
                snprintf(reason, reason_len, "%s: the Host header must name the host the request goes to",
                         *has ? "more than one Host header" : shown);
                return -1;
            }
            *has = true;
        }
        line = eol + 2;
    }
    return 0;
}

static void serve_http(conn *c)
{
    char *buf = malloc(HEAD_MAX + 1);
    size_t len = 0;
    struct head h = { .url_len = 0 };
    http_parser p;
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &h;
    http_parser_settings s = { 0 };
    s.on_url = on_url;
    s.on_headers_complete = on_headers_complete;
    int64_t deadline = mono_ms() + HEAD_TIMEOUT_MS;
    size_t parsed = 0;
    char *end_of_head = NULL;
    while (buf && !h.done) {
        if (len == HEAD_MAX) {
            http_reply(c->fd, 431, "Request Header Fields Too Large", "sbx: proxy request head over 64 KiB");
            goto out;
        }
        ssize_t n = read_by(c->fd, buf + len, HEAD_MAX - len, deadline);
        if (n <= 0)
            goto out;
        size_t got = http_parser_execute(&p, &s, buf + len, (size_t) n);
        len += (size_t) n;
        parsed += got;
        if (!h.done && HTTP_PARSER_ERRNO(&p) != HPE_OK) {
            http_reply(c->fd, 400, "Bad Request", "sbx: not an HTTP proxy request");
            goto out;
        }
        if (h.done) {
            /* where the parser paused is at or just before the head's last
             * byte: take the blank line itself as the end */
            char *blank = memmem(buf, len, "\r\n\r\n", 4);
            end_of_head = blank ? blank + 4 : buf + parsed;
        }
    }
    if (!buf)
        goto out;
    buf[len] = '\0';
    bool is_connect = p.method == HTTP_CONNECT;
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (h.too_long || http_parser_parse_url(h.url, h.url_len, is_connect, &u) != 0 || !(u.field_set & (1 << UF_HOST))) {
        http_reply(c->fd, 400, "Bad Request",
                   "sbx: the egress proxy takes CONNECT host:port or an absolute http:// URL");
        goto out;
    }
    if (!is_connect && (!(u.field_set & (1 << UF_SCHEMA)) || u.field_data[UF_SCHEMA].len != 4 ||
                        strncasecmp(h.url + u.field_data[UF_SCHEMA].off, "http", 4) != 0)) {
        http_reply(c->fd, 400, "Bad Request", "sbx: plain proxying is for http:// URLs; use CONNECT for https");
        goto out;
    }
    const char *proto = is_connect ? "http-connect" : "http";
    int port = u.field_set & (1 << UF_PORT) ? u.port : 80;
    char host[256], addr[INET6_ADDRSTRLEN] = "", reason[512], msg[1024];
    bool denied = true, has_host = false;
    int up = -1;
    if (!sbx_net_host_normalize(h.url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, host, sizeof host)) {
        printable_n(h.url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, host, sizeof host);
        snprintf(reason, sizeof reason, "not a valid host name");
    } else if (!is_connect &&
               check_host_header(buf, end_of_head, host, port, &has_host, reason, sizeof reason) < 0) {
        /* denied: reason says which Host */
    } else {
        up = dial(c, host, port, addr, sizeof addr, &denied, reason, sizeof reason);
    }
    if (up < 0) {
        enum verdict v = denied ? DENIED : FAILED;
        explain(msg, sizeof msg, host, port, v, reason);
        http_reply(c->fd, denied ? 403 : 502, denied ? "Forbidden" : "Bad Gateway", msg);
        event(c, proto, host, addr, port, v, reason, 0, 0);
        goto out;
    }
    uint64_t bytes_up = 0, bytes_down = 0;
    if (is_connect) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        write_all(c->fd, ok, sizeof ok - 1);
        size_t extra = len - (size_t) (end_of_head - buf);
        if (extra && write_all(up, end_of_head, extra) == 0)
            bytes_up += extra;
    } else {
        /* origin form: the path and query of the absolute URL */
        char *req = NULL;
        size_t rl = 0;
        FILE *f = open_memstream(&req, &rl);
        const char *path = u.field_set & (1 << UF_PATH) ? h.url + u.field_data[UF_PATH].off : "/";
        size_t plen = u.field_set & (1 << UF_PATH) ? h.url_len - u.field_data[UF_PATH].off : 1;
        if (u.field_set & (1 << UF_FRAGMENT))
            plen = u.field_data[UF_FRAGMENT].off - 1 - u.field_data[UF_PATH].off;
        fprintf(f, "%s %.*s HTTP/%d.%d\r\n", http_method_str(p.method), (int) plen, path, p.http_major, p.http_minor);
        /* the header lines as they came, but the hop-by-hop ones */
        char *line = strstr(buf, "\r\n");
        line = line ? line + 2 : end_of_head;
        while (line < end_of_head) {
            char *eol = strstr(line, "\r\n");
            if (!eol || eol == line)
                break;
            if (!hop_by_hop(line, (size_t) (eol - line)))
                fprintf(f, "%.*s\r\n", (int) (eol - line), line);
            line = eol + 2;
        }
        if (!has_host) /* HTTP/1.0 may leave it out; the server is told which host was asked for */
            fprintf(f, "Host: %s%s%s:%d\r\n", strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
                    port);
        fprintf(f, "Connection: close\r\n\r\n");
        fclose(f);
        size_t extra = len - (size_t) (end_of_head - buf);
        if (write_all(up, req, rl) == 0 && (!extra || write_all(up, end_of_head, extra) == 0))
            bytes_up += rl + extra;
        free(req);
    }
    sbx_relay(c->fd, up, &bytes_up, &bytes_down);
    close(up);
    event(c, proto, host, addr, port, ALLOWED, NULL, bytes_up, bytes_down);
out:
    free(buf);
}

static void serve_socks(conn *c)
{
    int64_t deadline = mono_ms() + HEAD_TIMEOUT_MS;
    unsigned char b[600];
    /* greeting: VER NMETHODS METHODS.  We take "no authentication" (0), and
     * only from a client that offered it: else "no acceptable method" */
    for (size_t got = 0; got < 2;) {
        ssize_t n = read_by(c->fd, b + got, 2 - got, deadline);
        if (n <= 0)
            return;
        got += (size_t) n;
    }
    if (b[0] != 5)
        return;
    size_t nm = b[1];
    for (size_t got = 0; got < nm;) {
        ssize_t n = read_by(c->fd, b + 2 + got, nm - got, deadline);
        if (n <= 0)
            return;
        got += (size_t) n;
    }
    if (!memchr(b + 2, 0, nm)) {
        write_all(c->fd, "\x05\xff", 2);
        return;
    }
    write_all(c->fd, "\x05\x00", 2);
    /* request: VER CMD RSV ATYP DST.ADDR DST.PORT */
    size_t have = 0;
    while (have < 5) {
        ssize_t n = read_by(c->fd, b + have, sizeof b - have, deadline);
        if (n <= 0)
            return;
        have += (size_t) n;
    }
    size_t need = b[3] == 1 ? 4 + 4 + 2 : b[3] == 4 ? 4 + 16 + 2 : b[3] == 3 ? 5 + b[4] + 2 : 0;
    if (!need) {
        write_all(c->fd, "\x05\x08\x00\x01\0\0\0\0\0\0", 10); /* address type not supported */
        return;
    }
    while (have < need) {
        ssize_t n = read_by(c->fd, b + have, sizeof b - have, deadline);
        if (n <= 0)
            return;
        have += (size_t) n;
    }
    if (b[1] != 1) {
        write_all(c->fd, "\x05\x07\x00\x01\0\0\0\0\0\0", 10); /* command not supported: CONNECT only */
        return;
    }
    /* a name goes through the same check as an HTTP request's host: no
     * control byte reaches a log, no odd byte a resolver */
    char host[1100], addr[INET6_ADDRSTRLEN] = "", reason[512];
    int port = b[need - 2] << 8 | b[need - 1];
    bool denied = true;
    int up = -1;
    if (b[3] == 1 || b[3] == 4) {
        inet_ntop(b[3] == 1 ? AF_INET : AF_INET6, b + 4, host, sizeof host);
        up = dial(c, host, port, addr, sizeof addr, &denied, reason, sizeof reason);
    } else if (!sbx_net_host_normalize((const char *) b + 5, b[4], host, sizeof host)) {
        printable_n((const char *) b + 5, b[4], host, sizeof host);
        snprintf(reason, sizeof reason, "not a valid host name");
    } else {
        up = dial(c, host, port, addr, sizeof addr, &denied, reason, sizeof reason);
    }
    if (up < 0) {
        /* 2: connection not allowed by ruleset; 5: refused; 4: unreachable.
         * A SOCKS reply has no room for words: the event has them. */
        char rep[10] = { 5, (char) (denied ? 2 : strstr(reason, "refused") ? 5 : 4), 0, 1, 0, 0, 0, 0, 0, 0 };
        write_all(c->fd, rep, sizeof rep);
        event(c, "socks5", host, addr, port, denied ? DENIED : FAILED, reason, 0, 0);
        return;
    }
    write_all(c->fd, "\x05\x00\x00\x01\0\0\0\0\0\0", 10);
    uint64_t bytes_up = 0, bytes_down = 0;
    if (have > need && write_all(up, b + need, have - need) == 0)
        bytes_up += have - need;
    sbx_relay(c->fd, up, &bytes_up, &bytes_down);
    close(up);
    event(c, "socks5", host, addr, port, ALLOWED, NULL, bytes_up, bytes_down);
}

static void *serve(void *arg)
{
    conn *c = arg;
    if (c->kind == 0)
        serve_http(c);
    else
        serve_socks(c);
    close(c->fd);
    pthread_mutex_lock(&lock);
    box_net *b = find_box(c->box);
    if (b && b->active > 0)
        b->active--;
    pthread_mutex_unlock(&lock);
    put_policy(c->policy);
    free(c);
    return NULL;
}

struct log_batch {
    sbx_netopen_conn c[64];
    size_t n;
};

static void keep_entry(void *ctx, const sbx_netopen_conn *c)
{
    struct log_batch *b = ctx;
    if (b->n < sizeof b->c / sizeof *b->c)
        b->c[b->n++] = *c;
}

/* Open mode's connection log, read while the box is known to own fd (as
 * a listener is accepted), turned into events after. */
static void read_log(box_net *owner, int fd)
{
    char id[33] = "", key_id[17] = "";
    struct log_batch *batch = calloc(1, sizeof *batch);
    if (!batch)
        return;
    pthread_mutex_lock(&lock);
    for (box_net *x = boxes; x; x = x->next)
        if (x == owner && x->log_fd == fd) {
            snprintf(id, sizeof id, "%s", x->id);
            snprintf(key_id, sizeof key_id, "%s", x->key_id);
            sbx_netopen_log_read(fd, keep_entry, batch);
        }
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < batch->n; i++) {
        const sbx_netopen_conn *c = &batch->c[i];
        const char *proto = c->proto == 6 ? "tcp" : c->proto == 17 ? "udp" : c->proto == 1 || c->proto == 58 ? "icmp" : "ip";
        net_event(id, key_id, proto, NULL, c->address, c->port, c->allowed ? ALLOWED : DENIED, c->reason, -1, -1);
    }
    free(batch);
}

static void *accept_loop(void *arg)
{
    (void) arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        if (!running) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        /* [0] the wake pipe, [1] the host's addresses, then per box its
         * HTTP and SOCKS5 listeners and its log: 2 + 3k + 0, 1, 2 */
        size_t n = 2;
        for (box_net *b = boxes; b; b = b->next)
            n += 3;
        struct pollfd *pf = calloc(n, sizeof *pf);
        box_net **owner = calloc(n, sizeof *owner);
        pf[0] = (struct pollfd){ wake[0], POLLIN, 0 };
        pf[1] = (struct pollfd){ addr_watch, POLLIN, 0 };
        size_t k = 2;
        for (box_net *b = boxes; b; b = b->next)
            for (int i = 0; i < 3; i++) { /* -1s are not polled */
                pf[k] = (struct pollfd){ i < 2 ? b->fds[i] : b->log_fd, POLLIN, 0 };
                owner[k++] = b;
            }
        pthread_mutex_unlock(&lock);
        poll(pf, n, -1);
        if (pf[0].revents) {
            char drain[64];
            while (read(wake[0], drain, sizeof drain) > 0) {
            }
            free(pf);
            free(owner);
            continue; /* the set changed: a closed listener must not be polled again */
        }
        if (pf[1].revents)
            addresses_changed();
        for (size_t i = 2; i < n; i++) {
            if (!(pf[i].revents & POLLIN))
                continue;
            if ((i - 2) % 3 == 2) { /* a log */
                read_log(owner[i], pf[i].fd);
                continue;
            }
            pthread_mutex_lock(&lock);
            box_net *b = NULL;
            for (box_net *x = boxes; x; x = x->next) /* still there, with this very listener? */
                if (x == owner[i] && (x->fds[0] == pf[i].fd || x->fds[1] == pf[i].fd))
                    b = x;
            int fd = b ? accept4(pf[i].fd, NULL, NULL, SOCK_CLOEXEC) : -1;
            if (fd >= 0 && b->active >= MAX_CONNS_PER_BOX) {
                close(fd); /* the sandbox holds enough of sbxd already */
                fd = -1;
            }
            conn *c = fd >= 0 ? calloc(1, sizeof *c) : NULL;
            if (c) {
                c->fd = fd;
                c->kind = pf[i].fd == b->fds[1];
                snprintf(c->box, sizeof c->box, "%s", b->id);
                snprintf(c->key_id, sizeof c->key_id, "%s", b->key_id);
                c->policy = b->policy;
                b->policy->refs++;
                b->active++;
            }
            pthread_mutex_unlock(&lock);
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            pthread_attr_setstacksize(&attr, 256 * 1024);
            if (fd < 0) {
                /* nothing accepted */
            } else if (!c || pthread_create(&t, &attr, serve, c) != 0) {
                close(fd);
                if (c) {
                    pthread_mutex_lock(&lock);
                    box_net *x = find_box(c->box);
                    if (x && x->active > 0)
                        x->active--;
                    pthread_mutex_unlock(&lock);
                    put_policy(c->policy);
                    free(c);
                }
            }
            pthread_attr_destroy(&attr);
        }
        free(pf);
        free(owner);
    }
}

int sbx_egress_start(sbx_store *store, sbx_error *err)
{
    store_ = store;
    const char *th = getenv("SBX_TEST_EGRESS_HOSTS");
    if (th && *th) {
        test_hosts = strdup(th);
        char shown[1024];
        sbx_log("warn", "event=test_setting_active name=SBX_TEST_EGRESS_HOSTS value=\"%s\" "
                        "message=\"TEST ONLY: the egress proxy takes these names to these addresses, and treats "
                        "the addresses given without '@' as public; never set this in production\"",
                printable(th, shown, sizeof shown));
    }
    const char *tl = getenv("SBX_TEST_OPEN_HOST_LOOPBACK");
    if (tl && strcmp(tl, "1") == 0)
        sbx_log("warn", "event=test_setting_active name=SBX_TEST_OPEN_HOST_LOOPBACK value=1 "
                        "message=\"TEST ONLY: sandboxes in network mode open can reach this host's loopback (and "
                        "sbxd's API) at 10.0.2.2 once a CIDR allows it; never set this in production\"");
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) < 0)
        return sbx_error_set(err, errno, "pipe");
    sbx_error werr = { 0 };
    addr_watch = sbx_netopen_addr_watch(&werr);
    if (addr_watch < 0) /* open sandboxes then keep the host's addresses of their last table */
        sbx_log("warn", "event=host_addresses_unwatched error=\"%s\"", werr.msg);
    running = true;
    if (pthread_create(&acceptor, NULL, accept_loop, NULL) != 0) {
        running = false;
        return sbx_error_set(err, EAGAIN, "start the egress proxy");
    }
    return 0;
}

void sbx_egress_stop(void)
{
    pthread_mutex_lock(&lock);
    bool was = running;
    running = false;
    pthread_mutex_unlock(&lock);
    if (!was)
        return;
    poke();
    pthread_join(acceptor, NULL);
    pthread_mutex_lock(&lock);
    box_net *all = boxes;
    boxes = NULL;
    pthread_mutex_unlock(&lock);
    while (all) { /* listeners closed, slirp4netns ended: nothing gets out without sbxd */
        box_net *b = all;
        all = b->next;
        teardown(b, 0);
    }
    if (addr_watch >= 0)
        close(addr_watch);
    addr_watch = -1;
}
