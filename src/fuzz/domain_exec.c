/* domain_exec.c - commands: exit codes, signals, stdin, env and cwd, big
 * and interleaved output, timeouts, missing commands. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int exit_code(fz_ctx *c)
{
    int want = (int) fz_below(&c->rng, 256), code;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "exit %d", want);
    fz_evidence(c, "input", "%s", cmd);
    if (fz_exec(c, cmd, &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    return code == want ? 0 : fz_fail(c, FZ_INTERFACE, "exit %d came back as %d", want, code);
}

static int signal_death(fz_ctx *c)
{
    static const int sigs[] = { 9, 15, 6, 2 };
    int sig = sigs[fz_below(&c->rng, 4)];
    char cmd[64];
    snprintf(cmd, sizeof cmd, "kill -%d $$", sig);
    fz_evidence(c, "input", "%s", cmd);
    _cleanup_json_ json_t *body = json_pack("{s:s}", "cmd", cmd);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    json_t *s = json_object_get(res, "signal");
    int r = json_is_integer(s) && json_integer_value(s) == sig && json_is_null(json_object_get(res, "exit_code"))
                ? 0
                : fz_fail(c, FZ_INTERFACE, "killed by signal %d, the answer says signal %lld", sig,
                          (long long) json_integer_value(s));
    json_decref(res);
    return r;
}

static int stdin_env_cwd(fz_ctx *c)
{
    char in[200], val[40], dir[64];
    size_t n = 1 + (size_t) fz_below(&c->rng, sizeof in - 1);
    for (size_t i = 0; i < n; i++)
        in[i] = (char) (' ' + fz_below(&c->rng, 95));
    in[n] = '\0';
    snprintf(val, sizeof val, "v%llu with space", (unsigned long long) fz_below(&c->rng, 1u << 30));
    snprintf(dir, sizeof dir, "/tmp/cwd%llu", (unsigned long long) fz_below(&c->rng, 1000));
    fz_evidence(c, "input", "stdin %s, FUZZ_VAR %s, cwd %s", in, val, dir);
    int code;
    char mk[96];
    snprintf(mk, sizeof mk, "mkdir -p %s", dir);
    if (fz_exec(c, mk, &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    _cleanup_json_ json_t *body =
        json_pack("{s:s, s:s, s:s, s:{s:s}}", "cmd", "cat; echo; echo \"$FUZZ_VAR\"; pwd", "stdin", in, "cwd", dir,
                  "envs", "FUZZ_VAR", val);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    char want[400];
    snprintf(want, sizeof want, "%s\n%s\n%s\n", in, val, dir);
    const char *out = json_string_value(json_object_get(res, "stdout"));
    int r = out && strcmp(out, want) == 0 ? 0
                                          : fz_fail(c, FZ_INTERFACE, "stdin/env/cwd: wanted %s, got %s", want,
                                                    out ? out : "(none)");
    json_decref(res);
    return r;
}

static int big_output(fz_ctx *c)
{
    size_t n = 1 + (size_t) fz_below(&c->rng, 6u << 20);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "head -c %zu /dev/zero | tr '\\0' x; echo err >&2", n);
    fz_evidence(c, "input", "%s", cmd);
    _cleanup_json_ json_t *body = json_pack("{s:s}", "cmd", cmd);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    size_t got = json_string_length(json_object_get(res, "stdout"));
    bool trunc = json_is_true(json_object_get(res, "stdout_truncated"));
    const char *err = json_string_value(json_object_get(res, "stderr"));
    int r = 0;
    if (!trunc && got != n)
        r = fz_fail(c, FZ_INTERFACE, "%zu bytes of output came back as %zu, not marked truncated", n, got);
    else if (trunc && got >= n)
        r = fz_fail(c, FZ_INTERFACE, "output marked truncated but complete (%zu of %zu)", got, n);
    else if (!err || strcmp(err, "err\n") != 0)
        r = fz_fail(c, FZ_INTERFACE, "stderr alongside a big stdout: %s", err ? err : "(none)");
    json_decref(res);
    return r;
}

static int timeout(fz_ctx *c)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", "sleep 30", "timeout_s", 1);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    int r = json_is_true(json_object_get(res, "timed_out"))
                ? 0
                : fz_fail(c, FZ_SANDBOX, "sleep 30 with a 1 s timeout was not stopped as timed out");
    json_decref(res);
    return r;
}

static int missing_command(fz_ctx *c)
{
    char cmd[64];
    snprintf(cmd, sizeof cmd, "no-such-command-%llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
    fz_evidence(c, "input", "%s", cmd);
    int code;
    _cleanup_free_ char *err = NULL;
    size_t el;
    if (fz_exec(c, cmd, &code, NULL, NULL, &err, &el) < 0)
        return -1;
    if (code != 127 || !strstr(err, "not found"))
        return fz_fail(c, FZ_INTERFACE, "a missing command: exit %d, stderr %s", code, err);
    return 0;
}

/* The running command with this pid in a listing: 1 running, 0 ended, -1 absent. */
static int command_state(json_t *list, long pid, json_t **cmd)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(list, "commands"), i, e)
    {
        if (json_integer_value(json_object_get(e, "pid")) == pid) {
            *cmd = e;
            return json_is_true(json_object_get(e, "running"));
        }
    }
    return -1;
}

/* How many processes named `name` run in the sandbox. */
static int count_procs(fz_ctx *c, const char *name, int *n)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "n=0; for f in /proc/[0-9]*/comm; do [ \"$(cat $f 2>/dev/null)\" = %s ] && n=$((n+1)); done; echo $n",
             name);
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, cmd, &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    *n = code == 0 ? atoi(out) : -1;
    return 0;
}

/* A background command with children of its own: it is listed as running,
 * a kill ends its whole tree (no child survives), and the listing then
 * shows it ended by SIGKILL. */
static int background_tree(fz_ctx *c)
{
    int kids = 1 + (int) fz_below(&c->rng, 4);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "for i in $(seq %d); do sleep 300 & done; echo started; wait", kids);
    fz_evidence(c, "input", "%s", cmd);
    _cleanup_json_ json_t *body = json_pack("{s:s, s:b}", "cmd", cmd, "background", 1);
    _cleanup_json_ json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    long pid = (long) json_integer_value(json_object_get(res, "pid"));
    if (pid <= 0)
        return fz_fail(c, FZ_INTERFACE, "a background command: no pid in the answer");
    int n = 0;
    for (int tries = 0; tries < 50 && n < kids; tries++) /* until the children exist */
        if (count_procs(c, "sleep", &n) < 0)
            return -1;
    if (n != kids)
        return fz_fail(c, FZ_SANDBOX, "%d sleeping children expected, %d found", kids, n);
    _cleanup_json_ json_t *list = NULL;
    json_t *e = NULL;
    if (fz_commands(c, &list) < 0)
        return -1;
    if (command_state(list, pid, &e) != 1)
        return fz_fail(c, FZ_INTERFACE, "the background command %ld is not listed as running", pid);
    if (fz_kill_command(c, pid) < 0)
        return -1;
    for (int tries = 0; tries < 50; tries++) { /* the tree is SIGKILLed: at once, but not synchronously */
        if (count_procs(c, "sleep", &n) < 0)
            return -1;
        if (n == 0)
            break;
    }
    if (n != 0)
        return fz_fail(c, FZ_SANDBOX, "%d children of a killed command still run", n);
    json_decref(list);
    list = NULL;
    if (fz_commands(c, &list) < 0)
        return -1;
    if (command_state(list, pid, &e) != 0)
        return fz_fail(c, FZ_INTERFACE, "the killed command %ld is not listed as ended", pid);
    if (json_integer_value(json_object_get(e, "signal")) != 9)
        return fz_fail(c, FZ_INTERFACE, "the killed command's signal is %lld, not 9",
                       json_integer_value(json_object_get(e, "signal")));
    return 0;
}

/* The lines of `seq from from+n-1`, as the harness expects them. */
static char *seq_text(unsigned long long from, size_t n, size_t *len)
{
    char *text = NULL;
    *len = 0;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%llu\n", from + i);
    fclose(f);
    return text;
}

/* About 10 MB of output.  Over REST the command's ndjson stream carries
 * every byte while the client reads; over MCP command_run caps each stream
 * (8 MiB): then the cap must be reported (`stdout_truncated`) and what
 * came must be an exact prefix. */
static int output_10mb(fz_ctx *c)
{
    /* 10-digit numbers: 11 bytes a line */
    unsigned long long from = 1000000000ULL + fz_below(&c->rng, 1000000000ULL);
    size_t lines = 909091 + (size_t) fz_below(&c->rng, 20000), len;
    _cleanup_free_ char *want = seq_text(from, lines, &len);
    if (!want)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "seq %llu %llu; echo done >&2", from, from + lines - 1);
    fz_evidence(c, "input", "%s: %zu bytes", cmd, len);
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", cmd, "timeout_s", 120);
    if (fz_target_iface(c->t) == FZ_REST) {
        fz_stream st = { 0 };
        int r = fz_exec_stream(c, body, &st);
        if (r == 0 && json_integer_value(json_object_get(st.end, "exit_code")) != 0)
            r = fz_fail(c, FZ_SANDBOX, "seq failed (exit %lld): %.200s",
                        (long long) json_integer_value(json_object_get(st.end, "exit_code")), st.err);
        else if (r == 0 && (st.out_len != len || memcmp(st.out, want, len) != 0))
            r = fz_fail(c, FZ_INTERFACE, "%zu bytes of output came through the stream as %zu other ones", len,
                        st.out_len);
        else if (r == 0 && strcmp(st.err, "done\n") != 0)
            r = fz_fail(c, FZ_INTERFACE, "stderr after %zu bytes of stdout came as %.100s", len, st.err);
        fz_stream_free(&st);
        return r;
    }
    _cleanup_json_ json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    const char *out = json_string_value(json_object_get(res, "stdout"));
    size_t got = json_string_length(json_object_get(res, "stdout"));
    bool trunc = json_is_true(json_object_get(res, "stdout_truncated"));
    if (json_integer_value(json_object_get(res, "exit_code")) != 0)
        return fz_fail(c, FZ_SANDBOX, "seq failed (exit %lld)", (long long) json_integer_value(json_object_get(res, "exit_code")));
    if (!out || got > len || memcmp(out, want, got) != 0)
        return fz_fail(c, FZ_INTERFACE, "%zu bytes of output: the %zu that came are not its beginning", len, got);
    if (got < len && !trunc)
        return fz_fail(c, FZ_INTERFACE, "%zu bytes of output came as %zu, not reported as truncated", len, got);
    if (trunc && got == len)
        return fz_fail(c, FZ_INTERFACE, "the whole output came, reported as truncated");
    if (trunc)
        fz_evidence(c, "capped", "%zu of %zu bytes, reported as truncated, an exact prefix", got, len);
    return 0;
}

/* stdout and stderr written in turns, line by line: each stream must keep
 * its own order exactly (how they interleave with each other is up to the
 * pipes; over REST's stream the number of turns is evidence). */
static int interleaved(fz_ctx *c)
{
    unsigned n = 200 + (unsigned) fz_below(&c->rng, 3000);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "i=1; while [ $i -le %u ]; do echo \"out $i\"; echo \"err $i\" >&2; i=$((i + 1)); done", n);
    fz_evidence(c, "input", "%u lines each", n);
    char *wo = NULL, *we = NULL;
    size_t wol = 0, wel = 0;
    FILE *fo = open_memstream(&wo, &wol), *fe = open_memstream(&we, &wel);
    for (unsigned i = 1; fo && fe && i <= n; i++) {
        fprintf(fo, "out %u\n", i);
        fprintf(fe, "err %u\n", i);
    }
    if (fo)
        fclose(fo);
    if (fe)
        fclose(fe);
    _cleanup_free_ char *want_out = wo, *want_err = we;
    if (!wo || !we)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    _cleanup_json_ json_t *body = json_pack("{s:s}", "cmd", cmd);
    const char *out, *err;
    size_t ol, el;
    fz_stream st = { 0 };
    _cleanup_json_ json_t *res = NULL;
    if (fz_target_iface(c->t) == FZ_REST) {
        if (fz_exec_stream(c, body, &st) < 0) {
            fz_stream_free(&st);
            return -1;
        }
        out = st.out, ol = st.out_len, err = st.err, el = st.err_len;
        fz_evidence(c, "stream", "%zu chunks, %zu turns between stdout and stderr", st.chunks, st.switches);
    } else {
        if (fz_exec_json(c, body, &res) < 0)
            return -1;
        out = json_string_value(json_object_get(res, "stdout"));
        err = json_string_value(json_object_get(res, "stderr"));
        ol = json_string_length(json_object_get(res, "stdout"));
        el = json_string_length(json_object_get(res, "stderr"));
    }
    int r = 0;
    if (!out || ol != wol || memcmp(out, want_out, wol) != 0)
        r = fz_fail(c, FZ_INTERFACE, "stdout of %u interleaved lines came as %zu bytes out of order or changed", n, ol);
    else if (!err || el != wel || memcmp(err, want_err, wel) != 0)
        r = fz_fail(c, FZ_INTERFACE, "stderr of %u interleaved lines came as %zu bytes out of order or changed", n, el);
    fz_stream_free(&st);
    return r;
}

/* A background command, attached to through its stream: first a client
 * that leaves after a chunk or two, then one that stays to the end; the
 * second gets everything from the first line (sbx-init keeps 1 MiB) and
 * the exit status (over MCP: command_output, once at once, once waiting). */
static int reattach(fz_ctx *c)
{
    unsigned n = 100 + (unsigned) fz_below(&c->rng, 2000), code = (unsigned) fz_below(&c->rng, 100);
    char cmd[200];
    snprintf(cmd, sizeof cmd,
             "i=1; while [ $i -le %u ]; do echo \"line $i\"; [ $((i %% 100)) = 0 ] && sleep 0.02; i=$((i + 1)); done; "
             "echo bye >&2; exit %u",
             n, code);
    fz_evidence(c, "input", "%u lines, exit %u", n, code);
    _cleanup_json_ json_t *body = json_pack("{s:s, s:b}", "cmd", cmd, "background", 1);
    _cleanup_json_ json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    long pid = (long) json_integer_value(json_object_get(res, "pid"));
    if (pid <= 0)
        return fz_fail(c, FZ_INTERFACE, "a background command: no pid in the answer");
    fz_stream first = { .detach_after = 1 + (size_t) fz_below(&c->rng, 2) }, full = { 0 };
    int r = fz_attach(c, pid, &first);
    if (r == 0)
        r = fz_attach(c, pid, &full);
    char *want = NULL;
    size_t wl = 0;
    FILE *f = open_memstream(&want, &wl);
    for (unsigned i = 1; f && i <= n; i++)
        fprintf(f, "line %u\n", i);
    if (f)
        fclose(f);
    if (r == 0 && !want)
        r = fz_fail(c, FZ_HARNESS, "out of memory");
    if (r == 0 && (first.pid != pid || full.pid != pid))
        r = fz_fail(c, FZ_INTERFACE, "attached to command %ld, the streams started with pid %ld and %ld", pid,
                    first.pid, full.pid);
    else if (r == 0 && first.out_len > wl)
        r = fz_fail(c, FZ_INTERFACE, "the first attach got %zu bytes of a %zu-byte output", first.out_len, wl);
    else if (r == 0 && (full.dropped || full.out_len != wl || memcmp(full.out, want, wl) != 0))
        r = fz_fail(c, FZ_INTERFACE, "re-attached, %zu bytes of output came as %zu (%lld reported dropped)", wl,
                    full.out_len, full.dropped);
    else if (r == 0 && json_integer_value(json_object_get(full.end, "exit_code")) != code)
        r = fz_fail(c, FZ_INTERFACE, "re-attached, the command's exit %u came as %lld", code,
                    (long long) json_integer_value(json_object_get(full.end, "exit_code")));
    else if (r == 0 && strcmp(full.err, "bye\n") != 0)
        r = fz_fail(c, FZ_INTERFACE, "re-attached, stderr came as %.100s", full.err);
    if (r == 0)
        fz_evidence(c, "attach", "the first client left after %zu chunks (%zu bytes)", first.chunks, first.out_len);
    free(want);
    fz_stream_free(&first);
    fz_stream_free(&full);
    return r;
}

static const fz_test_def tests[] = {
    { "exec.output_10mb", output_10mb },
    { "exec.interleaved", interleaved },
    { "exec.reattach", reattach },
    { "exec.background_tree", background_tree },
    { "exec.exit_code", exit_code }, { "exec.signal", signal_death },  { "exec.stdin_env_cwd", stdin_env_cwd },
    { "exec.big_output", big_output }, { "exec.timeout", timeout }, { "exec.missing_command", missing_command },
};
const fz_domain fz_domain_exec = { "exec", tests, sizeof tests / sizeof *tests };
