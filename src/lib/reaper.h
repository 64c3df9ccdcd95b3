/* reaper.h - leave nothing behind even if `sbx run` is SIGKILLed.
 *
 * SIGKILL gives a process no chance to clean up.  The sandbox itself dies
 * with it (its first process has PR_SET_PDEATHSIG), and its mounts die with
 * its mount namespace, but its cgroup directories would stay.  So `sbx run`
 * starts this small watcher first.  It holds the read end of a pipe: a
 * clean exit writes "done" and the watcher just leaves; EOF without it
 * means the parent died, and the watcher kills what is left and removes the
 * cgroups it was told about.
 *
 * The watcher is a CLONE_VM child: no page tables are copied, which makes it
 * ~20x cheaper to start than fork() on small VMs.  The price is discipline:
 * it shares memory with the parent, so it touches only its own state block
 * (below) and makes raw system calls, no malloc, no stdio. */
#ifndef SBX_REAPER_H
#define SBX_REAPER_H

#include <limits.h>
#include <sys/types.h>
#include "error.h"

#define SBX_REAPER_MAX_DIRS 12

typedef struct sbx_reaper {
    int fd;                   /* write end of the pipe; -1 when stopped */
    struct sbx_reaper_state *state;
} sbx_reaper;

int sbx_reaper_start(sbx_reaper *r, sbx_error *err);
/* Record what to clean up.  Call before creating each directory (children
 * after parents: removal goes in reverse order) and once the pid is known. */
void sbx_reaper_add_dir(sbx_reaper *r, const char *dir);
void sbx_reaper_set_pid(sbx_reaper *r, pid_t init_pid);
/* Clean shutdown: the caller removed everything itself. */
void sbx_reaper_done(sbx_reaper *r);

#endif
