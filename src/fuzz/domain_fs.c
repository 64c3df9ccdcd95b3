/* domain_fs.c - files: written through the API, checked inside with the
 * sandbox's own tools and read back; odd names, deep trees, many files,
 * appends, truncation, renames, deletes. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A file name a user could pick: plain, with spaces, unicode, a leading
 * dash, or long (up to 255 bytes). */
static void odd_name(fz_ctx *c, char *out, size_t len)
{
    static const char *const kinds[] = { "plain", "with space", "ünïcödé-名前", "-leading-dash", "dots.in.name",
                                         "UPPER_lower", "tab\tin" };
    int k = (int) fz_below(&c->rng, 8);
    if (k == 7) { /* 255 bytes, the most a name may have */
        size_t n = len - 1 < 255 ? len - 1 : 255;
        for (size_t i = 0; i < n; i++)
            out[i] = (char) ('a' + fz_below(&c->rng, 26));
        out[n] = '\0';
        return;
    }
    snprintf(out, len, "%s-%llu", kinds[k], (unsigned long long) fz_below(&c->rng, 100000));
}

/* Upload (checked inside: see fz_put_checked), download: the bytes that
 * come back must be those too. */
static int round_trip(fz_ctx *c, const char *path, const uint8_t *data, size_t len)
{
    char want[65], back[65];
    fz_sha256(data, len, want);
    fz_evidence(c, "input", "%s: %zu bytes, sha256 %s", path, len, want);
    if (fz_put_checked(c, path, data, len) < 0)
        return -1;
    _cleanup_free_ char *got = NULL;
    size_t got_len;
    if (fz_get(c, path, &got, &got_len) < 0)
        return -1;
    fz_sha256(got, got_len, back);
    if (got_len != len || strcmp(back, want) != 0)
        return fz_fail(c, FZ_INTERFACE, "%s: the sandbox has the right bytes, the download gave %zu bytes sha256 %s",
                       path, got_len, back);
    return 0;
}

static int write_read(fz_ctx *c)
{
    char name[300], path[700];
    odd_name(c, name, sizeof name);
    snprintf(path, sizeof path, "/home/user/w%llu/%s", (unsigned long long) fz_below(&c->rng, 1000), name);
    size_t len = (size_t) fz_below(&c->rng, 65536);
    uint8_t *data = malloc(len + 1);
    fz_bytes(&c->rng, data, len);
    int r = round_trip(c, path, data, len);
    free(data);
    return r;
}

static int deep_tree(fz_ctx *c)
{
    int depth = 5 + (int) fz_below(&c->rng, 30);
    char path[4096] = "/home/user/deep";
    for (int i = 0; i < depth; i++) {
        size_t l = strlen(path);
        snprintf(path + l, sizeof path - l, "/d%d", (int) fz_below(&c->rng, 100));
    }
    size_t l = strlen(path);
    snprintf(path + l, sizeof path - l, "/leaf.bin");
    uint8_t data[512];
    fz_bytes(&c->rng, data, sizeof data);
    if (round_trip(c, path, data, sizeof data) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, "find /home/user/deep -type f | wc -l", &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0 || atoi(out) != 1)
        return fz_fail(c, FZ_SANDBOX, "find sees %s files under the deep tree, 1 was written", out);
    return 0;
}

static int many_small(fz_ctx *c)
{
    int n = 20 + (int) fz_below(&c->rng, 40);
    char paths[64][40], data[64][40];
    fz_upload files[64];
    for (int i = 0; i < n; i++) {
        snprintf(paths[i], sizeof paths[i], "/home/user/many/f%03d.txt", i);
        int len = snprintf(data[i], sizeof data[i], "file %d of %d\n", i, n);
        files[i] = (fz_upload) { paths[i], data[i], (size_t) len };
    }
    fz_evidence(c, "input", "%d files", n);
    if (fz_put_checked_many(c, files, (size_t) n) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, "ls /home/user/many | wc -l; cat /home/user/many/f000.txt", &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    char want[64];
    snprintf(want, sizeof want, "%d\nfile 0 of %d\n", n, n);
    if (code != 0 || strcmp(out, want) != 0)
        return fz_fail(c, FZ_SANDBOX, "after %d uploads the directory shows: %s", n, out);
    return 0;
}

static int append_truncate(fz_ctx *c)
{
    size_t len = 100 + (size_t) fz_below(&c->rng, 5000);
    size_t cut = (size_t) fz_below(&c->rng, len + 20); /* past the end: zeros */
    uint8_t *model = calloc(1, len + 20 + 9);
    fz_bytes(&c->rng, model, len);
    char sha[65];
    fz_sha256(model, len, sha);
    fz_evidence(c, "input", "%zu bytes (sha256 %s), cut at %zu", len, sha, cut);
    int r = fz_put_checked(c, "/home/user/at.bin", model, len);
    memcpy(model + len, "appended\n", 9); /* what the sandbox appends; then the cut */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "printf 'appended\\n' >> /home/user/at.bin && truncate -s %zu /home/user/at.bin", cut);
    int code = 0;
    if (r == 0)
        r = fz_exec(c, cmd, &code, NULL, NULL, NULL, NULL);
    if (r == 0 && code != 0)
        r = fz_fail(c, FZ_SANDBOX, "append/truncate failed inside (exit %d)", code);
    /* inside, after the sandbox's own append and truncate: the model */
    fz_upload after = { "/home/user/at.bin", model, cut };
    if (r == 0)
        r = fz_check_inside(c, &after, 1, FZ_SANDBOX);
    char *got = NULL;
    size_t gl = 0;
    if (r == 0)
        r = fz_get(c, "/home/user/at.bin", &got, &gl);
    if (r == 0 && (gl != cut || memcmp(got, model, cut) != 0))
        r = fz_fail(c, FZ_INTERFACE, "the sandbox holds the model's %zu bytes, the download gave %zu other ones", cut,
                    gl);
    free(got);
    free(model);
    return r;
}

static int rename_delete(fz_ctx *c)
{
    uint8_t data[300];
    fz_bytes(&c->rng, data, sizeof data);
    char sha[65];
    fz_sha256(data, sizeof data, sha);
    fz_evidence(c, "input", "300 bytes, sha256 %s", sha);
    fz_upload files[] = { { "/home/user/rd/a.bin", data, sizeof data }, { "/home/user/rd/b.bin", data, 10 } };
    if (fz_put_checked_many(c, files, 2) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, "cd /home/user/rd && mv a.bin c.bin && rm b.bin && ls", &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0 || strcmp(out, "c.bin\n") != 0)
        return fz_fail(c, FZ_SANDBOX, "after mv and rm the directory holds: %s", out);
    fz_upload renamed = { "/home/user/rd/c.bin", data, sizeof data };
    if (fz_check_inside(c, &renamed, 1, FZ_SANDBOX) < 0)
        return -1;
    _cleanup_free_ char *got = NULL;
    size_t gl;
    if (fz_get(c, "/home/user/rd/c.bin", &got, &gl) < 0)
        return -1;
    if (gl != sizeof data || memcmp(got, data, gl) != 0)
        return fz_fail(c, FZ_INTERFACE, "the renamed file reads back as %zu other bytes", gl);
    /* the deleted one: the API must say not_found, not hand out stale bytes */
    char why[64];
    int r = fz_try_read(c, "/home/user/rd/b.bin", why);
    if (r == 0)
        return fz_fail(c, FZ_INTERFACE, "a deleted file could still be read");
    if (r == 1 && strcmp(why, "not_found") != 0)
        return fz_fail(c, FZ_INTERFACE, "a deleted file: refused with '%s', not not_found", why);
    return r < 0 ? -1 : 0;
}

/* The entry named name in a listing, or NULL. */
static json_t *entry_named(json_t *entries, const char *path)
{
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        const char *p = json_string_value(json_object_get(e, "path"));
        if (p && strcmp(p, path) == 0)
            return e;
    }
    return NULL;
}

/* Directories made and a file moved through the file API (not commands);
 * the API's listing and stat must agree with what was written, and with
 * what the sandbox holds inside. */
static int tree_checks(fz_ctx *c, const char *top, const char *dir, size_t nfiles, char paths[][200],
                       const size_t *sizes, fz_upload *files);

static int api_tree(fz_ctx *c)
{
    char top[64];
    snprintf(top, sizeof top, "/home/user/api%llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
    size_t nfiles = 1 + (size_t) fz_below(&c->rng, 6);
    char dir[160];
    snprintf(dir, sizeof dir, "%s/a/b", top);
    if (fz_mkdir(c, dir) < 0)
        return -1;
    size_t sizes[8] = { 0 };
    char paths[8][200];
    uint8_t *bytes[8] = { 0 };
    fz_upload files[8];
    int r = 0;
    for (size_t i = 0; i < nfiles; i++) {
        char name[64];
        snprintf(name, sizeof name, "f%zu-%llu.bin", i, (unsigned long long) fz_below(&c->rng, 1000));
        snprintf(paths[i], sizeof paths[i], "%s/%s/%s", top, i % 2 ? "a/b" : "a", name);
        sizes[i] = (size_t) fz_below(&c->rng, 5000);
        bytes[i] = malloc(sizes[i] + 1);
        fz_bytes(&c->rng, bytes[i], sizes[i]);
        files[i] = (fz_upload) { paths[i], bytes[i], sizes[i] };
    }
    fz_evidence(c, "input", "%s: %zu files, the first %s (%zu bytes)", top, nfiles, paths[0], sizes[0]);
    r = fz_put_checked_many(c, files, nfiles);
    if (r == 0)
        r = tree_checks(c, top, dir, nfiles, paths, sizes, files);
    for (size_t i = 0; i < nfiles; i++)
        free(bytes[i]);
    return r;
}

/* api_tree after its uploads: a move, the listing, stat, and inside */
static int tree_checks(fz_ctx *c, const char *top, const char *dir, size_t nfiles, char paths[][200],
                       const size_t *sizes, fz_upload *files)
{
    /* the first file moves to the top */
    char moved[240];
    snprintf(moved, sizeof moved, "%s/moved-%s", top, strrchr(paths[0], '/') + 1);
    if (fz_move(c, paths[0], moved) < 0)
        return -1;
    snprintf(paths[0], sizeof paths[0], "%s", moved);
    /* inside, the same files with the same bytes, the moved one at its new
     * path (the move is the API's, done inside: what the sandbox holds
     * after it is the sandbox's) */
    if (fz_check_inside(c, files, nfiles, FZ_SANDBOX) < 0)
        return -1;
    _cleanup_json_ json_t *entries = NULL;
    if (fz_list(c, top, 3, &entries) < 0)
        return -1;
    /* the listing: the two directories and every file, with its size */
    if (json_array_size(entries) != nfiles + 2)
        return fz_fail(c, FZ_INTERFACE, "the listing of %s has %zu entries, not %zu", top, json_array_size(entries),
                       nfiles + 2);
    for (size_t i = 0; i < nfiles; i++) {
        json_t *e = entry_named(entries, paths[i]);
        if (!e)
            return fz_fail(c, FZ_INTERFACE, "the listing has no %s", paths[i]);
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!type || strcmp(type, "file") != 0 || json_integer_value(json_object_get(e, "size")) != (json_int_t) sizes[i])
            return fz_fail(c, FZ_INTERFACE, "the listing says %s is a %s of %lld bytes, not a file of %zu", paths[i],
                           type ? type : "?", json_integer_value(json_object_get(e, "size")), sizes[i]);
        _cleanup_json_ json_t *st = NULL;
        if (fz_stat(c, paths[i], &st) < 0)
            return -1;
        if (json_integer_value(json_object_get(st, "size")) != (json_int_t) sizes[i])
            return fz_fail(c, FZ_INTERFACE, "stat says %s has %lld bytes, not %zu", paths[i],
                           json_integer_value(json_object_get(st, "size")), sizes[i]);
    }
    _cleanup_json_ json_t *st = NULL;
    if (fz_stat(c, dir, &st) < 0)
        return -1;
    if (!json_is_string(json_object_get(st, "type")) || strcmp(json_string_value(json_object_get(st, "type")), "dir"))
        return fz_fail(c, FZ_INTERFACE, "stat of the directory %s: %s", dir,
                       json_string_value(json_object_get(st, "type")) ?: "no type");
    return 0;
}

static const fz_test_def tests[] = {
    { "fs.api_tree", api_tree },
    { "fs.write_read", write_read },         { "fs.deep_tree", deep_tree },
    { "fs.many_small", many_small },         { "fs.append_truncate", append_truncate },
    { "fs.rename_delete", rename_delete },
};
const fz_domain fz_domain_fs = { "fs", tests, sizeof tests / sizeof *tests };
