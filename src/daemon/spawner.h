/* spawner.h - the process that creates sbxd's sandboxes.
 *
 * sbxd is multi-threaded (one thread per HTTP connection); a sandbox is
 * made by clone() and a child that mounts, allocates and execs -- unsafe
 * after fork in a threaded process (another thread may hold the malloc
 * lock).  So sbxd forks this single-threaded helper before starting any
 * thread and asks it for each sandbox over a socketpair.  The sandboxes
 * are its children; it reaps them.  It dies with sbxd, and the sandboxes
 * do not: sbx-init runs in daemon mode and outlives its creator.
 *
 * The helper is a program of its own, sbx-spawner (src/spawner/), small
 * and static like `sbx`, not a fork of sbxd: every sandbox begins as a
 * clone() of it, and cloning sbxd's address space (some 300 mappings of
 * shared libraries, heap) then taking its copy-on-write faults in the
 * child cost about 1 ms of a ~4 ms create on the development VM. */
#ifndef SBX_DAEMON_SPAWNER_H
#define SBX_DAEMON_SPAWNER_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/cgroup.h"
#include "../lib/error.h"
#include "../spawner/protocol.h"

typedef struct sbx_spawner {
    pid_t pid;
    int sock;
    pthread_mutex_t lock;
} sbx_spawner;

/* Start the spawner (fork + exec of sbx-spawner, found next to sbxd or
 * through SBX_SPAWNER).  Call before any thread exists. */
int sbx_spawner_start(sbx_spawner *sp, const char *home, const sbx_cg_host *host, const char *init_path,
                      uid_t uid_base, sbx_error *err);

/* Create a sandbox (thread-safe; one at a time). */
int sbx_spawner_create(sbx_spawner *sp, const sbx_spawn_req *req, sbx_spawn_reply *rep, sbx_error *err);

#endif
