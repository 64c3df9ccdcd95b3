/* domain_lifecycle.c - sandboxes made, listed, extended, ended, several at
 * once; what one writes, another never sees. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A second sandbox, besides the test's own: its id, or -1. */
static int other_sandbox(fz_ctx *c, char id[33])
{
    char mine[33];
    snprintf(mine, sizeof mine, "%s", c->sandbox);
    _cleanup_json_ json_t *body = json_pack("{s:i, s:{s:s}}", "timeout_s", 300, "metadata", "sbx.fuzz", "1");
    if (fz_create(c, body) < 0)
        return -1;
    snprintf(id, 33, "%s", c->sandbox);
    snprintf(c->sandbox, sizeof c->sandbox, "%s", mine);
    return 0;
}

static int isolation(fz_ctx *c)
{
    char other[33];
    if (other_sandbox(c, other) < 0)
        return -1;
    char secret[64];
    snprintf(secret, sizeof secret, "secret-%llu", (unsigned long long) fz_next(&c->rng));
    /* checked: a secret that never arrived would make the test pass for nothing */
    int r = fz_put_checked(c, "/tmp/secret.txt", secret, strlen(secret));
    char mine[33];
    snprintf(mine, sizeof mine, "%s", c->sandbox);
    snprintf(c->sandbox, sizeof c->sandbox, "%s", other);
    int code = 0;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (r == 0)
        r = fz_exec(c, "cat /tmp/secret.txt 2>&1; grep -rs secret- /tmp /home 2>/dev/null | head -1", &code, &out,
                    &ol, NULL, NULL);
    snprintf(c->sandbox, sizeof c->sandbox, "%s", mine);
    if (r == 0 && out && strstr(out, secret))
        r = fz_fail(c, FZ_SANDBOX, "another sandbox sees what this one wrote: %s", out);
    if (fz_delete(c, other) < 0)
        return -1;
    return r;
}

static int list_extend_end(fz_ctx *c)
{
    long t = 60 + (long) fz_below(&c->rng, 3000);
    if (fz_set_timeout(c, t, NULL) < 0)
        return -1;
    char other[33];
    if (other_sandbox(c, other) < 0)
        return -1;
    if (fz_delete(c, other) < 0)
        return -1;
    /* an ended sandbox keeps its record, and refuses work with `conflict` */
    _cleanup_json_ json_t *sb = NULL;
    if (fz_info(c, other, &sb) < 0)
        return -1;
    const char *state = json_string_value(json_object_get(sb, "state"));
    if (!state || strcmp(state, "running") == 0)
        return fz_fail(c, FZ_INTERFACE, "an ended sandbox's record says state %s", state ? state : "(none)");
    char code[64];
    int r = fz_try_exec_in(c, other, code);
    if (r == 0)
        return fz_fail(c, FZ_SANDBOX, "a command ran in an ended sandbox");
    if (r == 1 && strcmp(code, "conflict") != 0)
        return fz_fail(c, FZ_INTERFACE, "a command in an ended sandbox: refused with '%s', not conflict", code);
    return r < 0 ? -1 : 0;
}

#include <unistd.h>

/* The states of a listing's sandboxes: how many are running, how many expired. */
static void states(json_t *list, size_t *running, size_t *expired)
{
    *running = *expired = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(list, "sandboxes"), i, e)
    {
        const char *st = json_string_value(json_object_get(e, "state"));
        *running += st && strcmp(st, "running") == 0;
        *expired += st && strcmp(st, "expired") == 0;
    }
}

/* Several sandboxes with short timeouts, found by their metadata: listed
 * while they run, expired on time, and refusing work afterwards. */
static int many_expire(fz_ctx *c)
{
    size_t n = 2 + (size_t) fz_below(&c->rng, 4);
    long timeout = 1 + (long) fz_below(&c->rng, 2);
    char group[40], ids[6][33];
    /* not from the seed: a rerun of the seed must not find these */
    snprintf(group, sizeof group, "g-%s", c->sandbox);
    char mine[33];
    snprintf(mine, sizeof mine, "%s", c->sandbox);
    for (size_t i = 0; i < n; i++) {
        _cleanup_json_ json_t *body = json_pack("{s:I, s:{s:s, s:s}}", "timeout_s", (json_int_t) timeout, "metadata",
                                                "sbx.fuzz", "1", "sbx.fuzz.group", group);
        int r = fz_create(c, body);
        snprintf(ids[i], sizeof ids[i], "%s", c->sandbox);
        snprintf(c->sandbox, sizeof c->sandbox, "%s", mine);
        if (r < 0)
            return -1;
    }
    _cleanup_json_ json_t *list = NULL;
    if (fz_sandboxes(c, "sbx.fuzz.group", group, &list) < 0)
        return -1;
    size_t running, expired;
    states(list, &running, &expired);
    if (json_array_size(json_object_get(list, "sandboxes")) != n)
        return fz_fail(c, FZ_INTERFACE, "%zu sandboxes made with metadata %s, %zu listed", n, group,
                       json_array_size(json_object_get(list, "sandboxes")));
    /* they end within their timeout and a little (the reaper's tick) */
    for (int tries = 0; tries < 40 && expired < n; tries++) {
        usleep(250000);
        json_decref(list);
        list = NULL;
        if (fz_sandboxes(c, "sbx.fuzz.group", group, &list) < 0)
            return -1;
        states(list, &running, &expired);
    }
    if (expired != n)
        return fz_fail(c, FZ_SANDBOX, "%zu of %zu sandboxes with a %ld s timeout expired within 10 s", expired, n,
                       timeout);
    for (size_t i = 0; i < n; i++) /* ended by themselves: nothing to delete after the test */
        fz_disown(c, ids[i]);
    char code[64];
    int r = fz_try_exec_in(c, ids[fz_below(&c->rng, n)], code);
    if (r == 0)
        return fz_fail(c, FZ_SANDBOX, "a command ran in an expired sandbox");
    return r < 0 ? -1 : 0;
}

/* A counter in the background; a pause freezes it (the count stands
 * still while paused, the sandbox says paused), a resume lets it go on
 * from where it was: the same process, not a new one. */
static int pause_resume(fz_ctx *c)
{
    _cleanup_json_ json_t *bg = json_pack("{s:s, s:b}", "cmd",
                                          "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done",
                                          "background", 1);
    _cleanup_json_ json_t *res = NULL;
    if (fz_exec_json(c, bg, &res) < 0)
        return -1;
    long pid = (long) json_integer_value(json_object_get(res, "pid"));
    usleep(300000);
    _cleanup_json_ json_t *sb = NULL;
    if (fz_pause(c, &sb) < 0)
        return -1;
    const char *st = json_string_value(json_object_get(sb, "state"));
    if (!st || strcmp(st, "paused") != 0)
        return fz_fail(c, FZ_INTERFACE, "after a pause the sandbox says %s", st ? st : "nothing");
    /* while paused: its record says so, and time passes without counting */
    _cleanup_json_ json_t *info = NULL;
    if (fz_info(c, c->sandbox, &info) < 0)
        return -1;
    st = json_string_value(json_object_get(info, "state"));
    if (!st || strcmp(st, "paused") != 0)
        return fz_fail(c, FZ_INTERFACE, "a paused sandbox's record says %s", st ? st : "nothing");
    usleep((useconds_t) (200000 + 100000 * fz_below(&c->rng, 5)));
    json_decref(sb);
    sb = NULL;
    if (fz_resume(c, &sb) < 0)
        return -1;
    int code;
    _cleanup_free_ char *a = NULL;
    size_t al;
    /* the first read right after the resume: the count stood still */
    if (fz_exec(c, "cat /tmp/count; sleep 0.5; cat /tmp/count", &code, &a, &al, NULL, NULL) < 0)
        return -1;
    long first = strtol(a, NULL, 10), second = strtol(strchr(a, '\n') ? strchr(a, '\n') + 1 : "", NULL, 10);
    if (second <= first)
        return fz_fail(c, FZ_SANDBOX, "the counter did not go on after the resume (%ld, then %ld)", first, second);
    if (first > 40) /* 300 ms before the pause at 20/s, and a little: not the paused time too */
        fz_evidence(c, "count", "%ld after a pause at about 6: it may have counted while paused", first);
    _cleanup_json_ json_t *list = NULL;
    if (fz_commands(c, &list) < 0)
        return -1;
    size_t i;
    json_t *e;
    bool running = false;
    json_array_foreach(json_object_get(list, "commands"), i, e)
    running |= json_integer_value(json_object_get(e, "pid")) == pid && json_is_true(json_object_get(e, "running"));
    if (!running)
        return fz_fail(c, FZ_SANDBOX, "the background command %ld did not survive the pause", pid);
    return 0;
}

/* Files written, a snapshot, a fork of N: each copy has the files as they
 * were, and what one copy writes the others and the source never see.  A
 * sandbox started from the snapshot has them too.  All deleted after. */
static int snapshot_fork(fz_ctx *c)
{
    char secret[48];
    snprintf(secret, sizeof secret, "state-%llu", (unsigned long long) fz_next(&c->rng));
    if (fz_put_checked(c, "/home/user/state.txt", secret, strlen(secret)) < 0)
        return -1;
    int n = 1 + (int) fz_below(&c->rng, 3);
    _cleanup_json_ json_t *fork = NULL;
    if (fz_fork(c, n, &fork) < 0)
        return -1;
    json_t *copies = json_object_get(fork, "sandboxes");
    const char *snap = json_string_value(json_object_get(json_object_get(fork, "snapshot"), "id"));
    char mine[33];
    snprintf(mine, sizeof mine, "%s", c->sandbox);
    int r = json_array_size(copies) == (size_t) n && snap ? 0
                                                         : fz_fail(c, FZ_INTERFACE, "a fork of %d gave %zu sandboxes", n,
                                                                   json_array_size(copies));
    size_t i;
    json_t *e;
    json_array_foreach(copies, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (!id || strlen(id) != 32)
            continue;
        snprintf(c->sandbox, sizeof c->sandbox, "%s", id);
        _cleanup_free_ char *got = NULL;
        size_t gl;
        if (r == 0 && fz_get(c, "/home/user/state.txt", &got, &gl) == 0 &&
            (gl != strlen(secret) || memcmp(got, secret, gl) != 0))
            r = fz_fail(c, FZ_SANDBOX, "fork %zu has other files than its source (%.*s)", i, (int) gl, got);
        if (r == 0 && i == 0) /* the first copy changes the file */
            r = fz_put_checked(c, "/home/user/state.txt", "changed", 7);
    }
    snprintf(c->sandbox, sizeof c->sandbox, "%s", mine);
    _cleanup_free_ char *got = NULL;
    size_t gl;
    if (r == 0 && fz_get(c, "/home/user/state.txt", &got, &gl) == 0 &&
        (gl != strlen(secret) || memcmp(got, secret, gl) != 0))
        r = fz_fail(c, FZ_SANDBOX, "a fork's write reached its source");
    json_array_foreach(copies, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (id && fz_delete(c, id) < 0)
            r = -1;
    }
    /* the snapshot goes when no sandbox made from it is live any more
     * (their clean-up finishes just after the delete) */
    for (int tries = 0; snap; tries++) {
        char code[64];
        int d = fz_try_delete_snapshot(c, snap, code);
        if (d == 1 && strcmp(code, "conflict") == 0 && tries < 50) {
            usleep(100000);
            continue;
        }
        if (d != 0)
            r = d < 0 ? -1 : fz_fail(c, FZ_INTERFACE, "the fork's snapshot could not be deleted (%s)", code);
        break;
    }
    return r;
}

static double expires(json_t *sb)
{
    return fz_time_ms(json_string_value(json_object_get(sb, "expires_at")));
}

/* A timeout extended takes effect: expires_at moves by the extension, and
 * the sandbox is still alive (running, answering) past the deadline it had
 * before.  Short: the old deadline is 1-2 s away; the new one 4-5 s more
 * (never waited for: lifecycle.many_expire sees sandboxes expire). */
static int extend_timeout(fz_ctx *c)
{
    long first = 1 + (long) fz_below(&c->rng, 2), later = first + 4 + (long) fz_below(&c->rng, 2);
    fz_evidence(c, "input", "timeout %ld s, then %ld s", first, later);
    _cleanup_json_ json_t *a = NULL, *b = NULL, *info = NULL;
    double t0 = fz_now_ms();
    if (fz_set_timeout(c, first, &a) < 0)
        return -1;
    double e1 = expires(a);
    if (fz_set_timeout(c, later, &b) < 0)
        return -1;
    double e2 = expires(b);
    if (e1 < 0 || e2 < 0)
        return fz_fail(c, FZ_INTERFACE, "the answers have no expires_at (%s, %s)",
                       json_string_value(json_object_get(a, "expires_at")) ?: "none",
                       json_string_value(json_object_get(b, "expires_at")) ?: "none");
    /* set moments apart: the deadline moved by about the difference */
    double moved = e2 - e1, want = 1000.0 * (double) (later - first);
    if (moved < want - 500 || moved > want + 2000)
        return fz_fail(c, FZ_INTERFACE, "a timeout of %ld s, then %ld s: expires_at moved by %.0f ms, not about %.0f",
                       first, later, moved, want);
    /* past the old deadline (and the service's tick): still there */
    double wait = t0 + 1000.0 * (double) first + 800 - fz_now_ms();
    if (wait > 0)
        usleep((useconds_t) (wait * 1000));
    if (fz_info(c, c->sandbox, &info) < 0)
        return -1;
    const char *st = json_string_value(json_object_get(info, "state"));
    if (!st || strcmp(st, "running") != 0)
        return fz_fail(c, FZ_SANDBOX, "%.0f ms past its old deadline, with the timeout extended by %ld s, the sandbox "
                                      "is %s",
                       fz_now_ms() - t0 - 1000.0 * (double) first, later - first, st ? st : "in no state");
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, "echo alive", &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0 || strcmp(out, "alive\n") != 0)
        return fz_fail(c, FZ_SANDBOX, "past its old deadline the sandbox does not answer (exit %d): %.100s", code, out);
    /* and back to a long one: the clean-up must find it alive */
    return fz_set_timeout(c, 300, NULL);
}

static const fz_test_def tests[] = {
    { "lifecycle.extend_timeout", extend_timeout },
    { "lifecycle.pause_resume", pause_resume }, { "lifecycle.snapshot_fork", snapshot_fork },
    { "lifecycle.many_expire", many_expire },
    { "lifecycle.isolation", isolation },
    { "lifecycle.list_extend_end", list_extend_end },
};
const fz_domain fz_domain_lifecycle = { "lifecycle", tests, sizeof tests / sizeof *tests };
