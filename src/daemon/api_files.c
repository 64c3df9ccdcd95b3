/* api_files.c - /v1/sandboxes/{id}/files: raw bytes in and out, listing,
 * stat, mkdir, move, delete.  Every operation is carried out by sbx-init
 * inside the sandbox as the sandbox user (src/init/files.h); this file
 * only moves bytes between HTTP and the control socket, streaming: an
 * upload or download of any size holds at most one piece in memory. */
#define _GNU_SOURCE
#include "agent.h"
#include "api.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIECE (512u << 10)
/* A write may wait for the disk (and the final rename) a while. */
#define FILE_TIMEOUT_MS 60000

typedef struct file_ctx {
    sbx_daemon *d;
    sbx_box *b;
    int fd;
    bool failed;       /* the sandbox side stopped taking data */
    uint64_t size, sent;
    uint8_t *piece;    /* download: a received DATA payload; upload: bytes being gathered */
    size_t piece_len, piece_off;
    bool done;
} file_ctx;

static void file_ctx_free(void *p)
{
    file_ctx *c = p;
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->b)
        sbx_reg_put(&c->d->reg, c->b);
    free(c->piece);
    free(c);
}

/* {uid, gid, home} for ?user= (default "user") then ?path= (required
 * unless `path_name` is NULL).  Replies and returns -1 on bad input. */
static int file_req(sbx_req *r, sbx_box *b, sbx_buf *req, const char *path_name, const char **path_out)
{
    bool bad;
    const char *who = sbx_query(r, "user", &bad);
    if (bad)
        return -1;
    sbx_user u;
    sbx_error err = { 0 };
    if (sbx_template_lookup_user(&b->tpl, who && *who ? who : "user", &u, &err) < 0) {
        sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        return -1;
    }
    sbx_buf_put_u32(req, u.uid);
    sbx_buf_put_u32(req, u.gid);
    sbx_buf_put_str(req, u.home);
    if (!path_name)
        return 0;
    const char *path = sbx_query(r, path_name, &bad);
    if (bad)
        return -1;
    if (!path || !*path) {
        sbx_reply_error(r, 400, "invalid_request", "query parameter '%s' is required", path_name);
        return -1;
    }
    if (strlen(path) > 4095) {
        sbx_reply_error(r, 400, "invalid_request", "path too long");
        return -1;
    }
    sbx_buf_put_str(req, path);
    if (path_out)
        *path_out = path;
    return 0;
}

static json_t *text_or_b64(const char *s, bool *b64)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    *b64 = true;
    size_t n = strlen(s), blen = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *b = malloc(blen);
    if (!b)
        return json_string("");
    sodium_bin2base64(b, blen, (const unsigned char *) s, n, sodium_base64_VARIANT_ORIGINAL);
    j = json_string(b);
    free(b);
    return j;
}

static json_t *entry_json(const sbx_entry *e)
{
    static const char *const types[] = { "", "file", "dir", "symlink", "other" };
    char mode[8], mtime[40];
    snprintf(mode, sizeof mode, "%04o", e->mode & 07777);
    sbx_format_time(e->mtime * 1000 + e->mtime_nsec / 1000000, mtime, sizeof mtime);
    bool b64 = false;
    json_t *o = json_object();
    json_object_set_new(o, "name", text_or_b64(e->name, &b64));
    json_object_set_new(o, "path", text_or_b64(e->path, &b64));
    json_object_set_new(o, "type", json_string(types[e->type]));
    json_object_set_new(o, "size", json_integer((json_int_t) e->size));
    json_object_set_new(o, "mode", json_string(mode));
    json_object_set_new(o, "mtime", json_string(mtime));
    if (e->type == SBX_FT_SYMLINK)
        json_object_set_new(o, "symlink_target", text_or_b64(e->target, &b64));
    /* names are bytes on Linux: one that is not UTF-8 comes base64'd */
    if (b64)
        json_object_set_new(o, "encoding", json_string("base64"));
    return o;
}

/* ---- upload ---- */

void sbx_api_file_put_begin(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    file_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->b = b;
    c->fd = -1;
    r->ctx = c;
    r->ctx_free = file_ctx_free;
    sbx_buf req = { 0 };
    if (file_req(r, b, &req, "path", NULL) < 0) {
        sbx_buf_free(&req);
        return;
    }
    bool bad;
    const char *mode_s = sbx_query(r, "mode", &bad);
    uint32_t mode = UINT32_MAX;
    if (bad) {
        sbx_buf_free(&req);
        return;
    }
    if (mode_s) {
        char *end;
        unsigned long m = strtoul(mode_s, &end, 8);
        if (!*mode_s || *end || m > 07777) {
            sbx_buf_free(&req);
            sbx_reply_error(r, 400, "invalid_request", "'mode' must be octal permission bits, such as 0644");
            return;
        }
        mode = (uint32_t) m;
    }
    sbx_buf_put_u32(&req, mode);
    uint8_t *p;
    size_t len;
    sbx_error err = { 0 };
    int rc = sbx_agent_call(b->sock, SBX_MSG_FILE_WRITE, req.data, req.len, &p, &len, &c->fd, &err);
    sbx_buf_free(&req);
    if (rc < 0) {
        sbx_reply_sbx_error(r, &err);
        return;
    }
    free(p);
}

/* Send what is gathered as one DATA frame. */
static void put_flush(file_ctx *c)
{
    if (c->piece_len && !c->failed && sbx_agent_send(c->fd, SBX_MSG_DATA, c->piece, c->piece_len) < 0)
        c->failed = true; /* the worker gave up (disk full...): its ERROR frame says why */
    c->piece_len = 0;
}

void sbx_api_file_put_data(sbx_req *r, const char *data, size_t len)
{
    file_ctx *c = r->ctx;
    if (!c || c->failed || c->fd < 0)
        return;
    /* libmicrohttpd hands the body over in pieces of its read buffer (tens
     * of KiB); gathering them into PIECE-sized frames keeps the frames, and
     * the worker's write() calls, few and large. */
    if (!c->piece && !(c->piece = malloc(PIECE))) {
        c->failed = true;
        return;
    }
    while (len && !c->failed) {
        size_t n = PIECE - c->piece_len < len ? PIECE - c->piece_len : len;
        memcpy(c->piece + c->piece_len, data, n);
        c->piece_len += n;
        data += n;
        len -= n;
        c->sent += n;
        if (c->piece_len == PIECE)
            put_flush(c);
    }
}

void sbx_api_file_put(sbx_req *r)
{
    file_ctx *c = r->ctx;
    if (!c || c->fd < 0) {
        sbx_reply_error(r, 500, "internal", "upload without a sandbox connection");
        return;
    }
    put_flush(c);
    if (!c->failed)
        sbx_agent_send(c->fd, SBX_MSG_DATA_END, NULL, 0);
    uint32_t type;
    uint8_t *p = NULL;
    size_t len;
    int rc = sbx_agent_recv(c->fd, FILE_TIMEOUT_MS, &type, &p, &len);
    sbx_error err = { 0 };
    if (rc <= 0) {
        sbx_reply_error(r, 503, "unavailable", "the sandbox did not confirm the upload");
    } else if (type == SBX_MSG_ERROR) {
        sbx_agent_error(p, len, &err);
        sbx_reply_sbx_error(r, &err);
    } else if (type == SBX_MSG_OK) {
        sbx_reader rd = { p, p + len, false };
        uint64_t size = sbx_read_u64(&rd);
        const char *abs = sbx_read_str(&rd);
        bool b64 = false;
        if (rd.bad)
            sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
        else
            sbx_reply_json(r, 200, json_pack("{s:o, s:I}", "path", text_or_b64(abs, &b64), "size", (json_int_t) size));
    } else {
        sbx_reply_error(r, 503, "unavailable", "unexpected answer from the sandbox");
    }
    free(p);
}

/* ---- download ---- */

static ssize_t download_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    file_ctx *c = cls;
    while (c->piece_off == c->piece_len) {
        free(c->piece);
        c->piece = NULL;
        c->piece_len = c->piece_off = 0;
        if (c->sent >= c->size)
            return MHD_CONTENT_READER_END_OF_STREAM;
        uint32_t type;
        size_t len;
        uint8_t *p;
        int rc = sbx_agent_recv(c->fd, FILE_TIMEOUT_MS, &type, &p, &len);
        if (rc <= 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (type != SBX_MSG_DATA) {
            /* DATA_END before the announced size (the file shrank), an
             * ERROR, or garbage: the client must see a broken transfer,
             * not a short file that looks complete */
            free(p);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        c->piece = p;
        /* never more than announced in Content-Length (the file grew) */
        c->piece_len = len > c->size - c->sent ? (size_t) (c->size - c->sent) : len;
        c->sent += c->piece_len;
    }
    size_t n = c->piece_len - c->piece_off;
    if (n > max)
        n = max;
    memcpy(buf, c->piece + c->piece_off, n);
    c->piece_off += n;
    return (ssize_t) n;
}

void sbx_api_file_get(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    file_ctx *c = calloc(1, sizeof *c);
    c->d = r->d;
    c->b = b;
    c->fd = -1;
    r->ctx = c;
    r->ctx_free = file_ctx_free;
    sbx_buf req = { 0 };
    if (file_req(r, b, &req, "path", NULL) < 0) {
        sbx_buf_free(&req);
        return;
    }
    uint8_t *p;
    size_t len;
    sbx_error err = { 0 };
    int rc = sbx_agent_call(b->sock, SBX_MSG_FILE_READ, req.data, req.len, &p, &len, &c->fd, &err);
    sbx_buf_free(&req);
    if (rc < 0) {
        sbx_reply_sbx_error(r, &err);
        return;
    }
    sbx_reader rd = { p, p + len, false };
    c->size = sbx_read_u64(&rd);
    free(p);
    if (rd.bad) {
        sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(c->size, PIECE, download_reader, c, file_ctx_free);
    r->ctx = NULL;
    r->ctx_free = NULL;
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    sbx_reply_response(r, 200, resp);
}

/* ---- the small operations ---- */

/* Send req, expect OK; on success returns the payload (caller frees). */
static uint8_t *simple_call(sbx_req *r, sbx_box *b, uint32_t type, sbx_buf *req, size_t *len)
{
    uint8_t *p = NULL;
    sbx_error err = { 0 };
    int rc = req->failed ? sbx_error_set(&err, E2BIG, "request too large")
                         : sbx_agent_call(b->sock, type, req->data, req->len, &p, len, NULL, &err);
    sbx_buf_free(req);
    if (rc < 0) {
        sbx_reply_sbx_error(r, &err);
        return NULL;
    }
    return p ? p : (uint8_t *) calloc(1, 1);
}

void sbx_api_file_delete(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    sbx_buf req = { 0 };
    bool bad;
    if (file_req(r, b, &req, "path", NULL) == 0) {
        const char *rec = sbx_query(r, "recursive", &bad);
        if (!bad) {
            sbx_buf_put_u32(&req, rec && (strcmp(rec, "true") == 0 || strcmp(rec, "1") == 0));
            size_t len;
            uint8_t *p = simple_call(r, b, SBX_MSG_FILE_REMOVE, &req, &len);
            if (p)
                sbx_reply_empty(r, 204);
            free(p);
        }
    }
    sbx_buf_free(&req);
    sbx_reg_put(&r->d->reg, b);
}

void sbx_api_file_stat(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    sbx_buf req = { 0 };
    if (file_req(r, b, &req, "path", NULL) == 0) {
        size_t len;
        uint8_t *p = simple_call(r, b, SBX_MSG_FILE_STAT, &req, &len);
        if (p) {
            sbx_reader rd = { p, p + len, false };
            sbx_entry e;
            if (sbx_entry_decode(&rd, &e) < 0)
                sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
            else
                sbx_reply_json(r, 200, entry_json(&e));
            free(p);
        }
    }
    sbx_buf_free(&req);
    sbx_reg_put(&r->d->reg, b);
}

void sbx_api_file_list(sbx_req *r)
{
    sbx_box *b = sbx_req_box(r);
    if (!b)
        return;
    sbx_buf req = { 0 };
    bool bad;
    const char *path = sbx_query(r, "path", &bad);
    const char *depth_s = bad ? NULL : sbx_query(r, "depth", &bad);
    int fd = -1;
    json_t *arr = NULL;
    if (bad)
        goto out;
    unsigned long depth = 1;
    if (depth_s) {
        char *end;
        depth = strtoul(depth_s, &end, 10);
        if (!*depth_s || *end || depth < 1 || depth > 16) {
            sbx_reply_error(r, 400, "invalid_request", "'depth' must be 1-16");
            goto out;
        }
    }
    if (file_req(r, b, &req, NULL, NULL) < 0)
        goto out;
    sbx_buf_put_str(&req, path && *path ? path : ".");
    sbx_buf_put_u32(&req, (uint32_t) depth);
    sbx_error err = { 0 };
    if ((fd = sbx_agent_connect(b->sock, &err)) < 0 || sbx_agent_send(fd, SBX_MSG_FILE_LIST, req.data, req.len) < 0) {
        sbx_reply_error(r, 503, "unavailable", "cannot reach the sandbox");
        goto out;
    }
    arr = json_array();
    for (;;) {
        uint32_t type;
        uint8_t *p;
        size_t len;
        int rc = sbx_agent_recv(fd, SBX_AGENT_TIMEOUT_MS, &type, &p, &len);
        if (rc <= 0) {
            sbx_reply_error(r, 503, "unavailable", "the sandbox did not finish the listing");
            goto out;
        }
        if (type == SBX_MSG_DATA_END) {
            free(p);
            break;
        }
        if (type == SBX_MSG_ERROR) {
            sbx_agent_error(p, len, &err);
            free(p);
            sbx_reply_sbx_error(r, &err);
            goto out;
        }
        sbx_reader rd = { p, p + len, false };
        sbx_entry e;
        if (type != SBX_MSG_ENTRY || sbx_entry_decode(&rd, &e) < 0) {
            free(p);
            sbx_reply_error(r, 503, "unavailable", "malformed listing from the sandbox");
            goto out;
        }
        json_array_append_new(arr, entry_json(&e));
        free(p);
    }
    sbx_reply_json(r, 200, json_pack("{s:O}", "entries", arr));
out:
    json_decref(arr);
    if (fd >= 0)
        close(fd);
    sbx_buf_free(&req);
    sbx_reg_put(&r->d->reg, b);
}

void sbx_api_file_mkdir(sbx_req *r)
{
    static const char *const fields[] = { "path", "parents", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    const char *path = NULL;
    bool parents = true;
    sbx_box *b = NULL;
    sbx_buf req = { 0 };
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_string(r, j, "path", &path) < 0 ||
        sbx_json_bool(r, j, "parents", &parents) < 0)
        goto out;
    if (!path || !*path) {
        sbx_reply_error(r, 400, "invalid_request", "'path' is required");
        goto out;
    }
    if (!(b = sbx_req_box(r)) || file_req(r, b, &req, NULL, NULL) < 0)
        goto out;
    sbx_buf_put_str(&req, path);
    sbx_buf_put_u32(&req, parents);
    size_t len;
    uint8_t *p = simple_call(r, b, SBX_MSG_FILE_MKDIR, &req, &len);
    if (p) {
        sbx_reader rd = { p, p + len, false };
        uint32_t created = sbx_read_u32(&rd);
        const char *abs = sbx_read_str(&rd);
        bool b64 = false;
        if (rd.bad)
            sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
        else
            sbx_reply_json(r, created ? 201 : 200,
                           json_pack("{s:o, s:b}", "path", text_or_b64(abs, &b64), "created", created != 0));
        free(p);
    }
out:
    sbx_buf_free(&req);
    if (b)
        sbx_reg_put(&r->d->reg, b);
    json_decref(j);
}

void sbx_api_file_move(sbx_req *r)
{
    static const char *const fields[] = { "from", "to", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    const char *from = NULL, *to = NULL;
    sbx_box *b = NULL;
    sbx_buf req = { 0 };
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_string(r, j, "from", &from) < 0 ||
        sbx_json_string(r, j, "to", &to) < 0)
        goto out;
    if (!from || !*from || !to || !*to) {
        sbx_reply_error(r, 400, "invalid_request", "'from' and 'to' are required");
        goto out;
    }
    if (!(b = sbx_req_box(r)) || file_req(r, b, &req, NULL, NULL) < 0)
        goto out;
    sbx_buf_put_str(&req, from);
    sbx_buf_put_str(&req, to);
    size_t len;
    uint8_t *p = simple_call(r, b, SBX_MSG_FILE_MOVE, &req, &len);
    if (p) {
        sbx_reader rd = { p, p + len, false };
        const char *abs = sbx_read_str(&rd);
        bool b64 = false;
        if (rd.bad)
            sbx_reply_error(r, 503, "unavailable", "malformed answer from the sandbox");
        else
            sbx_reply_json(r, 200, json_pack("{s:o}", "path", text_or_b64(abs, &b64)));
        free(p);
    }
out:
    sbx_buf_free(&req);
    if (b)
        sbx_reg_put(&r->d->reg, b);
    json_decref(j);
}
