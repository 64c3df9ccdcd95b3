/* layers.c - layer directories on the host: capture, size, removal.
 *
 * The copy is `cp -a` (GNU coreutils): it keeps owners, modes, times,
 * device nodes (overlay whiteouts are 0/0 character devices), hard links
 * and extended attributes (overlay's user.overlay.opaque).  sbxd reaches a
 * sandbox's writable layer through sbx-init's fd SBX_UPPER_FD
 * (/proc/PID/fd/5): nothing else leads to it once the sandbox has pivoted
 * into its root. */
#define _GNU_SOURCE
#include "layers.h"
#include "../lib/spec.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Run argv, its stderr (the first line) into err; 0 if it exited 0. */
int sbx_run_tool(char *const argv[], sbx_error *err)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return sbx_error_set(err, errno, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    if (e) {
        close(pipefd[0]);
        return sbx_error_set(err, e, "run %s", argv[0]);
    }
    char msg[400];
    ssize_t n = read(pipefd[0], msg, sizeof msg - 1);
    close(pipefd[0]);
    msg[n > 0 ? n : 0] = '\0';
    msg[strcspn(msg, "\n")] = '\0';
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return sbx_error_set(err, EIO, "%s failed: %s", argv[0], msg[0] ? msg : "(no message)");
    return 0;
}

/* nftw has no context argument: the sum is a global, one tree at a time */
static pthread_mutex_t size_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t tree_bytes;
static int add_size(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) path, (void) flag, (void) ftw;
    if (S_ISREG(st->st_mode))
        tree_bytes += st->st_size;
    return 0;
}

int64_t sbx_layer_bytes(const char *dir)
{
    pthread_mutex_lock(&size_lock);
    tree_bytes = 0;
    nftw(dir, add_size, 32, FTW_PHYS | FTW_MOUNT);
    int64_t n = tree_bytes;
    pthread_mutex_unlock(&size_lock);
    return n;
}

int sbx_dir_sync(const char *dir, sbx_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "open %s", dir);
    int r = fsync(fd) < 0 ? sbx_error_set(err, errno, "fsync %s", dir) : 0;
    close(fd);
    return r;
}

int sbx_layer_sync(const char *dir, sbx_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "open %s", dir);
    /* syncfs: every file cp wrote, in one call (an fsync per file would be
     * a walk of the tree and as many flushes) */
    int r = syncfs(fd) < 0 || fsync(fd) < 0 ? sbx_error_set(err, errno, "sync %s to disk", dir) : 0;
    close(fd);
    return r;
}

static pthread_rwlock_t layers_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void sbx_layers_use_lock(void)
{
    pthread_rwlock_rdlock(&layers_lock);
}

void sbx_layers_use_unlock(void)
{
    pthread_rwlock_unlock(&layers_lock);
}

void sbx_layers_sweep_lock(void)
{
    pthread_rwlock_wrlock(&layers_lock);
}

void sbx_layers_sweep_unlock(void)
{
    pthread_rwlock_unlock(&layers_lock);
}

void sbx_layer_remove(const char *dir)
{
    sbx_error ignored = { 0 };
    char *const argv[] = { "rm", "-rf", "--one-file-system", "--", (char *) dir, NULL };
    sbx_run_tool(argv, &ignored);
}


int sbx_layer_capture(sbx_registry *reg, sbx_box *b, const char *dest, sbx_error *err)
{
    char src[64];
    snprintf(src, sizeof src, "/proc/%d/fd/%d", (int) b->init_pid, SBX_UPPER_FD);
    /* A consistent copy: nothing in the sandbox writes while it is taken.
     * A paused sandbox already is frozen. */
    pthread_mutex_lock(&b->pause_lock);
    pthread_mutex_lock(&reg->lock);
    bool was_paused = b->paused;
    pthread_mutex_unlock(&reg->lock);
    int ret = 0;
    if (!was_paused && sbx_cgroup_freeze(&b->cg, true, err) < 0)
        ret = -1;
    if (ret == 0) {
        /* -H: src is /proc/PID/fd/5, a link to follow; nothing under it is */
        char *const argv[] = { "cp", "-a", "-H", "--no-target-directory", src, (char *) dest, NULL };
        ret = sbx_run_tool(argv, err);
        if (ret < 0)
            sbx_error_wrap(err, "copy the writable layer of %s", b->id);
    }
    if (!was_paused) {
        sbx_error e2 = { 0 };
        sbx_cgroup_freeze(&b->cg, false, &e2);
    }
    pthread_mutex_unlock(&b->pause_lock);
    if (ret < 0)
        sbx_layer_remove(dest);
    return ret;
}
