/* spawn.h - start one command inside the sandbox, as the requested user. */
#ifndef SBX_INIT_SPAWN_H
#define SBX_INIT_SPAWN_H

#include <sys/types.h>
#include "../lib/control.h"

/* Fork and exec req.  The child (in sbx-init's cgroup at fork time, see
 * init.c) gets a cgroup namespace rooted there, drops every privilege
 * (caps.c), closes all fds above 2, installs the seccomp filter and execs.  Returns the child's
 * pid, or -errno if it could not be started, with *stage saying where:
 * SBX_SPAWN_EXEC with ENOENT is "command not found", with EACCES "not
 * executable"; SBX_SPAWN_CWD is the working directory. */
enum { SBX_SPAWN_SETUP = 1, SBX_SPAWN_CWD = 2, SBX_SPAWN_EXEC = 3 };
pid_t sbx_spawn(const sbx_exec_req *req, int *stage);

#endif
