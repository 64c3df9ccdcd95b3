/* http.c - the libcurl REST client of sbxd (used by sbx-client and the MCP server); see http.h.
 *
 * All requests share one easy handle, so consecutive requests reuse one
 * connection (`sbx cp` of a tree makes one request per file).  Each request
 * starts from curl_easy_reset(): no option of an earlier request (an upload
 * callback, a custom method) can leak into the next one. */
#define _GNU_SOURCE
#include "http.h"
#include "../lib/cleanup.h"

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifndef SBX_VERSION
#define SBX_VERSION "dev"
#endif

/* A buffered (JSON) answer larger than this is refused rather than held:
 * sbxd's own answers are far smaller, so it would be a wrong URL or a bug. */
#define MAX_BODY (64u << 20)
/* Longest ndjson line: one output chunk, base64-encoded, plus its framing. */
#define MAX_LINE (64u << 20)
/* How much of an error answer is kept to explain the failure. */
#define MAX_ERROR_BODY (64u << 10)
/* A daemon that does not accept the connection within this is not there. */
#define CONNECT_TIMEOUT_S 10L

struct sbx_http {
    CURL *curl;
    char *base;      /* prefix of every request URL, no trailing '/' */
    char *unix_path; /* unix: URLs: the socket; NULL for TCP */
    char *display;   /* the URL as the user gave it, for messages */
    char *auth;      /* "Authorization: Bearer KEY", or NULL */
    long status;
    long timeout_ms; /* sbx_http_set_timeout(); 0: none */
    bool timed_out;  /* the last request was cut by it */
    char code[64];
    char errbuf[CURL_ERROR_SIZE];
};

struct buf {
    char *data;
    size_t len, cap;
};

static int buf_append(struct buf *b, const char *p, size_t n, size_t max)
{
    if (n > max - b->len)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0'; /* JSON parsing and messages want a C string */
    return 0;
}

enum sink_kind { SINK_MEMORY, SINK_FILE, SINK_LINES };

/* Where a response's body goes, and the state of the request while curl
 * runs our callbacks. */
struct sink {
    sbx_http *h;
    enum sink_kind kind;
    struct buf body;   /* SINK_MEMORY; SINK_LINES: the unfinished line; any error answer */
    FILE *out;         /* SINK_FILE */
    FILE *in;          /* uploads */
    int64_t in_left;   /* uploads of known size: bytes still to send */
    sbx_http_line_fn on_line;
    sbx_http_tick_fn tick;
    void *ctx;
    bool status_known, is_error;
    bool failed;       /* a callback failed and filled err: report that */
    sbx_error *err;
};

static void sink_free(struct sink *s)
{
    free(s->body.data);
}

sbx_http *sbx_http_new(const char *url, const char *key, sbx_error *err)
{
    if (key) {
        /* it goes into a header line: a CR or LF would end it early */
        for (const char *p = key; *p; p++)
            if (iscntrl((unsigned char) *p)) {
                sbx_error_set(err, 0, "the API key contains a control character");
                return NULL;
            }
    }
    sbx_http *h = calloc(1, sizeof *h);
    if (!h) {
        sbx_error_set(err, ENOMEM, "HTTP client");
        return NULL;
    }
    bool oom = !(h->display = strdup(url));
    if (strncmp(url, "unix:", 5) == 0) {
        const char *path = url + 5;
        if (strncmp(path, "//", 2) == 0) /* unix:///run/sbxd.sock */
            path += 2;
        if (!*path) {
            sbx_error_set(err, 0, "URL '%s': no socket path after unix:", url);
            sbx_http_free(h);
            return NULL;
        }
        oom |= !(h->unix_path = strdup(path));
        /* the host name only fills the Host header */
        oom |= !(h->base = strdup("http://localhost"));
    } else {
        size_t n = strlen(url);
        while (n > 0 && url[n - 1] == '/')
            n--;
        oom |= !(h->base = strndup(url, n));
    }
    if (key && asprintf(&h->auth, "Authorization: Bearer %s", key) < 0) {
        h->auth = NULL;
        oom = true;
    }
    oom |= !(h->curl = curl_easy_init());
    if (oom) {
        sbx_error_set(err, ENOMEM, "HTTP client");
        sbx_http_free(h);
        return NULL;
    }
    return h;
}

void sbx_http_free(sbx_http *h)
{
    if (!h)
        return;
    if (h->curl)
        curl_easy_cleanup(h->curl);
    free(h->base);
    free(h->unix_path);
    free(h->display);
    free(h->auth);
    free(h);
}

const char *sbx_http_url(const sbx_http *h)
{
    return h->display;
}

long sbx_http_status(const sbx_http *h)
{
    return h->status;
}

const char *sbx_http_error_code(const sbx_http *h)
{
    return h->code;
}

void sbx_http_set_timeout(sbx_http *h, long ms)
{
    h->timeout_ms = ms > 0 ? ms : 0;
}

bool sbx_http_timed_out(const sbx_http *h)
{
    return h->timed_out;
}

void sbx_http_resp_free(sbx_http_resp *r)
{
    free(r->body);
    r->body = NULL;
    json_decref(r->json);
    r->json = NULL;
}

char *sbx_http_escape(sbx_http *h, const char *s, sbx_error *err)
{
    char *e = curl_easy_escape(h->curl, s, (int) strlen(s));
    char *copy = e ? strdup(e) : NULL; /* so that callers free() it like anything else */
    curl_free(e);
    if (!copy)
        sbx_error_set(err, ENOMEM, "URL encoding");
    return copy;
}

/* ---- curl callbacks ---- */

/* Whether the answer is an error is known once the first body byte
 * arrives: an error answer's body is kept for the message, never handed to
 * the caller's file or line callback. */
static void check_status(struct sink *s)
{
    if (s->status_known)
        return;
    long st = 0;
    curl_easy_getinfo(s->h->curl, CURLINFO_RESPONSE_CODE, &st);
    s->h->status = st;
    s->is_error = st < 200 || st >= 300;
    s->status_known = true;
}

static int handle_line(struct sink *s, const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return 0; /* blank lines carry nothing (keep-alives) */
    json_error_t jerr;
    /* JSON_ALLOW_NUL: "\u0000" is valid JSON and output may hold NUL bytes */
    json_t *obj = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (!obj || !json_is_object(obj)) {
        json_decref(obj);
        return sbx_error_set(s->err, 0, "sbxd at %s sent a malformed stream line: %s", s->h->display,
                             obj ? "not a JSON object" : jerr.text);
    }
    int r = s->on_line(s->ctx, obj, s->err);
    json_decref(obj);
    return r;
}

/* Hand every complete line in the buffer to the callback, keep the rest.
 * final: the stream ended; an unterminated last line counts too. */
static int drain_lines(struct sink *s, size_t scan_from, bool final)
{
    struct buf *b = &s->body;
    size_t start = 0;
    for (;;) {
        char *nl = b->len > scan_from ? memchr(b->data + scan_from, '\n', b->len - scan_from) : NULL;
        if (!nl)
            break;
        size_t end = (size_t) (nl - b->data);
        if (handle_line(s, b->data + start, end - start) < 0)
            return -1;
        start = scan_from = end + 1;
    }
    if (final && start < b->len) {
        if (handle_line(s, b->data + start, b->len - start) < 0)
            return -1;
        start = b->len;
    }
    if (start > 0) {
        memmove(b->data, b->data + start, b->len - start);
        b->len -= start;
        b->data[b->len] = '\0';
    }
    return 0;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userdata)
{
    struct sink *s = userdata;
    size_t n = size * nmemb;
    check_status(s);
    if (s->is_error) {
        size_t room = MAX_ERROR_BODY - s->body.len; /* the beginning is enough */
        buf_append(&s->body, data, n < room ? n : room, MAX_ERROR_BODY);
        return n;
    }
    switch (s->kind) {
    case SINK_MEMORY:
        if (buf_append(&s->body, data, n, MAX_BODY) < 0) {
            sbx_error_set(s->err, 0, "the answer of sbxd at %s is larger than %u MiB (or out of memory)",
                          s->h->display, MAX_BODY >> 20);
            s->failed = true;
            return 0;
        }
        return n;
    case SINK_FILE:
        if (fwrite(data, 1, n, s->out) != n) {
            sbx_error_set(s->err, errno, "writing");
            s->failed = true;
            return 0;
        }
        return n;
    case SINK_LINES: {
        size_t old = s->body.len;
        if (buf_append(&s->body, data, n, MAX_LINE) < 0) {
            sbx_error_set(s->err, 0, "sbxd at %s sent a stream line longer than %u MiB (or out of memory)",
                          s->h->display, MAX_LINE >> 20);
            s->failed = true;
            return 0;
        }
        if (drain_lines(s, old, false) < 0) {
            s->failed = true;
            return 0;
        }
        return n;
    }
    }
    return 0;
}

static size_t on_read(char *dest, size_t size, size_t nitems, void *userdata)
{
    struct sink *s = userdata;
    size_t want = size * nitems;
    if (s->in_left >= 0 && (int64_t) want > s->in_left)
        want = (size_t) s->in_left; /* never more than the Content-Length we announced */
    if (want == 0)
        return 0;
    size_t got = fread(dest, 1, want, s->in);
    if (got == 0) {
        if (ferror(s->in))
            sbx_error_set(s->err, errno, "reading");
        else if (s->in_left > 0)
            sbx_error_set(s->err, 0, "the file shrank while it was being uploaded");
        else
            return 0; /* end of a stream of unknown size */
        s->failed = true;
        return CURL_READFUNC_ABORT;
    }
    if (s->in_left >= 0)
        s->in_left -= (int64_t) got;
    return got;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void) dltotal, (void) dlnow, (void) ultotal, (void) ulnow;
    struct sink *s = userdata;
    if (s->tick(s->ctx, s->err) < 0) {
        s->failed = true;
        return 1; /* abort the transfer */
    }
    return 0;
}

/* ---- one request ---- */

#define SETOPT(opt, val)                                                                                               \
    do {                                                                                                               \
        if (curl_easy_setopt(h->curl, opt, val) != CURLE_OK)                                                           \
            return sbx_error_set(err, 0, "libcurl refused option %s", #opt);                                           \
    } while (0)

/* Options every request has; the caller adds its method and body. */
static int prepare(sbx_http *h, const char *path, struct sink *s, struct curl_slist *headers, sbx_error *err)
{
    _cleanup_free_ char *url = NULL;
    if (asprintf(&url, "%s%s", h->base, path) < 0)
        return sbx_error_set(err, ENOMEM, "request URL");
    curl_easy_reset(h->curl);
    h->status = 0;
    h->timed_out = false;
    h->code[0] = '\0';
    h->errbuf[0] = '\0';
    SETOPT(CURLOPT_URL, url); /* curl copies it */
    if (h->unix_path)
        SETOPT(CURLOPT_UNIX_SOCKET_PATH, h->unix_path);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85 */
    /* --url comes from the user, but file:// or smb:// is never sbxd */
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    SETOPT(CURLOPT_ERRORBUFFER, h->errbuf);
    SETOPT(CURLOPT_USERAGENT, "sbx/" SBX_VERSION);
    SETOPT(CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    if (h->timeout_ms)
        SETOPT(CURLOPT_TIMEOUT_MS, h->timeout_ms);
    /* a command may print nothing for minutes: keep NATs from dropping us */
    SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_HTTPHEADER, headers);
    SETOPT(CURLOPT_WRITEFUNCTION, on_write);
    SETOPT(CURLOPT_WRITEDATA, s);
    return 0;
}

static int set_method(sbx_http *h, const char *method, const char *payload, sbx_error *err)
{
    if (strcmp(method, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "POST") == 0) {
        SETOPT(CURLOPT_POST, 1L);
        SETOPT(CURLOPT_POSTFIELDS, payload ? payload : "");
        SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) (payload ? strlen(payload) : 0));
    } else {
        SETOPT(CURLOPT_CUSTOMREQUEST, method);
        if (payload) {
            SETOPT(CURLOPT_POSTFIELDS, payload);
            SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) strlen(payload));
        }
    }
    return 0;
}

/* The API's error answer: "message (code)". */
static int api_error(sbx_http *h, struct sink *s, sbx_error *err)
{
    json_error_t jerr;
    json_t *root = s->body.len ? json_loadb(s->body.data, s->body.len, 0, &jerr) : NULL;
    json_t *e = json_object_get(root, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (code)
        snprintf(h->code, sizeof h->code, "%s", code);
    if (msg || code) {
        const char *hint = "";
        if (h->status == 401 && !h->auth)
            hint = "; no API key was given: set SBX_API_KEY or use --key";
        sbx_error_set(err, 0, "%s (%s)%s", msg ? msg : "error", code ? code : "?", hint);
    } else {
        /* not sbxd's error format: a proxy, or not sbxd at all */
        char snippet[160] = "";
        size_t n = 0;
        for (size_t i = 0; i < s->body.len && n + 1 < sizeof snippet; i++) {
            unsigned char c = (unsigned char) s->body.data[i];
            snippet[n++] = (char) (isprint(c) ? c : ' ');
        }
        snippet[n] = '\0';
        sbx_error_set(err, 0, "%s answered HTTP %ld%s%s (is this sbxd?)", h->display, h->status, n ? ": " : "",
                      snippet);
    }
    json_decref(root);
    return -1;
}

static int transport_error(sbx_http *h, CURLcode rc, sbx_error *err)
{
    const char *detail = h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc);
    long os_errno = 0;
    /* curl words a unix socket failure as "localhost port 80": say what the OS said */
    if (h->unix_path && curl_easy_getinfo(h->curl, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno)
        detail = strerror((int) os_errno);
    /* pretransfer: connected (or a kept connection reused) and the request
     * about to go, so 0 means the connection was never made */
    curl_off_t connected = 0;
    if (rc == CURLE_OPERATION_TIMEDOUT && h->timeout_ms &&
        curl_easy_getinfo(h->curl, CURLINFO_PRETRANSFER_TIME_T, &connected) == CURLE_OK && connected > 0) {
        /* connected, then no (whole) answer within the caller's bound: sbxd
         * is there but hangs, which "cannot connect" would misstate */
        h->timed_out = true;
        return sbx_error_set(err, 0, "no answer from sbxd at %s within %ld ms (timed out): %s", h->display,
                             h->timeout_ms, detail);
    }
    if (rc == CURLE_OPERATION_TIMEDOUT && h->timeout_ms)
        h->timed_out = true;
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_OPERATION_TIMEDOUT: /* not connected: the connect timeout, or the caller's bound ran out first */
        return sbx_error_set(err, 0,
                             "cannot connect to sbxd at %s: %s. Is sbxd running? Start it with `sbxd`, or point "
                             "--url / SBX_URL at it",
                             h->display, detail);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return sbx_error_set(err, 0, "invalid sbxd URL '%s': %s (expected http://HOST:PORT or unix:/PATH)",
                             h->display, detail);
    default:
        return sbx_error_set(err, 0, "request to sbxd at %s failed: %s", h->display, detail);
    }
}

/* Run the prepared request and turn its outcome into 0 or an error. */
static int perform(sbx_http *h, struct sink *s, sbx_error *err)
{
    CURLcode rc = curl_easy_perform(h->curl);
    long st = 0;
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &st);
    h->status = st;
    if (s->failed)
        return -1; /* a callback said why */
    /* An error answer explains more than the broken upload it may have cut
     * short (sbxd answers 413 and closes while we still send). */
    if (st != 0 && (st < 200 || st >= 300) && (rc == CURLE_OK || s->body.len > 0))
        return api_error(h, s, err);
    if (rc != CURLE_OK)
        return transport_error(h, rc, err);
    return 0;
}

static struct curl_slist *add_header(struct curl_slist *list, const char *line, bool *ok)
{
    struct curl_slist *l = curl_slist_append(list, line);
    if (!l) {
        *ok = false;
        return list;
    }
    return l;
}

/* Authorization plus the given lines (NULL-terminated). */
static struct curl_slist *headers_for(sbx_http *h, const char *const *lines, sbx_error *err)
{
    bool ok = true;
    struct curl_slist *list = NULL;
    if (h->auth)
        list = add_header(list, h->auth, &ok);
    for (; *lines; lines++)
        list = add_header(list, *lines, &ok);
    if (!ok) {
        curl_slist_free_all(list);
        sbx_error_set(err, ENOMEM, "HTTP headers");
        return NULL;
    }
    return list;
}

static void slist_freep(struct curl_slist **l)
{
    curl_slist_free_all(*l);
}
#define _cleanup_slist_ __attribute__((cleanup(slist_freep)))
#define _cleanup_sink_ __attribute__((cleanup(sink_free)))

static char *dump_body(const json_t *body, sbx_error *err)
{
    if (!body)
        return NULL;
    /* 10 significant digits: "0.1" stays 0.1 rather than 0.10000000000000001 */
    char *s = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(10) | JSON_ENCODE_ANY);
    if (!s)
        sbx_error_set(err, ENOMEM, "encoding the request");
    return s;
}

/* The buffered answer of a successful request into *resp. */
static int take_body(sbx_http *h, struct sink *s, sbx_http_resp *resp, sbx_error *err)
{
    resp->status = h->status;
    resp->json = NULL;
    resp->body_len = s->body.len;
    resp->body = s->body.data ? steal_pointer(&s->body.data) : strdup("");
    if (!resp->body)
        return sbx_error_set(err, ENOMEM, "response");
    if (resp->body_len == 0)
        return 0;
    json_error_t jerr;
    resp->json = json_loadb(resp->body, resp->body_len, JSON_ALLOW_NUL, &jerr);
    if (!resp->json) {
        sbx_http_resp_free(resp);
        return sbx_error_set(err, 0, "sbxd at %s answered with invalid JSON: %s", h->display, jerr.text);
    }
    return 0;
}

int sbx_http_json(sbx_http *h, const char *method, const char *path, const json_t *body, sbx_http_resp *resp,
                  sbx_error *err)
{
    memset(resp, 0, sizeof *resp);
    _cleanup_free_ char *payload = dump_body(body, err);
    if (body && !payload)
        return -1;
    /* "Content-Type:" with no value removes curl's default form type: sbxd
     * accepts a body-less POST only without one */
    const char *lines[] = { "Accept: application/json",
                            payload ? "Content-Type: application/json" : "Content-Type:", NULL };
    _cleanup_slist_ struct curl_slist *headers = headers_for(h, lines, err);
    if (!headers)
        return -1;
    _cleanup_sink_ struct sink s = { .h = h, .kind = SINK_MEMORY, .err = err };
    if (prepare(h, path, &s, headers, err) < 0 || set_method(h, method, payload, err) < 0)
        return -1;
    if (perform(h, &s, err) < 0)
        return -1;
    return take_body(h, &s, resp, err);
}

int sbx_http_ndjson(sbx_http *h, const char *method, const char *path, const json_t *body, sbx_http_line_fn on_line,
                    sbx_http_tick_fn tick, void *ctx, sbx_error *err)
{
    _cleanup_free_ char *payload = dump_body(body, err);
    if (body && !payload)
        return -1;
    const char *lines[] = { "Accept: application/x-ndjson",
                            payload ? "Content-Type: application/json" : "Content-Type:", NULL };
    _cleanup_slist_ struct curl_slist *headers = headers_for(h, lines, err);
    if (!headers)
        return -1;
    _cleanup_sink_ struct sink s = { .h = h, .kind = SINK_LINES, .on_line = on_line, .tick = tick, .ctx = ctx,
                                     .err = err };
    if (prepare(h, path, &s, headers, err) < 0 || set_method(h, method, payload, err) < 0)
        return -1;
    if (tick) {
        SETOPT(CURLOPT_NOPROGRESS, 0L);
        SETOPT(CURLOPT_XFERINFOFUNCTION, on_progress);
        SETOPT(CURLOPT_XFERINFODATA, &s);
    }
    if (perform(h, &s, err) < 0)
        return -1;
    return drain_lines(&s, 0, true);
}

int sbx_http_post_ndjson(sbx_http *h, const char *path, const char *content_type, FILE *in, int64_t size,
                         sbx_http_line_fn on_line, sbx_http_tick_fn tick, void *ctx, sbx_error *err)
{
    char ct[128];
    snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
    const char *lines[] = { "Accept: application/x-ndjson", ct, NULL };
    _cleanup_slist_ struct curl_slist *headers = headers_for(h, lines, err);
    if (!headers)
        return -1;
    _cleanup_sink_ struct sink s = { .h = h, .kind = SINK_LINES, .on_line = on_line, .tick = tick, .ctx = ctx,
                                     .in = in, .in_left = size, .err = err };
    if (prepare(h, path, &s, headers, err) < 0)
        return -1;
    SETOPT(CURLOPT_POST, 1L);
    SETOPT(CURLOPT_READFUNCTION, on_read);
    SETOPT(CURLOPT_READDATA, &s);
    SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) size);
    if (tick) {
        SETOPT(CURLOPT_NOPROGRESS, 0L);
        SETOPT(CURLOPT_XFERINFOFUNCTION, on_progress);
        SETOPT(CURLOPT_XFERINFODATA, &s);
    }
    if (perform(h, &s, err) < 0)
        return -1;
    return drain_lines(&s, 0, true);
}

int sbx_http_upload(sbx_http *h, const char *path, FILE *in, int64_t size, sbx_http_resp *resp, sbx_error *err)
{
    memset(resp, 0, sizeof *resp);
    /* of unknown size: HTTP/1.1 chunked transfer, which curl does when asked */
    const char *lines[] = { "Accept: application/json", "Content-Type: application/octet-stream",
                            size < 0 ? "Transfer-Encoding: chunked" : NULL, NULL };
    _cleanup_slist_ struct curl_slist *headers = headers_for(h, lines, err);
    if (!headers)
        return -1;
    _cleanup_sink_ struct sink s = { .h = h, .kind = SINK_MEMORY, .in = in, .in_left = size, .err = err };
    if (prepare(h, path, &s, headers, err) < 0)
        return -1;
    SETOPT(CURLOPT_UPLOAD, 1L); /* PUT */
    SETOPT(CURLOPT_READFUNCTION, on_read);
    SETOPT(CURLOPT_READDATA, &s);
    if (size >= 0)
        SETOPT(CURLOPT_INFILESIZE_LARGE, (curl_off_t) size);
    if (perform(h, &s, err) < 0)
        return -1;
    return take_body(h, &s, resp, err);
}

int sbx_http_download(sbx_http *h, const char *path, FILE *out, sbx_error *err)
{
    const char *lines[] = { NULL };
    _cleanup_slist_ struct curl_slist *headers = headers_for(h, lines, err);
    if (!headers && h->auth)
        return -1;
    _cleanup_sink_ struct sink s = { .h = h, .kind = SINK_FILE, .out = out, .err = err };
    if (prepare(h, path, &s, headers, err) < 0)
        return -1;
    SETOPT(CURLOPT_HTTPGET, 1L);
    return perform(h, &s, err);
}
