/* zygote.c - see zygote.h. */
#define _GNU_SOURCE
#include "zygote.h"
#include "spawn.h"
#include "../lib/control.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How long init waits for an answer.  The zygote shares the workload's CPU
 * quota, so a spinning workload may delay it by a few scheduling periods;
 * one that stops it (SIGSTOP, as sandbox root) must not hang init. */
#define ZYGOTE_TIMEOUT_MS 5000

static _Noreturn void zygote_main(int sock)
{
    for (;;) {
        uint32_t type;
        uint8_t *payload = NULL;
        size_t len;
        int fds[2 * SBX_CTL_MAX_FDS], nfds = 0;
        int r = sbx_ctl_recv_fds(sock, &type, &payload, &len, fds, &nfds);
        if (r <= 0)
            _exit(0); /* init is gone (or confused): nothing left to do */
        if (type == SBX_MSG_EXEC && len == 0) {
            free(payload);
            payload = NULL;
            int more = 0;
            r = sbx_ctl_recv_fds(sock, &type, &payload, &len, fds + nfds, &more);
            nfds += more;
            if (r <= 0)
                _exit(0);
        }
        sbx_exec_req req;
        sbx_buf b = { 0 };
        if (type != SBX_MSG_EXEC || nfds != 3 || sbx_exec_req_decode(payload, len, &req) < 0) {
            sbx_buf_put_u32(&b, EPROTO);
            sbx_buf_put_u32(&b, SBX_SPAWN_SETUP);
            sbx_ctl_send(sock, SBX_MSG_EXEC_FAILED, b.data, b.len);
        } else {
            int stage = 0;
            pid_t pid = sbx_spawn(&req, fds, CLONE_PARENT, &stage);
            if (pid < 0) {
                sbx_buf_put_u32(&b, (uint32_t) -pid);
                sbx_buf_put_u32(&b, (uint32_t) stage);
                sbx_ctl_send(sock, SBX_MSG_EXEC_FAILED, b.data, b.len);
            } else {
                uint32_t p = (uint32_t) pid;
                sbx_ctl_send(sock, SBX_MSG_STARTED, &p, sizeof p);
            }
            free(req.argv);
            free(req.envp);
        }
        sbx_buf_free(&b);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        free(payload);
    }
}

int sbx_zygote_start(sbx_zygote *z, const int *work_procs)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return -e;
    }
    if (pid == 0) {
        /* Into `work` first, before anything else can run in this process. */
        for (int i = 0; work_procs && work_procs[i] >= 0; i++) {
            if (write(work_procs[i], "0", 1) != 1)
                _exit(1);
        }
        /* Nothing of init's: no control sockets, no command pipes (a copy
         * of a stdin pipe's write end here would keep the command from
         * ever seeing EOF). */
        if (dup2(sv[1], 3) < 0)
            _exit(1);
        syscall(SYS_close_range, 4, ~0U, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Every command's cgroup namespace is rooted at `work`: make it
         * once here, commands inherit it (spawn.c skips its own). */
        if (unshare(CLONE_NEWCGROUP) < 0)
            _exit(1);
        zygote_main(3);
    }
    close(sv[1]);
    z->pid = pid;
    z->sock = sv[0];
    return 0;
}

void sbx_zygote_stop(sbx_zygote *z)
{
    if (z->pid > 0)
        kill(z->pid, SIGKILL);
    if (z->sock >= 0)
        close(z->sock);
    z->pid = 0;
    z->sock = -1;
}

pid_t sbx_zygote_spawn(sbx_zygote *z, const uint8_t *exec_payload, size_t len, const int stdio[3], int *stage)
{
    *stage = SBX_SPAWN_SETUP;
    if (z->sock < 0)
        return -EPIPE;
    /* sbx_ctl_send_fds carries only small payloads, so a request is two
     * frames: an empty EXEC with the three descriptors, then the EXEC. */
    int r = sbx_ctl_send_fds(z->sock, SBX_MSG_EXEC, NULL, 0, stdio, 3);
    if (r == 0)
        r = sbx_ctl_send(z->sock, SBX_MSG_EXEC, exec_payload, len);
    if (r < 0) {
        sbx_zygote_stop(z);
        return -EPIPE;
    }
    struct pollfd p = { z->sock, POLLIN, 0 };
    int n;
    do
        n = poll(&p, 1, ZYGOTE_TIMEOUT_MS);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        sbx_zygote_stop(z);
        return -ETIMEDOUT;
    }
    uint32_t type;
    uint8_t *payload = NULL;
    size_t plen;
    r = sbx_ctl_recv(z->sock, &type, &payload, &plen);
    if (r <= 0) {
        sbx_zygote_stop(z);
        return -EPIPE;
    }
    sbx_reader rd = { payload, payload + plen, false };
    pid_t ret;
    if (type == SBX_MSG_STARTED && plen == 4) {
        ret = (pid_t) sbx_read_u32(&rd);
        *stage = 0;
    } else if (type == SBX_MSG_EXEC_FAILED) {
        uint32_t e = sbx_read_u32(&rd);
        *stage = (int) sbx_read_u32(&rd);
        ret = (rd.bad || e == 0 || e > 4095) ? -EPROTO : -(pid_t) e;
    } else {
        ret = -EPROTO;
    }
    free(payload);
    return ret;
}
