/* control.c - framing and field codecs for the control protocol. */
#include "control.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct frame_header {
    uint32_t type;
    uint32_t len;
};

static void buf_put(sbx_buf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > SBX_CTL_MAX_FRAME) {
        b->failed = true;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

void sbx_buf_put_u32(sbx_buf *b, uint32_t v)
{
    buf_put(b, &v, sizeof v);
}

void sbx_buf_put_u64(sbx_buf *b, uint64_t v)
{
    buf_put(b, &v, sizeof v);
}

void sbx_buf_put_bytes(sbx_buf *b, const void *data, size_t n)
{
    if (n > SBX_CTL_MAX_FRAME) {
        b->failed = true;
        return;
    }
    sbx_buf_put_u32(b, (uint32_t) n);
    buf_put(b, data, n);
}

void sbx_buf_put_raw(sbx_buf *b, const void *data, size_t n)
{
    buf_put(b, data, n);
}

void sbx_buf_put_frame(sbx_buf *b, uint32_t type, const void *payload, size_t n)
{
    struct frame_header h = { type, (uint32_t) n };
    if (n > SBX_CTL_MAX_FRAME) {
        b->failed = true;
        return;
    }
    buf_put(b, &h, sizeof h);
    buf_put(b, payload, n);
}

void sbx_buf_put_error(sbx_buf *b, int errno_, const char *msg)
{
    sbx_buf_put_u32(b, (uint32_t) errno_);
    sbx_buf_put_str(b, msg);
}

void sbx_buf_put_str(sbx_buf *b, const char *s)
{
    buf_put(b, s, strlen(s) + 1);
}

void sbx_buf_free(sbx_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

uint32_t sbx_read_u32(sbx_reader *r)
{
    uint32_t v;
    if (r->bad || (size_t) (r->end - r->p) < sizeof v) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p, sizeof v);
    r->p += sizeof v;
    return v;
}

uint64_t sbx_read_u64(sbx_reader *r)
{
    uint64_t v;
    if (r->bad || (size_t) (r->end - r->p) < sizeof v) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p, sizeof v);
    r->p += sizeof v;
    return v;
}

const uint8_t *sbx_read_bytes(sbx_reader *r, size_t *n)
{
    uint32_t len = sbx_read_u32(r);
    if (r->bad || len > (size_t) (r->end - r->p)) {
        r->bad = true;
        *n = 0;
        return (const uint8_t *) "";
    }
    const uint8_t *p = r->p;
    r->p += len;
    *n = len;
    return p;
}

void sbx_entry_encode(sbx_buf *b, const sbx_entry *e)
{
    sbx_buf_put_str(b, e->name);
    sbx_buf_put_str(b, e->path);
    sbx_buf_put_u32(b, e->type);
    sbx_buf_put_u64(b, e->size);
    sbx_buf_put_u32(b, e->mode);
    sbx_buf_put_u64(b, (uint64_t) e->mtime);
    sbx_buf_put_u32(b, e->mtime_nsec);
    sbx_buf_put_str(b, e->target ? e->target : "");
}

int sbx_entry_decode(sbx_reader *r, sbx_entry *e)
{
    e->name = sbx_read_str(r);
    e->path = sbx_read_str(r);
    e->type = sbx_read_u32(r);
    e->size = sbx_read_u64(r);
    e->mode = sbx_read_u32(r);
    e->mtime = (int64_t) sbx_read_u64(r);
    e->mtime_nsec = sbx_read_u32(r);
    e->target = sbx_read_str(r);
    if (r->bad || e->type < SBX_FT_FILE || e->type > SBX_FT_OTHER || e->mtime_nsec >= 1000000000u)
        return -EPROTO;
    return 0;
}

void sbx_frame_in_reset(sbx_frame_in *f)
{
    free(f->payload);
    memset(f, 0, sizeof *f);
}

int sbx_frame_in_read(int fd, sbx_frame_in *f)
{
    const uint32_t hl = sizeof f->hdr;
    for (;;) {
        uint8_t *dst;
        size_t want;
        if (f->got < hl) {
            dst = f->hdr + f->got;
            want = hl - f->got;
        } else {
            if (!f->payload) {
                struct frame_header h;
                memcpy(&h, f->hdr, sizeof h);
                if (h.len > SBX_CTL_MAX_FRAME)
                    return -EPROTO;
                f->type = h.type;
                f->len = h.len;
                if (!(f->payload = malloc((size_t) h.len + 1)))
                    return -ENOMEM;
                f->payload[h.len] = '\0';
            }
            if (f->got - hl == f->len)
                return 1;
            dst = f->payload + (f->got - hl);
            want = f->len - (f->got - hl);
        }
        ssize_t r = recv(fd, dst, want, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -errno;
        }
        if (r == 0)
            return f->got == 0 ? -ESHUTDOWN : -EPROTO;
        f->got += (uint32_t) r;
    }
}

const char *sbx_read_str(sbx_reader *r)
{
    if (r->bad)
        return "";
    const uint8_t *nul = memchr(r->p, '\0', (size_t) (r->end - r->p));
    if (!nul) {
        r->bad = true;
        return "";
    }
    const char *s = (const char *) r->p;
    r->p = nul + 1;
    return s;
}

static int write_all(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        /* MSG_NOSIGNAL: a peer that went away is an EPIPE to report, not a
         * SIGPIPE that kills us. */
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t) w;
    }
    return 0;
}

/* Take SCM_RIGHTS descriptors out of a received message: keep up to
 * SBX_CTL_MAX_FDS in fds[] (if given), close the rest. */
static void take_fds(struct msghdr *m, int *fds, int *nfds)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *in = (int *) CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            if (fds && nfds && *nfds < SBX_CTL_MAX_FDS)
                fds[(*nfds)++] = in[i];
            else
                close(in[i]);
        }
    }
}

/* Returns bytes read (== n), 0 on EOF before any byte, -EPROTO on EOF
 * mid-way.  Descriptors riding along are handed to take_fds. */
static ssize_t read_all(int fd, void *data, size_t n, int *fds, int *nfds)
{
    uint8_t *p = data;
    size_t got = 0;
    while (got < n) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * SBX_CTL_MAX_FDS)];
            struct cmsghdr align;
        } cm;
        struct iovec iov = { p + got, n - got };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == ENOTSOCK)
            r = read(fd, p + got, n - got);
        else if (r >= 0)
            take_fds(&m, fds, nfds);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return got == 0 ? 0 : -EPROTO;
        got += (size_t) r;
    }
    return (ssize_t) got;
}

int sbx_ctl_send(int fd, uint32_t type, const void *payload, size_t len)
{
    if (len > SBX_CTL_MAX_FRAME)
        return -E2BIG;
    /* One write for header and payload when small keeps frames atomic for the
     * common case and saves a syscall. */
    uint8_t small[256];
    struct frame_header h = { type, (uint32_t) len };
    if (len <= sizeof small - sizeof h) {
        memcpy(small, &h, sizeof h);
        if (len)
            memcpy(small + sizeof h, payload, len);
        return write_all(fd, small, sizeof h + len);
    }
    int r = write_all(fd, &h, sizeof h);
    if (r < 0)
        return r;
    return write_all(fd, payload, len);
}

int sbx_ctl_send_fds(int fd, uint32_t type, const void *payload, size_t len, const int *fds, int nfds)
{
    if (len > 256 || nfds < 1 || nfds > SBX_CTL_MAX_FDS)
        return -EINVAL;
    uint8_t buf[sizeof(struct frame_header) + 256];
    struct frame_header h = { type, (uint32_t) len };
    memcpy(buf, &h, sizeof h);
    if (len)
        memcpy(buf + sizeof h, payload, len);
    union {
        char buf[CMSG_SPACE(sizeof(int) * SBX_CTL_MAX_FDS)];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = { buf, sizeof h + len };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t) nfds) };
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t) nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t) nfds);
    ssize_t w;
    do
        w = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return -errno;
    /* a stream socket may take a frame in parts; the fds went with the first */
    if ((size_t) w < sizeof h + len)
        return write_all(fd, buf + w, sizeof h + len - (size_t) w);
    return 0;
}

int sbx_ctl_recv(int fd, uint32_t *type, uint8_t **payload, size_t *len)
{
    return sbx_ctl_recv_fds(fd, type, payload, len, NULL, NULL);
}

int sbx_ctl_recv_fds(int fd, uint32_t *type, uint8_t **payload, size_t *len, int *fds, int *nfds)
{
    struct frame_header h;
    if (nfds)
        *nfds = 0;
    ssize_t r = read_all(fd, &h, sizeof h, fds, nfds);
    int ret = (int) r;
    uint8_t *data = NULL;
    if (r <= 0)
        goto fail;
    ret = -EPROTO;
    if (h.len > SBX_CTL_MAX_FRAME)
        goto fail;
    ret = -ENOMEM;
    if (!(data = malloc((size_t) h.len + 1)))
        goto fail;
    if (h.len) {
        r = read_all(fd, data, h.len, fds, nfds);
        if (r <= 0) {
            ret = r == 0 ? -EPROTO : (int) r;
            goto fail;
        }
    }
    data[h.len] = '\0';
    *type = h.type;
    *payload = data;
    *len = h.len;
    return 1;

fail:
    free(data);
    for (int i = 0; nfds && i < *nfds; i++)
        close(fds[i]);
    if (nfds)
        *nfds = 0;
    return ret;
}

int sbx_ctl_recv_buf(int fd, uint32_t *type, uint8_t *buf, size_t cap, size_t *len)
{
    struct frame_header h;
    ssize_t r = read_all(fd, &h, sizeof h, NULL, NULL);
    if (r <= 0)
        return (int) r;
    if (h.len > cap)
        return -EPROTO;
    if (h.len && (r = read_all(fd, buf, h.len, NULL, NULL)) <= 0)
        return r == 0 ? -EPROTO : (int) r;
    *type = h.type;
    *len = h.len;
    return 1;
}

void sbx_exec_req_encode(sbx_buf *b, uint32_t uid, uint32_t gid, uint32_t flags, uint32_t timeout_s,
                         const char *cwd, char *const *argv, char *const *envp)
{
    uint32_t argc = 0, envc = 0;
    while (argv[argc])
        argc++;
    while (envp && envp[envc])
        envc++;
    sbx_buf_put_u32(b, uid);
    sbx_buf_put_u32(b, gid);
    sbx_buf_put_u32(b, flags);
    sbx_buf_put_u32(b, timeout_s);
    sbx_buf_put_str(b, cwd);
    sbx_buf_put_u32(b, argc);
    for (uint32_t i = 0; i < argc; i++)
        sbx_buf_put_str(b, argv[i]);
    sbx_buf_put_u32(b, envc);
    for (uint32_t i = 0; i < envc; i++)
        sbx_buf_put_str(b, envp[i]);
}

static const char **read_strv(sbx_reader *r, uint32_t *count)
{
    uint32_t n = sbx_read_u32(r);
    /* each string needs at least its NUL: a count larger than the remaining
     * bytes is a lie, refuse it before allocating */
    if (r->bad || n > SBX_EXEC_MAX_ARGS || n > (size_t) (r->end - r->p)) {
        r->bad = true;
        return NULL;
    }
    const char **v = calloc((size_t) n + 1, sizeof *v);
    if (!v) {
        r->bad = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        v[i] = sbx_read_str(r);
    *count = n;
    return v;
}

int sbx_exec_req_decode(const uint8_t *payload, size_t len, sbx_exec_req *req)
{
    sbx_reader r = { payload, payload + len, false };
    memset(req, 0, sizeof *req);
    req->uid = sbx_read_u32(&r);
    req->gid = sbx_read_u32(&r);
    req->flags = sbx_read_u32(&r);
    req->timeout_s = sbx_read_u32(&r);
    req->cwd = sbx_read_str(&r);
    req->argv = read_strv(&r, &req->argc);
    req->envp = read_strv(&r, &req->envc);
    if (r.bad || req->argc == 0 || req->cwd[0] != '/' || r.p != r.end) {
        free(req->argv);
        free(req->envp);
        req->argv = req->envp = NULL;
        return -EPROTO;
    }
    return 0;
}
