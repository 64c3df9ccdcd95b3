/* target.c - the operations a test does on the service, over its REST API,
 * each timed and recorded as a step.  An answer the API should not give
 * (an error status, a malformed body) is an `interface` failure here;
 * whether the state inside is right is the test's to check. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <openssl/evp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double) (t1.tv_sec - t0->tv_sec) * 1e3 + (double) (t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* An API failure: a timeout is its own kind, the rest is the interface's. */
static int api_failed(fz_ctx *c, const char *op, const sbx_error *err)
{
    bool timeout = strstr(err->msg, "timed out") || strstr(err->msg, "Timeout");
    return fz_fail(c, timeout ? FZ_TIMEOUT : FZ_INTERFACE, "%s: %s", op, err->msg);
}

int fz_create(fz_ctx *c, json_t *body)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = sbx_http_json(c->http, "POST", "/v1/sandboxes", body, &resp, &err);
    fz_results_step(c->res, c->test_row, "create", ms_since(&t0), r == 0);
    if (r < 0)
        return api_failed(c, "create", &err);
    const char *id = json_string_value(json_object_get(resp.json, "id"));
    if (!id || strlen(id) != 32)
        return fz_fail(c, FZ_INTERFACE, "create: the answer has no sandbox id");
    snprintf(c->sandbox, sizeof c->sandbox, "%s", id);
    return 0;
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
    if (enc && strcmp(enc, "base64") == 0) {
        *out = malloc(n + 1);
        if (sodium_base642bin((unsigned char *) *out, n + 1, json_string_value(v), n, NULL, len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0)
            return fz_fail(c, FZ_INTERFACE, "exec: '%s' is not valid base64", name);
    } else {
        *out = malloc(n + 1);
        memcpy(*out, json_string_value(v), n);
        *len = n;
    }
    (*out)[*len] = '\0';
    return 0;
}

int fz_exec_json(fz_ctx *c, json_t *body, json_t **result)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sandboxes/%s/commands", c->sandbox);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    sbx_http_resp resp = { 0 };
    int r = sbx_http_json(c->http, "POST", path, body, &resp, &err);
    fz_results_step(c->res, c->test_row, "exec", ms_since(&t0), r == 0);
    if (r < 0) {
        sbx_http_resp_free(&resp);
        return api_failed(c, "exec", &err);
    }
    *result = json_incref(resp.json);
    sbx_http_resp_free(&resp);
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

static char *file_path(fz_ctx *c, const char *path)
{
    sbx_error err = { 0 };
    _cleanup_free_ char *e = sbx_http_escape(c->http, path, &err);
    char *p = NULL;
    if (e && asprintf(&p, "/v1/sandboxes/%s/files?path=%s", c->sandbox, e) < 0)
        p = NULL;
    return p;
}

int fz_put(fz_ctx *c, const char *path, const void *data, size_t len)
{
    _cleanup_free_ char *p = file_path(c, path);
    FILE *in = len ? fmemopen((void *) data, len, "r") : fopen("/dev/null", "re");
    if (!p || !in) {
        if (in)
            fclose(in);
        return fz_fail(c, FZ_HARNESS, "upload of %s: out of memory", path);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = sbx_http_upload(c->http, p, in, (int64_t) len, &resp, &err);
    fclose(in);
    fz_results_step(c->res, c->test_row, "upload", ms_since(&t0), r == 0);
    if (r < 0)
        return api_failed(c, "upload", &err);
    json_t *size = json_object_get(resp.json, "size");
    if (json_is_integer(size) && (size_t) json_integer_value(size) != len)
        return fz_fail(c, FZ_INTERFACE, "upload of %s: sent %zu bytes, the API says %lld arrived", path, len,
                       (long long) json_integer_value(size));
    return 0;
}

int fz_get(fz_ctx *c, const char *path, char **data, size_t *len)
{
    _cleanup_free_ char *p = file_path(c, path);
    *data = NULL;
    *len = 0;
    FILE *out = open_memstream(data, len);
    if (!p || !out) {
        if (out)
            fclose(out);
        return fz_fail(c, FZ_HARNESS, "download of %s: out of memory", path);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sbx_error err = { 0 };
    int r = sbx_http_download(c->http, p, out, &err);
    fclose(out);
    fz_results_step(c->res, c->test_row, "download", ms_since(&t0), r == 0);
    if (r < 0) {
        free(*data);
        *data = NULL;
        return api_failed(c, "download", &err);
    }
    return 0;
}

long fz_request_status(fz_ctx *c, const char *method, const char *path, json_t *body)
{
    sbx_error err = { 0 };
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = sbx_http_json(c->http, method, path, body, &resp, &err);
    fz_results_step(c->res, c->test_row, "request", ms_since(&t0), true);
    return r == 0 ? resp.status : sbx_http_status(c->http);
}
