/* target.c - the operations a test does on the service, each timed and
 * recorded as a step, over the interface the run chose: the REST API, or
 * MCP's tools (which take and give the same JSON, so the tests are one).
 * An answer the service should not give (an error status, a tool error, a
 * malformed body) is an `interface` failure here; whether the state inside
 * is right is the test's to check.
 *
 * Over MCP, what a tool cannot carry in one call is done the way an agent
 * would: a file larger than one files_write goes in parts appended inside
 * with command_run, and one larger than files_read's 8 MiB comes back in
 * parts read with command_run. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <errno.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Over MCP: a files_write carries at most this much (base64 makes it 4/3
 * of it, under /mcp's 64 MiB body limit); a part read back with command_run
 * part cut inside and read with files_read this much (its limit). */
#define MCP_PUT_PART (24u << 20)
#define MCP_GET_PART (8u << 20)

struct fz_target {
    fz_iface iface;
    char *url;
    sbx_http *http; /* REST */
    fz_mcp *mcp;    /* MCP: a session of its own */
};

fz_target *fz_target_new(fz_iface iface, const char *url, const char *key, sbx_error *err)
{
    fz_target *t = calloc(1, sizeof *t);
    if (!t || !(t->url = strdup(url))) {
        free(t);
        sbx_error_set(err, ENOMEM, "target");
        return NULL;
    }
    t->iface = iface;
    if (iface == FZ_REST ? !(t->http = sbx_http_new(url, key, err)) : !(t->mcp = fz_mcp_open(url, key, err))) {
        fz_target_free(t);
        return NULL;
    }
    return t;
}

void fz_target_free(fz_target *t)
{
    if (!t)
        return;
    sbx_http_free(t->http);
    fz_mcp_close(t->mcp);
    free(t->url);
    free(t);
}

fz_iface fz_target_iface(const fz_target *t)
{
    return t->iface;
}

const char *fz_target_url(const fz_target *t)
{
    return t->url;
}

bool fz_target_local(const fz_target *t)
{
    const char *u = t->url;
    if (strncmp(u, "unix:", 5) == 0)
        return true;
    const char *host = strstr(u, "://");
    host = host ? host + 3 : u;
    return strncmp(host, "127.", 4) == 0 || strncmp(host, "localhost", 9) == 0 || strncmp(host, "[::1]", 5) == 0;
}

const char *fz_verdict_name(fz_verdict v)
{
    static const char *const names[] = { "pass", "interface", "sandbox", "harness", "timeout", "unsupported" };
    return names[v];
}

uint64_t fz_next(fz_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t fz_below(fz_rng *r, uint64_t n)
{
    return n ? fz_next(r) % n : 0;
}

void fz_bytes(fz_rng *r, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = fz_next(r);
        for (size_t k = 0; k < 8 && i + k < n; k++)
            out[i + k] = (uint8_t) (v >> (8 * k));
    }
}

int fz_fail(fz_ctx *c, fz_verdict v, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->verdict == FZ_PASS) {
        c->verdict = v;
        snprintf(c->why, sizeof c->why, "%s", msg);
    }
    fz_results_evidence(c->res, c->test_row, fz_verdict_name(v), msg);
    return -1;
}

void fz_evidence(fz_ctx *c, const char *what, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    if (msg)
        fz_results_evidence(c->res, c->test_row, what, msg);
    free(msg);
}

void fz_sha256(const void *data, size_t len, char hex[65])
{
    unsigned char md[32];
    unsigned n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}


double fz_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double) (t1.tv_sec - t0->tv_sec) * 1e3 + (double) (t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static bool is_mcp(const fz_ctx *c)
{
    return c->t->iface == FZ_MCP;
}

/* Before each request: it may take what is left of the test's deadline,
 * no more (the service could hang: the test then ends as `timeout` and the
 * run goes on).  -1, recorded as `timeout`, when nothing is left. */
static int arm(fz_ctx *c, const char *op)
{
    long ms = 0;
    if (c->deadline > 0) {
        double left = c->deadline - fz_now_ms();
        if (left < 1)
            return fz_fail(c, FZ_TIMEOUT, "%s: the test's deadline (%ld s) had passed", op, c->test_timeout_s);
        ms = (long) left;
    }
    if (c->t->http)
        sbx_http_set_timeout(c->t->http, ms);
    if (c->t->mcp)
        fz_mcp_set_timeout(c->t->mcp, ms);
    return 0;
}

/* Whether the last request was cut by that bound. */
static bool was_cut(const fz_ctx *c)
{
    return c->t->http ? sbx_http_timed_out(c->t->http) : fz_mcp_timed_out(c->t->mcp);
}

/* An API failure: a timeout is its own kind, the rest is the interface's. */
static int api_failed(fz_ctx *c, const char *op, const char *msg)
{
    if (was_cut(c))
        return fz_fail(c, FZ_TIMEOUT, "%s: no answer within the test's deadline (%ld s): %s", op, c->test_timeout_s,
                       msg);
    bool timeout = strstr(msg, "timed out") || strstr(msg, "Timeout");
    return fz_fail(c, timeout ? FZ_TIMEOUT : FZ_INTERFACE, "%s: %s", op, msg);
}

/* ---- REST */

/* A JSON request, timed as step op.  0: *resp filled; 1: the API refused
 * (its code in code, its words in msg); -1: no answer at all (recorded). */
static int rest(fz_ctx *c, const char *op, const char *method, const char *path, json_t *body, sbx_http_resp *resp,
                char code[64], char *msg, size_t msg_size)
{
    if (arm(c, op) < 0)
        return -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    int r = sbx_http_json(c->t->http, method, path, body, resp, &err);
    fz_results_step(c->res, c->test_row, op, ms_since(&t0), r == 0);
    if (r == 0)
        return 0;
    snprintf(msg, msg_size, "%s", err.msg);
    if (sbx_http_status(c->t->http) == 0 || was_cut(c)) {
        api_failed(c, op, err.msg);
        return -1;
    }
    snprintf(code, 64, "%s", sbx_http_error_code(c->t->http));
    return 1;
}

static char *sandbox_path(const char *id, const char *suffix)
{
    char *p = NULL;
    if (asprintf(&p, "/v1/sandboxes/%s%s", id, suffix) < 0)
        p = NULL;
    return p;
}

static char *file_path(fz_ctx *c, const char *path)
{
    sbx_error err = { 0 };
    _cleanup_free_ char *e = sbx_http_escape(c->t->http, path, &err);
    char *p = NULL;
    if (e && asprintf(&p, "/v1/sandboxes/%s/files?path=%s", c->sandbox, e) < 0)
        p = NULL;
    return p;
}

/* ---- MCP */

/* The API's error code in a tool's words: sbx's tools quote it as
 * "(code)"; another server may not, and then the code is "". */
static void code_in(const char *text, char code[64])
{
    static const char *const codes[] = { "not_found",  "conflict",       "forbidden",  "invalid_request",
                                         "too_large",  "unauthorized",   "quota_exceeded", "insufficient_storage",
                                         "unavailable", "internal",      "bad_gateway" };
    code[0] = '\0';
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        char pat[40];
        snprintf(pat, sizeof pat, "(%s)", codes[i]);
        if (strstr(text, pat)) {
            snprintf(code, 64, "%s", codes[i]);
            return;
        }
    }
}

/* A tool call, timed as step op.  0: *out is its structuredContent;
 * 1: the tool failed (isError): its text in msg, the code in code, and
 * *out its structuredContent if it had one (command_run's for a command
 * that could not start), else NULL; -1: no result (recorded). */
static int tool(fz_ctx *c, const char *op, const char *name, json_t *args, json_t **out, char code[64], char *msg,
                size_t msg_size)
{
    *out = NULL;
    if (arm(c, op) < 0)
        return -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    _cleanup_json_ json_t *res = NULL;
    int r = fz_mcp_call(c->t->mcp, name, args, &res, &err);
    bool failed = r == 0 && json_is_true(json_object_get(res, "isError"));
    fz_results_step(c->res, c->test_row, op, ms_since(&t0), r == 0 && !failed);
    if (r < 0) {
        api_failed(c, name, err.msg);
        return -1;
    }
    json_t *st = json_object_get(res, "structuredContent");
    if (failed) {
        const char *text = json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
        snprintf(msg, msg_size, "%s", text ? text : "(a tool error without text)");
        code_in(msg, code);
        *out = json_incref(st);
        return 1;
    }
    if (!json_is_object(st)) {
        fz_fail(c, FZ_INTERFACE, "%s: the result has no structuredContent", name);
        return -1;
    }
    *out = json_incref(st);
    return 0;
}

/* A call that must succeed: anything else is recorded as the interface's. */
static json_t *must(fz_ctx *c, const char *op, const char *name, json_t *args)
{
    char code[64], msg[512];
    json_t *out = NULL;
    int r = tool(c, op, name, args, &out, code, msg, sizeof msg);
    if (r == 1) {
        json_decref(out);
        fz_fail(c, FZ_INTERFACE, "%s: %s", name, msg);
        return NULL;
    }
    return r == 0 ? out : NULL;
}

static char *base64(const void *data, size_t len)
{
    size_t n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    char *b = malloc(n);
    if (b)
        sodium_bin2base64(b, n, data, len, sodium_base64_VARIANT_ORIGINAL);
    return b;
}

/* ---- the operations */

/* id becomes the test's sandbox, and one it owns. */
static void own(fz_ctx *c, const char *id)
{
    snprintf(c->sandbox, sizeof c->sandbox, "%s", id);
    if (c->n_owned < FZ_MAX_OWNED)
        snprintf(c->owned[c->n_owned++], sizeof c->owned[0], "%s", id);
    else
        fz_evidence(c, "harness", "more than %d sandboxes at once: %s is not deleted after the test", FZ_MAX_OWNED, id);
}

void fz_disown(fz_ctx *c, const char *id)
{
    for (size_t i = 0; i < c->n_owned; i++)
        if (strcmp(c->owned[i], id) == 0) {
            memmove(c->owned[i], c->owned[i + 1], (c->n_owned - i - 1) * sizeof c->owned[0]);
            c->n_owned--;
            return;
        }
}

int fz_create(fz_ctx *c, json_t *body)
{
    json_t *sb = NULL;
    _cleanup_json_ json_t *owned = NULL;
    if (c->template_ && !json_object_get(body, "template"))
        json_object_set_new(body, "template", json_string(c->template_));
    /* every sandbox a test makes says whose it is: `sbx ls`, the API's
     * metadata filter (and the test suite's broken target) find a test's
     * sandboxes by it */
    json_t *meta = json_object_get(body, "metadata");
    if (!json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(body, "metadata", meta);
    }
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long) c->seed);
    json_object_set_new(meta, "sbx.fuzz", json_string("1"));
    json_object_set_new(meta, "sbx.fuzz.seed", json_string(seed));
    if (c->name)
        json_object_set_new(meta, "test", json_string(c->name));
    if (is_mcp(c)) {
        _cleanup_json_ json_t *args = json_deep_copy(body);
        json_t *network = json_incref(json_object_get(args, "network"));
        json_object_del(args, "network");
        sb = owned = must(c, "create", "sandbox_create", args);
        const char *id = json_string_value(json_object_get(sb, "id"));
        if (id && strlen(id) == 32)
            own(c, id);
        int r = sb && network && c->sandbox[0] ? fz_set_network(c, network) : 0;
        json_decref(network);
        if (!sb || r < 0)
            return -1;
    } else {
        char code[64], msg[512];
        _cleanup_http_resp_ sbx_http_resp resp = { 0 };
        int r = rest(c, "create", "POST", "/v1/sandboxes", body, &resp, code, msg, sizeof msg);
        if (r != 0)
            return r < 0 ? -1 : fz_fail(c, FZ_INTERFACE, "create: %s", msg);
        sb = owned = json_incref(resp.json);
        const char *id = json_string_value(json_object_get(sb, "id"));
        if (id && strlen(id) == 32)
            own(c, id);
    }
    return c->sandbox[0] ? 0 : fz_fail(c, FZ_INTERFACE, "create: the answer has no sandbox id");
}

/* stdout/stderr of a command result, decoded */
static int take_stream(fz_ctx *c, json_t *res, const char *name, char **out, size_t *len)
{
    if (!out)
        return 0;
    char enc_name[32];
    snprintf(enc_name, sizeof enc_name, "%s_encoding", name);
    json_t *v = json_object_get(res, name);
    const char *enc = json_string_value(json_object_get(res, enc_name));
    if (!json_is_string(v))
        return fz_fail(c, FZ_INTERFACE, "exec: no '%s' in the answer", name);
    size_t n = json_string_length(v);
    *out = malloc(n + 1);
    if (!*out)
        return fz_fail(c, FZ_HARNESS, "exec: out of memory");
    if (enc && strcmp(enc, "base64") == 0) {
        if (sodium_base642bin((unsigned char *) *out, n + 1, json_string_value(v), n, NULL, len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0)
            return fz_fail(c, FZ_INTERFACE, "exec: '%s' is not valid base64", name);
    } else {
        memcpy(*out, json_string_value(v), n);
        *len = n;
    }
    (*out)[*len] = '\0';
    return 0;
}

int fz_exec_json(fz_ctx *c, json_t *body, json_t **result)
{
    *result = NULL;
    char code[64], msg[512];
    if (is_mcp(c)) {
        _cleanup_json_ json_t *args = json_deep_copy(body);
        json_object_set_new(args, "sandbox_id", json_string(c->sandbox));
        int r = tool(c, "exec", "command_run", args, result, code, msg, sizeof msg);
        if (r == 1 && !*result) /* a command that could not start still has its result */
            return fz_fail(c, FZ_INTERFACE, "command_run: %s", msg);
        return r < 0 ? -1 : 0;
    }
    _cleanup_free_ char *path = sandbox_path(c->sandbox, "/commands");
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = rest(c, "exec", "POST", path, body, &resp, code, msg, sizeof msg);
    if (r != 0)
        return r < 0 ? -1 : fz_fail(c, FZ_INTERFACE, "exec: %s", msg);
    *result = json_incref(resp.json);
    return *result ? 0 : fz_fail(c, FZ_INTERFACE, "exec: the answer is not JSON");
}

int fz_exec(fz_ctx *c, const char *cmd, int *exit_code, char **out, size_t *out_len, char **err_out, size_t *err_len)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", cmd, "timeout_s", 120);
    json_t *res = NULL;
    if (out)
        *out = NULL;
    if (err_out)
        *err_out = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    json_t *code = json_object_get(res, "exit_code");
    *exit_code = json_is_integer(code) ? (int) json_integer_value(code) : -1;
    if (json_is_true(json_object_get(res, "timed_out")))
        fz_evidence(c, "exec", "'%s' timed out", cmd);
    int r = take_stream(c, res, "stdout", out, out_len);
    if (r == 0)
        r = take_stream(c, res, "stderr", err_out, err_len);
    json_decref(res);
    return r;
}

/* A shell script with its arguments ($1...), as command_run's argv: no
 * quoting of paths needed.  Takes the reference to args_list (callers
 * build it in the call). */
static int mcp_sh(fz_ctx *c, const char *op, const char *script, json_t *args_list, json_t **result)
{
    _cleanup_json_ json_t *list = args_list;
    _cleanup_json_ json_t *argv = json_pack("[s, s, s, s]", "sh", "-c", script, "sh"); /* $0, then $1... */
    json_array_extend(argv, list);
    _cleanup_json_ json_t *args =
        json_pack("{s:s, s:O, s:i}", "sandbox_id", c->sandbox, "argv", argv, "timeout_s", 300);
    *result = must(c, op, "command_run", args);
    if (!*result)
        return -1;
    json_t *code = json_object_get(*result, "exit_code");
    if (!json_is_integer(code) || json_integer_value(code) != 0) {
        const char *e = json_string_value(json_object_get(*result, "stderr"));
        return fz_fail(c, FZ_INTERFACE, "%s in parts with command_run: exit %lld: %.200s", op,
                       (long long) json_integer_value(code), e ? e : "");
    }
    return 0;
}

static int mcp_put(fz_ctx *c, const char *path, const void *data, size_t len)
{
    /* the first part is the file; each next one is written beside it and
     * appended inside, as an agent with these tools would */
    _cleanup_free_ char *part = NULL;
    if (asprintf(&part, "%s.fzpart", path) < 0)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    for (size_t off = 0; off == 0 || off < len; off += MCP_PUT_PART) {
        size_t n = len - off < MCP_PUT_PART ? len - off : MCP_PUT_PART;
        _cleanup_free_ char *b64 = base64((const char *) data + off, n);
        _cleanup_json_ json_t *args = json_pack("{s:s, s:s, s:s, s:s}", "sandbox_id", c->sandbox, "path",
                                                off ? part : path, "content", b64 ? b64 : "", "encoding", "base64");
        if (!b64 || !args)
            return fz_fail(c, FZ_HARNESS, "out of memory");
        _cleanup_json_ json_t *st = must(c, "upload", "files_write", args);
        if (!st)
            return -1;
        json_t *size = json_object_get(st, "size");
        if (!json_is_integer(size) || (size_t) json_integer_value(size) != n)
            return fz_fail(c, FZ_INTERFACE, "files_write of %s: sent %zu bytes, the tool says %lld arrived", path, n,
                           (long long) json_integer_value(size));
        if (off) {
            _cleanup_json_ json_t *res = NULL;
            if (mcp_sh(c, "upload", "cat -- \"$1\" >> \"$2\" && rm -f -- \"$1\"", json_pack("[s, s]", part, path),
                       &res) < 0)
                return -1;
        }
        if (len == 0)
            break;
    }
    return 0;
}

int fz_put(fz_ctx *c, const char *path, const void *data, size_t len)
{
    if (is_mcp(c))
        return mcp_put(c, path, data, len);
    _cleanup_free_ char *p = file_path(c, path);
    FILE *in = len ? fmemopen((void *) data, len, "r") : fopen("/dev/null", "re");
    if (!p || !in) {
        if (in)
            fclose(in);
        return fz_fail(c, FZ_HARNESS, "upload of %s: out of memory", path);
    }
    if (arm(c, "upload") < 0) {
        fclose(in);
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = sbx_http_upload(c->t->http, p, in, (int64_t) len, &resp, &err);
    fclose(in);
    fz_results_step(c->res, c->test_row, "upload", ms_since(&t0), r == 0);
    if (r < 0)
        return api_failed(c, "upload", err.msg);
    json_t *size = json_object_get(resp.json, "size");
    if (json_is_integer(size) && (size_t) json_integer_value(size) != len)
        return fz_fail(c, FZ_INTERFACE, "upload of %s: sent %zu bytes, the API says %lld arrived", path, len,
                       (long long) json_integer_value(size));
    return 0;
}

/* Append a base64 or text value to a memory stream. */
static int append_decoded(fz_ctx *c, FILE *out, json_t *v, const char *enc, const char *what)
{
    size_t n = json_string_length(v), got = 0;
    if (enc && strcmp(enc, "base64") == 0) {
        _cleanup_free_ unsigned char *bin = malloc(n + 1);
        if (!bin)
            return fz_fail(c, FZ_HARNESS, "out of memory");
        if (sodium_base642bin(bin, n + 1, json_string_value(v), n, NULL, &got, NULL, sodium_base64_VARIANT_ORIGINAL))
            return fz_fail(c, FZ_INTERFACE, "%s: the content is not valid base64", what);
        fwrite(bin, 1, got, out);
    } else {
        fwrite(json_string_value(v), 1, n, out);
    }
    return 0;
}

/* One files_read of path, appended to out.  1: refused (msg says why). */
static int mcp_read(fz_ctx *c, const char *path, FILE *out, char *msg, size_t msg_size)
{
    char code[64];
    _cleanup_json_ json_t *args =
        json_pack("{s:s, s:s, s:s}", "sandbox_id", c->sandbox, "path", path, "encoding", "base64");
    _cleanup_json_ json_t *st = NULL;
    int r = tool(c, "download", "files_read", args, &st, code, msg, msg_size);
    if (r != 0)
        return r;
    json_t *content = json_object_get(st, "content");
    if (!json_is_string(content))
        return fz_fail(c, FZ_INTERFACE, "files_read of %s: no content", path);
    long before = ftell(out);
    if (append_decoded(c, out, content, json_string_value(json_object_get(st, "encoding")), "files_read") < 0)
        return -1;
    fflush(out);
    json_t *size = json_object_get(st, "size");
    if (json_is_integer(size) && json_integer_value(size) != ftell(out) - before)
        return fz_fail(c, FZ_INTERFACE, "files_read of %s: size %lld, content %ld bytes", path,
                       (long long) json_integer_value(size), ftell(out) - before);
    return 0;
}

static int mcp_get(fz_ctx *c, const char *path, FILE *out)
{
    char msg[512];
    int r = mcp_read(c, path, out, msg, sizeof msg);
    if (r <= 0)
        return r;
    if (!strstr(msg, "returns at most"))
        return fz_fail(c, FZ_INTERFACE, "files_read of %s: %s", path, msg);
    /* too large for one files_read: cut inside into parts that are not
     * (command_run, which returns no bytes), each read with files_read */
    _cleanup_free_ char *part = NULL;
    if (asprintf(&part, "%s.fzpart", path) < 0)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    for (size_t off = 0;; off += MCP_GET_PART) {
        char from[32], count[32];
        snprintf(from, sizeof from, "%zu", off + 1);
        snprintf(count, sizeof count, "%u", MCP_GET_PART);
        _cleanup_json_ json_t *res = NULL;
        if (mcp_sh(c, "download", "tail -c +\"$1\" -- \"$2\" | head -c \"$3\" > \"$4\"",
                   json_pack("[s, s, s, s]", from, path, count, part), &res) < 0)
            return -1;
        long before = ftell(out);
        r = mcp_read(c, part, out, msg, sizeof msg);
        if (r != 0)
            return r < 0 ? -1 : fz_fail(c, FZ_INTERFACE, "files_read of a part of %s: %s", path, msg);
        if (ftell(out) - before < (long) MCP_GET_PART)
            break;
    }
    _cleanup_json_ json_t *res = NULL;
    return mcp_sh(c, "download", "rm -f -- \"$1\"", json_pack("[s]", part), &res);
}

int fz_get(fz_ctx *c, const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *out = open_memstream(data, len);
    _cleanup_free_ char *p = is_mcp(c) ? NULL : file_path(c, path);
    if (!out || (!is_mcp(c) && !p)) {
        if (out)
            fclose(out);
        return fz_fail(c, FZ_HARNESS, "download of %s: out of memory", path);
    }
    int r;
    if (is_mcp(c)) {
        r = mcp_get(c, path, out);
    } else if ((r = arm(c, "download")) == 0) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        sbx_error err = { 0 };
        r = sbx_http_download(c->t->http, p, out, &err);
        fz_results_step(c->res, c->test_row, "download", ms_since(&t0), r == 0);
        if (r < 0)
            api_failed(c, "download", err.msg);
    }
    fclose(out);
    if (r < 0) {
        free(*data);
        *data = NULL;
        *len = 0;
        return -1;
    }
    return 0;
}

/* A call that must succeed, over either interface; *out its result. */
static int call(fz_ctx *c, const char *op, const char *method, const char *rest_path, const char *tool_name,
                json_t *body, json_t *args, json_t **out)
{
    if (out)
        *out = NULL;
    if (is_mcp(c)) {
        json_t *st = must(c, op, tool_name, args);
        if (!st)
            return -1;
        if (out)
            *out = st;
        else
            json_decref(st);
        return 0;
    }
    char code[64], msg[512];
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = rest(c, op, method, rest_path, body, &resp, code, msg, sizeof msg);
    if (r != 0)
        return r < 0 ? -1 : fz_fail(c, FZ_INTERFACE, "%s %s: %s", method, rest_path, msg);
    if (out)
        *out = json_incref(resp.json);
    return 0;
}

int fz_delete(fz_ctx *c, const char *id)
{
    _cleanup_free_ char *path = sandbox_path(id, "");
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", id);
    char copy[33];
    snprintf(copy, sizeof copy, "%s", id); /* id may be one of c->owned */
    if (call(c, "delete", "DELETE", path, "sandbox_kill", NULL, args, NULL) < 0)
        return -1;
    fz_disown(c, copy);
    return 0;
}

int fz_set_timeout(fz_ctx *c, long timeout_s, json_t **sandbox)
{
    _cleanup_free_ char *path = sandbox_path(c->sandbox, "/timeout");
    _cleanup_json_ json_t *body = json_pack("{s:I}", "timeout_s", (json_int_t) timeout_s);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:I}", "sandbox_id", c->sandbox, "timeout_s", (json_int_t) timeout_s);
    return call(c, "timeout", "POST", path, "sandbox_set_timeout", body, args, sandbox);
}

double fz_time_ms(const char *rfc3339)
{
    struct tm tm = { 0 };
    int ms = 0, n = 0;
    if (!rfc3339 || sscanf(rfc3339, "%d-%d-%dT%d:%d:%d.%dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                           &tm.tm_min, &tm.tm_sec, &ms, &n) != 7 || rfc3339[n] != '\0')
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double) timegm(&tm) * 1e3 + ms;
}

int fz_set_network(fz_ctx *c, json_t *policy)
{
    _cleanup_free_ char *path = sandbox_path(c->sandbox, "/network");
    _cleanup_json_ json_t *args = json_deep_copy(policy);
    json_object_set_new(args, "sandbox_id", json_string(c->sandbox));
    return call(c, "network", "PATCH", path, "sandbox_network", policy, args, NULL);
}

int fz_info(fz_ctx *c, const char *id, json_t **sandbox)
{
    _cleanup_free_ char *path = sandbox_path(id, "");
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", id);
    return call(c, "info", "GET", path, "sandbox_info", NULL, args, sandbox);
}

/* A path with a query for the file API: P escaped, then extra. */
static char *files_query(fz_ctx *c, const char *what, const char *path, const char *extra)
{
    sbx_error err = { 0 };
    _cleanup_free_ char *e = sbx_http_escape(c->t->http, path, &err);
    char *p = NULL;
    if (e && asprintf(&p, "/v1/sandboxes/%s/files/%s?path=%s%s", c->sandbox, what, e, extra) < 0)
        p = NULL;
    return p;
}

int fz_list(fz_ctx *c, const char *path, int depth, json_t **entries)
{
    char extra[32];
    snprintf(extra, sizeof extra, "&depth=%d", depth);
    _cleanup_free_ char *p = is_mcp(c) ? NULL : files_query(c, "list", path, extra);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s, s:i}", "sandbox_id", c->sandbox, "path", path, "depth", depth);
    _cleanup_json_ json_t *out = NULL;
    if (call(c, "list", "GET", p, "files_list", NULL, args, &out) < 0)
        return -1;
    *entries = json_incref(json_object_get(out, "entries"));
    return json_is_array(*entries) ? 0 : fz_fail(c, FZ_INTERFACE, "a listing without entries");
}

int fz_stat(fz_ctx *c, const char *path, json_t **entry)
{
    _cleanup_free_ char *p = is_mcp(c) ? NULL : files_query(c, "stat", path, "");
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s}", "sandbox_id", c->sandbox, "path", path);
    return call(c, "stat", "GET", p, "files_stat", NULL, args, entry);
}

int fz_mkdir(fz_ctx *c, const char *path)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/files/mkdir");
    _cleanup_json_ json_t *body = json_pack("{s:s}", "path", path);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s}", "sandbox_id", c->sandbox, "path", path);
    return call(c, "mkdir", "POST", p, "files_mkdir", body, args, NULL);
}

int fz_move(fz_ctx *c, const char *from, const char *to)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/files/move");
    _cleanup_json_ json_t *body = json_pack("{s:s, s:s}", "from", from, "to", to);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s, s:s}", "sandbox_id", c->sandbox, "from", from, "to", to);
    return call(c, "move", "POST", p, "files_move", body, args, NULL);
}

int fz_commands(fz_ctx *c, json_t **list)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/commands");
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", c->sandbox);
    return call(c, "commands", "GET", p, "command_list", NULL, args, list);
}

int fz_kill_command(fz_ctx *c, long pid)
{
    char suffix[48];
    snprintf(suffix, sizeof suffix, "/commands/%ld", pid);
    _cleanup_free_ char *p = sandbox_path(c->sandbox, suffix);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:I}", "sandbox_id", c->sandbox, "pid", (json_int_t) pid);
    return call(c, "kill", "DELETE", p, "command_kill", NULL, args, NULL);
}

int fz_sandboxes(fz_ctx *c, const char *key, const char *value, json_t **list)
{
    sbx_error err = { 0 };
    _cleanup_free_ char *ek = is_mcp(c) ? NULL : sbx_http_escape(c->t->http, key, &err);
    _cleanup_free_ char *ev = is_mcp(c) ? NULL : sbx_http_escape(c->t->http, value, &err);
    _cleanup_free_ char *p = NULL;
    if (ek && ev && asprintf(&p, "/v1/sandboxes?state=all&metadata.%s=%s", ek, ev) < 0)
        p = NULL;
    _cleanup_json_ json_t *args = json_pack("{s:s, s:{s:s}}", "state", "all", "metadata", key, value);
    return call(c, "list", "GET", p, "sandbox_list", NULL, args, list);
}

int fz_pause(fz_ctx *c, json_t **sandbox)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/pause");
    _cleanup_json_ json_t *body = json_object();
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", c->sandbox);
    return call(c, "pause", "POST", p, "sandbox_pause", body, args, sandbox);
}

int fz_resume(fz_ctx *c, json_t **sandbox)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/resume");
    _cleanup_json_ json_t *body = json_object();
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", c->sandbox);
    return call(c, "resume", "POST", p, "sandbox_resume", body, args, sandbox);
}

int fz_snapshot(fz_ctx *c, json_t **snapshot)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/snapshots");
    _cleanup_json_ json_t *body = json_object();
    _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", c->sandbox);
    return call(c, "snapshot", "POST", p, "sandbox_snapshot", body, args, snapshot);
}

int fz_fork(fz_ctx *c, int count, json_t **result)
{
    _cleanup_free_ char *p = sandbox_path(c->sandbox, "/fork");
    _cleanup_json_ json_t *body = json_pack("{s:i}", "count", count);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:i}", "sandbox_id", c->sandbox, "count", count);
    if (call(c, "fork", "POST", p, "sandbox_fork", body, args, result) < 0)
        return -1;
    char mine[33];
    snprintf(mine, sizeof mine, "%s", c->sandbox);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(*result, "sandboxes"), i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (id && strlen(id) == 32)
            own(c, id);
    }
    snprintf(c->sandbox, sizeof c->sandbox, "%s", mine);
    return 0;
}

/* A call that should be refused: 1 and the code if it was. */
static int refused(fz_ctx *c, const char *op, const char *method, const char *rest_path, const char *tool_name,
                   json_t *body, json_t *args, char code[64])
{
    char msg[512];
    code[0] = '\0';
    if (is_mcp(c)) {
        _cleanup_json_ json_t *out = NULL;
        int r = tool(c, op, tool_name, args, &out, code, msg, sizeof msg);
        if (r == 1)
            fz_evidence(c, "refused", "%s: %s", tool_name, msg);
        return r;
    }
    if (!rest_path)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = rest(c, op, method, rest_path, body, &resp, code, msg, sizeof msg);
    if (r == 1)
        fz_evidence(c, "refused", "%s %s: %s", method, rest_path, msg);
    return r;
}

int fz_try_read(fz_ctx *c, const char *path, char code[64])
{
    if (is_mcp(c)) {
        _cleanup_json_ json_t *args = json_pack("{s:s, s:s}", "sandbox_id", c->sandbox, "path", path);
        return refused(c, "download", NULL, NULL, "files_read", NULL, args, code);
    }
    /* a download: the file's bytes when it is not refused (not JSON) */
    _cleanup_free_ char *p = file_path(c, path);
    char *bytes = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&bytes, &n);
    if (!p || !out) {
        if (out)
            fclose(out);
        return fz_fail(c, FZ_HARNESS, "out of memory");
    }
    if (arm(c, "download") < 0) {
        fclose(out);
        free(bytes);
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    int r = sbx_http_download(c->t->http, p, out, &err);
    fclose(out);
    free(bytes);
    fz_results_step(c->res, c->test_row, "download", ms_since(&t0), r == 0);
    if (r == 0)
        return 0;
    if (sbx_http_status(c->t->http) == 0 || was_cut(c))
        return api_failed(c, "download", err.msg);
    snprintf(code, 64, "%s", sbx_http_error_code(c->t->http));
    fz_evidence(c, "refused", "GET %s: %s", p, err.msg);
    return 1;
}

int fz_try_remove(fz_ctx *c, const char *path, char code[64])
{
    _cleanup_free_ char *p = is_mcp(c) ? NULL : file_path(c, path);
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s}", "sandbox_id", c->sandbox, "path", path);
    return refused(c, "remove", "DELETE", p, "files_remove", NULL, args, code);
}

int fz_try_delete_snapshot(fz_ctx *c, const char *id, char code[64])
{
    _cleanup_free_ char *p = NULL;
    if (asprintf(&p, "/v1/snapshots/%s", id) < 0)
        p = NULL;
    _cleanup_json_ json_t *args = json_pack("{s:s}", "snapshot_id", id);
    return refused(c, "delete", "DELETE", p, "snapshot_delete", NULL, args, code);
}

int fz_try_exec_in(fz_ctx *c, const char *id, char code[64])
{
    _cleanup_free_ char *p = sandbox_path(id, "/commands");
    _cleanup_json_ json_t *body = json_pack("{s:s}", "cmd", "true");
    _cleanup_json_ json_t *args = json_pack("{s:s, s:s}", "sandbox_id", id, "cmd", "true");
    return refused(c, "exec", "POST", p, "command_run", body, args, code);
}

void fz_delete_owned(fz_ctx *c)
{
    while (c->n_owned) {
        char id[33], code[64];
        snprintf(id, sizeof id, "%s", c->owned[c->n_owned - 1]);
        c->n_owned--;
        _cleanup_free_ char *p = sandbox_path(id, "");
        _cleanup_json_ json_t *args = json_pack("{s:s}", "sandbox_id", id);
        int r = refused(c, "delete", "DELETE", p, "sandbox_kill", NULL, args, code);
        /* conflict: it has ended already (expired, or a fork's source gone) */
        if (r == 1 && strcmp(code, "conflict") != 0)
            fz_fail(c, FZ_INTERFACE, "deleting sandbox %s after the test: refused (%s)", id, code);
    }
}

char *fz_shq(const char *s)
{
    size_t n = strlen(s);
    char *q = malloc(4 * n + 3), *p = q;
    if (!q)
        return NULL;
    *p++ = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else {
            *p++ = *s;
        }
    }
    *p++ = '\'';
    *p = '\0';
    return q;
}

/* ---- checked uploads */

int fz_check_inside(fz_ctx *c, const fz_upload *files, size_t n, fz_verdict on_difference)
{
    if (!n)
        return 0;
    /* one line per path, in order: "SIZE SHA256", or "missing" */
    char *cmd = NULL;
    size_t cmd_len = 0;
    FILE *f = open_memstream(&cmd, &cmd_len);
    if (!f)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    fputs("for f in", f);
    for (size_t i = 0; i < n; i++) {
        _cleanup_free_ char *q = fz_shq(files[i].path);
        fprintf(f, " %s", q ? q : "''");
    }
    fputs("; do if [ -f \"$f\" ] && s=$(stat -c %s -- \"$f\") && h=$(sha256sum < \"$f\"); then "
          "echo \"$s ${h%% *}\"; else echo missing; fi; done",
          f);
    fclose(f);
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    size_t ol, el;
    int r = fz_exec(c, cmd, &code, &out, &ol, &err, &el);
    free(cmd);
    if (r < 0)
        return -1;
    const char *line = out;
    for (size_t i = 0; i < n; i++) {
        const char *nl = line ? strchr(line, '\n') : NULL;
        if (code != 0 || !nl)
            return fz_fail(c, FZ_SANDBOX, "measuring %zu uploaded files inside failed (exit %d, %zu lines): %.300s",
                           n, code, i, err ? err : "");
        char want[65], got[65] = "";
        fz_sha256(files[i].data, files[i].len, want);
        unsigned long long size = 0;
        if (strncmp(line, "missing\n", 8) == 0)
            return fz_fail(c, FZ_SANDBOX,
                           "%s is not in the sandbox although the API acknowledged its upload (%zu bytes, sha256 %s)",
                           files[i].path, files[i].len, want);
        if (sscanf(line, "%llu %64[0-9a-f]", &size, got) != 2)
            return fz_fail(c, FZ_SANDBOX, "measuring %s inside printed %.*s", files[i].path, (int) (nl - line), line);
        if (size != files[i].len || strcmp(got, want) != 0) {
            if (on_difference == FZ_INTERFACE)
                return fz_fail(c, FZ_INTERFACE,
                               "%s: uploaded %zu bytes sha256 %s, the sandbox holds %llu bytes sha256 %s (the bytes "
                               "changed on the way in)",
                               files[i].path, files[i].len, want, size, got);
            return fz_fail(c, on_difference, "%s: the harness expects %zu bytes sha256 %s, the sandbox holds %llu bytes "
                                             "sha256 %s",
                           files[i].path, files[i].len, want, size, got);
        }
        line = nl + 1;
    }
    return 0;
}

int fz_put_checked_many(fz_ctx *c, const fz_upload *files, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fz_put(c, files[i].path, files[i].data, files[i].len) < 0)
            return -1;
    return fz_check_inside(c, files, n, FZ_INTERFACE);
}

int fz_put_checked(fz_ctx *c, const char *path, const void *data, size_t len)
{
    fz_upload u = { path, data, len };
    return fz_put_checked_many(c, &u, 1);
}

/* ---- streams (REST ndjson) */

typedef struct stream_state {
    fz_ctx *c;
    fz_stream *s;
    FILE *out, *err;
    int last; /* 1 stdout, 2 stderr, 0 none yet */
} stream_state;

static int on_stream_line(void *ctx, json_t *line, sbx_error *err)
{
    stream_state *st = ctx;
    fz_stream *s = st->s;
    const char *type = json_string_value(json_object_get(line, "type"));
    if (!type)
        return sbx_error_set(err, 0, "a stream line without a type");
    bool is_out = strcmp(type, "stdout") == 0, is_err = strcmp(type, "stderr") == 0;
    if (is_out || is_err) {
        json_t *data = json_object_get(line, "data");
        if (!json_is_string(data))
            return sbx_error_set(err, 0, "a %s chunk without data", type);
        const char *enc = json_string_value(json_object_get(line, "encoding"));
        FILE *to = is_out ? st->out : st->err;
        size_t n = json_string_length(data);
        if (enc && strcmp(enc, "base64") == 0) {
            _cleanup_free_ unsigned char *bin = malloc(n + 1);
            size_t got = 0;
            if (!bin || sodium_base642bin(bin, n + 1, json_string_value(data), n, NULL, &got, NULL,
                                          sodium_base64_VARIANT_ORIGINAL) != 0)
                return sbx_error_set(err, 0, "a %s chunk that is not valid base64", type);
            fwrite(bin, 1, got, to);
        } else {
            fwrite(json_string_value(data), 1, n, to);
        }
        int which = is_out ? 1 : 2;
        s->switches += st->last && st->last != which;
        st->last = which;
        s->chunks++;
        if (s->detach_after && s->chunks >= s->detach_after) {
            s->detached = true; /* not a failure: ends the transfer, as a client going away */
            return sbx_error_set(err, 0, "detached");
        }
    } else if (strcmp(type, "start") == 0) {
        s->pid = (long) json_integer_value(json_object_get(line, "pid"));
    } else if (strcmp(type, "dropped") == 0) {
        s->dropped += (long long) json_integer_value(json_object_get(line, "bytes"));
    } else if (strcmp(type, "end") == 0) {
        json_decref(s->end);
        s->end = json_incref(line);
    } else if (strcmp(type, "error") == 0) {
        snprintf(s->error, sizeof s->error, "%s: %s", json_string_value(json_object_get(line, "code")) ?: "?",
                 json_string_value(json_object_get(line, "message")) ?: "");
    }
    return 0;
}

void fz_stream_free(fz_stream *s)
{
    free(s->out);
    free(s->err);
    json_decref(s->end);
    memset(s, 0, sizeof *s);
}

static int stream(fz_ctx *c, const char *op, const char *method, const char *path, json_t *body, fz_stream *s)
{
    size_t detach_after = s->detach_after;
    memset(s, 0, sizeof *s);
    s->detach_after = detach_after;
    stream_state st = { .c = c, .s = s };
    st.out = open_memstream(&s->out, &s->out_len);
    st.err = open_memstream(&s->err, &s->err_len);
    if (!st.out || !st.err || !path) {
        if (st.out)
            fclose(st.out);
        if (st.err)
            fclose(st.err);
        return fz_fail(c, FZ_HARNESS, "out of memory");
    }
    int r = arm(c, op);
    if (r == 0) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        sbx_error err = { 0 };
        r = sbx_http_ndjson(c->t->http, method, path, body, on_stream_line, NULL, &st, &err);
        if (r < 0 && s->detached)
            r = 0;
        fz_results_step(c->res, c->test_row, op, ms_since(&t0), r == 0);
        if (r < 0)
            api_failed(c, op, err.msg);
    }
    fclose(st.out);
    fclose(st.err);
    if (r < 0)
        return -1;
    if (!s->end && !s->detached)
        return fz_fail(c, FZ_INTERFACE, "%s: the stream ended without an end event%s%s", op, s->error[0] ? ": " : "",
                       s->error);
    return 0;
}

int fz_exec_stream(fz_ctx *c, json_t *body, fz_stream *s)
{
    memset(s, 0, sizeof *s);
    if (is_mcp(c))
        return fz_fail(c, FZ_UNSUPPORTED, "MCP's command_run has no output stream");
    _cleanup_free_ char *path = sandbox_path(c->sandbox, "/commands");
    return stream(c, "exec", "POST", path, body, s);
}

/* Over MCP: command_output, once without waiting (a client that looks and
 * leaves, as detach_after asks) or waiting until the command ends. */
static int mcp_attach(fz_ctx *c, long pid, fz_stream *s)
{
    double wait = s->detach_after ? 0 : 60;
    if (c->deadline > 0 && (c->deadline - fz_now_ms()) / 1e3 - 1 < wait)
        wait = (c->deadline - fz_now_ms()) / 1e3 - 1 > 0 ? (c->deadline - fz_now_ms()) / 1e3 - 1 : 0;
    _cleanup_json_ json_t *args = json_pack("{s:s, s:I, s:f}", "sandbox_id", c->sandbox, "pid", (json_int_t) pid,
                                            "wait_s", wait);
    _cleanup_json_ json_t *res = must(c, "attach", "command_output", args);
    if (!res)
        return -1;
    s->pid = (long) json_integer_value(json_object_get(res, "pid"));
    s->dropped = json_integer_value(json_object_get(res, "dropped_bytes"));
    s->chunks = 1;
    s->detached = s->detach_after != 0;
    if (take_stream(c, res, "stdout", &s->out, &s->out_len) < 0 || take_stream(c, res, "stderr", &s->err, &s->err_len) < 0)
        return -1;
    if (json_is_false(json_object_get(res, "running")))
        s->end = json_pack("{s:s, s:O, s:O, s:O}", "type", "end", "exit_code", json_object_get(res, "exit_code"),
                           "signal", json_object_get(res, "signal"), "timed_out", json_object_get(res, "timed_out"));
    else if (!s->detach_after)
        return fz_fail(c, FZ_SANDBOX, "command %ld still running after %.0f s of waiting", pid, wait);
    return 0;
}

int fz_attach(fz_ctx *c, long pid, fz_stream *s)
{
    if (is_mcp(c))
        return mcp_attach(c, pid, s);
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/commands/%ld/stream", pid);
    _cleanup_free_ char *path = sandbox_path(c->sandbox, suffix);
    return stream(c, "attach", "GET", path, NULL, s);
}
