/* reaper.c - see reaper.h. */
#define _GNU_SOURCE
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STACK_SIZE (64 * 1024)

struct sbx_reaper_state {
    volatile pid_t init_pid;
    volatile int n_dirs;
    size_t used;
    const char *dirs[SBX_REAPER_MAX_DIRS]; /* into names[] */
    char names[8192];                       /* packed, NUL-terminated */
    int pipe_rd;
    char stack[STACK_SIZE] __attribute__((aligned(16)));
};

static long sys(long nr, long a, long b, long c)
{
    return syscall(nr, a, b, c, 0L);
}

/* Kill every pid listed in dir/cgroup.procs (raw syscalls, no stdio). */
static void kill_listed(const char *dir)
{
    char path[PATH_MAX + 16], buf[4096];
    size_t n = strlen(dir);
    if (n + 14 >= sizeof path)
        return;
    memcpy(path, dir, n);
    memcpy(path + n, "/cgroup.procs", 14);
    int fd = (int) sys(SYS_open, (long) path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    long got = sys(SYS_read, fd, (long) buf, sizeof buf - 1);
    sys(SYS_close, fd, 0, 0);
    if (got <= 0)
        return;
    long pid = 0;
    for (long i = 0; i <= got; i++) {
        if (i < got && buf[i] >= '0' && buf[i] <= '9') {
            pid = pid * 10 + (buf[i] - '0');
        } else {
            if (pid > 0)
                sys(SYS_kill, pid, SIGKILL, 0);
            pid = 0;
        }
    }
}

static int watcher(void *arg)
{
    struct sbx_reaper_state *st = arg;
    sigset_t all;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, NULL, _NSIG / 8);
    /* Out of the caller's session and process group: a Ctrl-C aimed at
     * `sbx run` must not take the watcher down before it is needed. */
    sys(SYS_setsid, 0, 0, 0);
    /* Keep only the pipe: a copy of a caller's pipe or of the control
     * socket would delay EOF for whoever waits on it. */
    int null = (int) sys(SYS_open, (long) "/dev/null", O_RDWR, 0);
    for (int fd = 0; fd < 3; fd++)
        sys(SYS_dup2, null, fd, 0);
    sys(SYS_dup2, st->pipe_rd, 3, 0);
    sys(SYS_close_range, 4, ~0U, 0);

    char c;
    for (;;) {
        long n = sys(SYS_read, 3, (long) &c, 1);
        if (n == 1 && c == 'D')
            sys(SYS_exit, 0, 0, 0); /* clean exit: nothing to do */
        if (n == 1 || (n < 0 && errno == EINTR))
            continue;
        break; /* EOF: the parent died */
    }
    if (st->init_pid > 0)
        sys(SYS_kill, st->init_pid, SIGKILL, 0); /* normally already gone (PDEATHSIG) */
    for (int i = st->n_dirs - 1; i >= 0; i--) {
        struct timespec delay = { 0, 1000000 };
        for (int attempt = 0; attempt < 12; attempt++) {
            if (sys(SYS_rmdir, (long) st->dirs[i], 0, 0) == 0 || errno == ENOENT)
                break;
            kill_listed(st->dirs[i]);
            sys(SYS_nanosleep, (long) &delay, 0, 0);
            if (delay.tv_nsec < 500000000)
                delay.tv_nsec *= 2;
        }
    }
    sys(SYS_exit, 0, 0, 0);
    return 0;
}

int sbx_reaper_start(sbx_reaper *r, sbx_error *err)
{
    r->fd = -1;
    r->state = mmap(NULL, sizeof *r->state, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->state == MAP_FAILED) {
        r->state = NULL;
        return sbx_error_set(err, errno, "mmap");
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_error_set(err, errno, "pipe");
    r->state->pipe_rd = p[0];
    pid_t pid = clone(watcher, r->state->stack + STACK_SIZE, CLONE_VM | SIGCHLD, r->state);
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        return sbx_error_set(err, errno, "start the cleanup watcher");
    }
    r->fd = p[1];
    return 0;
}

void sbx_reaper_add_dir(sbx_reaper *r, const char *dir)
{
    if (!r || !r->state)
        return;
    struct sbx_reaper_state *st = r->state;
    size_t n = strlen(dir) + 1;
    if (st->n_dirs >= SBX_REAPER_MAX_DIRS || st->used + n > sizeof st->names)
        return;
    memcpy(st->names + st->used, dir, n);
    st->dirs[st->n_dirs] = st->names + st->used;
    st->used += n;
    st->n_dirs++; /* published after the string is complete */
}

void sbx_reaper_set_pid(sbx_reaper *r, pid_t init_pid)
{
    if (r && r->state)
        r->state->init_pid = init_pid;
}

void sbx_reaper_done(sbx_reaper *r)
{
    if (!r || r->fd < 0)
        return;
    ssize_t w = write(r->fd, "D", 1);
    (void) w;
    close(r->fd);
    r->fd = -1;
    /* The state block stays mapped: the watcher may still be reading it on
     * its way out, and it goes away with the process anyway. */
}
