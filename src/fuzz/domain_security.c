/* domain_security.c - what a sandbox must not reach or do: host files,
 * /proc/1/root, mounts, ptrace of init, raw sockets, the kernel keyring;
 * path traversal and symlink tricks through the file API.  Every attempt
 * must fail; one that succeeds is a `sandbox` failure (isolation broken). */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cmd must fail (non-zero exit).  user: root or user; MCP's command_run
 * has no choice of user (it runs as the template's), so there it is NULL. */
static int must_fail(fz_ctx *c, const char *cmd, const char *what, const char *user)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:s*}", "cmd", cmd, "user", user);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    json_t *code = json_object_get(res, "exit_code");
    int r = json_is_integer(code) && json_integer_value(code) == 0
                ? fz_fail(c, FZ_SANDBOX, "%s succeeded: %.300s", what, json_string_value(json_object_get(res, "stdout")))
                : 0;
    json_decref(res);
    return r;
}

static int escapes(fz_ctx *c)
{
    static const struct {
        const char *cmd, *what;
    } attempts[] = {
        { "cat /proc/1/environ", "reading sbx-init's environment" },
        { "ls /proc/1/root/etc >/dev/null && cat /proc/1/root/etc/hostname | grep -v sbx-", "/proc/1/root" },
        { "mount -t tmpfs x /mnt", "mount" },
        { "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); sys.exit(0 if l.ptrace(16, 1, 0, 0) == 0 else 1)'",
          "ptrace of sbx-init" },
        { "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'",
          "a raw socket" },
        { "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); "
          "sys.exit(0 if l.syscall(248, b\"user\", b\"k\", b\"v\", 1, -4) >= 0 else 1)'",
          "add_key to the kernel keyring" },
        { "unshare -r true", "a new user namespace" },
        { "echo 1 > /proc/sys/kernel/sysrq", "writing /proc/sys" },
    };
    size_t i = fz_below(&c->rng, sizeof attempts / sizeof *attempts);
    const char *user = fz_below(&c->rng, 2) ? "root" : "user";
    if (fz_target_iface(c->t) == FZ_MCP)
        user = NULL;
    fz_evidence(c, "attempt", "%s as %s", attempts[i].what, user ? user : "the template's user");
    return must_fail(c, attempts[i].cmd, attempts[i].what, user);
}

/* the file API: `..` and symlinks must not lead out of the sandbox */
static int file_api_tricks(fz_ctx *c)
{
    int k = (int) fz_below(&c->rng, 3);
    int code;
    if (k == 0) { /* a symlink to the host's (no: the sandbox's own) /etc/shadow, read as user */
        if (fz_exec(c, "ln -sf /etc/shadow /home/user/link", &code, NULL, NULL, NULL, NULL) < 0)
            return -1;
        char why[64];
        int r = fz_try_read(c, "/home/user/link", why);
        return r == 0 ? fz_fail(c, FZ_SANDBOX, "/etc/shadow was read through a symlink") : r < 0 ? -1 : 0;
    }
    if (k == 1) { /* ../ in a path is resolved inside the sandbox: never the host's file */
        char marker[64];
        snprintf(marker, sizeof marker, "marker-%llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
        if (fz_put(c, "../../../../tmp/trav.txt", marker, strlen(marker)) < 0)
            return -1;
        _cleanup_free_ char *out = NULL;
        size_t ol;
        if (fz_exec(c, "cat /tmp/trav.txt", &code, &out, &ol, NULL, NULL) < 0)
            return -1;
        return code == 0 && strcmp(out, marker) == 0
                   ? 0
                   : fz_fail(c, FZ_SANDBOX, "a ../ path did not land in the sandbox's /tmp (%s)", out);
    }
    /* a write through a symlinked directory pointing at /proc: refused */
    if (fz_exec(c, "ln -sfn /proc/sys /home/user/sys", &code, NULL, NULL, NULL, NULL) < 0)
        return -1;
    char why[64];
    int r = fz_try_remove(c, "/home/user/sys/kernel/sysrq", why);
    return r == 0 ? fz_fail(c, FZ_SANDBOX, "/proc/sys/kernel/sysrq was deleted through a symlink") : r < 0 ? -1 : 0;
}

/* A file planted on the host (the target runs here): no path inside, and
 * no path through the file API, reaches it. */
static int host_files(fz_ctx *c)
{
    if (!fz_target_local(c->t))
        return fz_fail(c, FZ_UNSUPPORTED, "the target is not on this machine: nothing can be planted on its host");
    char path[64], secret[64];
    snprintf(path, sizeof path, "/tmp/sbx-fuzz-host-%016llx", (unsigned long long) fz_next(&c->rng));
    snprintf(secret, sizeof secret, "host-secret-%016llx", (unsigned long long) fz_next(&c->rng));
    FILE *f = fopen(path, "wxe");
    if (!f || fputs(secret, f) < 0 || fclose(f) != 0)
        return fz_fail(c, FZ_HARNESS, "planting %s on the host failed", path);
    int r = 0, code;
    /* inside: the same path, through /proc, and a search of everything */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cat %s /proc/1/root%s /proc/self/root%s 2>/dev/null; grep -rsl %s /tmp /proc/1/root/tmp /home 2>/dev/null "
             "| head -3; true",
             path, path, path, secret);
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, cmd, &code, &out, &ol, NULL, NULL) < 0)
        r = -1;
    else if (strstr(out, secret) || strstr(out, "sbx-fuzz-host"))
        r = fz_fail(c, FZ_SANDBOX, "a file on the host was visible inside: %.200s", out);
    /* the file API, with the path as it is and climbing out of the home */
    char via[160];
    snprintf(via, sizeof via, "../../../../..%s", path);
    const char *tries[] = { path, via };
    for (size_t i = 0; r == 0 && i < 2; i++) {
        _cleanup_free_ char *got = NULL;
        size_t gl;
        char why[64];
        int k = fz_try_read(c, tries[i], why);
        if (k < 0)
            r = -1;
        else if (k == 0 && fz_get(c, tries[i], &got, &gl) == 0 && memmem(got, gl, secret, strlen(secret)))
            r = fz_fail(c, FZ_SANDBOX, "the file API read the host's %s as %s", path, tries[i]);
    }
    unlink(path);
    return r;
}

static const fz_test_def tests[] = {
    { "security.host_files", host_files },
    { "security.escapes", escapes },
    { "security.file_api_tricks", file_api_tricks },
};
const fz_domain fz_domain_security = { "security", tests, sizeof tests / sizeof *tests };
