/* mcp.h - the MCP (Model Context Protocol) server of sbx, written once for
 * both transports: `sbx mcp` (stdio, src/cli/client/mcp_stdio.c) and /mcp
 * on sbxd (Streamable HTTP, src/daemon/api_mcp.c).
 *
 * The transports frame messages; everything else is here: JSON-RPC, the
 * lifecycle (initialize, version negotiation), tools, resources, progress
 * and cancellation.  The tools are a client of sbxd's REST API
 * (src/rest/http.h), so an MCP call does exactly what the REST call does,
 * with the same validation, limits and key scoping.
 *
 * Threads: a session's requests may be handled concurrently (a long
 * command_run must not hold up a ping or the cancellation aimed at it);
 * sbx_mcp_handle() is thread-safe and returns when its request is done. */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <jansson.h>
#include <stdbool.h>

#include "../lib/error.h"

#define SBX_MCP_LATEST "2025-11-25"

static inline void sbx_json_decrefp(json_t **j)
{
    json_decref(*j);
}
#define _cleanup_json_ __attribute__((cleanup(sbx_json_decrefp)))

/* JSON-RPC error codes */
enum {
    SBX_RPC_PARSE_ERROR = -32700,
    SBX_RPC_INVALID_REQUEST = -32600,
    SBX_RPC_METHOD_NOT_FOUND = -32601,
    SBX_RPC_INVALID_PARAMS = -32602,
    SBX_RPC_INTERNAL = -32603,
    SBX_RPC_RESOURCE_NOT_FOUND = -32002,
};

typedef struct sbx_mcp sbx_mcp;

/* A message for the client (a notification or the response), borrowed for
 * the call.  Calls for one request come from the thread handling it; the
 * transport serializes between requests. */
typedef void (*sbx_mcp_send_fn)(void *ctx, json_t *msg);

/* A session whose tools talk to sbxd at `url` ("http://..." or
 * "unix:PATH") with API key `key` (both copied). */
sbx_mcp *sbx_mcp_new(const char *url, const char *key, sbx_error *err);
/* Kill the commands of calls still running, then free.  No sbx_mcp_handle()
 * may be running or start. */
void sbx_mcp_free(sbx_mcp *m);

/* Handle one message from the client.  A request gets exactly one response
 * through send() (progress notifications before it), except one cancelled
 * by notifications/cancelled, which gets none, as the protocol requires.
 * Notifications and responses from the client get nothing. */
void sbx_mcp_handle(sbx_mcp *m, json_t *msg, sbx_mcp_send_fn send, void *ctx);

/* Kill the commands of every running call: the session is ending. */
void sbx_mcp_cancel_all(sbx_mcp *m);

/* One of the protocol versions we speak? */
bool sbx_mcp_version_supported(const char *version);

/* The transport's own errors (a line that is not JSON, a batch): a
 * JSON-RPC error response for `id` (NULL: null).  New reference. */
json_t *sbx_mcp_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Is msg a request (an object with "method" and "id")? */
bool sbx_mcp_is_request(json_t *msg);

#endif
