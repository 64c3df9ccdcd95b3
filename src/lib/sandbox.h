/* sandbox.h - create a sandbox from a spec, and tear it down.
 *
 * sbx_sandbox_start() is the whole isolation core in order:
 *   1. cgroups: <own>/sbx-<id>/{init,work} with the limits (cgroup.c)
 *   2. clone() into new user, pid, mount, net, ipc and uts namespaces
 *   3. parent: uid/gid maps (userns.c); child waits for them
 *   4. child: joins its cgroup, unshares the cgroup namespace, builds and
 *      enters the root file system (mount.c), sets the hostname, brings up
 *      loopback (netdev.c), and execs sbx-init
 *   5. parent: sends the command to sbx-init over the control socket
 * The child reports any setup failure on the control socket, so the caller
 * sees one clear error instead of a dead process. */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <stdbool.h>
#include <sys/types.h>

#include "cgroup.h"
#include "error.h"
#include "spec.h"
#include "template.h"

typedef struct sbx_sandbox {
    pid_t init_pid;  /* host pid of sbx-init; 0 once reaped */
    int ctl_fd;      /* our end of the control socket */
    int reaper_fd;   /* cleanup watcher (reaper.c), -1 if none */
    sbx_cgroup cg;
} sbx_sandbox;

typedef struct sbx_exit {
    int exit_code; /* valid when signal == 0 */
    int signal;    /* the signal that killed the command, or 0 */
    int exec_errno;/* non-zero if the command could not be started */
    char message[256];
} sbx_exit;

/* Where sbx-init lives on the host: $SBX_INIT, else next to this
 * executable, else <prefix>/libexec/sbx/sbx-init. */
int sbx_find_init(char *out, size_t len, sbx_error *err);

/* With `watch`, a cleanup watcher (reaper.c) removes the cgroups even if
 * the caller is SIGKILLed: for short-lived callers such as `sbx run`. */
int sbx_sandbox_start(sbx_sandbox *sb, const sbx_spec *spec, const sbx_template *tpl, const sbx_cg_host *host,
                      const char *init_path, bool watch, sbx_error *err);

/* Kill whatever still runs, reap sbx-init, remove the cgroups. */
int sbx_sandbox_destroy(sbx_sandbox *sb, sbx_error *err);

#endif
