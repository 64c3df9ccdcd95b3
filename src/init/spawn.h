/* spawn.h - start one command inside the sandbox, as the requested user. */
#ifndef SBX_INIT_SPAWN_H
#define SBX_INIT_SPAWN_H

#include <stddef.h>
#include <sys/types.h>
#include "../lib/control.h"

/* Fork and exec req.  The child (in sbx-init's cgroup at fork time, see
 * init.c) gets a cgroup namespace rooted there, drops every privilege
 * (caps.c), closes all fds above 2, installs the seccomp filter and execs.  Returns the child's
 * pid, or -errno if it could not be started, with *stage saying where:
 * SBX_SPAWN_EXEC with ENOENT is "command not found", with EACCES "not
 * executable"; SBX_SPAWN_CWD is the working directory. */
/* `stdio` (may be NULL) gives descriptors for fds 0-2 (-1: keep ours);
 * `clone_flags` adds to CLONE_VM|CLONE_VFORK, e.g. CLONE_PARENT for the
 * daemon-mode spawner (zygote.c), whose commands are sbx-init's children
 * and share its cgroup namespace. */
enum { SBX_SPAWN_SETUP = 1, SBX_SPAWN_CWD = 2, SBX_SPAWN_EXEC = 3 };
pid_t sbx_spawn(const sbx_exec_req *req, const int stdio[3], unsigned long clone_flags, int *stage);

/* The message a user sees for a failed start ("X: command not found"). */
void sbx_spawn_message(int e, int stage, const char *argv0, const char *cwd, char *msg, size_t len);

#endif
