/* spawn.c - see spawn.h. */
#define _GNU_SOURCE
#include "spawn.h"
#include "../lib/caps.h"
#include "../lib/seccomp.h"

#include <errno.h>
#include <stdbool.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The child runs on its own stack in our memory (CLONE_VM | CLONE_VFORK,
 * as posix_spawn does): no page tables are copied, and we are suspended
 * until it has exec'd or failed, so it can report a failure by writing
 * into `result` directly. */
#define STACK_SIZE (128 * 1024)
static char child_stack[STACK_SIZE] __attribute__((aligned(16)));

struct spawn_ctx {
    const sbx_exec_req *req;
    const int *stdio;
    bool in_cgroupns;
    volatile int stage, err;
};

static int fail(struct spawn_ctx *c, int stage, int e)
{
    c->stage = stage;
    c->err = e;
    _exit(127);
}

static int child(void *arg)
{
    struct spawn_ctx *c = arg;
    const sbx_exec_req *req = c->req;
    /* init blocks the signals it handles through signalfd; a command
     * starts with a clean slate.  (Dispositions are our own: no
     * CLONE_SIGHAND.) */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);

    /* Lead a process group, so that forwarded signals reach the whole
     * command (init.c), as they would from a terminal. */
    if (!(req->flags & SBX_EXEC_PTY))
        setpgid(0, 0); /* (setsid below would fail for a group leader) */
    for (int i = 0; c->stdio && i < 3; i++) {
        if (c->stdio[i] >= 0 && c->stdio[i] != i && dup2(c->stdio[i], i) < 0)
            return fail(c, SBX_SPAWN_SETUP, errno);
    }
    /* A terminal session: lead a new session whose controlling terminal is
     * the PTY on fd 0, so ^C reaches the foreground job and a shell gets
     * job control. */
    if ((req->flags & SBX_EXEC_PTY) && (setsid() < 0 || ioctl(0, TIOCSCTTY, 0) < 0))
        return fail(c, SBX_SPAWN_SETUP, errno);
    /* We were created in <sbx>/work: root our cgroup view there.  (The
     * zygote, our creator with CLONE_PARENT, did that once for all.) */
    if (!c->in_cgroupns && unshare(CLONE_NEWCGROUP) < 0)
        return fail(c, SBX_SPAWN_SETUP, errno);
    umask(022);
    int r = req->flags & SBX_EXEC_ROOT_CAPS ? sbx_caps_drop_to_builder(req->uid, req->gid)
                                            : sbx_caps_drop_to(req->uid, req->gid);
    if (r < 0)
        return fail(c, SBX_SPAWN_SETUP, -r);
    if (chdir(req->cwd) < 0) {
        /* a default working directory (the user's home) that does not
         * exist, such as nobody's /nonexistent, means "/" */
        if (!(req->flags & SBX_EXEC_CWD_OPTIONAL) || chdir("/") < 0)
            return fail(c, SBX_SPAWN_CWD, errno);
    }
    /* Nothing of init's leaks to user code. */
    syscall(SYS_close_range, 3, ~0U, 0);
    r = sbx_seccomp_load();
    if (r < 0)
        return fail(c, SBX_SPAWN_SETUP, -r);
    /* execvpe searches the PATH of environ (init restores its own). */
    environ = (char **) req->envp;
    execvpe(req->argv[0], (char *const *) req->argv, (char *const *) req->envp);
    return fail(c, SBX_SPAWN_EXEC, errno);
}

pid_t sbx_spawn(const sbx_exec_req *req, const int stdio[3], unsigned long clone_flags, int *stage)
{
    struct spawn_ctx c = { .req = req, .stdio = stdio, .in_cgroupns = clone_flags & CLONE_PARENT, .stage = 0, .err = 0 };
    char **saved_environ = environ;
    pid_t pid = clone(child, child_stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD | (int) clone_flags, &c);
    environ = saved_environ;
    if (pid < 0)
        return -errno;
    if (c.stage) {
        /* with CLONE_PARENT the failed child is our parent's to reap */
        if (!(clone_flags & CLONE_PARENT))
            waitpid(pid, NULL, 0);
        *stage = c.stage;
        return c.err > 0 ? -c.err : -EIO;
    }
    return pid;
}

void sbx_spawn_message(int e, int stage, const char *argv0, const char *cwd, char *msg, size_t len)
{
    if (stage == SBX_SPAWN_EXEC && e == ENOENT)
        snprintf(msg, len, "%s: command not found", argv0);
    else if (stage == SBX_SPAWN_EXEC)
        snprintf(msg, len, "%s: cannot execute: %s", argv0, strerror(e));
    else if (stage == SBX_SPAWN_CWD)
        snprintf(msg, len, "cannot enter working directory %s: %s", cwd, strerror(e));
    else
        snprintf(msg, len, "cannot start %s: %s", argv0, strerror(e));
}
