/* store.h - sbxd's persistent state in SQLite (WAL) under --home.
 *
 * Tables: keys (API keys, hashed), sandboxes (every sandbox ever made and
 * how it ended, with its usage counters), commands, events.  One
 * connection, serialized by a mutex: requests are short, and a single
 * writer is what SQLite wants anyway.  A state change is one UPDATE with
 * the expected old state in its WHERE clause: two threads ending the same
 * sandbox (DELETE racing the timeout) cannot both win. */
#ifndef SBX_DAEMON_STORE_H
#define SBX_DAEMON_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "../lib/error.h"

typedef struct sbx_store sbx_store;

int sbx_store_open(sbx_store **out, const char *path, sbx_error *err);
void sbx_store_close(sbx_store *st);

/* ---- keys ---- */
typedef struct sbx_key {
    char id[17];
    char name[65];
} sbx_key;

/* Store a new key's hash. */
int sbx_store_key_add(sbx_store *st, const char *id, const char *name, const char *hash, sbx_error *err);
/* 1 found (not revoked), 0 not, -1 error. */
int sbx_store_key_by_hash(sbx_store *st, const char *hash, sbx_key *out);
/* JSON array of {id, name, created_at, revoked_at} */
json_t *sbx_store_key_list(sbx_store *st);
/* Revoke by name or id: 1 revoked, 0 no such active key. */
int sbx_store_key_revoke(sbx_store *st, const char *name_or_id);

/* ---- sandboxes ---- */
typedef struct sbx_box_row {
    char id[33];
    char key_id[17];
    char template_name[65];
    char state[16];
    int64_t created_at, expires_at, ended_at; /* ms since the epoch, 0: none */
    char end_reason[256];
    int64_t timeout_s;
    json_t *metadata, *envs; /* owned */
    uint32_t millicpus, pids;
    uint64_t memory_mb, disk_mb;
    int32_t init_pid;
    uint64_t init_start;
    double cpu_seconds, gib_seconds;
    int64_t paused_remaining_ms; /* state "paused": the timeout left */
    char on_timeout[8];          /* "kill" (default) or "pause" */
    char snapshot_id[33];        /* made from this snapshot, "" if from the bare template */
    json_t *network;             /* owned: its network policy's JSON (egress.h); NULL: none */
    /* The template version it was made on: its id ("" for base and
     * hand-made ones), the `stack` text its mounts came from (template.h;
     * owned, NULL or "" in rows older than this column: the template's
     * current stack) and its start command and readiness check
     * ({start, ready, ready_timeout_s}, owned; NULL: none recorded). */
    char template_id[33];
    char *stack;
    json_t *start;
} sbx_box_row;

void sbx_box_row_free(sbx_box_row *r);
int sbx_store_box_insert(sbx_store *st, const sbx_box_row *r, sbx_error *err);
/* 1 found, 0 not. */
int sbx_store_box_get(sbx_store *st, const char *id, sbx_box_row *out);
/* Every row in `state` (NULL: all; "live": running or paused), for one key (NULL: all keys); the
 * caller frees each row and the array. */
int sbx_store_box_list(sbx_store *st, const char *key_id, const char *state, sbx_box_row **rows, size_t *n);
/* A warm-pool sandbox (state "pooled") becomes r's: owner, times,
 * metadata, envs, limits.  1 done, 0 it was not pooled. */
int sbx_store_box_claim(sbx_store *st, const sbx_box_row *r);
/* running -> paused (its expiry cleared, remaining_ms kept) and back
 * (expiring at expires_at): 1 done, 0 it was not in the state. */
int sbx_store_box_pause(sbx_store *st, const char *id, int64_t remaining_ms);
int sbx_store_box_resume(sbx_store *st, const char *id, int64_t expires_at);
/* At start: pooled sandboxes of an earlier run become "deleted" (their
 * clean-up then happens as for any ended, uncleaned sandbox). */
int sbx_store_box_drain_pool(sbx_store *st, int64_t now_ms);
/* running (or pooled) -> new_state, atomically: 1 done, 0 it was not. */
int sbx_store_box_end(sbx_store *st, const char *id, const char *new_state, const char *reason, int64_t now_ms);
int sbx_store_box_set_init(sbx_store *st, const char *id, int pid, uint64_t start);
int sbx_store_box_delete(sbx_store *st, const char *id);
int sbx_store_box_set_cleaned(sbx_store *st, const char *id);
/* Ended sandboxes whose clean-up did not finish. */
int sbx_store_box_list_uncleaned(sbx_store *st, sbx_box_row **rows, size_t *n);
int sbx_store_box_set_expiry(sbx_store *st, const char *id, int64_t expires_at, int64_t timeout_s);
int sbx_store_box_set_usage(sbx_store *st, const char *id, double cpu_seconds, double gib_seconds);

/* ---- commands, events, usage ---- */
int sbx_store_cmd_start(sbx_store *st, const char *box, int pid, const char *argv_json, bool background,
                        int64_t now_ms);
/* A command that ran to its end while the client waited: one write. */
int sbx_store_cmd_record(sbx_store *st, const char *box, int pid, const char *argv_json, bool background,
                         int64_t started_ms, int64_t ended_ms, int exit_code, int sig);
int sbx_store_cmd_end(sbx_store *st, const char *box, int pid, int exit_code, int sig, int64_t now_ms);
void sbx_store_event(sbx_store *st, const char *box, const char *key_id, const char *kind, const char *detail);
/* {sandbox_seconds, vcpu_seconds, gib_seconds, sandboxes_created} of one key */
json_t *sbx_store_usage(sbx_store *st, const char *key_id, int64_t now_ms);
/* counts per state, for /metrics */
json_t *sbx_store_state_counts(sbx_store *st);

/* ---- snapshots ---- */
typedef struct sbx_snap_row {
    char id[33];
    char key_id[17];
    char sandbox_id[33];
    char template_name[65];
    int64_t created_at, size_bytes;
    char parent_id[33]; /* the layer below (the sandbox was made from it), "" if none */
    /* what the sandbox was made on, as in sbx_box_row: a sandbox made from
     * the snapshot mounts that stack, not the template's current one */
    char template_id[33];
    char *stack;        /* owned; "" in rows older than the column */
    json_t *start;      /* owned; NULL: none recorded */
} sbx_snap_row;

void sbx_snap_row_free(sbx_snap_row *r);

int sbx_store_snap_insert(sbx_store *st, const sbx_snap_row *r);
/* 1 found (and key_id's, unless key_id is NULL), 0 not. */
int sbx_store_snap_get(sbx_store *st, const char *id, const char *key_id, sbx_snap_row *out);
int sbx_store_snap_list(sbx_store *st, const char *key_id, sbx_snap_row **rows, size_t *n);
/* The stacks of every snapshot, of any key (the layers they need): a JSON
 * array of strings; NULL on a database error. */
json_t *sbx_store_snap_stacks(sbx_store *st);
int sbx_store_snap_delete(sbx_store *st, const char *id);
/* What still needs its layer: sandboxes made from it that are live or not
 * yet cleaned up (mounted), and snapshots stacked on it.  -1 on error. */
int sbx_store_snap_users(sbx_store *st, const char *id);

/* A new network policy (its JSON) for sandbox id. */
int sbx_store_box_set_network(sbx_store *st, const char *id, json_t *network);

/* The last `limit` events of sandbox box (of one kind, or all: kind
 * NULL), oldest first: [{at_ms, type, detail}]. */
json_t *sbx_store_events(sbx_store *st, const char *box, const char *kind, int64_t limit);

/* How many live (running, paused, pooled) sandboxes and snapshots use the
 * template `name`, of any key, and how many of the live ones are pooled
 * (pooled may be NULL).  0, or -1 on a database error. */
int sbx_store_template_use(sbx_store *st, const char *name, int64_t *live, int64_t *snapshots, int64_t *pooled);

int64_t sbx_now_wall_ms(void);

#endif
