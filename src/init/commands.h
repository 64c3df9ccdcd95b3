/* commands.h - the commands sbx-init runs in daemon mode, and their output.
 *
 * Output is kept inside the sandbox, by init, not by sbxd: a background
 * command keeps running and its output keeps being buffered while sbxd
 * restarts, and a client re-attaching later replays it.  Each command's
 * output is a list of chunks (one read() each, tagged stdout/stderr,
 * numbered), at most SBX_CMD_BUFFER bytes:
 *   - with nobody attached, the oldest chunks are dropped (a ring): a
 *     chatty server never blocks on a full pipe, and re-attaching says how
 *     many bytes were lost;
 *   - with a client attached, a full buffer stops init reading the pipe
 *     until the client catches up: streamed output is lossless, and a
 *     flood is throttled to the client's pace instead of eating memory. */
#ifndef SBX_INIT_COMMANDS_H
#define SBX_INIT_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_CMD_BUFFER (1u << 20)   /* per command */
#define SBX_CMD_CHUNK (64u << 10)   /* one read */
#define SBX_CMD_MAX 256             /* tracked at once, running or finished */
#define SBX_CMD_KEEP_FINISHED 64    /* finished commands kept for replay */
/* After the command's process exits, how long to wait for its pipes to
 * close (a background grandchild may hold them open forever). */
#define SBX_CMD_DRAIN_MS 200

typedef struct sbx_chunk {
    struct sbx_chunk *next;
    uint64_t seq;
    uint32_t stream; /* 1 stdout, 2 stderr */
    uint32_t len;
    uint8_t data[];
} sbx_chunk;

typedef struct sbx_cmd {
    struct sbx_cmd *next;
    pid_t pid;
    uint32_t flags;          /* SBX_EXEC_* */
    char summary[512];       /* argv joined, for listings */
    uint32_t argc_shown;
    int fd_in, fd_out, fd_err;
    uint8_t *in_q;           /* stdin bytes waiting for the pipe */
    size_t in_len;
    bool in_close;           /* close stdin once in_q is written */
    sbx_chunk *head, *tail;
    uint64_t next_seq;       /* seq of the next chunk */
    uint64_t buffered;       /* memory held by the chunks (data + overhead) */
    uint64_t dropped;        /* bytes dropped from the head so far */
    int attached;            /* clients streaming it */
    bool exited, timed_out;
    int status;
    uint64_t start_ms, end_ms, deadline_ms, drain_ms;
} sbx_cmd;

uint64_t sbx_now_ms(void);

/* Register a started command (pid, pipe ends owned from now on). */
sbx_cmd *sbx_cmd_add(pid_t pid, uint32_t flags, char *const *argv, int fd_in, int fd_out, int fd_err,
                     uint32_t timeout_s);
sbx_cmd *sbx_cmd_find(pid_t pid);
sbx_cmd *sbx_cmd_list(void);
unsigned sbx_cmd_count(void);

/* Finished: exited and every byte of output collected. */
bool sbx_cmd_done(const sbx_cmd *c);

/* Whether init may read more output now (see above).  `min_seq` is the
 * lowest chunk seq an attached client still needs (UINT64_MAX if none). */
bool sbx_cmd_can_read(sbx_cmd *c, uint64_t min_seq);

/* Read once from the stdout (1) or stderr (2) pipe; closes it on EOF. */
void sbx_cmd_read(sbx_cmd *c, int stream);

/* The process was reaped. */
void sbx_cmd_exited(sbx_cmd *c, int status);

/* Deadlines: timeouts (kill the tree) and drain limits (close the pipes).
 * Returns the poll timeout until the next one, -1 if none. */
int sbx_cmd_tick(void);

/* The sandbox is being frozen (stop) or was thawed (start): commands'
 * timeouts measure the time they could run, so a deadline does not pass
 * while the command is frozen; on start every pending deadline moves on by
 * the time spent frozen.  Idempotent either way. */
void sbx_cmd_clock_stop(void);
void sbx_cmd_clock_start(void);

/* SIGKILL to the command's process group and every descendant still found
 * in /proc. */
void sbx_cmd_kill_tree(sbx_cmd *c);

/* Queue bytes for stdin (at most SBX_CMD_STDIN_MAX pending): 0, -EPIPE
 * if stdin is closed, -EAGAIN if too much is pending. */
#define SBX_CMD_STDIN_MAX (1u << 20)
int sbx_cmd_stdin(sbx_cmd *c, const uint8_t *data, size_t len);
/* Close stdin once everything queued is written. */
void sbx_cmd_stdin_close(sbx_cmd *c);
/* The stdin pipe is writable: write what is queued. */
void sbx_cmd_stdin_flush(sbx_cmd *c);

/* Forget finished commands beyond SBX_CMD_KEEP_FINISHED (not attached). */
void sbx_cmd_gc(void);

#endif
