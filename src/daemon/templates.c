/* templates.c - template manifests, defaults, start command, removal. */
#define _GNU_SOURCE
#include "templates.h"
#include "api.h"
#include "layers.h"
#include "log.h"
#include "../lib/cleanup.h"
#include "../lib/fsutil.h"
#include "../lib/template.h"

#include <dirent.h>
#include <errno.h>
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
    sbx_store_template_use(d->store, json_string_value(json_object_get(o, "name")), &live, &snaps);
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

int sbx_tpl_remove(sbx_daemon *d, const char *name, sbx_error *err)
{
    const char *home = d->reg.home;
    if (strcmp(name, "base") == 0)
        return sbx_error_set(err, EPERM, "'base' is built in and cannot be removed");
    json_t *m = sbx_tpl_load(home, name);
    if (!m)
        return sbx_error_set(err, ENOENT, "no template '%s'", name);
    json_decref(m);
    int64_t live = 0, snaps = 0;
    if (sbx_store_template_use(d->store, name, &live, &snaps) < 0)
        return sbx_error_set(err, EIO, "cannot read the database");
    if (live || snaps) {
        sbx_error_set(err, 0, "template '%s' is in use by %lld live sandbox(es) and %lld snapshot(s)%s", name,
                      (long long) live, (long long) snaps,
                      live ? " (pooled ones count: a warm pool of it keeps it in use)" : "");
        err->errno_ = EBUSY;
        return -1;
    }
    /* out of sight first (a rename), then gone */
    char dir[4096], gone[4200];
    snprintf(dir, sizeof dir, "%s/templates/%s", home, name);
    snprintf(gone, sizeof gone, "%s/templates/.%s.removed.%d", home, name, (int) gettid());
    if (rename(dir, gone) < 0)
        return sbx_error_set(err, errno, "remove %s", dir);
    sbx_layer_remove(gone);

    /* The layers no template names and no live sandbox mounts: the build
     * cache of what is gone. */
    json_t *keep = json_object();
    snprintf(dir, sizeof dir, "%s/templates", home);
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
        /* a build in progress: its partial stack */
        snprintf(p, sizeof p, "%s/%s/stack", dir, e->d_name);
        _cleanup_free_ char *stack = sbx_read_file_alloc(p, NULL);
        for (char *s = stack, *nl; s && *s; s = nl ? nl + 1 : NULL) {
            nl = strchr(s, '\n');
            if (nl)
                *nl = '\0';
            char *slash = strrchr(s, '/');
            if (slash && (strncmp(s, "layer ", 6) == 0 || strncmp(s, "root ", 5) == 0))
                json_object_set_new(keep, slash + 1, json_true());
        }
    }
    if (dd)
        closedir(dd);
    size_t n;
    sbx_box **boxes = sbx_reg_snapshot(&d->reg, &n);
    for (size_t i = 0; i < n; i++) {
        for (const char *p = boxes[i]->tpl.layers; *p;) {
            const char *end = strchr(p, ':');
            size_t len = end ? (size_t) (end - p) : strlen(p);
            const char *slash = memrchr(p, '/', len);
            char key[128];
            if (slash && snprintf(key, sizeof key, "%.*s", (int) (len - (size_t) (slash + 1 - p)), slash + 1) > 0)
                json_object_set_new(keep, key, json_true());
            p = end ? end + 1 : p + len;
        }
        const char *slash = strrchr(boxes[i]->tpl.rootfs, '/');
        if (slash)
            json_object_set_new(keep, slash + 1, json_true());
        sbx_reg_put(&d->reg, boxes[i]);
    }
    free(boxes);
    char layers[4096];
    sbx_tpl_layers_dir(home, layers, sizeof layers);
    dd = opendir(layers);
    size_t removed = 0;
    while (dd && (e = readdir(dd))) {
        char key[256];
        snprintf(key, sizeof key, "%s", e->d_name);
        char *ext = strstr(key, ".json"); /* an image layer's config goes with its layer */
        if (ext && !ext[5])
            *ext = '\0';
        if (e->d_name[0] == '.' || json_object_get(keep, key))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", layers, e->d_name);
        sbx_layer_remove(p);
        removed++;
    }
    if (dd)
        closedir(dd);
    json_decref(keep);
    sbx_log("info", "event=template_removed template=%s layers_removed=%zu", name, removed);
    return 0;
}
