/* api_ports.c - /v1/sandboxes/{id}/ports/{port}/...: HTTP to a server
 * listening inside a sandbox (on any of its addresses' loopback), behind
 * the API's own authentication.
 *
 * sbxd connects from inside the sandbox's network namespace
 * (sbx_netns_connect) and speaks HTTP/1.1 to the server: one request per
 * connection (Connection: close), the client's headers but the
 * hop-by-hop ones and its Authorization (the API key is sbx's, not the
 * server's), the body streamed (chunked when the client's has no
 * length).  The answer's head is read with http_parser, its body
 * de-chunked by it and streamed back as it comes.  An upgrade (WebSocket,
 * or any protocol) is passed on: Upgrade and Connection go to the server,
 * and if it answers 101 the two connections are joined byte for byte
 * (libmicrohttpd hands over the client's socket). */
#define _GNU_SOURCE
#include "api.h"
#include "egress.h"

#include <curl/curl.h>
#include <errno.h>
#include <http_parser.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)
#define ANSWER_TIMEOUT_MS 60000 /* for the server to start answering */

typedef struct port_ctx {
    sbx_daemon *d;
    int fd;
    bool chunked;        /* the request body goes chunked */
    bool failed;
    /* the answer */
    http_parser p;
    http_parser_settings s;
    json_t *headers;     /* the answer's [name, value] pairs, for MHD */
    char field[256];
    size_t field_len;
    bool in_value;
    char value[8192];
    size_t value_len;
    bool headers_done, done;
    char *out;           /* body bytes for the reader */
    size_t out_len, out_cap;
    bool is_head;
    char head_length[32]; /* HEAD: the server's Content-Length (digits), passed on */
    bool upgrade;        /* the client asked for a protocol upgrade */
} port_ctx;

static void port_ctx_free(void *p)
{
    port_ctx *c = p;
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    json_decref(c->headers);
    free(c->out);
    free(c);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t) w;
    }
    return 0;
}

/* Hop-by-hop headers, and what sbx sets itself. */
static bool not_forwarded(const char *k)
{
    static const char *const names[] = { "connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                         "te", "trailer", "transfer-encoding", "upgrade", "host", "authorization",
                                         "content-length", "expect" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcasecmp(k, names[i]) == 0)
            return true;
    return false;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    (void) kind;
    FILE *f = cls;
    if (!not_forwarded(k) && !strpbrk(k, "\r\n") && !strpbrk(v ? v : "", "\r\n"))
        fprintf(f, "%s: %s\r\n", k, v ? v : "");
    return MHD_YES;
}

struct query {
    FILE *f;
    bool first;
    CURL *curl;
};

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    (void) kind;
    struct query *q = cls;
    char *ek = curl_easy_escape(q->curl, k, 0), *ev = v ? curl_easy_escape(q->curl, v, 0) : NULL;
    fprintf(q->f, "%c%s%s%s", q->first ? '?' : '&', ek ? ek : "", v ? "=" : "", ev ? ev : "");
    q->first = false;
    curl_free(ek);
    curl_free(ev);
    return MHD_YES;
}

/* The path after /ports/PORT, re-escaped (MHD hands it over decoded). */
static void write_path(FILE *f, const char *url, CURL *curl)
{
    const char *p = strstr(url, "/ports/");
    p = p ? strchr(p + 7, '/') : NULL;
    if (!p || !*p) {
        fputc('/', f);
        return;
    }
    for (; *p; p++) {
        if (*p == '/') {
            fputc('/', f);
            continue;
        }
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        char *e = curl_easy_escape(curl, p, (int) n);
        fputs(e ? e : "", f);
        curl_free(e);
        p += n - 1;
    }
}

void sbx_api_port_begin(sbx_req *r)
{
    char *end;
    long port = strtol(r->arg[1], &end, 10);
    if (*end || port < 1 || port > 65535) {
        sbx_reply_error(r, 400, "invalid_request", "bad port '%s': 1..65535", r->arg[1]);
        return;
    }
    sbx_box *b = sbx_req_box(r); /* wakes a paused sandbox: its server answers */
    if (!b)
        return;
    sbx_error err = { 0 };
    int fd = sbx_netns_connect(b->init_pid, (int) port, &err);
    sbx_reg_put(&r->d->reg, b);
    if (fd < 0) {
        sbx_reply_error(r, 502, "bad_gateway", "nothing answers on port %ld in sandbox %s (%s)", port, r->arg[0],
                        err.errno_ == ECONNREFUSED ? "connection refused: is the server listening on 127.0.0.1 or "
                                                     "0.0.0.0?"
                                                   : err.msg);
        return;
    }
    port_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->fd = fd;
    r->ctx = c;
    r->ctx_free = port_ctx_free;
    const char *cl = sbx_header(r, "Content-Length"), *te = sbx_header(r, "Transfer-Encoding");
    c->chunked = !cl && te;
    c->is_head = strcmp(r->method, "HEAD") == 0;
    const char *up = sbx_header(r, "Upgrade");
    c->upgrade = up && *up && !strpbrk(up, "\r\n");
    char *req = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&req, &len);
    CURL *curl = curl_easy_init();
    fprintf(f, "%s ", r->method);
    write_path(f, r->url, curl);
    struct query q = { f, true, curl };
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    curl_easy_cleanup(curl);
    fprintf(f, " HTTP/1.1\r\nHost: 127.0.0.1:%ld\r\n", port);
    const char *host = sbx_header(r, "Host");
    if (host && !strpbrk(host, "\r\n"))
        fprintf(f, "X-Forwarded-Host: %s\r\n", host);
    fprintf(f, "X-Forwarded-Proto: http\r\nX-Forwarded-Prefix: /v1/sandboxes/%s/ports/%ld\r\n", r->arg[0], port);
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, f);
    if (cl)
        fprintf(f, "Content-Length: %s\r\n", cl);
    else if (c->chunked)
        fprintf(f, "Transfer-Encoding: chunked\r\n");
    if (c->upgrade)
        fprintf(f, "Upgrade: %s\r\nConnection: Upgrade\r\n\r\n", up);
    else
        fprintf(f, "Connection: close\r\n\r\n");
    fclose(f);
    if (!req || write_all(fd, req, len) < 0) {
        c->failed = true;
        sbx_reply_error(r, 502, "bad_gateway", "the server on port %ld closed the connection", port);
    }
    free(req);
}

void sbx_api_port_data(sbx_req *r, const char *data, size_t len)
{
    port_ctx *c = r->ctx;
    if (!c || c->failed)
        return;
    char hdr[32];
    int n = c->chunked ? snprintf(hdr, sizeof hdr, "%zx\r\n", len) : 0;
    if ((n && write_all(c->fd, hdr, (size_t) n) < 0) || write_all(c->fd, data, len) < 0 ||
        (c->chunked && write_all(c->fd, "\r\n", 2) < 0)) {
        c->failed = true;
        sbx_reply_error(r, 502, "bad_gateway", "the server in the sandbox stopped reading the request");
    }
}

/* ---- the answer ---- */

static void flush_header(port_ctx *c)
{
    if (!c->field_len)
        return;
    c->field[c->field_len] = '\0';
    c->value[c->value_len] = '\0';
    if (!not_forwarded(c->field) && strcasecmp(c->field, "date") != 0)
        json_array_append_new(c->headers, json_pack("[s, s]", c->field, c->value));
    else if (c->is_head && strcasecmp(c->field, "content-length") == 0 && c->value_len < sizeof c->head_length &&
             c->value_len && strspn(c->value, "0123456789") == c->value_len)
        memcpy(c->head_length, c->value, c->value_len + 1);
    c->field_len = c->value_len = 0;
    c->in_value = false;
}

static int on_field(http_parser *p, const char *at, size_t len)
{
    port_ctx *c = p->data;
    if (c->in_value)
        flush_header(c);
    size_t n = len < sizeof c->field - 1 - c->field_len ? len : sizeof c->field - 1 - c->field_len;
    memcpy(c->field + c->field_len, at, n);
    c->field_len += n;
    return 0;
}

static int on_value(http_parser *p, const char *at, size_t len)
{
    port_ctx *c = p->data;
    c->in_value = true;
    size_t n = len < sizeof c->value - 1 - c->value_len ? len : sizeof c->value - 1 - c->value_len;
    memcpy(c->value + c->value_len, at, n);
    c->value_len += n;
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    port_ctx *c = p->data;
    c->headers_done = true;
    return c->is_head ? 1 : 0; /* an answer to HEAD has no body */
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    port_ctx *c = p->data;
    if (c->out_len + len > c->out_cap) {
        size_t cap = (c->out_len + len) * 2;
        char *o = realloc(c->out, cap);
        if (!o)
            return 1;
        c->out = o;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, at, len);
    c->out_len += len;
    return 0;
}

/* The reader of an answer to HEAD, which libmicrohttpd never calls (it
 * sends only the head, with the size given). */
static ssize_t no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) cls, (void) pos, (void) buf, (void) max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static int on_message_complete(http_parser *p)
{
    ((port_ctx *) p->data)->done = true;
    return 0;
}

/* Read from the server into the parser: > 0 bytes, 0 at its end, -1 on
 * an error or the timeout. */
static ssize_t pump(port_ctx *c, int timeout_ms)
{
    char buf[65536];
    struct pollfd pf = { c->fd, POLLIN, 0 };
    int r = poll(&pf, 1, timeout_ms);
    if (r <= 0)
        return -1;
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0)
        return -1;
    size_t got = http_parser_execute(&c->p, &c->s, buf, (size_t) n); /* n == 0: EOF, which ends a body */
    if (c->p.upgrade && c->headers_done) {
        /* what follows the 101 head is the new protocol's: keep it */
        if (got < (size_t) n && on_body(&c->p, buf + got, (size_t) n - got) != 0)
            return -1;
        return n;
    }
    if (got != (size_t) n && HTTP_PARSER_ERRNO(&c->p) != HPE_OK && !c->done)
        return -1;
    return n;
}

static ssize_t body_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    port_ctx *c = cls;
    while (c->out_len == 0) {
        if (c->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = pump(c, -1);
        if (n < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n == 0) {
            c->done = true;
            if (!c->out_len)
                return MHD_CONTENT_READER_END_OF_STREAM;
        }
    }
    size_t n = c->out_len < max ? c->out_len : max;
    memcpy(buf, c->out, n);
    memmove(c->out, c->out + n, c->out_len - n);
    c->out_len -= n;
    return (ssize_t) n;
}

/* After a 101: the client's socket and the server's, joined. */
static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void) conn;
    (void) con_cls;
    port_ctx *c = cls;
    bool ok = (!c->out_len || write_all(sock, c->out, c->out_len) == 0) &&
              (!extra_in_size || write_all(c->fd, extra_in, extra_in_size) == 0);
    if (ok) {
        uint64_t up = 0, down = 0;
        sbx_relay(sock, c->fd, &up, &down);
    }
    port_ctx_free(c);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

void sbx_api_port(sbx_req *r)
{
    port_ctx *c = r->ctx;
    if (!c || c->failed)
        return;
    if (c->chunked && write_all(c->fd, "0\r\n\r\n", 5) < 0) {
        sbx_reply_error(r, 502, "bad_gateway", "the server in the sandbox stopped reading the request");
        return;
    }
    http_parser_init(&c->p, HTTP_RESPONSE);
    c->p.data = c;
    c->s.on_header_field = on_field;
    c->s.on_header_value = on_value;
    c->s.on_headers_complete = on_headers_complete;
    c->s.on_body = on_body;
    c->s.on_message_complete = on_message_complete;
    c->headers = json_array();
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!c->headers_done) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int left = ANSWER_TIMEOUT_MS - (int) ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        ssize_t n = left > 0 ? pump(c, left) : -1;
        if (n <= 0) {
            sbx_reply_error(r, 502, "bad_gateway", "the server on port %s in sandbox %s %s", r->arg[1], r->arg[0],
                            n == 0 ? "closed the connection without an answer" : "sent no valid HTTP answer in time");
            return;
        }
    }
    flush_header(c);
    bool switching = c->p.status_code == 101 && c->upgrade;
    struct MHD_Response *resp;
    if (c->is_head) {
        /* No body, and no chunked framing either: libmicrohttpd 0.9.75 ends
         * a HEAD answer of unknown size with a last chunk ("0\r\n\r\n"),
         * which a keep-alive client then reads as the start of its next
         * answer.  The server's Content-Length is what HEAD is asked for. */
        uint64_t len = c->head_length[0] ? strtoull(c->head_length, NULL, 10) : 0;
        resp = MHD_create_response_from_callback(len, 4096, no_body, NULL, NULL);
    } else {
        resp = switching ? MHD_create_response_for_upgrade(on_upgrade, c)
                         : MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, body_reader, c,
                                                             port_ctx_free);
    }
    size_t i;
    json_t *h;
    json_array_foreach(c->headers, i, h)
        MHD_add_response_header(resp, json_string_value(json_array_get(h, 0)), json_string_value(json_array_get(h, 1)));
    if (switching) {
        const char *up = sbx_header(r, "Upgrade");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, up ? up : "websocket");
    }
    unsigned status = c->p.status_code;
    if (c->is_head) { /* no reader: the request's context keeps c and frees it */
        sbx_reply_response(r, status, resp);
        return;
    }
    r->ctx = NULL; /* the response (or the upgrade handler) owns it now */
    r->ctx_free = NULL;
    sbx_reply_response(r, status, resp);
}
