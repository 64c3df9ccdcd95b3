/* control.h - the framed control protocol between the outside (sbx run,
 * later sbxd) and sbx-init, PID 1 of the sandbox.
 *
 * A frame is a fixed header { uint32 type; uint32 length } followed by
 * `length` payload bytes, over a SOCK_STREAM socket (a socketpair today, a
 * vsock stream for a microVM later).  Both sides treat the other as
 * untrusted: every length is bounded by SBX_CTL_MAX_FRAME and every field is
 * decoded with bounds checks (struct sbx_reader). */
#ifndef SBX_CONTROL_H
#define SBX_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_CTL_MAX_FRAME (1U << 20)

enum sbx_msg_type {
    SBX_MSG_EXEC = 1,        /* out -> init: start a command (see sbx_exec_req) */
    SBX_MSG_STARTED = 2,     /* init -> out: u32 pid */
    SBX_MSG_EXEC_FAILED = 3, /* init -> out: u32 errno, u32 stage, str message */
    SBX_MSG_EXIT = 4,        /* init -> out: u32 pid, i32 exit code, i32 signal */
    SBX_MSG_SIGNAL = 5,      /* out -> init: u32 signal for the main command */
    SBX_MSG_GO = 6,          /* out -> first process: uid maps are written, go on */
    SBX_MSG_CGROUP = 7,      /* out -> init: cgroup.procs fds of <sbx>/init (SCM_RIGHTS) */
};

/* EXEC flags */
#define SBX_EXEC_MAIN 1u         /* when this command ends, init ends the sandbox */
#define SBX_EXEC_CWD_OPTIONAL 2u /* cwd is a default: fall back to "/" if missing */

/* A growable output buffer. */
typedef struct sbx_buf {
    uint8_t *data;
    size_t len, cap;
    bool failed; /* allocation failed or frame too large; checked once at send */
} sbx_buf;

void sbx_buf_put_u32(sbx_buf *b, uint32_t v);
void sbx_buf_put_str(sbx_buf *b, const char *s);
void sbx_buf_free(sbx_buf *b);

/* A bounds-checked reader over a received payload. */
typedef struct sbx_reader {
    const uint8_t *p, *end;
    bool bad; /* set on any out-of-bounds or malformed field */
} sbx_reader;

uint32_t sbx_read_u32(sbx_reader *r);
/* Returns a pointer into the payload to a NUL-terminated string, or "" and
 * sets r->bad if there is no terminator inside the payload. */
const char *sbx_read_str(sbx_reader *r);

/* Send one frame; retries on EINTR and short writes.  Returns 0 or -errno. */
int sbx_ctl_send(int fd, uint32_t type, const void *payload, size_t len);

/* Send one frame carrying file descriptors (SCM_RIGHTS, at most
 * SBX_CTL_MAX_FDS). */
#define SBX_CTL_MAX_FDS 8
int sbx_ctl_send_fds(int fd, uint32_t type, const void *payload, size_t len, const int *fds, int nfds);

/* Receive one frame into a malloc'ed buffer (*payload, NUL-terminated for
 * convenience).  Returns 1 on a frame, 0 on clean EOF, -errno on error
 * (-EPROTO for an oversized or truncated frame).  Any descriptors that
 * arrive with it are closed: use sbx_ctl_recv_fds to accept them. */
int sbx_ctl_recv(int fd, uint32_t *type, uint8_t **payload, size_t *len);

/* Same, keeping up to SBX_CTL_MAX_FDS received descriptors (close-on-exec)
 * in fds[], their number in *nfds. */
int sbx_ctl_recv_fds(int fd, uint32_t *type, uint8_t **payload, size_t *len, int *fds, int *nfds);

/* The decoded form of an EXEC frame.  Strings point into the payload. */
typedef struct sbx_exec_req {
    uint32_t uid, gid, flags;
    const char *cwd;
    uint32_t argc, envc;
    const char **argv; /* NULL-terminated, malloc'ed */
    const char **envp; /* NULL-terminated, malloc'ed */
} sbx_exec_req;

#define SBX_EXEC_MAX_ARGS 65536

void sbx_exec_req_encode(sbx_buf *b, uint32_t uid, uint32_t gid, uint32_t flags, const char *cwd,
                         char *const *argv, char *const *envp);
/* Returns 0 or -EPROTO; on success free req->argv and req->envp. */
int sbx_exec_req_decode(const uint8_t *payload, size_t len, sbx_exec_req *req);

#endif
