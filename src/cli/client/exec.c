/* exec.c - `sbx exec`: run a command in a sandbox, its output streamed
 * back byte-exact, its exit status ours.
 *
 * The command goes as `argv` (no shell, so no quoting surprises), or with
 * -c as `cmd` (sbxd runs /bin/sh -c).  The answer is ndjson: each output
 * chunk is written to our fd 1 or 2 as it arrives (decoded from base64 when
 * sbxd had to encode it), and the "end" line decides our exit status the
 * way `sbx run` does.  SIGINT, SIGTERM and SIGHUP are forwarded to the
 * command (the signal endpoint, to its process group), as a terminal's
 * Ctrl-C would reach a local command. */
#define _GNU_SOURCE
#include "client.h"
#include "../../lib/cleanup.h"
#include "../../lib/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* -i sends stdin inline in the JSON request, which sbxd caps at 1 MiB:
 * more than this cannot fit once base64-encoded. */
#define MAX_INLINE_STDIN (1u << 20)
/* After a forwarded signal the command gets this long to end on its own
 * before we kill it, as `sbx run` does (src/cli/run.c). */
#define STOP_GRACE_MS 10000

enum { OPT_BACKGROUND = 256 };

static const struct option exec_options[] = {
    { "user", required_argument, NULL, 'u' },
    { "workdir", required_argument, NULL, 'w' },
    { "env", required_argument, NULL, 'e' },
    { "timeout", required_argument, NULL, 't' },
    { "stdin", no_argument, NULL, 'i' },
    { "background", no_argument, NULL, OPT_BACKGROUND },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb exec_verb = {
    .name = "exec",
    .usage = "sbx exec [-u USER] [-w DIR] [-e K=V]... [-t SECS] [-i] [--background] ID [--] CMD [ARGS...]\n"
             "       sbx exec [OPTIONS] ID -c 'SHELL COMMAND'",
    .help = "\n"
            "Run CMD in sandbox ID.  Its stdout and stderr arrive on ours as it writes them, byte for\n"
            "byte; the exit status is its own.  CMD and ARGS go as they are, no shell; -c STRING is run\n"
            "by /bin/sh -c in the sandbox.\n"
            "\n"
            "  -c STRING             run STRING with the sandbox's /bin/sh\n"
            "  -u, --user USER       user, root or a uid (default: user, uid 1000)\n"
            "  -w, --workdir DIR     working directory (default: the user's home)\n"
            "  -e, --env K=V         environment variable (K alone: our value of K)\n"
            "  -t, --timeout SECS    kill the command after SECS (30, 30s, 5m; 0: no limit; sbxd's default 60s)\n"
            "  -i, --stdin           send all of our stdin (at most 1 MiB) as the command's stdin\n"
            "  --background          start it and print its pid; do not wait\n"
            "\n"
            "SIGINT, SIGTERM and SIGHUP are forwarded to the command; if it has not ended 10 s later,\n"
            "it is killed.\n"
            "Exit status: the command's; 128+N killed by signal N; 123 killed for exceeding the\n"
            "sandbox's memory; 124 its timeout expired; 125 sbx or the API failed.\n",
    .shortopts = "u:w:e:t:ic:",
    .longopts = exec_options,
    .stop_after = 1, /* the sandbox id; then the command */
};

struct exec_opts {
    json_t *body;
    json_t *envs;
    const char *cmd;
    bool background;
    bool read_stdin;
};

static int exec_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    struct exec_opts *o = ctx;
    json_t *v = NULL;
    const char *field = NULL;
    switch (opt) {
    case 'u':
        field = "user";
        /* a number is a uid, anything else a name sbxd knows */
        if (*arg && strspn(arg, "0123456789") == strlen(arg)) {
            uint64_t uid;
            if (sbx_parse_uint(arg, 65535, &uid, err) < 0)
                return sbx_error_wrap(err, "-u");
            v = json_integer((json_int_t) uid);
        } else if (!*arg || !(v = json_string(arg))) {
            return sbx_error_set(err, 0, "-u '%s': expected a user name or uid", arg);
        }
        break;
    case 'w':
        field = "cwd";
        if (!*arg || !(v = json_string(arg)))
            return sbx_error_set(err, 0, "-w '%s': expected a directory (UTF-8)", arg);
        break;
    case 'e':
        return sbx_cli_add_kv(o->envs, "-e", arg, true, err);
    case 't': {
        uint64_t ms = 0;
        if (strcmp(arg, "0") != 0) {
            if (sbx_parse_duration(arg, &ms, err) < 0)
                return sbx_error_wrap(err, "-t");
            if (ms % 1000)
                return sbx_error_set(err, 0, "-t %s: must be whole seconds", arg);
        }
        field = "timeout_s";
        v = json_integer((json_int_t) (ms / 1000));
        break;
    }
    case 'i':
        o->read_stdin = true;
        return 0;
    case 'c':
        o->cmd = arg;
        return 0;
    case OPT_BACKGROUND:
        o->background = true;
        return 0;
    default:
        return sbx_error_set(err, 0, "unhandled option");
    }
    if (!v || json_object_set_new(o->body, field, v) < 0)
        return sbx_error_set(err, ENOMEM, "request");
    return 0;
}

/* All of stdin, base64-encoded, into the request. */
static int add_stdin(json_t *body, sbx_error *err)
{
    _cleanup_free_ unsigned char *data = malloc(MAX_INLINE_STDIN + 1);
    if (!data)
        return sbx_error_set(err, ENOMEM, "stdin");
    size_t len = 0;
    for (;;) {
        ssize_t n = read(STDIN_FILENO, data + len, MAX_INLINE_STDIN + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_error_set(err, errno, "reading stdin");
        if (n == 0)
            break;
        len += (size_t) n;
        if (len > MAX_INLINE_STDIN)
            return sbx_error_set(err, 0,
                                 "-i: stdin is larger than %u MiB, more than a request can carry; upload it "
                                 "with `sbx cp - ID:PATH` and redirect from that file",
                                 MAX_INLINE_STDIN >> 20);
    }
    size_t b64len = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
    _cleanup_free_ char *b64 = malloc(b64len);
    if (!b64)
        return sbx_error_set(err, ENOMEM, "stdin");
    sodium_bin2base64(b64, b64len, data, len, sodium_base64_VARIANT_ORIGINAL);
    if (json_object_set_new(body, "stdin_base64", json_string(b64)) < 0)
        return sbx_error_set(err, ENOMEM, "request");
    return 0;
}

/* What the stream said, and what we did meanwhile. */
struct exec_state {
    sbx_cli *cli;
    const char *id;
    sbx_http *signal_http; /* a second connection: the first one is busy streaming */
    json_int_t pid;
    bool ended;
    bool has_exit_code, has_signal;
    json_int_t exit_code, signal;
    bool timed_out, oom_killed;
    bool stream_error;
    char stream_message[512];
    bool broken_pipe; /* our stdout or stderr reader went away */
    int interrupted;  /* a signal came before the command had a pid to forward it to */
    int grace_signal; /* the first signal forwarded ... */
    uint64_t kill_at; /* ... and when we kill the command if it is still running */
    bool killed;
};

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
    pending_signal = sig;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t) w;
    }
    return 0;
}

/* A stdout/stderr chunk: {"data": "...", "encoding": "utf-8"|"base64"}. */
static int output_chunk(struct exec_state *st, int fd, json_t *line, sbx_error *err)
{
    json_t *data = json_object_get(line, "data");
    const char *enc = json_string_value(json_object_get(line, "encoding"));
    if (!json_is_string(data))
        return sbx_error_set(err, 0, "sbxd sent an output chunk without data");
    /* json_string_length, not strlen: a UTF-8 chunk may hold "\u0000" */
    const char *s = json_string_value(data);
    size_t len = json_string_length(data);
    _cleanup_free_ unsigned char *bin = NULL;
    if (enc && strcmp(enc, "base64") == 0) {
        size_t max = len / 4 * 3 + 3, binlen = 0;
        const char *end = NULL;
        bin = malloc(max);
        if (!bin)
            return sbx_error_set(err, ENOMEM, "output");
        if (sodium_base642bin(bin, max, s, len, NULL, &binlen, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
            end != s + len)
            return sbx_error_set(err, 0, "sbxd sent an output chunk that is not valid base64");
        s = (const char *) bin;
        len = binlen;
    } else if (enc && strcmp(enc, "utf-8") != 0) {
        return sbx_error_set(err, 0, "sbxd sent output in an unknown encoding '%s'", enc);
    }
    if (write_all(fd, s, len) < 0) {
        if (errno == EPIPE) {
            st->broken_pipe = true;
            return sbx_error_set(err, 0, "broken pipe");
        }
        return sbx_error_set(err, errno, "writing the command's %s", fd == 1 ? "stdout" : "stderr");
    }
    return 0;
}

/* An integer field or null; false if it is neither. */
static bool int_or_null(json_t *line, const char *key, bool *has, json_int_t *v)
{
    json_t *j = json_object_get(line, key);
    *has = json_is_integer(j);
    *v = *has ? json_integer_value(j) : 0;
    return *has || json_is_null(j) || !j;
}

static int on_line(void *ctx, json_t *line, sbx_error *err)
{
    struct exec_state *st = ctx;
    const char *type = json_string_value(json_object_get(line, "type"));
    if (!type)
        return sbx_error_set(err, 0, "sbxd sent a stream line without a type");
    if (strcmp(type, "stdout") == 0)
        return output_chunk(st, STDOUT_FILENO, line, err);
    if (strcmp(type, "stderr") == 0)
        return output_chunk(st, STDERR_FILENO, line, err);
    if (strcmp(type, "start") == 0) {
        st->pid = json_integer_value(json_object_get(line, "pid"));
    } else if (strcmp(type, "dropped") == 0) {
        fprintf(stderr, "sbx: warning: %" JSON_INTEGER_FORMAT " bytes of earlier output were no longer buffered\n",
                json_integer_value(json_object_get(line, "bytes")));
    } else if (strcmp(type, "end") == 0) {
        if (!int_or_null(line, "exit_code", &st->has_exit_code, &st->exit_code) ||
            !int_or_null(line, "signal", &st->has_signal, &st->signal))
            return sbx_error_set(err, 0, "sbxd sent an end line with a malformed exit status");
        st->timed_out = json_is_true(json_object_get(line, "timed_out"));
        st->oom_killed = json_is_true(json_object_get(line, "oom_killed"));
        st->ended = true;
    } else if (strcmp(type, "error") == 0) {
        const char *code = json_string_value(json_object_get(line, "code"));
        const char *msg = json_string_value(json_object_get(line, "message"));
        snprintf(st->stream_message, sizeof st->stream_message, "%s (%s)", msg ? msg : "the stream broke",
                 code ? code : "?");
        st->stream_error = true;
    }
    /* other types: newer than us; nothing we must act on */
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Kill the command's whole tree: when we stopped reading (our reader went
 * away, as a local pipeline's SIGPIPE would end it), or it outlived the
 * grace period after a forwarded signal.  h must not be the handle that is
 * streaming. */
static void kill_command(struct exec_state *st, sbx_http *h)
{
    if (st->pid <= 0 || st->ended)
        return;
    char suffix[64];
    sbx_error e = { 0 };
    snprintf(suffix, sizeof suffix, "/commands/%" JSON_INTEGER_FORMAT, st->pid);
    _cleanup_free_ char *path = sbx_cli_sandbox_path(h, st->id, suffix, &e);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (path)
        sbx_http_json(h, "DELETE", path, NULL, &resp, &e);
}

/* Forward a signal that arrived meanwhile to the command's process group,
 * and kill the command once the grace period after the first one is over. */
static int on_tick(void *ctx, sbx_error *err)
{
    struct exec_state *st = ctx;
    if (st->kill_at && !st->killed && !st->ended && now_ms() >= st->kill_at && st->signal_http) {
        st->killed = true;
        fprintf(stderr, "sbx: killed: the command did not exit within %ds of %s\n", STOP_GRACE_MS / 1000,
                strsignal(st->grace_signal));
        kill_command(st, st->signal_http);
    }
    int sig = pending_signal;
    if (!sig)
        return 0;
    pending_signal = 0;
    if (st->pid <= 0) {
        /* not started yet: nothing to forward to, so we stop like a local command would */
        st->interrupted = sig;
        return sbx_error_set(err, 0, "interrupted by %s before the command started", strsignal(sig));
    }
    sbx_error e = { 0 };
    if (!st->signal_http)
        st->signal_http = sbx_http_new(st->cli->url, st->cli->key, &e);
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/commands/%" JSON_INTEGER_FORMAT "/signal", st->pid);
    _cleanup_free_ char *path = st->signal_http ? sbx_cli_sandbox_path(st->signal_http, st->id, suffix, &e) : NULL;
    _cleanup_json_ json_t *body = json_pack("{si}", "signal", sig);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!st->kill_at) {
        st->grace_signal = sig;
        st->kill_at = now_ms() + STOP_GRACE_MS;
    }
    /* 409: the command ended meanwhile; its end line is on its way */
    if (!path || !body || sbx_http_json(st->signal_http, "POST", path, body, &resp, &e) < 0) {
        if (!st->signal_http || sbx_http_status(st->signal_http) != 409)
            fprintf(stderr, "sbx: warning: could not forward %s to the command: %s\n", strsignal(sig), e.msg);
    }
    return 0;
}

static int exit_status(const struct exec_state *st)
{
    if (st->stream_error) {
        fprintf(stderr, "sbx: %s\n", st->stream_message);
        return SBX_EXIT_FAILURE;
    }
    if (!st->ended) {
        fprintf(stderr, "sbx: the stream from sbxd ended before the command's exit status\n");
        return SBX_EXIT_FAILURE;
    }
    if (st->timed_out) {
        fprintf(stderr, "sbx: killed: the command's timeout expired\n");
        return SBX_EXIT_TIMEOUT;
    }
    if (st->has_signal && st->signal > 0 && st->signal < 65) {
        if (st->oom_killed && st->signal == SIGKILL) {
            fprintf(stderr, "sbx: killed: out of memory (the sandbox's memory limit)\n");
            return SBX_EXIT_OOM;
        }
        return 128 + (int) st->signal;
    }
    if (st->has_exit_code && st->exit_code >= 0 && st->exit_code <= 255)
        return (int) st->exit_code;
    fprintf(stderr, "sbx: sbxd reported an impossible exit status\n");
    return SBX_EXIT_FAILURE;
}

int sbx_client_exec(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    _cleanup_json_ json_t *body = json_object();
    _cleanup_json_ json_t *envs = json_object();
    if (!body || !envs || sodium_init() < 0) {
        sbx_error_set(&err, ENOMEM, "initialising");
        return sbx_cli_fail(&err);
    }
    struct exec_opts o = { .body = body, .envs = envs };
    sbx_cli_args a;
    int r = sbx_cli_parse(cli, &exec_verb, argc, argv, exec_option, &o, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&exec_verb, &err);
    if (a.npos == 0)
        sbx_error_set(&err, 0, "missing sandbox id");
    else if (o.cmd && a.nrest > 0)
        sbx_error_set(&err, 0, "-c and a command after the id exclude each other");
    else if (!o.cmd && a.nrest == 0)
        sbx_error_set(&err, 0, "missing command");
    else if (!o.cmd && !*a.rest[0])
        sbx_error_set(&err, 0, "empty command name");
    if (err.msg[0])
        return sbx_cli_usage_error(&exec_verb, &err);
    const char *id = a.pos[0];

    if (o.cmd) {
        json_t *c = json_string(o.cmd);
        if (!c || json_object_set_new(body, "cmd", c) < 0) {
            sbx_error_set(&err, 0, "-c: not valid UTF-8");
            return sbx_cli_usage_error(&exec_verb, &err);
        }
    } else {
        json_t *av = json_array();
        if (!av || json_object_set_new(body, "argv", av) < 0)
            return SBX_EXIT_FAILURE;
        for (int i = 0; i < a.nrest; i++) {
            json_t *s = json_string(a.rest[i]);
            if (!s || json_array_append_new(av, s) < 0) {
                /* the API carries text: a byte string that is not UTF-8 cannot go */
                sbx_error_set(&err, 0, "argument %d of the command is not valid UTF-8", i + 1);
                return sbx_cli_usage_error(&exec_verb, &err);
            }
        }
    }
    if (json_object_size(envs) && json_object_set(body, "envs", envs) < 0)
        return SBX_EXIT_FAILURE;
    if (o.read_stdin && add_stdin(body, &err) < 0)
        return sbx_cli_fail(&err);

    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_free_ char *path = h ? sbx_cli_sandbox_path(h, id, "/commands", &err) : NULL;
    if (!path)
        return sbx_cli_fail(&err);

    if (o.background) {
        if (json_object_set_new(body, "background", json_true()) < 0)
            return SBX_EXIT_FAILURE;
        _cleanup_http_resp_ sbx_http_resp resp = { 0 };
        if (sbx_http_json(h, "POST", path, body, &resp, &err) < 0)
            return sbx_cli_fail(&err);
        if (cli->json) {
            sbx_cli_print_raw(&resp);
            return 0;
        }
        json_t *pid = json_object_get(resp.json, "pid");
        if (!json_is_integer(pid)) {
            sbx_error_set(&err, 0, "sbxd's answer has no pid");
            return sbx_cli_fail(&err);
        }
        printf("%" JSON_INTEGER_FORMAT "\n", json_integer_value(pid));
        return 0;
    }

    /* No SA_RESTART: the signal must cut curl's wait short so the tick
     * forwards it now, not at the next second's progress call. */
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    int forwarded[] = { SIGINT, SIGTERM, SIGHUP };
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaction(forwarded[i], &sa, NULL);

    struct exec_state st = { .cli = cli, .id = id };
    r = sbx_http_ndjson(h, "POST", path, body, on_line, on_tick, &st, &err);
    sbx_http_free(st.signal_http);
    if (r < 0) {
        if (st.broken_pipe) {
            kill_command(&st, h);
            return 128 + SIGPIPE; /* what the shell shows for a local command */
        }
        sbx_cli_fail(&err);
        return st.interrupted ? 128 + st.interrupted : SBX_EXIT_FAILURE;
    }
    return exit_status(&st);
}
