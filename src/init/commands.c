/* commands.c - see commands.h. */
#define _GNU_SOURCE
#include "commands.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sbx_cmd *cmds; /* newest first */
static unsigned n_cmds;
static uint64_t frozen_since_ms; /* 0: the command clocks run */

uint64_t sbx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

sbx_cmd *sbx_cmd_add(pid_t pid, uint32_t flags, char *const *argv, int fd_in, int fd_out, int fd_err,
                     uint32_t timeout_s)
{
    sbx_cmd *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->pid = pid;
    c->flags = flags;
    c->fd_in = fd_in;
    c->fd_out = fd_out;
    c->fd_err = fd_err;
    c->start_ms = sbx_now_ms();
    c->deadline_ms = timeout_s ? c->start_ms + (uint64_t) timeout_s * 1000 : 0;
    /* The summary keeps argv as NUL-separated strings, cut at a whole
     * argument when it would not fit. */
    size_t off = 0;
    for (uint32_t i = 0; argv[i]; i++) {
        size_t n = strlen(argv[i]) + 1;
        if (off + n > sizeof c->summary)
            break;
        memcpy(c->summary + off, argv[i], n);
        off += n;
        c->argc_shown++;
    }
    c->next = cmds;
    cmds = c;
    n_cmds++;
    return c;
}

sbx_cmd *sbx_cmd_find(pid_t pid)
{
    for (sbx_cmd *c = cmds; c; c = c->next)
        if (c->pid == pid)
            return c;
    return NULL;
}

sbx_cmd *sbx_cmd_list(void)
{
    return cmds;
}

unsigned sbx_cmd_count(void)
{
    return n_cmds;
}

bool sbx_cmd_done(const sbx_cmd *c)
{
    return c->exited && c->fd_out < 0 && c->fd_err < 0;
}

/* What a chunk costs: a flood of one-byte writes must not hold 40 bytes of
 * bookkeeping per byte under a 1 MiB budget. */
#define CHUNK_COST(n) ((uint64_t) (n) + sizeof(sbx_chunk) + 16)

static void drop_head(sbx_cmd *c)
{
    sbx_chunk *h = c->head;
    c->head = h->next;
    if (!c->head)
        c->tail = NULL;
    c->buffered -= CHUNK_COST(h->len);
    c->dropped += h->len;
    free(h);
}

bool sbx_cmd_can_read(sbx_cmd *c, uint64_t min_seq)
{
    while (c->head && c->buffered + SBX_CMD_CHUNK > SBX_CMD_BUFFER && c->head->seq < min_seq)
        drop_head(c);
    return c->buffered + SBX_CMD_CHUNK <= SBX_CMD_BUFFER;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void sbx_cmd_read(sbx_cmd *c, int stream)
{
    int *fd = stream == 1 ? &c->fd_out : &c->fd_err;
    if (*fd < 0)
        return;
    /* Read into one static buffer and copy out only what came: a 64 KiB
     * allocation per read is an mmap/munmap pair in musl, and each munmap
     * is a TLB-flush IPI to the other CPU, on every command's EOF. */
    static char buf[SBX_CMD_CHUNK];
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            close_fd(fd);
        return;
    }
    sbx_chunk *k = malloc(sizeof *k + (size_t) n);
    if (!k)
        return; /* the bytes are lost only if memory is: nothing better to do */
    memcpy(k->data, buf, (size_t) n);
    k->next = NULL;
    k->seq = c->next_seq++;
    k->stream = (uint32_t) stream;
    k->len = (uint32_t) n;
    if (c->tail)
        c->tail->next = k;
    else
        c->head = k;
    c->tail = k;
    c->buffered += CHUNK_COST(n);
}

void sbx_cmd_exited(sbx_cmd *c, int status)
{
    c->exited = true;
    c->status = status;
    c->end_ms = sbx_now_ms();
    c->drain_ms = c->end_ms + SBX_CMD_DRAIN_MS;
    close_fd(&c->fd_in);
}

/* Every process of the sandbox with its parent, from our /proc (the
 * sandbox's own: only its processes are there). */
static size_t read_parents(pid_t *pids, pid_t *ppids, size_t max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        if (!isdigit((unsigned char) e->d_name[0]))
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (r <= 0)
            continue;
        buf[r] = '\0';
        /* "pid (comm) state ppid ...": comm may hold anything, even ')' */
        char *rp = strrchr(buf, ')');
        int ppid;
        char state;
        if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2)
            continue;
        pids[n] = atoi(e->d_name);
        ppids[n] = ppid;
        n++;
    }
    closedir(d);
    return n;
}

void sbx_cmd_kill_tree(sbx_cmd *c)
{
    enum { MAX = 8192 };
    static pid_t pids[MAX], ppids[MAX], tree[MAX];
    /* Freeze the group first, then walk the tree, then kill: killing first
     * would re-parent a child that left the group (setsid) to PID 1 before
     * the walk could find it through its parent. */
    kill(-c->pid, SIGSTOP);
    if (!c->exited)
        kill(c->pid, SIGSTOP);
    /* Descendants that left the process group (setsid, setpgid) are still
     * found by parentage, as long as their ancestors live.  A few passes
     * catch processes forked while we looked. */
    for (int pass = 0; pass < 3; pass++) {
        size_t n = read_parents(pids, ppids, MAX), nt = 0, killed = 0;
        tree[nt++] = c->pid;
        for (size_t grew = 1; grew;) {
            grew = 0;
            for (size_t i = 0; i < n; i++) {
                if (pids[i] == 0)
                    continue;
                for (size_t j = 0; j < nt; j++) {
                    if (ppids[i] == tree[j] && nt < MAX) {
                        tree[nt++] = pids[i];
                        kill(pids[i], SIGKILL);
                        killed++;
                        pids[i] = 0;
                        grew = 1;
                        break;
                    }
                }
            }
        }
        if (!killed)
            break;
    }
    kill(-c->pid, SIGKILL);
    if (!c->exited)
        kill(c->pid, SIGKILL);
}

void sbx_cmd_clock_stop(void)
{
    if (!frozen_since_ms)
        frozen_since_ms = sbx_now_ms();
}

void sbx_cmd_clock_start(void)
{
    if (!frozen_since_ms)
        return;
    uint64_t frozen = sbx_now_ms() - frozen_since_ms;
    frozen_since_ms = 0;
    for (sbx_cmd *c = cmds; c; c = c->next)
        if (c->deadline_ms && !c->exited)
            c->deadline_ms += frozen;
}

int sbx_cmd_tick(void)
{
    uint64_t now = sbx_now_ms(), next = UINT64_MAX;
    for (sbx_cmd *c = cmds; c; c = c->next) {
        /* frozen: no deadline passes (the clock starts again on thaw) */
        if (c->deadline_ms && !c->exited && !frozen_since_ms) {
            if (now >= c->deadline_ms) {
                c->timed_out = true;
                c->deadline_ms = 0;
                sbx_cmd_kill_tree(c);
            } else if (c->deadline_ms < next) {
                next = c->deadline_ms;
            }
        }
        if (c->exited && !sbx_cmd_done(c)) {
            /* Stop waiting for pipes held by leftovers, unless a client is
             * still reading what is there (a full buffer, not a silent
             * pipe, is why they are open). */
            if (now >= c->drain_ms && c->buffered + SBX_CMD_CHUNK <= SBX_CMD_BUFFER) {
                close_fd(&c->fd_out);
                close_fd(&c->fd_err);
            } else if (c->drain_ms < next) {
                next = c->drain_ms;
            }
        }
    }
    if (next == UINT64_MAX)
        return -1;
    return next <= now ? 0 : (int) (next - now);
}

int sbx_cmd_stdin(sbx_cmd *c, const uint8_t *data, size_t len)
{
    if (c->fd_in < 0 || c->in_close)
        return -EPIPE;
    if (c->in_len + len > SBX_CMD_STDIN_MAX)
        return -EAGAIN;
    if (!len)
        return 0;
    uint8_t *q = realloc(c->in_q, c->in_len + len);
    if (!q)
        return -EAGAIN;
    memcpy(q + c->in_len, data, len);
    c->in_q = q;
    c->in_len += len;
    sbx_cmd_stdin_flush(c);
    return 0;
}

void sbx_cmd_stdin_close(sbx_cmd *c)
{
    c->in_close = true;
    sbx_cmd_stdin_flush(c);
}

void sbx_cmd_stdin_flush(sbx_cmd *c)
{
    while (c->fd_in >= 0 && c->in_len) {
        ssize_t w = write(c->fd_in, c->in_q, c->in_len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return;
            /* the command closed its stdin: what is queued is lost */
            c->in_len = 0;
            close_fd(&c->fd_in);
            break;
        }
        memmove(c->in_q, c->in_q + w, c->in_len - (size_t) w);
        c->in_len -= (size_t) w;
    }
    if (!c->in_len) {
        free(c->in_q);
        c->in_q = NULL;
        if (c->in_close)
            close_fd(&c->fd_in);
    }
}

static void free_cmd(sbx_cmd *c)
{
    free(c->in_q);
    while (c->head)
        drop_head(c);
    close_fd(&c->fd_in);
    close_fd(&c->fd_out);
    close_fd(&c->fd_err);
    free(c);
}

void sbx_cmd_gc(void)
{
    unsigned finished = 0;
    for (sbx_cmd **p = &cmds; *p;) {
        sbx_cmd *c = *p;
        if (sbx_cmd_done(c) && ++finished > SBX_CMD_KEEP_FINISHED && !c->attached) {
            *p = c->next;
            free_cmd(c);
            n_cmds--;
            continue;
        }
        p = &c->next;
    }
}
