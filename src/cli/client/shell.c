/* shell.c - `sbx shell ID`: an interactive terminal in a sandbox, like
 * `ssh host` or `docker exec -it`.
 *
 * libcurl opens the connection (TCP or unix socket, CURLOPT_CONNECT_ONLY)
 * and sends the WebSocket upgrade for GET /v1/sandboxes/ID/pty; wslay does
 * the framing from there.  The local terminal is put in raw mode, so every
 * key (^C, ^D, arrows) goes to the sandbox's shell; window size changes
 * follow (SIGWINCH); the exit status is the remote shell's. */
#define _GNU_SOURCE
#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>
#include <wslay/wslay.h>

static const sbx_cli_verb verb = {
    .name = "shell",
    .usage = "sbx shell [--user USER] ID",
    .help = "Open an interactive shell (bash if the template has it) on a terminal in the sandbox.\n"
            "Every key goes to the sandbox; the shell's exit status is sbx's.\n"
            "  -u, --user USER   user in the sandbox (default: user)\n",
    .shortopts = "u:",
    .longopts = (const struct option[]){ { "user", required_argument, NULL, 'u' }, { NULL, 0, NULL, 0 } },
    .stop_after = -1,
};

struct shell {
    int sock;
    int exit_code;
    bool got_exit;
    uint8_t pending[65536]; /* bytes after the 101 headers, fed to wslay first */
    size_t pending_len, pending_off;
};

static int winch_pipe[2] = { -1, -1 };

static void on_winch(int sig)
{
    (void) sig;
    int e = errno;
    if (write(winch_pipe[1], "w", 1) < 0) {
        /* a full pipe already says "resize" */
    }
    errno = e;
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    (void) flags;
    struct shell *s = user;
    if (s->pending_off < s->pending_len) {
        size_t n = s->pending_len - s->pending_off;
        if (n > len)
            n = len;
        memcpy(buf, s->pending + s->pending_off, n);
        s->pending_off += n;
        return (ssize_t) n;
    }
    ssize_t r = recv(s->sock, buf, len, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
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
    struct shell *s = user;
    ssize_t r = send(s->sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (r < 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static int ws_mask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
    (void) ctx;
    (void) user;
    randombytes_buf(buf, len);
    return 0;
}

static void ws_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *m, void *user)
{
    (void) ctx;
    struct shell *s = user;
    if (m->opcode == WSLAY_BINARY_FRAME) {
        for (size_t off = 0; off < m->msg_length;) {
            ssize_t w = write(STDOUT_FILENO, m->msg + off, m->msg_length - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t) w;
        }
    } else if (m->opcode == WSLAY_TEXT_FRAME) {
        json_t *j = json_loadb((const char *) m->msg, m->msg_length, 0, NULL);
        const char *type = json_string_value(json_object_get(j, "type"));
        if (type && strcmp(type, "exit") == 0) {
            json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
            s->exit_code = json_is_integer(code) ? (int) json_integer_value(code)
                           : json_is_integer(sig) ? 128 + (int) json_integer_value(sig)
                                                  : 0;
            s->got_exit = true;
        } else if (type && strcmp(type, "error") == 0) {
            fprintf(stderr, "\r\nsbx: %s\r\n", json_string_value(json_object_get(j, "message")));
        }
        json_decref(j);
    }
}

static void send_resize(wslay_event_context_ptr ctx)
{
    struct winsize ws;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || !ws.ws_col || !ws.ws_row)
        return;
    char buf[96];
    int n = snprintf(buf, sizeof buf, "{\"type\":\"resize\",\"cols\":%u,\"rows\":%u}", ws.ws_col, ws.ws_row);
    struct wslay_event_msg m = { WSLAY_TEXT_FRAME, (const uint8_t *) buf, (size_t) n };
    wslay_event_queue_msg(ctx, &m);
}

/* Open the connection and upgrade it.  Returns the socket, or -1. */
static int upgrade(sbx_cli *cli, const char *id, const char *user, CURL *curl, struct shell *s, sbx_error *err)
{
    const char *url = cli->url;
    char target[512], host[300] = "localhost";
    if (strncmp(url, "unix:", 5) == 0) {
        const char *path = url + 5;
        while (path[0] == '/' && path[1] == '/')
            path++;
        curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, path);
        curl_easy_setopt(curl, CURLOPT_URL, "http://localhost/");
    } else {
        curl_easy_setopt(curl, CURLOPT_URL, url);
        const char *h = strstr(url, "://");
        h = h ? h + 3 : url;
        snprintf(host, sizeof host, "%.*s", (int) strcspn(h, "/"), h);
    }
    curl_easy_setopt(curl, CURLOPT_CONNECT_ONLY, 1L);
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK)
        return sbx_error_set(err, 0, "cannot connect to sbxd at %s: %s (is sbxd running? set SBX_URL or --url)", url,
                             curl_easy_strerror(rc));
    curl_socket_t sock;
    if (curl_easy_getinfo(curl, CURLINFO_ACTIVESOCKET, &sock) != CURLE_OK || sock == CURL_SOCKET_BAD)
        return sbx_error_set(err, 0, "no connection to sbxd");
    /* libcurl leaves it non-blocking; the handshake below reads blocking
     * (the relay uses MSG_DONTWAIT) */
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);

    struct winsize ws = { .ws_col = 80, .ws_row = 24 };
    ioctl(STDIN_FILENO, TIOCGWINSZ, &ws);
    char *eid = curl_easy_escape(curl, id, 0), *euser = curl_easy_escape(curl, user ? user : "user", 0);
    snprintf(target, sizeof target, "/v1/sandboxes/%s/pty?cols=%u&rows=%u&user=%s", eid, ws.ws_col ? ws.ws_col : 80,
             ws.ws_row ? ws.ws_row : 24, euser);
    curl_free(eid);
    curl_free(euser);
    unsigned char nonce[16];
    char key[32];
    randombytes_buf(nonce, sizeof nonce);
    sodium_bin2base64(key, sizeof key, nonce, sizeof nonce, sodium_base64_VARIANT_ORIGINAL);
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     target, host, cli->key ? cli->key : "", key);
    for (int off = 0; off < n;) {
        ssize_t w = send(sock, req + off, (size_t) (n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return sbx_error_set(err, errno, "send to sbxd");
        off += (int) w;
    }
    /* read the answer's headers; what follows them is WebSocket data */
    char head[8192];
    size_t got = 0;
    char *end = NULL;
    while (!end) {
        if (got == sizeof head - 1)
            return sbx_error_set(err, 0, "sbxd's answer is too long");
        ssize_t r = recv(sock, head + got, sizeof head - 1 - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return sbx_error_set(err, r ? errno : 0, "sbxd closed the connection");
        got += (size_t) r;
        head[got] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        /* an API error: its JSON body names it */
        const char *body = end + 4;
        json_t *j = json_loads(body, 0, NULL);
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        sbx_error_set(err, 0, "%s", msg ? msg : "sbxd refused the terminal");
        json_decref(j);
        return -1;
    }
    size_t extra = got - (size_t) (end + 4 - head);
    memcpy(s->pending, end + 4, extra);
    s->pending_len = extra;
    return (int) sock;
}

static int shell_opt(void *ctx, int opt, const char *arg, sbx_error *err)
{
    (void) err;
    if (opt == 'u')
        *(const char **) ctx = arg;
    return 0;
}

int sbx_client_shell(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    const char *user = NULL;
    sbx_cli_args args;
    int r = sbx_cli_parse(cli, &verb, argc, argv, shell_opt, &user, &args, &err);
    if (r == 1)
        return 0;
    if (r < 0)
        return sbx_cli_usage_error(&verb, &err);
    if (args.npos != 1) {
        sbx_error_set(&err, 0, "give exactly one sandbox id");
        return sbx_cli_usage_error(&verb, &err);
    }
    if (sodium_init() < 0)
        return sbx_cli_fail(&err);
    struct shell s = { .sock = -1 };
    CURL *curl = curl_easy_init();
    s.sock = curl ? upgrade(cli, args.pos[0], user, curl, &s, &err) : -1;
    if (s.sock < 0) {
        if (curl)
            curl_easy_cleanup(curl);
        return sbx_cli_fail(&err);
    }

    struct termios saved;
    bool raw = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (raw) {
        struct termios t = saved;
        cfmakeraw(&t);
        tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
    if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) == 0)
        signal(SIGWINCH, on_winch);

    struct wslay_event_callbacks cb = { .recv_callback = ws_recv, .send_callback = ws_send,
                                        .genmask_callback = ws_mask, .on_msg_recv_callback = ws_msg };
    wslay_event_context_ptr ctx;
    wslay_event_context_client_init(&ctx, &cb, &s);
    bool stdin_open = true;
    while (wslay_event_want_read(ctx) || wslay_event_want_write(ctx)) {
        if (s.pending_off < s.pending_len && wslay_event_recv(ctx) != 0)
            break;
        struct pollfd p[3] = {
            { s.sock, (short) (POLLIN | (wslay_event_want_write(ctx) ? POLLOUT : 0)), 0 },
            { stdin_open ? STDIN_FILENO : -1, POLLIN, 0 },
            { winch_pipe[0], POLLIN, 0 },
        };
        if (poll(p, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (wslay_event_recv(ctx) != 0)
                break;
        }
        if (p[1].revents) {
            uint8_t buf[16384];
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n > 0) {
                struct wslay_event_msg m = { WSLAY_BINARY_FRAME, buf, (size_t) n };
                wslay_event_queue_msg(ctx, &m);
            } else if (n == 0 || errno != EINTR) {
                /* local stdin ended (a pipe): the remote shell reads on */
                stdin_open = false;
            }
        }
        if (p[2].revents) {
            char b[64];
            while (read(winch_pipe[0], b, sizeof b) > 0)
                ;
            send_resize(ctx);
        }
        if (wslay_event_want_write(ctx) && wslay_event_send(ctx) != 0)
            break;
    }
    wslay_event_context_free(ctx);
    curl_easy_cleanup(curl);
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    if (!s.got_exit) {
        sbx_error_set(&err, 0, "the connection to the sandbox ended without an exit status");
        return sbx_cli_fail(&err);
    }
    return s.exit_code;
}
