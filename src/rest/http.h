/* http.h - a REST client of sbxd: libcurl talking to its API, for sbx-client and the MCP tools.
 *
 * One function per kind of request.  Every function returns < 0 and fills
 * *err on failure; an error answer of the API ({"error":{"code","message"}})
 * becomes "message (code)", a refused connection names the URL and suggests
 * starting sbxd.  After any request sbx_http_status() and
 * sbx_http_error_code() tell callers which failure it was (a 404 from
 * files/stat means "no such path", not a reason to stop). */
#ifndef SBX_CLIENT_HTTP_H
#define SBX_CLIENT_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../lib/error.h"

typedef struct sbx_http sbx_http;

/* A successful response.  body is the raw text (NUL-terminated, also when
 * empty), json its parse (NULL when the body is empty). */
typedef struct sbx_http_resp {
    long status;
    char *body;
    size_t body_len;
    json_t *json;
} sbx_http_resp;

void sbx_http_resp_free(sbx_http_resp *r);
#define _cleanup_http_resp_ __attribute__((cleanup(sbx_http_resp_free)))

/* url: "http://host:port[/prefix]", "https://...", or "unix:/path/to.sock"
 * (also "unix:///path").  key: the API key, or NULL to send none. */
sbx_http *sbx_http_new(const char *url, const char *key, sbx_error *err);
void sbx_http_free(sbx_http *h);

/* The URL as given, for messages. */
const char *sbx_http_url(const sbx_http *h);
/* The last response's HTTP status (0: no response at all). */
long sbx_http_status(const sbx_http *h);
/* The last error answer's code ("not_found", ...), "" if there was none. */
const char *sbx_http_error_code(const sbx_http *h);

/* A bound on each whole request from now on, in milliseconds (0: none, the
 * default: a command may rightly run for hours, so the CLI and the MCP
 * tools set none).  A request that has not finished within it is cut and
 * fails with "no answer ... within N ms"; sbx_http_timed_out() then says
 * so.  `sbx fuzz` sets it before each request, so that a service that
 * hangs costs a test its deadline, not the run its end. */
void sbx_http_set_timeout(sbx_http *h, long ms);
/* Whether the last request failed because of that bound. */
bool sbx_http_timed_out(const sbx_http *h);

/* s percent-encoded for a path segment or query value (every byte but
 * RFC 3986's unreserved ones), in memory to free(). */
char *sbx_http_escape(sbx_http *h, const char *s, sbx_error *err);

/* method: "GET", "POST", "DELETE".  body: sent as application/json when not
 * NULL (a POST without one sends no Content-Type at all).  A 2xx answer
 * fills *resp; anything else is an error. */
int sbx_http_json(sbx_http *h, const char *method, const char *path, const json_t *body, sbx_http_resp *resp,
                  sbx_error *err);

/* Called for every JSON object of an ndjson answer, in order.  Returning
 * < 0 (with err filled) ends the transfer. */
typedef int (*sbx_http_line_fn)(void *ctx, json_t *line, sbx_error *err);
/* Called often while a stream is open (at least about once a second and
 * soon after a signal interrupted the wait).  Returning < 0 ends it. */
typedef int (*sbx_http_tick_fn)(void *ctx, sbx_error *err);

/* A request answered with application/x-ndjson: each line is handed to
 * on_line as it arrives. */
int sbx_http_ndjson(sbx_http *h, const char *method, const char *path, const json_t *body, sbx_http_line_fn on_line,
                    sbx_http_tick_fn tick, void *ctx, sbx_error *err);

/* POST the `size` bytes of `in` as content_type, the answer an ndjson
 * stream (as sbx_http_ndjson). */
int sbx_http_post_ndjson(sbx_http *h, const char *path, const char *content_type, FILE *in, int64_t size,
                         sbx_http_line_fn on_line, sbx_http_tick_fn tick, void *ctx, sbx_error *err);

/* PUT the bytes of `in` (streamed, never held whole).  size: the exact
 * number of bytes `in` will give, or -1 when unknown (a pipe): the body is
 * then sent chunked.  The JSON answer fills *resp. */
int sbx_http_upload(sbx_http *h, const char *path, FILE *in, int64_t size, sbx_http_resp *resp, sbx_error *err);

/* GET the body of path into `out` as it arrives (byte-exact). */
int sbx_http_download(sbx_http *h, const char *path, FILE *out, sbx_error *err);

#endif
