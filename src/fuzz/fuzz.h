/* fuzz.h - `sbx fuzz`: workflow tests against a sandbox service, through
 * the interface an agent uses, results in SQLite, failures told apart by
 * layer.
 *
 *   main.c      the verbs: run, report
 *   runner.c    tests generated from a seed, run by N workers, recorded as they end
 *   results.c   the SQLite file: runs, tests, steps (timings), evidence
 *   target.c    the operations on the service (REST), each timed as a step
 *   domain_*.c  one file per domain: its generators and its checks
 *   report.c    the self-contained HTML report
 *
 * A test is a function of its seed: the same seed gives the same test
 * (names, sizes, byte patterns), so a failure can be replayed alone.
 * Every data-moving step is checked through an independent path (the
 * SHA-256 the harness computed, the one a command computes inside, the
 * one of what came back), which is what tells an `interface` failure
 * (bytes changed in transit, the API misbehaved) from a `sandbox` one
 * (the state inside is wrong). */
#ifndef SBX_FUZZ_H
#define SBX_FUZZ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"
#include "../mcp/mcp.h" /* _cleanup_json_ */
#include "../rest/http.h"

typedef enum {
    FZ_PASS,
    FZ_INTERFACE,   /* the bytes or answers changed in transit, or the API misbehaved */
    FZ_SANDBOX,     /* the state inside is wrong */
    FZ_HARNESS,     /* the test itself failed */
    FZ_TIMEOUT,
    FZ_UNSUPPORTED, /* the target does not offer it: never a pass */
} fz_verdict;

const char *fz_verdict_name(fz_verdict v);

/* A deterministic generator (splitmix64): the test's own stream. */
typedef struct fz_rng {
    uint64_t s;
} fz_rng;
uint64_t fz_next(fz_rng *r);
uint64_t fz_below(fz_rng *r, uint64_t n); /* 0..n-1 */
void fz_bytes(fz_rng *r, uint8_t *out, size_t n);

typedef struct fz_results fz_results;

/* What a test works with. */
typedef struct fz_ctx {
    sbx_http *http;        /* the worker's own client */
    fz_rng rng;
    fz_results *res;
    int64_t test_row;      /* its row in the results */
    char sandbox[33];      /* the sandbox it made, "" for none (deleted after the test) */
    fz_verdict verdict;    /* the first failure decides */
    char why[512];
} fz_ctx;

/* Record a failure of kind v with evidence (printf); the first one counts.
 * Returns -1 so that checks can `return fz_fail(...)`. */
int fz_fail(fz_ctx *c, fz_verdict v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Evidence without a verdict (what was sent, what came back). */
void fz_evidence(fz_ctx *c, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- operations (target.c); each is a timed step; on a failure they
 * call fz_fail themselves (an API error is `interface`) and return < 0 */
int fz_create(fz_ctx *c, json_t *body);
/* Run a shell command; out and err (each may be NULL) get stdout and stderr (to free). */
int fz_exec(fz_ctx *c, const char *cmd, int *exit_code, char **out, size_t *out_len, char **err, size_t *err_len);
int fz_exec_json(fz_ctx *c, json_t *body, json_t **result);
int fz_put(fz_ctx *c, const char *path, const void *data, size_t len);
int fz_get(fz_ctx *c, const char *path, char **data, size_t *len);
/* The API's answer for a request that should fail: its status (0: none). */
long fz_request_status(fz_ctx *c, const char *method, const char *path, json_t *body);
void fz_sha256(const void *data, size_t len, char hex[65]);

/* ---- domains */
typedef struct fz_test_def {
    const char *name;  /* the workflow: "fs.deep_tree" */
    int (*run)(fz_ctx *c);
} fz_test_def;

typedef struct fz_domain {
    const char *name;
    const fz_test_def *tests;
    size_t n;
} fz_domain;

extern const fz_domain fz_domain_fs, fz_domain_encoding, fz_domain_exec, fz_domain_lang, fz_domain_lifecycle,
    fz_domain_limits, fz_domain_security, fz_domain_data, fz_domain_sdlc;

/* ---- results (results.c) */
int fz_results_open(fz_results **out, const char *path, sbx_error *err);
void fz_results_close(fz_results *r);
int64_t fz_results_run(fz_results *r, json_t *options);
int64_t fz_results_test(fz_results *r, int64_t run, const char *domain, const char *name, uint64_t seed);
void fz_results_end(fz_results *r, int64_t test, fz_verdict v, const char *why, double ms);
void fz_results_step(fz_results *r, int64_t test, const char *op, double ms, bool ok);
void fz_results_evidence(fz_results *r, int64_t test, const char *what, const char *text);
void fz_results_finish(fz_results *r, int64_t run);
/* The database, for the report. */
struct sqlite3 *fz_results_db(fz_results *r);

/* ---- the verbs */
int fz_run_main(int argc, char **argv);
int fz_report_main(int argc, char **argv);

#endif
