/* netopen.c - network mode "open": the internet through a user-space
 * network stack, the deny list enforced in the sandbox's own kernel
 * namespace.
 *
 * slirp4netns (Debian's) gives the sandbox's network namespace a tap
 * device (10.0.2.100/24, gateway 10.0.2.2, DNS 10.0.2.3) and makes its
 * connections from sbxd's namespace as ordinary sockets of an
 * unprivileged-looking process: no veth, no NAT rules, no routes on the
 * host.  --disable-host-loopback keeps 10.0.2.2 from reaching the host's
 * 127.0.0.1; --enable-sandbox drops its capabilities.  It runs until sbxd
 * closes its --exit-fd: when the sandbox ends, its policy changes, or sbxd
 * dies (fail closed: a restarted sbxd starts a new one).
 *
 * Before slirp4netns starts, sbxd installs an nftables table in the
 * sandbox's namespace (libnftables, from a thread that entered it): the
 * policy's deny CIDRs, then its allow CIDRs, then every private,
 * loopback, link-local, reserved range (egress.c's list) are rejected
 * with "administratively prohibited", which a connect() reports at once.
 * The sandbox's processes have no CAP_NET_ADMIN: they cannot change it.
 * The host's own addresses are rejected too, before the ranges:
 * slirp4netns connects from the host, so a connection to the host's public
 * address would reach the host's services; they are read when the table is
 * made, and egress.c makes it again when the host's addresses change.
 * Domain rules need names, which only the proxy sees: open mode takes
 * CIDR rules only.
 *
 * No proxy sees open mode's connections, so the kernel reports them: each
 * new connection that is let out, and each packet that is rejected, is
 * logged to NFLOG group LOG_GROUP of the sandbox's namespace with a prefix
 * that says the verdict and the rule ("allow", "deny 10.0.0.0/8",
 * "range 169.254.0.0/16").  sbxd reads them from a netlink socket it made
 * in that namespace (sbx_netopen_log_open) and turns them into the
 * sandbox's `net` events.  Logging is rate-limited per rule so that a
 * flood of rejected packets cannot flood sbxd; bytes are not counted
 * (that would take conntrack accounting). */
#define _GNU_SOURCE
#include "netopen.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct nft_args {
    const char *ruleset;
    int err;
    char msg[512];
};

/* In the sandbox's namespace (sbx_netns_run): libnftables talks netlink
 * from the calling thread's namespace. */
static void nft_in_netns(void *arg)
{
    struct nft_args *a = arg;
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft) {
        a->err = ENOMEM;
        snprintf(a->msg, sizeof a->msg, "nftables context");
        return;
    }
    nft_ctx_buffer_error(nft);
    if (nft_run_cmd_from_buffer(nft, a->ruleset) != 0) {
        a->err = EINVAL;
        const char *e = nft_ctx_get_error_buffer(nft);
        snprintf(a->msg, sizeof a->msg, "nftables: %s", e && *e ? e : "failed");
        a->msg[strcspn(a->msg, "\n")] = '\0';
    }
    nft_ctx_free(nft);
}

static int run_nft(pid_t pid, const char *ruleset, sbx_error *err)
{
    struct nft_args a = { .ruleset = ruleset };
    int e = sbx_netns_run(pid, nft_in_netns, &a);
    if (e)
        return sbx_error_set(err, e, "enter the sandbox's network namespace");
    return a.err ? sbx_error_set(err, 0, "%s", a.msg) : 0;
}

#define LOG_GROUP 7
#define LOG_RATE "limit rate 20/second burst 50 packets"

/* A rule for cidr: logged (rate-limited, so in a rule of its own that
 * does not decide), then the verdict. */
static void rule(FILE *f, const char *cidr, const char *verdict, const char *why)
{
    const char *fam = strchr(cidr, ':') ? "ip6" : "ip";
    bool accept = strcmp(verdict, "accept") == 0;
    fprintf(f, "    %s daddr %s %s%s log group %d prefix \"%s %s\"\n", fam, cidr, accept ? "ct state new " : "",
            LOG_RATE, LOG_GROUP, why, cidr);
    fprintf(f, "    %s daddr %s %s\n", fam, cidr, verdict);
}

/* The table for policy p, replacing any earlier one in one transaction. */
static char *ruleset(const sbx_net_policy *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    static const char reject[] = "reject with icmpx type admin-prohibited";
    fprintf(f, "table inet sbx\ndelete table inet sbx\ntable inet sbx {\n  chain out {\n"
               "    type filter hook output priority 0; policy accept;\n"
               "    oifname \"lo\" accept\n"
               "    ip daddr 10.0.2.3 meta l4proto { tcp, udp } th dport 53 accept\n"
               /* link-scoped multicast (the kernel's neighbour discovery and
                * MLD for eth0) never leaves the link to slirp4netns, and is
                * no egress of the sandbox's to report */
               "    ip6 daddr ff02::/16 accept\n");
    size_t n;
    const char *const *deny = sbx_net_policy_cidrs(p, false, &n);
    for (size_t i = 0; i < n; i++)
        rule(f, deny[i], reject, "deny");
    const char *const *allow = sbx_net_policy_cidrs(p, true, &n);
    for (size_t i = 0; i < n; i++)
        rule(f, allow[i], "accept", "allow");
    /* the host's own addresses: slirp4netns connects from the host, so a
     * connection to one of them reaches the host's services (sbxd's API
     * among them) whatever range it is in */
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        char seen[64][INET6_ADDRSTRLEN];
        size_t nseen = 0;
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
                continue;
            char a[INET6_ADDRSTRLEN];
            const void *bytes = i->ifa_addr->sa_family == AF_INET
                                    ? (const void *) &((struct sockaddr_in *) i->ifa_addr)->sin_addr
                                    : (const void *) &((struct sockaddr_in6 *) i->ifa_addr)->sin6_addr;
            inet_ntop(i->ifa_addr->sa_family, bytes, a, sizeof a);
            bool dup = false;
            for (size_t k = 0; k < nseen && !dup; k++)
                dup = strcmp(seen[k], a) == 0;
            if (dup || nseen == sizeof seen / sizeof *seen)
                continue; /* (more than 64: the private and loopback ones are in the ranges below anyway) */
            snprintf(seen[nseen++], sizeof seen[0], "%s", a);
            rule(f, a, reject, "host");
        }
        freeifaddrs(ifs);
    }
    const char *const *special = sbx_net_special_ranges(&n);
    for (size_t i = 0; i < n; i++)
        rule(f, special[i], reject, "range");
    /* what is left goes out (the policy): its new connections logged */
    fprintf(f, "    ct state new %s log group %d prefix \"allow\"\n  }\n}\n", LOG_RATE, LOG_GROUP);
    fclose(f);
    return text;
}

int sbx_netopen_start(pid_t pid, const sbx_net_policy *p, pid_t *slirp_pid, int *exit_fd, sbx_error *err)
{
    char *rs = ruleset(p);
    if (!rs)
        return sbx_error_set(err, ENOMEM, "nftables rules");
    int r = run_nft(pid, rs, err);
    free(rs);
    if (r < 0)
        return sbx_error_wrap(err, "the sandbox's firewall");
    if (*slirp_pid > 0)
        return 0; /* a new policy for a network that is up */
    int ex[2], ready[2];
    if (pipe2(ex, O_CLOEXEC) < 0)
        return sbx_error_set(err, errno, "pipe");
    if (pipe2(ready, O_CLOEXEC) < 0) {
        close(ex[0]);
        close(ex[1]);
        return sbx_error_set(err, errno, "pipe");
    }
    char target[16], exit_arg[32], ready_arg[32];
    snprintf(target, sizeof target, "%d", (int) pid);
    snprintf(exit_arg, sizeof exit_arg, "--exit-fd=3");
    snprintf(ready_arg, sizeof ready_arg, "--ready-fd=4");
    char *const argv[] = { "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                           "--enable-sandbox", exit_arg, ready_arg, target, "eth0", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ex[0], 3);
    posix_spawn_file_actions_adddup2(&fa, ready[1], 4);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0); /* it chats about tap fds */
    /* a test may let slirp4netns reach the host's loopback (10.0.2.2):
     * the only way a test can see traffic go through without leaving the
     * machine */
    char *const *args = argv;
    char *test_argv[] = { "slirp4netns", "--configure", "--mtu=65520", "--enable-sandbox", exit_arg, ready_arg,
                          target, "eth0", NULL };
    const char *t = getenv("SBX_TEST_OPEN_HOST_LOOPBACK");
    if (t && strcmp(t, "1") == 0)
        args = test_argv;
    pid_t child;
    int e = posix_spawnp(&child, "slirp4netns", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(ex[0]);
    close(ready[1]);
    if (e) {
        close(ex[1]);
        close(ready[0]);
        return sbx_error_set(err, e, "run slirp4netns (Debian package slirp4netns)");
    }
    /* it writes "1" once the interface is up */
    struct pollfd pf = { ready[0], POLLIN, 0 };
    char c = 0;
    bool ok = poll(&pf, 1, 10000) == 1 && read(ready[0], &c, 1) == 1 && c == '1';
    close(ready[0]);
    if (!ok) {
        close(ex[1]);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return sbx_error_set(err, EIO, "slirp4netns did not bring the sandbox's network up");
    }
    *slirp_pid = child;
    *exit_fd = ex[1];
    return 0;
}

void sbx_netopen_stop(pid_t pid, pid_t slirp_pid, int exit_fd)
{
    if (exit_fd >= 0)
        close(exit_fd); /* slirp4netns ends on it */
    if (slirp_pid > 0) {
        for (int i = 0; i < 200; i++) { /* 2 s, then no more patience */
            if (waitpid(slirp_pid, NULL, WNOHANG) != 0)
                break;
            if (i == 199) {
                kill(slirp_pid, SIGKILL);
                waitpid(slirp_pid, NULL, 0);
            }
            usleep(10000);
        }
    }
    if (pid > 0) {
        sbx_error ignored = { 0 };
        run_nft(pid, "table inet sbx\ndelete table inet sbx\n", &ignored); /* gone with its netns otherwise */
    }
}

/* ---- the host's addresses: rtnetlink (libmnl) ------------------------------ */

int sbx_netopen_addr_watch(sbx_error *err)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (!nl || mnl_socket_bind(nl, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        if (nl)
            mnl_socket_close(nl);
        return sbx_error_set(err, e, "watch the host's addresses (rtnetlink)");
    }
    int fd = fcntl(mnl_socket_get_fd(nl), F_DUPFD_CLOEXEC, 0);
    int e = errno;
    mnl_socket_close(nl);
    return fd < 0 ? sbx_error_set(err, e, "dup") : fd;
}

static int on_addr_msg(const struct nlmsghdr *h, void *data)
{
    if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR)
        *(bool *) data = true;
    return MNL_CB_OK;
}

bool sbx_netopen_addr_changed(int fd)
{
    char buf[8192];
    bool changed = false;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == ENOBUFS) { /* messages lost: assume the worst */
            changed = true;
            continue;
        }
        if (n <= 0)
            return changed;
        mnl_cb_run(buf, (size_t) n, 0, 0, on_addr_msg, &changed);
    }
}

/* ---- the log: NFLOG over netlink (libmnl) --------------------------------- */

struct log_open {
    int fd;
    int err;
};

/* One NFULNL_MSG_CONFIG request for LOG_GROUP, acknowledged. */
static int log_config(struct mnl_socket *nl, void (*put)(struct nlmsghdr *))
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
    h->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    h->nlmsg_seq = 1;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(h, sizeof *g);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(LOG_GROUP);
    put(h);
    if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0)
        return -1;
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
    return n < 0 ? -1 : mnl_cb_run(buf, (size_t) n, 1, mnl_socket_get_portid(nl), NULL, NULL) < 0 ? -1 : 0;
}

static void put_bind(struct nlmsghdr *h)
{
    struct nfulnl_msg_config_cmd cmd = { .command = NFULNL_CFG_CMD_BIND };
    mnl_attr_put(h, NFULA_CFG_CMD, sizeof cmd, &cmd);
}

static void put_mode(struct nlmsghdr *h)
{
    /* the IP and transport headers are all that is needed */
    struct nfulnl_msg_config_mode mode = { .copy_range = htonl(96), .copy_mode = NFULNL_COPY_PACKET };
    mnl_attr_put(h, NFULA_CFG_MODE, sizeof mode, &mode);
}

/* In the sandbox's namespace: a netlink socket belongs to the namespace it
 * is made in, whoever reads it later. */
static void log_open_in_netns(void *arg)
{
    struct log_open *a = arg;
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 || log_config(nl, put_bind) < 0 ||
        log_config(nl, put_mode) < 0) {
        a->err = errno ? errno : EIO;
        if (nl)
            mnl_socket_close(nl);
        return;
    }
    /* keep the fd, drop the wrapper (a malloc'd struct around it) */
    a->fd = dup(mnl_socket_get_fd(nl));
    if (a->fd < 0)
        a->err = errno;
    else
        fcntl(a->fd, F_SETFL, O_NONBLOCK);
    mnl_socket_close(nl);
    if (a->fd >= 0)
        fcntl(a->fd, F_SETFD, FD_CLOEXEC);
}

int sbx_netopen_log_open(pid_t pid, sbx_error *err)
{
    struct log_open a = { .fd = -1 };
    int e = sbx_netns_run(pid, log_open_in_netns, &a);
    if (e || a.err)
        return sbx_error_set(err, e ? e : a.err, "the sandbox's connection log (NFLOG)");
    return a.fd;
}

struct log_parse {
    void (*on)(void *ctx, const sbx_netopen_conn *c);
    void *ctx;
};

/* The destination of a logged packet: IPv4 or IPv6 (without extension
 * headers: TCP, UDP and ICMP come first on what sandboxes send). */
static bool parse_packet(const uint8_t *p, size_t len, sbx_netopen_conn *c)
{
    size_t l4;
    if (len >= 20 && p[0] >> 4 == 4) {
        l4 = (size_t) (p[0] & 15) * 4;
        c->proto = p[9];
        inet_ntop(AF_INET, p + 16, c->address, sizeof c->address);
    } else if (len >= 40 && p[0] >> 4 == 6) {
        l4 = 40;
        c->proto = p[6];
        inet_ntop(AF_INET6, p + 24, c->address, sizeof c->address);
    } else {
        return false;
    }
    c->port = (c->proto == 6 || c->proto == 17) && len >= l4 + 4 ? (p[l4 + 2] << 8) | p[l4 + 3] : 0;
    return true;
}

static int on_attr(const struct nlattr *a, void *data)
{
    const struct nlattr **tb = data;
    int type = mnl_attr_get_type(a);
    if (type <= NFULA_MAX)
        tb[type] = a;
    return MNL_CB_OK;
}

static int on_msg(const struct nlmsghdr *h, void *data)
{
    struct log_parse *lp = data;
    if ((h->nlmsg_type & 0xff) != NFULNL_MSG_PACKET)
        return MNL_CB_OK;
    const struct nlattr *tb[NFULA_MAX + 1] = { 0 };
    mnl_attr_parse(h, sizeof(struct nfgenmsg), on_attr, tb);
    if (!tb[NFULA_PAYLOAD] || !tb[NFULA_PREFIX])
        return MNL_CB_OK;
    sbx_netopen_conn c = { 0 };
    const char *prefix = mnl_attr_get_str(tb[NFULA_PREFIX]);
    if (!parse_packet(mnl_attr_get_payload(tb[NFULA_PAYLOAD]), mnl_attr_get_payload_len(tb[NFULA_PAYLOAD]), &c))
        return MNL_CB_OK;
    c.allowed = strncmp(prefix, "allow", 5) == 0;
    if (strncmp(prefix, "deny ", 5) == 0)
        snprintf(c.reason, sizeof c.reason, "%s is denied by rule %s", c.address, prefix + 5);
    else if (strncmp(prefix, "host ", 5) == 0)
        snprintf(c.reason, sizeof c.reason, "%s is an address of this host (allow it with a CIDR rule)", c.address);
    else if (strncmp(prefix, "range ", 6) == 0)
        snprintf(c.reason, sizeof c.reason,
                 "%s is in %s: a private, loopback, link-local or reserved range (allow it with a CIDR rule)",
                 c.address, prefix + 6);
    lp->on(lp->ctx, &c);
    return MNL_CB_OK;
}

void sbx_netopen_log_read(int fd, void (*on)(void *ctx, const sbx_netopen_conn *c), void *ctx)
{
    char buf[16384];
    struct log_parse lp = { on, ctx };
    for (int i = 0; i < 64; i++) { /* at most this much at a time: others wait on the same thread */
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0)
            return; /* EAGAIN, or ENOBUFS after an overrun: some events are lost, the log goes on */
        mnl_cb_run(buf, (size_t) n, 0, 0, on_msg, &lp);
    }
}
