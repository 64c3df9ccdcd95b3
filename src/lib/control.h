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

struct sbx_buf;
struct sbx_reader;

enum sbx_msg_type {
    SBX_MSG_EXEC = 1,        /* out -> init: start a command (see sbx_exec_req) */
    SBX_MSG_STARTED = 2,     /* init -> out: u32 pid */
    SBX_MSG_EXEC_FAILED = 3, /* init -> out: u32 errno, u32 stage, str message */
    SBX_MSG_EXIT = 4,        /* init -> out: u32 pid, i32 exit code, i32 signal */
    SBX_MSG_SIGNAL = 5,      /* out -> init: u32 signal for the main command */
    SBX_MSG_GO = 6,          /* out -> first process: uid maps are written, go on */
    SBX_MSG_CGROUP = 7,      /* out -> init: cgroup.procs fds (SCM_RIGHTS): <sbx>/init's; in
                              * daemon mode (payload u32 n_init) then <sbx>/work's */

    /* Daemon mode (sbxd): requests, each on a fresh connection to the
     * sandbox's control socket.  Answers are OK (payload per request) or
     * ERROR {u32 errno, str message}. */
    SBX_MSG_PING = 16,       /* -> OK {u32 protocol version, u32 commands} */
    SBX_MSG_OK = 17,
    SBX_MSG_ERROR = 18,
    /* EXEC (above) answers STARTED or EXEC_FAILED; the connection then stays
     * attached to the command: OUTPUT frames, then EXIT.  While attached the
     * client may send STDIN, STDIN_CLOSE, SIGNAL, KILL. */
    SBX_MSG_OUTPUT = 19,     /* init -> out: u32 stream (1 stdout, 2 stderr), bytes */
    SBX_MSG_STDIN = 20,      /* out -> init: bytes for the attached command's stdin */
    SBX_MSG_STDIN_CLOSE = 21,
    SBX_MSG_KILL = 22,       /* SIGKILL to the command's whole process tree */
    SBX_MSG_ATTACH = 23,     /* {u32 pid} -> OK {u64 dropped bytes} then as after EXEC */
    SBX_MSG_CMD_OP = 24,     /* {u32 pid, u32 op, u32 arg, bytes} -> OK | ERROR */
    SBX_MSG_LIST = 25,       /* -> OK {u32 n, n x command entry} */
    SBX_MSG_RESIZE = 26,     /* out -> init, attached to a PTY command: {u32 cols, u32 rows} */
    SBX_MSG_CLOCK = 27,      /* {u32 running}: 0 before a freeze, 1 after a thaw -> OK (commands'
                              * timeouts do not run while the sandbox is paused) */
    /* File operations, run by a worker with the user's credentials:
     * payload starts {u32 uid, u32 gid, str home}, then per operation. */
    SBX_MSG_FILE_READ = 32,  /* {path} -> OK {u64 size, str abs path}, DATA..., DATA_END */
    SBX_MSG_FILE_WRITE = 33, /* {path, u32 mode} -> OK; DATA..., DATA_END -> OK {u64 size, str abs} */
    SBX_MSG_FILE_STAT = 34,  /* {path} -> OK {entry} */
    SBX_MSG_FILE_LIST = 35,  /* {path, u32 depth} -> ENTRY..., DATA_END (or ERROR) */
    SBX_MSG_FILE_MKDIR = 36, /* {path, u32 parents} -> OK {u32 created, str abs} */
    SBX_MSG_FILE_REMOVE = 37,/* {path, u32 recursive} -> OK */
    SBX_MSG_FILE_MOVE = 38,  /* {from, to} -> OK {str abs to} */
    SBX_MSG_STATFS = 39,     /* {} -> OK {u64 used bytes, u64 total bytes} of / */
    SBX_MSG_DATA = 40,       /* raw bytes */
    SBX_MSG_DATA_END = 41,
    SBX_MSG_ENTRY = 42,      /* a file entry, see sbx_entry */
};

#define SBX_PROTOCOL_VERSION 3 /* 3: CLOCK */

/* CMD_OP operations */
enum { SBX_OP_STDIN = 1, SBX_OP_STDIN_CLOSE = 2, SBX_OP_SIGNAL = 3, SBX_OP_KILL = 4 };

/* EXIT flags (u32 after the signal) */
#define SBX_EXIT_TIMED_OUT 1u

/* File entry types */
enum { SBX_FT_FILE = 1, SBX_FT_DIR = 2, SBX_FT_SYMLINK = 3, SBX_FT_OTHER = 4 };

/* ENTRY / stat answer: {str name, str abs path, u32 type, u64 size,
 * u32 mode, i64 mtime seconds, u32 mtime nanoseconds, str link target} */
typedef struct sbx_entry {
    const char *name, *path, *target;
    uint32_t type, mode, mtime_nsec;
    uint64_t size;
    int64_t mtime;
} sbx_entry;
void sbx_entry_encode(struct sbx_buf *b, const sbx_entry *e);
int sbx_entry_decode(struct sbx_reader *r, sbx_entry *e);

/* EXEC flags */
#define SBX_EXEC_MAIN 1u         /* when this command ends, init ends the sandbox */
#define SBX_EXEC_CWD_OPTIONAL 2u /* cwd is a default: fall back to "/" if missing */
#define SBX_EXEC_BACKGROUND 4u   /* (daemon) listed as background; survives its client */
#define SBX_EXEC_STDIN_PIPE 8u   /* (daemon) stdin is a pipe fed by STDIN frames, else /dev/null */
#define SBX_EXEC_PTY 16u         /* (daemon) on a new terminal: stdio is its slave, the command leads a
                                  * session with it as controlling tty; STDIN frames are typed keys */
#define SBX_EXEC_ROOT_CAPS 32u   /* (daemon, template builds) uid 0 keeps a container's default
                                  * capabilities inside the sandbox's user namespace (caps.h) */

/* A growable output buffer. */
typedef struct sbx_buf {
    uint8_t *data;
    size_t len, cap;
    bool failed; /* allocation failed or frame too large; checked once at send */
} sbx_buf;

void sbx_buf_put_u32(sbx_buf *b, uint32_t v);
void sbx_buf_put_u64(sbx_buf *b, uint64_t v);
/* u32 length, then the bytes */
void sbx_buf_put_bytes(sbx_buf *b, const void *data, size_t n);
/* bytes as they are (no length) */
void sbx_buf_put_raw(sbx_buf *b, const void *data, size_t n);
/* a whole frame (header and payload), for queued non-blocking output */
void sbx_buf_put_frame(sbx_buf *b, uint32_t type, const void *payload, size_t n);
/* ERROR {u32 errno, str message} */
void sbx_buf_put_error(sbx_buf *b, int errno_, const char *msg);
void sbx_buf_put_str(sbx_buf *b, const char *s);
void sbx_buf_free(sbx_buf *b);

/* A bounds-checked reader over a received payload. */
typedef struct sbx_reader {
    const uint8_t *p, *end;
    bool bad; /* set on any out-of-bounds or malformed field */
} sbx_reader;

uint32_t sbx_read_u32(sbx_reader *r);
uint64_t sbx_read_u64(sbx_reader *r);
/* u32 length + bytes: returns a pointer into the payload, *n its length */
const uint8_t *sbx_read_bytes(sbx_reader *r, size_t *n);
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

/* Receive one frame into the caller's buffer (no allocation: for bulk data,
 * where a fresh 512 KiB buffer per frame would cost page faults);
 * -EPROTO if the payload exceeds cap. */
int sbx_ctl_recv_buf(int fd, uint32_t *type, uint8_t *buf, size_t cap, size_t *len);

/* Same, keeping up to SBX_CTL_MAX_FDS received descriptors (close-on-exec)
 * in fds[], their number in *nfds. */
int sbx_ctl_recv_fds(int fd, uint32_t *type, uint8_t **payload, size_t *len, int *fds, int *nfds);

/* Incremental frame reading for non-blocking sockets. */
typedef struct sbx_frame_in {
    uint8_t hdr[8];
    uint32_t got;  /* bytes of header + payload received so far */
    uint32_t type, len;
    uint8_t *payload; /* malloc'ed, len + 1 bytes (NUL-terminated) */
} sbx_frame_in;
/* Read what is available.  Returns 1 when a whole frame is in f (take
 * f->payload, then sbx_frame_in_reset), 0 if more is needed (EAGAIN),
 * -ESHUTDOWN on EOF at a frame boundary, other -errno (-EPROTO) on error. */
int sbx_frame_in_read(int fd, sbx_frame_in *f);
void sbx_frame_in_reset(sbx_frame_in *f);

/* The decoded form of an EXEC frame.  Strings point into the payload. */
typedef struct sbx_exec_req {
    uint32_t uid, gid, flags;
    uint32_t timeout_s; /* daemon mode: SIGKILL the tree after this long, 0: never */
    const char *cwd;
    uint32_t argc, envc;
    const char **argv; /* NULL-terminated, malloc'ed */
    const char **envp; /* NULL-terminated, malloc'ed */
} sbx_exec_req;

#define SBX_EXEC_MAX_ARGS 65536

void sbx_exec_req_encode(sbx_buf *b, uint32_t uid, uint32_t gid, uint32_t flags, uint32_t timeout_s,
                         const char *cwd, char *const *argv, char *const *envp);
/* Returns 0 or -EPROTO; on success free req->argv and req->envp. */
int sbx_exec_req_decode(const uint8_t *payload, size_t len, sbx_exec_req *req);

#endif
