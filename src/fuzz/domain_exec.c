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
    int code;
    _cleanup_free_ char *err = NULL;
    size_t el;
    if (fz_exec(c, cmd, &code, NULL, NULL, &err, &el) < 0)
        return -1;
    if (code != 127 || !strstr(err, "not found"))
        return fz_fail(c, FZ_INTERFACE, "a missing command: exit %d, stderr %s", code, err);
    return 0;
}

static const fz_test_def tests[] = {
    { "exec.exit_code", exit_code }, { "exec.signal", signal_death },  { "exec.stdin_env_cwd", stdin_env_cwd },
    { "exec.big_output", big_output }, { "exec.timeout", timeout }, { "exec.missing_command", missing_command },
};
const fz_domain fz_domain_exec = { "exec", tests, sizeof tests / sizeof *tests };
