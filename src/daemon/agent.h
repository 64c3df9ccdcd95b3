/* agent.h - sbxd's side of the control protocol with one sandbox's
 * sbx-init (control.h), one connection per request.
 *
 * sbx-init is on the far side of the trust boundary: every read has a
 * deadline and every frame is bounded (SBX_CTL_MAX_FRAME), so a hostile or
 * stuck init costs one request thread a timeout, never the daemon. */
#ifndef SBX_DAEMON_AGENT_H
#define SBX_DAEMON_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "../lib/control.h"
#include "../lib/error.h"

/* Default deadline for an answer to a request. */
#define SBX_AGENT_TIMEOUT_MS 10000

/* Connect to the socket at `path`.  Returns the fd or -1 (err set). */
int sbx_agent_connect(const char *path, sbx_error *err);

/* Send a frame.  0 or -errno. */
int sbx_agent_send(int fd, uint32_t type, const void *payload, size_t len);

/* Receive one frame within timeout_ms (-1: no deadline).  Returns 1, 0 on
 * EOF, -ETIMEDOUT, or -errno (-EPROTO for a malformed frame). */
int sbx_agent_recv(int fd, int timeout_ms, uint32_t *type, uint8_t **payload, size_t *len);

/* Decode an ERROR frame into err (message prefixed "sandbox: "). */
void sbx_agent_error(const uint8_t *payload, size_t len, sbx_error *err);

/* One request, one answer: connect, send, receive.  On OK returns 0 with
 * the payload (caller frees); on ERROR or failure -1 with err set
 * (err->errno_ from the sandbox for ERROR, ETIMEDOUT/ECONNREFUSED...
 * otherwise).  *fd_out (if not NULL) keeps the connection open. */
int sbx_agent_call(const char *path, uint32_t type, const void *payload, size_t len, uint8_t **reply,
                   size_t *reply_len, int *fd_out, sbx_error *err);

#endif
