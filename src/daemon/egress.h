/* egress.h - network policy and the egress proxy.
 *
 * A sandbox's network namespace has loopback only: no interface, no
 * route out.  In mode "allowlist" its one way out is sbxd's proxy, which
 * listens *inside* the sandbox's namespace - the listening sockets are
 * made by a thread that entered it with setns(), and sockets stay in the
 * namespace they were made in - on 127.0.0.1:3128 (HTTP: CONNECT and
 * plain-HTTP proxying) and 127.0.0.1:1080 (SOCKS5), and connects out from
 * the host's namespace.  Nothing runs in the sandbox for it, and if sbxd
 * is gone, so are the listeners: nothing gets out (fail closed).
 *
 * Every destination is decided at connect time, on the address actually
 * connected to: the proxy resolves names itself, and an address of a
 * private, loopback, link-local (cloud metadata), multicast or reserved
 * range - IPv4-mapped IPv6 and every numeric form of an address included
 * - is denied unless an `allow` CIDR names it.  Deny rules win.  A denial
 * answers in words (HTTP 403 with "sbx: egress to HOST:PORT denied by
 * sandbox network policy (REASON)"; SOCKS5 reply 2, "not allowed by
 * ruleset"), and every attempt is an event of the sandbox (type "net"). */
#ifndef SBX_DAEMON_EGRESS_H
#define SBX_DAEMON_EGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "../lib/error.h"
#include "store.h"

#define SBX_EGRESS_HTTP_PORT 3128
#define SBX_EGRESS_SOCKS_PORT 1080

typedef struct sbx_net_policy sbx_net_policy;

/* Parse {"mode": "none"|"allowlist"|"open", "allow": [...], "deny": [...]}
 * (or the string "none"): 0, or -1 with a message for a 400 in err.
 * "open" (netopen.h) takes CIDR rules only. */
int sbx_net_policy_parse(json_t *j, sbx_net_policy **out, sbx_error *err);
/* Its JSON, as the API shows it. */
json_t *sbx_net_policy_json(const sbx_net_policy *p);
bool sbx_net_policy_is_allowlist(const sbx_net_policy *p);
bool sbx_net_policy_is_open(const sbx_net_policy *p);
/* Its deny (allow false) or allow CIDRs, as written; *n of them. */
const char *const *sbx_net_policy_cidrs(const sbx_net_policy *p, bool allow, size_t *n);
/* The ranges denied unless an allow CIDR names them. */
const char *const *sbx_net_special_ranges(size_t *n);
void sbx_net_policy_free(sbx_net_policy *p);

/* A host name as a client sent it (len bytes, not NUL-terminated), checked
 * and made canonical in out: letters, digits, '-', '_' and '.' (what
 * http_parser takes in a URL's host), labels of 1-63 and at most 253 in
 * all, lowercased, one trailing dot (the DNS root) dropped; or an IPv6
 * literal inet_pton reads.  False: not a host name (nothing of it may
 * reach a resolver or a log). */
bool sbx_net_host_normalize(const char *in, size_t len, char *out, size_t out_len);

/* What the name rules alone say about host (a name, not an address
 * literal), before anything is resolved: a name must not reach DNS (an
 * exfiltration channel) unless its answer could be allowed. */
enum {
    SBX_NAME_DENIED = -1,    /* a deny rule, or no rule could allow it: reason filled */
    SBX_NAME_BY_ADDRESS = 0, /* no domain rule allows it, an allow CIDR might: resolve, judge the address */
    SBX_NAME_ALLOWED = 1,    /* an allow rule names it: resolve, judge the address */
};
int sbx_net_policy_name_verdict(const sbx_net_policy *p, const char *host, char *reason, size_t reason_len);

/* Whether an allow CIDR of p names the address of sa. */
bool sbx_net_policy_cidr_allows(const sbx_net_policy *p, const struct sockaddr *sa);

/* The verdict for `host` (NULL for an address literal) at address
 * `addr` (what a connect would reach); reason filled when denied.
 * mapped: the address comes from SBX_TEST_EGRESS_HOSTS, and stands for a
 * public one (its range is not checked). */
bool sbx_net_policy_allows(const sbx_net_policy *p, const char *host, const struct sockaddr *addr, bool mapped,
                           char *reason, size_t reason_len);

/* The proxy: one thread accepting on every sandbox's listeners, one
 * thread per connection.  SBX_TEST_EGRESS_HOSTS ("name=addr,...") maps
 * names before DNS, for tests that must not leave the machine: such an
 * address stands for a public one ("name=@addr": it is judged as a DNS
 * answer would be). */
int sbx_egress_start(sbx_store *store, sbx_error *err);
void sbx_egress_stop(void);

/* Give sandbox `id` (sbx-init `pid`) listeners with policy p (taken over),
 * or replace the policy of the ones it has; a "none" policy closes them. */
int sbx_egress_set(const char *id, const char *key_id, pid_t pid, sbx_net_policy *p, sbx_error *err);
/* The sandbox ended: close its listeners. */
void sbx_egress_forget(const char *id);

/* Run fn(arg) in a thread that has entered the network namespace of
 * process pid, and wait for it: 0, or the errno of entering.  Sockets made
 * there stay in that namespace; the thread (and its namespace) ends. */
int sbx_netns_run(pid_t pid, void (*fn)(void *), void *arg);

/* A TCP connection to 127.0.0.1:port inside the network namespace of
 * process pid (a sandbox's server, for GET .../ports/PORT/): the fd, or
 * -1 with err (ECONNREFUSED: nothing listens there). */
int sbx_netns_connect(pid_t pid, int port, sbx_error *err);

/* Copy bytes both ways between sockets a and b until both sides are done
 * (splice through a pipe per direction); bytes counted a->b, b->a. */
void sbx_relay(int a, int b, uint64_t *up, uint64_t *down);

/* The environment every command of an allowlist sandbox gets. */
void sbx_egress_envs(json_t *env);

#endif
