/* http.h - sbxd's HTTP layer on libmicrohttpd: routing, authentication,
 * request bodies, JSON replies and errors.  The API resources live in
 * api_*.c; each handler sees one parsed, authenticated request.
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION).
 * Handlers may block on a sandbox (a command running for minutes, a file
 * streaming in) without holding up any other client. */
#ifndef SBX_DAEMON_HTTP_H
#define SBX_DAEMON_HTTP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <microhttpd.h>

#include "../lib/error.h"
#include "registry.h"
#include "store.h"

#define SBX_JSON_MAX (1u << 20) /* request bodies of JSON endpoints */
#define SBX_MCP_BODY_MAX ((size_t) 64 << 20) /* POST /mcp: files_write carries content */

typedef struct sbx_daemon {
    sbx_store *store;
    sbx_registry reg;
    uint64_t max_upload;      /* bytes */
    unsigned max_sandboxes;   /* live, per key */
    unsigned health_interval; /* seconds */
    int64_t started_ms;
    /* counters for /metrics (atomics) */
    uint64_t requests, errors_4xx, errors_5xx, created, commands;
    const char *openapi;      /* the document served at /v1/openapi.json */
    size_t openapi_len;
    /* MCP (api_mcp.c) */
    char self_url[320];       /* this daemon's REST API, for the MCP tools */
    bool loopback;            /* listening on a loopback address: /mcp checks Host */
    const char **mcp_origins; /* --mcp-allow-origin */
    size_t n_mcp_origins;
} sbx_daemon;

typedef struct sbx_req sbx_req;

enum { SBX_BODY_NONE, SBX_BODY_JSON, SBX_BODY_STREAM };

typedef struct sbx_route {
    const char *method;
    const char *pattern;      /* "/v1/sandboxes/{}/commands/{}": {} captures a segment */
    int body;
    bool public_;             /* no authentication (health) */
    void (*handle)(sbx_req *r);
    /* SBX_BODY_STREAM: called at the start (may reply early with an
     * error), then with each piece of the body; the handler runs at the end */
    void (*begin)(sbx_req *r);
    void (*data)(sbx_req *r, const char *data, size_t len);
    size_t max_body;          /* SBX_BODY_JSON: 0 is SBX_JSON_MAX */
} sbx_route;

struct sbx_req {
    sbx_daemon *d;
    struct MHD_Connection *conn;
    const char *method;
    const char *url;
    const sbx_route *route;
    char arg[2][80];          /* the captured {} segments */
    sbx_key key;
    char *body;
    size_t body_len;
    uint64_t received;
    bool replied;             /* a response is queued (or decided) */
    bool failed;              /* an error reply is decided: swallow the rest */
    unsigned status;
    struct MHD_Response *response;
    void *ctx;                /* the handler's state */
    void (*ctx_free)(void *ctx);
};

/* Start serving on `listen` ("HOST:PORT" or "unix:PATH").  *bound gets
 * the actual address (port 0 picks one). */
struct MHD_Daemon *sbx_http_start(sbx_daemon *d, const char *listen, char *bound, size_t bound_len, sbx_error *err);

/* Replies.  Each may be called once per request. */
void sbx_reply_json(sbx_req *r, unsigned status, json_t *body); /* steals body */
void sbx_reply_error(sbx_req *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void sbx_reply_empty(sbx_req *r, unsigned status);
void sbx_reply_response(sbx_req *r, unsigned status, struct MHD_Response *resp);
/* An error from a sandbox operation, mapped from errno (ENOENT 404,
 * EACCES 403, ENOSPC 507, ...). */
void sbx_reply_sbx_error(sbx_req *r, const sbx_error *err);

/* A query parameter; NULL if absent.  A value containing a NUL byte is
 * answered with 400 here and reported as *bad. */
const char *sbx_query(sbx_req *r, const char *name, bool *bad);
const char *sbx_header(sbx_req *r, const char *name);

/* The JSON object body (an empty body is {}).  On error replies 400 and
 * returns NULL. */
json_t *sbx_req_json(sbx_req *r);

/* A body that takes no fields: {} or nothing.  0, or -1 having replied 400. */
int sbx_req_no_fields(sbx_req *r);

/* Strict field access: unknown fields and wrong types are 400s.  Each
 * returns 0 (absent: out untouched), 1 (present), -1 (replied 400). */
int sbx_json_only(sbx_req *r, json_t *obj, const char *const *allowed);
int sbx_json_string(sbx_req *r, json_t *obj, const char *name, const char **out);
int sbx_json_int(sbx_req *r, json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out);
int sbx_json_number(sbx_req *r, json_t *obj, const char *name, double min, double max, double *out);
int sbx_json_bool(sbx_req *r, json_t *obj, const char *name, bool *out);
/* an object whose values are all strings */
int sbx_json_strmap(sbx_req *r, json_t *obj, const char *name, json_t **out);

/* The live sandbox {0} of the request's key, referenced (release with
 * sbx_reg_put).  Replies 404 (unknown / other key's) or 409 (ended) and
 * returns NULL.  A paused sandbox is resumed first: any call that uses a
 * sandbox wakes it (sbx_req_box_as_is does not: inspect, delete, pause). */
sbx_box *sbx_req_box(sbx_req *r);
sbx_box *sbx_req_box_as_is(sbx_req *r);

/* RFC 3339 UTC with milliseconds. */
void sbx_format_time(int64_t ms, char *out, size_t len);

#endif
