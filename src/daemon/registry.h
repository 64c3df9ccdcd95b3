/* registry.h - the live sandboxes of this sbxd, in memory.
 *
 * The database says what exists and who owns it; the registry holds what a
 * request needs to reach a live sandbox (control socket, pidfd, cgroups,
 * template users) and reference counts, so a sandbox being deleted is not
 * freed under a request still using it.  Ending a sandbox is:
 *   1. the atomic state change in the database (the one winner goes on),
 *   2. out of the registry (new requests get 409),
 *   3. SIGKILL to sbx-init through its pidfd (the pid namespace dies with
 *      it), cgroups removed, socket unlinked,
 *   4. marked cleaned.  A crash between 1 and 4 is finished on restart. */
#ifndef SBX_DAEMON_REGISTRY_H
#define SBX_DAEMON_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "../lib/cgroup.h"
#include "../lib/error.h"
#include "../lib/template.h"
#include "spawner.h"
#include "store.h"

typedef struct sbx_box {
    char id[SBX_ID_LEN + 1];
    char key_id[17];
    char sock[108];
    char hostname[64];
    pid_t init_pid;
    int pidfd;
    sbx_cgroup cg;
    sbx_template tpl;
    json_t *envs;             /* the sandbox's envs (immutable) */
    uint64_t disk_bytes;
    uint32_t millicpus;
    int refs;                 /* guarded by the registry lock */
    bool gone;                /* out of the registry */
    /* usage sampling (lifecycle thread only) */
    double cpu_seconds, gib_seconds;
    int64_t last_sample_ms;
    int64_t expires_at;       /* guarded by the registry lock; 0: none (paused, pooled) */
    int64_t timeout_s;
    bool pause_on_timeout;    /* on_timeout "pause": the timeout pauses it */
    /* paused: the workload is frozen; guarded by the registry lock, changed
     * under pause_lock (one pause or resume at a time) */
    bool paused;
    bool net_allowlist;       /* its network goes through the egress proxy: commands get the proxy envs */
    bool net_open;            /* its network is open (slirp4netns, netopen.c) */
    int64_t paused_remaining_ms;
    pthread_mutex_t pause_lock;
    struct sbx_box *reap_next; /* on the reaper's queue */
} sbx_box;

typedef struct sbx_registry {
    pthread_mutex_t lock;
    sbx_box **boxes;
    size_t n, cap;
    sbx_store *store;
    sbx_spawner *spawner;
    const sbx_cg_host *host;
    const char *home;
    char run_dir[256];
    uid_t uid_base;
    /* the reaper: ended sandboxes whose clean-up is still to do */
    pthread_t reaper;
    pthread_cond_t reap_cond;
    sbx_box *reap_head, *reap_tail;
    bool reaper_running, reaper_stop;
} sbx_registry;

int sbx_reg_init(sbx_registry *reg, sbx_store *store, sbx_spawner *sp, const sbx_cg_host *host, const char *home,
                 uid_t uid_base, sbx_error *err);

/* A live sandbox by id, owned by key_id (NULL: any), referenced; NULL if
 * none.  Release with sbx_reg_put. */
sbx_box *sbx_reg_get(sbx_registry *reg, const char *id, const char *key_id);
void sbx_reg_put(sbx_registry *reg, sbx_box *b);

/* Make a sandbox for `row` (id, limits, template, ... filled by the
 * caller; init_pid/start filled here) and record it. */
int sbx_reg_create(sbx_registry *reg, sbx_box_row *row, sbx_error *err);

/* Hand a warm-pool sandbox b to row's owner (row: id, key_id, times,
 * metadata, envs, limits filled by the caller): limits, database, then the
 * in-memory fields.  On failure the caller ends b. */
int sbx_reg_claim(sbx_registry *reg, sbx_box *b, const sbx_box_row *row, sbx_error *err);

/* Pause (freeze every user process; the timeout clock stops, keeping what
 * was left, or remaining_ms if > 0) or resume (the clock restarts with
 * what was left).  1 done, 0 it already was so, -1 on failure (err:
 * ENOTSUP without a freezer, ESRCH if it ended). */
int sbx_reg_pause(sbx_registry *reg, sbx_box *b, bool pause, int64_t remaining_ms, sbx_error *err);

/* End a live sandbox: 1 ended by this call, 0 it was already ending.
 * The state change, the removal from the registry and the SIGKILL to
 * sbx-init happen here; waiting for the processes to die, removing the
 * cgroups and the socket is the reaper thread's (the row says cleaned
 * when it is done, and a restart finishes what a crash interrupted), so a
 * DELETE answers in about a millisecond. */
int sbx_reg_end(sbx_registry *reg, sbx_box *b, const char *state, const char *reason);

/* Start the reaper thread (after reconcile); stop it once nothing ends
 * sandboxes any more: it finishes every clean-up queued first. */
int sbx_reg_start_reaper(sbx_registry *reg, sbx_error *err);
void sbx_reg_stop_reaper(sbx_registry *reg);

/* At start: re-attach live sandboxes, finish interrupted clean-ups. */
void sbx_reg_reconcile(sbx_registry *reg);

size_t sbx_reg_count(sbx_registry *reg, const char *key_id);

/* All live sandboxes, referenced (release each, free the array). */
sbx_box **sbx_reg_snapshot(sbx_registry *reg, size_t *n);

/* Usage sample: CPU and memory from the cgroup, GiB-seconds integrated. */
void sbx_reg_sample(sbx_registry *reg, sbx_box *b, int64_t now_ms);

#endif
