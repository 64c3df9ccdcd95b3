/* tools.h - the MCP tools and file resources (tools.c) as the protocol
 * layer (protocol.c) sees them, and what protocol.c offers them back:
 * progress, and the cancellation handshake for the command a call runs. */
#ifndef SBX_MCP_TOOLS_H
#define SBX_MCP_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

#include "../rest/http.h"
#include "mcp.h"

/* One tools/call or resources/read in progress. */
typedef struct sbx_mcp_call sbx_mcp_call;

/* The REST client of this call (owned by the call). */
sbx_http *sbx_mcp_call_http(sbx_mcp_call *c);
/* Has notifications/cancelled named this call? */
bool sbx_mcp_call_cancelled(sbx_mcp_call *c);
/* The call now runs command `pid` in `sandbox` (pid 0: no longer), so a
 * cancellation can kill it.  Returns true if the call was already
 * cancelled: the caller kills the command itself. */
bool sbx_mcp_call_running(sbx_mcp_call *c, const char *sandbox, long pid);
/* A notifications/progress, if the client asked for them (progressToken).
 * progress must grow from one call to the next. */
void sbx_mcp_call_progress(sbx_mcp_call *c, double progress, const char *message);

typedef struct sbx_mcp_tool {
    const char *name;
    const char *title;
    const char *description;  /* for a model: what it does, when to use it */
    const char *input_schema; /* JSON Schema text */
    const char *output_schema;
    /* args: validated against input_schema.  Returns a CallToolResult
     * (content, structuredContent, isError); NULL only when out of memory. */
    json_t *(*run)(sbx_mcp_call *c, json_t *args);
} sbx_mcp_tool;

extern const sbx_mcp_tool sbx_mcp_tools[];
extern const size_t sbx_mcp_ntools;

/* The URI template files are offered under, and resources/read of one such
 * URI: a ReadResourceResult, or NULL with *code (a JSON-RPC error code)
 * and err filled. */
#define SBX_MCP_FILE_TEMPLATE "sbx://sandboxes/{sandbox_id}/files/{+path}"
json_t *sbx_mcp_resource_read(sbx_mcp_call *c, const char *uri, int *code, sbx_error *err);

/* Check args against a tool's input schema (the subset of JSON Schema the
 * tools use: type, properties, required, additionalProperties, items,
 * enum, minimum, maximum, minItems).  0, or -1 with msg filled. */
int sbx_mcp_validate(json_t *schema, json_t *args, char *msg, size_t msglen);

#endif
