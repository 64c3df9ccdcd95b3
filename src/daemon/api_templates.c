/* api_templates.c - /v1/templates: build (POST, a spec or a build context
 * as the body; events streamed as ndjson if asked), list, info, remove. */
#define _GNU_SOURCE
#include "api.h"
#include "build.h"
#include "templates.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct build_req {
    sbx_build *bd;
    int fd;     /* the events' read end, streaming */
} build_req;

static void build_req_free(void *p)
{
    build_req *c = p;
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd); /* a build still running sees EPIPE and stops */
    sbx_build_free(c->bd);
    free(c);
}

void sbx_api_template_build_begin(sbx_req *r)
{
    bool bad;
    const char *name = sbx_query(r, "name", &bad), *nc = bad ? NULL : sbx_query(r, "no_cache", &bad);
    if (bad)
        return;
    if (!name || !*name) {
        sbx_reply_error(r, 400, "invalid_request", "query parameter 'name' (the template's name) is required");
        return;
    }
    if (nc && strcmp(nc, "true") && strcmp(nc, "false") && strcmp(nc, "1") && strcmp(nc, "0")) {
        sbx_reply_error(r, 400, "invalid_request", "'no_cache' must be true or false");
        return;
    }
    const char *ct = sbx_header(r, "Content-Type");
    bool tar = ct && strncmp(ct, "application/x-tar", 17) == 0;
    if (!ct || (!tar && strncmp(ct, "application/json", 16) != 0)) {
        sbx_reply_error(r, 415, "unsupported_media_type",
                        "send the spec as application/json, or a build context (the spec as sbx-template.json at its "
                        "top, the files copy steps and an archive 'from' name) as application/x-tar");
        return;
    }
    build_req *c = calloc(1, sizeof *c);
    c->fd = -1;
    r->ctx = c;
    r->ctx_free = build_req_free;
    sbx_error err = { 0 };
    if (sbx_build_new(r->d, name, r->key.id, tar, nc && (strcmp(nc, "true") == 0 || strcmp(nc, "1") == 0), &c->bd,
                      &err) < 0) {
        if (err.errno_ == EBUSY)
            sbx_reply_error(r, 409, "conflict", "%s", err.msg);
        else if (err.errno_ == EINVAL || err.errno_ == EPERM)
            sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        else
            sbx_reply_sbx_error(r, &err);
    }
}

void sbx_api_template_build_data(sbx_req *r, const char *data, size_t len)
{
    build_req *c = r->ctx;
    sbx_error err = { 0 };
    if (c && c->bd && sbx_build_body(c->bd, data, len, &err) < 0) {
        if (err.errno_ == E2BIG)
            sbx_reply_error(r, 413, "too_large", "%s", err.msg);
        else
            sbx_reply_sbx_error(r, &err);
    }
}

static ssize_t events_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    build_req *c = cls;
    for (;;) {
        ssize_t n = read(c->fd, buf, max);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

void sbx_api_template_build(sbx_req *r)
{
    build_req *c = r->ctx;
    sbx_error err = { 0 };
    if (sbx_build_prepare(c->bd, &err) < 0) {
        sbx_reply_error(r, err.errno_ == EINVAL ? 400 : 500, err.errno_ == EINVAL ? "invalid_request" : "internal",
                        "%s", err.msg);
        return;
    }
    const char *accept = sbx_header(r, "Accept");
    if (accept && strstr(accept, "application/x-ndjson")) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
            sbx_reply_error(r, 503, "unavailable", "cannot start the build: out of file descriptors");
            return;
        }
        if (sbx_build_start(c->bd, p[1], &err) < 0) {
            close(p[0]);
            close(p[1]);
            sbx_reply_sbx_error(r, &err);
            return;
        }
        c->fd = p[0];
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, events_reader, c,
                                                                      build_req_free);
        r->ctx = NULL; /* the response owns it now */
        r->ctx_free = NULL;
        MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
        MHD_add_response_header(resp, "Cache-Control", "no-store");
        sbx_reply_response(r, 200, resp);
        return;
    }
    if (sbx_build_start(c->bd, -1, &err) < 0) {
        sbx_reply_sbx_error(r, &err);
        return;
    }
    int step;
    const char *tail;
    json_t *t = sbx_build_wait(c->bd, &err, &step, &tail);
    if (t) {
        sbx_reply_json(r, 201, t);
        return;
    }
    json_t *e = json_pack("{s:s, s:s}", "code", "build_failed", "message", err.msg);
    if (step)
        json_object_set_new(e, "step", json_integer(step));
    json_t *out = json_string(tail);
    if (out && *tail)
        json_object_set_new(e, "output", out);
    else
        json_decref(out);
    sbx_reply_json(r, 422, json_pack("{s:o}", "error", e));
}

void sbx_api_template_list(sbx_req *r)
{
    sbx_reply_json(r, 200, json_pack("{s:o}", "templates", sbx_tpl_list(r->d)));
}

void sbx_api_template_get(sbx_req *r)
{
    char name[65];
    json_t *m = sbx_tpl_resolve(r->d->reg.home, r->arg[0], name) == 0 ? sbx_tpl_load(r->d->reg.home, name) : NULL;
    if (!m) {
        sbx_reply_error(r, 404, "not_found", "no template '%s'", r->arg[0]);
        return;
    }
    sbx_reply_json(r, 200, sbx_tpl_json(r->d, m));
    json_decref(m);
}

void sbx_api_template_delete(sbx_req *r)
{
    char name[65];
    if (sbx_tpl_resolve(r->d->reg.home, r->arg[0], name) < 0) {
        sbx_reply_error(r, 404, "not_found", "no template '%s'", r->arg[0]);
        return;
    }
    sbx_error err = { 0 };
    if (sbx_tpl_remove(r->d, name, &err) < 0) {
        if (err.errno_ == EBUSY)
            sbx_reply_error(r, 409, "conflict", "%s", err.msg);
        else if (err.errno_ == EPERM)
            sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        else
            sbx_reply_sbx_error(r, &err);
        return;
    }
    sbx_reply_empty(r, 204);
}
