/* mcp_client.c - the least of an MCP client that `sbx fuzz --interface mcp`
 * needs: a session on a Streamable HTTP endpoint (URL/mcp), `initialize`,
 * and `tools/call`, whose answer comes as a JSON body or as server-sent
 * events (the response is the event whose id is the request's).
 *
 * libcurl does the HTTP; what is ours is the JSON-RPC envelope and reading
 * SSE's "data:" lines, which is all an MCP client does on this transport.
 * It is written from the specification, not from sbx's own server, so that
 * a server that strays from the specification fails here as it would in
 * an agent's client. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PROTOCOL_VERSION "2025-11-25"

struct fz_mcp {
    CURL *curl;
    char *endpoint;    /* URL + "/mcp" */
    char *unix_path;   /* unix: URLs: the socket */
    char *auth;        /* "Authorization: Bearer KEY" */
    char session[256]; /* MCP-Session-Id, "" before initialize */
    long next_id;
    long timeout_ms;   /* fz_mcp_set_timeout(); 0: the default below */
    bool timed_out;    /* the last call was cut by it */
};

/* Without a bound of the caller's: a command's own timeout is the usual
 * bound, this only keeps a hung server from holding a worker for ever. */
#define DEFAULT_TIMEOUT_MS (900L * 1000)

typedef struct answer {
    char *body;
    size_t len;
    char content_type[128];
    char session[256];
} answer;

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    answer *a = ud;
    char *b = realloc(a->body, a->len + size * n + 1);
    if (!b)
        return 0;
    memcpy(b + a->len, p, size * n);
    a->body = b;
    a->len += size * n;
    b[a->len] = '\0';
    return size * n;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void) p, (void) ud;
    return size * n;
}

/* Header values we need: the session id and the content type. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    answer *a = ud;
    size_t len = size * n;
    char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    size_t name_len = (size_t) (colon - p);
    const char *v = colon + 1;
    size_t vlen = len - name_len - 1;
    while (vlen && (*v == ' ' || *v == '\t'))
        v++, vlen--;
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    char *dst = NULL;
    size_t cap = 0;
    if (name_len == 14 && strncasecmp(p, "MCP-Session-Id", 14) == 0)
        dst = a->session, cap = sizeof a->session;
    else if (name_len == 12 && strncasecmp(p, "Content-Type", 12) == 0)
        dst = a->content_type, cap = sizeof a->content_type;
    if (dst)
        snprintf(dst, cap, "%.*s", (int) vlen, v);
    return len;
}

/* One POST of a JSON-RPC message; the raw answer in *a (status returned,
 * -1 with err on a transport failure). */
static long post(fz_mcp *m, json_t *msg, answer *a, sbx_error *err)
{
    _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return sbx_error_set(err, ENOMEM, "MCP: encoding the request");
    struct curl_slist *h = NULL;
    char sid[300];
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json, text/event-stream");
    h = curl_slist_append(h, "MCP-Protocol-Version: " PROTOCOL_VERSION);
    h = curl_slist_append(h, m->auth);
    if (m->session[0]) {
        snprintf(sid, sizeof sid, "MCP-Session-Id: %s", m->session);
        h = curl_slist_append(h, sid);
    }
    CURL *c = m->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, m->endpoint);
    if (m->unix_path)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, m->unix_path);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) strlen(text));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    long bound = m->timeout_ms ? m->timeout_ms : DEFAULT_TIMEOUT_MS;
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, bound);
    m->timed_out = false;
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        m->timed_out = true;
        return sbx_error_set(err, 0, "MCP %s: no answer within %ld ms (timed out)", m->endpoint, bound);
    }
    if (rc != CURLE_OK)
        return sbx_error_set(err, 0, "MCP %s: %s", m->endpoint, curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* The JSON-RPC response with this id, from a JSON body or an SSE stream
 * (events are separated by a blank line; an event's data is its "data:"
 * lines joined by newlines). */
static json_t *response_for(const answer *a, long id)
{
    if (strncasecmp(a->content_type, "application/json", 16) == 0)
        return json_loadb(a->body ? a->body : "", a->len, 0, NULL);
    if (strncasecmp(a->content_type, "text/event-stream", 17) != 0 || !a->body)
        return NULL;
    _cleanup_free_ char *data = malloc(a->len + 1);
    size_t dlen = 0;
    if (!data)
        return NULL;
    const char *p = a->body, *end = a->body + a->len;
    while (p <= end) {
        const char *nl = memchr(p, '\n', (size_t) (end - p));
        const char *eol = nl ? nl : end;
        size_t llen = (size_t) (eol - p);
        if (llen && p[llen - 1] == '\r')
            llen--;
        if (llen == 0) { /* the end of an event: is it our response? */
            if (dlen) {
                json_t *msg = json_loadb(data, dlen, 0, NULL);
                json_t *mid = json_object_get(msg, "id");
                if (json_is_integer(mid) && json_integer_value(mid) == id)
                    return msg;
                json_decref(msg);
            }
            dlen = 0;
        } else if (llen >= 5 && strncmp(p, "data:", 5) == 0) {
            const char *v = p + 5;
            size_t vlen = llen - 5;
            if (vlen && *v == ' ')
                v++, vlen--;
            if (dlen)
                data[dlen++] = '\n';
            memcpy(data + dlen, v, vlen);
            dlen += vlen;
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    if (dlen) { /* a last event without its blank line */
        json_t *msg = json_loadb(data, dlen, 0, NULL);
        json_t *mid = json_object_get(msg, "id");
        if (json_is_integer(mid) && json_integer_value(mid) == id)
            return msg;
        json_decref(msg);
    }
    return NULL;
}

/* A request and its response's `result`. */
static int request(fz_mcp *m, const char *method, json_t *params, json_t **result, sbx_error *err)
{
    long id = ++m->next_id;
    _cleanup_json_ json_t *msg = json_pack("{s:s, s:I, s:s, s:O}", "jsonrpc", "2.0", "id", (json_int_t) id, "method",
                                           method, "params", params);
    answer a = { 0 };
    long status = post(m, msg, &a, err);
    if (status < 0) {
        free(a.body);
        return -1;
    }
    if (strcmp(method, "initialize") == 0)
        snprintf(m->session, sizeof m->session, "%s", a.session);
    _cleanup_json_ json_t *resp = status == 200 ? response_for(&a, id) : NULL;
    if (!resp) {
        sbx_error_set(err, 0, "MCP %s: HTTP %ld, %s, no JSON-RPC response with id %ld: %.200s", method, status,
                      a.content_type[0] ? a.content_type : "no content type", id, a.body ? a.body : "");
        free(a.body);
        return -1;
    }
    free(a.body);
    json_t *e = json_object_get(resp, "error");
    if (e)
        return sbx_error_set(err, 0, "MCP %s: JSON-RPC error %lld: %s", method,
                             (long long) json_integer_value(json_object_get(e, "code")),
                             json_string_value(json_object_get(e, "message")) ?: "");
    json_t *r = json_object_get(resp, "result");
    if (!json_is_object(r))
        return sbx_error_set(err, 0, "MCP %s: the response has no result", method);
    *result = json_incref(r);
    return 0;
}

fz_mcp *fz_mcp_open(const char *url, const char *key, sbx_error *err)
{
    fz_mcp *m = calloc(1, sizeof *m);
    if (!m || !(m->curl = curl_easy_init())) {
        free(m);
        sbx_error_set(err, ENOMEM, "MCP client");
        return NULL;
    }
    int r;
    if (strncmp(url, "unix:", 5) == 0) {
        const char *path = url + 5;
        if (strncmp(path, "//", 2) == 0)
            path += 2;
        m->unix_path = strdup(path);
        r = asprintf(&m->endpoint, "http://localhost/mcp");
    } else {
        size_t n = strlen(url);
        while (n && url[n - 1] == '/')
            n--;
        r = asprintf(&m->endpoint, "%.*s/mcp", (int) n, url);
    }
    if (r < 0 || asprintf(&m->auth, "Authorization: Bearer %s", key) < 0) {
        fz_mcp_close(m);
        sbx_error_set(err, ENOMEM, "MCP client");
        return NULL;
    }
    _cleanup_json_ json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", PROTOCOL_VERSION,
                                              "capabilities", "clientInfo", "name", "sbx-fuzz", "version", "1");
    _cleanup_json_ json_t *result = NULL;
    if (request(m, "initialize", params, &result, err) < 0) {
        fz_mcp_close(m);
        return NULL;
    }
    if (!m->session[0]) { /* a server may go without sessions; sbx's does not */
        sbx_error_set(err, 0, "MCP initialize: no MCP-Session-Id in the answer");
        fz_mcp_close(m);
        return NULL;
    }
    /* the notification: 202 and no body */
    _cleanup_json_ json_t *note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
    answer a = { 0 };
    long st = post(m, note, &a, err);
    free(a.body);
    if (st != 202) {
        if (st >= 0)
            sbx_error_set(err, 0, "MCP notifications/initialized: HTTP %ld, not 202", st);
        fz_mcp_close(m);
        return NULL;
    }
    return m;
}

void fz_mcp_set_timeout(fz_mcp *m, long ms)
{
    m->timeout_ms = ms > 0 ? ms : 0;
}

bool fz_mcp_timed_out(const fz_mcp *m)
{
    return m->timed_out;
}

int fz_mcp_call(fz_mcp *m, const char *tool, json_t *args, json_t **result, sbx_error *err)
{
    _cleanup_json_ json_t *params = json_pack("{s:s, s:O}", "name", tool, "arguments", args);
    return request(m, "tools/call", params, result, err);
}

void fz_mcp_close(fz_mcp *m)
{
    if (!m)
        return;
    if (m->session[0] && m->curl) { /* end the session: the server frees it now, not in an hour */
        struct curl_slist *h = NULL;
        char sid[300];
        snprintf(sid, sizeof sid, "MCP-Session-Id: %s", m->session);
        h = curl_slist_append(h, sid);
        h = curl_slist_append(h, m->auth);
        curl_easy_reset(m->curl);
        curl_easy_setopt(m->curl, CURLOPT_URL, m->endpoint);
        if (m->unix_path)
            curl_easy_setopt(m->curl, CURLOPT_UNIX_SOCKET_PATH, m->unix_path);
        curl_easy_setopt(m->curl, CURLOPT_CUSTOMREQUEST, "DELETE");
        curl_easy_setopt(m->curl, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(m->curl, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(m->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(m->curl, CURLOPT_TIMEOUT, 10L);
        curl_easy_perform(m->curl);
        curl_slist_free_all(h);
    }
    if (m->curl)
        curl_easy_cleanup(m->curl);
    free(m->endpoint);
    free(m->unix_path);
    free(m->auth);
    free(m);
}
