/* api_mcp.c - /mcp: MCP's Streamable HTTP transport on sbxd (docs/mcp.md).
 *
 * This file only frames messages: sessions (MCP-Session-Id), the header
 * checks (Origin, Host, Accept, MCP-Protocol-Version) and SSE.  The
 * protocol and the tools are src/mcp/, shared with `sbx mcp`; the tools
 * call this same daemon's REST API (d->self_url) with the caller's own
 * key, so they are scoped, validated and limited exactly like REST calls.
 *
 * A tools/call is answered with an SSE stream: a worker thread runs the
 * call and queues each message (progress notifications, then the
 * response); MHD's reader callback, on the connection's own thread, waits
 * for them.  A client that disconnects does not cancel the call (the
 * specification says disconnection is not cancellation): its answer is
 * dropped when it comes. */
#define _GNU_SOURCE
#include "api.h"
#include "auth.h"
#include "log.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define SESSION_IDLE_MS (3600 * 1000)
#define SESSIONS_PER_KEY 64
#define KEEPALIVE_S 15 /* an SSE comment this often keeps proxies from timing out */

typedef struct session {
    char id[33];
    char key_id[17];
    sbx_mcp *m;
    int refs;      /* the list holds one; each request using it one more */
    int64_t last_ms;
    struct session *next;
} session;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static session *sessions;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void session_put(session *s)
{
    pthread_mutex_lock(&lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&lock);
    if (last) {
        sbx_mcp_free(s->m); /* kills the commands of calls still running */
        free(s);
    }
}

/* Unlink s (under lock); the caller drops the list's reference. */
static void unlink_locked(session *s)
{
    for (session **p = &sessions; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}

/* End sessions idle for an hour (not one with a request in progress). */
static void sweep(void)
{
    int64_t now = now_ms();
    session *dead = NULL;
    pthread_mutex_lock(&lock);
    for (session **p = &sessions; *p;) {
        session *s = *p;
        if (s->refs == 1 && now - s->last_ms > SESSION_IDLE_MS) {
            *p = s->next;
            s->next = dead;
            dead = s;
        } else {
            p = &s->next;
        }
    }
    pthread_mutex_unlock(&lock);
    while (dead) {
        session *s = dead;
        dead = s->next;
        sbx_log("info", "event=mcp_session_expired session=%.8s key=%s", s->id, s->key_id);
        sbx_mcp_cancel_all(s->m);
        session_put(s);
    }
}

/* The session `id` of the request's key, referenced; NULL if none. */
static session *session_find(sbx_req *r, const char *id)
{
    pthread_mutex_lock(&lock);
    session *s = sessions;
    while (s && !(strcmp(s->id, id) == 0 && strcmp(s->key_id, r->key.id) == 0))
        s = s->next;
    if (s) {
        s->refs++;
        s->last_ms = now_ms();
    }
    pthread_mutex_unlock(&lock);
    return s;
}

static session *session_create(sbx_req *r, const char *bearer)
{
    sweep();
    unsigned n = 0;
    pthread_mutex_lock(&lock);
    for (session *s = sessions; s; s = s->next)
        n += strcmp(s->key_id, r->key.id) == 0;
    pthread_mutex_unlock(&lock);
    if (n >= SESSIONS_PER_KEY) {
        sbx_reply_error(r, 429, "too_many_sessions",
                        "this key has %u MCP sessions open: end one (DELETE /mcp) or wait an hour for idle ones to "
                        "expire",
                        n);
        return NULL;
    }
    session *s = calloc(1, sizeof *s);
    sbx_error err = { 0 };
    if (!s || !(s->m = sbx_mcp_new(r->d->self_url, bearer, &err))) {
        free(s);
        sbx_reply_error(r, 500, "internal", "cannot start an MCP session: %s", err.msg[0] ? err.msg : "no memory");
        return NULL;
    }
    sbx_random_hex(s->id, 16);
    snprintf(s->key_id, sizeof s->key_id, "%s", r->key.id);
    s->refs = 2; /* the list's and the caller's */
    s->last_ms = now_ms();
    pthread_mutex_lock(&lock);
    s->next = sessions;
    sessions = s;
    pthread_mutex_unlock(&lock);
    sbx_log("info", "event=mcp_session_started session=%.8s key=%s", s->id, s->key_id);
    return s;
}

/* ---- header checks ---- */

/* "http(s)://localhost|127.0.0.1|[::1][:port]", or a host header's
 * "localhost[:port]" when scheme is false. */
static bool loopback_name(const char *v, bool scheme)
{
    if (scheme) {
        if (strncasecmp(v, "http://", 7) == 0)
            v += 7;
        else if (strncasecmp(v, "https://", 8) == 0)
            v += 8;
        else
            return false;
    }
    static const char *const names[] = { "localhost", "127.0.0.1", "[::1]" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(v, names[i], n) != 0)
            continue;
        const char *rest = v + n;
        if (!*rest || (*rest == '/' && !rest[1]))
            return true;
        if (*rest == ':' && rest[1] && strspn(rest + 1, "0123456789") == strlen(rest + 1))
            return true;
    }
    return false;
}

static bool origin_allowed(sbx_daemon *d, const char *origin)
{
    if (loopback_name(origin, true))
        return true;
    for (size_t i = 0; i < d->n_mcp_origins; i++)
        if (strcasecmp(origin, d->mcp_origins[i]) == 0)
            return true;
    return false;
}

/* The transport asks clients to list both types; a bare * / * is not enough. */
static bool accepts(const char *accept, const char *type)
{
    return accept && strcasestr(accept, type);
}

/* The checks every /mcp request passes; false when one replied. */
static bool transport_ok(sbx_req *r)
{
    const char *origin = sbx_header(r, "Origin");
    if (origin && !origin_allowed(r->d, origin)) {
        sbx_reply_error(r, 403, "forbidden_origin",
                        "Origin '%s' may not use /mcp (DNS rebinding protection; allow it with sbxd "
                        "--mcp-allow-origin)",
                        origin);
        return false;
    }
    const char *host = sbx_header(r, "Host");
    if (r->d->loopback && (!host || !loopback_name(host, false))) {
        sbx_reply_error(r, 403, "forbidden_host",
                        "Host '%s' is not this loopback server (DNS rebinding protection)", host ? host : "");
        return false;
    }
    const char *v = sbx_header(r, "MCP-Protocol-Version");
    if (v && !sbx_mcp_version_supported(v)) {
        sbx_reply_error(r, 400, "unsupported_protocol_version",
                        "MCP-Protocol-Version '%s' is not supported (2025-11-25, 2025-06-18, 2025-03-26 are)", v);
        return false;
    }
    return true;
}

/* ---- replies ---- */

static void reply_rpc(sbx_req *r, unsigned status, json_t *msg, const char *session_id)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    if (!s) {
        sbx_reply_error(r, 500, "internal", "cannot encode the response");
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (session_id)
        MHD_add_response_header(resp, "MCP-Session-Id", session_id);
    sbx_reply_response(r, status, resp);
}

/* Collects the one response of a request answered with plain JSON. */
static void capture(void *ctx, json_t *msg)
{
    json_t **out = ctx;
    if (!*out && !json_object_get(msg, "method")) /* the response, not a notification */
        *out = json_incref(msg);
}

/* ---- SSE for tools/call ---- */

typedef struct stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *buf;
    size_t len, off, cap;
    bool done;
    int refs; /* the worker's and the MHD response's */
    session *s;
    json_t *msg;
} stream;

static void stream_put(stream *st)
{
    pthread_mutex_lock(&st->lock);
    bool last = --st->refs == 0;
    pthread_mutex_unlock(&st->lock);
    if (!last)
        return;
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cond);
    free(st->buf);
    free(st);
}

static void stream_append(stream *st, const char *a, size_t n)
{
    if (st->len + n > st->cap) {
        size_t cap = st->cap ? st->cap : 4096;
        while (cap < st->len + n)
            cap *= 2;
        char *b = realloc(st->buf, cap);
        if (!b)
            return; /* the client sees the stream end without an answer */
        st->buf = b;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, a, n);
    st->len += n;
}

static void stream_send(void *ctx, json_t *msg)
{
    stream *st = ctx;
    _cleanup_free_ char *s = json_dumps(msg, JSON_COMPACT);
    if (!s)
        return;
    pthread_mutex_lock(&st->lock);
    stream_append(st, "event: message\ndata: ", 21);
    stream_append(st, s, strlen(s));
    stream_append(st, "\n\n", 2);
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

static void *stream_worker(void *arg)
{
    stream *st = arg;
    sbx_mcp_handle(st->s->m, st->msg, stream_send, st);
    json_decref(st->msg);
    session_put(st->s);
    pthread_mutex_lock(&st->lock);
    st->done = true;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    stream_put(st);
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void) pos;
    stream *st = cls;
    pthread_mutex_lock(&st->lock);
    while (st->off == st->len && !st->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += KEEPALIVE_S;
        if (pthread_cond_timedwait(&st->cond, &st->lock, &ts) == ETIMEDOUT && st->off == st->len) {
            pthread_mutex_unlock(&st->lock);
            static const char ka[] = ": keep-alive\n\n";
            if (max < sizeof ka - 1)
                return 0;
            memcpy(out, ka, sizeof ka - 1);
            return (ssize_t) (sizeof ka - 1);
        }
    }
    size_t n = st->len - st->off;
    if (n == 0) { /* done and drained */
        pthread_mutex_unlock(&st->lock);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (n > max)
        n = max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    if (st->off == st->len)
        st->off = st->len = 0;
    pthread_mutex_unlock(&st->lock);
    return (ssize_t) n;
}

static void stream_free(void *cls)
{
    stream_put(cls);
}

/* Answer msg (a tools/call) with an SSE stream; takes s's reference. */
static void reply_stream(sbx_req *r, session *s, json_t *msg)
{
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        session_put(s);
        sbx_reply_error(r, 500, "internal", "out of memory");
        return;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    st->refs = 2;
    st->s = s;
    st->msg = json_incref(msg);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, st,
                                                                  stream_free);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = resp ? pthread_create(&t, &attr, stream_worker, st) : ENOMEM;
    pthread_attr_destroy(&attr);
    if (e) {
        json_decref(st->msg);
        session_put(s);
        st->refs = 1;
        if (resp)
            MHD_destroy_response(resp); /* calls stream_free */
        else
            stream_put(st);
        sbx_reply_error(r, 500, "internal", "cannot start the call: %s", strerror(e));
        return;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "MCP-Session-Id", s->id);
    sbx_reply_response(r, 200, resp);
}

/* ---- the endpoints ---- */

/* The key of "Authorization: Bearer KEY" (sbx_auth_check accepted it):
 * the session's tools call the REST API with it. */
static const char *bearer_key(sbx_req *r)
{
    const char *a = sbx_header(r, "Authorization");
    if (!a || strncasecmp(a, "Bearer", 6) != 0)
        return "";
    a += 6;
    while (*a == ' ' || *a == '\t')
        a++;
    return a;
}

void sbx_api_mcp_post(sbx_req *r)
{
    if (!transport_ok(r))
        return;
    const char *ct = sbx_header(r, "Content-Type");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
        sbx_reply_error(r, 415, "unsupported_media_type", "POST /mcp takes a JSON-RPC message as application/json");
        return;
    }
    const char *accept = sbx_header(r, "Accept");
    if (!accepts(accept, "application/json") || !accepts(accept, "text/event-stream")) {
        sbx_reply_error(r, 406, "not_acceptable",
                        "POST /mcp answers with application/json or text/event-stream: send "
                        "'Accept: application/json, text/event-stream'");
        return;
    }
    json_error_t je;
    /* any JSON value parses (42 is then an invalid request, not a parse
     * error); NUL bytes too, for file content: the tools refuse them
     * anywhere else */
    _cleanup_json_ json_t *msg =
        json_loadb(r->body ? r->body : "", r->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!msg) {
        _cleanup_json_ json_t *e = sbx_mcp_error(NULL, SBX_RPC_PARSE_ERROR, "not JSON: %s", je.text);
        reply_rpc(r, 400, e, NULL);
        return;
    }
    if (!json_is_object(msg)) {
        _cleanup_json_ json_t *e = sbx_mcp_error(NULL, SBX_RPC_INVALID_REQUEST,
                                                 json_is_array(msg) ? "JSON-RPC batches are not supported"
                                                                    : "a JSON-RPC message is an object");
        reply_rpc(r, 400, e, NULL);
        return;
    }
    const char *method = json_string_value(json_object_get(msg, "method"));
    bool request = sbx_mcp_is_request(msg);
    bool response = !json_object_get(msg, "method") && json_object_get(msg, "id") &&
                    (json_object_get(msg, "result") || json_object_get(msg, "error"));
    if (!request && !response && !json_object_get(msg, "method")) {
        _cleanup_json_ json_t *e = sbx_mcp_error(json_object_get(msg, "id"), SBX_RPC_INVALID_REQUEST,
                                                 "not a JSON-RPC request, notification or response (no 'method')");
        reply_rpc(r, 400, e, NULL);
        return;
    }
    const char *sid = sbx_header(r, "MCP-Session-Id");
    session *s = NULL;
    bool created = false;
    if (sid) {
        if (!(s = session_find(r, sid))) {
            sbx_reply_error(r, 404, "session_not_found",
                            "no MCP session '%.64s' for this key (it ended or expired): initialize a new one", sid);
            return;
        }
    } else if (request && method && strcmp(method, "initialize") == 0) {
        if (!(s = session_create(r, bearer_key(r))))
            return;
        created = true;
    } else {
        sbx_reply_error(r, 400, "session_required",
                        "send the MCP-Session-Id header that initialize returned (or initialize first)");
        return;
    }
    if (!request) {
        json_t *ignored = NULL;
        sbx_mcp_handle(s->m, msg, capture, &ignored);
        json_decref(ignored);
        session_put(s);
        sbx_reply_empty(r, 202);
        return;
    }
    if (method && strcmp(method, "tools/call") == 0) {
        reply_stream(r, s, msg);
        return;
    }
    json_t *res = NULL;
    sbx_mcp_handle(s->m, msg, capture, &res);
    if (!res)
        res = sbx_mcp_error(json_object_get(msg, "id"), SBX_RPC_INTERNAL, "no response");
    reply_rpc(r, 200, res, created ? s->id : NULL);
    json_decref(res);
    session_put(s);
}

void sbx_api_mcp_delete(sbx_req *r)
{
    if (!transport_ok(r))
        return;
    const char *sid = sbx_header(r, "MCP-Session-Id");
    if (!sid) {
        sbx_reply_error(r, 400, "session_required", "DELETE /mcp ends the session named by MCP-Session-Id");
        return;
    }
    session *s = session_find(r, sid);
    if (!s) {
        sbx_reply_error(r, 404, "session_not_found", "no MCP session '%.64s' for this key", sid);
        return;
    }
    pthread_mutex_lock(&lock);
    unlink_locked(s);
    pthread_mutex_unlock(&lock);
    sbx_log("info", "event=mcp_session_ended session=%.8s key=%s", s->id, s->key_id);
    sbx_mcp_cancel_all(s->m);
    session_put(s); /* the list's */
    session_put(s); /* ours */
    sbx_reply_empty(r, 204);
}

void sbx_api_mcp_get(sbx_req *r)
{
    if (!transport_ok(r))
        return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Allow", "POST, DELETE");
    sbx_reply_response(r, 405, resp);
}
