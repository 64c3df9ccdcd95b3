/* results.c - the results file (SQLite, WAL): written as tests end, so a
 * run stopped half-way keeps what it finished. */
#include "fuzz.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <time.h>

struct fz_results {
    sqlite3 *db;
    pthread_mutex_t lock; /* workers write from their threads */
};

static const char SCHEMA[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, started_at INTEGER NOT NULL, ended_at INTEGER,"
    "  options TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tests(id INTEGER PRIMARY KEY, run INTEGER NOT NULL, domain TEXT NOT NULL,"
    "  name TEXT NOT NULL, seed INTEGER NOT NULL, verdict TEXT, why TEXT, ms REAL);"
    "CREATE INDEX IF NOT EXISTS tests_run ON tests(run, domain);"
    "CREATE TABLE IF NOT EXISTS steps(test INTEGER NOT NULL, op TEXT NOT NULL, ms REAL NOT NULL, ok INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS steps_test ON steps(test);"
    "CREATE TABLE IF NOT EXISTS evidence(test INTEGER NOT NULL, what TEXT NOT NULL, text TEXT NOT NULL);";

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fz_results_open(fz_results **out, const char *path, sbx_error *err)
{
    fz_results *r = calloc(1, sizeof *r);
    if (sqlite3_open(path, &r->db) != SQLITE_OK) {
        sbx_error_set(err, EIO, "open %s: %s", path, r->db ? sqlite3_errmsg(r->db) : "out of memory");
        sqlite3_close(r->db);
        free(r);
        return -1;
    }
    char *msg = NULL;
    if (sqlite3_exec(r->db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK) {
        sbx_error_set(err, EIO, "%s: %s", path, msg ? msg : "schema");
        sqlite3_free(msg);
        sqlite3_close(r->db);
        free(r);
        return -1;
    }
    sqlite3_busy_timeout(r->db, 5000);
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return 0;
}

void fz_results_close(fz_results *r)
{
    if (!r)
        return;
    sqlite3_close(r->db);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

sqlite3 *fz_results_db(fz_results *r)
{
    return r->db;
}

/* One statement: bind "s"/"i"/"d" arguments, step, finalize.  The row id. */
static int64_t exec_v(fz_results *r, const char *sql, const char *fmt, const void *const *args)
{
    pthread_mutex_lock(&r->lock);
    sqlite3_stmt *s = NULL;
    int64_t id = -1;
    if (sqlite3_prepare_v2(r->db, sql, -1, &s, NULL) == SQLITE_OK) {
        for (int i = 0; fmt[i]; i++) {
            if (fmt[i] == 's')
                sqlite3_bind_text(s, i + 1, args[i], -1, SQLITE_TRANSIENT);
            else if (fmt[i] == 'i')
                sqlite3_bind_int64(s, i + 1, *(const int64_t *) args[i]);
            else
                sqlite3_bind_double(s, i + 1, *(const double *) args[i]);
        }
        if (sqlite3_step(s) == SQLITE_DONE)
            id = sqlite3_last_insert_rowid(r->db);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&r->lock);
    return id;
}

int64_t fz_results_run(fz_results *r, json_t *options)
{
    char *o = json_dumps(options, JSON_COMPACT | JSON_SORT_KEYS);
    int64_t at = now_ms();
    const void *args[] = { &at, o ? o : "{}" };
    int64_t id = exec_v(r, "INSERT INTO runs(started_at, options) VALUES(?, ?)", "is", args);
    free(o);
    return id;
}

int64_t fz_results_test(fz_results *r, int64_t run, const char *domain, const char *name, uint64_t seed)
{
    int64_t sd = (int64_t) seed;
    const void *args[] = { &run, domain, name, &sd };
    return exec_v(r, "INSERT INTO tests(run, domain, name, seed) VALUES(?, ?, ?, ?)", "issi", args);
}

void fz_results_end(fz_results *r, int64_t test, fz_verdict v, const char *why, double ms)
{
    const void *args[] = { fz_verdict_name(v), why ? why : "", &ms, &test };
    exec_v(r, "UPDATE tests SET verdict = ?, why = ?, ms = ? WHERE id = ?", "ssdi", args);
}

void fz_results_step(fz_results *r, int64_t test, const char *op, double ms, bool ok)
{
    int64_t k = ok;
    const void *args[] = { &test, op, &ms, &k };
    exec_v(r, "INSERT INTO steps(test, op, ms, ok) VALUES(?, ?, ?, ?)", "isdi", args);
}

void fz_results_evidence(fz_results *r, int64_t test, const char *what, const char *text)
{
    const void *args[] = { &test, what, text };
    exec_v(r, "INSERT INTO evidence(test, what, text) VALUES(?, ?, ?)", "iss", args);
}

void fz_results_finish(fz_results *r, int64_t run)
{
    int64_t at = now_ms();
    const void *args[] = { &at, &run };
    exec_v(r, "UPDATE runs SET ended_at = ? WHERE id = ?", "ii", args);
}

json_t *fz_results_options(fz_results *r, int64_t run)
{
    pthread_mutex_lock(&r->lock);
    sqlite3_stmt *s = NULL;
    json_t *o = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT options FROM runs WHERE id = ?", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, run);
        if (sqlite3_step(s) == SQLITE_ROW)
            o = json_loads((const char *) sqlite3_column_text(s, 0), 0, NULL);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&r->lock);
    return o;
}

int fz_results_resume(fz_results *r, int64_t run, void (*on_done)(void *ctx, uint64_t seed, const char *verdict),
                      void *ctx)
{
    /* a test that did not end left a row without a verdict, and perhaps
     * steps and evidence: forget them, it runs again */
    static const char forget[] =
        "DELETE FROM steps WHERE test IN (SELECT id FROM tests WHERE run = ?1 AND verdict IS NULL);"
        "DELETE FROM evidence WHERE test IN (SELECT id FROM tests WHERE run = ?1 AND verdict IS NULL);"
        "DELETE FROM tests WHERE run = ?1 AND verdict IS NULL;"
        "UPDATE runs SET ended_at = NULL WHERE id = ?1;";
    pthread_mutex_lock(&r->lock);
    int rc = sqlite3_exec(r->db, "BEGIN", NULL, NULL, NULL);
    for (const char *sql = forget; rc == SQLITE_OK && *sql;) {
        sqlite3_stmt *s = NULL;
        rc = sqlite3_prepare_v2(r->db, sql, -1, &s, &sql);
        if (rc == SQLITE_OK && s) {
            sqlite3_bind_int64(s, 1, run);
            rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        }
        sqlite3_finalize(s);
    }
    rc = sqlite3_exec(r->db, rc == SQLITE_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK && rc == SQLITE_OK
             ? SQLITE_OK
             : SQLITE_ERROR;
    sqlite3_stmt *s = NULL;
    if (rc == SQLITE_OK &&
        sqlite3_prepare_v2(r->db, "SELECT seed, verdict FROM tests WHERE run = ?", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, run);
        while (sqlite3_step(s) == SQLITE_ROW)
            on_done(ctx, (uint64_t) sqlite3_column_int64(s, 0), (const char *) sqlite3_column_text(s, 1));
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&r->lock);
    return rc == SQLITE_OK ? 0 : -1;
}
