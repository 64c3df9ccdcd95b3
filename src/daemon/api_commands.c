/* api_commands.c - /v1/sandboxes/{id}/commands: run (waiting, streaming
 * or in the background), list, re-attach, stdin, signals, kill.
 *
 * Output bytes are never altered: a stream that is valid UTF-8 travels as a
 * JSON string (NUL bytes included, escaped), anything else as base64 with
 * "encoding": "base64".  Streamed chunks hold back an incomplete UTF-8
 * sequence at their end for the next chunk, so text split mid-character by
 * a pipe read still arrives as text. */
#define _GNU_SOURCE
#include "agent.h"
#include "api.h"
#include "egress.h"
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUTPUT_CAP (8u << 20)          /* per stream in a waited-for reply */
#define MAX_TIMEOUT_S (8 * 3600)
#define DEFAULT_FG_TIMEOUT_S 60
/* sbx-init enforces a command's timeout; sbxd waits this much longer
 * before deciding init itself is not answering. */
#define GRACE_MS 5000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* data as a JSON string if it is UTF-8, else base64; *enc says which. */
static json_t *encode_bytes(const uint8_t *data, size_t len, const char **enc)
{
    json_t *s = json_stringn((const char *) data, len);
    if (s) {
        *enc = "utf-8";
        return s;
    }
    size_t blen = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
    char *b = malloc(blen);
    if (!b)
        return json_string("");
    sodium_bin2base64(b, blen, data, len, sodium_base64_VARIANT_ORIGINAL);
    s = json_string(b);
    free(b);
    *enc = "base64";
    return s;
}

/* Length of the longest prefix of data[0..len) that does not end inside a
 * UTF-8 sequence (at most 3 bytes are held back). */
static size_t utf8_cut(const uint8_t *data, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        uint8_t c = data[len - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: look further back */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

static void resolve_user(sbx_box *b, json_t *who, sbx_user *u, sbx_error *err, int *bad)
{
    char buf[32];
    const char *name = b->tpl.user[0] ? b->tpl.user : "user"; /* the template's default */
    *bad = 0;
    if (json_is_string(who))
        name = json_string_value(who);
    else if (json_is_integer(who)) {
        if (json_integer_value(who) < 0 || json_integer_value(who) > 65535) {
            sbx_error_set(err, EINVAL, "'user' must be a name or a uid 0-65535");
            *bad = 1;
            return;
        }
        snprintf(buf, sizeof buf, "%lld", (long long) json_integer_value(who));
        name = buf;
    } else if (who && !json_is_null(who)) {
        sbx_error_set(err, EINVAL, "'user' must be a name or a uid");
        *bad = 1;
        return;
    }
    if (sbx_template_lookup_user(&b->tpl, name, u, err) < 0)
        *bad = 1;
}

/* The command's environment: defaults, the sandbox's envs, the request's. */
char **sbx_box_env(sbx_box *b, const sbx_user *u, json_t *envs)
{
    json_t *m = json_object();
    json_object_set_new(m, "PATH", json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    json_object_set_new(m, "HOME", json_string(u->home));
    json_object_set_new(m, "USER", json_string(u->name));
    json_object_set_new(m, "LOGNAME", json_string(u->name));
    json_object_set_new(m, "HOSTNAME", json_string(b->hostname));
    json_object_set_new(m, "LANG", json_string("C.UTF-8"));
    /* an allowlist sandbox's way out; the sandbox's envs may override */
    if (__atomic_load_n(&b->net_allowlist, __ATOMIC_RELAXED))
        sbx_egress_envs(m);
    json_object_update(m, b->envs);
    if (envs)
        json_object_update(m, envs);
    char **env = calloc(json_object_size(m) + 1, sizeof *env);
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (env && asprintf(&env[n], "%s=%s", k, json_string_value(v)) >= 0)
            n++;
    }
    json_decref(m);
    return env;
}

void sbx_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* ---- a command's connection and its events ---- */

typedef struct exec_ctx {
    sbx_daemon *d;
    sbx_box *b;
    int fd;
    pid_t pid;
    uint64_t oom_before;
    int64_t deadline_ms; /* monotonic, 0: none */
    int64_t start_ms;
    bool ended;
    bool record;         /* write the end to the commands table */
    char *argv_json;     /* set: no row yet, insert it whole at the end */
    int64_t started_wall;
    /* ndjson streaming */
    char *pending;
    size_t pending_len, pending_off;
    uint8_t carry[2][4];
    size_t carry_len[2];
} exec_ctx;

static void ctx_free(void *p)
{
    exec_ctx *c = p;
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->b)
        sbx_reg_put(&c->d->reg, c->b);
    free(c->pending);
    free(c->argv_json);
    free(c);
}

static int recv_timeout(exec_ctx *c)
{
    if (!c->deadline_ms)
        return -1;
    int64_t left = c->deadline_ms - mono_ms();
    return left > 0 ? (int) left : 0;
}

typedef struct exit_info {
    int code, sig;
    bool timed_out, oom;
    uint64_t duration_ms;
} exit_info;

static int decode_exit(exec_ctx *c, const uint8_t *p, size_t len, exit_info *x)
{
    sbx_reader rd = { p, p + len, false };
    sbx_read_u32(&rd);
    x->code = (int) sbx_read_u32(&rd);
    x->sig = (int) sbx_read_u32(&rd);
    uint32_t flags = sbx_read_u32(&rd);
    x->duration_ms = sbx_read_u64(&rd);
    if (rd.bad || x->code > 255 || x->sig >= 65)
        return -1;
    x->timed_out = flags & SBX_EXIT_TIMED_OUT;
    /* killed by the OOM killer: SIGKILL while the sandbox's OOM count rose;
     * a shell whose child was killed so reports it as exit 137 (found by
     * sbx fuzz: `sh -c 'python3 hog.py'` said oom_killed false) */
    x->oom = (x->sig == SIGKILL || (!x->sig && x->code == 128 + SIGKILL)) && !x->timed_out &&
             sbx_cgroup_oom_kills(&c->b->cg) > c->oom_before;
    if (c->record && c->argv_json)
        sbx_store_cmd_record(c->d->store, c->b->id, c->pid, c->argv_json, false, c->started_wall, sbx_now_wall_ms(),
                             x->sig ? -1 : x->code, x->sig);
    else if (c->record)
        sbx_store_cmd_end(c->d->store, c->b->id, c->pid, x->sig ? -1 : x->code, x->sig, sbx_now_wall_ms());
    return 0;
}

static void exit_fields(json_t *o, const exit_info *x)
{
    json_object_set_new(o, "exit_code", x->sig ? json_null() : json_integer(x->code));
    json_object_set_new(o, "signal", x->sig ? json_integer(x->sig) : json_null());
    json_object_set_new(o, "timed_out", json_boolean(x->timed_out));
    json_object_set_new(o, "oom_killed", json_boolean(x->oom));
    json_object_set_new(o, "duration_ms", json_integer((json_int_t) x->duration_ms));
}

static void emit(exec_ctx *c, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return;
    size_t n = strlen(s);
    char *p = realloc(c->pending, c->pending_len + n + 1);
    if (p) {
        memcpy(p + c->pending_len, s, n);
        p[c->pending_len + n] = '\n';
        c->pending = p;
        c->pending_len += n + 1;
    }
    free(s);
}

static void emit_output(exec_ctx *c, int stream, const uint8_t *data, size_t len, bool flush_all)
{
    int i = stream == 2 ? 1 : 0;
    size_t total = c->carry_len[i] + len;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return;
    memcpy(buf, c->carry[i], c->carry_len[i]);
    if (len)
        memcpy(buf + c->carry_len[i], data, len);
    size_t cut = flush_all ? total : utf8_cut(buf, total);
    c->carry_len[i] = total - cut;
    memcpy(c->carry[i], buf + cut, c->carry_len[i]);
    if (cut) {
        const char *enc;
        json_t *d = encode_bytes(buf, cut, &enc);
        emit(c, json_pack("{s:s, s:o, s:s}", "type", stream == 2 ? "stderr" : "stdout", "data", d, "encoding", enc));
    }
    free(buf);
}

/* Read one frame into ndjson events; false once the stream is over. */
/* A streamed command that prints nothing for this long gets a blank line
 * (clients skip them): it finds out that the client has gone, instead of
 * holding its thread until the command speaks (a sleeping or paused
 * command may never), and lets sbxd stop within this time. */
#define STREAM_KEEPALIVE_MS 5000

static bool stream_step(exec_ctx *c)
{
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    int wait = recv_timeout(c);
    if (wait < 0 || wait > STREAM_KEEPALIVE_MS) {
        /* wait for the next frame to begin here, so that a keep-alive never
         * falls in the middle of one */
        struct pollfd pf = { c->fd, POLLIN, 0 };
        if (poll(&pf, 1, STREAM_KEEPALIVE_MS) == 0) {
            char *q = realloc(c->pending, c->pending_len + 1);
            if (q) {
                q[c->pending_len++] = '\n';
                c->pending = q;
            }
            return true;
        }
        wait = recv_timeout(c);
    }
    int r = sbx_agent_recv(c->fd, wait, &type, &p, &len);
    if (r <= 0) {
        emit(c, json_pack("{s:s, s:s, s:s}", "type", "error", "code", r == -ETIMEDOUT ? "unavailable" : "conflict",
                          "message",
                          r == -ETIMEDOUT ? "the sandbox stopped answering" : "the sandbox ended during the command"));
        return false;
    }
    bool more = true;
    if (type == SBX_MSG_OUTPUT) {
        sbx_reader rd = { p, p + len, false };
        uint32_t stream = sbx_read_u32(&rd);
        size_t n;
        const uint8_t *data = sbx_read_bytes(&rd, &n);
        if (!rd.bad && (stream == 1 || stream == 2))
            emit_output(c, (int) stream, data, n, false);
    } else if (type == SBX_MSG_EXIT) {
        emit_output(c, 1, NULL, 0, true);
        emit_output(c, 2, NULL, 0, true);
        exit_info x;
        json_t *o = json_pack("{s:s}", "type", "end");
        if (decode_exit(c, p, len, &x) == 0)
            exit_fields(o, &x);
        emit(c, o);
        more = false;
    } else {
        emit(c, json_pack("{s:s, s:s, s:s}", "type", "error", "code", "unavailable", "message",
                          "unexpected frame from the sandbox"));
        more = false;
    }
    free(p);
    return more;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    exec_ctx *c = cls;
    while (c->pending_off == c->pending_len) {
        c->pending_off = c->pending_len = 0;
        if (c->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_step(c))
            c->ended = true;
    }
    size_t n = c->pending_len - c->pending_off;
    if (n > max)
        n = max;
    memcpy(buf, c->pending + c->pending_off, n);
    c->pending_off += n;
    return (ssize_t) n;
}

static void reply_stream(sbx_req *r, exec_ctx *c)
{
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_reader, c,
                                                                  ctx_free);
    r->ctx = NULL; /* the response owns it now */
    r->ctx_free = NULL;
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    sbx_reply_response(r, 200, resp);
}

static bool wants_ndjson(sbx_req *r)
{
    const char *a = sbx_header(r, "Accept");
    return a && strstr(a, "application/x-ndjson");
}

/* Collect a foreground command's output until it ends. */
static void wait_result(sbx_req *r, exec_ctx *c)
{
    sbx_buf out[2] = { { 0 }, { 0 } };
    bool trunc[2] = { false, false };
    exit_info x = { 0 };
    bool done = false;
    for (;;) {
        uint32_t type;
        uint8_t *p = NULL;
        size_t len;
        int rr = sbx_agent_recv(c->fd, recv_timeout(c), &type, &p, &len);
        if (rr <= 0) {
            if (rr == -ETIMEDOUT)
                sbx_reply_error(r, 503, "unavailable", "the sandbox stopped answering");
            else
                sbx_reply_error(r, 409, "conflict", "the sandbox ended while the command ran");
            break;
        }
        if (type == SBX_MSG_OUTPUT) {
            sbx_reader rd = { p, p + len, false };
            uint32_t stream = sbx_read_u32(&rd);
            size_t n;
            const uint8_t *data = sbx_read_bytes(&rd, &n);
            if (!rd.bad && (stream == 1 || stream == 2)) {
                sbx_buf *o = &out[stream - 1];
                size_t room = OUTPUT_CAP - o->len;
                if (n > room) {
                    trunc[stream - 1] = true;
                    n = room;
                }
                /* sbx_buf caps at one frame; grow by hand for 8 MiB */
                if (n) {
                    if (o->len + n > o->cap) {
                        size_t cap = o->cap ? o->cap : 65536;
                        while (cap < o->len + n)
                            cap *= 2;
                        uint8_t *nd = realloc(o->data, cap);
                        if (!nd) {
                            free(p);
                            sbx_reply_error(r, 500, "internal", "out of memory");
                            break;
                        }
                        o->data = nd;
                        o->cap = cap;
                    }
                    memcpy(o->data + o->len, data, n);
                    o->len += n;
                }
            }
        } else if (type == SBX_MSG_EXIT) {
            if (decode_exit(c, p, len, &x) < 0)
                sbx_reply_error(r, 503, "unavailable", "malformed exit report from the sandbox");
            else
                done = true;
            free(p);
            break;
        } else {
            free(p);
            sbx_reply_error(r, 503, "unavailable", "unexpected frame from the sandbox");
            break;
        }
        free(p);
    }
    if (done) {
        json_t *o = json_object();
        json_object_set_new(o, "pid", json_integer(c->pid));
        static const char *const names[2] = { "stdout", "stderr" };
        for (int i = 0; i < 2; i++) {
            const char *enc;
            char k[32];
            json_object_set_new(o, names[i], encode_bytes(out[i].data ? out[i].data : (uint8_t *) "", out[i].len, &enc));
            snprintf(k, sizeof k, "%s_encoding", names[i]);
            json_object_set_new(o, k, json_string(enc));
            snprintf(k, sizeof k, "%s_truncated", names[i]);
            json_object_set_new(o, k, json_boolean(trunc[i]));
        }
        exit_fields(o, &x);
        sbx_reply_json(r, 200, o);
    }
    free(out[0].data);
    free(out[1].data);
}

/* A command that could not start answers like a shell would. */
static void reply_exec_failed(sbx_req *r, const uint8_t *p, size_t len, bool ndjson)
{
    sbx_reader rd = { p, p + len, false };
    uint32_t e = sbx_read_u32(&rd), stage = sbx_read_u32(&rd);
    const char *msg = sbx_read_str(&rd);
    if (rd.bad) {
        sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
        return;
    }
    if (stage == 2 /* SBX_SPAWN_CWD */) {
        sbx_reply_error(r, 400, "invalid_request", "%s", msg);
        return;
    }
    int code = stage == 3 && e == ENOENT ? 127 : stage == 3 ? 126 : 125;
    char line[600];
    snprintf(line, sizeof line, "%s\n", msg);
    exit_info x = { .code = code };
    if (ndjson) {
        exec_ctx tmp = { 0 };
        emit(&tmp, json_pack("{s:s, s:i}", "type", "start", "pid", 0));
        emit_output(&tmp, 2, (const uint8_t *) line, strlen(line), true);
        json_t *o = json_pack("{s:s}", "type", "end");
        exit_fields(o, &x);
        emit(&tmp, o);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(tmp.pending_len, tmp.pending, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
        sbx_reply_response(r, 200, resp);
        return;
    }
    json_t *o = json_pack("{s:i, s:s, s:s, s:b, s:s, s:s, s:b}", "pid", 0, "stdout", "", "stdout_encoding", "utf-8",
                          "stdout_truncated", 0, "stderr", line, "stderr_encoding", "utf-8", "stderr_truncated", 0);
    exit_fields(o, &x);
    json_object_set_new(o, "error", json_string(msg));
    sbx_reply_json(r, 200, o);
}

static int send_stdin(int fd, const uint8_t *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        size_t n = len - off > (512u << 10) ? (512u << 10) : len - off;
        int e = sbx_agent_send(fd, SBX_MSG_STDIN, data + off, n);
        if (e < 0)
            return e;
        off += n;
    }
    return sbx_agent_send(fd, SBX_MSG_STDIN_CLOSE, NULL, 0);
}

void sbx_api_cmd_run(sbx_req *r)
{
    static const char *const fields[] = { "cmd", "argv", "cwd", "envs", "user", "stdin", "stdin_base64",
                                          "timeout_s", "background", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    const char *cmd = NULL, *cwd = NULL, *in = NULL, *in64 = NULL;
    json_t *envs = NULL;
    int64_t timeout = -1;
    bool background = false;
    char **argv = NULL, **env = NULL;
    uint8_t *stdin_data = NULL;
    size_t stdin_len = 0;
    sbx_box *b = NULL;
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_string(r, j, "cmd", &cmd) < 0 ||
        sbx_json_string(r, j, "cwd", &cwd) < 0 || sbx_json_strmap(r, j, "envs", &envs) < 0 ||
        sbx_json_string(r, j, "stdin", &in) < 0 || sbx_json_string(r, j, "stdin_base64", &in64) < 0 ||
        sbx_json_int(r, j, "timeout_s", 0, MAX_TIMEOUT_S, &timeout) < 0 ||
        sbx_json_bool(r, j, "background", &background) < 0)
        goto out;
    json_t *jargv = json_object_get(j, "argv");
    if (!!cmd == !!(jargv && !json_is_null(jargv))) {
        sbx_reply_error(r, 400, "invalid_request", "give exactly one of 'cmd' (a shell command) and 'argv'");
        goto out;
    }
    if (in && in64) {
        sbx_reply_error(r, 400, "invalid_request", "give at most one of 'stdin' and 'stdin_base64'");
        goto out;
    }
    if (cwd && !cwd[0]) {
        sbx_reply_error(r, 400, "invalid_request", "'cwd' is empty");
        goto out;
    }
    if (cmd) {
        argv = calloc(4, sizeof *argv);
        argv[0] = strdup("/bin/sh");
        argv[1] = strdup("-c");
        argv[2] = strdup(cmd);
    } else {
        size_t n = json_is_array(jargv) ? json_array_size(jargv) : 0;
        if (!json_is_array(jargv) || n == 0 || n > 65536) {
            sbx_reply_error(r, 400, "invalid_request", "'argv' must be a non-empty array of strings");
            goto out;
        }
        argv = calloc(n + 1, sizeof *argv);
        for (size_t i = 0; i < n; i++) {
            json_t *a = json_array_get(jargv, i);
            if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a)) {
                sbx_reply_error(r, 400, "invalid_request", "'argv[%zu]' must be a string without NUL bytes", i);
                goto out;
            }
            argv[i] = strdup(json_string_value(a));
        }
        if (!argv[0][0]) {
            sbx_reply_error(r, 400, "invalid_request", "'argv[0]' is empty");
            goto out;
        }
    }
    if (in) {
        stdin_data = (uint8_t *) strdup(in);
        stdin_len = strlen(in);
    } else if (in64) {
        size_t cap = strlen(in64);
        stdin_data = malloc(cap + 1);
        if (sodium_base642bin(stdin_data, cap + 1, in64, strlen(in64), "\n\r ", &stdin_len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0) {
            sbx_reply_error(r, 400, "invalid_request", "'stdin_base64' is not valid base64");
            goto out;
        }
    }
    if (timeout < 0)
        timeout = background ? 0 : DEFAULT_FG_TIMEOUT_S;

    if (!(b = sbx_req_box(r)))
        goto out;
    sbx_user u;
    sbx_error err = { 0 };
    int bad;
    resolve_user(b, json_object_get(j, "user"), &u, &err, &bad);
    if (bad) {
        sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        goto out;
    }
    env = sbx_box_env(b, &u, envs);
    uint32_t flags = (cwd ? 0 : SBX_EXEC_CWD_OPTIONAL) | (background ? SBX_EXEC_BACKGROUND : 0) |
                     (stdin_data || background ? SBX_EXEC_STDIN_PIPE : 0);
    char cwd_abs[4096];
    if (!cwd)
        snprintf(cwd_abs, sizeof cwd_abs, "%s", b->tpl.workdir[0] ? b->tpl.workdir : u.home);
    else if (cwd[0] == '/')
        snprintf(cwd_abs, sizeof cwd_abs, "%s", cwd);
    else
        snprintf(cwd_abs, sizeof cwd_abs, "%s/%s", u.home, cwd);
    sbx_buf req = { 0 };
    sbx_exec_req_encode(&req, u.uid, u.gid, flags, (uint32_t) timeout, cwd_abs, argv, env);
    if (req.failed) {
        sbx_buf_free(&req);
        sbx_reply_error(r, 413, "too_large", "command line and environment exceed %u bytes", SBX_CTL_MAX_FRAME);
        goto out;
    }
    exec_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->fd = -1;
    c->record = true;
    r->ctx = c;
    r->ctx_free = ctx_free;
    c->oom_before = sbx_cgroup_oom_kills(&b->cg);
    c->fd = sbx_agent_connect(b->sock, &err);
    c->b = b; /* the context holds the reference from here */
    b = NULL;
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    int rr = c->fd < 0 ? -ECONNREFUSED : sbx_agent_send(c->fd, SBX_MSG_EXEC, req.data, req.len);
    sbx_buf_free(&req);
    if (rr == 0)
        rr = sbx_agent_recv(c->fd, SBX_AGENT_TIMEOUT_MS, &type, &p, &len);
    if (rr <= 0) {
        sbx_reply_error(r, 503, "unavailable", "the sandbox did not accept the command");
        goto out;
    }
    bool nd = wants_ndjson(r);
    if (type == SBX_MSG_EXEC_FAILED) {
        reply_exec_failed(r, p, len, nd);
        free(p);
        goto out;
    }
    if (type != SBX_MSG_STARTED || len != 4) {
        free(p);
        sbx_reply_error(r, 503, "unavailable", "unexpected answer from the sandbox");
        goto out;
    }
    uint32_t pid32;
    memcpy(&pid32, p, 4);
    free(p);
    c->pid = (pid_t) pid32;
    c->start_ms = mono_ms();
    c->deadline_ms = timeout ? c->start_ms + timeout * 1000 + GRACE_MS : 0;
    __atomic_add_fetch(&r->d->commands, 1, __ATOMIC_RELAXED);
    json_t *jv = json_array();
    for (size_t i = 0; argv[i]; i++)
        json_array_append_new(jv, json_string(argv[i]) ? json_string(argv[i]) : json_string("?"));
    char *argv_json = json_dumps(jv, JSON_COMPACT);
    json_decref(jv);
    c->started_wall = sbx_now_wall_ms();
    /* A waited-for command is recorded in one write when it ends (the
     * exec path's latency is mostly writes otherwise); one that outlives
     * this request is recorded now, and its end when a client sees it. */
    if (!background && !nd) {
        c->argv_json = argv_json ? argv_json : strdup("[]");
    } else {
        sbx_store_cmd_start(r->d->store, c->b->id, c->pid, argv_json ? argv_json : "[]", background, c->started_wall);
        free(argv_json);
    }
    if (stdin_data && send_stdin(c->fd, stdin_data, stdin_len) < 0) {
        sbx_reply_error(r, 409, "conflict", "the command ended before reading its stdin");
        goto out;
    }
    if (nd) {
        emit(c, json_pack("{s:s, s:i}", "type", "start", "pid", c->pid));
        reply_stream(r, c);
    } else if (background) {
        sbx_reply_json(r, 201, json_pack("{s:i}", "pid", c->pid));
    } else {
        wait_result(r, c);
    }
out:
    if (b)
        sbx_reg_put(&r->d->reg, b);
    free(stdin_data);
    sbx_strv_free(argv);
    sbx_strv_free(env);
    json_decref(j);
}

/* The {pid} path segment. */
static int path_pid(sbx_req *r, uint32_t *pid)
{
    char *end;
    unsigned long v = strtoul(r->arg[1], &end, 10);
    if (*end || v == 0 || v > 4194304) {
        sbx_reply_error(r, 404, "not_found", "no command %s", r->arg[1]);
        return -1;
    }
    *pid = (uint32_t) v;
    return 0;
}

void sbx_api_cmd_list(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    uint8_t *p;
    size_t len;
    sbx_error err = { 0 };
    if (sbx_agent_call(b->sock, SBX_MSG_LIST, NULL, 0, &p, &len, NULL, &err) < 0) {
        sbx_reg_put(&r->d->reg, b);
        sbx_reply_sbx_error(r, &err);
        return;
    }
    sbx_reg_put(&r->d->reg, b);
    sbx_reader rd = { p, p + len, false };
    uint32_t n = sbx_read_u32(&rd);
    json_t *arr = json_array();
    int64_t now = sbx_now_wall_ms();
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
        uint32_t pid = sbx_read_u32(&rd), flags = sbx_read_u32(&rd), running = sbx_read_u32(&rd);
        uint32_t code = sbx_read_u32(&rd), sig = sbx_read_u32(&rd);
        uint64_t age = sbx_read_u64(&rd);
        uint32_t argc = sbx_read_u32(&rd);
        if (argc > 4096)
            rd.bad = true;
        json_t *av = json_array();
        for (uint32_t k = 0; k < argc && !rd.bad; k++) {
            const char *s = sbx_read_str(&rd);
            json_t *js = json_string(s);
            json_array_append_new(av, js ? js : json_string("?"));
        }
        char started[40];
        sbx_format_time(now - (int64_t) (age < (uint64_t) now ? age : 0), started, sizeof started);
        json_t *o = json_pack("{s:i, s:o, s:b, s:b, s:s}", "pid", (int) pid, "argv", av, "running", running != 0,
                              "background", (flags & SBX_EXEC_BACKGROUND) != 0, "started_at", started);
        json_object_set_new(o, "exit_code", running || sig ? json_null() : json_integer(code));
        json_object_set_new(o, "signal", running || !sig ? json_null() : json_integer(sig));
        json_array_append_new(arr, o);
    }
    free(p);
    if (rd.bad) {
        json_decref(arr);
        sbx_reply_error(r, 503, "unavailable", "malformed command list from the sandbox");
        return;
    }
    sbx_reply_json(r, 200, json_pack("{s:o}", "commands", arr));
}

void sbx_api_cmd_stream(sbx_req *r)
{
    uint32_t pid;
    if (path_pid(r, &pid) < 0)
        return;
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    uint8_t *p;
    size_t len;
    int fd = -1;
    sbx_error err = { 0 };
    if (sbx_agent_call(b->sock, SBX_MSG_ATTACH, &pid, sizeof pid, &p, &len, &fd, &err) < 0) {
        sbx_reg_put(&r->d->reg, b);
        if (err.errno_ == ESRCH)
            sbx_reply_error(r, 404, "not_found", "no command %u in sandbox %s", pid, r->arg[0]);
        else
            sbx_reply_sbx_error(r, &err);
        return;
    }
    sbx_reader rd = { p, p + len, false };
    uint64_t dropped = sbx_read_u64(&rd);
    free(p);
    exec_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->b = b;
    c->fd = fd;
    c->pid = (pid_t) pid;
    c->oom_before = sbx_cgroup_oom_kills(&b->cg);
    emit(c, json_pack("{s:s, s:i}", "type", "start", "pid", (int) pid));
    if (dropped)
        emit(c, json_pack("{s:s, s:I}", "type", "dropped", "bytes", (json_int_t) dropped));
    r->ctx = c;
    r->ctx_free = ctx_free;
    reply_stream(r, c);
}

/* One command operation (stdin bytes, stdin close, signal, kill). */
static void cmd_op(sbx_req *r, uint32_t op, uint32_t arg, const void *data, size_t len)
{
    uint32_t pid;
    if (path_pid(r, &pid) < 0)
        return;
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    sbx_buf req = { 0 };
    sbx_buf_put_u32(&req, pid);
    sbx_buf_put_u32(&req, op);
    sbx_buf_put_u32(&req, arg);
    sbx_buf_put_bytes(&req, data ? data : "", len);
    uint8_t *p;
    size_t plen;
    sbx_error err = { 0 };
    int rc = req.failed ? sbx_error_set(&err, E2BIG, "too much input at once")
                        : sbx_agent_call(b->sock, SBX_MSG_CMD_OP, req.data, req.len, &p, &plen, NULL, &err);
    sbx_buf_free(&req);
    sbx_reg_put(&r->d->reg, b);
    if (rc < 0) {
        if (err.errno_ == EAGAIN)
            sbx_reply_error(r, 429, "quota_exceeded", "%s: too much stdin is waiting to be read", err.msg);
        else
            sbx_reply_sbx_error(r, &err);
        return;
    }
    free(p);
    sbx_reply_empty(r, 204);
}

struct stdin_body {
    uint8_t *data;
    size_t len;
};

static void stdin_free(void *p)
{
    struct stdin_body *s = p;
    if (s)
        free(s->data);
    free(s);
}

void sbx_api_cmd_stdin_begin(sbx_req *r)
{
    r->ctx = calloc(1, sizeof(struct stdin_body));
    r->ctx_free = stdin_free;
}

void sbx_api_cmd_stdin_data(sbx_req *r, const char *data, size_t len)
{
    struct stdin_body *s = r->ctx;
    /* one request's bytes go to init in one frame */
    if (s->len + len > SBX_CTL_MAX_FRAME - 64) {
        sbx_reply_error(r, 413, "too_large", "send stdin in pieces of at most 1 MiB");
        return;
    }
    uint8_t *d = realloc(s->data, s->len + len);
    if (!d) {
        sbx_reply_error(r, 500, "internal", "out of memory");
        return;
    }
    memcpy(d + s->len, data, len);
    s->data = d;
    s->len += len;
}

void sbx_api_cmd_stdin(sbx_req *r)
{
    struct stdin_body *s = r->ctx;
    cmd_op(r, SBX_OP_STDIN, 0, s->data, s->len);
}

void sbx_api_cmd_stdin_close(sbx_req *r)
{
    cmd_op(r, SBX_OP_STDIN_CLOSE, 0, NULL, 0);
}

static int parse_signal(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) > 0 && json_integer_value(v) < 65 ? (int) json_integer_value(v) : -1;
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    if (strncmp(s, "SIG", 3) == 0)
        s += 3;
    for (int i = 1; i < 65; i++) {
        const char *name = sigabbrev_np(i);
        if (name && strcmp(name, s) == 0)
            return i;
    }
    return -1;
}

void sbx_api_cmd_signal(sbx_req *r)
{
    static const char *const fields[] = { "signal", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    if (sbx_json_only(r, j, fields) == 0) {
        int sig = parse_signal(json_object_get(j, "signal"));
        if (sig < 0)
            sbx_reply_error(r, 400, "invalid_request", "'signal' must be a signal name (\"SIGTERM\", \"TERM\") or "
                                                       "number 1-64");
        else
            cmd_op(r, SBX_OP_SIGNAL, (uint32_t) sig, NULL, 0);
    }
    json_decref(j);
}

void sbx_api_cmd_kill(sbx_req *r)
{
    cmd_op(r, SBX_OP_KILL, 0, NULL, 0);
}

/* --- commands sbxd itself runs: template builds, start and ready checks --- */

int sbx_box_exec(sbx_daemon *d, sbx_box *b, const sbx_exec_opts *o, int *exit_code, pid_t *pid_out, sbx_error *err)
{
    sbx_user u;
    int bad;
    json_t *who = o->user ? json_string(o->user) : NULL;
    resolve_user(b, who, &u, err, &bad);
    json_decref(who);
    if (bad)
        return -1;
    char **env = sbx_box_env(b, &u, o->envs);
    const char *cwd = o->cwd ? o->cwd : b->tpl.workdir[0] ? b->tpl.workdir : u.home;
    uint32_t flags = (o->cwd ? 0 : SBX_EXEC_CWD_OPTIONAL) | (o->background ? SBX_EXEC_BACKGROUND | SBX_EXEC_STDIN_PIPE : 0) |
                     (o->root_caps ? SBX_EXEC_ROOT_CAPS : 0);
    sbx_buf req = { 0 };
    sbx_exec_req_encode(&req, u.uid, u.gid, flags, o->timeout_s, cwd, o->argv, env);
    sbx_strv_free(env);
    if (req.failed) {
        sbx_buf_free(&req);
        return sbx_error_set(err, E2BIG, "command line and environment exceed %u bytes", SBX_CTL_MAX_FRAME);
    }
    exec_ctx c = { .d = d, .b = b, .fd = -1 };
    c.oom_before = sbx_cgroup_oom_kills(&b->cg);
    c.fd = sbx_agent_connect(b->sock, err);
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    int rr = c.fd < 0 ? -ECONNREFUSED : sbx_agent_send(c.fd, SBX_MSG_EXEC, req.data, req.len);
    sbx_buf_free(&req);
    if (rr == 0)
        rr = sbx_agent_recv(c.fd, SBX_AGENT_TIMEOUT_MS, &type, &p, &len);
    int ret = -1;
    if (rr <= 0) {
        sbx_error_set(err, rr < 0 ? -rr : EPIPE, "the sandbox did not accept the command");
        goto out;
    }
    if (type == SBX_MSG_EXEC_FAILED) {
        sbx_reader rd = { p, p + len, false };
        uint32_t e = sbx_read_u32(&rd);
        sbx_read_u32(&rd); /* the stage: the message names it */
        const char *msg = sbx_read_str(&rd);
        sbx_error_set(err, 0, "cannot run %s: %s", o->argv[0], rd.bad ? "malformed answer" : msg);
        err->errno_ = (int) e;
        goto out;
    }
    if (type != SBX_MSG_STARTED || len != 4) {
        sbx_error_set(err, EPROTO, "unexpected answer from the sandbox");
        goto out;
    }
    uint32_t pid32;
    memcpy(&pid32, p, 4);
    c.pid = (pid_t) pid32;
    if (pid_out)
        *pid_out = c.pid;
    __atomic_add_fetch(&d->commands, 1, __ATOMIC_RELAXED);
    if (o->background) {
        /* recorded like an API background command: `sbx ps` lists it, its
         * output can be re-attached to */
        json_t *jv = json_array();
        for (size_t i = 0; o->argv[i]; i++)
            json_array_append_new(jv, json_string(o->argv[i]) ? json_string(o->argv[i]) : json_string("?"));
        char *argv_json = json_dumps(jv, JSON_COMPACT);
        json_decref(jv);
        sbx_store_cmd_start(d->store, b->id, c.pid, argv_json ? argv_json : "[]", true, sbx_now_wall_ms());
        free(argv_json);
        sbx_agent_send(c.fd, SBX_MSG_STDIN_CLOSE, NULL, 0);
        ret = 0;
        goto out;
    }
    int64_t deadline = o->timeout_s ? mono_ms() + (int64_t) o->timeout_s * 1000 + GRACE_MS : 0;
    for (;;) {
        free(p);
        p = NULL;
        int wait = -1;
        if (deadline) {
            int64_t left = deadline - mono_ms();
            wait = left > 0 ? (int) left : 0;
        }
        if (o->cancel) { /* look at the flag every second */
            wait = wait < 0 || wait > 1000 ? 1000 : wait;
            if (__atomic_load_n(o->cancel, __ATOMIC_RELAXED)) {
                sbx_error_set(err, ECANCELED, "cancelled");
                goto out;
            }
        }
        rr = sbx_agent_recv(c.fd, wait, &type, &p, &len);
        if (rr == -ETIMEDOUT && (!deadline || mono_ms() < deadline))
            continue;
        if (rr <= 0) {
            sbx_error_set(err, rr == -ETIMEDOUT ? ETIMEDOUT : EPIPE, "%s",
                          rr == -ETIMEDOUT ? "the sandbox stopped answering" : "the sandbox ended during the command");
            goto out;
        }
        if (type == SBX_MSG_OUTPUT) {
            sbx_reader rd = { p, p + len, false };
            uint32_t stream = sbx_read_u32(&rd);
            size_t n;
            const uint8_t *data = sbx_read_bytes(&rd, &n);
            if (!rd.bad && (stream == 1 || stream == 2) && o->on_output)
                o->on_output(o->arg, (int) stream, data, n);
        } else if (type == SBX_MSG_EXIT) {
            exit_info x;
            if (decode_exit(&c, p, len, &x) < 0) {
                sbx_error_set(err, EPROTO, "bad exit frame from the sandbox");
                goto out;
            }
            *exit_code = x.sig ? 128 + x.sig : x.code;
            if (x.timed_out)
                sbx_error_set(err, ETIMEDOUT, "timed out after %u s", o->timeout_s);
            else if (x.oom)
                sbx_error_set(err, ENOMEM, "killed: out of memory");
            else if (x.sig)
                sbx_error_set(err, 0, "killed by signal %d", x.sig);
            else
                sbx_error_set(err, 0, "exit code %d", x.code);
            ret = 0;
            goto out;
        } else {
            sbx_error_set(err, EPROTO, "unexpected frame from the sandbox");
            goto out;
        }
    }
out:
    free(p);
    if (c.fd >= 0)
        close(c.fd);
    return ret;
}
