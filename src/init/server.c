/* server.c - see server.h. */
#define _GNU_SOURCE
#include "server.h"
#include "commands.h"
#include "files.h"
#include "spawn.h"
#include "zygote.h"
#include "../lib/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CONNS 512
/* Queue more output for a client only below this much pending. */
#define OUT_LOW_WATER (256u << 10)

typedef struct conn {
    struct conn *next;
    int fd;
    sbx_frame_in in;
    sbx_buf out;
    size_t out_off;
    sbx_cmd *att;         /* the command this client streams, if any */
    uint64_t next_seq;    /* next output chunk it needs */
    sbx_chunk *nextp;     /* that chunk, when known (never freed while attached) */
    bool served;          /* a request was answered: close after the flush */
    bool dead;
    int pidx;             /* index in this round's pollfd array, -1 if none */
} conn;

static conn *conns;
static unsigned n_conns;
static sbx_zygote zyg = { 0, -1 };
static int *work_procs;

static void detach(conn *k)
{
    if (k->att) {
        k->att->attached--;
        k->att = NULL;
    }
}

static void queue(conn *k, uint32_t type, const sbx_buf *b)
{
    sbx_buf_put_frame(&k->out, type, b ? b->data : NULL, b ? b->len : 0);
    if (k->out.failed)
        k->dead = true;
}

static void queue_error(conn *k, int e, const char *msg)
{
    sbx_buf b = { 0 };
    sbx_buf_put_error(&b, e, msg);
    queue(k, SBX_MSG_ERROR, &b);
    sbx_buf_free(&b);
    k->served = true;
}

static void flush(conn *k)
{
    while (k->out_off < k->out.len) {
        ssize_t w = send(k->fd, k->out.data + k->out_off, k->out.len - k->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                k->dead = true;
            return;
        }
        k->out_off += (size_t) w;
    }
    k->out.len = k->out_off = 0;
}

/* Drop what was sent from the front of the buffer: sbx_buf refuses to grow
 * past one frame's size, and a client that never drains completely would
 * otherwise keep it growing until it does. */
static void compact(conn *k)
{
    if (!k->out_off)
        return;
    memmove(k->out.data, k->out.data + k->out_off, k->out.len - k->out_off);
    k->out.len -= k->out_off;
    k->out_off = 0;
}

static void restart_zygote(void)
{
    sbx_zygote_stop(&zyg);
    /* Reaped with the others (an unknown pid to the reaping loop). */
    sbx_zygote_start(&zyg, work_procs);
}

static void send_exit(conn *k, sbx_cmd *c)
{
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, (uint32_t) c->pid);
    sbx_buf_put_u32(&b, (uint32_t) (WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 0));
    sbx_buf_put_u32(&b, (uint32_t) (WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0));
    sbx_buf_put_u32(&b, c->timed_out ? SBX_EXIT_TIMED_OUT : 0);
    sbx_buf_put_u64(&b, c->end_ms - c->start_ms);
    queue(k, SBX_MSG_EXIT, &b);
    sbx_buf_free(&b);
}

/* Move queued output of the attached command into the client's buffer. */
static void pump(conn *k)
{
    sbx_cmd *c = k->att;
    if (!c || k->dead)
        return;
    compact(k);
    while (k->out.len - k->out_off < OUT_LOW_WATER) {
        sbx_chunk *ch = NULL;
        if (k->nextp && k->nextp->seq == k->next_seq)
            ch = k->nextp;
        else if (c->tail && c->tail->seq == k->next_seq)
            ch = c->tail;
        else
            for (ch = c->head; ch && ch->seq < k->next_seq; ch = ch->next)
                ;
        if (ch) {
            sbx_buf b = { 0 };
            sbx_buf_put_u32(&b, ch->stream);
            sbx_buf_put_bytes(&b, ch->data, ch->len);
            queue(k, SBX_MSG_OUTPUT, &b);
            sbx_buf_free(&b);
            k->next_seq = ch->seq + 1;
            k->nextp = ch->next;
            continue;
        }
        if (sbx_cmd_done(c)) {
            send_exit(k, c);
            detach(k);
            k->served = true;
        }
        break;
    }
}

static void attach(conn *k, sbx_cmd *c)
{
    k->att = c;
    c->attached++;
    k->next_seq = c->head ? c->head->seq : c->next_seq;
    k->nextp = c->head;
}

/* A new terminal of the sandbox's own devpts instance (mount.c). */
static int open_pty(int *master, int *slave, uint32_t uid)
{
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -errno;
    int unlock = 0;
    int s = -1;
    if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || (s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        int e = errno;
        close(m);
        return -e;
    }
    /* the user owns their terminal, as after a login */
    if (fchown(s, uid, (gid_t) -1) < 0) {
        /* not fatal: the command still has the open descriptor */
    }
    struct winsize ws = { .ws_row = 24, .ws_col = 80 };
    ioctl(m, TIOCSWINSZ, &ws);
    *master = m;
    *slave = s;
    return 0;
}

static int open_pipe(int p[2])
{
    return pipe2(p, O_CLOEXEC) < 0 ? -errno : 0;
}

static void do_exec(conn *k, const uint8_t *payload, size_t len)
{
    sbx_exec_req req;
    if (sbx_exec_req_decode(payload, len, &req) < 0) {
        queue_error(k, EPROTO, "malformed EXEC request");
        return;
    }
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
    int e = 0;
    if (sbx_cmd_count() >= SBX_CMD_MAX) {
        sbx_cmd_gc();
        if (sbx_cmd_count() >= SBX_CMD_MAX) {
            e = EAGAIN;
            goto out;
        }
    }
    if (req.flags & SBX_EXEC_PTY) {
        /* master: init reads output from it (out[0]) and writes keys to a
         * duplicate (in[1]); the slave is the command's stdio. */
        if ((e = -open_pty(&out[0], &in[0], req.uid)) || (in[1] = fcntl(out[0], F_DUPFD_CLOEXEC, 3)) < 0) {
            e = e ? e : errno;
            goto out;
        }
        out[1] = fcntl(in[0], F_DUPFD_CLOEXEC, 3);
        err[1] = fcntl(in[0], F_DUPFD_CLOEXEC, 3);
        if (out[1] < 0 || err[1] < 0) {
            e = errno;
            goto out;
        }
    } else {
        if (req.flags & SBX_EXEC_STDIN_PIPE) {
            if ((e = -open_pipe(in)))
                goto out;
        } else if ((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
            e = errno;
            goto out;
        }
        if ((e = -open_pipe(out)) || (e = -open_pipe(err)))
            goto out;
    }

    int stage = 0;
    const int stdio[3] = { in[0], out[1], err[1] };
    pid_t pid = -EPIPE;
    /* A dead or stuck zygote is replaced once, then the request fails. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (zyg.sock < 0)
            restart_zygote();
        pid = sbx_zygote_spawn(&zyg, payload, len, stdio, &stage);
        if (pid != -EPIPE && pid != -ETIMEDOUT && pid != -EPROTO)
            break;
        restart_zygote();
    }
    if (pid < 0) {
        char msg[512];
        sbx_spawn_message((int) -pid, stage, req.argv[0], req.cwd, msg, sizeof msg);
        sbx_buf b = { 0 };
        sbx_buf_put_u32(&b, (uint32_t) -pid);
        sbx_buf_put_u32(&b, (uint32_t) stage);
        sbx_buf_put_str(&b, msg);
        queue(k, SBX_MSG_EXEC_FAILED, &b);
        sbx_buf_free(&b);
        k->served = true;
        goto out;
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    in[0] = out[1] = err[1] = -1;
    if (in[1] >= 0)
        fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    if (err[0] >= 0)
        fcntl(err[0], F_SETFL, O_NONBLOCK);
    sbx_cmd *c = sbx_cmd_add(pid, req.flags, (char *const *) req.argv, in[1], out[0], err[0], req.timeout_s);
    if (!c) {
        kill(pid, SIGKILL);
        e = ENOMEM;
        goto out;
    }
    in[1] = out[0] = err[0] = -1;
    uint32_t p = (uint32_t) pid;
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, p);
    queue(k, SBX_MSG_STARTED, &b);
    sbx_buf_free(&b);
    attach(k, c);
out:
    if (e)
        queue_error(k, e, e == EAGAIN ? "too many commands in this sandbox" : "cannot start the command");
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    free(req.argv);
    free(req.envp);
}

static void signal_cmd(sbx_cmd *c, int sig)
{
    if (kill(-c->pid, sig) < 0)
        kill(c->pid, sig);
}

/* One request operating on a command: STDIN, STDIN_CLOSE, SIGNAL, KILL. */
static int cmd_op(sbx_cmd *c, uint32_t op, uint32_t arg, const uint8_t *data, size_t len)
{
    switch (op) {
    case SBX_OP_STDIN:
        if (c->exited)
            return -ECHILD;
        return sbx_cmd_stdin(c, data, len);
    case SBX_OP_STDIN_CLOSE:
        if (c->fd_in < 0 || c->in_close)
            return c->exited ? -ECHILD : -EPIPE;
        sbx_cmd_stdin_close(c);
        return 0;
    case SBX_OP_SIGNAL:
        if (arg == 0 || arg >= (uint32_t) NSIG)
            return -EINVAL;
        if (c->exited)
            return -ECHILD; /* finished, as opposed to unknown (ESRCH) */
        signal_cmd(c, (int) arg);
        return 0;
    case SBX_OP_KILL:
        /* leftovers of a finished command are still killed */
        sbx_cmd_kill_tree(c);
        return c->exited ? -ECHILD : 0;
    }
    return -EINVAL;
}

static void do_list(conn *k)
{
    sbx_buf b = { 0 };
    uint64_t now = sbx_now_ms();
    sbx_buf_put_u32(&b, sbx_cmd_count());
    for (sbx_cmd *c = sbx_cmd_list(); c; c = c->next) {
        sbx_buf_put_u32(&b, (uint32_t) c->pid);
        sbx_buf_put_u32(&b, c->flags);
        sbx_buf_put_u32(&b, c->exited ? 0 : 1);
        sbx_buf_put_u32(&b, (uint32_t) (c->exited && WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 0));
        sbx_buf_put_u32(&b, (uint32_t) (c->exited && WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0));
        sbx_buf_put_u64(&b, now - c->start_ms); /* age: sbxd turns it into a date */
        sbx_buf_put_u32(&b, c->argc_shown);
        const char *s = c->summary;
        for (uint32_t i = 0; i < c->argc_shown; i++) {
            sbx_buf_put_str(&b, s);
            s += strlen(s) + 1;
        }
    }
    queue(k, SBX_MSG_OK, &b);
    sbx_buf_free(&b);
    k->served = true;
}

static void fork_file_worker(conn *k, uint32_t type, const uint8_t *payload, size_t len)
{
    pid_t pid = fork();
    if (pid < 0) {
        queue_error(k, errno, "cannot start a file worker");
        return;
    }
    if (pid == 0) {
        /* Only the connection: no command pipes, no listening socket. */
        if (dup2(k->fd, 3) < 0)
            _exit(1);
        syscall(SYS_close_range, 4, ~0U, 0);
        fcntl(3, F_SETFL, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        sbx_files_serve(3, type, payload, len);
    }
    /* the worker owns the connection now */
    k->dead = true;
}

/* A complete frame from a client. */
static void handle(conn *k, uint32_t type, const uint8_t *payload, size_t len)
{
    sbx_reader r = { payload, payload + len, false };
    if (k->att) {
        /* frames that steer the attached command */
        int e = 0;
        if (type == SBX_MSG_STDIN)
            e = sbx_cmd_stdin(k->att, payload, len);
        else if (type == SBX_MSG_STDIN_CLOSE)
            e = cmd_op(k->att, SBX_OP_STDIN_CLOSE, 0, NULL, 0);
        else if (type == SBX_MSG_SIGNAL && len == 4)
            e = cmd_op(k->att, SBX_OP_SIGNAL, sbx_read_u32(&r), NULL, 0);
        else if (type == SBX_MSG_KILL)
            e = cmd_op(k->att, SBX_OP_KILL, 0, NULL, 0);
        else if (type == SBX_MSG_RESIZE && len == 8 && k->att->fd_in >= 0 && (k->att->flags & SBX_EXEC_PTY)) {
            uint32_t cols = sbx_read_u32(&r), rows = sbx_read_u32(&r);
            struct winsize ws = { .ws_row = (unsigned short) (rows > 1000 ? 1000 : rows),
                                  .ws_col = (unsigned short) (cols > 1000 ? 1000 : cols) };
            ioctl(k->att->fd_in, TIOCSWINSZ, &ws);
        }
        else
            k->dead = true;
        (void) e; /* best effort while streaming: the EXIT frame tells the end */
        return;
    }
    if (k->served) {
        k->dead = true; /* one request per connection */
        return;
    }
    switch (type) {
    case SBX_MSG_PING: {
        sbx_buf b = { 0 };
        sbx_buf_put_u32(&b, SBX_PROTOCOL_VERSION);
        sbx_buf_put_u32(&b, sbx_cmd_count());
        queue(k, SBX_MSG_OK, &b);
        sbx_buf_free(&b);
        k->served = true;
        break;
    }
    case SBX_MSG_EXEC:
        do_exec(k, payload, len);
        break;
    case SBX_MSG_ATTACH: {
        uint32_t pid = sbx_read_u32(&r);
        sbx_cmd *c = r.bad ? NULL : sbx_cmd_find((pid_t) pid);
        if (!c) {
            queue_error(k, ESRCH, "no such command");
            break;
        }
        sbx_buf b = { 0 };
        sbx_buf_put_u64(&b, c->dropped);
        sbx_buf_put_u32(&b, c->exited ? 0 : 1);
        queue(k, SBX_MSG_OK, &b);
        sbx_buf_free(&b);
        attach(k, c);
        break;
    }
    case SBX_MSG_CMD_OP: {
        uint32_t pid = sbx_read_u32(&r), op = sbx_read_u32(&r), arg = sbx_read_u32(&r);
        size_t n;
        const uint8_t *data = sbx_read_bytes(&r, &n);
        sbx_cmd *c = r.bad ? NULL : sbx_cmd_find((pid_t) pid);
        int e = c ? cmd_op(c, op, arg, data, n) : -ESRCH;
        if (e < 0) {
            queue_error(k, -e, e == -ESRCH    ? "no such command"
                               : e == -ECHILD ? "the command has already finished"
                               : e == -EPIPE  ? "the command's stdin is closed"
                                              : strerror(-e));
        } else {
            queue(k, SBX_MSG_OK, NULL);
            k->served = true;
        }
        break;
    }
    case SBX_MSG_CLOCK: {
        uint32_t running = sbx_read_u32(&r);
        if (r.bad) {
            queue_error(k, EINVAL, "bad CLOCK request");
            break;
        }
        if (running)
            sbx_cmd_clock_start();
        else
            sbx_cmd_clock_stop();
        queue(k, SBX_MSG_OK, NULL);
        k->served = true;
        break;
    }
    case SBX_MSG_LIST:
        do_list(k);
        break;
    case SBX_MSG_FILE_READ:
    case SBX_MSG_FILE_WRITE:
    case SBX_MSG_FILE_STAT:
    case SBX_MSG_FILE_LIST:
    case SBX_MSG_FILE_MKDIR:
    case SBX_MSG_FILE_REMOVE:
    case SBX_MSG_FILE_MOVE:
    case SBX_MSG_STATFS:
        fork_file_worker(k, type, payload, len);
        break;
    default:
        k->dead = true;
    }
}

static void read_conn(conn *k)
{
    for (int frames = 0; frames < 64 && !k->dead; frames++) {
        int r = sbx_frame_in_read(k->fd, &k->in);
        if (r == 0)
            return;
        if (r < 0) {
            k->dead = true;
            return;
        }
        handle(k, k->in.type, k->in.payload, k->in.len);
        sbx_frame_in_reset(&k->in);
    }
}

static void reap(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        sbx_cmd *c = sbx_cmd_find(pid);
        if (c && !c->exited)
            sbx_cmd_exited(c, status);
        else if (pid == zyg.pid) {
            zyg.pid = 0;
            restart_zygote();
        }
        /* anything else: an orphan or a file worker */
    }
}

static void accept_conns(int lfd)
{
    while (n_conns < MAX_CONNS) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        conn *k = calloc(1, sizeof *k);
        if (!k) {
            close(fd);
            return;
        }
        k->fd = fd;
        k->pidx = -1;
        k->next = conns;
        conns = k;
        n_conns++;
    }
}

static void close_dead(void)
{
    for (conn **p = &conns; *p;) {
        conn *k = *p;
        if (k->dead || (k->served && !k->att && k->out.len == 0)) {
            detach(k);
            close(k->fd);
            sbx_frame_in_reset(&k->in);
            sbx_buf_free(&k->out);
            *p = k->next;
            free(k);
            n_conns--;
            continue;
        }
        p = &k->next;
    }
}

/* The lowest chunk seq any attached client still needs. */
static uint64_t min_needed(const sbx_cmd *c)
{
    uint64_t m = UINT64_MAX;
    if (!c->attached)
        return m;
    for (conn *k = conns; k; k = k->next)
        if (k->att == c && k->next_seq < m)
            m = k->next_seq;
    return m;
}

/* Tell the creator why the sandbox could not start (it logs it). */
static int start_failed(int ctl, int e, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, "sbx-init: %s: %s", what, strerror(e));
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, (uint32_t) e);
    sbx_buf_put_u32(&b, 0);
    sbx_buf_put_str(&b, msg);
    sbx_ctl_send(ctl, SBX_MSG_EXEC_FAILED, b.data, b.len);
    sbx_buf_free(&b);
    return 125;
}

int sbx_server_run(int ctl, int listen_fd, int *init_fds, int *work_fds)
{
    work_procs = work_fds;
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigfillset(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return start_failed(ctl, errno, "signalfd");

    /* Born in `work`: the zygote forked now is born there too; then init
     * leaves for `init`, out of the workload's limits. */
    int e = -sbx_zygote_start(&zyg, NULL);
    if (e > 0)
        return start_failed(ctl, e, "start the spawner");
    for (int i = 0; init_fds[i] >= 0; i++) {
        if (write(init_fds[i], "0", 1) != 1)
            return start_failed(ctl, errno, "leave the work cgroup");
        close(init_fds[i]);
    }
    uint32_t zp = (uint32_t) zyg.pid;
    sbx_ctl_send(ctl, SBX_MSG_STARTED, &zp, sizeof zp);
    close(ctl);
    fcntl(listen_fd, F_SETFL, O_NONBLOCK);

    enum { MAXFD = 2 + MAX_CONNS + 3 * SBX_CMD_MAX };
    static struct pollfd pfd[MAXFD];
    static sbx_cmd *pcmd[MAXFD];
    static int pstream[MAXFD];
    for (;;) {
        int timeout = sbx_cmd_tick();
        for (conn *k = conns; k; k = k->next)
            pump(k);
        close_dead();

        nfds_t n = 0;
        pfd[n++] = (struct pollfd){ sfd, POLLIN, 0 };
        pfd[n++] = (struct pollfd){ listen_fd, n_conns < MAX_CONNS ? POLLIN : 0, 0 };
        for (conn *k = conns; k; k = k->next) {
            short ev = POLLIN;
            if (k->out.len > k->out_off)
                ev |= POLLOUT;
            k->pidx = (int) n;
            pcmd[n] = NULL;
            pfd[n++] = (struct pollfd){ k->fd, ev, 0 };
        }
        for (sbx_cmd *c = sbx_cmd_list(); c && n + 3 <= MAXFD; c = c->next) {
            bool can = (c->fd_out >= 0 || c->fd_err >= 0) && sbx_cmd_can_read(c, min_needed(c));
            for (int s = 1; s <= 2; s++) {
                int fd = s == 1 ? c->fd_out : c->fd_err;
                if (fd >= 0 && can) {
                    pcmd[n] = c;
                    pstream[n] = s;
                    pfd[n++] = (struct pollfd){ fd, POLLIN, 0 };
                }
            }
            if (c->fd_in >= 0 && c->in_len) {
                pcmd[n] = c;
                pstream[n] = 0;
                pfd[n++] = (struct pollfd){ c->fd_in, POLLOUT, 0 };
            }
        }
        if (poll(pfd, n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            return 125;
        }
        if (pfd[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t) sizeof si)
                ;
            reap();
        }
        if (pfd[1].revents & POLLIN)
            accept_conns(listen_fd);
        for (nfds_t i = 2; i < n; i++) {
            if (!pfd[i].revents || !pcmd[i])
                continue;
            sbx_cmd *c = pcmd[i];
            if (pstream[i] == 0)
                sbx_cmd_stdin_flush(c);
            else
                sbx_cmd_read(c, pstream[i]);
        }
        for (conn *k = conns; k; k = k->next) {
            if (k->pidx < 0 || (nfds_t) k->pidx >= n)
                continue;
            short re = pfd[k->pidx].revents;
            k->pidx = -1;
            if (re & POLLOUT)
                flush(k);
            if (re & (POLLIN | POLLHUP | POLLERR))
                read_conn(k);
            if (!k->dead && k->out.len > k->out_off)
                flush(k);
        }
        sbx_cmd_gc();
    }
}
