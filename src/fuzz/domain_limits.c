/* domain_limits.c - a memory hog, a fork bomb, a disk fill, an output
 * flood: the limit holds, the failure is reported as such, and the sandbox
 * stays usable afterwards. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the sandbox still answers after the abuse */
static int still_usable(fz_ctx *c)
{
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, "echo alive", &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    return code == 0 && strcmp(out, "alive\n") == 0 ? 0 : fz_fail(c, FZ_SANDBOX, "not usable after the limit hit");
}

/* The test's sandbox again, with a limit of its own drawn from the seed:
 * a limit is checked against what was asked for, not against a default. */
static int sandbox_with(fz_ctx *c, const char *limit, long value)
{
    if (fz_delete(c, c->sandbox) < 0)
        return -1;
    c->sandbox[0] = '\0';
    _cleanup_json_ json_t *body =
        json_pack("{s:i, s:{s:s}, s:I}", "timeout_s", 300, "metadata", "sbx.fuzz", "1", limit, (json_int_t) value);
    fz_evidence(c, "limit", "%s %ld", limit, value);
    return fz_create(c, body);
}

/* The last number a command printed (its progress when it was stopped). */
static long last_number(const char *out)
{
    long n = -1;
    for (const char *p = out; p && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end != p)
            n = v, p = end;
        else
            p++;
    }
    return n;
}

static int memory_hog(fz_ctx *c)
{
    long limit = 128 + 64 * (long) fz_below(&c->rng, 5); /* MiB */
    if (sandbox_with(c, "memory_mb", limit) < 0)
        return -1;
    /* 16 MiB at a time, touched, the total printed as it grows */
    _cleanup_json_ json_t *body = json_pack(
        "{s:s, s:i}", "cmd",
        "python3 -c 'import sys\nb = []\nwhile True:\n b.append(bytearray(16 << 20)); print(16 * len(b), "
        "flush=True)'",
        "timeout_s", 60);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    bool oom = json_is_true(json_object_get(res, "oom_killed"));
    json_t *code = json_object_get(res, "exit_code");
    bool memerr = json_is_integer(code) && json_integer_value(code) == 1 &&
                  strstr(json_string_value(json_object_get(res, "stderr")) ?: "", "MemoryError");
    long got = last_number(json_string_value(json_object_get(res, "stdout")));
    json_decref(res);
    if (!oom && !memerr)
        return fz_fail(c, FZ_SANDBOX, "a memory hog was neither OOM-killed nor refused memory");
    if (got > limit) /* the writable layer counts too, so it stops short of the limit */
        return fz_fail(c, FZ_SANDBOX, "a memory limit of %ld MiB did not hold: %ld MiB were allocated", limit, got);
    return still_usable(c);
}

static int fork_bomb(fz_ctx *c)
{
    long limit = 32 + 32 * (long) fz_below(&c->rng, 4);
    if (sandbox_with(c, "pids", limit) < 0)
        return -1;
    _cleanup_json_ json_t *body =
        json_pack("{s:s, s:i}", "cmd", "python3 -c 'import os\nn=0\ntry:\n    while True:\n        os.fork() or "
                                       "__import__(\"time\").sleep(30); n+=1\nexcept OSError: print(\"limited\", n)'",
                  "timeout_s", 20);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    const char *out = json_string_value(json_object_get(res, "stdout"));
    bool limited = out && strstr(out, "limited");
    long forked = last_number(out);
    json_decref(res);
    if (!limited)
        return fz_fail(c, FZ_SANDBOX, "forking without end was never refused");
    if (forked > limit)
        return fz_fail(c, FZ_SANDBOX, "a limit of %ld processes did not hold: %ld were forked", limit, forked);
    int code;
    if (fz_exec(c, "pkill -9 -f os.fork; true", &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    return still_usable(c);
}

static int disk_fill(fz_ctx *c)
{
    long limit = 32 + 32 * (long) fz_below(&c->rng, 4); /* MiB */
    if (sandbox_with(c, "disk_mb", limit) < 0)
        return -1;
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", "dd if=/dev/zero of=/home/user/fill bs=1M 2>&1; "
                                                                  "echo exit=$?; du -m /home/user/fill",
                                            "timeout_s", 60);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    const char *out = json_string_value(json_object_get(res, "stdout"));
    bool full = out && strstr(out, "No space left");
    const char *du = out ? strstr(out, "exit=") : NULL;
    long used = du ? strtol(du + strcspn(du, "\n"), NULL, 10) : -1;
    if (!full) {
        fz_fail(c, FZ_SANDBOX, "filling the disk did not end in ENOSPC: %.200s", out ? out : "");
        json_decref(res);
        return -1;
    }
    json_decref(res);
    if (used > limit)
        return fz_fail(c, FZ_SANDBOX, "a disk of %ld MiB took %ld MiB", limit, used);
    int code;
    if (fz_exec(c, "rm -f /home/user/fill", &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    return still_usable(c);
}

static int output_flood(fz_ctx *c)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", "yes flood", "timeout_s", 2);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    bool timed_out = json_is_true(json_object_get(res, "timed_out"));
    bool trunc = json_is_true(json_object_get(res, "stdout_truncated"));
    json_decref(res);
    if (!timed_out || !trunc)
        return fz_fail(c, FZ_INTERFACE, "an endless output: timed_out %d, truncated %d", timed_out, trunc);
    return still_usable(c);
}

/* CPU spinners under a fraction of a CPU get about that fraction between
 * them.  Two of them, so that the sandbox asks for more than it may have
 * even on a busy host: without the limit they take a whole CPU or more,
 * with it its share, and the two are far apart. */
static int cpu_spin(fz_ctx *c)
{
    int pct = 20 + 10 * (int) fz_below(&c->rng, 4); /* 20..50 % */
    _cleanup_json_ json_t *create = json_pack("{s:i, s:{s:s}, s:f}", "timeout_s", 300, "metadata", "sbx.fuzz", "1",
                                              "cpus", pct / 100.0);
    if (fz_delete(c, c->sandbox) < 0)
        return -1;
    c->sandbox[0] = '\0';
    fz_evidence(c, "limit", "cpus %.2f", pct / 100.0);
    if (fz_create(c, create) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c,
                "python3 -c 'import os, time\nw = time.monotonic()\n"
                "for _ in range(2):\n    if os.fork() == 0:\n"
                "        while time.monotonic() - w < 2: pass\n        os._exit(0)\n"
                "os.wait(); os.wait()\nt = os.times()\n"
                "print(round(100 * (t.children_user + t.children_system) / (time.monotonic() - w)))'",
                &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0)
        return fz_fail(c, FZ_HARNESS, "the spinner failed (exit %d)", code);
    int used = atoi(out);
    fz_evidence(c, "used", "%d %% of a CPU", used);
    /* CFS enforces the quota per 100 ms period: some slack, not double */
    if (used > pct * 3 / 2 + 5)
        return fz_fail(c, FZ_SANDBOX, "a limit of %d %% of a CPU did not hold: %d %% used", pct, used);
    return still_usable(c);
}

/* Creating empty files without end: the inode bound of the disk stops it
 * with ENOSPC near that bound (not long before, not after), the files can
 * be removed, the sandbox goes on. */
static int inode_storm(fz_ctx *c)
{
    long disk = 16 + 16 * (long) fz_below(&c->rng, 3);
    if (sandbox_with(c, "disk_mb", disk) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c,
                "python3 -c 'import os,errno\nos.mkdir(\"/home/user/st\")\nn=0\ntry:\n while n < 1000000:\n"
                "  open(\"/home/user/st/%d\" % n, \"w\").close(); n+=1\nexcept OSError as e: print(errno.errorcode[e.errno], n)'"
                "; rm -rf /home/user/st",
                &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (strncmp(out, "ENOSPC", 6) != 0)
        return fz_fail(c, FZ_SANDBOX, "a file-creation storm on a %ld MiB disk did not end in ENOSPC: %.200s", disk,
                       out);
    fz_evidence(c, "made", "%s", out);
    /* the bound sbx documents (security.md): an inode per 8 KiB of disk,
     * at least 1024; the files made can only be fewer (the layer's own
     * directories take some) */
    long bound = disk * 128 > 1024 ? disk * 128 : 1024, made = strtol(out + 6, NULL, 10);
    if (made > bound)
        return fz_fail(c, FZ_SANDBOX, "a %ld MiB disk holds at most %ld inodes, %ld empty files were made", disk, bound,
                       made);
    if (made < bound / 2)
        return fz_fail(c, FZ_SANDBOX, "a %ld MiB disk (%ld inodes) ran out after only %ld empty files", disk, bound,
                       made);
    return still_usable(c);
}

static const fz_test_def tests[] = {
    { "limits.cpu_spin", cpu_spin }, { "limits.inode_storm", inode_storm },
    { "limits.memory_hog", memory_hog }, { "limits.fork_bomb", fork_bomb },
    { "limits.disk_fill", disk_fill },   { "limits.output_flood", output_flood },
};
const fz_domain fz_domain_limits = { "limits", tests, sizeof tests / sizeof *tests };
