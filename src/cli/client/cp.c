/* cp.c - `sbx cp`: files and directory trees between here and a sandbox.
 *
 * One side is ID:PATH (in the sandbox), the other a local path or `-`
 * (stdin / stdout).  Files are streamed both ways, never held whole: a PUT
 * reads its body from the FILE as curl sends it, a GET writes to the FILE
 * as it arrives.  Directories are copied recursively, as `docker cp` does:
 * upload walks the local tree (mkdir for each directory, so empty ones
 * arrive too, PUT for each file); download lists each directory (files/list,
 * depth 1) and GETs each file.  cp's rule for the destination: an existing
 * directory receives the source under its own name.
 *
 * Symbolic links are skipped with a warning in both directions: a link's
 * meaning depends on the tree it points into, and recreating links from a
 * sandbox on the host is a way for hostile sandbox content to redirect
 * later writes.  A symlink named on the command line is followed. */
#define _GNU_SOURCE
#include "client.h"
#include "../../lib/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A tree deeper than this is more likely a loop than a project. */
#define MAX_DEPTH 256

static const struct option cp_options[] = {
    { "user", required_argument, NULL, 'u' },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb cp_verb = {
    .name = "cp",
    .usage = "sbx cp [-u root] SRC DST   (one of them ID:PATH)",
    .help = "\n"
            "Copy a file or directory tree into a sandbox (DST is ID:PATH) or out of one (SRC is ID:PATH).\n"
            "Directories are copied recursively.  If DST is an existing directory, SRC is copied into it\n"
            "under its own name; a DST ending in '/' is such a directory (created if missing).  A relative\n"
            "sandbox PATH is relative to the user's home; ID: alone is the home.  `-` is stdin (as SRC)\n"
            "or stdout (as DST) for a single file.  Symbolic links inside a tree are skipped, with a\n"
            "warning.  A local path containing ':' is written ./NAME:X.\n"
            "\n"
            "  -u, --user root       access the sandbox's files as its root (default: as user)\n",
    .shortopts = "u:",
    .longopts = cp_options,
    .stop_after = -1,
};

struct cp {
    sbx_http *h;
    const char *id;
    const char *user; /* ?user=, or NULL */
    mode_t umask;
};

static int cp_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    struct cp *c = ctx;
    if (opt != 'u')
        return sbx_error_set(err, 0, "unhandled option");
    if (!*arg)
        return sbx_error_set(err, 0, "-u: empty user");
    c->user = arg;
    return 0;
}

/* "ID:PATH" -> true, with *id (to free) and *path pointing into arg.  An
 * id never holds '/', so "./a:b" and "/x/a:b" are local. */
static bool split_remote(const char *arg, char **id, const char **path)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || memchr(arg, '/', (size_t) (colon - arg)))
        return false;
    *id = strndup(arg, (size_t) (colon - arg));
    *path = colon[1] ? colon + 1 : "."; /* ID: alone: the home directory */
    return *id != NULL;
}

static char *join(const char *dir, const char *name)
{
    char *r = NULL;
    size_t n = strlen(dir);
    bool slash = n > 0 && dir[n - 1] == '/';
    if (asprintf(&r, "%s%s%s", dir, slash ? "" : "/", name) < 0)
        return NULL;
    return r;
}

/* The last component of p, trailing slashes ignored ("a/b/" -> "b"); to
 * free.  "." or "/" name the directory itself: its contents are copied. */
static char *base_name(const char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    const char *start = p;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '/')
            start = p + i + 1;
    return strndup(start, n - (size_t) (start - p));
}

static bool names_itself(const char *base)
{
    return strcmp(base, ".") == 0 || strcmp(base, "/") == 0 || strcmp(base, "..") == 0;
}

static bool ends_with_slash(const char *p)
{
    size_t n = strlen(p);
    return n > 0 && p[n - 1] == '/';
}

/* "/v1/sandboxes/ID/files<endpoint>?path=P[&user=U]<extra>" */
static char *files_path(struct cp *c, const char *endpoint, const char *path, const char *extra, sbx_error *err)
{
    _cleanup_free_ char *ep = sbx_http_escape(c->h, path, err);
    _cleanup_free_ char *eu = c->user ? sbx_http_escape(c->h, c->user, err) : NULL;
    _cleanup_free_ char *suffix = NULL;
    if (!ep || (c->user && !eu))
        return NULL;
    if (asprintf(&suffix, "/files%s?path=%s%s%s%s", endpoint, ep, eu ? "&user=" : "", eu ? eu : "", extra) < 0) {
        sbx_error_set(err, ENOMEM, "request path");
        return NULL;
    }
    return sbx_cli_sandbox_path(c->h, c->id, suffix, err);
}

/* files/stat: 1 and *entry if path exists, 0 if not (404), -1 on error. */
static int remote_stat(struct cp *c, const char *path, json_t **entry, sbx_error *err)
{
    _cleanup_free_ char *p = files_path(c, "/stat", path, "", err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    *entry = NULL;
    if (!p)
        return -1;
    if (sbx_http_json(c->h, "GET", p, NULL, &resp, err) < 0)
        return sbx_http_status(c->h) == 404 ? 0 : -1;
    if (!json_is_object(resp.json) || !json_is_string(json_object_get(resp.json, "type")))
        return sbx_error_set(err, 0, "sbxd's answer to files/stat has no type");
    *entry = json_incref(resp.json);
    return 1;
}

static const char *entry_type(json_t *entry)
{
    const char *t = json_string_value(json_object_get(entry, "type"));
    return t ? t : "";
}

/* ---- upload ---- */

static int upload_file(struct cp *c, const char *local, FILE *f, const struct stat *st, const char *remote,
                       sbx_error *err)
{
    char extra[32] = "";
    int64_t size = -1;
    if (st && S_ISREG(st->st_mode)) {
        size = (int64_t) st->st_size;
        /* permission bits travel (a script stays executable); never set-id bits */
        snprintf(extra, sizeof extra, "&mode=%04o", (unsigned) (st->st_mode & 0777));
    }
    _cleanup_free_ char *p = files_path(c, "", remote, extra, err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!p)
        return -1;
    if (sbx_http_upload(c->h, p, f, size, &resp, err) < 0)
        return sbx_error_wrap(err, "%s -> %s:%s", local, c->id, remote);
    return 0;
}

static int upload_path(struct cp *c, const char *local, const char *remote, sbx_error *err)
{
    _cleanup_fclose_ FILE *f = fopen(local, "rb");
    if (!f)
        return sbx_error_set(err, errno, "%s", local);
    struct stat fst;
    /* the size announced must be the size of what we send: the opened file's */
    if (fstat(fileno(f), &fst) < 0)
        return sbx_error_set(err, errno, "%s", local);
    return upload_file(c, local, f, &fst, remote, err);
}

static int remote_mkdir(struct cp *c, const char *remote, sbx_error *err)
{
    _cleanup_free_ char *p = sbx_cli_sandbox_path(c->h, c->id, "/files/mkdir", err);
    _cleanup_free_ char *q = NULL;
    if (!p)
        return -1;
    if (c->user) {
        _cleanup_free_ char *eu = sbx_http_escape(c->h, c->user, err);
        if (!eu || asprintf(&q, "%s?user=%s", p, eu) < 0)
            return eu ? sbx_error_set(err, ENOMEM, "request path") : -1;
    }
    _cleanup_json_ json_t *body = json_pack("{sssb}", "path", remote, "parents", 1);
    if (!body)
        return sbx_error_set(err, 0, "%s: not a valid UTF-8 path", remote);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (sbx_http_json(c->h, "POST", q ? q : p, body, &resp, err) < 0)
        return sbx_error_wrap(err, "mkdir %s:%s", c->id, remote);
    return 0;
}

static int upload_tree(struct cp *c, const char *local, const char *remote, int depth, sbx_error *err)
{
    if (depth > MAX_DEPTH)
        return sbx_error_set(err, 0, "%s: deeper than %d levels", local, MAX_DEPTH);
    if (remote_mkdir(c, remote, err) < 0)
        return -1;
    _cleanup_closedir_ DIR *d = opendir(local);
    if (!d)
        return sbx_error_set(err, errno, "%s", local);
    struct dirent *de;
    while ((errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        _cleanup_free_ char *lp = join(local, de->d_name);
        _cleanup_free_ char *rp = join(remote, de->d_name);
        if (!lp || !rp)
            return sbx_error_set(err, ENOMEM, "path");
        struct stat st;
        if (lstat(lp, &st) < 0)
            return sbx_error_set(err, errno, "%s", lp);
        if (S_ISLNK(st.st_mode)) {
            fprintf(stderr, "sbx: warning: skipping symbolic link %s (sbx cp copies no links)\n", lp);
        } else if (S_ISDIR(st.st_mode)) {
            if (upload_tree(c, lp, rp, depth + 1, err) < 0)
                return -1;
        } else if (S_ISREG(st.st_mode)) {
            if (upload_path(c, lp, rp, err) < 0)
                return -1;
        } else {
            fprintf(stderr, "sbx: warning: skipping %s: not a regular file or directory\n", lp);
        }
    }
    if (errno)
        return sbx_error_set(err, errno, "reading directory %s", local);
    return 0;
}

static int upload(struct cp *c, const char *local, const char *remote, sbx_error *err)
{
    _cleanup_json_ json_t *dst = NULL;
    int exists = remote_stat(c, remote, &dst, err);
    if (exists < 0)
        return -1;
    bool dst_dir = exists && strcmp(entry_type(dst), "dir") == 0;

    if (strcmp(local, "-") == 0) {
        if (dst_dir || ends_with_slash(remote))
            return sbx_error_set(err, 0, "%s:%s is a directory: name the file stdin should go to", c->id, remote);
        return upload_file(c, "stdin", stdin, NULL, remote, err);
    }

    struct stat st; /* follows a symlink: the user named it */
    if (stat(local, &st) < 0)
        return sbx_error_set(err, errno, "%s", local);
    bool src_dir = S_ISDIR(st.st_mode);
    _cleanup_free_ char *base = base_name(local);
    _cleanup_free_ char *target = NULL;
    if (!base)
        return sbx_error_set(err, ENOMEM, "path");
    if (dst_dir || (!exists && ends_with_slash(remote)))
        target = names_itself(base) ? strdup(remote) : join(remote, base);
    else if (exists && src_dir)
        return sbx_error_set(err, 0, "cannot overwrite non-directory %s:%s with directory %s", c->id, remote, local);
    else
        target = strdup(remote);
    if (!target)
        return sbx_error_set(err, ENOMEM, "path");

    if (src_dir)
        return upload_tree(c, local, target, 0, err);
    if (S_ISREG(st.st_mode))
        return upload_path(c, local, target, err);
    /* a pipe or device named on the command line (<(cmd), /dev/stdin): stream it */
    _cleanup_fclose_ FILE *f = fopen(local, "rb");
    if (!f)
        return sbx_error_set(err, errno, "%s", local);
    return upload_file(c, local, f, NULL, target, err);
}

/* ---- download ---- */

/* The file's mode from a files/list or files/stat entry ("0644"), else 0644. */
static mode_t entry_mode(json_t *entry)
{
    const char *m = json_string_value(json_object_get(entry, "mode"));
    char *end;
    unsigned long v = m ? strtoul(m, &end, 8) : 0;
    if (!m || !*m || *end || v > 07777)
        return 0644;
    return (mode_t) (v & 0777);
}

/* GET into a temporary file next to `local`, renamed over it at the end:
 * a failed download never leaves half a file (as sbxd's uploads do).  A
 * destination that exists and is not a regular file (a FIFO, /dev/null) is
 * written in place. */
static int download_file(struct cp *c, const char *remote, const char *local, mode_t mode, sbx_error *err)
{
    _cleanup_free_ char *p = files_path(c, "", remote, "", err);
    if (!p)
        return -1;
    struct stat st;
    if (stat(local, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode))
            return sbx_error_set(err, EISDIR, "%s", local);
        _cleanup_fclose_ FILE *f = fopen(local, "wb");
        if (!f)
            return sbx_error_set(err, errno, "%s", local);
        if (sbx_http_download(c->h, p, f, err) < 0)
            return sbx_error_wrap(err, "%s:%s -> %s", c->id, remote, local);
        if (fflush(f) != 0)
            return sbx_error_set(err, errno, "writing %s", local);
        return 0;
    }

    _cleanup_free_ char *dcopy = strdup(local);
    _cleanup_free_ char *bcopy = strdup(local);
    _cleanup_free_ char *tmp = NULL;
    if (!dcopy || !bcopy || asprintf(&tmp, "%s/.%s.sbx-XXXXXX", dirname(dcopy), basename(bcopy)) < 0)
        return sbx_error_set(err, ENOMEM, "path");
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "creating a file next to %s", local);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        sbx_error_set(err, errno, "%s", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    int r = sbx_http_download(c->h, p, f, err);
    if (r < 0)
        sbx_error_wrap(err, "%s:%s -> %s", c->id, remote, local);
    else if (fflush(f) != 0 || fchmod(fd, mode & ~c->umask) < 0)
        r = sbx_error_set(err, errno, "writing %s", local);
    if (fclose(f) != 0 && r == 0)
        r = sbx_error_set(err, errno, "writing %s", local);
    if (r == 0 && rename(tmp, local) < 0)
        r = sbx_error_set(err, errno, "renaming %s to %s", tmp, local);
    if (r < 0)
        unlink(tmp);
    return r;
}

/* A name from a sandbox's listing: hostile input.  It becomes one
 * component of a local path, so it must be exactly one. */
static bool safe_name(json_t *name)
{
    const char *s = json_string_value(name);
    return s && *s && strlen(s) == json_string_length(name) && !strchr(s, '/') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

static int download_tree(struct cp *c, const char *remote, const char *self, const char *local, int depth,
                         sbx_error *err)
{
    if (depth > MAX_DEPTH)
        return sbx_error_set(err, 0, "%s:%s: deeper than %d levels", c->id, remote, MAX_DEPTH);
    if (mkdir(local, 0777) < 0) {
        struct stat st;
        if (errno != EEXIST || stat(local, &st) < 0 || !S_ISDIR(st.st_mode))
            return sbx_error_set(err, errno == EEXIST ? ENOTDIR : errno, "%s", local);
    }
    _cleanup_free_ char *p = files_path(c, "/list", remote, "&depth=1", err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!p || sbx_http_json(c->h, "GET", p, NULL, &resp, err) < 0)
        return -1;
    json_t *entries = json_object_get(resp.json, "entries");
    if (!json_is_array(entries))
        return sbx_error_set(err, 0, "sbxd's answer to files/list has no entries");
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_t *name = json_object_get(e, "name");
        const char *type = entry_type(e);
        const char *abs = json_string_value(json_object_get(e, "path"));
        if (self && abs && strcmp(abs, self) == 0)
            continue; /* a listing that includes the directory itself */
        if (!safe_name(name)) {
            fprintf(stderr, "sbx: warning: skipping an entry of %s:%s with an unusable name\n", c->id, remote);
            continue;
        }
        _cleanup_free_ char *rp = join(remote, json_string_value(name));
        _cleanup_free_ char *lp = join(local, json_string_value(name));
        if (!rp || !lp)
            return sbx_error_set(err, ENOMEM, "path");
        if (strcmp(type, "dir") == 0) {
            if (download_tree(c, rp, abs, lp, depth + 1, err) < 0)
                return -1;
        } else if (strcmp(type, "file") == 0) {
            if (download_file(c, rp, lp, entry_mode(e), err) < 0)
                return -1;
        } else if (strcmp(type, "symlink") == 0) {
            fprintf(stderr, "sbx: warning: skipping symbolic link %s:%s (sbx cp copies no links)\n", c->id, rp);
        } else {
            fprintf(stderr, "sbx: warning: skipping %s:%s: not a regular file or directory\n", c->id, rp);
        }
    }
    return 0;
}

static int download(struct cp *c, const char *remote, const char *local, sbx_error *err)
{
    if (strcmp(local, "-") == 0) {
        _cleanup_free_ char *p = files_path(c, "", remote, "", err);
        if (!p || sbx_http_download(c->h, p, stdout, err) < 0)
            return -1;
        if (fflush(stdout) != 0)
            return sbx_error_set(err, errno, "writing stdout");
        return 0;
    }
    _cleanup_json_ json_t *src = NULL;
    int exists = remote_stat(c, remote, &src, err);
    if (exists <= 0)
        return -1; /* 404: sbxd's message names the path */
    const char *type = entry_type(src);
    bool src_dir = strcmp(type, "dir") == 0;
    if (!src_dir && strcmp(type, "file") != 0 && strcmp(type, "symlink") != 0)
        return sbx_error_set(err, 0, "%s:%s: not a regular file or directory", c->id, remote);

    _cleanup_free_ char *base = base_name(remote);
    _cleanup_free_ char *target = NULL;
    if (!base)
        return sbx_error_set(err, ENOMEM, "path");
    struct stat st;
    bool exists_here = stat(local, &st) == 0;
    if (!exists_here && ends_with_slash(local)) {
        if (mkdir(local, 0777) < 0)
            return sbx_error_set(err, errno, "%s", local);
        exists_here = stat(local, &st) == 0;
    }
    if (exists_here && S_ISDIR(st.st_mode))
        target = names_itself(base) ? strdup(local) : join(local, base);
    else if (exists_here && src_dir)
        return sbx_error_set(err, 0, "cannot overwrite non-directory %s with directory %s:%s", local, c->id, remote);
    else
        target = strdup(local);
    if (!target)
        return sbx_error_set(err, ENOMEM, "path");

    if (src_dir)
        return download_tree(c, remote, json_string_value(json_object_get(src, "path")), target, 0, err);
    /* a symlink named on the command line: GET follows it; if it leads to a
     * directory sbxd answers 409 and it is copied as one */
    int r = download_file(c, remote, target, entry_mode(src), err);
    if (r < 0 && strcmp(type, "symlink") == 0 && sbx_http_status(c->h) == 409) {
        if (stat(target, &st) == 0 && !S_ISDIR(st.st_mode))
            return r;
        return download_tree(c, remote, NULL, target, 0, err);
    }
    return r;
}

int sbx_client_cp(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    struct cp c = { 0 };
    sbx_cli_args a;
    int r = sbx_cli_parse(cli, &cp_verb, argc, argv, cp_option, &c, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&cp_verb, &err);
    if (a.npos != 2) {
        sbx_error_set(&err, 0, a.npos < 2 ? "missing %s" : "too many arguments%s", a.npos < 2 ? "SRC or DST" : "");
        return sbx_cli_usage_error(&cp_verb, &err);
    }
    _cleanup_free_ char *src_id = NULL, *dst_id = NULL;
    const char *src_path = NULL, *dst_path = NULL;
    bool src_remote = split_remote(a.pos[0], &src_id, &src_path);
    bool dst_remote = split_remote(a.pos[1], &dst_id, &dst_path);
    if (src_remote == dst_remote) {
        sbx_error_set(&err, 0, src_remote ? "both SRC and DST are in a sandbox: one must be local"
                                          : "neither SRC nor DST is ID:PATH (a sandbox path)");
        return sbx_cli_usage_error(&cp_verb, &err);
    }
    c.h = sbx_cli_http(cli, &err);
    if (!c.h)
        return sbx_cli_fail(&err);
    c.umask = umask(0);
    umask(c.umask);
    if (src_remote) {
        c.id = src_id;
        r = download(&c, src_path, a.pos[1], &err);
    } else {
        c.id = dst_id;
        r = upload(&c, a.pos[0], dst_path, &err);
    }
    return r < 0 ? sbx_cli_fail(&err) : 0;
}
