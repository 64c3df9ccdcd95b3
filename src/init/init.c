/* sbx-init - PID 1 of every sandbox.
 *
 * Statically linked and bind-mounted read-only at /.sbx/init.  It starts in
 * the sandbox's `work` cgroup, so the main command it forks is born there
 * (no slow migration), and then moves itself to the `init` cgroup, outside
 * the workload's memory and pids limits: a fork bomb or an OOM in user code
 * does not reach it.  It:
 *   - reads commands (EXEC frames) from the control socket and starts them
 *     as the requested user with no privileges (spawn.c);
 *   - reaps every orphan that is re-parented to it;
 *   - forwards signals from the outside to the main command;
 *   - tells the outside how each command ended (EXIT frames);
 *   - ends the sandbox when the main command ends, or when the outside
 *     goes away (control socket EOF).
 *
 * With a listening socket (sbxd's sandboxes) it serves requests instead,
 * and outlives its creator: see server.h.
 *
 * usage (by libsbx only): sbx-init CONTROL_FD [LISTEN_FD] */
#define _GNU_SOURCE
#include "server.h"
#include "spawn.h"
#include "../lib/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

static int ctl = -1;
static int init_fds[SBX_CTL_MAX_FDS + 1] = { -1 };
static pid_t main_pid = 0;

/* Signals the outside may send to PID 1 to reach the main command. */
static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT };

static int listen_fd = -1;

static int parse_args(int argc, char **argv)
{
    if (argc != 2 && argc != 3)
        return -1;
    ctl = atoi(argv[1]);
    if (ctl < 3)
        return -1;
    if (argc == 3 && (listen_fd = atoi(argv[2])) < 3)
        return -1;
    /* keep the control socket out of every command we start */
    fcntl(ctl, F_SETFD, FD_CLOEXEC);
    return 0;
}

/* Deliver a signal to the main command's process group (it leads one,
 * see spawn.c), as a terminal does for Ctrl-C: `sh -c 'sleep 100'` stops at
 * once, not when sh gets around to it. */
static void forward(uint32_t sig)
{
    if (kill(-main_pid, (int) sig) < 0)
        kill(main_pid, (int) sig);
}

/* The main command runs: step out of its cgroup into <sbx>/init, by
 * writing "0" (ourselves) to each hierarchy's cgroup.procs fd. */
static void leave_work_cgroup(void)
{
    for (int i = 0; init_fds[i] >= 0; i++) {
        ssize_t w;
        do
            w = write(init_fds[i], "0", 1);
        while (w < 0 && errno == EINTR);
        close(init_fds[i]);
    }
    init_fds[0] = -1;
}

static void send_exit(pid_t pid, int status)
{
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, (uint32_t) pid);
    sbx_buf_put_u32(&b, (uint32_t) (WIFEXITED(status) ? WEXITSTATUS(status) : 0));
    sbx_buf_put_u32(&b, (uint32_t) (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    sbx_ctl_send(ctl, SBX_MSG_EXIT, b.data, b.len);
    sbx_buf_free(&b);
}

static void send_exec_failed(int e, int stage, const char *argv0, const char *cwd)
{
    char msg[512];
    sbx_spawn_message(e, stage, argv0, cwd, msg, sizeof msg);
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, (uint32_t) e);
    sbx_buf_put_u32(&b, (uint32_t) stage);
    sbx_buf_put_str(&b, msg);
    sbx_ctl_send(ctl, SBX_MSG_EXEC_FAILED, b.data, b.len);
    sbx_buf_free(&b);
}

/* Returns 1 to keep running, 0 when the sandbox should end. */
static int handle_frame(void)
{
    uint32_t type;
    uint8_t *payload = NULL;
    size_t len;
    int fds[SBX_CTL_MAX_FDS], nfds = 0;
    int r = sbx_ctl_recv_fds(ctl, &type, &payload, &len, fds, &nfds);
    if (r <= 0)
        return 0; /* the outside is gone (or spoke garbage): end the sandbox */
    int keep = 1;
    if (type == SBX_MSG_CGROUP && init_fds[0] < 0) {
        for (int i = 0; i < nfds; i++)
            init_fds[i] = fds[i];
        init_fds[nfds] = -1;
        nfds = 0;
    } else if (type == SBX_MSG_EXEC) {
        sbx_exec_req req;
        if (sbx_exec_req_decode(payload, len, &req) < 0) {
            keep = 0;
        } else {
            int stage = 0;

            pid_t pid = sbx_spawn(&req, NULL, 0, &stage);
            if (pid < 0) {
                send_exec_failed((int) -pid, stage, req.argv[0], req.cwd);
                if (req.flags & SBX_EXEC_MAIN)
                    keep = 0;
            } else {
                if (req.flags & SBX_EXEC_MAIN) {
                    main_pid = pid;
                    leave_work_cgroup();
                }
                /* after leaving: the outside tightens the pids limit on it */
                uint32_t p = (uint32_t) pid;
                sbx_ctl_send(ctl, SBX_MSG_STARTED, &p, sizeof p);
            }
            free(req.argv);
            free(req.envp);
        }
    } else if (type == SBX_MSG_SIGNAL && len == sizeof(uint32_t)) {
        uint32_t sig;
        memcpy(&sig, payload, sizeof sig);
        if (main_pid > 0 && sig > 0 && sig < (uint32_t) NSIG)
            forward(sig);
    } else {
        keep = 0; /* protocol violation */
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]); /* descriptors we did not ask for */
    free(payload);
    return keep;
}

int main(int argc, char **argv)
{
    /* Non-dumpable: user code running as the same uid can neither ptrace
     * us nor open /proc/1/fd/ (our control socket and cgroup fds). */

    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (parse_args(argc, argv) < 0) {
        fprintf(stderr, "sbx-init: internal tool, started by sbx only\n");
        return 125;
    }
    /* A new session: nothing in the sandbox shares the caller's terminal
     * session or can become its controlling process. */
    setsid();

    if (listen_fd >= 0) {
        /* Daemon mode: first the cgroup.procs fds of `init` then `work`. */
        uint32_t type;
        uint8_t *payload = NULL;
        size_t len;
        int fds[SBX_CTL_MAX_FDS], nfds = 0;
        static int ifds[SBX_CTL_MAX_FDS + 1], wfds[SBX_CTL_MAX_FDS + 1];
        int r = sbx_ctl_recv_fds(ctl, &type, &payload, &len, fds, &nfds);
        if (r <= 0 || type != SBX_MSG_CGROUP || len != sizeof(uint32_t)) {
            if (r > 0)
                send_exec_failed(EPROTO, 0, "sbx-init", "/");
            return 125;
        }
        uint32_t n_init;
        memcpy(&n_init, payload, sizeof n_init);
        free(payload);
        if (n_init > (uint32_t) nfds)
            return 125;
        int ni = 0, nw = 0;
        for (int i = 0; i < nfds; i++) {
            if ((uint32_t) i < n_init)
                ifds[ni++] = fds[i];
            else
                wfds[nw++] = fds[i];
        }
        ifds[ni] = wfds[nw] = -1;
        return sbx_server_run(ctl, listen_fd, ifds, wfds);
    }

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaddset(&mask, forwarded[i]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd < 0)
        return 125;

    struct pollfd pfd[2] = { { ctl, POLLIN, 0 }, { sfd, POLLIN, 0 } };
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 125;
        }
        if (pfd[1].revents & POLLIN) {
            /* One signal per wake-up; poll reports the rest.  Only signals
             * from outside the sandbox (sender pid 0 in our pid namespace)
             * are forwarded: a process inside signalling PID 1 is ignored. */
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t) sizeof si && si.ssi_signo != SIGCHLD && si.ssi_pid == 0 &&
                main_pid > 0)
                forward(si.ssi_signo);
            /* Reap everything: commands and re-parented orphans alike. */
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                if (pid == main_pid) {
                    send_exit(pid, status);
                    /* Returning kills every remaining process of the sandbox. */
                    return 0;
                }
            }
        }
        if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!handle_frame())
                return 0;
        }
    }
}
