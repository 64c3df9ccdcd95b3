/* store.c - see store.h. */
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sbx_store {
    sqlite3 *db;
    pthread_mutex_t lock;
};

static const char SCHEMA[] =
    "PRAGMA journal_mode=WAL;"
    /* WAL + NORMAL: a crash loses at most the last transactions, never
     * corrupts; every commit is not an fsync (the exec path writes a row). */
    "PRAGMA synchronous=NORMAL;"
    "PRAGMA foreign_keys=ON;"
    "CREATE TABLE IF NOT EXISTS keys("
    "  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, hash TEXT NOT NULL UNIQUE,"
    "  created_at INTEGER NOT NULL, revoked_at INTEGER);"
    "CREATE TABLE IF NOT EXISTS sandboxes("
    "  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, template TEXT NOT NULL, state TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, ended_at INTEGER, end_reason TEXT,"
    "  timeout_s INTEGER NOT NULL, metadata TEXT NOT NULL, envs TEXT NOT NULL,"
    "  millicpus INTEGER NOT NULL, memory_mb INTEGER NOT NULL, disk_mb INTEGER NOT NULL,"
    "  pids INTEGER NOT NULL, init_pid INTEGER NOT NULL, init_start INTEGER NOT NULL,"
    "  cpu_seconds REAL NOT NULL DEFAULT 0, gib_seconds REAL NOT NULL DEFAULT 0,"
    /* 1 once its processes, cgroups and socket are gone: an sbxd killed
     * between ending a sandbox and cleaning it up finishes the job on start */
    "  cleaned INTEGER NOT NULL DEFAULT 0,"
    /* paused: what was left of the timeout when it was paused (the clock
     * stops); on_timeout: 'kill' or 'pause' */
    "  paused_remaining_ms INTEGER NOT NULL DEFAULT 0, on_timeout TEXT NOT NULL DEFAULT 'kill',"
    "  snapshot_id TEXT NOT NULL DEFAULT '',"
    /* the network policy (egress.h), as the API shows it */
    "  network TEXT NOT NULL DEFAULT '{\"mode\":\"none\"}',"
    /* the template version it was made on (store.h: sbx_box_row) */
    "  template_id TEXT NOT NULL DEFAULT '', stack TEXT NOT NULL DEFAULT '', start TEXT NOT NULL DEFAULT '');"
    /* a snapshot: a sandbox's writable layer, kept under HOME/snapshots/<id> */
    "CREATE TABLE IF NOT EXISTS snapshots("
    "  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, sandbox_id TEXT NOT NULL, template TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL, size_bytes INTEGER NOT NULL,"
    /* the snapshot the sandbox itself was made from: its layer lies below */
    "  parent_id TEXT NOT NULL DEFAULT '',"
    /* what its sandbox was made on: a sandbox made from it mounts that */
    "  template_id TEXT NOT NULL DEFAULT '', stack TEXT NOT NULL DEFAULT '', start TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS sandboxes_key_state ON sandboxes(key_id, state);"
    "CREATE TABLE IF NOT EXISTS commands("
    "  sandbox_id TEXT NOT NULL, pid INTEGER NOT NULL, argv TEXT NOT NULL, background INTEGER NOT NULL,"
    "  started_at INTEGER NOT NULL, ended_at INTEGER, exit_code INTEGER, signal INTEGER);"
    "CREATE INDEX IF NOT EXISTS commands_box ON commands(sandbox_id, pid);"
    "CREATE TABLE IF NOT EXISTS events("
    "  id INTEGER PRIMARY KEY, at INTEGER NOT NULL, sandbox_id TEXT, key_id TEXT, kind TEXT NOT NULL,"
    "  detail TEXT);"
    "CREATE INDEX IF NOT EXISTS events_box ON events(sandbox_id, kind, id);";

int64_t sbx_now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbx_store_open(sbx_store **out, const char *path, sbx_error *err)
{
    sbx_store *st = calloc(1, sizeof *st);
    if (!st)
        return sbx_error_set(err, ENOMEM, "store");
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        sbx_error_set(err, EIO, "open database %s: %s", path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
        sqlite3_close(st->db);
        free(st);
        return -1;
    }
    /* `sbxd keys create` may write while sbxd runs: wait for the lock. */
    sqlite3_busy_timeout(st->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(st->db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK) {
        sbx_error_set(err, EIO, "initialise database %s: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(st->db);
        free(st);
        return -1;
    }
    /* Columns added since the first release: ALTER fails with "duplicate
     * column" on a database that has them, which is fine. */
    static const char *const added[] = {
        "ALTER TABLE sandboxes ADD COLUMN paused_remaining_ms INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'kill'",
        "ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{\"mode\":\"none\"}'",
        /* template versions: rows from before have '' (their template's
         * current stack and start command, as then) */
        "ALTER TABLE sandboxes ADD COLUMN template_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sandboxes ADD COLUMN stack TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sandboxes ADD COLUMN start TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE snapshots ADD COLUMN template_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE snapshots ADD COLUMN stack TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE snapshots ADD COLUMN start TEXT NOT NULL DEFAULT ''",
    };
    for (size_t i = 0; i < sizeof added / sizeof *added; i++)
        sqlite3_exec(st->db, added[i], NULL, NULL, NULL);
    pthread_mutex_init(&st->lock, NULL);
    *out = st;
    return 0;
}

void sbx_store_close(sbx_store *st)
{
    if (!st)
        return;
    sqlite3_close(st->db);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Prepare, bind text/int64 arguments by a tiny format ("s" text or NULL,
 * "i" int64, "d" double), step once.  Returns the statement for the caller
 * to read rows from (locked), or NULL. */
static sqlite3_stmt *run(sbx_store *st, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) {
        fprintf(stderr, "sbxd: sql error: %s in %s\n", sqlite3_errmsg(st->db), sql);
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    for (int i = 0; fmt[i]; i++) {
        if (fmt[i] == 's') {
            const char *v = va_arg(ap, const char *);
            if (v)
                sqlite3_bind_text(s, i + 1, v, -1, SQLITE_TRANSIENT);
            else
                sqlite3_bind_null(s, i + 1);
        } else if (fmt[i] == 'i') {
            sqlite3_bind_int64(s, i + 1, va_arg(ap, int64_t));
        } else if (fmt[i] == 'd') {
            sqlite3_bind_double(s, i + 1, va_arg(ap, double));
        }
    }
    va_end(ap);
    return s;
}

/* Execute a statement that returns no rows; returns changes or -1. */
static int exec_stmt(sbx_store *st, sqlite3_stmt *s)
{
    if (!s)
        return -1;
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "sbxd: sql error: %s\n", sqlite3_errmsg(st->db));
        return -1;
    }
    return sqlite3_changes(st->db);
}

#define LOCKED(st, expr)                                                                                               \
    ({                                                                                                                 \
        pthread_mutex_lock(&(st)->lock);                                                                               \
        __auto_type _v = (expr);                                                                                       \
        pthread_mutex_unlock(&(st)->lock);                                                                             \
        _v;                                                                                                            \
    })

static const char *col_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *) t : "";
}

/* ---- keys ---- */

int sbx_store_key_add(sbx_store *st, const char *id, const char *name, const char *hash, sbx_error *err)
{
    int r = LOCKED(st, exec_stmt(st, run(st, "INSERT INTO keys(id, name, hash, created_at) VALUES(?,?,?,?)", "sssi",
                                         id, name, hash, sbx_now_wall_ms())));
    if (r < 0)
        return sbx_error_set(err, EEXIST, "a key named '%s' (or with that value) exists already", name);
    return 0;
}

int sbx_store_key_by_hash(sbx_store *st, const char *hash, sbx_key *out)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st, "SELECT id, name FROM keys WHERE hash = ? AND revoked_at IS NULL", "s", hash);
    int found = -1;
    if (s) {
        int rc = sqlite3_step(s);
        found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
        if (found == 1) {
            snprintf(out->id, sizeof out->id, "%s", col_text(s, 0));
            snprintf(out->name, sizeof out->name, "%s", col_text(s, 1));
        }
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return found;
}

json_t *sbx_store_key_list(sbx_store *st)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st, "SELECT id, name, created_at, revoked_at FROM keys ORDER BY created_at", "");
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        json_t *o = json_pack("{s:s, s:s, s:I}", "id", col_text(s, 0), "name", col_text(s, 1), "created_at",
                              (json_int_t) sqlite3_column_int64(s, 2));
        json_object_set_new(o, "revoked_at", sqlite3_column_type(s, 3) == SQLITE_NULL
                                                 ? json_null()
                                                 : json_integer(sqlite3_column_int64(s, 3)));
        json_array_append_new(arr, o);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return arr;
}

int sbx_store_key_revoke(sbx_store *st, const char *name_or_id)
{
    return LOCKED(st, exec_stmt(st, run(st, "UPDATE keys SET revoked_at = ? WHERE (name = ? OR id = ?) AND revoked_at "
                                            "IS NULL",
                                        "iss", sbx_now_wall_ms(), name_or_id, name_or_id)));
}

/* ---- sandboxes ---- */

void sbx_box_row_free(sbx_box_row *r)
{
    json_decref(r->metadata);
    json_decref(r->envs);
    json_decref(r->network);
    json_decref(r->start);
    free(r->stack);
    r->metadata = r->envs = r->network = r->start = NULL;
    r->stack = NULL;
}

/* A start pin's text for its column: "" for none. */
static char *start_text(json_t *start)
{
    return start ? json_dumps(start, JSON_COMPACT) : strdup("");
}

static json_t *start_of(const char *text)
{
    json_t *j = text[0] ? json_loads(text, 0, NULL) : NULL;
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

int sbx_store_box_insert(sbx_store *st, const sbx_box_row *r, sbx_error *err)
{
    char *md = json_dumps(r->metadata, JSON_COMPACT), *ev = json_dumps(r->envs, JSON_COMPACT);
    char *net = r->network ? json_dumps(r->network, JSON_COMPACT) : strdup("{\"mode\":\"none\"}");
    char *start = start_text(r->start);
    int rc = -1;
    if (md && ev && net && start)
        rc = LOCKED(st, exec_stmt(st, run(st,
                                          "INSERT INTO sandboxes(id, key_id, template, state, created_at, expires_at, "
                                          "timeout_s, metadata, envs, millicpus, memory_mb, disk_mb, pids, init_pid, "
                                          "init_start, on_timeout, snapshot_id, network, template_id, stack, start) "
                                          "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                          "ssssiiissiiiiiissssss", r->id, r->key_id, r->template_name, r->state,
                                          r->created_at, r->expires_at, r->timeout_s, md, ev, (int64_t) r->millicpus,
                                          (int64_t) r->memory_mb, (int64_t) r->disk_mb, (int64_t) r->pids,
                                          (int64_t) r->init_pid, (int64_t) r->init_start,
                                          r->on_timeout[0] ? r->on_timeout : "kill", r->snapshot_id, net,
                                          r->template_id, r->stack ? r->stack : "", start)));
    free(md);
    free(ev);
    free(net);
    free(start);
    if (rc < 0)
        return sbx_error_set(err, EIO, "record sandbox %s", r->id);
    return 0;
}

#define BOX_COLUMNS                                                                                                    \
    "id, key_id, template, state, created_at, expires_at, ended_at, end_reason, timeout_s, metadata, envs, "          \
    "millicpus, memory_mb, disk_mb, pids, init_pid, init_start, cpu_seconds, gib_seconds, paused_remaining_ms, "    \
    "on_timeout, snapshot_id, network, template_id, stack, start"

static void read_row(sqlite3_stmt *s, sbx_box_row *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", col_text(s, 0));
    snprintf(r->key_id, sizeof r->key_id, "%s", col_text(s, 1));
    snprintf(r->template_name, sizeof r->template_name, "%s", col_text(s, 2));
    snprintf(r->state, sizeof r->state, "%s", col_text(s, 3));
    r->created_at = sqlite3_column_int64(s, 4);
    r->expires_at = sqlite3_column_int64(s, 5);
    r->ended_at = sqlite3_column_int64(s, 6);
    snprintf(r->end_reason, sizeof r->end_reason, "%s", col_text(s, 7));
    r->timeout_s = sqlite3_column_int64(s, 8);
    r->metadata = json_loads(col_text(s, 9), 0, NULL);
    r->envs = json_loads(col_text(s, 10), 0, NULL);
    if (!r->metadata)
        r->metadata = json_object();
    if (!r->envs)
        r->envs = json_object();
    r->millicpus = (uint32_t) sqlite3_column_int64(s, 11);
    r->memory_mb = (uint64_t) sqlite3_column_int64(s, 12);
    r->disk_mb = (uint64_t) sqlite3_column_int64(s, 13);
    r->pids = (uint32_t) sqlite3_column_int64(s, 14);
    r->init_pid = (int32_t) sqlite3_column_int64(s, 15);
    r->init_start = (uint64_t) sqlite3_column_int64(s, 16);
    r->cpu_seconds = sqlite3_column_double(s, 17);
    r->gib_seconds = sqlite3_column_double(s, 18);
    r->paused_remaining_ms = sqlite3_column_int64(s, 19);
    snprintf(r->on_timeout, sizeof r->on_timeout, "%s", col_text(s, 20));
    snprintf(r->snapshot_id, sizeof r->snapshot_id, "%s", col_text(s, 21));
    r->network = json_loads(col_text(s, 22), 0, NULL);
    snprintf(r->template_id, sizeof r->template_id, "%s", col_text(s, 23));
    r->stack = strdup(col_text(s, 24));
    r->start = start_of(col_text(s, 25));
}

int sbx_store_box_get(sbx_store *st, const char *id, sbx_box_row *out)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st, "SELECT " BOX_COLUMNS " FROM sandboxes WHERE id = ?", "s", id);
    int found = 0;
    if (s && sqlite3_step(s) == SQLITE_ROW) {
        read_row(s, out);
        found = 1;
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return found;
}

/* Every row a prepared SELECT of BOX_COLUMNS yields (lock held by the
 * caller); the statement is finalized. */
static int collect_rows(sqlite3_stmt *s, sbx_box_row **rows, size_t *n)
{
    *rows = NULL;
    *n = 0;
    size_t cap = 0;
    int ret = s ? 0 : -1;
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            sbx_box_row *nr = realloc(*rows, cap * sizeof **rows);
            if (!nr) {
                ret = -1;
                break;
            }
            *rows = nr;
        }
        read_row(s, &(*rows)[(*n)++]);
    }
    sqlite3_finalize(s);
    return ret;
}

int sbx_store_box_list(sbx_store *st, const char *key_id, const char *state, sbx_box_row **rows, size_t *n)
{
    pthread_mutex_lock(&st->lock);
    int ret = collect_rows(run(st,
                               "SELECT " BOX_COLUMNS " FROM sandboxes WHERE (?1 IS NULL OR key_id = ?1) AND (?2 IS NULL "
                               "OR state = ?2 OR (?2 = 'live' AND state IN ('running', 'paused'))) ORDER BY created_at",
                               "ss", key_id, state),
                           rows, n);
    pthread_mutex_unlock(&st->lock);
    return ret;
}

int sbx_store_box_end(sbx_store *st, const char *id, const char *new_state, const char *reason, int64_t now_ms)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE sandboxes SET state = ?, end_reason = ?, ended_at = ? WHERE id = ? AND "
                                        "state IN ('running', 'pooled', 'paused')",
                                        "ssis", new_state, reason, now_ms, id)));
}

int sbx_store_box_claim(sbx_store *st, const sbx_box_row *r)
{
    char *md = json_dumps(r->metadata, JSON_COMPACT), *ev = json_dumps(r->envs, JSON_COMPACT);
    char *net = r->network ? json_dumps(r->network, JSON_COMPACT) : strdup("{\"mode\":\"none\"}");
    int rc = -1;
    if (md && ev && net)
        rc = LOCKED(st, exec_stmt(st, run(st,
                                          "UPDATE sandboxes SET key_id = ?, state = 'running', created_at = ?, "
                                          "expires_at = ?, timeout_s = ?, metadata = ?, envs = ?, millicpus = ?, "
                                          "memory_mb = ?, pids = ?, on_timeout = ?, network = ?, cpu_seconds = 0, "
                                          "gib_seconds = 0 WHERE id = ? AND state = 'pooled'",
                                          "siiissiiisss", r->key_id, r->created_at, r->expires_at, r->timeout_s, md, ev,
                                          (int64_t) r->millicpus, (int64_t) r->memory_mb, (int64_t) r->pids,
                                          r->on_timeout[0] ? r->on_timeout : "kill", net, r->id)));
    free(md);
    free(ev);
    free(net);
    return rc;
}

int sbx_store_box_pause(sbx_store *st, const char *id, int64_t remaining_ms)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE sandboxes SET state = 'paused', expires_at = 0, paused_remaining_ms = ? "
                                        "WHERE id = ? AND state = 'running'",
                                        "is", remaining_ms, id)));
}

int sbx_store_box_resume(sbx_store *st, const char *id, int64_t expires_at)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE sandboxes SET state = 'running', expires_at = ?, paused_remaining_ms = 0 "
                                        "WHERE id = ? AND state = 'paused'",
                                        "is", expires_at, id)));
}

int sbx_store_box_drain_pool(sbx_store *st, int64_t now_ms)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE sandboxes SET state = 'deleted', ended_at = ?, end_reason = 'warm pool "
                                        "emptied when sbxd started' WHERE state = 'pooled'",
                                        "i", now_ms)));
}

int sbx_store_box_set_init(sbx_store *st, const char *id, int pid, uint64_t start)
{
    return LOCKED(st, exec_stmt(st, run(st, "UPDATE sandboxes SET init_pid = ?, init_start = ? WHERE id = ?", "iis",
                                        (int64_t) pid, (int64_t) start, id)));
}

int sbx_store_box_delete(sbx_store *st, const char *id)
{
    return LOCKED(st, exec_stmt(st, run(st, "DELETE FROM sandboxes WHERE id = ?", "s", id)));
}

int sbx_store_box_set_cleaned(sbx_store *st, const char *id)
{
    return LOCKED(st, exec_stmt(st, run(st, "UPDATE sandboxes SET cleaned = 1 WHERE id = ?", "s", id)));
}

int sbx_store_box_list_uncleaned(sbx_store *st, sbx_box_row **rows, size_t *n)
{
    pthread_mutex_lock(&st->lock);
    int ret = collect_rows(
        run(st, "SELECT " BOX_COLUMNS " FROM sandboxes WHERE state NOT IN ('running', 'paused', 'pooled') AND cleaned = 0", ""), rows, n);
    pthread_mutex_unlock(&st->lock);
    return ret;
}

int sbx_store_box_set_expiry(sbx_store *st, const char *id, int64_t expires_at, int64_t timeout_s)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE sandboxes SET expires_at = CASE state WHEN 'paused' THEN 0 ELSE ?1 END, "
                                        "paused_remaining_ms = CASE state WHEN 'paused' THEN ?2 * 1000 ELSE 0 END, "
                                        "timeout_s = ?2 WHERE id = ?3 AND state IN ('running', 'paused')",
                                        "iis", expires_at, timeout_s, id)));
}

int sbx_store_box_set_usage(sbx_store *st, const char *id, double cpu_seconds, double gib_seconds)
{
    return LOCKED(st, exec_stmt(st, run(st, "UPDATE sandboxes SET cpu_seconds = ?, gib_seconds = ? WHERE id = ?",
                                        "dds", cpu_seconds, gib_seconds, id)));
}

/* ---- commands, events, usage ---- */

int sbx_store_cmd_start(sbx_store *st, const char *box, int pid, const char *argv_json, bool background,
                        int64_t now_ms)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "INSERT INTO commands(sandbox_id, pid, argv, background, started_at) "
                                        "VALUES(?,?,?,?,?)",
                                        "sisii", box, (int64_t) pid, argv_json, (int64_t) background, now_ms)));
}

int sbx_store_cmd_record(sbx_store *st, const char *box, int pid, const char *argv_json, bool background,
                         int64_t started_ms, int64_t ended_ms, int exit_code, int sig)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "INSERT INTO commands(sandbox_id, pid, argv, background, started_at, "
                                        "ended_at, exit_code, signal) VALUES(?,?,?,?,?,?,?,?)",
                                        "sisiiiii", box, (int64_t) pid, argv_json, (int64_t) background, started_ms,
                                        ended_ms, (int64_t) exit_code, (int64_t) sig)));
}

int sbx_store_cmd_end(sbx_store *st, const char *box, int pid, int exit_code, int sig, int64_t now_ms)
{
    return LOCKED(st, exec_stmt(st, run(st,
                                        "UPDATE commands SET ended_at = ?, exit_code = ?, signal = ? WHERE rowid = "
                                        "(SELECT max(rowid) FROM commands WHERE sandbox_id = ? AND pid = ?)",
                                        "iiisi", now_ms, (int64_t) exit_code, (int64_t) sig, box, (int64_t) pid)));
}

/* A sandbox keeps its newest events of a kind, this many (and up to
 * TRIM_EVERY more between trims): a chatty
 * sandbox (every proxied connection is one) cannot grow the database
 * without end.  The trim runs every TRIM_EVERY inserts of any sandbox. */
#define EVENTS_KEPT 10000
#define TRIM_EVERY 1000

void sbx_store_event(sbx_store *st, const char *box, const char *key_id, const char *kind, const char *detail)
{
    pthread_mutex_lock(&st->lock);
    int64_t id = exec_stmt(st, run(st, "INSERT INTO events(at, sandbox_id, key_id, kind, detail) VALUES(?,?,?,?,?)",
                                   "issss", sbx_now_wall_ms(), box, key_id, kind, detail)) > 0
                     ? sqlite3_last_insert_rowid(st->db)
                     : 0;
    if (id && box && id % TRIM_EVERY == 0)
        exec_stmt(st, run(st,
                          "DELETE FROM events WHERE sandbox_id = ?1 AND kind = ?2 AND id < (SELECT id FROM events "
                          "WHERE sandbox_id = ?1 AND kind = ?2 ORDER BY id DESC LIMIT 1 OFFSET ?3)",
                          "ssi", box, kind, (int64_t) EVENTS_KEPT - 1));
    pthread_mutex_unlock(&st->lock);
}

json_t *sbx_store_usage(sbx_store *st, const char *key_id, int64_t now_ms)
{
    json_t *o = NULL;
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st,
                          "SELECT count(*), coalesce(sum((coalesce(ended_at, ?1) - created_at) / 1000.0), 0), "
                          "coalesce(sum(cpu_seconds), 0), coalesce(sum(gib_seconds), 0) FROM sandboxes WHERE key_id = "
                          "?2",
                          "is", now_ms, key_id);
    if (s && sqlite3_step(s) == SQLITE_ROW)
        o = json_pack("{s:I, s:f, s:f, s:f}", "sandboxes_created", (json_int_t) sqlite3_column_int64(s, 0),
                      "sandbox_seconds", sqlite3_column_double(s, 1), "vcpu_seconds", sqlite3_column_double(s, 2),
                      "gib_seconds", sqlite3_column_double(s, 3));
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return o;
}

json_t *sbx_store_state_counts(sbx_store *st)
{
    json_t *o = json_object();
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st, "SELECT state, count(*) FROM sandboxes GROUP BY state", "");
    while (s && sqlite3_step(s) == SQLITE_ROW)
        json_object_set_new(o, col_text(s, 0), json_integer(sqlite3_column_int64(s, 1)));
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return o;
}

/* ---- snapshots ---- */

#define SNAP_COLUMNS "id, key_id, sandbox_id, template, created_at, size_bytes, parent_id, template_id, stack, start"

void sbx_snap_row_free(sbx_snap_row *r)
{
    free(r->stack);
    json_decref(r->start);
    r->stack = NULL;
    r->start = NULL;
}

int sbx_store_snap_insert(sbx_store *st, const sbx_snap_row *r)
{
    char *start = start_text(r->start);
    int rc = start ? LOCKED(st, exec_stmt(st, run(st,
                                                  "INSERT INTO snapshots(id, key_id, sandbox_id, template, created_at, "
                                                  "size_bytes, parent_id, template_id, stack, start) "
                                                  "VALUES(?,?,?,?,?,?,?,?,?,?)",
                                                  "ssssiissss", r->id, r->key_id, r->sandbox_id, r->template_name,
                                                  r->created_at, r->size_bytes, r->parent_id, r->template_id,
                                                  r->stack ? r->stack : "", start)))
                   : -1;
    free(start);
    return rc;
}

json_t *sbx_store_snap_stacks(sbx_store *st)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st, "SELECT stack FROM snapshots WHERE stack != ''", "");
    int rc = SQLITE_ERROR;
    while (s && (rc = sqlite3_step(s)) == SQLITE_ROW)
        json_array_append_new(arr, json_string(col_text(s, 0)));
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    if (rc != SQLITE_DONE) { /* a partial list would free layers still needed */
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static void read_snap(sqlite3_stmt *s, sbx_snap_row *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", col_text(s, 0));
    snprintf(r->key_id, sizeof r->key_id, "%s", col_text(s, 1));
    snprintf(r->sandbox_id, sizeof r->sandbox_id, "%s", col_text(s, 2));
    snprintf(r->template_name, sizeof r->template_name, "%s", col_text(s, 3));
    r->created_at = sqlite3_column_int64(s, 4);
    r->size_bytes = sqlite3_column_int64(s, 5);
    snprintf(r->parent_id, sizeof r->parent_id, "%s", col_text(s, 6));
    snprintf(r->template_id, sizeof r->template_id, "%s", col_text(s, 7));
    r->stack = strdup(col_text(s, 8));
    r->start = start_of(col_text(s, 9));
}

int sbx_store_snap_get(sbx_store *st, const char *id, const char *key_id, sbx_snap_row *out)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st,
                          "SELECT " SNAP_COLUMNS " FROM snapshots WHERE id = ? AND (?2 IS NULL OR key_id = ?2)",
                          "ss", id, key_id);
    int found = 0;
    if (s && sqlite3_step(s) == SQLITE_ROW) {
        read_snap(s, out);
        found = 1;
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return found;
}

int sbx_store_snap_list(sbx_store *st, const char *key_id, sbx_snap_row **rows, size_t *n)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st,
                          "SELECT " SNAP_COLUMNS " FROM snapshots WHERE key_id = ? ORDER BY created_at",
                          "s", key_id);
    *rows = NULL;
    *n = 0;
    size_t cap = 0;
    int ret = s ? 0 : -1;
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            sbx_snap_row *nr = realloc(*rows, cap * sizeof **rows);
            if (!nr) {
                ret = -1;
                break;
            }
            *rows = nr;
        }
        read_snap(s, &(*rows)[(*n)++]);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return ret;
}

int sbx_store_snap_delete(sbx_store *st, const char *id)
{
    return LOCKED(st, exec_stmt(st, run(st, "DELETE FROM snapshots WHERE id = ?", "s", id)));
}

int sbx_store_snap_users(sbx_store *st, const char *id)
{
    pthread_mutex_lock(&st->lock);
    /* sandboxes made from it, and snapshots stacked on it */
    sqlite3_stmt *s = run(st, "SELECT (SELECT COUNT(*) FROM sandboxes WHERE snapshot_id = ?1 AND (state IN ('running', "
                              "'paused', 'pooled') OR cleaned = 0)) + (SELECT COUNT(*) FROM snapshots WHERE parent_id = ?1)",
                          "s", id);
    int n = s && sqlite3_step(s) == SQLITE_ROW ? (int) sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return n;
}

int sbx_store_template_use(sbx_store *st, const char *name, int64_t *live, int64_t *snapshots, int64_t *pooled)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st,
                          "SELECT (SELECT count(*) FROM sandboxes WHERE template = ?1 AND state IN "
                          "('running','paused','pooled')), (SELECT count(*) FROM snapshots WHERE template = ?1), "
                          "(SELECT count(*) FROM sandboxes WHERE template = ?1 AND state = 'pooled')",
                          "s", name);
    int ok = s && sqlite3_step(s) == SQLITE_ROW;
    if (ok) {
        *live = sqlite3_column_int64(s, 0);
        *snapshots = sqlite3_column_int64(s, 1);
        if (pooled)
            *pooled = sqlite3_column_int64(s, 2);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return ok ? 0 : -1;
}

int sbx_store_box_set_network(sbx_store *st, const char *id, json_t *network)
{
    char *net = json_dumps(network, JSON_COMPACT);
    int rc = net ? LOCKED(st, exec_stmt(st, run(st, "UPDATE sandboxes SET network = ? WHERE id = ?", "ss", net, id)))
                 : -1;
    free(net);
    return rc;
}

json_t *sbx_store_events(sbx_store *st, const char *box, const char *kind, int64_t limit)
{
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = run(st,
                          "SELECT at, kind, detail FROM events WHERE sandbox_id = ?1 AND (?2 IS NULL OR kind = ?2) "
                          "ORDER BY id DESC LIMIT ?3",
                          "ssi", box, kind, limit);
    json_t *arr = json_array();
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        json_t *detail = json_loads(col_text(s, 2), 0, NULL);
        json_array_insert_new(arr, 0, json_pack("{s:I, s:s, s:o}", "at_ms", (json_int_t) sqlite3_column_int64(s, 0),
                                                "type", col_text(s, 1),
                                                "detail", detail ? detail : json_string(col_text(s, 2))));
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return arr;
}
