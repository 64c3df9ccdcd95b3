/* query.c - reading a results file, for the report and the diff.
 *
 * The file is opened read-only and checked to be one (the four tables with
 * the columns the queries use) before anything is read, so that a wrong
 * file is told as such rather than as an odd SQL error.  Every prepare and
 * every step is checked: a query that fails is an error, never an empty
 * table (the report once showed all-zero latencies for months because an
 * ambiguous column made its query fail unnoticed). */
#define _GNU_SOURCE
#include "fuzz.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int fz_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **s, sbx_error *err)
{
    *s = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, s, NULL) != SQLITE_OK) {
        sbx_error_set(err, 0, "reading the results: %s", sqlite3_errmsg(db));
        sqlite3_finalize(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

int fz_db_step(sqlite3 *db, sqlite3_stmt *s, sbx_error *err)
{
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sbx_error_set(err, 0, "reading the results: %s", sqlite3_errmsg(db));
}

const char *fz_db_text(sqlite3_stmt *s, int i)
{
    const char *t = (const char *) sqlite3_column_text(s, i);
    return t ? t : "";
}

void fz_db_finalizep(sqlite3_stmt **s)
{
    sqlite3_finalize(*s);
}

void fz_db_closep(sqlite3 **db)
{
    sqlite3_close(*db);
}

/* What the queries of this file, report.c and diff.c read: prepared (not
 * run) against the file, it fails on a missing table or column. */
static const char *const SHAPE[] = {
    "SELECT id, started_at, ended_at, options FROM runs",
    "SELECT id, run, domain, name, seed, verdict, why, ms FROM tests",
    "SELECT test, op, ms, ok FROM steps",
    "SELECT test, what, text FROM evidence",
};

int fz_db_open(sqlite3 **out, const char *path, sbx_error *err)
{
    *out = NULL;
    struct stat st;
    /* SQLite would say only "unable to open database file" */
    if (stat(path, &st) < 0)
        return sbx_error_set(err, errno, "cannot open %s", path);
    if (!S_ISREG(st.st_mode))
        return sbx_error_set(err, 0, "%s is not a file (give the results file of sbx fuzz run --db)", path);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sbx_error_set(err, 0, "cannot open %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000); /* a run may be writing it */
    for (size_t i = 0; i < sizeof SHAPE / sizeof *SHAPE; i++) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(db, SHAPE[i], -1, &s, NULL);
        sqlite3_finalize(s);
        if (rc == SQLITE_OK)
            continue;
        if (rc == SQLITE_NOTADB)
            sbx_error_set(err, 0, "%s is not an sbx fuzz results file (not an SQLite database)", path);
        else
            sbx_error_set(err, 0, "%s is not an sbx fuzz results file (%s)", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

int fz_db_run(sqlite3 *db, const char *path, int64_t *run, fz_run_info *info, sbx_error *err)
{
    sqlite3_stmt *s;
    memset(info, 0, sizeof *info);
    if (fz_db_prepare(db, "SELECT min(id), max(id), count(*) FROM runs", &s, err) < 0)
        return -1;
    int r = fz_db_step(db, s, err);
    int64_t lo = r == 1 ? sqlite3_column_int64(s, 0) : 0, hi = r == 1 ? sqlite3_column_int64(s, 1) : 0;
    int64_t n = r == 1 ? sqlite3_column_int64(s, 2) : 0;
    sqlite3_finalize(s);
    if (r < 0)
        return -1;
    if (!n)
        return sbx_error_set(err, 0, "%s holds no run", path);
    if (*run == 0)
        *run = hi;
    if (fz_db_prepare(db, "SELECT options, started_at, ended_at FROM runs WHERE id = ?", &s, err) < 0)
        return -1;
    sqlite3_bind_int64(s, 1, *run);
    r = fz_db_step(db, s, err);
    if (r == 1) {
        json_error_t je;
        info->options = json_loads(fz_db_text(s, 0), 0, &je);
        info->started_at = sqlite3_column_int64(s, 1);
        info->ended_at = sqlite3_column_type(s, 2) == SQLITE_NULL ? 0 : sqlite3_column_int64(s, 2);
        if (!json_is_object(info->options)) {
            json_decref(info->options);
            info->options = NULL;
            r = sbx_error_set(err, 0, "%s: run %lld: its options are not a JSON object", path, (long long) *run);
        }
    } else if (r == 0) {
        if (n == 1)
            r = sbx_error_set(err, 0, "run %lld is not in %s (it holds run %lld)", (long long) *run, path,
                              (long long) hi);
        else
            r = sbx_error_set(err, 0, "run %lld is not in %s (it holds %lld runs, %lld to %lld)", (long long) *run,
                              path, (long long) n, (long long) lo, (long long) hi);
    }
    sqlite3_finalize(s);
    return r == 1 ? 0 : -1;
}

void fz_run_info_clear(fz_run_info *info)
{
    json_decref(info->options);
    info->options = NULL;
}

double fz_pass_rate(long passed, long failed)
{
    return passed + failed ? (double) passed / (double) (passed + failed) : NAN;
}

/* A failure: a verdict that is neither a pass nor unsupported. */
#define FAILED_SQL "(verdict IS NOT NULL AND verdict NOT IN ('pass', 'unsupported'))"

int fz_db_domains(sqlite3 *db, int64_t run, fz_domain_stat **out, size_t *n, sbx_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s;
    if (fz_db_prepare(db,
                      "SELECT domain, count(*), sum(verdict = 'pass'), sum(" FAILED_SQL "), "
                      "sum(verdict = 'unsupported'), sum(verdict IS NULL) FROM tests WHERE run = ? "
                      "GROUP BY domain ORDER BY domain",
                      &s, err) < 0)
        return -1;
    sqlite3_bind_int64(s, 1, run);
    int r;
    size_t cap = 0;
    while ((r = fz_db_step(db, s, err)) == 1) {
        if (*n == cap) {
            fz_domain_stat *m = reallocarray(*out, cap = cap ? 2 * cap : 16, sizeof **out);
            if (!m) {
                r = sbx_error_set(err, ENOMEM, "reading the results");
                break;
            }
            *out = m;
        }
        fz_domain_stat *d = &(*out)[(*n)++];
        snprintf(d->domain, sizeof d->domain, "%s", fz_db_text(s, 0));
        d->tests = sqlite3_column_int64(s, 1);
        d->passed = sqlite3_column_int64(s, 2);
        d->failed = sqlite3_column_int64(s, 3);
        d->unsupported = sqlite3_column_int64(s, 4);
        d->unfinished = sqlite3_column_int64(s, 5);
    }
    sqlite3_finalize(s);
    if (r < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

/* The nearest-rank percentile of v[0..n-1] (sorted). */
static double pct(const double *v, size_t n, double q)
{
    if (!n)
        return 0;
    size_t k = (size_t) ceil(q * (double) n);
    return v[k ? k - 1 : 0];
}

int fz_db_ops(sqlite3 *db, int64_t run, fz_op_stat **out, size_t *n, sbx_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s;
    /* both tables have a column ms: every column is qualified */
    if (fz_db_prepare(db,
                      "SELECT steps.op, steps.ms, steps.ok FROM steps JOIN tests ON tests.id = steps.test "
                      "WHERE tests.run = ? ORDER BY steps.op, steps.ms",
                      &s, err) < 0)
        return -1;
    sqlite3_bind_int64(s, 1, run);
    double *v = NULL;
    size_t nv = 0, vcap = 0, cap = 0;
    int r;
    fz_op_stat *cur = NULL;
    for (;;) {
        r = fz_db_step(db, s, err);
        if (r < 0)
            break;
        const char *op = r == 1 ? fz_db_text(s, 0) : NULL;
        if (cur && (!op || strncmp(op, cur->op, sizeof cur->op - 1) != 0)) {
            /* the operation's steps are all read (in order of their time) */
            cur->n = nv;
            cur->p50 = pct(v, nv, 0.5);
            cur->p90 = pct(v, nv, 0.9);
            cur->p99 = pct(v, nv, 0.99);
            cur->max = nv ? v[nv - 1] : 0;
            cur = NULL;
            nv = 0;
        }
        if (!op)
            break;
        if (!cur) {
            if (*n == cap) {
                fz_op_stat *m = reallocarray(*out, cap = cap ? 2 * cap : 32, sizeof **out);
                if (!m) {
                    r = sbx_error_set(err, ENOMEM, "reading the results");
                    break;
                }
                *out = m;
            }
            cur = &(*out)[(*n)++];
            memset(cur, 0, sizeof *cur);
            snprintf(cur->op, sizeof cur->op, "%s", op);
        }
        if (nv == vcap) {
            double *m = reallocarray(v, vcap = vcap ? 2 * vcap : 256, sizeof *v);
            if (!m) {
                r = sbx_error_set(err, ENOMEM, "reading the results");
                break;
            }
            v = m;
        }
        v[nv++] = sqlite3_column_double(s, 1);
        if (!sqlite3_column_int64(s, 2))
            cur->failed++;
    }
    sqlite3_finalize(s);
    free(v);
    if (r < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void fz_db_tests_free(fz_test_row *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        free(t[i].domain);
        free(t[i].name);
        free(t[i].verdict);
        free(t[i].why);
    }
    free(t);
}

int fz_db_tests(sqlite3 *db, int64_t run, const char *where, fz_test_row **out, size_t *n, sbx_error *err)
{
    *out = NULL;
    *n = 0;
    char *sql = NULL;
    if (asprintf(&sql, "SELECT id, domain, name, seed, verdict, why, ms FROM tests WHERE run = ? AND (%s) ORDER BY id",
                 where ? where : "1") < 0)
        return sbx_error_set(err, ENOMEM, "reading the results");
    sqlite3_stmt *s;
    int r = fz_db_prepare(db, sql, &s, err);
    free(sql);
    if (r < 0)
        return -1;
    sqlite3_bind_int64(s, 1, run);
    size_t cap = 0;
    while ((r = fz_db_step(db, s, err)) == 1) {
        if (*n == cap) {
            fz_test_row *m = reallocarray(*out, cap = cap ? 2 * cap : 64, sizeof **out);
            if (!m) {
                r = sbx_error_set(err, ENOMEM, "reading the results");
                break;
            }
            *out = m;
        }
        fz_test_row *t = &(*out)[*n];
        t->id = sqlite3_column_int64(s, 0);
        t->domain = strdup(fz_db_text(s, 1));
        t->name = strdup(fz_db_text(s, 2));
        t->seed = (uint64_t) sqlite3_column_int64(s, 3);
        t->verdict = sqlite3_column_type(s, 4) == SQLITE_NULL ? NULL : strdup(fz_db_text(s, 4));
        t->why = strdup(fz_db_text(s, 5));
        t->ms = sqlite3_column_double(s, 6);
        ++*n;
        if (!t->domain || !t->name || !t->why || (sqlite3_column_type(s, 4) != SQLITE_NULL && !t->verdict)) {
            r = sbx_error_set(err, ENOMEM, "reading the results");
            break;
        }
    }
    sqlite3_finalize(s);
    if (r < 0) {
        fz_db_tests_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

bool fz_verdict_failed(const char *verdict)
{
    return verdict && strcmp(verdict, "pass") != 0 && strcmp(verdict, "unsupported") != 0;
}

/* Reasons differ by the numbers, ids and paths of the test that failed;
 * the mode is what is left: "upload /w/a b: 3 bytes" and "upload /w/c:
 * 17 bytes" are one mode.  A word of 8 or more hex digits with a digit
 * among them (a sandbox id, a SHA-256) is an id; a number not glued to
 * a letter ("sha256" stays) is N; a word starting with '/' is a path. */
void fz_reason_mode(const char *why, char *out, size_t size)
{
    size_t o = 0;
#define PUT(str)                                                                                                       \
    do {                                                                                                               \
        for (const char *p_ = (str); *p_ && o + 1 < size; p_++)                                                        \
            out[o++] = *p_;                                                                                            \
    } while (0)
    const char *p = why ? why : "";
    char prev = ' ';
    while (*p && o + 1 < size) {
        if (*p == '/' && (isspace((unsigned char) prev) || strchr("('\"=:,[", prev))) {
            while (*p && !isspace((unsigned char) *p) && !strchr("'\",)]", *p))
                p++;
            PUT("<path>");
            if (p[-1] == ':') /* "upload /a/b: ..." keeps its colon */
                PUT(":");
            prev = '>';
            continue;
        }
        if (isalnum((unsigned char) *p)) {
            const char *w = p;
            bool hex = true, digit = false;
            while (isalnum((unsigned char) *p)) {
                hex = hex && isxdigit((unsigned char) *p);
                digit = digit || isdigit((unsigned char) *p);
                p++;
            }
            if (hex && digit && p - w >= 8) {
                PUT("<id>");
            } else {
                for (const char *q = w; q < p && o + 1 < size;) {
                    if (!isdigit((unsigned char) *q)) {
                        out[o++] = *q++;
                        continue;
                    }
                    bool glued = q > w && isalpha((unsigned char) q[-1]); /* "sha256", "x86" stay */
                    const char *d = q;
                    while (q < p && isdigit((unsigned char) *q))
                        q++;
                    if (glued)
                        for (; d < q && o + 1 < size; d++)
                            out[o++] = *d;
                    else
                        PUT("N");
                }
            }
            /* "1.5", "2.0.1": one number */
            while (p[0] == '.' && isdigit((unsigned char) p[1]) && o && out[o - 1] == 'N')
                for (p++; isdigit((unsigned char) *p); p++)
                    ;
            prev = p[-1];
            continue;
        }
        prev = *p;
        out[o++] = *p++;
    }
#undef PUT
    out[o] = '\0';
}
