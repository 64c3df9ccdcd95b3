/* sandbox.c - see sandbox.h for the sequence. */
#define _GNU_SOURCE
#include "sandbox.h"
#include "cleanup.h"
#include "control.h"
#include "mount.h"
#include "netdev.h"
#include "reaper.h"
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int sbx_find_companion(const char *name, const char *env_var, char *out, size_t len, sbx_error *err)
{
    const char *env = getenv(env_var);
    if (env && *env) {
        if (access(env, X_OK) < 0)
            return sbx_error_set(err, errno, "%s=%s", env_var, env);
        snprintf(out, len, "%s", env);
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return sbx_error_set(err, errno, "readlink /proc/self/exe");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    static const char *const rel[] = { "", "/../libexec/sbx" };
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(out, len, "%s%s/%s", self, rel[i], name);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return sbx_error_set(err, 0, "%s not found next to %s or in ../libexec/sbx (set %s)", name, self, env_var);
}

int sbx_find_init(char *out, size_t len, sbx_error *err)
{
    return sbx_find_companion("sbx-init", "SBX_INIT", out, len, err);
}

struct child_args {
    const sbx_spec *spec;
    const sbx_template *tpl;
    const char *init_path;
    int ctl;                 /* child's end of the control socket */
    int parent_ctl;          /* the parent's end: closed at once in the child */
    int reaper_fd;           /* the watcher's pipe: likewise (-1 if none) */
};

/* Report a setup failure to the parent and exit.  The parent prints it. */
static _Noreturn void child_fail(int ctl, const sbx_error *err)
{
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, (uint32_t) err->errno_);
    sbx_buf_put_u32(&b, 0); /* stage 0: building the sandbox */
    sbx_buf_put_str(&b, err->msg);
    if (!b.failed)
        sbx_ctl_send(ctl, SBX_MSG_EXEC_FAILED, b.data, b.len);
    _exit(125);
}

/* Between the two phases of the root file system set-up (mount.h): host
 * paths are held; now wait for the parent to write our uid/gid maps (it
 * sets up the cgroups and moves us into <sbx>/work meanwhile) and become
 * the sandbox's root. */
static int become_root(void *arg, sbx_error *err)
{
    const struct child_args *a = arg;
    uint32_t type;
    uint8_t *payload = NULL;
    size_t len;
    int r = sbx_ctl_recv(a->ctl, &type, &payload, &len);
    free(payload);
    if (r <= 0 || type != SBX_MSG_GO)
        _exit(125); /* the parent is gone or failed: nothing to report to */
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        return sbx_error_set(err, errno, "become root of the user namespace");
    /* sbx-init never shows the host's cgroup paths to anyone; each command
     * gets its own cgroup namespace rooted at <sbx>/work (spawn.c). */
    if (unshare(CLONE_NEWCGROUP) < 0)
        return sbx_error_set(err, errno, "create the cgroup namespace");
    return 0;
}

/* The sandbox's first process: PID 1 of the new pid namespace, root of the
 * new user namespace.  Never returns. */
static _Noreturn void child_main(const struct child_args *a)
{
    sbx_error err = { 0 };
    const sbx_spec *spec = a->spec;

    /* If `sbx run` dies, so does the sandbox (and with PID 1 the whole pid
     * namespace).  A parent that died before this line closed the control
     * socket, which the read below notices.  sbxd's sandboxes outlive it. */
    if (spec->listen_fd < 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* Our copies of the parent's socket end and of the watcher's pipe would
     * keep both open: if the parent died before PDEATHSIG was armed, we
     * would wait for "go" forever, and the watcher for EOF.  Without them,
     * a dead parent is an EOF on the read below. */
    close(a->parent_ctl);
    if (a->reaper_fd >= 0)
        close(a->reaper_fd);

    int upper = -1;
    /* the snapshot's layers lie over the template's own */
    char layers[8192];
    snprintf(layers, sizeof layers, "%s%s%s", spec->layer ? spec->layer : "",
             spec->layer && *spec->layer && a->tpl->layers[0] ? ":" : "", a->tpl->layers);
    sbx_rootfs_plan plan = {
        .lowerdir = a->tpl->rootfs,
        .layer = layers,
        .upper_fd = spec->listen_fd >= 0 ? &upper : NULL,
        .tpl_binds = a->tpl->binds,
        .n_tpl_binds = a->tpl->n_binds,
        .user_binds = spec->binds,
        .n_user_binds = spec->n_binds,
        .init_path = a->init_path,
        .disk_bytes = spec->disk_bytes,
        .shm_bytes = spec->shm_bytes,
        .hostname = spec->hostname,
    };

    if (sbx_rootfs_setup(&plan, become_root, (void *) a, &err) < 0)
        child_fail(a->ctl, &err);

    if (sethostname(spec->hostname, strlen(spec->hostname)) < 0) {
        sbx_error_set(&err, errno, "set hostname");
        child_fail(a->ctl, &err);
    }
    int r = sbx_net_loopback_up();
    if (r < 0) {
        sbx_error_set(&err, -r, "bring up loopback");
        child_fail(a->ctl, &err);
    }

    /* PID 1 gets the control socket as fd 3 (and in daemon mode the
     * listening socket as fd 4) and nothing else of ours or of the caller's
     * beyond stdio.  Both are first moved above 4 so that neither dup2
     * overwrites the other. */
    int ctl = fcntl(a->ctl, F_DUPFD, 10);
    int lfd = spec->listen_fd >= 0 ? fcntl(spec->listen_fd, F_DUPFD, 10) : -1;
    int ufd = upper >= 0 ? fcntl(upper, F_DUPFD, 10) : -1;
    if (ctl < 0 || (spec->listen_fd >= 0 && lfd < 0) || dup2(ctl, 3) < 0 || (lfd >= 0 && dup2(lfd, 4) < 0) ||
        (ufd >= 0 && dup2(ufd, SBX_UPPER_FD) < 0)) {
        sbx_error_set(&err, errno, "dup2");
        child_fail(a->ctl, &err);
    }
    ctl = 3;
    syscall(SYS_close_range, ufd >= 0 ? SBX_UPPER_FD + 1 : lfd >= 0 ? 5 : 4, ~0U, 0);
    if (spec->listen_fd >= 0) {
        /* sbxd owns the terminal and logs; the sandbox writes to neither */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            close(null);
        }
    }
    char ctl_arg[16];
    snprintf(ctl_arg, sizeof ctl_arg, "%d", ctl);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char *const argv[] = { "sbx-init", ctl_arg, lfd >= 0 ? "4" : NULL, NULL };
    char *const envp[] = { NULL };

    execve(SBX_INIT_IN_SANDBOX, argv, envp);
    sbx_error_set(&err, errno, "exec sbx-init");
    child_fail(ctl, &err);
}

/* A step of the parent failed while the child was building the sandbox:
 * if the child failed first (so our send met a closed socket, or the
 * process we moved was gone), its own report is the one that says why
 * ("bind into /usr/x: read-only"), not our "broken pipe".  child_fail()
 * wrote it before exiting, so it is there to read at once if at all. */
static bool prefer_child_error(int ctl, sbx_error *err)
{
    struct pollfd p = { ctl, POLLIN, 0 };
    if (poll(&p, 1, 100) <= 0)
        return false;
    bool took = false;
    uint32_t type;
    uint8_t *payload = NULL;
    size_t len;
    if (sbx_ctl_recv(ctl, &type, &payload, &len) > 0 && type == SBX_MSG_EXEC_FAILED) {
        sbx_reader rd = { payload, payload + len, false };
        uint32_t e = sbx_read_u32(&rd);
        sbx_read_u32(&rd);
        const char *msg = sbx_read_str(&rd);
        if (!rd.bad) {
            err->errno_ = (int) (e && e < 4096 ? e : EIO);
            snprintf(err->msg, sizeof err->msg, "%s", msg); /* it names its cause already */
            took = true;
        }
    }
    free(payload);
    return took;
}

int sbx_sandbox_start(sbx_sandbox *sb, const sbx_spec *spec, const sbx_template *tpl, const sbx_cg_host *host,
                      const char *init_path, bool watch, sbx_error *err)
{
    memset(sb, 0, sizeof *sb);
    sb->ctl_fd = -1;
    sb->reaper.fd = -1;
    if (watch && sbx_reaper_start(&sb->reaper, err) < 0)
        return -1;

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        sbx_error_set(err, errno, "socketpair");
        goto fail;
    }
    sb->ctl_fd = sv[0];
    /* the child's end must survive exec into sbx-init */
    fcntl(sv[1], F_SETFD, 0);

    struct child_args a = {
        .spec = spec, .tpl = tpl, .init_path = init_path,
        .ctl = sv[1], .parent_ctl = sv[0], .reaper_fd = sb->reaper.fd,
    };
    /* Raw clone without a new stack behaves like fork() (copy-on-write), so
     * the child can use everything prepared above. */
    const unsigned long flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                                CLONE_NEWUTS | SIGCHLD;

    pid_t pid = (pid_t) syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        int e = errno;
        close(sv[1]);
        if (e == EPERM || e == ENOSPC || e == EINVAL)
            sbx_error_set(err, e,
                          "create namespaces (user namespaces may be disabled: check "
                          "/proc/sys/user/max_user_namespaces and kernel.unprivileged_userns_clone)");
        else
            sbx_error_set(err, e, "clone");
        goto fail;
    }
    if (pid == 0)
        child_main(&a);
    close(sv[1]);
    sb->init_pid = pid;
    sbx_reaper_set_pid(&sb->reaper, pid);

    if (sbx_userns_write_maps(pid, spec->uid_base, err) < 0) {
        if (!prefer_child_error(sb->ctl_fd, err))
            sbx_error_wrap(err, "map sandbox uids 0-%u to host uids %u-%u (sbx needs the host's root, not root of "
                                "a user namespace)",
                           SBX_UID_COUNT - 1, (unsigned) spec->uid_base,
                           (unsigned) spec->uid_base + SBX_UID_COUNT - 1);
        goto fail;
    }
    /* "go": maps are written */
    int r = sbx_ctl_send(sb->ctl_fd, SBX_MSG_GO, NULL, 0);
    if (r < 0) {
        sbx_error_set(err, -r, "start the sandbox");
        prefer_child_error(sb->ctl_fd, err);
        goto fail;
    }
    /* While the child builds its root: cgroups, then move it into
     * <sbx>/work, so the command it starts inherits the cgroup with no
     * second (slow) migration.  The caller sends the command only after
     * this returns, so it never runs outside its limits. */
    sbx_cg_limits limits = { spec->memory_bytes, spec->millicpus, spec->pids };
    if (sbx_cgroup_create(&sb->cg, host, spec->id, &limits, &sb->reaper, err) < 0) {
        sbx_error_wrap(err, "set up cgroups");
        goto fail;
    }
    if (sbx_cgroup_enter_work(&sb->cg, pid, err) < 0) {
        prefer_child_error(sb->ctl_fd, err);
        goto fail;
    }
    int fds[2 * SBX_CG_MAX_HIER], n = 0;
    while (sb->cg.init_procs[n] >= 0) {
        fds[n] = sb->cg.init_procs[n];
        n++;
    }
    /* In daemon mode sbx-init also gets `work`, to put a new spawner
     * (init.c) back there should the old one die. */
    uint32_t n_init = (uint32_t) n;
    for (int i = 0; spec->listen_fd >= 0 && sb->cg.work_procs[i] >= 0; i++)
        fds[n++] = sb->cg.work_procs[i];
    r = sbx_ctl_send_fds(sb->ctl_fd, SBX_MSG_CGROUP, &n_init, spec->listen_fd >= 0 ? sizeof n_init : 0, fds, n);
    if (r < 0) {
        sbx_error_set(err, -r, "hand the init cgroup to sbx-init");
        prefer_child_error(sb->ctl_fd, err);
        goto fail;
    }
    sbx_cgroup_close_fds(&sb->cg);
    return 0;

fail:
    sbx_sandbox_destroy(sb, NULL);
    return -1;
}

int sbx_sandbox_destroy(sbx_sandbox *sb, sbx_error *err)
{
    if (sb->init_pid > 0) {
        /* PID 1 dying takes every process of its pid namespace with it;
         * its mount namespace, and with it the writable layer, goes too. */
        kill(sb->init_pid, SIGKILL);
        while (waitpid(sb->init_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        sb->init_pid = 0;
    }
    if (sb->ctl_fd >= 0) {
        close(sb->ctl_fd);
        sb->ctl_fd = -1;
    }

    int r = sbx_cgroup_destroy(&sb->cg, err);
    sbx_reaper_done(&sb->reaper); /* everything is gone: the watcher may go */
    return r;
}
