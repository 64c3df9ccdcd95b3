/* sandbox.h - create a sandbox from a spec, and tear it down.
 *
 * sbx_sandbox_start() is the whole isolation core in order:
 *   1. clone() into new user, pid, mount, net, ipc and uts namespaces
 *   2. parent: uid/gid maps (userns.c); the child waits for them, then
 *      unshares the cgroup namespace, builds and enters the root file
 *      system (mount.c), sets the hostname, brings up loopback (netdev.c),
 *      and execs sbx-init
 *   3. parent, meanwhile: cgroups <own>/sbx-<id>/{init,work} with the
 *      limits (cgroup.c); moves the child into `work`; hands sbx-init the
 *      `init` cgroup over the control socket
 *   4. the caller sends the command (an EXEC frame); sbx-init starts it
 * Steps 2 and 3 overlap: on a 2-core machine that hides the cgroup set-up
 * (the slowest part on cgroup v1) behind the mounts.
 * The child reports any setup failure on the control socket, so the caller
 * sees one clear error instead of a dead process. */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <stdbool.h>
#include <sys/types.h>

#include "cgroup.h"
#include "reaper.h"
#include "error.h"
#include "spec.h"
#include "template.h"

typedef struct sbx_sandbox {
    pid_t init_pid;  /* host pid of sbx-init; 0 once reaped */
    int ctl_fd;      /* our end of the control socket */
    sbx_reaper reaper; /* cleanup watcher, when asked for (fd -1 if none) */
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

/* The same search for any of sbx's programs: $ENV_VAR, else next to this
 * executable, else <prefix>/libexec/sbx/NAME. */
int sbx_find_companion(const char *name, const char *env_var, char *out, size_t len, sbx_error *err);

/* With `watch`, a cleanup watcher (reaper.c) removes the cgroups even if
 * the caller is SIGKILLed: for short-lived callers such as `sbx run`. */
int sbx_sandbox_start(sbx_sandbox *sb, const sbx_spec *spec, const sbx_template *tpl, const sbx_cg_host *host,
                      const char *init_path, bool watch, sbx_error *err);

/* Kill whatever still runs, reap sbx-init, remove the cgroups. */
int sbx_sandbox_destroy(sbx_sandbox *sb, sbx_error *err);

#endif
