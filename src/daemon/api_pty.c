/* api_pty.c - GET /v1/sandboxes/{id}/pty: an interactive shell on a
 * terminal in the sandbox, over a WebSocket (RFC 6455; framing by wslay).
 *
 *   client -> sbxd   binary frames: keys;  text {"type":"resize","cols":C,"rows":R}
 *   sbxd -> client   binary frames: terminal output;  at the end text
 *                    {"type":"exit","exit_code":N,"signal":S} and a close frame
 *
 * The shell is an ordinary command started with SBX_EXEC_PTY: sbx-init gives
 * it a terminal of the sandbox's own devpts, and this file relays between
 * the WebSocket and that command's control connection, in the connection's
 * own thread (libmicrohttpd lets an upgrade handler block in
 * thread-per-connection mode). */
#define _GNU_SOURCE
#include "agent.h"
#include "api.h"
#include "log.h"

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

typedef struct pty_ctx {
    sbx_daemon *d;
    sbx_box *b;
    int agent;            /* the command's control connection */
    uint32_t pid;
    uint32_t cols, rows;
    /* the WebSocket */
    int sock;
    const char *extra;    /* bytes libmicrohttpd read past the headers */
    size_t extra_len;
    bool closing;
} pty_ctx;

static void pty_free(void *p)
{
    pty_ctx *c = p;
    if (!c)
        return;
    if (c->agent >= 0)
        close(c->agent);
    if (c->b)
        sbx_reg_put(&c->d->reg, c->b);
    free(c);
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void) flags;
    pty_ctx *c = user;
    if (c->extra_len) {
        size_t n = len < c->extra_len ? len : c->extra_len;
        memcpy(buf, c->extra, n);
        c->extra += n;
        c->extra_len -= n;
        return (ssize_t) n;
    }
    ssize_t r = recv(c->sock, buf, len, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (r <= 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
    (void) flags;
    pty_ctx *c = user;
    ssize_t r = send(c->sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (r < 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static void ws_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m, void *user)
{
    (void) ctx;
    pty_ctx *c = user;
    if (m->opcode == WSLAY_BINARY_FRAME) {
        for (size_t off = 0; off < m->msg_length;) {
            size_t n = m->msg_length - off > 65536 ? 65536 : m->msg_length - off;
            if (sbx_agent_send(c->agent, SBX_MSG_STDIN, m->msg + off, n) < 0)
                break;
            off += n;
        }
    } else if (m->opcode == WSLAY_TEXT_FRAME) {
        json_t *j = json_loadb((const char *) m->msg, m->msg_length, 0, NULL);
        json_t *t = json_object_get(j, "type");
        if (json_is_string(t) && strcmp(json_string_value(t), "resize") == 0) {
            json_int_t cols = json_integer_value(json_object_get(j, "cols"));
            json_int_t rows = json_integer_value(json_object_get(j, "rows"));
            if (cols > 0 && cols <= 1000 && rows > 0 && rows <= 1000) {
                uint32_t wz[2] = { (uint32_t) cols, (uint32_t) rows };
                sbx_agent_send(c->agent, SBX_MSG_RESIZE, wz, sizeof wz);
            }
        }
        json_decref(j);
    }
    /* close frames: wslay answers them; the loop sees it wants nothing more */
}

static void queue_text(wslay_event_context_ptr ctx, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return;
    struct wslay_event_msg m = { WSLAY_TEXT_FRAME, (const uint8_t *) s, strlen(s) };
    wslay_event_queue_msg(ctx, &m);
    free(s);
}

/* One frame from the command: output becomes a binary message, EXIT the
 * exit message and a close.  False when the command is over. */
static bool from_agent(pty_ctx *c, wslay_event_context_ptr ctx)
{
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    int r = sbx_agent_recv(c->agent, SBX_AGENT_TIMEOUT_MS, &type, &p, &len);
    if (r <= 0) {
        queue_text(ctx, json_pack("{s:s, s:s}", "type", "error", "message", "the sandbox ended"));
        return false;
    }
    bool more = true;
    if (type == SBX_MSG_OUTPUT) {
        sbx_reader rd = { p, p + len, false };
        sbx_read_u32(&rd);
        size_t n;
        const uint8_t *data = sbx_read_bytes(&rd, &n);
        if (!rd.bad && n) {
            struct wslay_event_msg m = { WSLAY_BINARY_FRAME, data, n };
            wslay_event_queue_msg(ctx, &m);
        }
    } else if (type == SBX_MSG_EXIT) {
        sbx_reader rd = { p, p + len, false };
        sbx_read_u32(&rd);
        uint32_t code = sbx_read_u32(&rd), sig = sbx_read_u32(&rd);
        json_t *o = json_pack("{s:s}", "type", "exit");
        json_object_set_new(o, "exit_code", sig ? json_null() : json_integer(code));
        json_object_set_new(o, "signal", sig ? json_integer(sig) : json_null());
        queue_text(ctx, o);
        more = false; /* the close follows once this is out (relay) */
    }
    free(p);
    return more;
}

static void relay(pty_ctx *c)
{
    struct wslay_event_callbacks cb = { .recv_callback = ws_recv, .send_callback = ws_send,
                                        .on_msg_recv_callback = ws_msg };
    wslay_event_context_ptr ctx;
    if (wslay_event_context_server_init(&ctx, &cb, c) != 0)
        return;
    /* a terminal's messages are small; a pasted megabyte is the most */
    wslay_event_config_set_max_recv_msg_length(ctx, 1u << 20);
    bool agent_open = true, close_queued = false;
    while (wslay_event_want_read(ctx) || wslay_event_want_write(ctx)) {
        if (c->extra_len && wslay_event_recv(ctx) != 0)
            break;
        struct pollfd p[2] = {
            { c->sock, (short) ((wslay_event_want_read(ctx) ? POLLIN : 0) | (wslay_event_want_write(ctx) ? POLLOUT : 0)),
              0 },
            { agent_open ? c->agent : -1, POLLIN, 0 },
        };
        /* output waiting for a slow client is not read from the command
         * meanwhile: sbx-init then holds it (and throttles the command) */
        if (wslay_event_get_queued_msg_count(ctx) > 64)
            p[1].fd = -1;
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && wslay_event_recv(ctx) != 0)
            break;
        if (p[1].revents && !from_agent(c, ctx))
            agent_open = false;
        if (wslay_event_want_write(ctx) && wslay_event_send(ctx) != 0)
            break;
        /* wslay sends control frames first: close only after the exit
         * message has left */
        if (!agent_open && !close_queued && wslay_event_get_queued_msg_count(ctx) == 0) {
            wslay_event_queue_close(ctx, 1000, NULL, 0);
            close_queued = true;
            if (wslay_event_send(ctx) != 0)
                break;
        }
        if (close_queued && !wslay_event_want_write(ctx))
            break;
    }
    wslay_event_context_free(ctx);
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void) conn;
    (void) con_cls;
    pty_ctx *c = cls;
    c->sock = sock;
    c->extra = extra_in;
    c->extra_len = extra_in_size;
    relay(c);
    /* the client went away or the shell ended: the shell and what it
     * started go with the terminal, as with a closed SSH session */
    if (c->agent >= 0)
        sbx_agent_send(c->agent, SBX_MSG_KILL, NULL, 0);
    pty_free(c);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static bool header_has(sbx_req *r, const char *name, const char *token)
{
    const char *v = sbx_header(r, name);
    return v && strcasestr(v, token);
}

void sbx_api_pty(sbx_req *r)
{
    const char *key = sbx_header(r, "Sec-WebSocket-Key");
    const char *ver = sbx_header(r, "Sec-WebSocket-Version");
    if (!header_has(r, "Upgrade", "websocket") || !header_has(r, "Connection", "upgrade") || !key ||
        strlen(key) > 64 || !ver || strcmp(ver, "13") != 0) {
        sbx_reply_error(r, 400, "invalid_request", "this endpoint is a WebSocket (version 13): send the upgrade "
                                                   "headers");
        return;
    }
    bool bad;
    const char *cols_s = sbx_query(r, "cols", &bad);
    const char *rows_s = bad ? NULL : sbx_query(r, "rows", &bad);
    const char *who = bad ? NULL : sbx_query(r, "user", &bad);
    if (bad)
        return;
    long cols = cols_s ? strtol(cols_s, NULL, 10) : 80, rows = rows_s ? strtol(rows_s, NULL, 10) : 24;
    if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
        sbx_reply_error(r, 400, "invalid_request", "'cols' and 'rows' must be 1-1000");
        return;
    }
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    pty_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->b = b;
    c->agent = -1;
    r->ctx = c;
    r->ctx_free = pty_free;
    sbx_user u;
    sbx_error err = { 0 };
    if (sbx_template_lookup_user(&b->tpl, who && *who ? who : "user", &u, &err) < 0) {
        sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        return;
    }
    /* a login shell in the user's home, with a terminal type, and the
     * environment a command gets (an allowlist sandbox's proxy variables
     * among it: a terminal is no way around them) */
    json_t *term = json_pack("{s:s}", "TERM", "xterm-256color");
    char **envp = sbx_box_env(b, &u, term);
    json_decref(term);
    /* the sandbox's bash if its template has one, else its sh */
    char *argv[] = { "/bin/sh", "-c", "command -v bash >/dev/null && exec bash -l; exec sh -l", NULL };
    sbx_buf req = { 0 };
    sbx_exec_req_encode(&req, u.uid, u.gid, SBX_EXEC_PTY | SBX_EXEC_CWD_OPTIONAL, 0, u.home, argv, envp);
    sbx_strv_free(envp);
    if (req.failed) {
        sbx_buf_free(&req);
        sbx_reply_error(r, 413, "too_large", "the shell's environment exceeds %u bytes", SBX_CTL_MAX_FRAME);
        return;
    }
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    c->agent = sbx_agent_connect(b->sock, &err);
    int rc = c->agent < 0 ? -1 : sbx_agent_send(c->agent, SBX_MSG_EXEC, req.data, req.len);
    sbx_buf_free(&req);
    if (rc == 0)
        rc = sbx_agent_recv(c->agent, SBX_AGENT_TIMEOUT_MS, &type, &p, &len);
    if (rc > 0 && type == SBX_MSG_EXEC_FAILED) {
        sbx_reader rd = { p, p + len, false };
        sbx_read_u32(&rd);
        sbx_read_u32(&rd);
        const char *msg = sbx_read_str(&rd);
        sbx_reply_error(r, 503, "unavailable", "the sandbox could not start a shell: %s",
                        rd.bad ? "(no reason given)" : msg);
        free(p);
        return;
    }
    if (rc <= 0 || type != SBX_MSG_STARTED || len != 4) {
        free(p);
        sbx_reply_error(r, 503, "unavailable", "the sandbox could not start a shell");
        return;
    }
    memcpy(&c->pid, p, 4);
    free(p);
    uint32_t wz[2] = { (uint32_t) cols, (uint32_t) rows };
    sbx_agent_send(c->agent, SBX_MSG_RESIZE, wz, sizeof wz);

    /* Sec-WebSocket-Accept = base64(SHA-1(key + GUID)) */
    char buf[128];
    unsigned char sha[EVP_MAX_MD_SIZE];
    unsigned int shalen = 0;
    int n = snprintf(buf, sizeof buf, "%s%s", key, WS_GUID);
    EVP_Digest(buf, (size_t) n, sha, &shalen, EVP_sha1(), NULL);
    char accept[64];
    sodium_bin2base64(accept, sizeof accept, sha, shalen, sodium_base64_VARIANT_ORIGINAL);

    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, c);
    r->ctx = NULL; /* on_upgrade owns it now */
    r->ctx_free = NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
    sbx_reply_response(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}
