/* reaper.h - leave nothing behind even if `sbx run` is SIGKILLed.
 *
 * SIGKILL gives a process no chance to clean up.  The sandbox itself dies
 * with it (sbx-init has PR_SET_PDEATHSIG), and its mounts die with its mount
 * namespace, but its cgroup directories would stay.  So before creating the
 * sandbox, `sbx run` forks this small watcher.  It holds the read end of a
 * pipe: a clean exit writes "done" first and the watcher just leaves; EOF
 * without it means the parent died, and the watcher kills what is left and
 * removes the cgroups.  It detaches from the terminal and from stdio so it
 * never holds a caller's pipe open. */
#ifndef SBX_REAPER_H
#define SBX_REAPER_H

#include <sys/types.h>
#include "cgroup.h"
#include "error.h"

/* Returns the pipe's write end (close-on-exec), or -1 with err. */
int sbx_reaper_start(const sbx_cgroup *cg, sbx_error *err);
/* Tell the watcher the sandbox's init pid (so it can kill it first). */
void sbx_reaper_set_pid(int fd, pid_t init_pid);
/* Clean shutdown: the caller removed everything itself. */
void sbx_reaper_done(int fd);

#endif
