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
 * has no choice of user (it runs as the template's), so there it is NULL.
 * An attempt whose tool is missing (126, 127: not executable, not found)
 * tried nothing: `unsupported`, never a pass. */
static int must_fail(fz_ctx *c, const char *cmd, const char *what, const char *user)
{
    _cleanup_json_ json_t *body = json_pack("{s:s, s:s*}", "cmd", cmd, "user", user);
    json_t *res = NULL;
    if (fz_exec_json(c, body, &res) < 0)
        return -1;
    json_t *code = json_object_get(res, "exit_code");
    long long k = json_is_integer(code) ? json_integer_value(code) : -1;
    const char *err = json_string_value(json_object_get(res, "stderr"));
    int r = 0;
    if (k == 0)
        r = fz_fail(c, FZ_SANDBOX, "%s succeeded: %.300s", what, json_string_value(json_object_get(res, "stdout")));
    else if (k == 126 || k == 127)
        r = fz_fail(c, FZ_UNSUPPORTED, "%s was not tried: its tool is missing (exit %lld): %.200s", what, k,
                    err ? err : "");
    else
        fz_evidence(c, "refused", "exit %lld: %.300s", k, err ? err : "");
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
        /* a file that exists (else the attempt tries nothing: 127), written
         * with its own value, so that a success changes nothing */
        { "f=/proc/sys/kernel/core_pattern; [ -e $f ] || exit 127; v=$(cat $f) && printf '%s\\n' \"$v\" > $f",
          "writing /proc/sys (core_pattern, its own value)" },
    };
    size_t i = fz_below(&c->rng, sizeof attempts / sizeof *attempts);
    const char *user = fz_below(&c->rng, 2) ? "root" : "user";
    if (fz_target_iface(c->t) == FZ_MCP)
        user = NULL;
    fz_evidence(c, "attempt", "%s as %s", attempts[i].what, user ? user : "the template's user");
    return must_fail(c, attempts[i].cmd, attempts[i].what, user);
}

/* A symlink in the user's home to a file only root may read: the file API,
 * working as the user, must refuse it as `forbidden` (EACCES), as `cat`
 * does inside; a read that works is a sandbox failure (the API read with
 * more rights than the user has), another refusal an interface one.
 *
 * Over REST the file is real: made by root inside (0600, in root's 0700
 * home), its existence checked.  Over MCP no tool runs as root (command_run
 * runs as the template's user), so the link points into /root, which the
 * user cannot enter: still a path only root reaches. */
static int root_only_link(fz_ctx *c)
{
    bool mcp = fz_target_iface(c->t) == FZ_MCP;
    char target[64], secret[64];
    snprintf(target, sizeof target, "/root/fz-secret-%llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
    snprintf(secret, sizeof secret, "root-only-%016llx", (unsigned long long) fz_next(&c->rng));
    int code;
    if (!mcp) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "umask 077 && printf %%s %s > %s && chmod 600 %s && stat -c '%%a %%u' %s", secret,
                 target, target, target);
        _cleanup_json_ json_t *body = json_pack("{s:s, s:s}", "cmd", cmd, "user", "root");
        _cleanup_json_ json_t *res = NULL;
        if (fz_exec_json(c, body, &res) < 0)
            return -1;
        const char *out = json_string_value(json_object_get(res, "stdout"));
        if (json_integer_value(json_object_get(res, "exit_code")) != 0 || !out || strcmp(out, "600 0\n") != 0)
            return fz_fail(c, FZ_SANDBOX, "root could not make the root-only file %s: %.200s", target,
                           json_string_value(json_object_get(res, "stderr")) ?: "");
    }
    /* as the user: the link is made, and the target is refused inside */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ln -s %s /home/user/link && test -L /home/user/link && cat /home/user/link", target);
    _cleanup_free_ char *out = NULL, *err = NULL;
    size_t ol, el;
    if (fz_exec(c, cmd, &code, &out, &ol, &err, &el) < 0)
        return -1;
    if (strstr(out, secret))
        return fz_fail(c, FZ_SANDBOX, "the user read root's 0600 file %s through a link", target);
    if (code == 0 || !strstr(err, "Permission denied"))
        return fz_fail(c, FZ_SANDBOX, "making the link to %s, or refusing it inside, went otherwise (exit %d): %.200s",
                       target, code, err);
    char why[64];
    int r = fz_try_read(c, "/home/user/link", why);
    if (r < 0)
        return -1;
    if (r == 0)
        return fz_fail(c, FZ_SANDBOX, "the file API read %s (root's, 0600) through a link, as the user", target);
    if (strcmp(why, "forbidden") != 0)
        return fz_fail(c, FZ_INTERFACE, "a link to %s (root's, 0600): refused with '%s', not forbidden", target,
                       why[0] ? why : "no code");
    return 0;
}

/* the file API: `..` and symlinks must not lead out of the sandbox */
static int file_api_tricks(fz_ctx *c)
{
    int k = (int) fz_below(&c->rng, 3);
    int code;
    if (k == 0)
        return root_only_link(c);
    if (k == 1) { /* ../ in a path is resolved inside the sandbox: never the host's file */
        char marker[64];
        snprintf(marker, sizeof marker, "marker-%llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
        if (fz_put_checked(c, "../../../../tmp/trav.txt", marker, strlen(marker)) < 0)
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
    _cleanup_free_ char *err = NULL;
    size_t el;
    if (fz_exec(c, "ln -sfn /proc/sys /home/user/sys && test -L /home/user/sys && test -e /home/user/sys/kernel/hostname",
                &code, NULL, NULL, &err, &el) < 0)
        return -1;
    if (code != 0) /* else the refusal below would prove nothing */
        return fz_fail(c, FZ_SANDBOX, "the link to /proc/sys could not be made, or leads nowhere (exit %d): %.200s",
                       code, err);
    char why[64];
    int r = fz_try_remove(c, "/home/user/sys/kernel/hostname", why);
    return r == 0 ? fz_fail(c, FZ_SANDBOX, "/proc/sys/kernel/hostname was deleted through a symlink") : r < 0 ? -1 : 0;
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
