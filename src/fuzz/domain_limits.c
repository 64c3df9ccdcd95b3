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

static int memory_hog(fz_ctx *c)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd",
                                            "python3 -c 'b = []\nwhile True: b.append(bytearray(16 << 20))'",
                                            "timeout_s", 60);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    bool oom = json_is_true(json_object_get(res, "oom_killed"));
    json_t *code = json_object_get(res, "exit_code");
    bool memerr = json_is_integer(code) && json_integer_value(code) == 1 &&
                  strstr(json_string_value(json_object_get(res, "stderr")) ?: "", "MemoryError");
    json_decref(res);
    if (!oom && !memerr)
        return fz_fail(c, FZ_SANDBOX, "a memory hog was neither OOM-killed nor refused memory");
    return still_usable(c);
}

static int fork_bomb(fz_ctx *c)
{
    _cleanup_json_ json_t *body =
        json_pack("{s:s, s:i}", "cmd", "python3 -c 'import os\nn=0\ntry:\n    while True:\n        os.fork() or "
                                       "__import__(\"time\").sleep(30); n+=1\nexcept OSError: print(\"limited\", n)'",
                  "timeout_s", 20);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    const char *out = json_string_value(json_object_get(res, "stdout"));
    bool limited = out && strstr(out, "limited");
    json_decref(res);
    if (!limited)
        return fz_fail(c, FZ_SANDBOX, "forking without end was never refused");
    int code;
    if (fz_exec(c, "pkill -9 -f os.fork; true", &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    return still_usable(c);
}

static int disk_fill(fz_ctx *c)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:i}", "cmd", "dd if=/dev/zero of=/home/user/fill bs=1M 2>&1; "
                                                                  "echo exit=$?",
                                            "timeout_s", 60);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    const char *out = json_string_value(json_object_get(res, "stdout"));
    bool full = out && strstr(out, "No space left");
    json_decref(res);
    if (!full)
        return fz_fail(c, FZ_SANDBOX, "filling the disk did not end in ENOSPC: %.200s", out ? out : "");
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

static const fz_test_def tests[] = {
    { "limits.memory_hog", memory_hog }, { "limits.fork_bomb", fork_bomb },
    { "limits.disk_fill", disk_fill },   { "limits.output_flood", output_flood },
};
const fz_domain fz_domain_limits = { "limits", tests, sizeof tests / sizeof *tests };
