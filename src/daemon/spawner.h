/* spawner.h - the process that creates sbxd's sandboxes.
 *
 * sbxd is multi-threaded (one thread per HTTP connection); a sandbox is
 * made by clone() and a child that mounts, allocates and execs -- unsafe
 * after fork in a threaded process (another thread may hold the malloc
 * lock).  So sbxd forks this single-threaded helper before starting any
 * thread and asks it for each sandbox over a socketpair.  The sandboxes
 * are its children; it reaps them.  It dies with sbxd, and the sandboxes
 * do not: sbx-init runs in daemon mode and outlives its creator. */
#ifndef SBX_DAEMON_SPAWNER_H
#define SBX_DAEMON_SPAWNER_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/cgroup.h"
#include "../lib/error.h"
#include "../lib/spec.h"

typedef struct sbx_spawn_req {
    char id[SBX_ID_LEN + 1];
    char template_name[65];
    char sock_path[108];
    char layer[2048]; /* snapshot layers over the template, ':'-joined, top first; "" for none */
    /* the template version to mount: its `stack` text (template.h), so the
     * spawner mounts exactly what sbxd recorded, even if the template was
     * rebuilt since; "" for none (base, hand-made: opened by name) */
    char stack[12288];
    uint64_t memory_bytes, disk_bytes;
    uint32_t millicpus, pids;
} sbx_spawn_req;

typedef struct sbx_spawn_reply {
    int32_t errno_;      /* 0: created */
    int32_t pid;         /* host pid of sbx-init */
    uint64_t start_time; /* its start time (/proc/PID/stat field 22) */
    char msg[512];
} sbx_spawn_reply;

typedef struct sbx_spawner {
    pid_t pid;
    int sock;
    pthread_mutex_t lock;
} sbx_spawner;

/* Fork the spawner.  Call before any thread exists. */
int sbx_spawner_start(sbx_spawner *sp, const char *home, const sbx_cg_host *host, const char *init_path,
                      uid_t uid_base, sbx_error *err);

/* Create a sandbox (thread-safe; one at a time). */
int sbx_spawner_create(sbx_spawner *sp, const sbx_spawn_req *req, sbx_spawn_reply *rep, sbx_error *err);

/* The start time of a process (0 if gone): a pid alone may be reused. */
uint64_t sbx_proc_start_time(pid_t pid);

#endif
