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

static const fz_test_def tests[] = {
    { "exec.background_tree", background_tree },
    { "exec.exit_code", exit_code }, { "exec.signal", signal_death },  { "exec.stdin_env_cwd", stdin_env_cwd },
    { "exec.big_output", big_output }, { "exec.timeout", timeout }, { "exec.missing_command", missing_command },
};
const fz_domain fz_domain_exec = { "exec", tests, sizeof tests / sizeof *tests };
