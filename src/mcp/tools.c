/* tools.c - the MCP tools and file resources: each one REST call (or two)
 * to sbxd, its answer handed back as structuredContent.  See docs/mcp.md.
 *
 * Failures are results with isError, worded for a model: what went wrong
 * and what to do next.  Only the protocol layer (protocol.c) answers with
 * JSON-RPC errors. */
#define _GNU_SOURCE
#include "tools.h"
#include "../lib/cleanup.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>

/* files_read and each stream of command_run hold at most this in memory
 * and in one MCP message. */
#define OUTPUT_CAP (8u << 20)

/* ---- results ---- */

/* Success: the structured result, and the same JSON as text for clients
 * that only show text. */
static json_t *ok(json_t *structured)
{
    if (!structured)
        return NULL;
    _cleanup_free_ char *text = json_dumps(structured, JSON_COMPACT);
    return json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text ? text : "{}",
                     "structuredContent", structured, "isError", 0);
}

static json_t *fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *fail(const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *m = json_string(msg);
    if (!m) /* the message quotes bytes that are not UTF-8 */
        m = json_string("the request failed (the error message is not valid UTF-8)");
    return json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text", "text", m, "isError", 1);
}

/* A REST failure: sbxd's own message, plus a hint when the sandbox is the
 * thing that is missing (the usual case: it expired). */
static json_t *fail_rest(sbx_mcp_call *c, const sbx_error *err)
{
    sbx_http *h = sbx_mcp_call_http(c);
    if (sbx_http_status(h) == 404 && strstr(err->msg, "sandbox"))
        return fail("%s. It may have expired or been deleted: sandbox_list shows the live ones, sandbox_create "
                    "makes a new one.",
                    err->msg);
    if (sbx_http_status(h) == 409 && strstr(err->msg, "sandbox"))
        return fail("%s. The sandbox has ended; create a new one with sandbox_create.", err->msg);
    return fail("%s", err->msg);
}

/* ---- REST helpers ---- */

static const char *str(json_t *args, const char *name)
{
    return json_string_value(json_object_get(args, name));
}

/* "/v1/sandboxes/<id><suffix>" with the id escaped. */
static char *sandbox_path(sbx_mcp_call *c, const char *id, const char *suffix, sbx_error *err)
{
    _cleanup_free_ char *e = sbx_http_escape(sbx_mcp_call_http(c), id, err);
    char *p = NULL;
    if (!e || asprintf(&p, "/v1/sandboxes/%s%s", e, suffix) < 0)
        return NULL;
    return p;
}

/* "/v1/sandboxes/<id>/files<suffix>?path=<path><extra>" */
static char *files_path(sbx_mcp_call *c, const char *id, const char *suffix, const char *path, const char *extra,
                        sbx_error *err)
{
    sbx_http *h = sbx_mcp_call_http(c);
    _cleanup_free_ char *e = sbx_http_escape(h, id, err);
    _cleanup_free_ char *ep = e ? sbx_http_escape(h, path, err) : NULL;
    char *p = NULL;
    if (!ep || asprintf(&p, "/v1/sandboxes/%s/files%s?path=%s%s", e, suffix, ep, extra) < 0)
        return NULL;
    return p;
}

/* One JSON request; its answer (a new reference, {} for an empty body) or
 * NULL with err filled. */
static json_t *rest(sbx_mcp_call *c, const char *method, const char *path, json_t *body, sbx_error *err)
{
    if (!path)
        return NULL;
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (sbx_http_json(sbx_mcp_call_http(c), method, path, body, &resp, err) < 0)
        return NULL;
    return resp.json ? json_incref(resp.json) : json_object();
}

/* The usual tool: one request, its answer as the result. */
static json_t *rest_tool(sbx_mcp_call *c, const char *method, char *path, json_t *body)
{
    sbx_error err = { 0 };
    json_t *j = rest(c, method, path, body, &err);
    free(path);
    return j ? ok(j) : fail_rest(c, &err);
}

/* ---- bytes ---- */

/* Strict UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF), as sbxd's own output encoding decides. */
static bool utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = p[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if ((b & 0xe0) == 0xc0)
            len = 2, cp = b & 0x1f;
        else if ((b & 0xf0) == 0xe0)
            len = 3, cp = b & 0x0f;
        else if ((b & 0xf8) == 0xf0)
            len = 4, cp = b & 0x07;
        else
            return false;
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

static json_t *base64_of(const uint8_t *p, size_t n)
{
    size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    _cleanup_free_ char *b = malloc(cap);
    if (!b)
        return NULL;
    sodium_bin2base64(b, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
    return json_string(b);
}

/* Decode base64 (whitespace allowed); -1 if it is not base64. */
static int base64_decode(const char *s, uint8_t **out, size_t *outlen)
{
    size_t n = strlen(s);
    *out = malloc(n / 4 * 3 + 3);
    if (!*out)
        return -1;
    const char *end;
    if (sodium_base642bin(*out, n / 4 * 3 + 3, s, n, " \t\r\n", outlen, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        *end) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

typedef struct bytes {
    uint8_t *data;
    size_t len, cap;
    bool truncated;
} bytes;

static void bytes_add(bytes *b, const uint8_t *p, size_t n)
{
    if (n > OUTPUT_CAP - b->len) {
        n = OUTPUT_CAP - b->len;
        b->truncated = true;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->truncated = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* A FILE writer into a bytes buffer that refuses to grow past OUTPUT_CAP
 * (the write fails, which ends the transfer; truncated says why). */
static ssize_t capped_write(void *cookie, const char *buf, size_t n)
{
    bytes *b = cookie;
    bytes_add(b, (const uint8_t *) buf, n);
    return b->truncated ? 0 : (ssize_t) n;
}

/* Text when the bytes are UTF-8, else base64: obj[name] and obj[name_encoding]. */
static void put_output(json_t *obj, const char *name, const bytes *b)
{
    char enc[64];
    snprintf(enc, sizeof enc, "%s_encoding", name);
    const uint8_t *d = b->data ? b->data : (const uint8_t *) "";
    if (utf8_valid(d, b->len)) {
        json_object_set_new(obj, name, json_stringn((const char *) d, b->len));
        json_object_set_new(obj, enc, json_string("utf-8"));
    } else {
        json_object_set_new(obj, name, base64_of(d, b->len));
        json_object_set_new(obj, enc, json_string("base64"));
    }
}

/* ---- sandboxes ---- */

static json_t *sandbox_create(sbx_mcp_call *c, json_t *args)
{
    return rest_tool(c, "POST", strdup("/v1/sandboxes"), args);
}

static json_t *sandbox_list(sbx_mcp_call *c, json_t *args)
{
    sbx_http *h = sbx_mcp_call_http(c);
    sbx_error err = { 0 };
    char *q = NULL;
    size_t qlen = 0;
    _cleanup_fclose_ FILE *f = open_memstream(&q, &qlen);
    if (!f)
        return NULL;
    fputs("/v1/sandboxes", f);
    char sep = '?';
    const char *state = str(args, "state");
    if (state) {
        _cleanup_free_ char *e = sbx_http_escape(h, state, &err);
        fprintf(f, "%cstate=%s", sep, e ? e : "");
        sep = '&';
    }
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(args, "metadata"), k, v)
    {
        _cleanup_free_ char *ek = sbx_http_escape(h, k, &err);
        _cleanup_free_ char *ev = sbx_http_escape(h, json_string_value(v) ? json_string_value(v) : "", &err);
        fprintf(f, "%cmetadata.%s=%s", sep, ek ? ek : "", ev ? ev : "");
        sep = '&';
    }
    fclose(f);
    f = NULL;
    return rest_tool(c, "GET", q, NULL);
}

static json_t *template_list(sbx_mcp_call *c, json_t *args)
{
    (void) args;
    return rest_tool(c, "GET", strdup("/v1/templates"), NULL);
}

static json_t *sandbox_info(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "", &err);
    return p ? rest_tool(c, "GET", p, NULL) : fail("%s", err.msg);
}

static json_t *sandbox_kill(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "sandbox_id");
    _cleanup_free_ char *p = sandbox_path(c, id, "", &err);
    json_t *j = rest(c, "DELETE", p, NULL, &err);
    if (!j)
        return fail_rest(c, &err);
    json_decref(j);
    return ok(json_pack("{s:s, s:b}", "sandbox_id", id, "killed", 1));
}

/* POST .../<what> with an empty body: pause, resume, snapshots */
static json_t *sandbox_pause_resume(sbx_mcp_call *c, json_t *args, const char *what)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), what, &err);
    _cleanup_json_ json_t *body = json_object();
    return p ? rest_tool(c, "POST", p, body) : fail("%s", err.msg);
}

static json_t *sandbox_pause(sbx_mcp_call *c, json_t *args)
{
    return sandbox_pause_resume(c, args, "/pause");
}

static json_t *sandbox_resume(sbx_mcp_call *c, json_t *args)
{
    return sandbox_pause_resume(c, args, "/resume");
}

static json_t *sandbox_network(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/network", &err);
    _cleanup_json_ json_t *body = json_deep_copy(args);
    json_object_del(body, "sandbox_id");
    return p ? rest_tool(c, "PATCH", p, body) : fail("%s", err.msg);
}

static json_t *sandbox_snapshot(sbx_mcp_call *c, json_t *args)
{
    return sandbox_pause_resume(c, args, "/snapshots");
}

static json_t *snapshot_list(sbx_mcp_call *c, json_t *args)
{
    (void) args;
    return rest_tool(c, "GET", strdup("/v1/snapshots"), NULL);
}

/* Snapshots keep disk until deleted: an agent that makes them must be able
 * to let them go. */
static json_t *snapshot_delete(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "snapshot_id");
    _cleanup_free_ char *e = sbx_http_escape(sbx_mcp_call_http(c), id, &err);
    _cleanup_free_ char *p = NULL;
    if (!e || asprintf(&p, "/v1/snapshots/%s", e) < 0)
        return fail("%s", err.msg[0] ? err.msg : "out of memory");
    json_t *j = rest(c, "DELETE", p, NULL, &err);
    if (!j)
        return fail("%s", err.msg);
    json_decref(j);
    return ok(json_pack("{s:s, s:b}", "snapshot_id", id, "deleted", 1));
}

static json_t *sandbox_fork(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/fork", &err);
    _cleanup_json_ json_t *body = json_object();
    if (json_object_get(args, "count"))
        json_object_set(body, "count", json_object_get(args, "count"));
    return p ? rest_tool(c, "POST", p, body) : fail("%s", err.msg);
}

static json_t *sandbox_set_timeout(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/timeout", &err);
    _cleanup_json_ json_t *body = json_pack("{s:O}", "timeout_s", json_object_get(args, "timeout_s"));
    return p ? rest_tool(c, "POST", p, body) : fail("%s", err.msg);
}

/* ---- commands ---- */

typedef struct run_state {
    sbx_mcp_call *c;
    const char *sandbox;
    long pid;
    bool started, ended, cancel_seen;
    bool attach;        /* command_output: reading, not running: a cancel kills nothing */
    double deadline_ms; /* command_output: stop waiting then (0: none) */
    bool waited_out;
    json_int_t dropped; /* command_output: older bytes sbx no longer held */
    bytes out, err;
    uint64_t total; /* output bytes so far: the progress */
    json_t *end;    /* the "end" line */
    char error[600];
} run_state;

static int run_line(void *ctx, json_t *line, sbx_error *err)
{
    (void) err;
    run_state *s = ctx;
    const char *type = json_string_value(json_object_get(line, "type"));
    if (!type)
        return 0;
    if (strcmp(type, "start") == 0) {
        s->pid = (long) json_integer_value(json_object_get(line, "pid"));
        s->started = true;
        if (!s->attach && s->pid > 0 && sbx_mcp_call_running(s->c, s->sandbox, s->pid))
            s->cancel_seen = true; /* cancelled before we knew the pid */
    } else if (strcmp(type, "dropped") == 0) {
        s->dropped += json_integer_value(json_object_get(line, "bytes"));
    } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
        const char *data = json_string_value(json_object_get(line, "data"));
        const char *enc = json_string_value(json_object_get(line, "encoding"));
        if (!data)
            return 0;
        uint8_t *raw = NULL;
        size_t n;
        bool text = !enc || strcmp(enc, "base64") != 0;
        if (text) {
            n = json_string_length(json_object_get(line, "data"));
        } else if (base64_decode(data, &raw, &n) < 0) {
            return 0;
        }
        bytes_add(type[3] == 'o' ? &s->out : &s->err, text ? (const uint8_t *) data : raw, n);
        s->total += n;
        /* the chunk itself, so a client can show the output as it comes */
        char note[64];
        if (!text)
            snprintf(note, sizeof note, "%zu bytes of binary output", n);
        free(raw);
        sbx_mcp_call_progress(s->c, (double) s->total, text ? data : note);
    } else if (strcmp(type, "end") == 0) {
        s->ended = true;
        s->end = json_incref(line);
    } else if (strcmp(type, "error") == 0) {
        snprintf(s->error, sizeof s->error, "%s",
                 json_string_value(json_object_get(line, "message")) ?: "the command's output stream broke");
    }
    return 0;
}

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e3 + (double) t.tv_nsec / 1e6;
}

static int run_tick(void *ctx, sbx_error *err)
{
    run_state *s = ctx;
    if (sbx_mcp_call_cancelled(s->c)) {
        s->cancel_seen = true;
        return sbx_error_set(err, ECANCELED, "cancelled");
    }
    if (s->deadline_ms > 0 && !s->ended && mono_ms() >= s->deadline_ms) {
        s->waited_out = true;
        return sbx_error_set(err, ETIMEDOUT, "waited long enough");
    }
    return 0;
}

static json_t *command_run(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "sandbox_id");
    bool has_cmd = json_object_get(args, "cmd"), has_argv = json_object_get(args, "argv");
    if (has_cmd == has_argv)
        return fail("give exactly one of 'cmd' (a shell command line, run with /bin/sh -c) and 'argv' (a program "
                    "and its arguments, run without a shell)");
    _cleanup_free_ char *p = sandbox_path(c, id, "/commands", &err);
    if (!p)
        return fail("%s", err.msg);
    _cleanup_json_ json_t *body = json_deep_copy(args);
    json_object_del(body, "sandbox_id");
    json_t *in = json_object_get(args, "stdin");
    if (in) { /* as bytes: it may hold NUL bytes, which sbxd takes only in base64 */
        json_object_set_new(body, "stdin_base64",
                            base64_of((const uint8_t *) json_string_value(in), json_string_length(in)));
        json_object_del(body, "stdin");
    }

    if (json_is_true(json_object_get(args, "background"))) {
        json_t *j = rest(c, "POST", p, body, &err);
        if (!j)
            return fail_rest(c, &err);
        json_object_set_new(j, "background", json_true());
        return ok(j);
    }

    run_state s = { .c = c, .sandbox = id };
    int r = sbx_http_ndjson(sbx_mcp_call_http(c), "POST", p, body, run_line, run_tick, &s, &err);
    sbx_mcp_call_running(c, id, 0);
    json_t *res = NULL;
    if (s.cancel_seen || sbx_mcp_call_cancelled(c)) {
        /* nobody will read the answer; make sure the command is gone */
        if (s.pid > 0 && !s.ended) {
            char kp[64];
            snprintf(kp, sizeof kp, "/commands/%ld", s.pid);
            _cleanup_free_ char *kpath = sandbox_path(c, id, kp, &err);
            json_decref(rest(c, "DELETE", kpath, NULL, &err));
        }
        res = fail("cancelled");
    } else if (r < 0 && !s.started) {
        res = fail_rest(c, &err);
    } else if (!s.ended) {
        res = fail("%s", s.error[0] ? s.error : r < 0 ? err.msg : "the command's output stream ended early");
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "pid", json_integer(s.pid));
        json_object_set(o, "exit_code", json_object_get(s.end, "exit_code"));
        json_object_set(o, "signal", json_object_get(s.end, "signal"));
        put_output(o, "stdout", &s.out);
        json_object_set_new(o, "stdout_truncated", json_boolean(s.out.truncated));
        put_output(o, "stderr", &s.err);
        json_object_set_new(o, "stderr_truncated", json_boolean(s.err.truncated));
        json_object_set(o, "timed_out", json_object_get(s.end, "timed_out"));
        json_object_set(o, "oom_killed", json_object_get(s.end, "oom_killed"));
        json_object_set(o, "duration_ms", json_object_get(s.end, "duration_ms"));
        json_int_t code = json_integer_value(json_object_get(s.end, "exit_code"));
        if (json_is_integer(json_object_get(s.end, "exit_code")) && (code == 126 || code == 127)) {
            /* it never ran: the shell or sbx could not find or execute it */
            _cleanup_free_ char *text = NULL;
            bool printable = s.err.len && utf8_valid(s.err.data, s.err.len);
            if (asprintf(&text, "The command could not run (exit code %lld: %s). stderr: %.*s", (long long) code,
                         code == 127 ? "not found" : "not executable",
                         printable ? (int) (s.err.len < 2000 ? s.err.len : 2000) : 0,
                         printable ? (const char *) s.err.data : "") < 0)
                text = NULL;
            res = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text",
                            text ? text : "the command could not run", "structuredContent", o, "isError", 1);
        } else {
            res = ok(o);
        }
    }
    json_decref(s.end);
    free(s.out.data);
    free(s.err.data);
    return res;
}

static json_t *command_list(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/commands", &err);
    return p ? rest_tool(c, "GET", p, NULL) : fail("%s", err.msg);
}

/* A command's output so far and its state, as `GET .../commands/{pid}/stream`
 * (re-attach) gives them: what sbx still holds of it (the newest 1 MiB per
 * command), then what comes while we wait, until it ends or wait_s passes.
 * For a background command this is how an agent sees what it printed; it
 * changes nothing (a cancel stops the reading, never the command). */
static json_t *command_output(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "sandbox_id");
    json_int_t pid = json_integer_value(json_object_get(args, "pid"));
    json_t *w = json_object_get(args, "wait_s");
    double wait_s = w ? json_number_value(w) : 0;
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/commands/%lld/stream", (long long) pid);
    _cleanup_free_ char *p = sandbox_path(c, id, suffix, &err);
    if (!p)
        return fail("%s", err.msg);
    /* The wait bounds the request itself (libcurl's progress callback, the
     * tick, comes only about once a second while nothing arrives); wait 0
     * still reads what is buffered, which sbx sends at once: half a second
     * for it to arrive. */
    long ms = (long) (1e3 * (wait_s > 0.5 ? wait_s : 0.5));
    run_state s = { .c = c, .sandbox = id, .attach = true, .deadline_ms = mono_ms() + (double) ms };
    sbx_http *h = sbx_mcp_call_http(c);
    sbx_http_set_timeout(h, ms);
    int r = sbx_http_ndjson(h, "GET", p, NULL, run_line, run_tick, &s, &err);
    if (sbx_http_timed_out(h))
        s.waited_out = true;
    sbx_http_set_timeout(h, 0);
    json_t *res = NULL;
    if (s.cancel_seen || sbx_mcp_call_cancelled(c)) {
        res = fail("cancelled");
    } else if (!s.started) {
        res = r < 0 && !s.waited_out ? fail_rest(c, &err) : fail("no answer from the sandbox in time");
    } else if (!s.ended && !s.waited_out) {
        res = fail("%s", s.error[0] ? s.error : r < 0 ? err.msg : "the command's output stream ended early");
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "pid", json_integer(s.pid));
        json_object_set_new(o, "running", json_boolean(!s.ended));
        const char *keys[] = { "exit_code", "signal", "timed_out", "oom_killed", "duration_ms" };
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            json_t *v = s.ended ? json_object_get(s.end, keys[i]) : NULL;
            json_object_set(o, keys[i], v ? v : json_null());
        }
        put_output(o, "stdout", &s.out);
        json_object_set_new(o, "stdout_truncated", json_boolean(s.out.truncated));
        put_output(o, "stderr", &s.err);
        json_object_set_new(o, "stderr_truncated", json_boolean(s.err.truncated));
        json_object_set_new(o, "dropped_bytes", json_integer(s.dropped));
        res = ok(o);
    }
    json_decref(s.end);
    free(s.out.data);
    free(s.err.data);
    return res;
}

static json_t *command_kill(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "sandbox_id");
    json_int_t pid = json_integer_value(json_object_get(args, "pid"));
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/commands/%lld", (long long) pid);
    _cleanup_free_ char *p = sandbox_path(c, id, suffix, &err);
    json_t *j = rest(c, "DELETE", p, NULL, &err);
    if (!j)
        return fail_rest(c, &err);
    json_decref(j);
    return ok(json_pack("{s:s, s:I, s:b}", "sandbox_id", id, "pid", pid, "killed", 1));
}

/* ---- files ---- */

/* What the bytes are: magic numbers first, then the name. */
static const char *mime_of(const char *path, const uint8_t *d, size_t n, bool text)
{
    if (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0)
        return "image/png";
    if (n >= 3 && memcmp(d, "\xff\xd8\xff", 3) == 0)
        return "image/jpeg";
    if (n >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0))
        return "image/gif";
    if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0)
        return "image/webp";
    if (n >= 5 && memcmp(d, "%PDF-", 5) == 0)
        return "application/pdf";
    static const struct {
        const char *ext, *mime;
    } by_name[] = {
        { ".json", "application/json" }, { ".html", "text/html" },     { ".md", "text/markdown" },
        { ".csv", "text/csv" },          { ".svg", "image/svg+xml" },  { ".xml", "application/xml" },
        { ".py", "text/x-python" },      { ".js", "text/javascript" }, { ".css", "text/css" },
    };
    const char *dot = strrchr(path, '.');
    if (text && dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof by_name / sizeof *by_name; i++)
            if (strcmp(dot, by_name[i].ext) == 0)
                return by_name[i].mime;
    return text ? "text/plain" : "application/octet-stream";
}

static bool is_image(const char *mime)
{
    return strncmp(mime, "image/", 6) == 0 && strcmp(mime, "image/svg+xml") != 0;
}

/* A whole file into memory (at most OUTPUT_CAP).  0, or -1 with a result
 * (isError) in *fail_res. */
static int read_file(sbx_mcp_call *c, const char *id, const char *path, bytes *b, char **abs_path, json_t **fail_res)
{
    sbx_error err = { 0 };
    _cleanup_free_ char *sp = files_path(c, id, "/stat", path, "", &err);
    _cleanup_json_ json_t *st = rest(c, "GET", sp, NULL, &err);
    if (!st) {
        *fail_res = fail_rest(c, &err);
        return -1;
    }
    const char *type = json_string_value(json_object_get(st, "type"));
    if (type && strcmp(type, "dir") == 0) {
        *fail_res = fail("'%s' is a directory: use files_list to see what it holds", path);
        return -1;
    }
    json_int_t size = json_integer_value(json_object_get(st, "size"));
    if (abs_path)
        *abs_path = strdup(json_string_value(json_object_get(st, "path")) ?: path);
    if (size > (json_int_t) OUTPUT_CAP) {
        *fail_res = fail("'%s' is %lld bytes; files_read returns at most %u. Read it in parts with command_run "
                         "(e.g. `head -c`, `split`) or download it through the REST API.",
                         path, (long long) size, OUTPUT_CAP);
        return -1;
    }
    /* Held to OUTPUT_CAP as it arrives: the file may grow after the stat
     * (a process in the sandbox appending to it), and sbxd must not hold
     * whatever a sandbox writes. */
    bytes got = { 0 };
    cookie_io_functions_t io = { .write = capped_write };
    FILE *f = fopencookie(&got, "w", io);
    if (!f) {
        *fail_res = fail("out of memory");
        return -1;
    }
    setvbuf(f, NULL, _IONBF, 0);
    _cleanup_free_ char *gp = files_path(c, id, "", path, "", &err);
    int r = gp ? sbx_http_download(sbx_mcp_call_http(c), gp, f, &err) : -1;
    fclose(f);
    if (got.truncated) { /* it grew since the stat */
        free(got.data);
        *fail_res = fail("'%s' grew past %u bytes while it was read; read it in parts with command_run", path,
                         OUTPUT_CAP);
        return -1;
    }
    if (r < 0) {
        free(got.data);
        *fail_res = fail_rest(c, &err);
        return -1;
    }
    /* An empty file wrote nothing: give it a buffer all the same, so that
     * callers hand memchr, json_stringn and base64 a real pointer (jansson
     * refuses json_stringn(NULL, 0), and memchr(NULL, ...) is undefined). */
    if (!got.data && !(got.data = malloc(1))) {
        *fail_res = fail("out of memory");
        return -1;
    }
    *b = got;
    return 0;
}

static bool text_file(const bytes *b)
{
    return utf8_valid(b->data, b->len) && !memchr(b->data, 0, b->len);
}

static json_t *files_read(sbx_mcp_call *c, json_t *args)
{
    const char *id = str(args, "sandbox_id"), *path = str(args, "path");
    const char *want = str(args, "encoding");
    bytes b = { 0 };
    json_t *res = NULL;
    _cleanup_free_ char *abs = NULL;
    if (read_file(c, id, path, &b, &abs, &res) < 0)
        return res;
    bool text = text_file(&b);
    bool as_text = text && !(want && strcmp(want, "base64") == 0);
    const char *mime = mime_of(path, b.data, b.len, text);
    json_t *content = as_text ? json_stringn((const char *) b.data, b.len) : base64_of(b.data, b.len);
    json_t *st = json_pack("{s:s, s:I, s:s, s:o, s:s}", "path", abs ? abs : path, "size", (json_int_t) b.len,
                           "encoding",
                           as_text ? "utf8" : "base64", "content", content, "mime_type", mime);
    json_t *items;
    if (is_image(mime))
        /* a model sees an image only as image content */
        items = json_pack("[{s:s, s:O, s:s}]", "type", "image", "data", content, "mimeType", mime);
    else if (as_text)
        items = json_pack("[{s:s, s:O}]", "type", "text", "text", content);
    else
        items = json_pack("[{s:s, s:s}]", "type", "text", "text",
                          "binary content: base64 in structuredContent.content (encoding \"base64\")");
    res = json_pack("{s:o, s:o, s:b}", "content", items, "structuredContent", st, "isError", 0);
    free(b.data);
    return res;
}

static json_t *files_write(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *id = str(args, "sandbox_id"), *path = str(args, "path"), *enc = str(args, "encoding");
    json_t *content = json_object_get(args, "content");
    _cleanup_free_ uint8_t *raw = NULL;
    const uint8_t *data;
    size_t len;
    if (enc && strcmp(enc, "base64") == 0) {
        if (base64_decode(json_string_value(content), &raw, &len) < 0)
            return fail("'content' is not valid base64 (encoding \"base64\" was given)");
        data = raw;
    } else {
        data = (const uint8_t *) json_string_value(content);
        len = json_string_length(content);
    }
    char extra[64] = "";
    const char *mode = str(args, "mode");
    if (mode)
        snprintf(extra, sizeof extra, "&mode=%.16s", mode);
    _cleanup_free_ char *p = files_path(c, id, "", path, extra, &err);
    if (!p)
        return fail("%s", err.msg);
    /* fmemopen refuses an empty buffer: an empty file reads /dev/null */
    FILE *in = len ? fmemopen((void *) data, len, "r") : fopen("/dev/null", "r");
    if (!in)
        return fail("out of memory");
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    int r = sbx_http_upload(sbx_mcp_call_http(c), p, in, (int64_t) len, &resp, &err);
    fclose(in);
    if (r < 0)
        return fail_rest(c, &err);
    return ok(resp.json ? json_incref(resp.json) : json_pack("{s:s, s:I}", "path", path, "size", (json_int_t) len));
}

static json_t *files_list(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *path = str(args, "path");
    char extra[32] = "";
    if (json_object_get(args, "depth"))
        snprintf(extra, sizeof extra, "&depth=%lld", (long long) json_integer_value(json_object_get(args, "depth")));
    char *p = files_path(c, str(args, "sandbox_id"), "/list", path ? path : ".", extra, &err);
    return p ? rest_tool(c, "GET", p, NULL) : fail("%s", err.msg);
}

static json_t *files_stat(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = files_path(c, str(args, "sandbox_id"), "/stat", str(args, "path"), "", &err);
    return p ? rest_tool(c, "GET", p, NULL) : fail("%s", err.msg);
}

static json_t *files_mkdir(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/files/mkdir", &err);
    _cleanup_json_ json_t *body = json_pack("{s:O}", "path", json_object_get(args, "path"));
    return p ? rest_tool(c, "POST", p, body) : fail("%s", err.msg);
}

static json_t *files_move(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    char *p = sandbox_path(c, str(args, "sandbox_id"), "/files/move", &err);
    _cleanup_json_ json_t *body = json_pack("{s:O, s:O}", "from", json_object_get(args, "from"), "to",
                                            json_object_get(args, "to"));
    return p ? rest_tool(c, "POST", p, body) : fail("%s", err.msg);
}

static json_t *files_remove(sbx_mcp_call *c, json_t *args)
{
    sbx_error err = { 0 };
    const char *path = str(args, "path");
    bool rec = json_is_true(json_object_get(args, "recursive"));
    /* the entry first: the answer names the absolute path, like the others */
    _cleanup_free_ char *sp = files_path(c, str(args, "sandbox_id"), "/stat", path, "", &err);
    _cleanup_json_ json_t *st = rest(c, "GET", sp, NULL, &err);
    if (!st)
        return fail_rest(c, &err);
    _cleanup_free_ char *p = files_path(c, str(args, "sandbox_id"), "", path, rec ? "&recursive=true" : "", &err);
    json_t *j = rest(c, "DELETE", p, NULL, &err);
    if (!j)
        return fail_rest(c, &err);
    json_decref(j);
    const char *abs = json_string_value(json_object_get(st, "path"));
    return ok(json_pack("{s:s, s:b}", "path", abs ? abs : path, "removed", 1));
}

/* ---- resources ---- */

/* "%XX" escapes decoded in place; -1 on a bad escape or a NUL byte. */
static int percent_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        unsigned v;
        if (sscanf(r + 1, "%2x", &v) != 1 || !r[1] || !r[2] || v == 0)
            return -1;
        *w++ = (char) v;
        r += 2;
    }
    *w = '\0';
    return 0;
}

json_t *sbx_mcp_resource_read(sbx_mcp_call *c, const char *uri, int *code, sbx_error *err)
{
    static const char prefix[] = "sbx://sandboxes/";
    *code = SBX_RPC_INVALID_PARAMS;
    if (strncmp(uri, prefix, sizeof prefix - 1) != 0) {
        sbx_error_set(err, 0, "unknown resource URI '%s' (sbx serves %s)", uri, SBX_MCP_FILE_TEMPLATE);
        return NULL;
    }
    _cleanup_free_ char *id = strdup(uri + sizeof prefix - 1);
    char *files = id ? strstr(id, "/files/") : NULL;
    if (!files || files == id) {
        sbx_error_set(err, 0, "resource URI '%s' does not match %s", uri, SBX_MCP_FILE_TEMPLATE);
        return NULL;
    }
    *files = '\0';
    char *path = files + 7;
    if (!*path || percent_decode(path) < 0 || percent_decode(id) < 0) {
        sbx_error_set(err, 0, "resource URI '%s': no path, or a bad %%-escape", uri);
        return NULL;
    }
    bytes b = { 0 };
    _cleanup_json_ json_t *failed = NULL;
    if (read_file(c, id, path, &b, NULL, &failed) < 0) {
        *code = SBX_RPC_RESOURCE_NOT_FOUND;
        const char *t = json_string_value(json_object_get(json_array_get(json_object_get(failed, "content"), 0), "text"));
        sbx_error_set(err, 0, "%s", t ? t : "cannot read the file");
        return NULL;
    }
    bool text = text_file(&b);
    const char *mime = mime_of(path, b.data, b.len, text);
    json_t *item = json_pack("{s:s, s:s}", "uri", uri, "mimeType", mime);
    if (text)
        json_object_set_new(item, "text", json_stringn((const char *) b.data, b.len));
    else
        json_object_set_new(item, "blob", base64_of(b.data, b.len));
    free(b.data);
    return json_pack("{s:[o]}", "contents", item);
}

/* ---- the table ---- */

#define SANDBOX_ID "\"sandbox_id\": {\"type\": \"string\", \"description\": \"The sandbox's id (from sandbox_create).\"}"
#define ENVS "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}"
#define SANDBOX_OUT                                                                                                    \
    "{\"type\": \"object\", \"required\": [\"id\", \"state\"], \"properties\": {"                                      \
    "\"id\": {\"type\": \"string\"}, \"state\": {\"type\": \"string\"}, \"template\": {\"type\": \"string\"},"         \
    "\"created_at\": {\"type\": \"string\"}, \"expires_at\": {\"type\": [\"string\", \"null\"]},"                                  \
    "\"metadata\": {\"type\": \"object\"}}}"
#define SNAPSHOT_OUT                                                                                                   \
    "{\"type\": \"object\", \"required\": [\"id\", \"sandbox_id\"], \"properties\": {\"id\": {\"type\": "      \
    "\"string\"}, \"sandbox_id\": {\"type\": \"string\"}, \"template\": {\"type\": \"string\"}, \"size_bytes\": "   \
    "{\"type\": \"integer\"}}}"
#define ENTRY_PROPS                                                                                                    \
    "\"name\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, \"type\": {\"type\": \"string\"},"            \
    "\"size\": {\"type\": \"integer\"}, \"mode\": {\"type\": \"string\"}, \"mtime\": {\"type\": \"string\"}"

const sbx_mcp_tool sbx_mcp_tools[] = {
    { "sandbox_create", "Create a sandbox",
      "Create a new isolated Linux sandbox (its own filesystem, processes and limits) and return its id. Use the id "
      "with every other tool. It is deleted after timeout_s seconds (default 900) unless extended with "
      "sandbox_set_timeout; delete it with sandbox_kill when done.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
      "\"template\": {\"type\": \"string\", \"description\": \"Root filesystem template, by name or id "
      "(default \\\"base\\\"; template_list shows them).\"},"
      "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 28800, \"description\": \"Lifetime in "
      "seconds (default 900, at most 8 hours).\"},"
      "\"metadata\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, \"description\": "
      "\"Your own labels, for sandbox_list filters.\"},"
      "\"envs\": " ENVS ", \"description\": \"Environment variables for every command.\"},"
      "\"cpus\": {\"type\": \"number\", \"description\": \"CPU limit in cores.\"},"
      "\"memory_mb\": {\"type\": \"integer\", \"description\": \"Memory limit in MiB.\"},"
      "\"disk_mb\": {\"type\": \"integer\", \"description\": \"Writable disk space in MiB.\"},"
      "\"pids\": {\"type\": \"integer\", \"description\": \"Limit on processes.\"},"
      "\"on_timeout\": {\"type\": \"string\", \"enum\": [\"kill\", \"pause\"], \"description\": \"What the "
      "timeout does: kill (default) or pause the sandbox.\"},"
      "\"snapshot\": {\"type\": \"string\", \"description\": \"Start from this snapshot's files (from "
      "sandbox_snapshot).\"}}}",
      SANDBOX_OUT, sandbox_create },
    { "sandbox_list", "List sandboxes",
      "List your sandboxes: the running ones by default, or those in a given state; metadata filters by your labels "
      "(all must match).",
      "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
      "\"state\": {\"type\": \"string\", \"enum\": [\"running\", \"expired\", \"deleted\", \"failed\", "
      "\"unhealthy\", \"paused\", \"all\"], \"description\": \"Which to list (default the live ones: running "
      "and paused; all: every state).\"},"
      "\"metadata\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}}}}",
      "{\"type\": \"object\", \"required\": [\"sandboxes\"], \"properties\": {\"sandboxes\": {\"type\": \"array\", "
      "\"items\": " SANDBOX_OUT "}}}",
      sandbox_list },
    { "sandbox_info", "Describe a sandbox",
      "Show one sandbox: its state, limits, metadata and when it expires.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      SANDBOX_OUT, sandbox_info },
    { "sandbox_kill", "Delete a sandbox",
      "Delete a sandbox now: every process in it is killed and its files are gone.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      "{\"type\": \"object\", \"required\": [\"sandbox_id\", \"killed\"], \"properties\": {\"sandbox_id\": "
      "{\"type\": \"string\"}, \"killed\": {\"type\": \"boolean\"}}}",
      sandbox_kill },
    { "sandbox_set_timeout", "Set a sandbox's timeout",
      "Make the sandbox expire timeout_s seconds from now (extends or shortens its life).",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"timeout_s\"], "
      "\"properties\": {" SANDBOX_ID ", \"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": "
      "28800}}}",
      SANDBOX_OUT, sandbox_set_timeout },
    { "command_run", "Run a command",
      "Run a command in a sandbox and return its exit code, stdout and stderr. Use cmd for a shell command line "
      "(pipes, &&, globs) or argv for a program and its arguments. Output that is not UTF-8 comes back base64 "
      "(stdout_encoding). With background true it returns the pid at once; read its output with command_output, "
      "stop it with command_kill. A non-zero "
      "exit code is a normal result; a command that cannot be found or executed is an error.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID ","
      "\"cmd\": {\"type\": \"string\", \"description\": \"A command line for /bin/sh -c.\"},"
      "\"argv\": {\"type\": \"array\", \"minItems\": 1, \"items\": {\"type\": \"string\"}, \"description\": "
      "\"Program and arguments, no shell.\"},"
      "\"cwd\": {\"type\": \"string\", \"description\": \"Working directory (default the home, /home/user).\"},"
      "\"envs\": " ENVS "},"
      "\"stdin\": {\"type\": \"string\", \"description\": \"Text written to the "
      "command's stdin.\"},"
      "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 28800, \"description\": \"Kill it after "
      "this many seconds (default 60; 0 = no limit).\"},"
      "\"background\": {\"type\": \"boolean\", \"description\": \"Return at once with the pid.\"}}}",
      "{\"type\": \"object\", \"required\": [\"pid\"], \"properties\": {"
      "\"pid\": {\"type\": \"integer\"}, \"background\": {\"type\": \"boolean\"},"
      "\"exit_code\": {\"type\": [\"integer\", \"null\"]}, \"signal\": {\"type\": [\"integer\", \"null\"]},"
      "\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"},"
      "\"stdout_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
      "\"stderr_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
      "\"stdout_truncated\": {\"type\": \"boolean\"}, \"stderr_truncated\": {\"type\": \"boolean\"},"
      "\"timed_out\": {\"type\": \"boolean\"}, \"oom_killed\": {\"type\": \"boolean\"},"
      "\"duration_ms\": {\"type\": \"integer\"}}}",
      command_run },
    { "command_list", "List commands",
      "List the commands of a sandbox, running and recently finished, with their pids and exit codes.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      "{\"type\": \"object\", \"required\": [\"commands\"], \"properties\": {\"commands\": {\"type\": \"array\", "
      "\"items\": {\"type\": \"object\", \"properties\": {\"pid\": {\"type\": \"integer\"}, \"running\": "
      "{\"type\": \"boolean\"}}}}}}",
      command_list },
    { "command_output", "Read a command's output",
      "The output of a command so far (a background one, typically) and whether it still runs: what the "
      "sandbox still holds of it (the newest 1 MiB per command; dropped_bytes says how much older output is "
      "gone), then what it prints while this waits, up to wait_s seconds or until it ends (then exit_code, "
      "signal, timed_out). Each call returns all the sandbox still holds, from the oldest byte it has, not only "
      "what is new; reading changes nothing.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"pid\"], "
      "\"properties\": {" SANDBOX_ID ", \"pid\": {\"type\": \"integer\", \"minimum\": 1}, "
      "\"wait_s\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 300, \"description\": \"How long to "
      "wait for it to end (default 0: what is there now).\"}}}",
      "{\"type\": \"object\", \"required\": [\"pid\", \"running\"], \"properties\": {"
      "\"pid\": {\"type\": \"integer\"}, \"running\": {\"type\": \"boolean\"},"
      "\"exit_code\": {\"type\": [\"integer\", \"null\"]}, \"signal\": {\"type\": [\"integer\", \"null\"]},"
      "\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"},"
      "\"stdout_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
      "\"stderr_encoding\": {\"type\": \"string\", \"enum\": [\"utf-8\", \"base64\"]},"
      "\"stdout_truncated\": {\"type\": \"boolean\"}, \"stderr_truncated\": {\"type\": \"boolean\"},"
      "\"timed_out\": {\"type\": [\"boolean\", \"null\"]}, \"oom_killed\": {\"type\": [\"boolean\", \"null\"]},"
      "\"duration_ms\": {\"type\": [\"integer\", \"null\"]}, \"dropped_bytes\": {\"type\": \"integer\"}}}",
      command_output },
    { "command_kill", "Kill a command",
      "Kill a running command and every process it started.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"pid\"], "
      "\"properties\": {" SANDBOX_ID ", \"pid\": {\"type\": \"integer\", \"minimum\": 1}}}",
      "{\"type\": \"object\", \"required\": [\"sandbox_id\", \"pid\", \"killed\"], \"properties\": {\"sandbox_id\": "
      "{\"type\": \"string\"}, \"pid\": {\"type\": \"integer\"}, \"killed\": {\"type\": \"boolean\"}}}",
      command_kill },
    { "files_write", "Write a file",
      "Write a file in the sandbox, creating parent directories and replacing the file atomically. For binary data "
      "give the bytes base64-encoded with encoding \"base64\". Relative paths are relative to /home/user.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"path\", "
      "\"content\"], \"properties\": {" SANDBOX_ID ", \"path\": {\"type\": \"string\"},"
      "\"content\": {\"type\": \"string\", \"description\": \"The file's text, or its "
      "bytes in base64.\"},"
      "\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"description\": \"How content is "
      "given (default utf8).\"},"
      "\"mode\": {\"type\": \"string\", \"description\": \"Permission bits in octal, e.g. \\\"0755\\\".\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\", \"size\"], \"properties\": {\"path\": {\"type\": \"string\"}, "
      "\"size\": {\"type\": \"integer\"}}}",
      files_write },
    { "files_read", "Read a file",
      "Read a file from the sandbox (at most 8 MiB). Text comes back as text; other bytes, or when encoding "
      "\"base64\" is asked for, as base64; images also as image content.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"path\"], "
      "\"properties\": {" SANDBOX_ID ", \"path\": {\"type\": \"string\"},"
      "\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"description\": \"base64 forces "
      "base64 even for text.\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\", \"size\", \"encoding\", \"content\", \"mime_type\"], "
      "\"properties\": {\"path\": {\"type\": \"string\"}, \"size\": {\"type\": \"integer\"}, \"encoding\": "
      "{\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"]}, \"content\": {\"type\": \"string\"}, "
      "\"mime_type\": {\"type\": \"string\"}}}",
      files_read },
    { "files_list", "List a directory",
      "List a directory of the sandbox (default the home, /home/user); depth > 1 descends into subdirectories.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID ", \"path\": {\"type\": \"string\"}, \"depth\": {\"type\": \"integer\", \"minimum\": 1, "
      "\"maximum\": 16}}}",
      "{\"type\": \"object\", \"required\": [\"entries\"], \"properties\": {\"entries\": {\"type\": \"array\", "
      "\"items\": {\"type\": \"object\", \"properties\": {" ENTRY_PROPS "}}}}}",
      files_list },
    { "files_stat", "Describe a path",
      "Describe one path: type (file, dir, symlink), size, permissions, modification time. Symlinks are not "
      "followed.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"path\"], "
      "\"properties\": {" SANDBOX_ID ", \"path\": {\"type\": \"string\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\", \"type\"], \"properties\": {" ENTRY_PROPS "}}",
      files_stat },
    { "files_mkdir", "Create a directory",
      "Create a directory and any missing parents; created is false if it already existed.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"path\"], "
      "\"properties\": {" SANDBOX_ID ", \"path\": {\"type\": \"string\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\", \"created\"], \"properties\": {\"path\": {\"type\": "
      "\"string\"}, \"created\": {\"type\": \"boolean\"}}}",
      files_mkdir },
    { "files_move", "Move or rename",
      "Move or rename a file or directory inside the sandbox.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"from\", \"to\"], "
      "\"properties\": {" SANDBOX_ID ", \"from\": {\"type\": \"string\"}, \"to\": {\"type\": \"string\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\"], \"properties\": {\"path\": {\"type\": \"string\"}}}",
      files_move },
    { "files_remove", "Delete a path",
      "Delete a file, a symlink or an empty directory; recursive true deletes a directory and everything in it.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"path\"], "
      "\"properties\": {" SANDBOX_ID ", \"path\": {\"type\": \"string\"}, \"recursive\": {\"type\": "
      "\"boolean\"}}}",
      "{\"type\": \"object\", \"required\": [\"path\", \"removed\"], \"properties\": {\"path\": {\"type\": "
      "\"string\"}, \"removed\": {\"type\": \"boolean\"}}}",
      files_remove },
    { "sandbox_pause", "Pause a sandbox",
      "Freeze every process of a sandbox: it uses no CPU, keeps its memory, files and running commands, and its "
      "timeout stops counting. Any later tool call on it (or sandbox_resume) continues exactly where it stopped.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      SANDBOX_OUT, sandbox_pause },
    { "sandbox_resume", "Resume a sandbox",
      "Wake a paused sandbox: its processes continue where they stopped and its timeout counts again.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      SANDBOX_OUT, sandbox_resume },
    { "sandbox_snapshot", "Snapshot a sandbox",
      "Save a sandbox's files (everything it changed over its template) as a snapshot; start new sandboxes from it "
      "with sandbox_create's snapshot argument. Running processes and memory are not saved.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID "}}",
      SNAPSHOT_OUT, sandbox_snapshot },
    { "sandbox_fork", "Fork a sandbox",
      "Make count copies (default 1, at most 16) of a sandbox's files as new, independent sandboxes with the same "
      "limits, envs and metadata: for trying several approaches in parallel. Processes are not copied.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\"], \"properties\": "
      "{" SANDBOX_ID ", \"count\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 16}}}",
      "{\"type\": \"object\", \"required\": [\"snapshot\", \"sandboxes\"], \"properties\": {\"snapshot\": "
      SNAPSHOT_OUT ", \"sandboxes\": {\"type\": \"array\", \"items\": " SANDBOX_OUT "}}}",
      sandbox_fork },
    { "snapshot_list", "List snapshots",
      "List the snapshots of this key (from sandbox_snapshot or sandbox_fork): id, the sandbox it came from, "
      "template, size on disk.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {}}",
      "{\"type\": \"object\", \"required\": [\"snapshots\"], \"properties\": {\"snapshots\": {\"type\": "
      "\"array\", \"items\": " SNAPSHOT_OUT "}}}",
      snapshot_list },
    { "snapshot_delete", "Delete a snapshot",
      "Delete a snapshot and free its disk. Refused while a live sandbox was made from it or another snapshot "
      "stacks on it.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"snapshot_id\"], \"properties\": "
      "{\"snapshot_id\": {\"type\": \"string\", \"description\": \"The snapshot's id (from sandbox_snapshot, "
      "sandbox_fork or snapshot_list).\"}}}",
      "{\"type\": \"object\", \"required\": [\"snapshot_id\", \"deleted\"], \"properties\": {\"snapshot_id\": "
      "{\"type\": \"string\"}, \"deleted\": {\"type\": \"boolean\"}}}",
      snapshot_delete },
    { "sandbox_network", "Set a sandbox's network policy",
      "Change what a sandbox may reach. mode \"none\": nothing (loopback only). mode \"allowlist\": only the domains "
      "and CIDRs in allow, minus those in deny, through sbx's egress proxy (its address is already in every "
      "command's HTTP_PROXY/HTTPS_PROXY/ALL_PROXY). \"example.com\" is that name only; \"*.example.com\" is its "
      "subdomains (a.example.com, a.b.example.com), not example.com itself: list both for both. Private, "
      "loopback, cloud metadata and the host's own addresses stay denied unless a CIDR names them. A denied "
      "request answers 403 with the reason. mode \"open\": the internet directly (no proxy, IPv4 only), minus "
      "deny CIDRs and those same internal ranges.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"sandbox_id\", \"mode\"], "
      "\"properties\": {" SANDBOX_ID ", \"mode\": {\"type\": \"string\", \"enum\": [\"none\", \"allowlist\", \"open\"]}, "
      "\"allow\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": \"Domains and CIDRs.\"}, "
      "\"deny\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": \"Domains and CIDRs; deny "
      "wins.\"}}}",
      SANDBOX_OUT, sandbox_network },
    { "template_list", "List templates",
      "List the templates sandboxes can start from (sandbox_create's template argument, by name or id): each with "
      "its layers, default envs, user, working directory, start command and what uses it. \"base\" is built in.",
      "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {}}",
      "{\"type\": \"object\", \"required\": [\"templates\"], \"properties\": {\"templates\": {\"type\": "
      "\"array\", \"items\": {\"type\": \"object\", \"required\": [\"name\", \"id\"], \"properties\": {\"name\": "
      "{\"type\": \"string\"}, \"id\": {\"type\": \"string\"}}}}}}",
      template_list },
};
const size_t sbx_mcp_ntools = sizeof sbx_mcp_tools / sizeof *sbx_mcp_tools;

/* ---- argument validation ---- */

static bool type_is(json_t *v, const char *t)
{
    if (!t)
        return false;
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double) (json_int_t) json_real_value(v));
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    return true;
}

static int check(json_t *schema, json_t *v, const char *where, char *msg, size_t len)
{
    json_t *types = json_object_get(schema, "type");
    if (json_is_array(types)) { /* ["integer", "null"]: any of them */
        size_t i;
        json_t *e;
        bool any = false;
        json_array_foreach(types, i, e) any |= type_is(v, json_string_value(e));
        if (!any) {
            _cleanup_free_ char *list = json_dumps(types, JSON_COMPACT);
            snprintf(msg, len, "'%s' must be one of the types %s", where, list ? list : "listed");
            return -1;
        }
    }
    const char *t = json_string_value(types);
    /* a C string would end at a NUL: another path, another sandbox.  Only
     * bytes that travel as bytes may hold one (a file's content, stdin). */
    if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v) &&
        strcmp(where, "content") != 0 && strcmp(where, "stdin") != 0) {
        snprintf(msg, len, "'%s' contains a NUL byte", where);
        return -1;
    }
    if (t && !type_is(v, t)) {
        snprintf(msg, len, "'%s' must be %s %s", where, t[0] == 'a' || t[0] == 'i' || t[0] == 'o' ? "an" : "a", t);
        return -1;
    }
    json_t *en = json_object_get(schema, "enum");
    if (en) {
        size_t i;
        json_t *e;
        bool found = false;
        json_array_foreach(en, i, e) found |= json_equal(e, v);
        if (!found) {
            _cleanup_free_ char *opts = json_dumps(en, JSON_COMPACT);
            snprintf(msg, len, "'%s' must be one of %s", where, opts ? opts : "the listed values");
            return -1;
        }
    }
    json_t *mn = json_object_get(schema, "minimum"), *mx = json_object_get(schema, "maximum");
    if (json_is_number(v) && ((mn && json_number_value(v) < json_number_value(mn)) ||
                              (mx && json_number_value(v) > json_number_value(mx)))) {
        snprintf(msg, len, "'%s' must be between %g and %g", where, mn ? json_number_value(mn) : -1e300,
                 mx ? json_number_value(mx) : 1e300);
        return -1;
    }
    if (json_is_array(v)) {
        json_t *mi = json_object_get(schema, "minItems");
        if (mi && json_array_size(v) < (size_t) json_integer_value(mi)) {
            snprintf(msg, len, "'%s' must have at least %lld item(s)", where, (long long) json_integer_value(mi));
            return -1;
        }
        json_t *items = json_object_get(schema, "items");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            char w[128];
            snprintf(w, sizeof w, "%s[%zu]", where, i);
            if (items && check(items, e, w, msg, len) < 0)
                return -1;
        }
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(schema, "properties");
        json_t *addl = json_object_get(schema, "additionalProperties");
        const char *k;
        json_t *e;
        json_object_foreach(v, k, e)
        {
            char w[128];
            snprintf(w, sizeof w, "%s%s%s", where[0] ? where : "", where[0] ? "." : "", k);
            json_t *ps = json_object_get(props, k);
            if (ps) {
                if (check(ps, e, w, msg, len) < 0)
                    return -1;
            } else if (json_is_false(addl)) {
                _cleanup_free_ char *known = NULL;
                size_t klen = 0;
                FILE *f = open_memstream(&known, &klen);
                const char *pk;
                json_t *pv;
                json_object_foreach(props, pk, pv) fprintf(f, "%s%s", ftell(f) ? ", " : "", pk);
                fclose(f);
                snprintf(msg, len, "unknown argument '%s' (known: %s)", w, known ? known : "none");
                return -1;
            } else if (json_is_object(addl) && check(addl, e, w, msg, len) < 0) {
                return -1;
            }
        }
        size_t i;
        json_t *req;
        json_array_foreach(json_object_get(schema, "required"), i, req)
        {
            if (!json_object_get(v, json_string_value(req))) {
                snprintf(msg, len, "missing required argument '%s'", json_string_value(req));
                return -1;
            }
        }
    }
    return 0;
}

int sbx_mcp_validate(json_t *schema, json_t *args, char *msg, size_t msglen)
{
    return check(schema, args, "", msg, msglen);
}
