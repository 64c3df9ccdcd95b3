/* templates.c - `sbx template build|ls|info|rm`.
 *
 * build sends the spec and the build context as one tar (libarchive): the
 * spec as sbx-template.json at its top, then only what the spec names from
 * the context directory - each copy step's source and an archive `from` -
 * as they are on disk (symlinks stay symlinks).  sbxd streams the build's
 * events back; on a terminal they become a progress display. */
#define _GNU_SOURCE
#include "client.h"
#include "../../lib/cleanup.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { OPT_NO_CACHE = 0x100 };

static const struct option build_options[] = {
    { "file", required_argument, NULL, 'f' },
    { "name", required_argument, NULL, 'n' },
    { "context", required_argument, NULL, 'C' },
    { "no-cache", no_argument, NULL, OPT_NO_CACHE },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb template_verb = {
    .name = "template",
    .usage = "sbx template build -f FILE --name NAME [-C DIR] [--no-cache] | ls | info NAME | rm NAME...",
    .help = "\n"
            "build     build a template from the spec FILE (JSON, see docs/templates.md); the build\n"
            "          context is FILE's directory unless -C DIR says otherwise.  Steps already built\n"
            "          with the same inputs are reused (--no-cache runs them all again).\n"
            "ls        list the templates\n"
            "info      show a template: its layers, defaults, what uses it\n"
            "rm        remove templates (refused while sandboxes or snapshots use them)\n",
    .shortopts = "f:n:C:",
    .longopts = build_options,
    .stop_after = -1,
};

struct build_opts {
    const char *file, *name, *context;
    bool no_cache;
};

static int build_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    (void) err;
    struct build_opts *o = ctx;
    if (opt == 'f')
        o->file = arg;
    else if (opt == 'n')
        o->name = arg;
    else if (opt == 'C')
        o->context = arg;
    else if (opt == OPT_NO_CACHE)
        o->no_cache = true;
    return 0;
}

/* ---- the context tar ---- */

/* follow: the path itself may be a symlink to follow (an archive `from`
 * names a file, wherever it lives); nothing under it is followed */
static int add_path(struct archive *a, const char *ctxdir, const char *rel, int depth, bool follow, sbx_error *err)
{
    char full[8192];
    snprintf(full, sizeof full, "%s/%s", ctxdir, rel);
    struct stat st;
    if ((follow ? stat(full, &st) : lstat(full, &st)) < 0)
        return sbx_error_set(err, errno, "%s", full);
    if (depth > 64)
        return sbx_error_set(err, ELOOP, "%s: too deep", full);
    struct archive_entry *e = archive_entry_new();
    archive_entry_copy_stat(e, &st);
    archive_entry_set_pathname(e, rel);
    archive_entry_set_uid(e, 0); /* a copy step sets the owner */
    archive_entry_set_gid(e, 0);
    char target[4096];
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(full, target, sizeof target - 1);
        if (n < 0) {
            archive_entry_free(e);
            return sbx_error_set(err, errno, "readlink %s", full);
        }
        target[n] = '\0';
        archive_entry_set_symlink(e, target);
    } else if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        archive_entry_free(e);
        return 0; /* devices, fifos, sockets: nothing a template needs */
    }
    int r = archive_write_header(a, e);
    archive_entry_free(e);
    if (r != ARCHIVE_OK)
        return sbx_error_set(err, 0, "pack %s: %s", rel, archive_error_string(a));
    if (S_ISREG(st.st_mode)) {
        _cleanup_close_ int fd = open(full, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
        if (fd < 0)
            return sbx_error_set(err, errno, "open %s", full);
        char buf[65536];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0)
            if (archive_write_data(a, buf, (size_t) n) < 0)
                return sbx_error_set(err, 0, "pack %s: %s", rel, archive_error_string(a));
        if (n < 0)
            return sbx_error_set(err, errno, "read %s", full);
    } else if (S_ISDIR(st.st_mode)) {
        struct dirent **list;
        int k = scandir(full, &list, NULL, alphasort);
        if (k < 0)
            return sbx_error_set(err, errno, "list %s", full);
        int ret = 0;
        for (int i = 0; i < k; i++) {
            if (ret == 0 && strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, "..")) {
                char sub[8192];
                snprintf(sub, sizeof sub, "%s/%s", rel, list[i]->d_name);
                ret = add_path(a, ctxdir, sub, depth + 1, false, err);
            }
            free(list[i]);
        }
        free(list);
        return ret;
    }
    return 0;
}

/* A path of the spec: relative, inside the context, without "..". */
static int context_rel(const char *p, const char *what, sbx_error *err)
{
    if (!p || !*p || p[0] == '/')
        return sbx_error_set(err, 0, "%s '%s' must be a relative path in the build context", what, p ? p : "");
    for (const char *c = p; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
        if (strncmp(c, "..", 2) == 0 && (c[2] == '/' || !c[2]))
            return sbx_error_set(err, 0, "%s '%s' leaves the build context ('..')", what, p);
    return 0;
}

/* The spec and what it names from ctxdir, as a tar in a temporary file. */
static FILE *pack_context(const char *spec_text, json_t *spec, const char *ctxdir, int64_t *size, sbx_error *err)
{
    FILE *f = tmpfile();
    if (!f) {
        sbx_error_set(err, errno, "temporary file");
        return NULL;
    }
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (archive_write_open_FILE(a, f) != ARCHIVE_OK) {
        sbx_error_set(err, 0, "pack the build context: %s", archive_error_string(a));
        goto fail;
    }
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "sbx-template.json");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t) strlen(spec_text));
    archive_entry_set_mtime(e, time(NULL), 0);
    archive_write_header(a, e);
    archive_entry_free(e);
    archive_write_data(a, spec_text, strlen(spec_text));
    json_t *added = json_object();
    const char *from = json_string_value(json_object_get(spec, "from"));
    if (from && strncmp(from, "archive:", 8) == 0) {
        if (context_rel(from + 8, "from archive", err) < 0 || add_path(a, ctxdir, from + 8, 0, true, err) < 0) {
            json_decref(added);
            goto fail;
        }
        json_object_set_new(added, from + 8, json_true());
    }
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(spec, "steps"), i, s)
    {
        const char *src = json_string_value(json_object_get(json_object_get(s, "copy"), "src"));
        if (!src || json_object_get(added, src))
            continue;
        if (context_rel(src, "copy src", err) < 0 || add_path(a, ctxdir, src, 0, false, err) < 0) {
            sbx_error_wrap(err, "step %zu", i + 1);
            json_decref(added);
            goto fail;
        }
        json_object_set_new(added, src, json_true());
    }
    json_decref(added);
    if (archive_write_close(a) != ARCHIVE_OK) {
        sbx_error_set(err, 0, "pack the build context: %s", archive_error_string(a));
        goto fail;
    }
    archive_write_free(a);
    fflush(f);
    *size = ftello(f);
    rewind(f);
    return f;
fail:
    archive_write_free(a);
    fclose(f);
    return NULL;
}

/* ---- progress ----
 *
 * Not a terminal: plain lines, as a log wants them ("[2/5] run ...",
 * the step's output as it comes, "done in").  A terminal: the same lines
 * (the step's in bold, its output dimmed) and under them one live status
 * line - step N/M, its name, the time it has taken so far - redrawn in
 * place (\r, erase to the end of the line) every second while the step
 * runs, silent or not (a thread keeps the clock), and erased before
 * anything else is written, so output lines never mix with it.  Output
 * is written a whole line at a time for that (a line still open waits for
 * its end, the step's end, or 2 KiB). */

#define PARTIAL_MAX 2048
#define IDLE_TICK_MS 250 /* between steps: how soon a new one is noticed */

struct progress {
    pthread_mutex_t lock; /* the ticker thread draws too */
    pthread_cond_t wake;
    bool stop;
    bool tty, json;
    int64_t t0;           /* ms, the current step's start */
    int index, total;
    char step[256];
    bool running;         /* a step is running: the status line shows it */
    bool status_shown;    /* the status line is on the screen now */
    int64_t last_draw;
    char partial[PARTIAL_MAX + 1]; /* an output line not ended yet (terminal only) */
    size_t partial_len;
    bool at_line_start;
    json_t *result;
    char error[1024];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static unsigned term_columns(void)
{
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

static void status_clear(struct progress *p)
{
    if (!p->status_shown)
        return;
    fputs("\r\033[K", stderr);
    p->status_shown = false;
}

/* "[2/5]" or "[from]" (the import of an archive `from`) */
static void where(const struct progress *p, char *out, size_t len)
{
    if (p->index == 0)
        snprintf(out, len, "from");
    else
        snprintf(out, len, "%d/%d", p->index, p->total);
}

/* The status line, in place of the one on the screen.  It must fit the
 * terminal's width: a line that wraps cannot be erased with \r. */
static void status_draw(struct progress *p)
{
    if (!p->tty || p->json || !p->running)
        return;
    char w[32], elapsed[32];
    where(p, w, sizeof w);
    int64_t s = (now_ms() - p->t0) / 1000;
    if (s < 60)
        snprintf(elapsed, sizeof elapsed, "%llds", (long long) s);
    else
        snprintf(elapsed, sizeof elapsed, "%lldm%02llds", (long long) (s / 60), (long long) (s % 60));
    size_t cols = term_columns();
    size_t fixed = strlen(w) + 2 + 1 + strlen(elapsed) + 3 + 1; /* "[w] " " (elapsed)" and a spare column */
    size_t room = cols > fixed + 4 ? cols - fixed : 4;
    size_t n = strlen(p->step);
    bool cut = n > room;
    if (cut) { /* at a character's start, not inside a UTF-8 sequence */
        n = room - 3;
        while (n > 0 && ((unsigned char) p->step[n] & 0xC0) == 0x80)
            n--;
    }
    fprintf(stderr, "\r\033[K\033[36m[%s]\033[0m %.*s%s \033[2m(%s)\033[0m", w, (int) n, p->step, cut ? "..." : "",
            elapsed);
    p->status_shown = true;
    p->last_draw = now_ms();
}

static void out_dim(struct progress *p, const char *d, size_t n)
{
    if (!n)
        return;
    if (p->tty)
        fputs("\033[2m", stderr);
    fwrite(d, 1, n, stderr);
    if (p->tty)
        fputs("\033[0m", stderr);
    p->at_line_start = d[n - 1] == '\n';
}

/* The line still open, ended (a terminal's output is whole lines). */
static void partial_flush(struct progress *p)
{
    if (!p->partial_len)
        return;
    status_clear(p);
    out_dim(p, p->partial, p->partial_len);
    fputc('\n', stderr);
    p->at_line_start = true;
    p->partial_len = 0;
}

/* Output of a step, on a terminal: whole lines go out at once, with the
 * status line erased before and drawn again after. */
static void tty_output(struct progress *p, const char *d, size_t n)
{
    const char *nl = memrchr(d, '\n', n);
    if (nl) {
        status_clear(p);
        out_dim(p, p->partial, p->partial_len);
        p->partial_len = 0;
        out_dim(p, d, (size_t) (nl + 1 - d));
        n -= (size_t) (nl + 1 - d);
        d = nl + 1;
    }
    while (n) {
        size_t take = n < PARTIAL_MAX - p->partial_len ? n : PARTIAL_MAX - p->partial_len;
        memcpy(p->partial + p->partial_len, d, take);
        p->partial_len += take;
        d += take;
        n -= take;
        if (p->partial_len == PARTIAL_MAX)
            partial_flush(p);
    }
    status_draw(p);
}

/* The clock of the status line: a step may print nothing for minutes, and
 * the transfer's own callbacks come only about once a second. */
static void *ticker(void *arg)
{
    struct progress *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        /* until the step's next whole second (when its time shown changes) */
        int64_t now = now_ms(), wait = IDLE_TICK_MS;
        if (p->running)
            wait = 1000 - (now - p->t0) % 1000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += wait / 1000;
        ts.tv_nsec += wait % 1000 * 1000000L + 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->wake, &p->lock, &ts);
        /* each second shown as it passes */
        if (!p->stop && p->running && (now_ms() - p->t0) / 1000 != (p->last_draw - p->t0) / 1000) {
            status_draw(p);
            fflush(stderr);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int handle_event(struct progress *p, json_t *ev, sbx_error *err)
{
    (void) err;
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (!type)
        return 0;
    if (p->json) {
        sbx_cli_print_json(ev, false);
        fflush(stdout);
    }
    if (strcmp(type, "step") == 0) {
        partial_flush(p);
        status_clear(p);
        p->index = (int) json_integer_value(json_object_get(ev, "index"));
        p->total = (int) json_integer_value(json_object_get(ev, "total"));
        snprintf(p->step, sizeof p->step, "%s", json_string_value(json_object_get(ev, "step")) ?: "");
        p->t0 = now_ms();
        if (!p->json) {
            if (!p->at_line_start)
                fputc('\n', stderr);
            bool cached = json_is_true(json_object_get(ev, "cached"));
            char w[32];
            where(p, w, sizeof w);
            if (p->tty)
                fprintf(stderr, "\033[1m[%s]\033[0m %s%s\n", w, p->step, cached ? " \033[32m(cached)\033[0m" : "");
            else
                fprintf(stderr, "[%s] %s%s\n", w, p->step, cached ? " (cached)" : "");
            p->at_line_start = true;
            p->running = p->tty;
            status_draw(p);
        }
    } else if (strcmp(type, "output") == 0 && !p->json) {
        const char *d = json_string_value(json_object_get(ev, "data"));
        const char *enc = json_string_value(json_object_get(ev, "encoding"));
        if (d && (!enc || strcmp(enc, "utf-8") == 0)) {
            size_t n = json_string_length(json_object_get(ev, "data"));
            if (p->tty)
                tty_output(p, d, n);
            else
                out_dim(p, d, n);
        }
    } else if (strcmp(type, "step_done") == 0 && !p->json) {
        partial_flush(p);
        status_clear(p);
        p->running = false;
        int64_t ms = json_integer_value(json_object_get(ev, "ms"));
        if (ms >= 1000) {
            if (!p->at_line_start)
                fputc('\n', stderr);
            if (p->tty)
                fprintf(stderr, "\033[2m      done in %.1f s\033[0m\n", (double) ms / 1000);
            else
                fprintf(stderr, "      done in %.1f s\n", (double) ms / 1000);
            p->at_line_start = true;
        }
    } else if (strcmp(type, "done") == 0) {
        partial_flush(p);
        status_clear(p);
        p->running = false;
        p->result = json_incref(json_object_get(ev, "template"));
    } else if (strcmp(type, "error") == 0) {
        partial_flush(p);
        status_clear(p);
        p->running = false;
        snprintf(p->error, sizeof p->error, "%s", json_string_value(json_object_get(ev, "message")) ?: "build failed");
    }
    fflush(stderr);
    return 0;
}

static int on_event(void *ctx, json_t *ev, sbx_error *err)
{
    struct progress *p = ctx;
    pthread_mutex_lock(&p->lock);
    int r = handle_event(p, ev, err);
    pthread_mutex_unlock(&p->lock);
    return r;
}

static int build(sbx_cli *cli, const struct build_opts *o)
{
    sbx_error err = { 0 };
    if (!o->file || !o->name) {
        sbx_error_set(&err, 0, "build needs -f FILE and --name NAME");
        return sbx_cli_usage_error(&template_verb, &err);
    }
    size_t len;
    _cleanup_free_ char *text = NULL;
    FILE *sf = fopen(o->file, "re");
    if (!sf) {
        sbx_error_set(&err, errno, "%s", o->file);
        return sbx_cli_fail(&err);
    }
    text = calloc(1, 1 << 20);
    len = text ? fread(text, 1, (1 << 20) - 1, sf) : 0;
    fclose(sf);
    json_error_t je;
    _cleanup_json_ json_t *spec = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!spec) {
        sbx_error_set(&err, 0, "%s: not valid JSON: %s (line %d)", o->file, je.text, je.line);
        return sbx_cli_fail(&err);
    }
    char ctxdir[4096];
    if (o->context) {
        snprintf(ctxdir, sizeof ctxdir, "%s", o->context);
    } else {
        const char *slash = strrchr(o->file, '/');
        snprintf(ctxdir, sizeof ctxdir, "%.*s", slash ? (int) (slash - o->file) : 1, slash ? o->file : ".");
        if (!ctxdir[0])
            snprintf(ctxdir, sizeof ctxdir, "/");
    }
    int64_t size = 0;
    FILE *tar = pack_context(text, spec, ctxdir, &size, &err);
    if (!tar)
        return sbx_cli_fail(&err);
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h) {
        fclose(tar);
        return sbx_cli_fail(&err);
    }
    _cleanup_free_ char *name = sbx_http_escape(h, o->name, &err);
    char path[512];
    snprintf(path, sizeof path, "/v1/templates?name=%s%s", name ? name : "", o->no_cache ? "&no_cache=true" : "");
    struct progress p = { .lock = PTHREAD_MUTEX_INITIALIZER, .tty = isatty(2), .json = cli->json,
                          .at_line_start = true };
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p.wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t tick;
    bool ticking = p.tty && !p.json && pthread_create(&tick, NULL, ticker, &p) == 0;
    int r = name ? sbx_http_post_ndjson(h, path, "application/x-tar", tar, size, on_event, NULL, &p, &err) : -1;
    fclose(tar);
    pthread_mutex_lock(&p.lock);
    p.stop = true;
    pthread_cond_signal(&p.wake);
    partial_flush(&p);
    status_clear(&p); /* a transfer cut short leaves it on the screen */
    fflush(stderr);
    pthread_mutex_unlock(&p.lock);
    if (ticking)
        pthread_join(tick, NULL);
    pthread_cond_destroy(&p.wake);
    if (r < 0)
        return sbx_cli_fail(&err);
    if (!p.result) {
        sbx_error_set(&err, 0, "%s", p.error[0] ? p.error : "the build ended without a result");
        return sbx_cli_fail(&err);
    }
    if (!cli->json) {
        if (!p.at_line_start)
            fputc('\n', stderr);
        fprintf(stderr, "built template %s (%lld bytes in %zu layers)\n", o->name,
                (long long) json_integer_value(json_object_get(p.result, "size_bytes")),
                json_array_size(json_object_get(p.result, "layers")));
        printf("%s\n", json_string_value(json_object_get(p.result, "id")) ?: "");
    }
    json_decref(p.result);
    return 0;
}

static void print_cmd(const char *label, json_t *argv)
{
    if (!json_is_array(argv))
        return;
    printf("%-10s", label);
    size_t i;
    json_t *a;
    json_array_foreach(argv, i, a)
        printf(" %s", json_string_value(a));
    printf("\n");
}

int sbx_client_template(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    sbx_cli_args a;
    struct build_opts o = { 0 };
    int r = sbx_cli_parse(cli, &template_verb, argc, argv, build_option, &o, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&template_verb, &err);
    if (a.npos < 1) {
        sbx_error_set(&err, 0, "missing sub-command (build, ls, info, rm)");
        return sbx_cli_usage_error(&template_verb, &err);
    }
    const char *sub = a.pos[0];
    if (strcmp(sub, "build") == 0) {
        if (a.npos > 1) {
            sbx_error_set(&err, 0, "unexpected argument '%s'", a.pos[1]);
            return sbx_cli_usage_error(&template_verb, &err);
        }
        return build(cli, &o);
    }
    if (o.file || o.name || o.context || o.no_cache) {
        sbx_error_set(&err, 0, "-f, --name, -C and --no-cache belong to build");
        return sbx_cli_usage_error(&template_verb, &err);
    }
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h)
        return sbx_cli_fail(&err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (strcmp(sub, "ls") == 0) {
        if (sbx_http_json(h, "GET", "/v1/templates", NULL, &resp, &err) < 0)
            return sbx_cli_fail(&err);
        if (cli->json) {
            sbx_cli_print_raw(&resp);
            return 0;
        }
        printf("%-24s  %-32s  %-16s  %6s  %12s  %s\n", "NAME", "ID", "FROM", "LAYERS", "BYTES", "IN USE");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(resp.json, "templates"), i, t)
        {
            json_t *use = json_object_get(t, "in_use");
            printf("%-24s  %-32s  %-16s  %6zu  %12lld  %lld sandboxes, %lld snapshots\n",
                   json_string_value(json_object_get(t, "name")), json_string_value(json_object_get(t, "id")),
                   json_string_value(json_object_get(t, "from")) ?: "-", json_array_size(json_object_get(t, "layers")),
                   (long long) json_integer_value(json_object_get(t, "size_bytes")),
                   (long long) json_integer_value(json_object_get(use, "sandboxes")),
                   (long long) json_integer_value(json_object_get(use, "snapshots")));
        }
        return 0;
    }
    if (strcmp(sub, "info") == 0 || strcmp(sub, "rm") == 0) {
        if (a.npos < 2 || (strcmp(sub, "info") == 0 && a.npos > 2)) {
            sbx_error_set(&err, 0, strcmp(sub, "info") == 0 ? "info takes one template name" : "rm takes names");
            return sbx_cli_usage_error(&template_verb, &err);
        }
        int status = 0;
        for (int i = 1; i < a.npos; i++) {
            _cleanup_free_ char *e = sbx_http_escape(h, a.pos[i], &err);
            char path[512];
            _cleanup_http_resp_ sbx_http_resp rr = { 0 };
            if (!e || snprintf(path, sizeof path, "/v1/templates/%s", e) >= (int) sizeof path ||
                sbx_http_json(h, strcmp(sub, "rm") == 0 ? "DELETE" : "GET", path, NULL, &rr, &err) < 0) {
                status = sbx_cli_fail(&err);
                continue;
            }
            if (strcmp(sub, "rm") == 0)
                continue;
            if (cli->json) {
                sbx_cli_print_raw(&rr);
                continue;
            }
            json_t *t = rr.json;
            printf("%-10s %s\n%-10s %s\n", "name", json_string_value(json_object_get(t, "name")), "id",
                   json_string_value(json_object_get(t, "id")));
            if (json_object_get(t, "from"))
                printf("%-10s %s\n", "from", json_string_value(json_object_get(t, "from")));
            if (json_object_get(t, "created_at"))
                printf("%-10s %s\n", "created", json_string_value(json_object_get(t, "created_at")));
            printf("%-10s %lld\n", "bytes", (long long) json_integer_value(json_object_get(t, "size_bytes")));
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(t, "envs"), k, v)
                printf("%-10s %s=%s\n", "env", k, json_string_value(v));
            if (json_object_get(t, "user"))
                printf("%-10s %s\n", "user", json_string_value(json_object_get(t, "user")));
            if (json_object_get(t, "workdir"))
                printf("%-10s %s\n", "workdir", json_string_value(json_object_get(t, "workdir")));
            print_cmd("start", json_object_get(t, "start"));
            print_cmd("ready", json_object_get(t, "ready"));
            size_t j;
            json_array_foreach(json_object_get(t, "layers"), j, v)
                printf("%-10s %.12s %10lld  %s\n", "layer", json_string_value(json_object_get(v, "id")),
                       (long long) json_integer_value(json_object_get(v, "size_bytes")),
                       json_string_value(json_object_get(v, "step")));
            json_t *use = json_object_get(t, "in_use");
            printf("%-10s %lld sandboxes, %lld snapshots\n", "in use",
                   (long long) json_integer_value(json_object_get(use, "sandboxes")),
                   (long long) json_integer_value(json_object_get(use, "snapshots")));
        }
        return status;
    }
    sbx_error_set(&err, 0, "unknown sub-command '%s' (build, ls, info, rm)", sub);
    return sbx_cli_usage_error(&template_verb, &err);
}
