/* templates.c - template manifests, defaults, start command, removal. */
#define _GNU_SOURCE
#include "templates.h"
#include "api.h"
#include "layers.h"
#include "log.h"
#include "build.h"
#include "pool.h"
#include "../lib/cleanup.h"
#include "../lib/fsutil.h"
#include "../lib/template.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A readiness check that does not pass within this long fails the create,
 * unless the template says otherwise ("ready_timeout_s"). */
#define DEFAULT_READY_TIMEOUT_S 30
#define READY_POLL_MS 50

void sbx_tpl_layers_dir(const char *home, char *out, size_t len)
{
    snprintf(out, len, "%s/layers", home);
}

json_t *sbx_tpl_load(const char *home, const char *name)
{
    if (!sbx_template_name_valid(name))
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/%s/template.json", home, name);
    json_t *m = json_load_file(path, 0, NULL);
    if (m && json_is_object(m))
        return m;
    json_decref(m);
    struct stat st;
    snprintf(path, sizeof path, "%s/templates/%s/rootfs", home, name);
    if (strcmp(name, "base") != 0 && (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)))
        return NULL;
    /* base (made on first use) and hand-made trees: no build, no defaults */
    return json_pack("{s:s, s:s, s:b, s:[]}", "name", name, "id", name, "builtin", strcmp(name, "base") == 0,
                     "layers");
}

int sbx_tpl_resolve(const char *home, const char *name_or_id, char name_out[65])
{
    json_t *m = sbx_tpl_load(home, name_or_id);
    if (m) {
        snprintf(name_out, 65, "%s", name_or_id);
        json_decref(m);
        return 0;
    }
    if (strlen(name_or_id) != 32 || strspn(name_or_id, "0123456789abcdef") != 32)
        return -1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/templates", home);
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!sbx_template_name_valid(e->d_name))
            continue;
        json_t *t = sbx_tpl_load(home, e->d_name);
        const char *id = json_string_value(json_object_get(t, "id"));
        bool hit = id && strcmp(id, name_or_id) == 0;
        json_decref(t);
        if (hit) {
            snprintf(name_out, 65, "%s", e->d_name);
            return 0;
        }
    }
    return -1;
}

json_t *sbx_tpl_json(sbx_daemon *d, json_t *manifest)
{
    json_t *o = json_deep_copy(manifest);
    int64_t live = 0, snaps = 0;
    sbx_store_template_use(d->store, json_string_value(json_object_get(o, "name")), &live, &snaps, NULL);
    json_object_set_new(o, "in_use", json_pack("{s:I, s:I}", "sandboxes", (json_int_t) live, "snapshots",
                                               (json_int_t) snaps));
    json_t *at = json_object_get(o, "created_at");
    if (json_is_integer(at)) {
        char s[40];
        sbx_format_time(json_integer_value(at), s, sizeof s);
        json_object_set_new(o, "created_at", json_string(s));
    }
    return o;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *) a, "name")),
                  json_string_value(json_object_get(*(json_t *const *) b, "name")));
}

json_t *sbx_tpl_list(sbx_daemon *d)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/templates", d->reg.home);
    json_t *items[512];
    size_t n = 0;
    bool have_base = false;
    _cleanup_closedir_ DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd)) && n < sizeof items / sizeof *items) {
        if (!sbx_template_name_valid(e->d_name))
            continue; /* .build-*, .tmp: not templates yet */
        json_t *m = sbx_tpl_load(d->reg.home, e->d_name);
        if (!m)
            continue;
        have_base |= strcmp(e->d_name, "base") == 0;
        items[n++] = m;
    }
    if (!have_base && n < sizeof items / sizeof *items)
        items[n++] = sbx_tpl_load(d->reg.home, "base"); /* made on first use */
    qsort(items, n, sizeof *items, by_name);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(arr, sbx_tpl_json(d, items[i]));
        json_decref(items[i]);
    }
    return arr;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* argv from a manifest's ["a", "b"] */
static char **argv_of(json_t *a)
{
    size_t n = json_array_size(a);
    char **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = (char *) json_string_value(json_array_get(a, i));
    return v;
}

/* the last 300 bytes a readiness check printed */
struct tail {
    char buf[301];
    size_t len;
};
static void keep_tail(void *arg, int stream, const uint8_t *data, size_t len)
{
    (void) stream;
    struct tail *t = arg;
    if (len >= 300) {
        memcpy(t->buf, data + len - 300, 300);
        t->len = 300;
    } else {
        size_t keep = t->len + len > 300 ? 300 - len : t->len;
        memmove(t->buf, t->buf + t->len - keep, keep);
        memcpy(t->buf + keep, data, len);
        t->len = keep + len;
    }
    t->buf[t->len] = '\0';
}

int sbx_tpl_start(sbx_daemon *d, sbx_box *b, json_t *manifest, sbx_error *err)
{
    json_t *start = json_object_get(manifest, "start"), *ready = json_object_get(manifest, "ready");
    if (json_array_size(start) > 0) {
        _cleanup_free_ char **argv = argv_of(start);
        sbx_exec_opts o = { .argv = argv, .background = true };
        int code;
        if (!argv || sbx_box_exec(d, b, &o, &code, NULL, err) < 0)
            return sbx_error_wrap(err, "template start command");
    }
    if (json_array_size(ready) == 0)
        return 0;
    json_t *t = json_object_get(manifest, "ready_timeout_s");
    int64_t limit = json_is_integer(t) ? json_integer_value(t) : DEFAULT_READY_TIMEOUT_S;
    int64_t deadline = mono_ms() + limit * 1000;
    _cleanup_free_ char **argv = argv_of(ready);
    if (!argv)
        return sbx_error_set(err, ENOMEM, "readiness check");
    for (;;) {
        struct tail out = { .len = 0 };
        int64_t left = deadline - mono_ms();
        sbx_exec_opts o = { .argv = argv, .timeout_s = left > 1000 ? (unsigned) (left / 1000) : 1,
                            .on_output = keep_tail, .arg = &out };
        int code = -1;
        sbx_error e = { 0 };
        if (sbx_box_exec(d, b, &o, &code, NULL, &e) < 0)
            return sbx_error_set(err, e.errno_, "template readiness check: %s", e.msg);
        if (code == 0)
            return 0;
        if (mono_ms() >= deadline)
            return sbx_error_set(err, ETIMEDOUT, "template readiness check not passing after %lld s (%s)%s%s",
                                 (long long) limit, e.msg, out.len ? ": " : "", out.buf);
        struct timespec ts = { 0, READY_POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* Add every layer key a manifest names to `keep`. */
static void keep_layers(json_t *m, json_t *keep)
{
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(m, "layers"), i, l)
    {
        const char *id = json_string_value(json_object_get(l, "id"));
        if (id)
            json_object_set_new(keep, id, json_true());
    }
}

/* The last component of the path p[0..len) into keep. */
static void keep_path(const char *p, size_t len, json_t *keep)
{
    const char *slash = memrchr(p, '/', len);
    char key[256];
    if (slash && len - (size_t) (slash + 1 - p) < sizeof key) {
        snprintf(key, sizeof key, "%.*s", (int) (len - (size_t) (slash + 1 - p)), slash + 1);
        if (key[0])
            json_object_set_new(keep, key, json_true());
    }
}

void sbx_tpl_keep_stack(const char *stack, json_t *keep)
{
    for (const char *line = stack; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t) (nl - line) : strlen(line);
        if (len > 6 && strncmp(line, "layer ", 6) == 0)
            keep_path(line + 6, len - 6, keep);
        else if (len > 5 && strncmp(line, "root ", 5) == 0)
            keep_path(line + 5, len - 5, keep);
        line = nl ? nl + 1 : NULL;
    }
}

/* Layers of a ':'-joined list of paths, and a root path, into keep. */
static void keep_tpl(const sbx_template *t, json_t *keep)
{
    for (const char *p = t->layers; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        keep_path(p, len, keep);
        p = end ? end + 1 : p + len;
    }
    keep_path(t->rootfs, strlen(t->rootfs), keep);
}

/* Layers let go of (a rebuilt template's old version, a deleted snapshot's
 * template version) that something still used when they were: the next
 * sweeps try them again.  In memory only: after a restart they wait for a
 * template removal's full sweep. */
static pthread_mutex_t released_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *released;

bool sbx_tpl_released_pending(void)
{
    pthread_mutex_lock(&released_lock);
    bool any = json_object_size(released) > 0;
    pthread_mutex_unlock(&released_lock);
    return any;
}

size_t sbx_tpl_sweep_layers(sbx_daemon *d, bool all)
{
    const char *home = d->reg.home;
    char dir[4096], layers[4096];
    snprintf(dir, sizeof dir, "%s/templates", home);
    sbx_tpl_layers_dir(home, layers, sizeof layers);
    /* the candidates: every layer, or those let go of */
    pthread_mutex_lock(&released_lock);
    json_t *candidates = all ? NULL : released ? json_deep_copy(released) : json_object();
    pthread_mutex_unlock(&released_lock);
    if (!all && json_object_size(candidates) == 0) {
        json_decref(candidates);
        return 0;
    }
    json_t *keep = json_object();
    char (*doomed)[300] = NULL;
    size_t ndoomed = 0;

    /* From here until the unused layers are out of the way, nothing starts
     * to use a layer nobody records (layers.h). */
    sbx_layers_sweep_lock();
    /* what snapshots were made on: a sandbox made from one mounts it */
    json_t *stacks = sbx_store_snap_stacks(d->store);
    if (!stacks) {
        sbx_layers_sweep_unlock();
        json_decref(keep);
        json_decref(candidates);
        sbx_log("warn", "event=layers_sweep error=\"cannot read the snapshots: nothing removed\"");
        return 0;
    }
    size_t i;
    json_t *v;
    json_array_foreach(stacks, i, v)
        sbx_tpl_keep_stack(json_string_value(v), keep);
    json_decref(stacks);
    /* every template's version installed now, and partial templates of
     * builds (their stack) */
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        if (e->d_name[0] == '.' && strncmp(e->d_name, SBX_BUILD_TEMPLATE_PREFIX, strlen(SBX_BUILD_TEMPLATE_PREFIX)))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s/template.json", dir, e->d_name);
        json_t *t = json_load_file(p, 0, NULL);
        keep_layers(t, keep);
        json_decref(t);
        snprintf(p, sizeof p, "%s/%s/stack", dir, e->d_name);
        _cleanup_free_ char *stack = sbx_read_file_alloc(p, NULL);
        sbx_tpl_keep_stack(stack, keep);
    }
    if (dd)
        closedir(dd);
    /* what builds in progress stand on */
    sbx_build_keep_layers(keep);
    /* what live sandboxes mounted (a rebuilt template's old layers, too):
     * the one use that ends without telling (see below) */
    json_t *live = json_object();
    size_t n;
    sbx_box **boxes = sbx_reg_snapshot(&d->reg, &n);
    for (i = 0; boxes && i < n; i++) {
        keep_tpl(&boxes[i]->tpl, live);
        sbx_reg_put(&d->reg, boxes[i]);
    }
    free(boxes);
    /* the rest: out of sight now (a rename), removed after the lock */
    dd = opendir(layers);
    while (dd && (e = readdir(dd))) {
        char key[256];
        snprintf(key, sizeof key, "%s", e->d_name);
        char *ext = strstr(key, ".json"); /* an image layer's config goes with its layer */
        if (ext && !ext[5])
            *ext = '\0';
        if (e->d_name[0] == '.' || json_object_get(keep, key) || json_object_get(live, key) ||
            strlen(e->d_name) > 200 || (candidates && !json_object_get(candidates, key)))
            continue;
        void *nd = realloc(doomed, (ndoomed + 1) * sizeof *doomed);
        if (!nd)
            break;
        doomed = nd;
        char from[4400];
        snprintf(from, sizeof from, "%s/%s", layers, e->d_name);
        snprintf(doomed[ndoomed], sizeof doomed[ndoomed], ".%s.removed.%d", e->d_name, (int) gettid());
        char to[4400];
        snprintf(to, sizeof to, "%s/%s", layers, doomed[ndoomed]);
        if (rename(from, to) == 0)
            ndoomed++;
    }
    if (dd)
        closedir(dd);
    sbx_layers_sweep_unlock();
    /* A candidate that only live sandboxes still use stays let go of: when
     * they end, a later sweep frees it (the lifecycle thread's).  The others
     * are done with: removed now, or held by a template or a snapshot, which
     * let go of them themselves when they go. */
    pthread_mutex_lock(&released_lock);
    const char *k;
    void *tmp;
    json_object_foreach_safe(released, tmp, k, v)
    {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", layers, k);
        if ((all || json_object_get(candidates, k)) &&
            (!json_object_get(live, k) || json_object_get(keep, k) || access(p, F_OK) < 0))
            json_object_del(released, k);
    }
    pthread_mutex_unlock(&released_lock);
    json_decref(live);
    json_decref(keep);
    json_decref(candidates);
    for (i = 0; i < ndoomed; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", layers, doomed[i]);
        sbx_layer_remove(p);
    }
    free(doomed);
    if (ndoomed)
        sbx_log("info", "event=layers_removed count=%zu", ndoomed);
    return ndoomed;
}

size_t sbx_tpl_release_layers(sbx_daemon *d, json_t *keys)
{
    pthread_mutex_lock(&released_lock);
    if (!released)
        released = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(keys, k, v)
        json_object_set_new(released, k, json_true());
    pthread_mutex_unlock(&released_lock);
    return sbx_tpl_sweep_layers(d, false);
}

void sbx_tpl_keep_manifest(json_t *manifest, json_t *keep)
{
    keep_layers(manifest, keep);
    const char *root = json_string_value(json_object_get(manifest, "root"));
    if (root && strcmp(root, "base") != 0)
        json_object_set_new(keep, root, json_true());
}

static int remove_template(sbx_daemon *d, const char *name, sbx_error *err);

int sbx_tpl_remove(sbx_daemon *d, const char *name, sbx_error *err)
{
    const char *home = d->reg.home;
    if (strcmp(name, "base") == 0)
        return sbx_error_set(err, EPERM, "'base' is built in and cannot be removed");
    json_t *m = sbx_tpl_load(home, name);
    if (!m)
        return sbx_error_set(err, ENOENT, "no template '%s'", name);
    json_t *mine = json_object(); /* its layers, let go of below */
    sbx_tpl_keep_manifest(m, mine);
    json_decref(m);
    int r = remove_template(d, name, err);
    if (r == 0) {
        /* The layers nothing else uses: the build cache of what is gone
         * (all of them: leftovers of failed builds too).  Its own that a
         * pooled sandbox still ending holds go at a later sweep. */
        pthread_mutex_lock(&released_lock);
        if (!released)
            released = json_object();
        json_object_update(released, mine);
        pthread_mutex_unlock(&released_lock);
        size_t removed = sbx_tpl_sweep_layers(d, true);
        sbx_log("info", "event=template_removed template=%s layers_removed=%zu", name, removed);
    }
    json_decref(mine);
    return r;
}

static int remove_template(sbx_daemon *d, const char *name, sbx_error *err)
{
    const char *home = d->reg.home;
    int64_t live = 0, snaps = 0, pooled = 0;
    if (sbx_store_template_use(d->store, name, &live, &snaps, &pooled) < 0)
        return sbx_error_set(err, EIO, "cannot read the database");
    bool stopped_pool = false;
    if (live == pooled && snaps == 0) {
        /* only its warm pool uses it (or nothing): the pool stops, its
         * sandboxes end, and then nothing may use it any more */
        stopped_pool = sbx_pool_template_removed(d, name);
        if (sbx_store_template_use(d->store, name, &live, &snaps, &pooled) < 0)
            return sbx_error_set(err, EIO, "cannot read the database");
        live -= pooled; /* pooled ones left are being ended */
    } else {
        live -= pooled;
    }
    if (live || snaps) {
        if (stopped_pool) /* a create took one meanwhile: the template stays, and so does its pool */
            sbx_pool_template_changed(d, name);
        sbx_error_set(err, 0, "template '%s' is in use by %lld live sandbox(es) and %lld snapshot(s)", name,
                      (long long) live, (long long) snaps);
        err->errno_ = EBUSY;
        return -1;
    }
    /* out of sight first (a rename), then gone */
    char dir[4096], gone[4200];
    snprintf(dir, sizeof dir, "%s/templates/%s", home, name);
    snprintf(gone, sizeof gone, "%s/templates/.%s.removed.%d", home, name, (int) gettid());
    if (rename(dir, gone) < 0) {
        if (stopped_pool)
            sbx_pool_template_changed(d, name);
        return sbx_error_set(err, errno, "remove %s", dir);
    }
    sbx_layer_remove(gone);
    if (stopped_pool)
        sbx_log("info", "event=pool_stopped template=%s reason=\"template removed\"", name);
    return 0;
}

int sbx_tpl_pin(const char *home, const char *name, uid_t uid_base, sbx_template *t, json_t **manifest,
                sbx_error *err)
{
    /* The manifest and the stack are two files of one directory that a
     * rebuild swaps whole (RENAME_EXCHANGE): read between two swaps they
     * may be of different versions; their ids tell, and a second read
     * gets one version (a rebuild takes far longer than these reads). */
    for (int attempt = 0;; attempt++) {
        json_t *m = sbx_tpl_load(home, name);
        if (sbx_template_open(t, home, name, uid_base, err) < 0) {
            json_decref(m);
            return -1;
        }
        const char *mid = m && json_object_get(m, "key") ? json_string_value(json_object_get(m, "id")) : "";
        if (!m || strcmp(mid ? mid : "", t->id) == 0 || attempt == 4) {
            *manifest = m;
            return 0;
        }
        json_decref(m);
    }
}

json_t *sbx_tpl_start_pin(json_t *manifest)
{
    json_t *o = json_object();
    static const char *const keys[] = { "start", "ready", "ready_timeout_s", NULL };
    for (size_t i = 0; keys[i]; i++)
        if (json_object_get(manifest, keys[i]))
            json_object_set(o, keys[i], json_object_get(manifest, keys[i]));
    return o;
}

int sbx_tpl_row_pin(sbx_daemon *d, sbx_box_row *row, json_t **manifest, sbx_error *err)
{
    sbx_template *t = malloc(sizeof *t); /* 9 KiB: not on a request thread's stack */
    if (!t)
        return sbx_error_set(err, ENOMEM, "template");
    json_t *m = NULL;
    int r = sbx_tpl_pin(d->reg.home, row->template_name, d->reg.uid_base, t, &m, err);
    if (r == 0) {
        free(row->stack);
        row->stack = sbx_template_stack_text(t);
        snprintf(row->template_id, sizeof row->template_id, "%s", t->id);
        json_decref(row->start);
        row->start = sbx_tpl_start_pin(m);
        if (!row->stack)
            r = sbx_error_set(err, ENOMEM, "template stack");
    }
    free(t);
    if (r == 0 && manifest)
        *manifest = m;
    else
        json_decref(m);
    return r;
}
