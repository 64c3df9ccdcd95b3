/* netopen.h - network mode "open" (netopen.c): slirp4netns for the way
 * out, an nftables table in the sandbox's namespace for the deny list. */
#ifndef SBX_DAEMON_NETOPEN_H
#define SBX_DAEMON_NETOPEN_H

#include <stdbool.h>
#include <sys/types.h>

#include "../lib/error.h"
#include "egress.h"

/* Install (or replace) the rules of policy p in the network namespace of
 * process pid (the host's own addresses among them, as they are now), then, unless *slirp_pid is already > 0, start slirp4netns
 * for it: *slirp_pid and *exit_fd (closing it ends slirp4netns). */
int sbx_netopen_start(pid_t pid, const sbx_net_policy *p, pid_t *slirp_pid, int *exit_fd, sbx_error *err);

/* End slirp4netns (and reap it), remove the rules (pid 0: the sandbox is
 * gone, and its rules with its namespace). */
void sbx_netopen_stop(pid_t pid, pid_t slirp_pid, int exit_fd);

/* A connection the kernel let out, or a packet it rejected, as its log
 * says: proto is the IP protocol number (6 tcp, 17 udp), port 0 without
 * one; reason is empty for an allowed one. */
typedef struct sbx_netopen_conn {
    int proto;
    char address[64];
    int port;
    bool allowed;
    char reason[200];
} sbx_netopen_conn;

/* The host's addresses change (DHCP, a VPN, an interface up): a netlink
 * socket of the calling thread's namespace told of every address added or
 * removed (non-blocking, close-on-exec), or -1 with err; and whether what
 * it has now says the addresses changed (it is drained). */
int sbx_netopen_addr_watch(sbx_error *err);
bool sbx_netopen_addr_changed(int fd);

/* A socket reading the log of process pid's network namespace
 * (non-blocking, close-on-exec), or -1 with err. */
int sbx_netopen_log_open(pid_t pid, sbx_error *err);
/* What the log has now, each entry handed to on. */
void sbx_netopen_log_read(int fd, void (*on)(void *ctx, const sbx_netopen_conn *c), void *ctx);

#endif
