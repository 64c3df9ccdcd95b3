/* reaper.c - see reaper.h. */
#define _GNU_SOURCE
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static _Noreturn void watch(int rfd, sbx_cgroup *cg)
{
    pid_t init_pid = 0;
    char c;
    for (;;) {
        ssize_t n = read(rfd, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;       /* EOF: the parent died */
        if (c == 'D')
            _exit(0);    /* clean exit: nothing to do */
        if (c == 'P') {
            pid_t p;
            size_t got = 0;
            while (got < sizeof p) {
                n = read(rfd, (char *) &p + got, sizeof p - got);
                if (n <= 0)
                    break;
                got += (size_t) n;
            }
            if (got == sizeof p)
                init_pid = p;
        }
    }
    if (init_pid > 0)
        kill(init_pid, SIGKILL); /* normally already dead through PDEATHSIG */
    sbx_cgroup_destroy(cg, NULL);
    _exit(0);
}

int sbx_reaper_start(const sbx_cgroup *cg, sbx_error *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_error_set(err, errno, "pipe");
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return sbx_error_set(err, errno, "fork the cleanup watcher");
    }
    if (pid == 0) {
        close(p[1]);
        /* Out of the caller's session and process group: a Ctrl-C aimed at
         * `sbx run` must not take the watcher down before it is needed.
         * (Its zombie, if it ends first, goes away with `sbx run`.) */
        setsid();
        /* Keep only the pipe (as fd 3): holding a copy of anything else,
         * such as a caller's pipe or the control socket, would delay EOF
         * for whoever waits on it. */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        for (int fd = 0; fd < 3; fd++)
            dup2(null, fd);
        if (dup2(p[0], 3) < 0)
            _exit(1);
        p[0] = 3;
        syscall(SYS_close_range, 4, ~0U, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        sbx_cgroup copy = *cg;
        for (int i = 0; i < SBX_CG_MAX_HIER; i++) /* closed above */
            copy.init_procs[i] = copy.work_procs[i] = -1;
        watch(p[0], &copy);
    }
    close(p[0]);
    return p[1];
}

void sbx_reaper_set_pid(int fd, pid_t init_pid)
{
    char buf[1 + sizeof init_pid];
    buf[0] = 'P';
    memcpy(buf + 1, &init_pid, sizeof init_pid);
    ssize_t w = write(fd, buf, sizeof buf);
    (void) w;
}

void sbx_reaper_done(int fd)
{
    if (fd < 0)
        return;
    ssize_t w = write(fd, "D", 1);
    (void) w;
    close(fd);
}
