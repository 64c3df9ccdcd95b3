/* agent.c - see agent.h. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sbx_agent_connect(const char *path, sbx_error *err)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path)
        return sbx_error_set(err, ENAMETOOLONG, "control socket path");
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_set(err, errno, "socket");
    /* A unix-socket connect does not wait for accept(): a backlog that is
     * full (init stopped accepting) fails with EAGAIN instead of hanging. */
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_set(err, e, "connect to the sandbox");
    }
    return fd;
}

int sbx_agent_send(int fd, uint32_t type, const void *payload, size_t len)
{
    return sbx_ctl_send(fd, type, payload, len);
}

int sbx_agent_recv(int fd, int timeout_ms, uint32_t *type, uint8_t **payload, size_t *len)
{
    /* Wait for the first byte with a deadline, then read the frame with
     * one too: a peer that sends half a frame and stops must not hang us. */
    sbx_frame_in f = { 0 };
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0) {
            sbx_frame_in_reset(&f);
            return -ETIMEDOUT;
        }
        int r = sbx_frame_in_read(fd, &f);
        if (r == 1) {
            *type = f.type;
            *payload = f.payload;
            *len = f.len;
            return 1;
        }
        if (r == -ESHUTDOWN)
            return 0;
        if (r < 0) {
            sbx_frame_in_reset(&f);
            return r;
        }
    }
}

void sbx_agent_error(const uint8_t *payload, size_t len, sbx_error *err)
{
    sbx_reader r = { payload, payload + len, false };
    uint32_t e = sbx_read_u32(&r);
    const char *msg = sbx_read_str(&r);
    if (r.bad || e == 0 || e > 4095) {
        sbx_error_set(err, EPROTO, "malformed error from the sandbox");
        return;
    }
    /* the message already names the cause (": No such file..."): keep it
     * as it is rather than let sbx_error_set append strerror again */
    err->errno_ = (int) e;
    snprintf(err->msg, sizeof err->msg, "%s", msg);
}

int sbx_agent_call(const char *path, uint32_t type, const void *payload, size_t len, uint8_t **reply,
                   size_t *reply_len, int *fd_out, sbx_error *err)
{
    *reply = NULL;
    *reply_len = 0;
    int fd = sbx_agent_connect(path, err);
    if (fd < 0)
        return -1;
    int r = sbx_agent_send(fd, type, payload, len);
    if (r < 0) {
        close(fd);
        return sbx_error_set(err, -r, "send to the sandbox");
    }
    uint32_t rtype;
    uint8_t *p = NULL;
    size_t plen;
    r = sbx_agent_recv(fd, SBX_AGENT_TIMEOUT_MS, &rtype, &p, &plen);
    if (r <= 0) {
        close(fd);
        return sbx_error_set(err, r == 0 ? EPIPE : -r, r == -ETIMEDOUT ? "the sandbox did not answer in time"
                                                                       : "the sandbox closed the connection");
    }
    if (rtype == SBX_MSG_ERROR) {
        sbx_agent_error(p, plen, err);
        free(p);
        close(fd);
        return -1;
    }
    if (rtype != SBX_MSG_OK) {
        free(p);
        close(fd);
        return sbx_error_set(err, EPROTO, "unexpected answer %u from the sandbox", rtype);
    }
    *reply = p;
    *reply_len = plen;
    if (fd_out)
        *fd_out = fd;
    else
        close(fd);
    return 0;
}
