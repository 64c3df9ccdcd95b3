/* spawn.c - see spawn.h. */
#define _GNU_SOURCE
#include "spawn.h"
#include "../lib/caps.h"
#include "../lib/cgroup.h"
#include "../lib/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* In the child: report errno through the close-on-exec pipe and die. */
static _Noreturn void fail(int pipe_fd, int stage, int e)
{
    int msg[2] = { stage, e };
    ssize_t w = write(pipe_fd, msg, sizeof msg);
    (void) w;
    _exit(127);
}

pid_t sbx_spawn(const sbx_exec_req *req, const int *work_fds, int *stage)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    if (pid == 0) {
        close(p[0]);
        /* init blocks the signals it handles through signalfd; a command
         * starts with a clean slate. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int s = 1; s < NSIG; s++)
            signal(s, SIG_DFL);

        int r = sbx_cgroup_join_fds(work_fds);
        if (r < 0)
            fail(p[1], SBX_SPAWN_SETUP, -r);
        if (unshare(CLONE_NEWCGROUP) < 0)
            fail(p[1], SBX_SPAWN_SETUP, errno);
        umask(022);
        r = sbx_caps_drop_to(req->uid, req->gid);
        if (r < 0)
            fail(p[1], SBX_SPAWN_SETUP, -r);
        if (chdir(req->cwd) < 0)
            fail(p[1], SBX_SPAWN_CWD, errno);
        /* Nothing of init's leaks to user code: close every fd above 2
         * except the error pipe (close-on-exec: exec success closes it). */
        if (p[1] > 3)
            syscall(SYS_close_range, 3, p[1] - 1, 0);
        syscall(SYS_close_range, p[1] + 1, ~0U, 0);
        r = sbx_seccomp_load();
        if (r < 0)
            fail(p[1], SBX_SPAWN_SETUP, -r);
        /* execvpe searches the PATH of environ, so point environ at the
         * command's own environment first. */
        environ = (char **) req->envp;
        execvpe(req->argv[0], (char *const *) req->argv, (char *const *) req->envp);
        fail(p[1], SBX_SPAWN_EXEC, errno);
    }
    close(p[1]);
    int msg[2] = { 0, 0 };
    ssize_t n;
    do
        n = read(p[0], msg, sizeof msg);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == (ssize_t) sizeof msg) {
        waitpid(pid, NULL, 0);
        *stage = msg[0];
        return msg[1] > 0 ? -msg[1] : -EIO;
    }
    return pid;
}
