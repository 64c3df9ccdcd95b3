/* zygote.h - the daemon-mode spawner.
 *
 * Why it exists: every command must be born in the sandbox's `work`
 * cgroup, under its limits, while sbx-init itself lives in `init`, out of
 * the workload's reach.  Moving each new command into `work` would cost a
 * cgroup migration per command (an RCU grace period per hierarchy on v1,
 * ~3.5 ms), and CLONE_INTO_CGROUP exists only on v2.  So sbx-init keeps
 * one small process in `work`, forked before init left it: the zygote.
 * It starts each command with CLONE_PARENT, so the command is sbx-init's
 * child (reaped, and its exit status seen, by init) but born in `work`.
 *
 * The zygote runs as the sandbox's root, non-dumpable, and only ever reads
 * requests from sbx-init.  User code running as sandbox root can kill it;
 * sbx-init then starts a new one and moves it into `work` with the
 * cgroup.procs fds it was given (a slow migration, but only then). */
#ifndef SBX_INIT_ZYGOTE_H
#define SBX_INIT_ZYGOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct sbx_zygote {
    pid_t pid;
    int sock; /* init's end of the socketpair */
} sbx_zygote;

/* Fork a zygote.  work_procs (-1 terminated, may be NULL): cgroup.procs
 * fds of `work` the new process moves itself into first (NULL when the
 * caller is still in `work`).  `keep` is a descriptor of the caller the
 * child must not close before close_range (none: -1).  Returns 0 or
 * -errno. */
int sbx_zygote_start(sbx_zygote *z, const int *work_procs);

/* Ask the zygote to start the command in `exec_payload` (an EXEC frame's
 * payload) with stdio[0..2].  Returns the pid, or -errno with *stage set
 * (spawn.h); -ETIMEDOUT / -EPIPE when the zygote does not answer, after
 * which it has been killed and the caller should start a new one. */
pid_t sbx_zygote_spawn(sbx_zygote *z, const uint8_t *exec_payload, size_t len, const int stdio[3], int *stage);

/* Kill it (the caller reaps). */
void sbx_zygote_stop(sbx_zygote *z);

#endif
