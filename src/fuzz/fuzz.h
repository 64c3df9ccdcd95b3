/* fuzz.h - `sbx fuzz`: workflow tests against a sandbox service, through
 * the interface an agent uses, results in SQLite, failures told apart by
 * layer.
 *
 *   main.c      the verbs: run, report
 *   runner.c    tests generated from a seed, run by N workers, recorded as they end
 *   results.c   the SQLite file: runs, tests, steps (timings), evidence
 *   target.c    the operations on the service, each timed as a step, over
 *               REST or MCP (the same operation, the interface the run chose)
 *   mcp_client.c  a minimal MCP client (Streamable HTTP: initialize, tools/call)
 *   domain_*.c  one file per domain: its generators and its checks
 *   query.c     reading a results file (checked to be one; every query checked)
 *   report.c    the self-contained HTML report
 *   diff.c      what changed between two runs
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

/* The interface a run drives the service through; each worker has its own. */
typedef enum { FZ_REST, FZ_MCP } fz_iface;
typedef struct fz_target fz_target;
fz_target *fz_target_new(fz_iface iface, const char *url, const char *key, sbx_error *err);
void fz_target_free(fz_target *t);
fz_iface fz_target_iface(const fz_target *t);
/* The service's URL, as given (a test may need its host). */
const char *fz_target_url(const fz_target *t);
/* Whether the service runs on this machine (a loopback or unix: URL):
 * only then can a test plant something on the host, or start a server
 * the sandbox may reach. */
bool fz_target_local(const fz_target *t);

/* The sandboxes a test may hold at once (its own, others, forks). */
#define FZ_MAX_OWNED 32

/* What a test works with. */
typedef struct fz_ctx {
    fz_target *t;          /* the worker's own connection */
    const char *template_; /* every sandbox's template (--template), NULL: the service's default */
    const char *name;      /* the workflow's name */
    uint64_t seed;         /* the test's seed (its rng starts from it) */
    fz_rng rng;
    fz_results *res;
    int64_t test_row;      /* its row in the results */
    char sandbox[33];      /* the sandbox it works in, "" for none */
    /* Every sandbox it made and has not deleted: the runner deletes them
     * after the test, whatever happened to it. */
    char owned[FZ_MAX_OWNED][33];
    size_t n_owned;
    /* CLOCK_MONOTONIC ms by which the test must have ended (0: none): no
     * request is given longer, and none starts after it (`timeout`). */
    double deadline;
    long test_timeout_s;   /* what the deadline was set from, for messages */
    fz_verdict verdict;    /* the first failure decides */
    char why[512];
} fz_ctx;

double fz_now_ms(void); /* CLOCK_MONOTONIC */

/* Record a failure of kind v with evidence (printf); the first one counts.
 * Returns -1 so that checks can `return fz_fail(...)`. */
int fz_fail(fz_ctx *c, fz_verdict v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Evidence without a verdict (what was sent, what came back). */
void fz_evidence(fz_ctx *c, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- operations (target.c); each is a timed step; on a failure they
 * call fz_fail themselves (an API error is `interface`) and return < 0.
 * Bodies and results have the REST API's shapes whatever the interface
 * (MCP's tools take and give the same JSON). */
/* Create a sandbox (body as POST /v1/sandboxes; over MCP a `network`
 * policy is set right after with sandbox_network); its id goes to
 * c->sandbox. */
int fz_create(fz_ctx *c, json_t *body);
/* Run a shell command; out and err (each may be NULL) get stdout and stderr (to free). */
int fz_exec(fz_ctx *c, const char *cmd, int *exit_code, char **out, size_t *out_len, char **err, size_t *err_len);
/* body as POST .../commands (cmd, stdin, cwd, envs, timeout_s, ...); *result the command's result. */
int fz_exec_json(fz_ctx *c, json_t *body, json_t **result);
int fz_put(fz_ctx *c, const char *path, const void *data, size_t len);
int fz_get(fz_ctx *c, const char *path, char **data, size_t *len);

/* Moving data in, checked: each file uploaded, then what the sandbox holds
 * at each path measured inside (its size by `stat`, its SHA-256 by
 * `sha256sum`, one command for all) against what the harness sent.  This
 * is what tells the layers apart for uploads (docs/fuzz.md):
 *   - no such file, although the API acknowledged the upload: `sandbox`
 *     (the state inside is wrong; from outside, a file lost between the
 *     API's answer and the disk cannot be told from one never stored);
 *   - a file with other bytes (changed, shorter, longer): `interface`
 *     (the bytes changed on the way in);
 *   - an upload answered with another size than was sent: `interface`.
 * Paths are as fz_put takes them (relative ones from the home). */
typedef struct fz_upload {
    const char *path;
    const void *data;
    size_t len;
} fz_upload;
int fz_put_checked_many(fz_ctx *c, const fz_upload *files, size_t n);
int fz_put_checked(fz_ctx *c, const char *path, const void *data, size_t len);
/* Only the check, for files already uploaded (or made inside to be checked
 * against the harness's bytes: then a difference is the sandbox's). */
int fz_check_inside(fz_ctx *c, const fz_upload *files, size_t n, fz_verdict on_difference);

/* A command's output as a stream (REST's ndjson: every byte, however much,
 * while the client reads; MCP has no stream).  `switches` counts how often
 * consecutive chunks changed from one stream to the other. */
typedef struct fz_stream {
    char *out, *err;        /* stdout and stderr, decoded (NUL-terminated) */
    size_t out_len, err_len;
    size_t chunks, switches;
    long long dropped;      /* bytes a re-attach said were no longer buffered */
    long pid;               /* from `start` */
    json_t *end;            /* the `end` event, NULL if none came */
    char error[256];        /* an `error` event's message */
    size_t detach_after;    /* fz_attach: leave (close the stream) after this many output chunks; 0: never */
    bool detached;          /* it did */
} fz_stream;
void fz_stream_free(fz_stream *s);
/* body as POST .../commands, answered as a stream.  Over MCP: recorded
 * `unsupported`, -1. */
int fz_exec_stream(fz_ctx *c, json_t *body, fz_stream *s);
/* Re-attach to command pid's output (GET .../commands/{pid}/stream), until
 * its end, or until detach_after chunks (set it in *s before); over MCP
 * command_output (detach_after: once, without waiting; else waiting for the
 * end), as one chunk. */
int fz_attach(fz_ctx *c, long pid, fz_stream *s);

/* s single-quoted for sh (to free). */
char *fz_shq(const char *s);

/* End sandbox id (c->sandbox is left alone); it is no longer owned. */
int fz_delete(fz_ctx *c, const char *id);
/* The runner's clean-up: every owned sandbox deleted, one that has
 * already ended (409) left be; a failure is evidence, not a verdict. */
void fz_delete_owned(fz_ctx *c);
/* Sandbox id ended by itself (expired): nothing to delete. */
void fz_disown(fz_ctx *c, const char *id);
/* *sandbox (may be NULL): its record after (the new expires_at) */
int fz_set_timeout(fz_ctx *c, long timeout_s, json_t **sandbox);
/* An API time ("2026-12-04T03:22:54.113Z") in ms since the epoch; -1 if it is not one. */
double fz_time_ms(const char *rfc3339);
/* policy as PATCH .../network: {"mode": "none"|"allowlist"|"open", "allow": [...], "deny": [...]} */
int fz_set_network(fz_ctx *c, json_t *policy);
/* Sandbox id's record (also of an ended one) into *sandbox (to json_decref). */
int fz_info(fz_ctx *c, const char *id, json_t **sandbox);

/* The file API (not a command inside): entries as GET .../files/list,
 * one entry as .../files/stat. */
int fz_list(fz_ctx *c, const char *path, int depth, json_t **entries);
int fz_stat(fz_ctx *c, const char *path, json_t **entry);
int fz_mkdir(fz_ctx *c, const char *path);
int fz_move(fz_ctx *c, const char *from, const char *to);
/* The sandbox's commands ({"commands": [...]}), and a kill of one's process tree. */
int fz_commands(fz_ctx *c, json_t **list);
int fz_kill_command(fz_ctx *c, long pid);
/* The key's sandboxes, every state, with metadata key=value ({"sandboxes": [...]}). */
int fz_sandboxes(fz_ctx *c, const char *key, const char *value, json_t **list);

/* Pause and resume the test's sandbox; *sandbox (may be NULL) its record after. */
int fz_pause(fz_ctx *c, json_t **sandbox);
int fz_resume(fz_ctx *c, json_t **sandbox);
/* A snapshot of the test's sandbox, and N sandboxes forked from it
 * ({"snapshot": {...}, "sandboxes": [...]}); a snapshot deleted. */
int fz_snapshot(fz_ctx *c, json_t **snapshot);
int fz_fork(fz_ctx *c, int count, json_t **result);
/* 1 with code "conflict" while a sandbox made from it is still being ended. */
int fz_try_delete_snapshot(fz_ctx *c, const char *id, char code[64]);

/* Operations that should be refused.  Each returns 1 when the service
 * refused, with the error's code ("not_found", "conflict", "forbidden",
 * ...; "" if the answer named none) in code; 0 when it did it after all;
 * -1 when there was no answer (recorded as a failure). */
int fz_try_read(fz_ctx *c, const char *path, char code[64]);
int fz_try_remove(fz_ctx *c, const char *path, char code[64]);
/* "true" run in sandbox id */
int fz_try_exec_in(fz_ctx *c, const char *id, char code[64]);

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
    fz_domain_limits, fz_domain_security, fz_domain_data, fz_domain_sdlc, fz_domain_network;

/* ---- the MCP client (mcp_client.c) */
typedef struct fz_mcp fz_mcp;
/* A session on URL/mcp: initialize and notifications/initialized. */
fz_mcp *fz_mcp_open(const char *url, const char *key, sbx_error *err);
/* tools/call: *result is the CallToolResult (content, structuredContent,
 * isError; to json_decref).  < 0: no result (transport, protocol). */
int fz_mcp_call(fz_mcp *m, const char *tool, json_t *args, json_t **result, sbx_error *err);
/* A bound on each call from now on (ms; 0: 15 minutes), and whether the
 * last call was cut by it. */
void fz_mcp_set_timeout(fz_mcp *m, long ms);
bool fz_mcp_timed_out(const fz_mcp *m);
/* Ends the session (DELETE) and frees. */
void fz_mcp_close(fz_mcp *m);

/* ---- results (results.c) */
int fz_results_open(fz_results **out, const char *path, sbx_error *err);
void fz_results_close(fz_results *r);
int64_t fz_results_run(fz_results *r, json_t *options);
int64_t fz_results_test(fz_results *r, int64_t run, const char *domain, const char *name, uint64_t seed);
void fz_results_end(fz_results *r, int64_t test, fz_verdict v, const char *why, double ms);
void fz_results_step(fz_results *r, int64_t test, const char *op, double ms, bool ok);
void fz_results_evidence(fz_results *r, int64_t test, const char *what, const char *text);
void fz_results_finish(fz_results *r, int64_t run);
/* The options run was started with (to json_decref); NULL: no such run. */
json_t *fz_results_options(fz_results *r, int64_t run);
/* Resuming run: its tests that did not end are forgotten (they run again);
 * on_done gets the seed and verdict of each one that did.  < 0: the file
 * could not be changed. */
int fz_results_resume(fz_results *r, int64_t run, void (*on_done)(void *ctx, uint64_t seed, const char *verdict),
                      void *ctx);
/* The database, for the report. */
struct sqlite3 *fz_results_db(fz_results *r);

/* ---- reading a results file (query.c), for the report and the diff.
 * Each returns < 0 with err filled (what failed, on what). */
struct sqlite3;
struct sqlite3_stmt;
/* Open path read-only; an error unless it is an sbx fuzz results file. */
int fz_db_open(struct sqlite3 **db, const char *path, sbx_error *err);
int fz_db_prepare(struct sqlite3 *db, const char *sql, struct sqlite3_stmt **s, sbx_error *err);
/* 1: a row, 0: done, < 0: the query failed. */
int fz_db_step(struct sqlite3 *db, struct sqlite3_stmt *s, sbx_error *err);
/* Column i as text, "" for NULL. */
const char *fz_db_text(struct sqlite3_stmt *s, int i);
void fz_db_finalizep(struct sqlite3_stmt **s);
void fz_db_closep(struct sqlite3 **db);
#define _cleanup_stmt_ __attribute__((cleanup(fz_db_finalizep)))
#define _cleanup_db_ __attribute__((cleanup(fz_db_closep)))

typedef struct fz_run_info {
    json_t *options; /* as the run was started (fz_results_run) */
    int64_t started_at, ended_at; /* ms since the epoch; ended_at 0: not ended */
} fz_run_info;
/* *run 0: the newest run (its id is put in *run).  An unknown run is an
 * error that names the runs the file holds (path is for the messages). */
int fz_db_run(struct sqlite3 *db, const char *path, int64_t *run, fz_run_info *info, sbx_error *err);
void fz_run_info_clear(fz_run_info *info);

typedef struct fz_domain_stat {
    char domain[64];
    long tests, passed, failed, unsupported, unfinished; /* failed: interface, sandbox, harness, timeout */
} fz_domain_stat;
/* Per domain, by name (*out to free). */
int fz_db_domains(struct sqlite3 *db, int64_t run, fz_domain_stat **out, size_t *n, sbx_error *err);
/* passed / (ran - unsupported), ran counting the tests that ended: a
 * capability the target lacks is not a pass, nor a failure.  NAN when
 * nothing counts. */
double fz_pass_rate(long passed, long failed);
/* Whether verdict (NULL: unfinished) is a failure (interface, sandbox, harness, timeout). */
bool fz_verdict_failed(const char *verdict);

typedef struct fz_op_stat {
    char op[64];
    size_t n, failed;             /* steps, of which failed */
    double p50, p90, p99, max;    /* ms, nearest rank */
} fz_op_stat;
/* Per operation, by name (*out to free). */
int fz_db_ops(struct sqlite3 *db, int64_t run, fz_op_stat **out, size_t *n, sbx_error *err);

typedef struct fz_test_row {
    int64_t id;
    char *domain, *name, *verdict, *why; /* verdict NULL: unfinished */
    uint64_t seed;
    double ms;
} fz_test_row;
/* The run's tests for which the SQL condition where (a constant; NULL:
 * all) holds, by id. */
int fz_db_tests(struct sqlite3 *db, int64_t run, const char *where, fz_test_row **out, size_t *n, sbx_error *err);
void fz_db_tests_free(fz_test_row *t, size_t n);

/* The failure mode of a reason: its numbers, ids and paths folded
 * ("N", "<id>", "<path>"), so that failures that differ only by those
 * group together. */
void fz_reason_mode(const char *why, char *out, size_t size);

/* ---- the verbs */
int fz_run_main(int argc, char **argv);
int fz_report_main(int argc, char **argv);
int fz_diff_main(int argc, char **argv);

#endif
