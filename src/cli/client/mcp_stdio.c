/* mcp_stdio.c - `sbx mcp`: the MCP server over stdio (docs/mcp.md).
 *
 * One JSON-RPC message per line on stdin, one per line on stdout; stdout
 * carries nothing else (a stray byte there breaks the client), so every
 * diagnostic goes to stderr.  Each request runs on a thread of its own, so
 * a command_run that takes minutes does not hold up a ping or the
 * notifications/cancelled aimed at it; writes to stdout are serialized.
 * At the end of stdin the commands of calls still running are killed and
 * their threads are waited for. */
#define _GNU_SOURCE
#include "client.h"
#include "../../mcp/mcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line longer than this is refused, and never held whole (files_write of
 * ~48 MiB of base64 fits). */
#define MAX_LINE (64u << 20)

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t run_done = PTHREAD_COND_INITIALIZER;
static int running;

static void send_line(void *ctx, json_t *msg)
{
    (void) ctx;
    char *s = json_dumps(msg, JSON_COMPACT); /* compact: no newline inside */
    if (!s)
        return;
    pthread_mutex_lock(&out_lock);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    free(s);
}

/* One line of stdin into *buf (without its newline), never holding more
 * than MAX_LINE: a longer one is read to its end and dropped (*too_long).
 * Returns its length, or -1 at the end of stdin. */
static ssize_t read_line(char **buf, size_t *cap, bool *too_long)
{
    size_t n = 0;
    int ch;
    *too_long = false;
    while ((ch = getc_unlocked(stdin)) != EOF && ch != '\n') {
        if (n >= MAX_LINE) {
            *too_long = true;
            continue;
        }
        if (n + 2 > *cap) {
            size_t c = *cap ? *cap * 2 : 4096;
            char *b = realloc(*buf, c);
            if (!b) {
                *too_long = true; /* no memory for it: refuse it like an overlong line */
                continue;
            }
            *buf = b;
            *cap = c;
        }
        (*buf)[n++] = (char) ch;
    }
    if (ch == EOF && n == 0 && !*too_long)
        return -1;
    if (*buf)
        (*buf)[n] = '\0';
    return (ssize_t) n;
}

struct job {
    sbx_mcp *m;
    json_t *msg;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    sbx_mcp_handle(j->m, j->msg, send_line, NULL);
    json_decref(j->msg);
    free(j);
    pthread_mutex_lock(&run_lock);
    running--;
    pthread_cond_broadcast(&run_done);
    pthread_mutex_unlock(&run_lock);
    return NULL;
}

static const sbx_cli_verb mcp_verb = {
    .name = "mcp",
    .usage = "sbx mcp",
    .help = "\nServe the sandbox tools over MCP on stdin/stdout (newline-delimited JSON-RPC), for an MCP\n"
            "client such as Claude Code: {\"command\": \"sbx\", \"args\": [\"mcp\"]}.  Talks to sbxd at\n"
            "SBX_URL (or --url) with SBX_API_KEY (or --key).  Logs go to stderr.  See docs/mcp.md.\n",
    .stop_after = -1,
};

int sbx_client_mcp(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    sbx_cli_args args;
    int r = sbx_cli_parse(cli, &mcp_verb, argc, argv, NULL, NULL, &args, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&mcp_verb, &err);
    if (args.npos > 0) {
        sbx_error_set(&err, 0, "unexpected argument '%s'", args.pos[0]);
        return sbx_cli_usage_error(&mcp_verb, &err);
    }
    if (!cli->key)
        fprintf(stderr, "sbx mcp: warning: no API key (SBX_API_KEY or --key): every tool will fail with 401\n");
    sbx_mcp *m = sbx_mcp_new(cli->url, cli->key, &err);
    if (!m)
        return sbx_cli_fail(&err);
    fprintf(stderr, "sbx mcp: serving on stdio, sbxd at %s\n", cli->url);

    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool too_long;
    while ((n = read_line(&line, &cap, &too_long)) >= 0) {
        while (n > 0 && line[n - 1] == '\r')
            line[--n] = '\0';
        if (n == 0 && !too_long)
            continue;
        json_error_t je;
        json_t *msg = too_long ? NULL : json_loadb(line, (size_t) n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!msg) {
            json_t *e = too_long
                            ? sbx_mcp_error(NULL, SBX_RPC_INVALID_REQUEST, "message longer than %u bytes", MAX_LINE)
                            : sbx_mcp_error(NULL, SBX_RPC_PARSE_ERROR, "not JSON: %s (column %d)", je.text,
                                            je.column);
            send_line(NULL, e);
            json_decref(e);
            continue;
        }
        if (json_is_array(msg)) {
            json_t *e = sbx_mcp_error(NULL, SBX_RPC_INVALID_REQUEST, "JSON-RPC batches are not supported");
            send_line(NULL, e);
            json_decref(e);
            json_decref(msg);
            continue;
        }
        const char *method = json_string_value(json_object_get(msg, "method"));
        /* notifications are quick, and initialize must be done before the
         * requests a hasty client sends right behind it: in order, here */
        if (!sbx_mcp_is_request(msg) || (method && strcmp(method, "initialize") == 0)) {
            sbx_mcp_handle(m, msg, send_line, NULL);
            json_decref(msg);
            continue;
        }
        struct job *j = malloc(sizeof *j);
        pthread_t t;
        pthread_mutex_lock(&run_lock);
        running++;
        pthread_mutex_unlock(&run_lock);
        if (!j || (j->m = m, j->msg = msg, pthread_create(&t, &attr, run_job, j) != 0)) {
            free(j);
            sbx_mcp_handle(m, msg, send_line, NULL); /* no thread: answer inline */
            json_decref(msg);
            pthread_mutex_lock(&run_lock);
            running--;
            pthread_mutex_unlock(&run_lock);
        }
    }
    free(line);
    /* the client is gone: nobody will read the answers still coming */
    sbx_mcp_cancel_all(m);
    pthread_mutex_lock(&run_lock);
    while (running > 0)
        pthread_cond_wait(&run_done, &run_lock);
    pthread_mutex_unlock(&run_lock);
    sbx_mcp_free(m);
    return 0;
}
