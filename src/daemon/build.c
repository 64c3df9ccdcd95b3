/* build.c - building a template from its spec.
 *
 * A spec (docs/templates.md) names where the file system comes `from` -
 * `base`, another template, or an image archive in the build context -
 * and a list of steps.  Each step that changes files becomes a layer,
 * HOME/layers/<key>, where key is a SHA-256 over the key before it and
 * the step (and, for `copy`, the bytes copied): a step whose key exists is
 * not run again, so an unchanged prefix of steps costs nothing, and two
 * templates that share a prefix share its layers.
 *
 *   run      runs in a build sandbox: a sandbox of the template so far
 *            (its layers stacked as lower layers, like any sandbox),
 *            as root unless a `user` step said otherwise, without network.
 *            Its writable layer, captured like a snapshot, is the layer.
 *   copy     writes the context's file or tree into a new layer on the
 *            host, owned by root (or "owner"), its parent directories
 *            taking the modes of the ones they lie over.
 *   env, workdir, user, start, ready
 *            change the defaults only; they still enter the keys after
 *            them (a `run` after a changed env runs again).
 *
 * The finished template is a directory written aside and renamed into
 * HOME/templates/<name> (template.h: `stack` and template.json), so a
 * sandbox never sees half a template; rebuilding a name swaps the
 * directory, and sandboxes still running on the old layers keep them (a
 * layer is removed only when no template and no live sandbox uses it). */
#define _GNU_SOURCE
#include "build.h"
#include "api.h"
#include "auth.h"
#include "egress.h"
#include "image.h"
#include "layers.h"
#include "log.h"
#include "pool.h"
#include "templates.h"
#include "../lib/cleanup.h"
#include "../lib/fsutil.h"
#include "../lib/template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_STEPS 128
#define SPEC_NAME "sbx-template.json"
/* build sandboxes: generous defaults, the spec's "build" object overrides */
#define BUILD_MEMORY_MB 2048
#define BUILD_DISK_MB 4096
#define BUILD_STEP_TIMEOUT_S 1800
/* Bounds on what a client's archives may unpack to (a compressed tar can
 * expand a thousandfold): the build context at most as much as an upload
 * may be, an imported image this much. */
#define SPEC_MAX (1u << 20)
#define IMAGE_MAX_BYTES (64ULL << 30)

struct sbx_build {
    sbx_daemon *d;
    char id[33];
    char name[65];
    char key_id[17];
    char dir[4096];           /* HOME/builds/<id>: the body, the context */
    json_t *spec;
    bool no_cache;
    int out_fd;               /* the event stream's write end, -1: none */
    int cancel;               /* the client went away */
    int body_fd;
    uint64_t body_len;
    bool tar_body;
    bool started;             /* the thread owns the name from then on */
    pthread_t thread;
    /* the template so far */
    char root[65];            /* "base" or the key of an imported image's layer */
    json_t *layers;           /* [{id, step, size_bytes}], bottom first */
    json_t *steps;            /* what each step did, for template.json */
    char key[65];
    json_t *defaults;         /* envs, workdir, user, start, ready */
    /* the outcome */
    json_t *result;           /* the template's JSON, on success */
    sbx_error err;
    int failed_step;          /* 1-based; 0: not a step's fault */
    char tail[2048];          /* the failed run step's last output */
    size_t tail_len;
    struct sbx_build *next;   /* on the list of builds running (`active`) */
    json_t *released;         /* a rebuild: the old version's layer keys */
};

/* Builds running, for the sweep of unused layers: what each stands on
 * (root, layers, the key of its current step) is changed only under
 * sbx_layers_use_lock and read under sbx_layers_sweep_lock (layers.h);
 * the list itself under active_lock. */
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static sbx_build *active;

static void activate(sbx_build *bd, bool on)
{
    pthread_mutex_lock(&active_lock);
    sbx_build **pp = &active;
    while (*pp && *pp != bd)
        pp = &(*pp)->next;
    if (on && !*pp) {
        bd->next = NULL;
        *pp = bd;
    } else if (!on && *pp) {
        *pp = bd->next;
    }
    pthread_mutex_unlock(&active_lock);
}

void sbx_build_keep_layers(json_t *keep)
{
    pthread_mutex_lock(&active_lock);
    for (sbx_build *bd = active; bd; bd = bd->next) {
        if (bd->root[0])
            json_object_set_new(keep, bd->root, json_true());
        if (bd->key[0])
            json_object_set_new(keep, bd->key, json_true());
        size_t i;
        json_t *l;
        json_array_foreach(bd->layers, i, l)
        {
            const char *id = json_string_value(json_object_get(l, "id"));
            if (id)
                json_object_set_new(keep, id, json_true());
        }
    }
    pthread_mutex_unlock(&active_lock);
}

/* Names being built: one build per name at a time. */
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char building[64][65];

static bool claim_name(const char *name)
{
    pthread_mutex_lock(&names_lock);
    int free_slot = -1;
    bool busy = false;
    for (int i = 0; i < 64; i++) {
        if (strcmp(building[i], name) == 0)
            busy = true;
        else if (!building[i][0] && free_slot < 0)
            free_slot = i;
    }
    bool ok = !busy && free_slot >= 0;
    if (ok)
        snprintf(building[free_slot], sizeof building[free_slot], "%s", name);
    pthread_mutex_unlock(&names_lock);
    return ok;
}

static void release_name(const char *name)
{
    pthread_mutex_lock(&names_lock);
    for (int i = 0; i < 64; i++)
        if (strcmp(building[i], name) == 0)
            building[i][0] = '\0';
    pthread_mutex_unlock(&names_lock);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- events ------------------------------------------------------------ */

static void emit(sbx_build *bd, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s || bd->out_fd < 0) {
        free(s);
        return;
    }
    size_t n = strlen(s);
    s[n] = '\n'; /* the terminator becomes the line's end */
    for (size_t off = 0; off < n + 1;) {
        ssize_t w = write(bd->out_fd, s + off, n + 1 - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) { /* the client has gone: stop building */
            __atomic_store_n(&bd->cancel, 1, __ATOMIC_RELAXED);
            close(bd->out_fd);
            bd->out_fd = -1;
            break;
        }
        off += (size_t) w;
    }
    free(s);
}

static void on_output(void *arg, int stream, const uint8_t *data, size_t len)
{
    sbx_build *bd = arg;
    /* keep the end for the error message */
    if (len >= sizeof bd->tail - 1) {
        memcpy(bd->tail, data + len - (sizeof bd->tail - 1), sizeof bd->tail - 1);
        bd->tail_len = sizeof bd->tail - 1;
    } else {
        size_t keep = bd->tail_len + len > sizeof bd->tail - 1 ? sizeof bd->tail - 1 - len : bd->tail_len;
        memmove(bd->tail, bd->tail + bd->tail_len - keep, keep);
        memcpy(bd->tail + keep, data, len);
        bd->tail_len = keep + len;
    }
    bd->tail[bd->tail_len] = '\0';
    json_t *s = json_stringn((const char *) data, len);
    const char *enc = "utf-8";
    if (!s) {
        size_t blen = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
        char *b = malloc(blen);
        if (!b)
            return;
        sodium_bin2base64(b, blen, data, len, sodium_base64_VARIANT_ORIGINAL);
        s = json_string(b);
        free(b);
        enc = "base64";
    }
    emit(bd, json_pack("{s:s, s:s, s:o, s:s}", "type", "output", "stream", stream == 2 ? "stderr" : "stdout", "data",
                       s, "encoding", enc));
}

/* --- keys -------------------------------------------------------------- */

static void hex(const unsigned char *md, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* key = sha256(prev "\n" step-json ["\n" extra]) */
static void next_key(char key[65], json_t *step, const char *extra)
{
    char *js = json_dumps(step, JSON_COMPACT | JSON_SORT_KEYS);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, key, strlen(key));
    EVP_DigestUpdate(c, "\n", 1);
    if (js)
        EVP_DigestUpdate(c, js, strlen(js));
    if (extra) {
        EVP_DigestUpdate(c, "\n", 1);
        EVP_DigestUpdate(c, extra, strlen(extra));
    }
    unsigned char md[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(c, md, &n);
    EVP_MD_CTX_free(c);
    free(js);
    hex(md, 32, key);
}

/* The bytes of fd from offset 0. */
static int hash_fd(EVP_MD_CTX *c, int fd, const char *name, sbx_error *err)
{
    char buf[65536];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
        EVP_DigestUpdate(c, buf, (size_t) n);
        off += n;
    }
    return n < 0 ? sbx_error_set(err, errno, "read %s", name) : 0;
}

static int hash_file(EVP_MD_CTX *c, int dirfd, const char *name, sbx_error *err)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "read %s", name);
    return hash_fd(c, fd, name, err);
}

/* What a tree is, in a stable order: names, types, modes, sizes, bytes,
 * link targets.  Owners and times are not: a copy step sets its own. */
static int hash_tree(EVP_MD_CTX *c, int dirfd, const char *name, int depth, sbx_error *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return sbx_error_set(err, errno, "stat %s", name);
    char head[4200];
    int n = snprintf(head, sizeof head, "%s\n%o\n%lld\n", name, (unsigned) st.st_mode, (long long) st.st_size);
    EVP_DigestUpdate(c, head, (size_t) n);
    if (S_ISREG(st.st_mode))
        return hash_file(c, dirfd, name, err);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t l = readlinkat(dirfd, name, target, sizeof target);
        if (l > 0)
            EVP_DigestUpdate(c, target, (size_t) l);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return 0;
    if (depth > 64)
        return sbx_error_set(err, ELOOP, "%s: too deep", name);
    _cleanup_close_ int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return sbx_error_set(err, errno, "open %s", name);
    struct dirent **list;
    int k = scandirat(sub, ".", &list, NULL, alphasort);
    if (k < 0)
        return sbx_error_set(err, errno, "list %s", name);
    int ret = 0;
    for (int i = 0; i < k; i++) {
        if (ret == 0 && strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
            ret = hash_tree(c, sub, list[i]->d_name, depth + 1, err);
        free(list[i]);
    }
    free(list);
    return ret;
}

static int hash_path(const char *path, char out[65], sbx_error *err)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int) (slash - path) : 1, slash ? path : ".");
    _cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int r = dfd < 0 ? sbx_error_set(err, errno, "open %s", dir)
                    : hash_tree(c, dfd, slash ? slash + 1 : path, 0, err);
    unsigned char md[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(c, md, &n);
    EVP_MD_CTX_free(c);
    hex(md, 32, out);
    return r;
}

/* --- the spec ------------------------------------------------------------ */

/* A command: a shell string or a non-empty argv array. */
static json_t *command_argv(json_t *v)
{
    if (json_is_string(v) && json_string_length(v) && strlen(json_string_value(v)) == json_string_length(v))
        return json_pack("[s, s, s]", "/bin/sh", "-c", json_string_value(v));
    if (!json_is_array(v) || json_array_size(v) == 0)
        return NULL;
    size_t i;
    json_t *a;
    json_array_foreach(v, i, a)
    {
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
            return NULL;
    }
    return json_incref(v);
}

static bool clean_abs_path(const char *p)
{
    if (p[0] != '/' || strlen(p) > 1000)
        return false;
    for (const char *c = p; *c; c = strchr(c, '/') ? strchr(c, '/') + 1 : c + strlen(c)) {
        if (strncmp(c, "..", 2) == 0 && (c[2] == '/' || !c[2]))
            return false;
        if (!strchr(c, '/'))
            break;
    }
    return true;
}

static bool clean_rel_path(const char *p)
{
    if (!p[0] || p[0] == '/' || strlen(p) > 1000)
        return false;
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "/%s", p);
    return clean_abs_path(tmp);
}

static bool only_fields(json_t *o, const char *const *allowed, char *bad, size_t len)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(k, allowed[i]) == 0;
        if (!ok) {
            snprintf(bad, len, "%s", k);
            return false;
        }
    }
    return true;
}

static bool int_field(json_t *o, const char *name, int64_t min, int64_t max)
{
    json_t *v = json_object_get(o, name);
    return !v || (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= max);
}

/* Check a spec before anything runs: 0, or -1 with a message for a 400. */
int sbx_build_check_spec(json_t *spec, sbx_error *err)
{
    static const char *const top[] = { "from", "steps", "cpus", "memory_mb", "disk_mb", "timeout_s",
                                       "ready_timeout_s", "build", NULL };
    static const char *const build_fields[] = { "memory_mb", "disk_mb", "timeout_s", "network", NULL };
    static const char *const copy_fields[] = { "src", "dest", "owner", NULL };
    char bad[256];
    if (!json_is_object(spec))
        return sbx_error_set(err, EINVAL, "the spec must be a JSON object");
    if (!only_fields(spec, top, bad, sizeof bad))
        return sbx_error_set(err, EINVAL, "unknown field '%s' in the spec (fields: from, steps, cpus, memory_mb, "
                                          "disk_mb, timeout_s, ready_timeout_s, build)", bad);
    json_t *from = json_object_get(spec, "from");
    if (!json_is_string(from) || !json_string_length(from))
        return sbx_error_set(err, EINVAL, "'from' must be \"base\", a template's name, or \"archive:PATH\"");
    const char *f = json_string_value(from);
    if (strncmp(f, "archive:", 8) == 0 ? !clean_rel_path(f + 8) : !sbx_template_name_valid(f))
        return sbx_error_set(err, EINVAL, "bad 'from' \"%s\": use \"base\", a template's name, or \"archive:PATH\" "
                                          "(PATH relative, inside the build context)", f);
    json_t *cpus = json_object_get(spec, "cpus");
    if (cpus && (!json_is_number(cpus) || json_number_value(cpus) < 0.01 || json_number_value(cpus) > 1024))
        return sbx_error_set(err, EINVAL, "'cpus' must be a number from 0.01");
    if (!int_field(spec, "memory_mb", 16, 1 << 24) || !int_field(spec, "disk_mb", 1, 1 << 20) ||
        !int_field(spec, "timeout_s", 1, 86400) || !int_field(spec, "ready_timeout_s", 1, 3600))
        return sbx_error_set(err, EINVAL, "memory_mb, disk_mb, timeout_s, ready_timeout_s must be integers in range");
    json_t *b = json_object_get(spec, "build");
    if (b && (!json_is_object(b) || !only_fields(b, build_fields, bad, sizeof bad) ||
              !int_field(b, "memory_mb", 64, 1 << 24) || !int_field(b, "disk_mb", 16, 1 << 20) ||
              !int_field(b, "timeout_s", 1, 86400)))
        return sbx_error_set(err, EINVAL, "'build' takes memory_mb (>= 64), disk_mb (>= 16), timeout_s and network");
    if (json_object_get(b, "network")) {
        sbx_net_policy *np = NULL;
        if (sbx_net_policy_parse(json_object_get(b, "network"), &np, err) < 0)
            return sbx_error_wrap(err, "'build.network'");
        sbx_net_policy_free(np);
    }
    json_t *steps = json_object_get(spec, "steps");
    if (steps && !json_is_array(steps))
        return sbx_error_set(err, EINVAL, "'steps' must be an array");
    if (json_array_size(steps) > MAX_STEPS)
        return sbx_error_set(err, E2BIG, "at most %d steps", MAX_STEPS);
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        const char *kind = json_is_object(s) && json_object_size(s) == 1 ? json_object_iter_key(json_object_iter(s))
                                                                          : NULL;
        json_t *v = kind ? json_object_get(s, kind) : NULL;
        if (!kind)
            return sbx_error_set(err, EINVAL, "step %zu: must be an object with one key (run, copy, env, workdir, "
                                              "user, start, ready)", i + 1);
        if (strcmp(kind, "run") == 0 || strcmp(kind, "start") == 0 || strcmp(kind, "ready") == 0) {
            json_t *argv = command_argv(v);
            json_decref(argv);
            if (!argv)
                return sbx_error_set(err, EINVAL, "step %zu: '%s' must be a shell command or a non-empty array of "
                                                  "strings (no NUL bytes)", i + 1, kind);
        } else if (strcmp(kind, "copy") == 0) {
            json_t *src = json_object_get(v, "src"), *dest = json_object_get(v, "dest"),
                   *owner = json_object_get(v, "owner");
            if (!json_is_object(v) || !only_fields(v, copy_fields, bad, sizeof bad) || !json_is_string(src) ||
                !json_is_string(dest) || (owner && !json_is_string(owner)))
                return sbx_error_set(err, EINVAL, "step %zu: 'copy' takes {\"src\": PATH, \"dest\": PATH, "
                                                  "\"owner\": USER}", i + 1);
            if (!clean_rel_path(json_string_value(src)) || strlen(json_string_value(src)) != json_string_length(src))
                return sbx_error_set(err, EINVAL, "step %zu: copy 'src' \"%s\" must be a relative path inside the "
                                                  "build context, without '..'", i + 1, json_string_value(src));
            if (!clean_abs_path(json_string_value(dest)) || strcmp(json_string_value(dest), "/") == 0 ||
                strlen(json_string_value(dest)) != json_string_length(dest))
                return sbx_error_set(err, EINVAL, "step %zu: copy 'dest' \"%s\" must be an absolute path without "
                                                  "'..'", i + 1, json_string_value(dest));
        } else if (strcmp(kind, "env") == 0) {
            const char *k;
            json_t *e;
            if (!json_is_object(v))
                return sbx_error_set(err, EINVAL, "step %zu: 'env' must be an object of strings", i + 1);
            json_object_foreach(v, k, e)
            {
                if (!json_is_string(e) || !k[0] || strchr(k, '=') ||
                    strlen(json_string_value(e)) != json_string_length(e))
                    return sbx_error_set(err, EINVAL, "step %zu: env '%s' must be a string (names without '=')",
                                         i + 1, k);
            }
        } else if (strcmp(kind, "workdir") == 0) {
            if (!json_is_string(v) || !clean_abs_path(json_string_value(v)))
                return sbx_error_set(err, EINVAL, "step %zu: 'workdir' must be an absolute path", i + 1);
        } else if (strcmp(kind, "user") == 0) {
            if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 63 ||
                strpbrk(json_string_value(v), ":/\n "))
                return sbx_error_set(err, EINVAL, "step %zu: 'user' must be a user name or uid", i + 1);
        } else {
            return sbx_error_set(err, EINVAL, "step %zu: unknown step '%s' (run, copy, env, workdir, user, start, "
                                              "ready)", i + 1, kind);
        }
    }
    return 0;
}

/* --- the template so far -------------------------------------------------- */

static void layer_path(sbx_build *bd, const char *key, char *out, size_t len)
{
    char dir[4096];
    sbx_tpl_layers_dir(bd->d->reg.home, dir, sizeof dir);
    snprintf(out, len, "%s/%s", dir, key);
}

/* The `stack` file of the template so far (template.h). */
static char *stack_text(sbx_build *bd, const char *id)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    char p[4200];
    if (id)
        fprintf(f, "id %s\n", id);
    if (strcmp(bd->root, "base") == 0) {
        fprintf(f, "root base\n");
    } else {
        layer_path(bd, bd->root, p, sizeof p);
        fprintf(f, "root %s\n", p);
    }
    for (size_t i = json_array_size(bd->layers); i-- > 0;) {
        const char *k = json_string_value(json_object_get(json_array_get(bd->layers, i), "id"));
        if (strcmp(k, bd->root) == 0)
            continue;
        layer_path(bd, k, p, sizeof p);
        fprintf(f, "layer %s\n", p);
    }
    const char *user = json_string_value(json_object_get(bd->defaults, "user"));
    const char *wd = json_string_value(json_object_get(bd->defaults, "workdir"));
    if (user)
        fprintf(f, "user %s\n", user);
    if (wd)
        fprintf(f, "workdir %s\n", wd);
    fclose(f);
    return text;
}

static void build_tpl_dir(sbx_build *bd, char *out, size_t len)
{
    snprintf(out, len, "%s/templates/" SBX_BUILD_TEMPLATE_PREFIX "%s", bd->d->reg.home, bd->id);
}

/* Write the template so far as ".build-<id>": what build sandboxes run on. */
static int write_build_template(sbx_build *bd, sbx_error *err)
{
    char dir[4096], p[4200];
    build_tpl_dir(bd, dir, sizeof dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return sbx_error_set(err, errno, "mkdir %s", dir);
    _cleanup_free_ char *text = stack_text(bd, NULL);
    snprintf(p, sizeof p, "%s/stack", dir);
    int r = text ? sbx_create_file(p, text, 0644) : -ENOMEM;
    return r < 0 ? sbx_error_set(err, -r, "write %s", p) : 0;
}

static void add_layer(sbx_build *bd, const char *key, const char *what)
{
    char p[4200];
    layer_path(bd, key, p, sizeof p);
    _cleanup_closedir_ DIR *dd = opendir(p);
    struct dirent *e;
    bool empty = true;
    while (dd && (e = readdir(dd)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            empty = false;
    if (empty && strcmp(key, bd->root) != 0)
        return; /* a step that changed nothing costs no overlay layer */
    json_t *l = json_pack("{s:s, s:s, s:I}", "id", key, "step", what, "size_bytes", (json_int_t) sbx_layer_bytes(p));
    sbx_layers_use_lock();
    json_array_append_new(bd->layers, l);
    sbx_layers_use_unlock();
}

/* Move a finished layer into the cache; someone else's identical one wins. */
static int commit_layer(sbx_build *bd, const char *tmp, const char *key, sbx_error *err)
{
    char final[4200], dir[4096];
    layer_path(bd, key, final, sizeof final);
    sbx_tpl_layers_dir(bd->d->reg.home, dir, sizeof dir);
    /* on disk before a template names it: a template installed after a
     * crash of the machine must not stand on a half-written layer */
    if (sbx_layer_sync(tmp, err) < 0) {
        sbx_layer_remove(tmp);
        return -1;
    }
    if (rename(tmp, final) == 0)
        return sbx_dir_sync(dir, err);
    if (errno == EEXIST || errno == ENOTEMPTY) {
        if (bd->no_cache) { /* replace the cached one (tmp then holds it) */
            if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
                sbx_layer_remove(tmp);
                return sbx_dir_sync(dir, err);
            }
        }
        sbx_layer_remove(tmp);
        return 0;
    }
    return sbx_error_set(err, errno, "store layer %s", key);
}

static bool cached(sbx_build *bd, const char *key)
{
    char p[4200];
    layer_path(bd, key, p, sizeof p);
    return !bd->no_cache && access(p, F_OK) == 0;
}

/* --- from --------------------------------------------------------------- */

static int start_from(sbx_build *bd, sbx_error *err)
{
    const char *from = json_string_value(json_object_get(bd->spec, "from"));
    sbx_layers_use_lock(); /* a sweep reads bd->layers */
    bd->layers = json_array();
    sbx_layers_use_unlock();
    bd->steps = json_array();
    bd->defaults = json_object();
    if (strncmp(from, "archive:", 8) == 0) {
        /* the context is the client's tree: a symlink in it (to a host
         * file) must not be followed; the archive is read through the fd */
        char rel[1100], path[64];
        snprintf(rel, sizeof rel, "context/%s", from + 8);
        _cleanup_close_ int dfd = open(bd->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct open_how how = { .flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
        _cleanup_close_ int afd = dfd < 0 ? -1 : (int) syscall(SYS_openat2, dfd, rel, &how, sizeof how);
        struct stat st;
        if (afd < 0 || fstat(afd, &st) < 0 || !S_ISREG(st.st_mode))
            return sbx_error_set(err, afd < 0 && errno == ELOOP ? ELOOP : ENOENT,
                                 "'from': no file %s in the build context%s", from + 8,
                                 afd < 0 && errno == ELOOP ? " (it is, or goes through, a symlink)" : "");
        snprintf(path, sizeof path, "/proc/self/fd/%d", afd);
        /* the archive's bytes (not its name: the fd's number varies) */
        char archive_hash[65];
        EVP_MD_CTX *hc = EVP_MD_CTX_new();
        EVP_DigestInit_ex(hc, EVP_sha256(), NULL);
        int hr = hash_fd(hc, afd, from + 8, err);
        unsigned char md[32];
        unsigned mdn = 0;
        EVP_DigestFinal_ex(hc, md, &mdn);
        EVP_MD_CTX_free(hc);
        if (hr < 0)
            return -1;
        hex(md, 32, archive_hash);
        char key[65] = "";
        next_key(key, json_object_get(bd->spec, "from"), archive_hash);
        sbx_layers_use_lock(); /* what it stands on from now: no sweep removes it */
        snprintf(bd->key, sizeof bd->key, "%s", key);
        snprintf(bd->root, sizeof bd->root, "%s", key);
        bool hit = cached(bd, bd->key);
        sbx_layers_use_unlock();
        emit(bd, json_pack("{s:s, s:i, s:i, s:s, s:b}", "type", "step", "index", 0, "total",
                           (int) json_array_size(json_object_get(bd->spec, "steps")), "step", from, "cached", hit));
        sbx_image_config cfg = { 0 };
        if (!hit) {
            char tmp[4300], layers[4096];
            sbx_tpl_layers_dir(bd->d->reg.home, layers, sizeof layers);
            snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%s", layers, bd->key, bd->id);
            if (mkdir(tmp, 0755) < 0 || chown(tmp, bd->d->reg.uid_base, bd->d->reg.uid_base) < 0)
                return sbx_error_set(err, errno, "mkdir %s", tmp);
            sbx_extract_opts o = { .uid_base = bd->d->reg.uid_base, .max_bytes = IMAGE_MAX_BYTES, .whiteouts = true };
            if (sbx_image_import(path, tmp, &o, &cfg, err) < 0) {
                sbx_layer_remove(tmp);
                return sbx_error_wrap(err, "import %s", from + 8);
            }
            /* the image's defaults travel with its layer */
            json_t *c = json_object();
            if (cfg.env)
                json_object_set(c, "env", cfg.env);
            if (cfg.workdir[0])
                json_object_set_new(c, "workdir", json_string(cfg.workdir));
            if (cfg.user[0])
                json_object_set_new(c, "user", json_string(cfg.user));
            char cp[4400];
            snprintf(cp, sizeof cp, "%s.json", tmp);
            json_dump_file(c, cp, JSON_COMPACT);
            json_decref(c);
            sbx_image_config_free(&cfg);
            if (commit_layer(bd, tmp, bd->key, err) < 0)
                return -1;
            char final[4300];
            layer_path(bd, bd->key, final, sizeof final);
            snprintf(tmp, sizeof tmp, "%s.json", final);
            rename(cp, tmp);
        }
        /* the image config's Env, WorkingDir, User: the first defaults */
        char cp[4300];
        layer_path(bd, bd->key, cp, sizeof cp);
        strcat(cp, ".json");
        json_t *c = json_load_file(cp, 0, NULL);
        json_t *env = json_object();
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(c, "env"), i, e)
        {
            const char *kv = json_string_value(e), *eq = kv ? strchr(kv, '=') : NULL;
            if (eq && eq != kv) {
                char k[256];
                snprintf(k, sizeof k, "%.*s", (int) (eq - kv), kv);
                json_object_set_new(env, k, json_string(eq + 1));
            }
        }
        json_object_set_new(bd->defaults, "envs", env);
        if (json_is_string(json_object_get(c, "workdir")) && clean_abs_path(json_string_value(json_object_get(c, "workdir"))))
            json_object_set(bd->defaults, "workdir", json_object_get(c, "workdir"));
        /* an image runs as its config's User, else as root (uid 0, which
         * needs no passwd entry): as docker does */
        const char *u = json_string_value(json_object_get(c, "user"));
        char uname[256];
        snprintf(uname, sizeof uname, "%s", u && *u ? u : "0");
        uname[strcspn(uname, ":")] = '\0'; /* "user:group": the user */
        if (uname[0] && !strpbrk(uname, "/ \n"))
            json_object_set_new(bd->defaults, "user", json_string(uname));
        json_decref(c);
        add_layer(bd, bd->key, from);
        json_array_append_new(bd->steps, json_pack("{s:s, s:s}", "step", from, "layer", bd->key));
        return 0;
    }
    /* the template it builds on, as installed now: its layers are this
     * build's from here on (a sweep keeps them) */
    sbx_layers_use_lock();
    json_t *m = sbx_tpl_load(bd->d->reg.home, from);
    if (!m) {
        sbx_layers_use_unlock();
        return sbx_error_set(err, ENOENT, "'from': no template '%s'", from);
    }
    if (json_is_true(json_object_get(m, "builtin")) || !json_object_get(m, "key")) {
        if (strcmp(from, "base") != 0) {
            sbx_layers_use_unlock();
            json_decref(m);
            return sbx_error_set(err, EINVAL, "'from': template '%s' is hand-made; build from base, a built "
                                              "template or an archive", from);
        }
        snprintf(bd->root, sizeof bd->root, "base");
        snprintf(bd->key, sizeof bd->key, "%s", "");
        next_key(bd->key, json_object_get(bd->spec, "from"), NULL);
    } else {
        snprintf(bd->root, sizeof bd->root, "%s", json_string_value(json_object_get(m, "root")));
        snprintf(bd->key, sizeof bd->key, "%s", json_string_value(json_object_get(m, "key")));
        json_array_extend(bd->layers, json_object_get(m, "layers"));
        static const char *const inherit[] = { "envs", "workdir", "user", "start", "ready", NULL };
        for (size_t i = 0; inherit[i]; i++)
            if (json_object_get(m, inherit[i]))
                json_object_set(bd->defaults, inherit[i], json_object_get(m, inherit[i]));
    }
    sbx_layers_use_unlock();
    json_decref(m);
    if (!json_object_get(bd->defaults, "envs"))
        json_object_set_new(bd->defaults, "envs", json_object());
    return 0;
}

/* --- steps -------------------------------------------------------------- */

static int run_step(sbx_build *bd, json_t *argv_json, const char *key, sbx_error *err)
{
    if (write_build_template(bd, err) < 0)
        return -1;
    json_t *b = json_object_get(bd->spec, "build");
    json_t *mem = json_object_get(b, "memory_mb"), *disk = json_object_get(b, "disk_mb"),
           *tmo = json_object_get(b, "timeout_s");
    sbx_box_row row = { 0 };
    sbx_random_hex(row.id, SBX_ID_LEN / 2);
    snprintf(row.key_id, sizeof row.key_id, "%s", bd->key_id);
    snprintf(row.template_name, sizeof row.template_name, SBX_BUILD_TEMPLATE_PREFIX "%s", bd->id);
    snprintf(row.state, sizeof row.state, "running");
    snprintf(row.on_timeout, sizeof row.on_timeout, "kill");
    unsigned timeout = tmo ? (unsigned) json_integer_value(tmo) : BUILD_STEP_TIMEOUT_S;
    row.created_at = sbx_now_wall_ms();
    row.timeout_s = timeout + 60;
    row.expires_at = row.created_at + row.timeout_s * 1000;
    row.metadata = json_pack("{s:s, s:s}", "sbx.build", bd->id, "sbx.template", bd->name);
    row.envs = json_object();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    row.millicpus = (uint32_t) (ncpu > 0 ? ncpu : 1) * 1000;
    row.memory_mb = mem ? (uint64_t) json_integer_value(mem) : BUILD_MEMORY_MB;
    row.disk_mb = disk ? (uint64_t) json_integer_value(disk) : BUILD_DISK_MB;
    row.pids = 4096;
    int rc = sbx_reg_create(&bd->d->reg, &row, err);
    sbx_box *box = rc == 0 ? sbx_reg_get(&bd->d->reg, row.id, NULL) : NULL;
    sbx_box_row_free(&row);
    if (!box)
        return rc < 0 ? sbx_error_wrap(err, "start a build sandbox") : sbx_error_set(err, ESRCH, "build sandbox");
    /* the network the spec allows its run steps ("build": {"network"}) */
    sbx_net_policy *np = NULL;
    if (json_object_get(b, "network") && sbx_net_policy_parse(json_object_get(b, "network"), &np, err) == 0 &&
        sbx_sandbox_network(bd->d, box, np, err) < 0) {
        sbx_reg_end(&bd->d->reg, box, "failed", "template build: no network");
        sbx_reg_put(&bd->d->reg, box);
        return sbx_error_wrap(err, "give the build sandbox its network");
    }
    size_t n = json_array_size(argv_json);
    _cleanup_free_ char **argv = calloc(n + 1, sizeof *argv);
    for (size_t i = 0; argv && i < n; i++)
        argv[i] = (char *) json_string_value(json_array_get(argv_json, i));
    const char *user = json_string_value(json_object_get(bd->defaults, "user"));
    const char *wd = json_string_value(json_object_get(bd->defaults, "workdir"));
    sbx_exec_opts o = { .argv = argv, .user = user ? user : "root", .cwd = wd ? wd : "/",
                        .envs = json_object_get(bd->defaults, "envs"), .timeout_s = timeout, .root_caps = true,
                        .cancel = &bd->cancel, .on_output = on_output, .arg = bd };
    bd->tail_len = 0;
    bd->tail[0] = '\0';
    int code = -1;
    int ret = argv ? sbx_box_exec(bd->d, box, &o, &code, NULL, err) : sbx_error_set(err, ENOMEM, "argv");
    if (ret == 0 && code != 0)
        ret = -1; /* err says how it ended */
    if (ret == 0) {
        char tmp[4300], layers[4096];
        sbx_tpl_layers_dir(bd->d->reg.home, layers, sizeof layers);
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%s", layers, key, bd->id);
        ret = sbx_layer_capture(&bd->d->reg, box, tmp, err);
        if (ret == 0) {
            /* per-sandbox files (mount.c writes them at every start) */
            char p[4400];
            snprintf(p, sizeof p, "%s/etc/hosts", tmp);
            unlink(p);
            snprintf(p, sizeof p, "%s/etc/hostname", tmp);
            unlink(p);
            ret = commit_layer(bd, tmp, key, err);
        }
    }
    sbx_reg_end(&bd->d->reg, box, "deleted", "template build step finished");
    sbx_reg_put(&bd->d->reg, box);
    return ret;
}

/* The template so far, opened (for its passwd and its paths). */
static int open_so_far(sbx_build *bd, sbx_template *t, sbx_error *err)
{
    if (write_build_template(bd, err) < 0)
        return -1;
    char name[80];
    snprintf(name, sizeof name, SBX_BUILD_TEMPLATE_PREFIX "%s", bd->id);
    return sbx_template_open(t, bd->d->reg.home, name, bd->d->reg.uid_base, err);
}

static int copy_step(sbx_build *bd, json_t *v, const char *key, sbx_error *err)
{
    const char *src = json_string_value(json_object_get(v, "src"));
    const char *dest = json_string_value(json_object_get(v, "dest"));
    const char *owner = json_string_value(json_object_get(v, "owner"));
    sbx_template t;
    if (open_so_far(bd, &t, err) < 0)
        return -1;
    sbx_user u;
    if (sbx_template_lookup_user(&t, owner ? owner : "root", &u, err) < 0)
        return -1;
    for (size_t i = 0; i < t.n_binds; i++) {
        size_t l = strlen(t.binds[i].dest);
        if (strncmp(dest, t.binds[i].dest, l) == 0 && (dest[l] == '/' || !dest[l]))
            return sbx_error_set(err, EROFS, "copy to %s: %s is the host's, read-only, in templates from base", dest,
                                 t.binds[i].dest);
    }
    char srcpath[4400], tmp[4300], layers[4096];
    snprintf(srcpath, sizeof srcpath, "%s/context/%s", bd->dir, src);
    struct stat st;
    if (lstat(srcpath, &st) < 0)
        return sbx_error_set(err, errno, "copy: %s in the build context", src);
    sbx_tpl_layers_dir(bd->d->reg.home, layers, sizeof layers);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%s", layers, key, bd->id);
    if (mkdir(tmp, 0755) < 0 || lchown(tmp, bd->d->reg.uid_base, bd->d->reg.uid_base) < 0)
        return sbx_error_set(err, errno, "mkdir %s", tmp);
    char target[1100];
    size_t dl = strlen(dest);
    if (dest[dl - 1] == '/' && !S_ISDIR(st.st_mode)) {
        const char *base = strrchr(src, '/');
        snprintf(target, sizeof target, "%s%s", dest, base ? base + 1 : src);
    } else {
        snprintf(target, sizeof target, "%.*s", (int) (dest[dl - 1] == '/' ? dl - 1 : dl), dest);
    }
    /* parent directories: as they are below, so the layer does not change
     * their owner or mode; through a symlink is refused (it would hide it) */
    int ret = 0;
    for (char *slash = strchr(target + 1, '/'); slash && ret == 0; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        char below[4400], here[4400];
        snprintf(here, sizeof here, "%s%s", tmp, target);
        struct stat ps = { .st_mode = S_IFDIR | 0755, .st_uid = bd->d->reg.uid_base, .st_gid = bd->d->reg.uid_base };
        if (sbx_template_find(&t, target, below, sizeof below) == 0 && lstat(below, &ps) == 0 && !S_ISDIR(ps.st_mode))
            ret = sbx_error_set(err, ENOTDIR, "copy to %s: %s is not a directory in the template%s", dest, target,
                                S_ISLNK(ps.st_mode) ? " (a symlink: name the path it points to)" : "");
        else if (mkdir(here, ps.st_mode & 07777) < 0 || lchown(here, ps.st_uid, ps.st_gid) < 0 ||
                 chmod(here, ps.st_mode & 07777) < 0)
            ret = sbx_error_set(err, errno, "mkdir %s", here);
        *slash = '/';
    }
    char dst[4400];
    snprintf(dst, sizeof dst, "%s%s", tmp, target);
    if (ret == 0) {
        char *const cp[] = { "cp", "-a", "--no-target-directory", srcpath, dst, NULL };
        ret = sbx_run_tool(cp, err);
    }
    if (ret == 0) {
        char ids[64];
        snprintf(ids, sizeof ids, "%u:%u", (unsigned) (bd->d->reg.uid_base + u.uid),
                 (unsigned) (bd->d->reg.uid_base + u.gid));
        char *const ch[] = { "chown", "-hR", ids, dst, NULL };
        ret = sbx_run_tool(ch, err);
    }
    if (ret == 0)
        ret = commit_layer(bd, tmp, key, err);
    else
        sbx_layer_remove(tmp);
    return ret;
}

static void describe(const char *kind, json_t *v, char *out, size_t len)
{
    if (strcmp(kind, "copy") == 0) {
        snprintf(out, len, "copy %s %s", json_string_value(json_object_get(v, "src")),
                 json_string_value(json_object_get(v, "dest")));
    } else if (json_is_string(v)) {
        snprintf(out, len, "%s %s", kind, json_string_value(v));
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(out, len, "%s %s", kind, s ? s : "");
        free(s);
    }
    if (strlen(out) > 200)
        strcpy(out + 197, "...");
}

static int do_steps(sbx_build *bd, sbx_error *err)
{
    if (start_from(bd, err) < 0)
        return -1;
    json_t *steps = json_object_get(bd->spec, "steps");
    size_t total = json_array_size(steps);
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        if (__atomic_load_n(&bd->cancel, __ATOMIC_RELAXED))
            return sbx_error_set(err, ECANCELED, "cancelled: the client went away");
        const char *kind = json_object_iter_key(json_object_iter(s));
        json_t *v = json_object_get(s, kind);
        char what[256];
        describe(kind, v, what, sizeof what);
        bd->failed_step = (int) i + 1;
        int64_t t0 = mono_ms();
        bool makes_layer = strcmp(kind, "run") == 0 || strcmp(kind, "copy") == 0;
        char extra[65] = "";
        if (strcmp(kind, "copy") == 0) {
            char srcpath[4400];
            snprintf(srcpath, sizeof srcpath, "%s/context/%s", bd->dir, json_string_value(json_object_get(v, "src")));
            /* no symlink on the way: the context is the client's tree */
            _cleanup_close_ int dfd = open(bd->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
            char rel[1100];
            snprintf(rel, sizeof rel, "context/%s", json_string_value(json_object_get(v, "src")));
            struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                                    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
            int fd = (int) syscall(SYS_openat2, dfd, rel, &how, sizeof how);
            if (fd < 0)
                return sbx_error_set(err, errno == ELOOP ? ELOOP : errno, "step %zu: copy: %s in the build context%s",
                                     i + 1, json_string_value(json_object_get(v, "src")),
                                     errno == ELOOP ? " goes through a symlink" : "");
            close(fd);
            if (hash_path(srcpath, extra, err) < 0)
                return -1;
        }
        char key[65];
        snprintf(key, sizeof key, "%s", bd->key);
        next_key(key, s, extra[0] ? extra : NULL);
        /* the step's key is what the build stands on from now (a sweep
         * keeps its layer, cached or about to be made) */
        sbx_layers_use_lock();
        snprintf(bd->key, sizeof bd->key, "%s", key);
        bool hit = makes_layer && cached(bd, bd->key);
        sbx_layers_use_unlock();
        emit(bd, json_pack("{s:s, s:i, s:i, s:s, s:b}", "type", "step", "index", (int) i + 1, "total", (int) total,
                           "step", what, "cached", hit));
        if (makes_layer && json_array_size(bd->layers) >= SBX_TEMPLATE_MAX_LAYERS)
            return sbx_error_set(err, E2BIG, "more than %d layers: join run steps with &&", SBX_TEMPLATE_MAX_LAYERS);
        int r = 0;
        if (strcmp(kind, "run") == 0 && !hit) {
            json_t *argv = command_argv(v);
            r = run_step(bd, argv, bd->key, err);
            json_decref(argv);
        } else if (strcmp(kind, "copy") == 0 && !hit) {
            r = copy_step(bd, v, bd->key, err);
        } else if (strcmp(kind, "env") == 0) {
            json_object_update(json_object_get(bd->defaults, "envs"), v);
        } else if (strcmp(kind, "workdir") == 0 || strcmp(kind, "user") == 0) {
            json_object_set(bd->defaults, kind, v);
        } else if (strcmp(kind, "start") == 0 || strcmp(kind, "ready") == 0) {
            json_object_set_new(bd->defaults, kind, command_argv(v));
        }
        if (r < 0)
            return sbx_error_wrap(err, "step %zu (%s)", i + 1, what);
        if (makes_layer)
            add_layer(bd, bd->key, what);
        json_array_append_new(bd->steps, json_pack("{s:s, s:s?, s:b}", "step", what, "layer",
                                                   makes_layer ? bd->key : NULL, "cached", hit));
        emit(bd, json_pack("{s:s, s:i, s:I}", "type", "step_done", "index", (int) i + 1, "ms",
                           (json_int_t) (mono_ms() - t0)));
    }
    bd->failed_step = 0;
    /* the default user must exist */
    const char *user = json_string_value(json_object_get(bd->defaults, "user"));
    if (user) {
        sbx_template t;
        sbx_user u;
        if (open_so_far(bd, &t, err) < 0 || sbx_template_lookup_user(&t, user, &u, err) < 0)
            return -1;
    }
    return 0;
}

/* Write templates/<name> aside, then swap it in. */
static int install(sbx_build *bd, sbx_error *err)
{
    const char *home = bd->d->reg.home;
    char id[33];
    sbx_random_hex(id, 16);
    json_t *m = json_pack("{s:s, s:s, s:O, s:I, s:s, s:s, s:O, s:O}", "id", id, "name", bd->name, "from",
                          json_object_get(bd->spec, "from"), "created_at", (json_int_t) sbx_now_wall_ms(), "key",
                          bd->key, "root", bd->root, "layers", bd->layers, "steps", bd->steps);
    json_object_update(m, bd->defaults);
    static const char *const res[] = { "cpus", "memory_mb", "disk_mb", "timeout_s", "ready_timeout_s", NULL };
    for (size_t i = 0; res[i]; i++)
        if (json_object_get(bd->spec, res[i]))
            json_object_set(m, res[i], json_object_get(bd->spec, res[i]));
    json_int_t size = 0;
    size_t i;
    json_t *l;
    json_array_foreach(bd->layers, i, l)
        size += json_integer_value(json_object_get(l, "size_bytes"));
    json_object_set_new(m, "size_bytes", json_integer(size));
    json_object_set_new(m, "builtin", json_false());

    char tmp[4096], dir[4096], p[4200];
    snprintf(tmp, sizeof tmp, "%s/templates/.%s.tmp.%s", home, bd->name, bd->id);
    snprintf(dir, sizeof dir, "%s/templates/%s", home, bd->name);
    _cleanup_free_ char *stack = stack_text(bd, id);
    int ret = mkdir(tmp, 0755) < 0 ? sbx_error_set(err, errno, "mkdir %s", tmp) : 0;
    if (ret == 0) {
        snprintf(p, sizeof p, "%s/stack", tmp);
        int r = stack ? sbx_create_file(p, stack, 0644) : -ENOMEM;
        if (r < 0)
            ret = sbx_error_set(err, -r, "write %s", p);
    }
    if (ret == 0) {
        snprintf(p, sizeof p, "%s/template.json", tmp);
        if (json_dump_file(m, p, JSON_INDENT(2) | JSON_SORT_KEYS) < 0)
            ret = sbx_error_set(err, EIO, "write %s", p);
    }
    /* on disk before it is in place (its layers already are: commit_layer) */
    if (ret == 0)
        ret = sbx_layer_sync(tmp, err);
    bool replaced = false;
    if (ret == 0 && rename(tmp, dir) < 0) {
        if ((errno == EEXIST || errno == ENOTEMPTY) && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0)
            replaced = true; /* tmp is now the old version */
        else
            ret = sbx_error_set(err, errno, "install %s", dir);
    }
    if (ret == 0) {
        char tdir[4096];
        snprintf(tdir, sizeof tdir, "%s/templates", home);
        sbx_error e2 = { 0 };
        if (sbx_dir_sync(tdir, &e2) < 0) /* installed all the same: only its durability is in doubt */
            sbx_log("warn", "event=template_install template=%s error=\"%s\"", bd->name, e2.msg);
    }
    if (replaced) { /* the old version's layers, let go of once this build is done */
        char old[4200];
        snprintf(old, sizeof old, "%s/template.json", tmp);
        json_t *om = json_load_file(old, 0, NULL);
        bd->released = json_object();
        sbx_tpl_keep_manifest(om, bd->released);
        json_decref(om);
        snprintf(old, sizeof old, "%s/stack", tmp);
        _cleanup_free_ char *ostack = sbx_read_file_alloc(old, NULL);
        sbx_tpl_keep_stack(ostack, bd->released);
    }
    if (ret < 0 || replaced)
        sbx_layer_remove(tmp);
    if (ret < 0) {
        json_decref(m);
        return -1;
    }
    bd->result = m;
    /* A warm pool of the name holds sandboxes of the old version: they end
     * and the pool refills from this one (and a pool waiting for the
     * template to exist starts). */
    sbx_pool_template_changed(bd->d, bd->name);
    return 0;
}

static void *build_main(void *arg)
{
    sbx_build *bd = arg;
    int64_t t0 = mono_ms();
    sbx_log("info", "event=template_build_started template=%s build=%s", bd->name, bd->id);
    activate(bd, true);
    int r = do_steps(bd, &bd->err);
    if (r == 0)
        r = install(bd, &bd->err);
    char dir[4096];
    build_tpl_dir(bd, dir, sizeof dir);
    sbx_layer_remove(dir);
    activate(bd, false);
    /* A rebuild lets go of the old version's layers: those the new one,
     * another template, a live sandbox or a snapshot do not need go.
     * (A failed build's layers stay: the cache of its next attempt.) */
    if (bd->released) {
        sbx_tpl_release_layers(bd->d, bd->released);
        json_decref(bd->released);
        bd->released = NULL;
    }
    if (r == 0) {
        emit(bd, json_pack("{s:s, s:o}", "type", "done", "template", sbx_tpl_json(bd->d, bd->result)));
        sbx_log("info", "event=template_built template=%s build=%s ms=%lld", bd->name, bd->id,
                (long long) (mono_ms() - t0));
    } else {
        json_t *o = json_pack("{s:s, s:s, s:s}", "type", "error", "code", "build_failed", "message", bd->err.msg);
        if (bd->failed_step)
            json_object_set_new(o, "step", json_integer(bd->failed_step));
        emit(bd, o);
        sbx_log("warn", "event=template_build_failed template=%s build=%s error=\"%s\"", bd->name, bd->id,
                bd->err.msg);
    }
    if (bd->out_fd >= 0)
        close(bd->out_fd);
    bd->out_fd = -1;
    release_name(bd->name);
    return NULL;
}

/* --- start-up ------------------------------------------------------------ */

void sbx_build_clean_stale(const char *home)
{
    char dir[4096], p[4400];
    snprintf(dir, sizeof dir, "%s/builds", home);
    sbx_layer_remove(dir); /* contexts of builds a crash or a stop interrupted */
    const char *const subdirs[] = { "templates", "layers" };
    for (size_t i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/%s", home, subdirs[i]);
        DIR *dd = opendir(dir);
        struct dirent *e;
        while (dd && (e = readdir(dd))) {
            /* partial templates, layers and template directories being
             * written: never in use once sbxd starts */
            bool stale = strncmp(e->d_name, SBX_BUILD_TEMPLATE_PREFIX, strlen(SBX_BUILD_TEMPLATE_PREFIX)) == 0 ||
                         (e->d_name[0] == '.' && (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".removed.")));
            if (!stale)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            sbx_layer_remove(p);
        }
        if (dd)
            closedir(dd);
    }
}

/* --- the request's side ---------------------------------------------------- */

int sbx_build_new(sbx_daemon *d, const char *name, const char *key_id, bool tar_body, bool no_cache, sbx_build **out,
                  sbx_error *err)
{
    if (!sbx_template_name_valid(name))
        return sbx_error_set(err, EINVAL, "bad template name '%s': use 1-64 letters, digits, '.', '_' or '-'", name);
    if (strcmp(name, "base") == 0)
        return sbx_error_set(err, EPERM, "'base' is built in: give the template another name");
    if (!claim_name(name)) {
        sbx_error_set(err, 0, "template '%s' is being built already", name);
        err->errno_ = EBUSY;
        return -1;
    }
    sbx_build *bd = calloc(1, sizeof *bd);
    bd->d = d;
    bd->out_fd = bd->body_fd = -1;
    bd->tar_body = tar_body;
    bd->no_cache = no_cache;
    sbx_random_hex(bd->id, 16);
    snprintf(bd->name, sizeof bd->name, "%s", name);
    snprintf(bd->key_id, sizeof bd->key_id, "%s", key_id);
    char p[4200], layers[4096];
    snprintf(p, sizeof p, "%s/builds", d->reg.home);
    sbx_tpl_layers_dir(d->reg.home, layers, sizeof layers);
    snprintf(bd->dir, sizeof bd->dir, "%s/builds/%s", d->reg.home, bd->id);
    char tdir[4200];
    snprintf(tdir, sizeof tdir, "%s/templates", d->reg.home);
    if ((mkdir(p, 0700) < 0 && errno != EEXIST) || (mkdir(layers, 0755) < 0 && errno != EEXIST) ||
        sbx_mkdir_p(tdir, 0755) < 0 || mkdir(bd->dir, 0700) < 0) {
        sbx_error_set(err, errno, "prepare %s", bd->dir);
        sbx_build_free(bd);
        return -1;
    }
    snprintf(p, sizeof p, "%s/body", bd->dir);
    bd->body_fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (bd->body_fd < 0) {
        sbx_error_set(err, errno, "create %s", p);
        sbx_build_free(bd);
        return -1;
    }
    *out = bd;
    return 0;
}

int sbx_build_body(sbx_build *bd, const char *data, size_t len, sbx_error *err)
{
    bd->body_len += len;
    if (!bd->tar_body && bd->body_len > SPEC_MAX) {
        sbx_error_set(err, 0, "a spec is at most %u bytes (send files in a build context, application/x-tar)",
                      SPEC_MAX);
        err->errno_ = E2BIG;
        return -1;
    }
    for (size_t off = 0; off < len;) {
        ssize_t w = write(bd->body_fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return sbx_error_set(err, errno, "store the request body");
        off += (size_t) w;
    }
    return 0;
}

int sbx_build_prepare(sbx_build *bd, sbx_error *err)
{
    close(bd->body_fd);
    bd->body_fd = -1;
    char body[4200], ctx[4200];
    snprintf(body, sizeof body, "%s/body", bd->dir);
    snprintf(ctx, sizeof ctx, "%s/context", bd->dir);
    if (mkdir(ctx, 0700) < 0)
        return sbx_error_set(err, errno, "mkdir %s", ctx);
    if (bd->tar_body) {
        /* owned by the sandbox uid range, like layers: a copy step sets its owner */
        _cleanup_close_ int fd = open(ctx, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        sbx_extract_opts o = { .uid_base = bd->d->reg.uid_base, .max_bytes = bd->d->max_upload, .whiteouts = false };
        if (fd < 0 || sbx_tar_extract(body, fd, &o, err) < 0) {
            err->errno_ = EINVAL;
            return sbx_error_wrap(err, "the build context (a tar archive)");
        }
        snprintf(body, sizeof body, "%s/context/" SPEC_NAME, bd->dir);
        if (access(body, F_OK) < 0)
            return sbx_error_set(err, EINVAL, "the build context has no " SPEC_NAME " (the spec) at its top");
    }
    struct stat sst;
    if (stat(body, &sst) == 0 && sst.st_size > SPEC_MAX)
        return sbx_error_set(err, EINVAL, "the spec is %lld bytes, at most %u are taken", (long long) sst.st_size,
                             SPEC_MAX);
    json_error_t je;
    bd->spec = json_load_file(body, JSON_REJECT_DUPLICATES, &je);
    if (!bd->spec)
        return sbx_error_set(err, EINVAL, "the spec is not valid JSON: %s (line %d)", je.text, je.line);
    if (sbx_build_check_spec(bd->spec, err) < 0) {
        err->errno_ = EINVAL;
        return -1;
    }
    return 0;
}

int sbx_build_start(sbx_build *bd, int out_fd, sbx_error *err)
{
    bd->out_fd = out_fd;
    int e = pthread_create(&bd->thread, NULL, build_main, bd);
    if (e) {
        bd->out_fd = -1;
        return sbx_error_set(err, e, "start the build");
    }
    bd->started = true;
    return 0;
}

json_t *sbx_build_wait(sbx_build *bd, sbx_error *err, int *failed_step, const char **tail)
{
    pthread_join(bd->thread, NULL);
    bd->thread = 0;
    *err = bd->err;
    *failed_step = bd->failed_step;
    *tail = bd->tail;
    return bd->result ? sbx_tpl_json(bd->d, bd->result) : NULL;
}

void sbx_build_free(sbx_build *bd)
{
    if (!bd)
        return;
    if (bd->thread) /* the stream's reader went away: let it finish alone */
        pthread_join(bd->thread, NULL);
    if (bd->body_fd >= 0)
        close(bd->body_fd);
    if (bd->out_fd >= 0)
        close(bd->out_fd);
    if (!bd->started) /* the name is still ours */
        release_name(bd->name);
    if (bd->dir[0])
        sbx_layer_remove(bd->dir);
    json_decref(bd->spec);
    json_decref(bd->layers);
    json_decref(bd->steps);
    json_decref(bd->defaults);
    json_decref(bd->result);
    json_decref(bd->released);
    free(bd);
}
