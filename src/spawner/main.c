/* sbx-spawner: makes sbxd's sandboxes, one request at a time (see
 * src/daemon/spawner.h for why it exists, protocol.h for how it is
 * started and spoken to).  Single-threaded, static, small: each sandbox
 * is a clone() of this process. */
#define _GNU_SOURCE
#include "protocol.h"
#include "../lib/cgroup.h"
#include "../lib/cleanup.h"
#include "../lib/control.h"
#include "../lib/fsutil.h"
#include "../lib/sandbox.h"
#include "../lib/template.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long sbx-init may take to report ready. */
#define READY_TIMEOUT_MS 10000

struct spawner_ctx {
    const char *home;
    const sbx_cg_host *host;
    const char *init_path;
    uid_t uid_base;
};

static int make_listener(const char *path, sbx_error *err)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path)
        return sbx_error_set(err, ENAMETOOLONG, "control socket path %s", path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_set(err, errno, "socket");
    unlink(path);
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || chmod(path, 0600) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        close(fd);
        unlink(path);
        return sbx_error_set(err, e, "listen on %s", path);
    }
    return fd;
}

/* sbx-init says STARTED once its spawner runs and it has left `work`. */
static int wait_ready(int ctl, sbx_error *err)
{
    struct pollfd p = { ctl, POLLIN, 0 };
    int n;
    do
        n = poll(&p, 1, READY_TIMEOUT_MS);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return sbx_error_set(err, ETIMEDOUT, "sbx-init did not report ready");
    uint32_t type;
    _cleanup_free_ uint8_t *payload = NULL;
    size_t len;
    int r = sbx_ctl_recv(ctl, &type, &payload, &len);
    if (r <= 0)
        return sbx_error_set(err, r ? -r : EPIPE, "sbx-init ended during start");
    if (type == SBX_MSG_EXEC_FAILED) {
        sbx_reader rd = { payload, payload + len, false };
        uint32_t e = sbx_read_u32(&rd);
        sbx_read_u32(&rd);
        const char *msg = sbx_read_str(&rd);
        /* the message names its cause already: no second strerror */
        err->errno_ = (int) (e && e < 4096 ? e : EIO);
        snprintf(err->msg, sizeof err->msg, "%s", rd.bad ? "sandbox set-up failed" : msg);
        return -1;
    }
    if (type != SBX_MSG_STARTED)
        return sbx_error_set(err, EPROTO, "unexpected frame %u from sbx-init", type);
    return 0;
}

static void create(const struct spawner_ctx *ctx, const sbx_spawn_req *req, sbx_spawn_reply *rep)
{
    sbx_error err = { 0 };
    sbx_template tpl;
    sbx_sandbox sb;
    memset(rep, 0, sizeof *rep);
    if ((req->stack[0] ? sbx_template_open_stack(&tpl, ctx->home, req->template_name, req->stack, ctx->uid_base, &err)
                       : sbx_template_open(&tpl, ctx->home, req->template_name, ctx->uid_base, &err)) < 0)
        goto fail;
    sbx_spec spec;
    sbx_spec_init(&spec);
    snprintf(spec.id, sizeof spec.id, "%s", req->id);
    snprintf(spec.hostname, sizeof spec.hostname, "sbx-%.*s", SBX_SHORT_ID, req->id);
    spec.memory_bytes = req->memory_bytes;
    spec.disk_bytes = req->disk_bytes;
    spec.millicpus = req->millicpus;
    spec.pids = req->pids;
    spec.template_name = req->template_name;
    spec.sbx_home = ctx->home;
    spec.layer = req->layer[0] ? req->layer : NULL;
    spec.uid_base = ctx->uid_base;
    spec.listen_fd = make_listener(req->sock_path, &err);
    if (spec.listen_fd < 0)
        goto fail;
    int r = sbx_sandbox_start(&sb, &spec, &tpl, ctx->host, ctx->init_path, false, &err);
    close(spec.listen_fd);
    if (r < 0) {
        unlink(req->sock_path);
        goto fail;
    }
    if (wait_ready(sb.ctl_fd, &err) < 0) {
        sbx_sandbox_destroy(&sb, NULL);
        unlink(req->sock_path);
        goto fail;
    }
    close(sb.ctl_fd);
    rep->pid = sb.init_pid;
    rep->start_time = sbx_proc_start_time(sb.init_pid);
    sbx_cgroup_release(&sb.cg);
    return;
fail:
    rep->errno_ = err.errno_ ? err.errno_ : EIO;
    snprintf(rep->msg, sizeof rep->msg, "%s", err.msg);
}

static _Noreturn void serve(const struct spawner_ctx *ctx, int sock, pid_t sbxd)
{
    /* dies with sbxd (the sandboxes do not); sbxd may have gone already */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != sbxd)
        _exit(0);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    struct pollfd p[2] = { { sock, POLLIN, 0 }, { sfd, POLLIN, 0 } };
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            _exit(1);
        if (p[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t) sizeof si)
                ;
            /* sandboxes that ended (sbxd watches them through pidfds) */
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        }
        if (p[0].revents) {
            sbx_spawn_req req;
            ssize_t n = recv(sock, &req, sizeof req, MSG_WAITALL);
            if (n != (ssize_t) sizeof req)
                _exit(0); /* sbxd is gone */
            req.id[sizeof req.id - 1] = req.template_name[sizeof req.template_name - 1] = '\0';
            req.layer[sizeof req.layer - 1] = '\0';
            req.stack[sizeof req.stack - 1] = '\0';
            req.sock_path[sizeof req.sock_path - 1] = '\0';
            sbx_spawn_reply rep;
            create(ctx, &req, &rep);
            if (send(sock, &rep, sizeof rep, MSG_NOSIGNAL) != (ssize_t) sizeof rep)
                _exit(0);
        }
    }
}

static long number(const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end || v < 0 || v > max ? -1 : v;
}

int main(int argc, char **argv)
{
    /* PPID HOME INIT_PATH UID_BASE CG_MODE, then BASE CTRL per hierarchy */
    if (argc < 8 || (argc - 6) % 2 || (argc - 6) / 2 > SBX_CG_MAX_HIER) {
        fprintf(stderr, "sbx-spawner: internal tool, started by sbxd only\n");
        return 125;
    }
    long ppid = number(argv[1], 1L << 22), uid = number(argv[4], 0x7fffffff), mode = number(argv[5], 2);
    if (ppid <= 0 || uid < 0 || (mode != SBX_CG_V1 && mode != SBX_CG_V2)) {
        fprintf(stderr, "sbx-spawner: bad arguments\n");
        return 125;
    }
    sbx_cg_host host = { .mode = (sbx_cg_mode) mode };
    for (int i = 6; i + 1 < argc; i += 2, host.n++) {
        host.base[host.n] = argv[i];
        host.ctrl[host.n] = strcmp(argv[i + 1], "-") == 0 ? NULL : argv[i + 1];
    }
    prctl(PR_SET_NAME, "sbxd-spawner");
    struct spawner_ctx ctx = { argv[2], &host, argv[3], (uid_t) uid };
    serve(&ctx, SBX_SPAWNER_FD, (pid_t) ppid);
}
