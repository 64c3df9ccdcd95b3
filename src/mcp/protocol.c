/* protocol.c - JSON-RPC and the MCP lifecycle for both transports: see
 * mcp.h for the contract and docs/mcp.md for what clients see.
 *
 * Cancellation: every tools/call in flight is a `call` on the session's
 * list.  notifications/cancelled marks it; if the call already runs a
 * command, the canceller kills it at once (DELETE .../commands/{pid}) so
 * that the command_run waiting on its output returns within a round trip,
 * not at the command's own end.  A call marked cancelled sends no
 * response, as the protocol requires. */
#define _GNU_SOURCE
#include "mcp.h"
#include "tools.h"
#include "../lib/cleanup.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#ifndef SBX_VERSION
#define SBX_VERSION "dev"
#endif

#define TOOLS_PER_PAGE 8
#define IDLE_HTTP 4 /* REST clients kept for reuse (keep-alive connections) */

static const char *const versions[] = { "2025-11-25", "2025-06-18", "2025-03-26" };

struct sbx_mcp_call {
    sbx_mcp *m;
    sbx_http *http;
    json_t *id;             /* the request's id */
    json_t *progress_token; /* NULL: no progress wanted */
    double last_progress;
    sbx_mcp_send_fn send;
    void *ctx;
    /* under m->lock */
    bool cancelled;
    char sandbox[128];
    long pid;
    struct sbx_mcp_call *next;
};

struct sbx_mcp {
    char *url, *key;
    pthread_mutex_t lock;
    bool initialized;
    struct sbx_mcp_call *calls;
    sbx_http *idle[IDLE_HTTP];
    int nidle;
};

/* The tools' schemas, parsed once. */
static json_t *input_schemas[32], *output_schemas[32];
static pthread_once_t schemas_once = PTHREAD_ONCE_INIT;

static void parse_schemas(void)
{
    for (size_t i = 0; i < sbx_mcp_ntools && i < 32; i++) {
        json_error_t e;
        input_schemas[i] = json_loads(sbx_mcp_tools[i].input_schema, 0, &e);
        output_schemas[i] = json_loads(sbx_mcp_tools[i].output_schema, 0, &e);
        if (!input_schemas[i] || !output_schemas[i]) {
            /* a typo in tools.c: the unit and integration tests catch it */
            fprintf(stderr, "sbx mcp: bad schema of tool %s: %s (line %d)\n", sbx_mcp_tools[i].name, e.text,
                    e.line);
            abort();
        }
    }
}

bool sbx_mcp_version_supported(const char *v)
{
    for (size_t i = 0; v && i < sizeof versions / sizeof *versions; i++)
        if (strcmp(v, versions[i]) == 0)
            return true;
    return false;
}

bool sbx_mcp_is_request(json_t *msg)
{
    return json_is_object(msg) && json_object_get(msg, "method") && json_object_get(msg, "id");
}

json_t *sbx_mcp_error(json_t *id, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *m = json_string(msg);
    if (!m)
        m = json_string("invalid request");
    return json_pack("{s:s, s:O, s:{s:i, s:o}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code",
                     code, "message", m);
}

static json_t *result(json_t *id, json_t *res)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", res ? res : json_object());
}

/* ---- sessions and their REST clients ---- */

sbx_mcp *sbx_mcp_new(const char *url, const char *key, sbx_error *err)
{
    pthread_once(&schemas_once, parse_schemas);
    if (sodium_init() < 0) {
        sbx_error_set(err, 0, "libsodium failed to initialise");
        return NULL;
    }
    sbx_mcp *m = calloc(1, sizeof *m);
    if (!m || !(m->url = strdup(url)) || !(m->key = strdup(key ? key : ""))) {
        sbx_mcp_free(m);
        sbx_error_set(err, ENOMEM, "MCP session");
        return NULL;
    }
    /* fail now on a URL or key the REST client refuses */
    sbx_http *h = sbx_http_new(url, key, err);
    if (!h) {
        sbx_mcp_free(m);
        return NULL;
    }
    m->idle[m->nidle++] = h;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void sbx_mcp_free(sbx_mcp *m)
{
    if (!m)
        return;
    sbx_mcp_cancel_all(m);
    for (int i = 0; i < m->nidle; i++)
        sbx_http_free(m->idle[i]);
    if (m->url)
        pthread_mutex_destroy(&m->lock);
    free(m->url);
    free(m->key);
    free(m);
}

static sbx_http *http_get(sbx_mcp *m, sbx_error *err)
{
    pthread_mutex_lock(&m->lock);
    sbx_http *h = m->nidle ? m->idle[--m->nidle] : NULL;
    pthread_mutex_unlock(&m->lock);
    return h ? h : sbx_http_new(m->url, m->key, err);
}

static void http_put(sbx_mcp *m, sbx_http *h)
{
    pthread_mutex_lock(&m->lock);
    if (m->nidle < IDLE_HTTP) {
        m->idle[m->nidle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    sbx_http_free(h);
}

/* Kill command pid in sandbox (the canceller's side of the handshake). */
static void kill_command(sbx_mcp *m, const char *sandbox, long pid)
{
    sbx_error err = { 0 };
    sbx_http *h = http_get(m, &err);
    if (!h)
        return;
    _cleanup_free_ char *id = sbx_http_escape(h, sandbox, &err);
    char path[512];
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (id && snprintf(path, sizeof path, "/v1/sandboxes/%s/commands/%ld", id, pid) < (int) sizeof path)
        sbx_http_json(h, "DELETE", path, NULL, &resp, &err); /* it may have ended on its own: fine */
    http_put(m, h);
}

void sbx_mcp_cancel_all(sbx_mcp *m)
{
    if (!m || !m->url)
        return;
    for (;;) {
        char sandbox[128] = "";
        long pid = 0;
        pthread_mutex_lock(&m->lock);
        for (struct sbx_mcp_call *c = m->calls; c; c = c->next) {
            c->cancelled = true;
            if (c->pid > 0 && !sandbox[0]) {
                snprintf(sandbox, sizeof sandbox, "%s", c->sandbox);
                pid = c->pid;
                c->pid = 0; /* killed once */
            }
        }
        pthread_mutex_unlock(&m->lock);
        if (!pid)
            return;
        kill_command(m, sandbox, pid);
    }
}

/* ---- what the tools see of their call ---- */

sbx_http *sbx_mcp_call_http(sbx_mcp_call *c)
{
    return c->http;
}

bool sbx_mcp_call_cancelled(sbx_mcp_call *c)
{
    pthread_mutex_lock(&c->m->lock);
    bool r = c->cancelled;
    pthread_mutex_unlock(&c->m->lock);
    return r;
}

bool sbx_mcp_call_running(sbx_mcp_call *c, const char *sandbox, long pid)
{
    pthread_mutex_lock(&c->m->lock);
    snprintf(c->sandbox, sizeof c->sandbox, "%s", sandbox ? sandbox : "");
    c->pid = pid;
    bool r = c->cancelled;
    pthread_mutex_unlock(&c->m->lock);
    return r;
}

void sbx_mcp_call_progress(sbx_mcp_call *c, double progress, const char *message)
{
    if (!c->progress_token || progress <= c->last_progress)
        return;
    c->last_progress = progress;
    json_t *msg = json_string(message);
    json_t *n = json_pack("{s:s, s:s, s:{s:O, s:f, s:o*}}", "jsonrpc", "2.0", "method", "notifications/progress",
                          "params", "progressToken", c->progress_token, "progress", progress, "message", msg);
    if (n)
        c->send(c->ctx, n);
    json_decref(n);
}

/* ---- methods ---- */

static json_t *do_initialize(sbx_mcp *m, json_t *params, json_t *id)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked)
        return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "initialize: params.protocolVersion (a string) is missing");
    pthread_mutex_lock(&m->lock);
    m->initialized = true;
    pthread_mutex_unlock(&m->lock);
    const char *v = sbx_mcp_version_supported(asked) ? asked : SBX_MCP_LATEST;
    return result(id, json_pack("{s:s, s:{s:{s:b}, s:{s:b, s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v,
                                "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0, "listChanged", 0,
                                "logging", "serverInfo", "name", "sbx", "title", "sbx sandboxes", "version",
                                SBX_VERSION, "instructions",
                                "sbx runs code in isolated Linux sandboxes. Create one with sandbox_create, run "
                                "commands with command_run, move files with files_write/files_read, and delete it "
                                "with sandbox_kill when done. Sandboxes expire after their timeout (default 15 "
                                "minutes)."));
}

static json_t *tool_json(size_t i)
{
    const sbx_mcp_tool *t = &sbx_mcp_tools[i];
    return json_pack("{s:s, s:s, s:s, s:O, s:O}", "name", t->name, "title", t->title, "description", t->description,
                     "inputSchema", input_schemas[i], "outputSchema", output_schemas[i]);
}

static json_t *do_tools_list(json_t *params, json_t *id)
{
    size_t start = 0;
    json_t *cursor = json_object_get(params, "cursor");
    if (cursor && !json_is_null(cursor)) {
        const char *s = json_string_value(cursor);
        char *end;
        unsigned long v = s && strncmp(s, "tools:", 6) == 0 ? strtoul(s + 6, &end, 10) : 0;
        if (!v || *end || v >= sbx_mcp_ntools || v % TOOLS_PER_PAGE)
            return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "tools/list: unknown cursor (use the nextCursor of the "
                                                            "previous page, or none for the first)");
        start = v;
    }
    json_t *tools = json_array();
    size_t end = start + TOOLS_PER_PAGE < sbx_mcp_ntools ? start + TOOLS_PER_PAGE : sbx_mcp_ntools;
    for (size_t i = start; i < end; i++)
        json_array_append_new(tools, tool_json(i));
    json_t *res = json_pack("{s:o}", "tools", tools);
    if (end < sbx_mcp_ntools) {
        char next[32];
        snprintf(next, sizeof next, "tools:%zu", end);
        json_object_set_new(res, "nextCursor", json_string(next));
    }
    return result(id, res);
}

/* Register a call so that notifications/cancelled can find it. */
static void call_begin(sbx_mcp *m, sbx_mcp_call *c)
{
    pthread_mutex_lock(&m->lock);
    c->next = m->calls;
    m->calls = c;
    pthread_mutex_unlock(&m->lock);
}

/* Unregister; true if it was cancelled meanwhile. */
static bool call_end(sbx_mcp *m, sbx_mcp_call *c)
{
    pthread_mutex_lock(&m->lock);
    for (sbx_mcp_call **p = &m->calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    bool cancelled = c->cancelled;
    pthread_mutex_unlock(&m->lock);
    return cancelled;
}

static json_t *do_tools_call(sbx_mcp_call *c, json_t *params, json_t *id)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    if (!name)
        return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "tools/call: params.name (a string) is missing");
    size_t i = 0;
    while (i < sbx_mcp_ntools && strcmp(sbx_mcp_tools[i].name, name) != 0)
        i++;
    if (i == sbx_mcp_ntools)
        return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "unknown tool '%s' (tools/list shows them)", name);
    json_t *args = json_object_get(params, "arguments");
    _cleanup_json_ json_t *empty = NULL;
    if (!args || json_is_null(args))
        args = empty = json_object();
    if (!json_is_object(args))
        return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "tools/call: params.arguments must be an object");
    /* Wrong arguments are a tool error, not a protocol one: the model
     * reads the message and corrects its call (2025-11-25). */
    char msg[512];
    json_t *res;
    if (sbx_mcp_validate(input_schemas[i], args, msg, sizeof msg) < 0)
        res = json_pack("{s:[{s:s, s:s++}], s:b}", "content", "type", "text", "text", name, ": ", msg, "isError", 1);
    else
        res = sbx_mcp_tools[i].run(c, args);
    if (!res)
        return sbx_mcp_error(id, SBX_RPC_INTERNAL, "out of memory");
    return result(id, res);
}

static json_t *do_resources_read(sbx_mcp_call *c, json_t *params, json_t *id)
{
    const char *uri = json_string_value(json_object_get(params, "uri"));
    if (!uri)
        return sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "resources/read: params.uri (a string) is missing");
    int code;
    sbx_error err = { 0 };
    json_t *res = sbx_mcp_resource_read(c, uri, &code, &err);
    if (!res)
        return sbx_mcp_error(id, code, "%s", err.msg);
    return result(id, res);
}

/* A method that runs against sbxd: a call with a REST client. */
static json_t *with_call(sbx_mcp *m, json_t *msg, json_t *id, sbx_mcp_send_fn send, void *ctx, bool *cancelled,
                         json_t *(*fn)(sbx_mcp_call *, json_t *, json_t *))
{
    json_t *params = json_object_get(msg, "params");
    sbx_error err = { 0 };
    sbx_mcp_call c = { .m = m, .id = id, .send = send, .ctx = ctx, .last_progress = -1 };
    c.progress_token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (!json_is_string(c.progress_token) && !json_is_integer(c.progress_token))
        c.progress_token = NULL;
    if (!(c.http = http_get(m, &err)))
        return sbx_mcp_error(id, SBX_RPC_INTERNAL, "%s", err.msg);
    call_begin(m, &c);
    json_t *res = fn(&c, params, id);
    *cancelled = call_end(m, &c);
    http_put(m, c.http);
    return res;
}

static void on_cancelled(sbx_mcp *m, json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    if (!rid)
        return;
    char sandbox[128] = "";
    long pid = 0;
    pthread_mutex_lock(&m->lock);
    for (sbx_mcp_call *c = m->calls; c; c = c->next)
        if (json_equal(c->id, rid)) {
            c->cancelled = true;
            if (c->pid > 0) {
                snprintf(sandbox, sizeof sandbox, "%s", c->sandbox);
                pid = c->pid;
                c->pid = 0;
            }
        }
    pthread_mutex_unlock(&m->lock);
    if (pid)
        kill_command(m, sandbox, pid);
}

void sbx_mcp_handle(sbx_mcp *m, json_t *msg, sbx_mcp_send_fn send, void *ctx)
{
    if (!json_is_object(msg)) {
        _cleanup_json_ json_t *e = sbx_mcp_error(NULL, SBX_RPC_INVALID_REQUEST, "a JSON-RPC message is an object");
        send(ctx, e);
        return;
    }
    json_t *method = json_object_get(msg, "method");
    json_t *id = json_object_get(msg, "id");
    if (!method) {
        if (!id || (!json_object_get(msg, "result") && !json_object_get(msg, "error"))) {
            _cleanup_json_ json_t *e = sbx_mcp_error(id, SBX_RPC_INVALID_REQUEST, "no 'method' in the message");
            send(ctx, e);
        }
        return; /* a response to a request of ours: we send none */
    }
    const char *name = json_string_value(method);
    if (!id) { /* a notification: never answered */
        if (name && strcmp(name, "notifications/cancelled") == 0)
            on_cancelled(m, json_object_get(msg, "params"));
        return;
    }
    _cleanup_json_ json_t *res = NULL;
    json_t *params = json_object_get(msg, "params");
    bool cancelled = false;
    pthread_mutex_lock(&m->lock);
    bool initialized = m->initialized;
    pthread_mutex_unlock(&m->lock);
    if (!json_is_string(id) && !json_is_integer(id))
        res = sbx_mcp_error(NULL, SBX_RPC_INVALID_REQUEST, "the id of a request is a string or an integer");
    else if (!json_is_string(json_object_get(msg, "jsonrpc")) ||
             strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0)
        res = sbx_mcp_error(id, SBX_RPC_INVALID_REQUEST, "\"jsonrpc\": \"2.0\" is missing");
    else if (!name)
        res = sbx_mcp_error(id, SBX_RPC_INVALID_REQUEST, "'method' must be a string");
    else if (params && !json_is_object(params))
        res = sbx_mcp_error(id, SBX_RPC_INVALID_PARAMS, "'params' must be an object");
    else if (strcmp(name, "initialize") == 0)
        res = do_initialize(m, params, id);
    else if (strcmp(name, "ping") == 0)
        res = result(id, NULL);
    else if (!initialized)
        res = sbx_mcp_error(id, SBX_RPC_INVALID_REQUEST, "send initialize first");
    else if (strcmp(name, "tools/list") == 0)
        res = do_tools_list(params, id);
    else if (strcmp(name, "tools/call") == 0)
        res = with_call(m, msg, id, send, ctx, &cancelled, do_tools_call);
    else if (strcmp(name, "resources/list") == 0)
        res = result(id, json_pack("{s:[]}", "resources"));
    else if (strcmp(name, "resources/templates/list") == 0)
        res = result(id, json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
                                   SBX_MCP_FILE_TEMPLATE, "name", "sandbox-file", "title", "A file in a sandbox",
                                   "description",
                                   "The bytes of a file in one of your sandboxes; path is relative to /home/user "
                                   "unless it starts with '/' (then: files//etc/hostname)."));
    else if (strcmp(name, "resources/read") == 0)
        res = with_call(m, msg, id, send, ctx, &cancelled, do_resources_read);
    else if (strcmp(name, "logging/setLevel") == 0)
        res = result(id, NULL); /* accepted; sbx sends no log messages */
    else
        res = sbx_mcp_error(id, SBX_RPC_METHOD_NOT_FOUND, "method '%s' is not supported by sbx", name);
    if (!res)
        res = sbx_mcp_error(id, SBX_RPC_INTERNAL, "out of memory");
    if (!cancelled)
        send(ctx, res);
}
