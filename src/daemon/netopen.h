/* netopen.h - network mode "open" (netopen.c): slirp4netns for the way
 * out, an nftables table in the sandbox's namespace for the deny list. */
#ifndef SBX_DAEMON_NETOPEN_H
#define SBX_DAEMON_NETOPEN_H

#include <sys/types.h>

#include "../lib/error.h"
#include "egress.h"

/* Install (or replace) the rules of policy p in the network namespace of
 * process pid, then, unless *slirp_pid is already > 0, start slirp4netns
 * for it: *slirp_pid and *exit_fd (closing it ends slirp4netns). */
int sbx_netopen_start(pid_t pid, const sbx_net_policy *p, pid_t *slirp_pid, int *exit_fd, sbx_error *err);

/* End slirp4netns (and reap it), remove the rules (pid 0: the sandbox is
 * gone, and its rules with its namespace). */
void sbx_netopen_stop(pid_t pid, pid_t slirp_pid, int exit_fd);

#endif
