/* spawner.c - see spawner.h. */
#define _GNU_SOURCE
#include "spawner.h"
#include "../lib/sandbox.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int sbx_spawner_start(sbx_spawner *sp, const char *home, const sbx_cg_host *host, const char *init_path,
                      uid_t uid_base, sbx_error *err)
{
    char path[PATH_MAX];
    if (sbx_find_companion("sbx-spawner", "SBX_SPAWNER", path, sizeof path, err) < 0)
        return -1;
    /* its argv, made before the fork: the child only dup2s and execs */
    char ppid[16], uid[16], mode[4];
    snprintf(ppid, sizeof ppid, "%d", (int) getpid());
    snprintf(uid, sizeof uid, "%u", (unsigned) uid_base);
    snprintf(mode, sizeof mode, "%d", (int) host->mode);
    char *argv[6 + 2 * SBX_CG_MAX_HIER + 1] = { "sbx-spawner", ppid, (char *) home, (char *) init_path, uid, mode };
    int n = 6;
    for (int i = 0; i < host->n && i < SBX_CG_MAX_HIER; i++) {
        argv[n++] = host->base[i];
        argv[n++] = host->ctrl[i] ? host->ctrl[i] : "-";
    }
    argv[n] = NULL;
    char *envp[] = { NULL };
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx_error_set(err, errno, "socketpair");
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return sbx_error_set(err, errno, "fork the spawner");
    }
    if (pid == 0) {
        /* the socket as fd 3 (without CLOEXEC), nothing else open above 2 */
        if (dup2(sv[1], SBX_SPAWNER_FD) < 0 || syscall(SYS_close_range, SBX_SPAWNER_FD + 1, ~0U, 0) < 0)
            _exit(127);
        execve(path, argv, envp);
        _exit(127);
    }
    close(sv[1]);
    sp->pid = pid;
    sp->sock = sv[0];
    pthread_mutex_init(&sp->lock, NULL);
    return 0;
}

int sbx_spawner_create(sbx_spawner *sp, const sbx_spawn_req *req, sbx_spawn_reply *rep, sbx_error *err)
{
    pthread_mutex_lock(&sp->lock);
    ssize_t n = send(sp->sock, req, sizeof *req, MSG_NOSIGNAL);
    if (n == (ssize_t) sizeof *req)
        n = recv(sp->sock, rep, sizeof *rep, MSG_WAITALL);
    pthread_mutex_unlock(&sp->lock);
    if (n != (ssize_t) sizeof *rep)
        return sbx_error_set(err, n < 0 ? errno : EPIPE, "the sandbox spawner is gone");
    rep->msg[sizeof rep->msg - 1] = '\0';
    if (rep->errno_) {
        err->errno_ = rep->errno_; /* the message already names the cause */
        snprintf(err->msg, sizeof err->msg, "%s", rep->msg);
        return -1;
    }
    return 0;
}
