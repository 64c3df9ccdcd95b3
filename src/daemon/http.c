/* http.c - see http.h. */
#define _GNU_SOURCE
#include "http.h"
#include "api.h"
#include "auth.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const sbx_route routes[] = {
    { "GET", "/v1/health", SBX_BODY_NONE, true, sbx_api_health, NULL, NULL, 0 },
    { "GET", "/v1/openapi.json", SBX_BODY_NONE, false, sbx_api_openapi, NULL, NULL, 0 },
    { "GET", "/v1/usage", SBX_BODY_NONE, false, sbx_api_usage, NULL, NULL, 0 },
    { "GET", "/metrics", SBX_BODY_NONE, false, sbx_api_prometheus, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes", SBX_BODY_JSON, false, sbx_api_sandbox_create, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes", SBX_BODY_NONE, false, sbx_api_sandbox_list, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}", SBX_BODY_NONE, false, sbx_api_sandbox_get, NULL, NULL, 0 },
    { "DELETE", "/v1/sandboxes/{}", SBX_BODY_NONE, false, sbx_api_sandbox_delete, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/timeout", SBX_BODY_JSON, false, sbx_api_sandbox_timeout, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/pause", SBX_BODY_JSON, false, sbx_api_sandbox_pause, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/resume", SBX_BODY_JSON, false, sbx_api_sandbox_resume, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/snapshots", SBX_BODY_JSON, false, sbx_api_snapshot_create, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/fork", SBX_BODY_JSON, false, sbx_api_sandbox_fork, NULL, NULL, 0 },
    { "GET", "/v1/snapshots", SBX_BODY_NONE, false, sbx_api_snapshot_list, NULL, NULL, 0 },
    { "GET", "/v1/snapshots/{}", SBX_BODY_NONE, false, sbx_api_snapshot_get, NULL, NULL, 0 },
    { "DELETE", "/v1/snapshots/{}", SBX_BODY_NONE, false, sbx_api_snapshot_delete, NULL, NULL, 0 },
    { "POST", "/v1/templates", SBX_BODY_STREAM, false, sbx_api_template_build, sbx_api_template_build_begin,
      sbx_api_template_build_data, 0 },
    { "GET", "/v1/templates", SBX_BODY_NONE, false, sbx_api_template_list, NULL, NULL, 0 },
    { "GET", "/v1/templates/{}", SBX_BODY_NONE, false, sbx_api_template_get, NULL, NULL, 0 },
    { "DELETE", "/v1/templates/{}", SBX_BODY_NONE, false, sbx_api_template_delete, NULL, NULL, 0 },
    { "PATCH", "/v1/sandboxes/{}/network", SBX_BODY_JSON, false, sbx_api_sandbox_network, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/events", SBX_BODY_NONE, false, sbx_api_sandbox_events, NULL, NULL, 0 },
    /* HTTP to a server in the sandbox: every method, any path below */
    { "*", "/v1/sandboxes/{}/ports/{}/*", SBX_BODY_STREAM, false, sbx_api_port, sbx_api_port_begin,
      sbx_api_port_data, 0 },
    { "GET", "/v1/sandboxes/{}/metrics", SBX_BODY_NONE, false, sbx_api_sandbox_metrics, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/commands", SBX_BODY_JSON, false, sbx_api_cmd_run, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/commands", SBX_BODY_NONE, false, sbx_api_cmd_list, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/commands/{}/stream", SBX_BODY_NONE, false, sbx_api_cmd_stream, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/commands/{}/stdin", SBX_BODY_STREAM, false, sbx_api_cmd_stdin,
      sbx_api_cmd_stdin_begin, sbx_api_cmd_stdin_data, 0 },
    { "POST", "/v1/sandboxes/{}/commands/{}/stdin/close", SBX_BODY_NONE, false, sbx_api_cmd_stdin_close, NULL,
      NULL, 0 },
    { "POST", "/v1/sandboxes/{}/commands/{}/signal", SBX_BODY_JSON, false, sbx_api_cmd_signal, NULL, NULL, 0 },
    { "DELETE", "/v1/sandboxes/{}/commands/{}", SBX_BODY_NONE, false, sbx_api_cmd_kill, NULL, NULL, 0 },
    { "PUT", "/v1/sandboxes/{}/files", SBX_BODY_STREAM, false, sbx_api_file_put, sbx_api_file_put_begin,
      sbx_api_file_put_data, 0 },
    { "GET", "/v1/sandboxes/{}/files", SBX_BODY_NONE, false, sbx_api_file_get, NULL, NULL, 0 },
    { "DELETE", "/v1/sandboxes/{}/files", SBX_BODY_NONE, false, sbx_api_file_delete, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/files/list", SBX_BODY_NONE, false, sbx_api_file_list, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/files/stat", SBX_BODY_NONE, false, sbx_api_file_stat, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/files/mkdir", SBX_BODY_JSON, false, sbx_api_file_mkdir, NULL, NULL, 0 },
    { "POST", "/v1/sandboxes/{}/files/move", SBX_BODY_JSON, false, sbx_api_file_move, NULL, NULL, 0 },
    { "GET", "/v1/sandboxes/{}/pty", SBX_BODY_NONE, false, sbx_api_pty, NULL, NULL, 0 },
    /* files_write carries its content in the JSON: room for 48 MiB of base64 */
    { "POST", "/mcp", SBX_BODY_JSON, false, sbx_api_mcp_post, NULL, NULL, SBX_MCP_BODY_MAX },
    { "GET", "/mcp", SBX_BODY_NONE, false, sbx_api_mcp_get, NULL, NULL, 0 },
    { "DELETE", "/mcp", SBX_BODY_NONE, false, sbx_api_mcp_delete, NULL, NULL, 0 },
};

static size_t json_max(const sbx_route *route)
{
    return route->max_body ? route->max_body : SBX_JSON_MAX;
}

/* 1: path matches (captures filled), 0: not. */
static int match(const char *pattern, const char *url, char arg[2][80])
{
    int na = 0;
    const char *p = pattern, *u = url;
    while (*p && *u) {
        if (p[0] == '{' && p[1] == '}') {
            const char *end = strchr(u, '/');
            size_t n = end ? (size_t) (end - u) : strlen(u);
            if (n == 0 || n >= 80 || na >= 2)
                return 0;
            memcpy(arg[na], u, n);
            arg[na][n] = '\0';
            na++;
            u += n;
            p += 2;
            continue;
        }
        if (p[0] == '/' && p[1] == '*' && !p[2]) /* a trailing slash-star: anything after, or nothing */
            return 1;
        if (*p != *u)
            return 0;
        p++;
        u++;
    }
    if (p[0] == '/' && p[1] == '*' && !p[2] && !*u)
        return 1;
    /* a trailing slash is the same resource */
    if (*u == '/' && u[1] == '\0')
        u++;
    return *p == '\0' && *u == '\0';
}

static const sbx_route *find_route(const char *method, const char *url, char arg[2][80], bool *wrong_method)
{
    *wrong_method = false;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        char a[2][80];
        if (!match(routes[i].pattern, url, a))
            continue;
        if (strcmp(routes[i].method, "*") != 0 && strcmp(routes[i].method, method) != 0 &&
            !(strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0)) {
            *wrong_method = true;
            continue;
        }
        memcpy(arg, a, sizeof a);
        return &routes[i];
    }
    return NULL;
}

/* ---- replies ---- */

void sbx_reply_response(sbx_req *r, unsigned status, struct MHD_Response *resp)
{
    if (r->replied) {
        MHD_destroy_response(resp);
        return;
    }
    r->replied = true;
    r->status = status;
    r->response = resp;
}

void sbx_reply_json(sbx_req *r, unsigned status, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) {
        sbx_reply_error(r, 500, "internal", "cannot encode the response");
        return;
    }
    size_t n = strlen(s);
    s[n] = '\0';
    /* a newline at the end: friendlier to curl and shell pipelines */
    char *t = realloc(s, n + 2);
    if (t) {
        s = t;
        s[n++] = '\n';
        s[n] = '\0';
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    sbx_reply_response(r, status, resp);
}

void sbx_reply_error(sbx_req *r, unsigned status, const char *code, const char *fmt, ...)
{
    if (r->replied)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->failed = true;
    /* json_stringn would refuse a message quoting invalid UTF-8 from a
     * request: fall back to a generic text rather than no reply */
    json_t *m = json_string(msg);
    if (!m)
        m = json_string("(message not representable)");
    sbx_reply_json(r, status, json_pack("{s:{s:s, s:o}}", "error", "code", code, "message", m));
    if (status >= 500)
        sbx_log("error", "event=http_error method=%s url=%s status=%u message=\"%s\"", r->method, r->url, status,
                msg);
}

void sbx_reply_empty(sbx_req *r, unsigned status)
{
    sbx_reply_response(r, status, MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT));
}

void sbx_reply_sbx_error(sbx_req *r, const sbx_error *err)
{
    unsigned st;
    const char *code;
    switch (err->errno_) {
    case ENOENT:
    case ESRCH:
        st = 404, code = "not_found";
        break;
    case EACCES:
    case EPERM:
    case EROFS:
        st = 403, code = "forbidden";
        break;
    case ENOSPC:
    case EDQUOT:
        st = 507, code = "insufficient_storage";
        break;
    case EISDIR:
    case ENOTDIR:
    case EEXIST:
    case ENOTEMPTY:
    case EXDEV:
    case EBUSY:
    case EPIPE:
    case ECHILD:
        st = 409, code = "conflict";
        break;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case E2BIG:
    case EFBIG:
        st = 400, code = "invalid_request";
        break;
    case EAGAIN:
        st = 429, code = "quota_exceeded";
        break;
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPROTO:
        st = 503, code = "unavailable";
        break;
    default:
        st = 500, code = "internal";
    }
    sbx_reply_error(r, st, code, "%s", err->msg);
}

void sbx_format_time(int64_t ms, char *out, size_t len)
{
    time_t s = (time_t) (ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char buf[32];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03dZ", buf, (int) (ms % 1000));
}

/* ---- request access ---- */

const char *sbx_query(sbx_req *r, const char *name, bool *bad)
{
    const char *v = NULL;
    size_t n = 0;
    *bad = false;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v, &n) != MHD_YES)
        return NULL;
    if (!v)
        return "";
    if (strlen(v) != n) {
        *bad = true;
        sbx_reply_error(r, 400, "invalid_request", "query parameter '%s' contains a NUL byte", name);
        return NULL;
    }
    return v;
}

const char *sbx_header(sbx_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

json_t *sbx_req_json(sbx_req *r)
{
    if (r->body_len == 0)
        return json_object();
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        sbx_reply_error(r, 400, "invalid_request", "malformed JSON at line %d column %d: %s", e.line, e.column,
                        e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        sbx_reply_error(r, 400, "invalid_request", "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

int sbx_req_no_fields(sbx_req *r)
{
    json_t *j = sbx_req_json(r);
    if (!j)
        return -1;
    static const char *const none[] = { NULL };
    int ret = sbx_json_only(r, j, none) < 0 ? -1 : 0;
    json_decref(j);
    return ret;
}

int sbx_json_only(sbx_req *r, json_t *obj, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(k, allowed[i]) == 0;
        if (!ok) {
            sbx_reply_error(r, 400, "invalid_request", "unknown field '%s'", k);
            return -1;
        }
    }
    return 0;
}

int sbx_json_string(sbx_req *r, json_t *obj, const char *name, const char **out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be a string", name);
        return -1;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' contains a NUL byte", name);
        return -1;
    }
    *out = json_string_value(v);
    return 1;
}

int sbx_json_int(sbx_req *r, json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be an integer", name);
        return -1;
    }
    json_int_t i = json_integer_value(v);
    if (i < min || i > max) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be between %lld and %lld", name, (long long) min,
                        (long long) max);
        return -1;
    }
    *out = i;
    return 1;
}

int sbx_json_number(sbx_req *r, json_t *obj, const char *name, double min, double max, double *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be a number", name);
        return -1;
    }
    double d = json_number_value(v);
    if (!(d >= min && d <= max)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be between %g and %g", name, min, max);
        return -1;
    }
    *out = d;
    return 1;
}

int sbx_json_bool(sbx_req *r, json_t *obj, const char *name, bool *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be true or false", name);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

int sbx_json_strmap(sbx_req *r, json_t *obj, const char *name, json_t **out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v)) {
        sbx_reply_error(r, 400, "invalid_request", "'%s' must be an object of strings", name);
        return -1;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x) || !k[0] ||
            strlen(k) > 256 || json_string_length(x) > 65536) {
            sbx_reply_error(r, 400, "invalid_request",
                            "'%s.%s' must be a string (no NUL byte; keys 1-256, values up to 65536 bytes)", name, k);
            return -1;
        }
    }
    *out = v;
    return 1;
}

sbx_box *sbx_req_box(sbx_req *r)
{
    sbx_box *b = sbx_req_box_as_is(r);
    if (!b)
        return NULL;
    pthread_mutex_lock(&r->d->reg.lock);
    bool paused = b->paused;
    pthread_mutex_unlock(&r->d->reg.lock);
    sbx_error err = { 0 };
    if (paused && sbx_reg_pause(&r->d->reg, b, false, 0, &err) < 0) {
        sbx_reply_error(r, err.errno_ == ESRCH ? 409 : 503, err.errno_ == ESRCH ? "conflict" : "unavailable",
                        "sandbox %s is paused and could not be resumed: %s", b->id, err.msg);
        sbx_reg_put(&r->d->reg, b);
        return NULL;
    }
    if (paused)
        sbx_log("info", "event=resumed sandbox=%s reason=\"%s %s\"", b->id, r->method, r->url);
    return b;
}

sbx_box *sbx_req_box_as_is(sbx_req *r)
{
    sbx_box *b = sbx_reg_get(&r->d->reg, r->arg[0], r->key.id);
    if (b)
        return b;
    sbx_box_row row;
    if (sbx_store_box_get(r->d->store, r->arg[0], &row) == 1) {
        bool mine = strcmp(row.key_id, r->key.id) == 0;
        if (mine)
            sbx_reply_error(r, 409, "conflict", "sandbox %s is %s, not running", row.id, row.state);
        sbx_box_row_free(&row);
        if (mine)
            return NULL;
    }
    sbx_reply_error(r, 404, "not_found", "no sandbox %s", r->arg[0]);
    return NULL;
}

/* ---- libmicrohttpd glue ---- */

static bool json_content_type_ok(sbx_req *r)
{
    const char *ct = sbx_header(r, "Content-Type");
    if (!ct || !*ct)
        return true;
    return strncasecmp(ct, "application/json", 16) == 0 && (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ');
}

static enum MHD_Result queue(sbx_req *r)
{
    if (!r->response)
        sbx_reply_error(r, 500, "internal", "no response");
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, r->response);
    MHD_destroy_response(r->response);
    r->response = NULL;
    if (r->status >= 500)
        __atomic_add_fetch(&r->d->errors_5xx, 1, __ATOMIC_RELAXED);
    else if (r->status >= 400)
        __atomic_add_fetch(&r->d->errors_4xx, 1, __ATOMIC_RELAXED);
    return ret;
}

static void first_call(sbx_req *r)
{
    bool wrong_method;
    r->route = find_route(r->method, r->url, r->arg, &wrong_method);
    if (!r->route) {
        if (wrong_method)
            sbx_reply_error(r, 405, "method_not_allowed", "%s is not allowed on %s", r->method, r->url);
        else
            sbx_reply_error(r, 404, "not_found", "no such endpoint: %s", r->url);
        return;
    }
    if (!r->route->public_ && !sbx_auth_check(r->d->store, sbx_header(r, "Authorization"), &r->key)) {
        sbx_reply_error(r, 401, "unauthorized", "missing or invalid API key (Authorization: Bearer KEY)");
        /* RFC 6750; MCP clients look for it */
        if (r->response)
            MHD_add_response_header(r->response, "WWW-Authenticate", "Bearer realm=\"sbx\"");
        return;
    }
    const char *cl = sbx_header(r, "Content-Length");
    uint64_t len = cl ? strtoull(cl, NULL, 10) : 0;
    if (r->route->body == SBX_BODY_JSON) {
        if (!json_content_type_ok(r)) {
            sbx_reply_error(r, 415, "unsupported_media_type", "send the body as application/json");
            return;
        }
        if (len > json_max(r->route)) {
            sbx_reply_error(r, 413, "too_large", "JSON bodies are limited to %zu bytes", json_max(r->route));
            return;
        }
    } else if (r->route->body == SBX_BODY_STREAM) {
        if (len > r->d->max_upload) {
            sbx_reply_error(r, 413, "too_large", "uploads are limited to %llu bytes (sbxd --max-upload)",
                            (unsigned long long) r->d->max_upload);
            return;
        }
        r->route->begin(r);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void) version;
    sbx_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->d = cls;
        r->conn = conn;
        r->method = method;
        r->url = url;
        *con_cls = r;
        __atomic_add_fetch(&r->d->requests, 1, __ATOMIC_RELAXED);
        first_call(r);
        /* An early answer (no route, no key, too large) goes out before
         * the body is read: with "Expect: 100-continue" it is never sent. */
        return r->replied ? queue(r) : MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->failed || r->replied)
            return MHD_YES; /* an error is decided: swallow the rest */
        r->received += n;
        if (r->route->body == SBX_BODY_JSON) {
            if (r->body_len + n > json_max(r->route)) {
                sbx_reply_error(r, 413, "too_large", "JSON bodies are limited to %zu bytes", json_max(r->route));
                return MHD_YES;
            }
            char *b = realloc(r->body, r->body_len + n + 1);
            if (!b) {
                sbx_reply_error(r, 500, "internal", "out of memory");
                return MHD_YES;
            }
            memcpy(b + r->body_len, upload_data, n);
            r->body = b;
            r->body_len += n;
            r->body[r->body_len] = '\0';
        } else if (r->route->body == SBX_BODY_STREAM) {
            if (r->received > r->d->max_upload) {
                sbx_reply_error(r, 413, "too_large", "uploads are limited to %llu bytes (sbxd --max-upload)",
                                (unsigned long long) r->d->max_upload);
                return MHD_YES;
            }
            r->route->data(r, upload_data, n);
        }
        return MHD_YES;
    }
    if (!r->replied)
        r->route->handle(r);
    return queue(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void) cls;
    (void) conn;
    (void) t;
    sbx_req *r = *con_cls;
    if (!r)
        return;
    if (r->ctx_free)
        r->ctx_free(r->ctx);
    if (r->response)
        MHD_destroy_response(r->response);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static int listen_on(const char *spec, char *bound, size_t bound_len, sbx_error *err)
{
    if (strncmp(spec, "unix:", 5) == 0) {
        const char *path = spec + 5;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (!*path || strlen(path) >= sizeof sa.sun_path)
            return sbx_error_set(err, EINVAL, "--listen %s: bad socket path", spec);
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return sbx_error_set(err, errno, "socket");
        unlink(path);
        /* root only, like the daemon's home: a key is needed anyway */
        mode_t old = umask(0077);
        int rb = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        umask(old);
        if (rb < 0 || listen(fd, 512) < 0) {
            int e = errno;
            close(fd);
            return sbx_error_set(err, e, "listen on %s", path);
        }
        snprintf(bound, bound_len, "unix:%s", path);
        return fd;
    }
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || (size_t) (colon - spec) >= sizeof host)
        return sbx_error_set(err, EINVAL, "--listen %s: use HOST:PORT or unix:PATH", spec);
    memcpy(host, spec, (size_t) (colon - spec));
    host[colon - spec] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535 || !colon[1])
        return sbx_error_set(err, EINVAL, "--listen %s: bad port", spec);
    struct sockaddr_storage ss = { 0 };
    socklen_t sl;
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') {
        h[strlen(h) - 1] = '\0';
        h++;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
    if (inet_pton(AF_INET, h, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t) port);
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, h, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t) port);
        sl = sizeof *s6;
    } else {
        return sbx_error_set(err, EINVAL, "--listen %s: '%s' is not an IP address", spec, h);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_set(err, errno, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *) &ss, sl) < 0 || listen(fd, 512) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_set(err, e, "listen on %s", spec);
    }
    getsockname(fd, (struct sockaddr *) &ss, &sl);
    char addr[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET)
        snprintf(bound, bound_len, "%s:%u", inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof addr),
                 ntohs(s4->sin_port));
    else
        snprintf(bound, bound_len, "[%s]:%u", inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof addr),
                 ntohs(s6->sin6_port));
    return fd;
}

struct MHD_Daemon *sbx_http_start(sbx_daemon *d, const char *listen, char *bound, size_t bound_len, sbx_error *err)
{
    int fd = listen_on(listen, bound, bound_len, err);
    if (fd < 0)
        return NULL;
    struct MHD_Daemon *mhd = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE |
            MHD_USE_ITC,
        0, NULL, NULL, on_request, d, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, d,
        /* big upload pieces: a 1 GiB upload is ~1000 calls, not 30000 */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (1u << 20), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) 300,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned) 1024, MHD_OPTION_THREAD_STACK_SIZE, (size_t) (256u << 10),
        MHD_OPTION_END);
    if (!mhd) {
        close(fd);
        sbx_error_set(err, EIO, "start the HTTP server on %s", listen);
        return NULL;
    }
    return mhd;
}
