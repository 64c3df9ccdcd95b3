/* test_image.c - unit tests for src/daemon/image.c: rootfs tarballs, OCI and
 * docker-save archives, and the attacks a hostile archive can try.
 *
 * Every input archive is built here with libarchive's write API into a
 * mkdtemp directory under /tmp, extracted as root (the importer chowns), and
 * removed afterwards.  A test that tries to escape the destination points
 * its symlinks at a canary directory of its own under /tmp, never at a host
 * path whose loss would hurt if the importer were broken. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <locale.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/daemon/image.h"

#define UID_BASE 1000000000U
#define MTIME 1600000000

static char g_tmp[256]; /* this run's directory under /tmp */

/* ---- helpers ------------------------------------------------------------ */

/* A path below the test directory, in one of a few rotating buffers. */
__attribute__((format(printf, 1, 2))) static const char *P(const char *fmt, ...)
{
    static char bufs[64][4096];
    static int next;
    char *b = bufs[next++ % 64];
    int n = snprintf(b, sizeof bufs[0], "%s/", g_tmp);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, sizeof bufs[0] - (size_t) n, fmt, ap);
    va_end(ap);
    return b;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st, (void) flag, (void) ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory for one test's destination. */
static const char *fresh_dir(const char *name)
{
    const char *p = P("%s", name);
    rm_rf(p);
    if (mkdir(p, 0755) < 0)
        fail_msg("mkdir %s: %s", p, strerror(errno));
    return p;
}

typedef struct tent {
    char type;          /* f file, d dir, l symlink, h hard link, p FIFO, c char device, b block device */
    const char *name;
    const char *target; /* symlink / hard link target */
    const char *data;   /* file content (NUL-terminated unless len) */
    size_t len;
    unsigned mode;      /* 0: 0644 / 0755 */
    int64_t uid, gid;
    time_t mtime;       /* 0: MTIME */
} tent;

#define F(n, d) { .type = 'f', .name = (n), .data = (d) }
#define D(n) { .type = 'd', .name = (n) }
#define L(n, t) { .type = 'l', .name = (n), .target = (t) }
#define H(n, t) { .type = 'h', .name = (n), .target = (t) }

enum filter { RAW, GZIP, ZSTD, XZ };

static void write_tar(const char *path, enum filter filter, const tent *ents, size_t n)
{
    /* Written in a UTF-8 locale (libarchive's pax writer cannot store a
     * non-ASCII name from the C locale); read back in the C locale, as sbxd
     * runs. */
    locale_t utf8 = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t) 0);
    assert_non_null(utf8);
    locale_t old = uselocale(utf8);
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    int r = ARCHIVE_OK;
    if (filter == GZIP)
        r = archive_write_add_filter_gzip(a);
    else if (filter == ZSTD)
        r = archive_write_add_filter_zstd(a);
    else if (filter == XZ)
        r = archive_write_add_filter_xz(a);
    if (r != ARCHIVE_OK)
        fail_msg("filter %d: %s", filter, archive_error_string(a));
    if (archive_write_open_filename(a, path) != ARCHIVE_OK)
        fail_msg("open %s: %s", path, archive_error_string(a));
    for (size_t i = 0; i < n; i++) {
        const tent *t = &ents[i];
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, t->name);
        archive_entry_set_uid(e, t->uid);
        archive_entry_set_gid(e, t->gid);
        archive_entry_set_mtime(e, t->mtime ? t->mtime : MTIME, 0);
        size_t len = t->data ? (t->len ? t->len : strlen(t->data)) : 0;
        switch (t->type) {
        case 'f':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, (la_int64_t) len);
            break;
        case 'd':
            archive_entry_set_filetype(e, AE_IFDIR);
            break;
        case 'l':
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, t->target);
            break;
        case 'h':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_hardlink(e, t->target);
            break;
        case 'p':
            archive_entry_set_filetype(e, AE_IFIFO);
            break;
        case 'c':
        case 'b':
            archive_entry_set_filetype(e, t->type == 'c' ? AE_IFCHR : AE_IFBLK);
            archive_entry_set_rdev(e, 0);
            break;
        default:
            fail_msg("bad type %c", t->type);
        }
        archive_entry_set_perm(e, t->mode ? t->mode : (t->type == 'd' ? 0755 : 0644));
        if (archive_write_header(a, e) != ARCHIVE_OK)
            fail_msg("header %s: %s", t->name, archive_error_string(a));
        if (len && archive_write_data(a, t->data, len) != (la_ssize_t) len)
            fail_msg("data %s: %s", t->name, archive_error_string(a));
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    uselocale(old);
    freelocale(utf8);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t) n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t) n, f), (size_t) n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t) n;
    return buf;
}

static void sha256_hex(const void *data, size_t len, char hex[72])
{
    unsigned char md[32];
    unsigned mdlen = 0;
    assert_int_equal(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* The outer archive of an image, built in memory then written. */
typedef struct outer {
    tent ents[64]; /* names, targets and data are malloc'ed copies */
    size_t n;
} outer;

static void outer_add(outer *o, char type, const char *name, const char *target, const char *data, size_t len)
{
    assert_true(o->n < 64);
    char *nm = strdup(name), *dt = NULL, *tg = target ? strdup(target) : NULL;
    if (data) {
        dt = malloc(len + 1);
        memcpy(dt, data, len);
        dt[len] = '\0';
    }
    o->ents[o->n++] = (tent) { .type = type, .name = nm, .target = tg, .data = dt, .len = len };
}

static void outer_free(outer *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free((char *) o->ents[i].name);
        free((char *) o->ents[i].target);
        free((char *) o->ents[i].data);
    }
    o->n = 0;
}

/* Add data as blobs/sha256/<hex>; digest receives "sha256:<hex>". */
static void outer_blob(outer *o, const char *data, size_t len, char digest[80])
{
    char hex[72], name[128];
    sha256_hex(data, len, hex);
    snprintf(digest, 80, "sha256:%s", hex);
    snprintf(name, sizeof name, "blobs/sha256/%s", hex);
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->ents[i].name, name) == 0)
            return;
    outer_add(o, 'f', name, NULL, data, len);
}

static void outer_blob_file(outer *o, const char *path, char digest[80], size_t *size)
{
    size_t len;
    char *data = read_all(path, &len);
    outer_blob(o, data, len, digest);
    free(data);
    if (size)
        *size = len;
}

static void outer_blob_str(outer *o, const char *s, char digest[80])
{
    outer_blob(o, s, strlen(s), digest);
}

/* Build a layer from entries: gzip'ed blob, with its uncompressed digest (diff_id). */
typedef struct layer_blob {
    char digest[80], diff_id[80];
    size_t size;
} layer_blob;

static layer_blob outer_layer(outer *o, const char *tag, const tent *ents, size_t n)
{
    layer_blob b;
    const char *raw = P("%s.tar", tag), *gz = P("%s.tar.gz", tag);
    write_tar(raw, RAW, ents, n);
    write_tar(gz, GZIP, ents, n);
    size_t len;
    char *data = read_all(raw, &len), hex[72];
    sha256_hex(data, len, hex);
    free(data);
    snprintf(b.diff_id, sizeof b.diff_id, "sha256:%s", hex);
    outer_blob_file(o, gz, b.digest, &b.size);
    unlink(raw);
    unlink(gz);
    return b;
}

static char *config_json(const layer_blob *layers, size_t n)
{
    char *s = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&s, &cap);
    fprintf(f, "{\"architecture\":\"amd64\",\"os\":\"linux\","
               "\"config\":{\"Env\":[\"PATH=/usr/bin:/bin\",\"LANG=C.UTF-8\"],"
               "\"WorkingDir\":\"/work\",\"User\":\"1000:1000\",\"Entrypoint\":[\"/bin/sh\",\"-c\"],"
               "\"Cmd\":[\"echo hi\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\"%s\"", i ? "," : "", layers[i].diff_id);
    fprintf(f, "]}}");
    fclose(f);
    return s;
}

/* An image manifest blob for the layers and config; its descriptor
 * fields are returned through digest/size. */
static void outer_manifest(outer *o, const layer_blob *layers, size_t n, const char *config, char digest[80],
                           size_t *size)
{
    char cdigest[80];
    outer_blob_str(o, config, cdigest);
    char *s = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&s, &cap);
    fprintf(f, "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
               "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
               "\"layers\":[",
            cdigest, strlen(config));
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"%s\",\"size\":%zu}",
                i ? "," : "", layers[i].digest, layers[i].size);
    fprintf(f, "]}");
    fclose(f);
    outer_blob_str(o, s, digest);
    *size = strlen(s);
    free(s);
}

static void outer_index(outer *o, const char *index_json)
{
    const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
    outer_add(o, 'f', "oci-layout", NULL, layout, strlen(layout));
    outer_add(o, 'f', "index.json", NULL, index_json, strlen(index_json));
}

/* A one-image OCI archive with these layers and the standard config. */
static void build_oci(const char *path, const tent *const *layers, const size_t *counts, size_t n)
{
    outer o = { 0 };
    layer_blob lb[8];
    for (size_t i = 0; i < n; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "layer%zu", i);
        lb[i] = outer_layer(&o, tag, layers[i], counts[i]);
    }
    char *config = config_json(lb, n), mdigest[80], index[512];
    size_t msize;
    outer_manifest(&o, lb, n, config, mdigest, &msize);
    snprintf(index, sizeof index,
             "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu}]}",
             mdigest, msize);
    outer_index(&o, index);
    write_tar(path, RAW, o.ents, o.n);
    free(config);
    outer_free(&o);
}

static struct stat lstat_ok(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        fail_msg("lstat %s: %s", path, strerror(errno));
    return st;
}

static void assert_missing(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        fail_msg("%s exists, it should not", path);
    assert_int_equal(errno, ENOENT);
}

static void assert_content(const char *path, const char *want)
{
    char *got = read_all(path, NULL);
    if (strcmp(got, want) != 0)
        fail_msg("%s holds \"%s\", want \"%s\"", path, got, want);
    free(got);
}

static void assert_owner_mode(const char *path, uid_t uid, gid_t gid, mode_t mode)
{
    struct stat st = lstat_ok(path);
    if (st.st_uid != uid || st.st_gid != gid)
        fail_msg("%s: owner %u:%u, want %u:%u", path, st.st_uid, st.st_gid, uid, gid);
    if ((st.st_mode & 07777) != mode)
        fail_msg("%s: mode %o, want %o", path, st.st_mode & 07777, mode);
}

/* Nothing like ".<dest>.import-XXXXXX" may stay next to dest. */
static void assert_no_tmpdir(void)
{
    DIR *d = opendir(g_tmp);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".import-"))
            fail_msg("temporary directory %s/%s left behind", g_tmp, e->d_name);
    closedir(d);
}

static void assert_error(int r, const sbx_error *err, int errnum, const char *needle, const char *needle2)
{
    if (r != -1)
        fail_msg("succeeded, want an error with \"%s\"", needle);
    if (errnum >= 0 && err->errno_ != errnum)
        fail_msg("errno %d (%s), want %d: %s", err->errno_, strerror(err->errno_), errnum, err->msg);
    if (needle && !strstr(err->msg, needle))
        fail_msg("error lacks \"%s\": %s", needle, err->msg);
    if (needle2 && !strstr(err->msg, needle2))
        fail_msg("error lacks \"%s\": %s", needle2, err->msg);
}

static const sbx_extract_opts opts = { .uid_base = UID_BASE, .whiteouts = true };

static int import(const char *archive, const char *dest, sbx_image_config *cfg, sbx_error *err)
{
    int r = sbx_image_import(archive, dest, &opts, cfg, err);
    assert_no_tmpdir();
    return r;
}

static int extract(const char *tar, const char *dest, const sbx_extract_opts *o, sbx_error *err)
{
    int fd = open(dest, O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    int r = sbx_tar_extract(tar, fd, o ? o : &opts, err);
    close(fd);
    return r;
}

static void must(int r, const sbx_error *err)
{
    if (r != 0)
        fail_msg("failed: %s", err->msg);
}

/* ---- 1. plain root file system tarball -------------------------------- */

static void test_rootfs_tarball(void **state)
{
    (void) state;
    const tent ents[] = {
        { .type = 'd', .name = "./", .mode = 0755 },
        { .type = 'd', .name = "./etc/", .mode = 0700, .mtime = 1400000000 },
        { .type = 'f', .name = "./etc/hostname", .data = "box\n", .mtime = 1500000000 },
        { .type = 'f', .name = "usr/bin/su", .data = "#!su", .mode = 04755 }, /* usr/bin: a missing parent */
        { .type = 'f', .name = "usr/bin/wall", .data = "#!wall", .mode = 02755, .gid = 5 },
        { .type = 'd', .name = "tmp", .mode = 01777 },
        { .type = 'd', .name = "home/user", .mode = 0700, .uid = 1000, .gid = 1000, .mtime = 1300000000 },
        { .type = 'f', .name = "home/user/notes", .data = "n", .mode = 0600, .uid = 1000, .gid = 1000 },
        { .type = 'f', .name = "opt/nobody", .data = "x", .uid = 70000, .gid = 70000 },
        { .type = 'l', .name = "bin", .target = "usr/bin", .mtime = 1200000000 },
        { .type = 'h', .name = "etc/hostname.link", .target = "etc/hostname" },
        { .type = 'h', .name = "bin.hard", .target = "bin" }, /* to a symlink: links the symlink */
        F("caf\xc3\xa9", "utf-8 name"),
        { .type = 'p', .name = "run/fifo", .mode = 0620, .uid = 1000, .gid = 1000 },
        { .type = 'f', .name = "/abs/file", .data = "abs" },          /* leading "/" stripped */
        { .type = 'd', .name = "etc", .mode = 0751, .mtime = 1400000000 }, /* again: stays, new mode */
        F("thing", "a file first"),
        D("thing"), /* another type: replaced */
        F("thing/inside", "i"),
        D("olddir"),
        F("olddir/f", "f"),
        L("olddir", "tmp"), /* a directory replaced by a symlink */
    };
    const char *tar = P("rootfs.tar.gz"), *dest = fresh_dir("rootfs");
    write_tar(tar, GZIP, ents, sizeof ents / sizeof ents[0]);
    sbx_error err = { 0 };
    sbx_image_config cfg;
    must(import(tar, dest, &cfg, &err), &err);
    assert_null(cfg.env);
    assert_null(cfg.cmd);
    assert_string_equal(cfg.workdir, "");
    assert_string_equal(cfg.user, "");
    sbx_image_config_free(&cfg);

    char p[4200];
#define IN(rel) (snprintf(p, sizeof p, "%s/%s", dest, rel), p)
    assert_owner_mode(dest, UID_BASE, UID_BASE, 0755); /* the "./" entry */
    assert_content(IN("etc/hostname"), "box\n");
    assert_owner_mode(IN("etc/hostname"), UID_BASE, UID_BASE, 0644);
    assert_int_equal(lstat_ok(IN("etc/hostname")).st_mtime, 1500000000);
    assert_owner_mode(IN("etc"), UID_BASE, UID_BASE, 0751);
    assert_int_equal(lstat_ok(IN("etc")).st_mtime, 1400000000); /* set after its files were written */
    assert_owner_mode(IN("usr/bin/su"), UID_BASE, UID_BASE, 04755);
    assert_owner_mode(IN("usr/bin/wall"), UID_BASE, UID_BASE + 5, 02755);
    assert_owner_mode(IN("usr/bin"), UID_BASE, UID_BASE, 0755); /* made for a missing parent */
    assert_owner_mode(IN("usr"), UID_BASE, UID_BASE, 0755);
    assert_owner_mode(IN("tmp"), UID_BASE, UID_BASE, 01777);
    assert_owner_mode(IN("home/user"), UID_BASE + 1000, UID_BASE + 1000, 0700);
    assert_int_equal(lstat_ok(IN("home/user")).st_mtime, 1300000000);
    assert_owner_mode(IN("home/user/notes"), UID_BASE + 1000, UID_BASE + 1000, 0600);
    assert_owner_mode(IN("opt/nobody"), UID_BASE + 65534, UID_BASE + 65534, 0644);

    struct stat st = lstat_ok(IN("bin"));
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(st.st_uid, UID_BASE);
    assert_int_equal(st.st_mtime, 1200000000);
    char target[64] = { 0 };
    assert_int_equal(readlink(IN("bin"), target, sizeof target - 1), 7);
    assert_string_equal(target, "usr/bin");

    struct stat bh = lstat_ok(IN("bin.hard"));
    assert_true(S_ISLNK(bh.st_mode));
    assert_int_equal(bh.st_ino, st.st_ino);
    assert_content(IN("caf\xc3\xa9"), "utf-8 name");

    struct stat a = lstat_ok(IN("etc/hostname")), b = lstat_ok(IN("etc/hostname.link"));
    assert_int_equal(a.st_ino, b.st_ino);
    assert_int_equal(a.st_nlink, 2);

    st = lstat_ok(IN("run/fifo"));
    assert_true(S_ISFIFO(st.st_mode));
    assert_owner_mode(IN("run/fifo"), UID_BASE + 1000, UID_BASE + 1000, 0620);

    assert_content(IN("abs/file"), "abs");
    assert_true(S_ISDIR(lstat_ok(IN("thing")).st_mode));
    assert_content(IN("thing/inside"), "i");
    assert_true(S_ISLNK(lstat_ok(IN("olddir")).st_mode));
#undef IN
    rm_rf(dest);
    unlink(tar);
}

/* Every compression libarchive writes here reads back; whiteouts off means
 * a ".wh." file is just a file. */
static void test_compressions(void **state)
{
    (void) state;
    const tent ents[] = { F("a/b", "data"), F("a/.wh.c", "") };
    const enum filter filters[] = { RAW, GZIP, ZSTD, XZ };
    for (size_t i = 0; i < 4; i++) {
        const char *tar = P("c%zu.tar", i), *dest = fresh_dir("compressed");
        write_tar(tar, filters[i], ents, 2);
        sbx_error err = { 0 };
        sbx_extract_opts o = opts;
        o.whiteouts = false;
        must(extract(tar, dest, &o, &err), &err);
        char p[4200];
        snprintf(p, sizeof p, "%s/a/b", dest);
        assert_content(p, "data");
        snprintf(p, sizeof p, "%s/a/.wh.c", dest);
        lstat_ok(p);
        rm_rf(dest);
        unlink(tar);
    }
}

/* ---- 2. OCI archive: two layers, whiteouts, config ---------------------- */

static void test_oci_layers_whiteouts_config(void **state)
{
    (void) state;
    const tent l1[] = {
        D("etc"), F("etc/keep", "keep"), F("etc/gone", "gone"),
        D("var/cache"), F("var/cache/old1", "1"), D("var/cache/sub"), F("var/cache/sub/old2", "2"),
        D("srv"), D("srv/tree"), F("srv/tree/deep", "d"),
    };
    const tent l2[] = {
        F("var/cache/new", "new"), /* before the opaque marker: the two passes keep it */
        F("var/cache/.wh..wh..opq", ""),
        F("etc/.wh.gone", ""),
        F("etc/added", "added"),
        F("srv/.wh.tree", ""), /* a whole directory */
    };
    const tent *layers[] = { l1, l2 };
    const size_t counts[] = { sizeof l1 / sizeof l1[0], sizeof l2 / sizeof l2[0] };
    const char *arch = P("oci.tar"), *dest = fresh_dir("oci");
    build_oci(arch, layers, counts, 2);

    sbx_error err = { 0 };
    sbx_image_config cfg;
    assert_int_equal(chmod(dest, 0700), 0);
    must(import(arch, dest, &cfg, &err), &err);
    assert_owner_mode(dest, UID_BASE, UID_BASE, 0755); /* no "./" entry in the layers */
    char p[4200];
#define IN(rel) (snprintf(p, sizeof p, "%s/%s", dest, rel), p)
    assert_content(IN("etc/keep"), "keep");
    assert_missing(IN("etc/gone"));
    assert_missing(IN("etc/.wh.gone"));
    assert_content(IN("etc/added"), "added");
    assert_content(IN("var/cache/new"), "new");
    assert_missing(IN("var/cache/old1"));
    assert_missing(IN("var/cache/sub"));
    assert_missing(IN("var/cache/.wh..wh..opq"));
    assert_missing(IN("srv/tree"));
    assert_missing(IN("srv/.wh.tree"));
    assert_true(S_ISDIR(lstat_ok(IN("srv")).st_mode));
#undef IN
    assert_non_null(cfg.env);
    assert_int_equal(json_array_size(cfg.env), 2);
    assert_string_equal(json_string_value(json_array_get(cfg.env, 0)), "PATH=/usr/bin:/bin");
    assert_string_equal(json_string_value(json_array_get(cfg.env, 1)), "LANG=C.UTF-8");
    assert_string_equal(cfg.workdir, "/work");
    assert_string_equal(cfg.user, "1000:1000");
    assert_non_null(cfg.cmd);
    assert_int_equal(json_array_size(cfg.cmd), 3);
    assert_string_equal(json_string_value(json_array_get(cfg.cmd, 0)), "/bin/sh");
    assert_string_equal(json_string_value(json_array_get(cfg.cmd, 1)), "-c");
    assert_string_equal(json_string_value(json_array_get(cfg.cmd, 2)), "echo hi");
    sbx_image_config_free(&cfg);
    assert_null(cfg.env);
    sbx_image_config_free(&cfg); /* twice is fine */
    rm_rf(dest);
    unlink(arch);
}

/* ---- 3. OCI archive whose index points at an image index ---------------- */

#if defined(__aarch64__)
#define MY_ARCH "arm64"
#define OTHER_ARCH "amd64"
#else
#define MY_ARCH "amd64"
#define OTHER_ARCH "arm64"
#endif

static void test_oci_image_index(void **state)
{
    (void) state;
    outer o = { 0 };
    const tent mine[] = { F("arch", MY_ARCH) }, other[] = { F("arch", OTHER_ARCH) };
    layer_blob lm = outer_layer(&o, "mine", mine, 1), lo = outer_layer(&o, "other", other, 1);
    char *cm = config_json(&lm, 1), *co = config_json(&lo, 1);
    char dm[80], dother[80], dindex[80], index[1024], top[512];
    size_t sm, so;
    outer_manifest(&o, &lm, 1, cm, dm, &sm);
    outer_manifest(&o, &lo, 1, co, dother, &so);
    /* other first, then an attestation ("unknown/unknown"), then ours */
    snprintf(index, sizeof index,
             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":["
             "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\",\"size\":%zu,"
             "\"platform\":{\"os\":\"linux\",\"architecture\":\"" OTHER_ARCH "\"}},"
             "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\",\"size\":%zu,"
             "\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}},"
             "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\",\"size\":%zu,"
             "\"platform\":{\"os\":\"linux\",\"architecture\":\"" MY_ARCH "\"}}]}",
             dother, so, dother, so, dm, sm);
    outer_blob_str(&o, index, dindex);
    snprintf(top, sizeof top,
             "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu}]}",
             dindex, strlen(index));
    outer_index(&o, top);
    const char *arch = P("index.tar.gz"), *dest = fresh_dir("index");
    write_tar(arch, GZIP, o.ents, o.n); /* a compressed outer archive, too */
    outer_free(&o);
    free(cm);
    free(co);

    sbx_error err = { 0 };
    must(import(arch, dest, NULL, &err), &err);
    char p[4200];
    snprintf(p, sizeof p, "%s/arch", dest);
    assert_content(p, MY_ARCH);
    rm_rf(dest);
    unlink(arch);
}

/* ---- 4. classic docker save --------------------------------------------- */

static void test_docker_save(void **state)
{
    (void) state;
    const tent l1[] = { D("etc"), F("etc/os-release", "ID=test\n"), F("etc/gone", "x") };
    const tent l2[] = { F("etc/.wh.gone", ""), F("etc/motd", "hello\n") };
    outer o = { 0 };
    layer_blob lb[2];
    const tent *ls[] = { l1, l2 };
    size_t ns[] = { 3, 2 };
    for (int i = 0; i < 2; i++) {
        const char *raw = P("dl%d.tar", i);
        write_tar(raw, RAW, ls[i], ns[i]);
        size_t len;
        char *data = read_all(raw, &len), hex[72];
        sha256_hex(data, len, hex);
        snprintf(lb[i].diff_id, sizeof lb[i].diff_id, "sha256:%s", hex);
        /* docker's v1 ids are not digests */
        outer_add(&o, 'f', i == 0 ? "1111/layer.tar" : "2222/layer.tar", NULL, data, len);
        free(data);
        unlink(raw);
    }
    /* A layer repeated in an image is a symlink to the first copy. */
    outer_add(&o, 'l', "3333/layer.tar", "../1111/layer.tar", NULL, 0);
    char *config = config_json(lb, 2), hex[72], name[100], manifest[512];
    sha256_hex(config, strlen(config), hex);
    snprintf(name, sizeof name, "%s.json", hex);
    outer_add(&o, 'f', name, NULL, config, strlen(config));
    snprintf(manifest, sizeof manifest,
             "[{\"Config\":\"%s\",\"RepoTags\":[\"test:latest\"],\"Layers\":[\"3333/layer.tar\",\"2222/layer.tar\"]}]",
             name);
    outer_add(&o, 'f', "manifest.json", NULL, manifest, strlen(manifest));
    const char *arch = P("docker.tar"), *dest = fresh_dir("docker");
    write_tar(arch, RAW, o.ents, o.n);
    outer_free(&o);
    free(config);

    sbx_error err = { 0 };
    sbx_image_config cfg;
    must(import(arch, dest, &cfg, &err), &err);
    char p[4200];
    snprintf(p, sizeof p, "%s/etc/os-release", dest);
    assert_content(p, "ID=test\n");
    snprintf(p, sizeof p, "%s/etc/motd", dest);
    assert_content(p, "hello\n");
    snprintf(p, sizeof p, "%s/etc/gone", dest);
    assert_missing(p);
    assert_string_equal(cfg.workdir, "/work");
    assert_int_equal(json_array_size(cfg.env), 2);
    sbx_image_config_free(&cfg);
    rm_rf(dest);
    unlink(arch);
}

/* ---- 5. attacks --------------------------------------------------------- */

static void test_dotdot_refused(void **state)
{
    (void) state;
    const char *names[] = { "../x", "a/../../x", "/../x", "./a/b/../../../x" };
    for (size_t i = 0; i < 4; i++) {
        const tent ents[] = { F("ok", "fine"), F(names[i], "evil") };
        mkdir(P("dotdot"), 0755);
        const char *tar = P("dotdot.tar"), *dest = fresh_dir("dotdot/dest");
        write_tar(tar, RAW, ents, 2);
        sbx_error err = { 0 };
        assert_error(extract(tar, dest, NULL, &err), &err, -1, "unsafe path in layer", names[i]);
        assert_missing(P("dotdot/x"));
        assert_missing(P("x"));
        rm_rf(P("dotdot"));
        unlink(tar);
    }
    /* the same through sbx_image_import (a rootfs tarball) */
    const tent ents[] = { F("../x", "evil") };
    const char *tar = P("dotdot.tar"), *dest = fresh_dir("dotdot2");
    write_tar(tar, RAW, ents, 1);
    sbx_error err = { 0 };
    assert_error(import(tar, dest, NULL, &err), &err, -1, "unsafe path in layer", "'../x'");
    assert_missing(P("x"));
    rm_rf(dest);
    unlink(tar);
}

/* A file written through a symlink that points out (absolute or by "..")
 * lands inside dest, whether the symlink came in the same layer or an earlier one. */
static void test_symlink_escape(void **state)
{
    (void) state;
    char pwned[64], host[128], host2[128];
    snprintf(pwned, sizeof pwned, "pwned-%d-%ld", getpid(), (long) time(NULL));
    snprintf(host, sizeof host, "/tmp/%s", pwned);
    snprintf(host2, sizeof host2, "/tmp/%s.2", pwned);
    char n1[128], n2[128], n3[128];
    snprintf(n1, sizeof n1, "escape/tmp/%s", pwned);
    snprintf(n2, sizeof n2, "escape2/tmp/%s.2", pwned);
    snprintf(n3, sizeof n3, "escape3/%s.3", pwned); /* escape3 -> /tmp, created missing */
    const tent l1[] = { L("escape", "/"), L("escape2", "../../../../../../.."), F(n1, "caught") };
    const tent l2[] = { F(n2, "caught2"), L("escape3", "/tmp"), F(n3, "caught3") };
    const char *t1 = P("esc1.tar"), *t2 = P("esc2.tar"), *dest = fresh_dir("escape");
    write_tar(t1, RAW, l1, 3);
    write_tar(t2, GZIP, l2, 3);
    sbx_error err = { 0 };
    int r1 = extract(t1, dest, NULL, &err);
    int r2 = r1 == 0 ? extract(t2, dest, NULL, &err) : -1;
    struct stat st;
    bool leaked = lstat(host, &st) == 0 || lstat(host2, &st) == 0;
    char h3[160];
    snprintf(h3, sizeof h3, "%s.3", host);
    leaked |= lstat(h3, &st) == 0;
    unlink(host);
    unlink(host2);
    unlink(h3);
    if (leaked)
        fail_msg("a file was written to the host's /tmp");
    must(r1, &err);
    must(r2, &err);
    char p[4200];
    snprintf(p, sizeof p, "%s/tmp/%s", dest, pwned);
    assert_content(p, "caught");
    snprintf(p, sizeof p, "%s/tmp/%s.2", dest, pwned);
    assert_content(p, "caught2");
    snprintf(p, sizeof p, "%s/tmp/%s.3", dest, pwned);
    assert_content(p, "caught3");
    assert_owner_mode(P("escape/tmp"), UID_BASE, UID_BASE, 0755); /* the missing parent */
    rm_rf(dest);
    unlink(t1);
    unlink(t2);
}

static void test_hardlink_attacks(void **state)
{
    (void) state;
    sbx_error err = { 0 };
    /* ".." in the target */
    {
        const tent ents[] = { H("passwd", "../../etc/passwd") };
        const char *tar = P("hl.tar"), *dest = fresh_dir("hl");
        write_tar(tar, RAW, ents, 1);
        assert_error(extract(tar, dest, NULL, &err), &err, -1, "unsafe hard link target", "../../etc/passwd");
        assert_missing(P("hl/passwd"));
        rm_rf(dest);
    }
    /* through a symlink that points out: resolved in dest, where there is no etc/passwd */
    {
        const tent ents[] = { L("escape", "/"), H("stolen", "escape/etc/passwd") };
        const char *tar = P("hl.tar"), *dest = fresh_dir("hl");
        write_tar(tar, RAW, ents, 2);
        assert_error(extract(tar, dest, NULL, &err), &err, ENOENT, "hard link target", "stolen");
        assert_missing(P("hl/stolen"));
        rm_rf(dest);
    }
    /* ... and where dest has one, it is dest's that gets linked */
    {
        const tent ents[] = { F("etc/passwd", "inside\n"), L("escape", "/"), H("stolen", "escape/etc/passwd"),
                              H("stolen2", "/etc/passwd") };
        const char *tar = P("hl.tar"), *dest = fresh_dir("hl");
        write_tar(tar, RAW, ents, 4);
        must(extract(tar, dest, NULL, &err), &err);
        struct stat in = lstat_ok(P("hl/etc/passwd")), s1 = lstat_ok(P("hl/stolen")),
                    s2 = lstat_ok(P("hl/stolen2")), host = lstat_ok("/etc/passwd");
        assert_int_equal(s1.st_ino, in.st_ino);
        assert_int_equal(s2.st_ino, in.st_ino);
        assert_true(s1.st_ino != host.st_ino || s1.st_dev != host.st_dev);
        assert_content(P("hl/stolen"), "inside\n");
        rm_rf(dest);
    }
    /* a directory or a missing target */
    {
        const tent ents[] = { D("d"), H("dl", "d") };
        const char *tar = P("hl.tar"), *dest = fresh_dir("hl");
        write_tar(tar, RAW, ents, 2);
        assert_error(extract(tar, dest, NULL, &err), &err, EPERM, "is a directory", "'dl'");
        rm_rf(dest);
        const tent ents2[] = { H("nl", "nothing") };
        write_tar(tar, RAW, ents2, 1);
        dest = fresh_dir("hl");
        assert_error(extract(tar, dest, NULL, &err), &err, ENOENT, "hard link target 'nothing'", NULL);
        rm_rf(dest);
        unlink(tar);
    }
}

static void test_devices_skipped(void **state)
{
    (void) state;
    const tent ents[] = {
        { .type = 'c', .name = "dev/null" },  /* 0/0: an overlay whiteout */
        { .type = 'b', .name = "dev/sda" },
        { .type = 'c', .name = "etc/hosts" }, /* a device where a file was: skipped, the file stays */
        F("after", "still here"),
    };
    const tent before[] = { F("etc/hosts", "hosts") };
    const char *t0 = P("dev0.tar"), *tar = P("dev.tar"), *dest = fresh_dir("dev");
    write_tar(t0, RAW, before, 1);
    write_tar(tar, RAW, ents, 4);
    sbx_error err = { 0 };
    must(extract(t0, dest, NULL, &err), &err);
    must(extract(tar, dest, NULL, &err), &err);
    assert_missing(P("dev/dev/null"));
    assert_missing(P("dev/dev/sda"));
    assert_content(P("dev/etc/hosts"), "hosts");
    assert_content(P("dev/after"), "still here");
    rm_rf(dest);
    unlink(t0);
    unlink(tar);
}

/* An OCI archive whose layer blob does not hash to its digest (and one
 * whose descriptor lies about the size) is refused before any byte of it
 * is applied. */
static void test_digest_mismatch(void **state)
{
    (void) state;
    for (int variant = 0; variant < 2; variant++) {
        outer o = { 0 };
        const tent good[] = { F("good", "g") }, evil[] = { F("evil", "e") };
        layer_blob lb = outer_layer(&o, "good", good, 1);
        if (variant == 0) {
            /* same name, other content: blobs/sha256/<good hex> holds the evil layer */
            const char *gz = P("evil.tar.gz");
            write_tar(gz, GZIP, evil, 1);
            size_t len;
            char *data = read_all(gz, &len);
            for (size_t i = 0; i < o.n; i++)
                if (strstr(o.ents[i].name, lb.digest + 7)) {
                    free((char *) o.ents[i].data);
                    o.ents[i].data = data;
                    o.ents[i].len = len;
                }
            lb.size = len;
            unlink(gz);
        } else {
            lb.size += 1;
        }
        char *config = config_json(&lb, 1), md[80], index[512];
        size_t ms;
        outer_manifest(&o, &lb, 1, config, md, &ms);
        snprintf(index, sizeof index, "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"%s\",\"size\":%zu}]}", md, ms);
        outer_index(&o, index);
        const char *arch = P("mismatch.tar"), *dest = fresh_dir("mismatch");
        write_tar(arch, RAW, o.ents, o.n);
        outer_free(&o);
        free(config);
        sbx_error err = { 0 };
        assert_error(import(arch, dest, NULL, &err), &err, EINVAL, lb.digest,
                     variant == 0 ? "sha256 mismatch" : "its descriptor says");
        assert_missing(P("mismatch/evil"));
        assert_missing(P("mismatch/good"));
        rm_rf(dest);
        unlink(arch);
    }
}

static void test_max_bytes(void **state)
{
    (void) state;
    size_t big = 600 * 1024;
    char *data = malloc(big + 1);
    memset(data, 'x', big);
    data[big] = '\0';
    sbx_error err = { 0 };

    /* one file over the limit */
    const tent ents[] = { F("small", "s"), { .type = 'f', .name = "big", .data = data, .len = big } };
    const char *tar = P("big.tar.gz"), *dest = fresh_dir("big");
    write_tar(tar, GZIP, ents, 2);
    sbx_extract_opts o = opts;
    o.max_bytes = 512 * 1024;
    assert_error(sbx_image_import(tar, dest, &o, NULL, &err), &err, EFBIG, "limit of 524288 bytes", "'big'");
    assert_no_tmpdir();
    struct stat st;
    if (lstat(P("big/big"), &st) == 0 && st.st_size > 0)
        fail_msg("wrote %lld bytes of the file over the limit", (long long) st.st_size);
    rm_rf(dest);

    /* exactly the limit is fine */
    o.max_bytes = big + 1;
    dest = fresh_dir("big");
    must(sbx_image_import(tar, dest, &o, NULL, &err), &err);
    rm_rf(dest);
    unlink(tar);

    /* the budget spans the layers of an image: two files each under it, together over */
    const tent l1[] = { { .type = 'f', .name = "one", .data = data, .len = big } };
    const tent l2[] = { { .type = 'f', .name = "two", .data = data, .len = big } };
    const tent *layers[] = { l1, l2 };
    const size_t counts[] = { 1, 1 };
    const char *arch = P("big-oci.tar");
    build_oci(arch, layers, counts, 2);
    dest = fresh_dir("big");
    o.max_bytes = big + big / 2;
    assert_error(sbx_image_import(arch, dest, &o, NULL, &err), &err, EFBIG, "'two'", "sha256:");
    assert_no_tmpdir();
    rm_rf(dest);
    unlink(arch);
    free(data);
}

/* Whiteouts reach through symlinks only inside dest: a symlink aimed at a
 * canary directory on the host (absolute, or by "..") leads to dest's own
 * copy of that path, which is what goes; the host's canary stays. */
static void test_whiteout_through_symlink(void **state)
{
    (void) state;
    /* the host canary: <tmp>/host/canary and <tmp>/host/dir/file */
    const char *host = P("host");
    rm_rf(host);
    assert_int_equal(mkdir(host, 0755), 0);
    assert_int_equal(mkdir(P("host/dir"), 0755), 0);
    FILE *f = fopen(P("host/canary"), "w");
    fputs("alive", f);
    fclose(f);
    f = fopen(P("host/dir/file"), "w");
    fputs("alive", f);
    fclose(f);

    char rel[4096], in_canary[4096], in_file[4096];
    snprintf(rel, sizeof rel, "../../../../../../../../../../..%s", host); /* host starts with "/" */
    snprintf(in_canary, sizeof in_canary, "%s/canary", host + 1);
    snprintf(in_file, sizeof in_file, "%s/dir/file", host + 1);
    const tent l1[] = {
        L("esc", host), L("esc_rel", rel), L("escape", "/"),
        F(in_canary, "inside"), F(in_file, "inside"), /* dest's own copy of the host path */
        D("etc"), F("etc/keep", "k"),
    };
    const tent l2[] = {
        F("esc/.wh.canary", ""),
        F("esc_rel/dir/.wh..wh..opq", ""),
        F("escape/tmp/.wh.nothing", ""), /* dest's /tmp, which has no "nothing": nothing to do */
    };
    const tent *layers[] = { l1, l2 };
    const size_t counts[] = { 7, 3 };
    const char *arch = P("wh.tar"), *dest = fresh_dir("wh");
    build_oci(arch, layers, counts, 2);
    sbx_error err = { 0 };
    int r = import(arch, dest, NULL, &err);
    assert_content(P("host/canary"), "alive");
    assert_content(P("host/dir/file"), "alive");
    must(r, &err);
    char p[8300];
    snprintf(p, sizeof p, "%s/%s", dest, in_canary);
    assert_missing(p);
    snprintf(p, sizeof p, "%s/%s", dest, in_file);
    assert_missing(p);
    snprintf(p, sizeof p, "%s/etc/keep", dest);
    assert_content(p, "k");
    rm_rf(dest);
    rm_rf(host);
    unlink(arch);
}

/* Preconditions: an empty destination, a uid base that is not host root. */
static void test_refusals(void **state)
{
    (void) state;
    const tent ents[] = { F("f", "f") };
    const char *tar = P("pre.tar"), *dest = fresh_dir("pre");
    write_tar(tar, RAW, ents, 1);
    sbx_error err = { 0 };
    sbx_extract_opts o = opts;
    o.uid_base = 0;
    assert_error(sbx_image_import(tar, dest, &o, NULL, &err), &err, EINVAL, "uid base 0", NULL);
    assert_error(extract(tar, dest, &o, &err), &err, EINVAL, "uid base 0", NULL);
    must(import(tar, dest, NULL, &err), &err);
    assert_error(import(tar, dest, NULL, &err), &err, ENOTEMPTY, dest, NULL);
    rm_rf(dest);
    /* not an archive at all */
    FILE *f = fopen(tar, "w");
    fputs("this is not a tar file, not even close; it just goes on for a while to fill a block", f);
    fclose(f);
    dest = fresh_dir("pre");
    assert_error(import(tar, dest, NULL, &err), &err, -1, tar, NULL);
    rm_rf(dest);
    unlink(tar);
}

/* Not root (or no CAP_CHOWN): the importer cannot shift owners. */
static int setup(void **state)
{
    (void) state;
    if (geteuid() != 0) {
        fprintf(stderr, "test_image: needs root (the importer chowns); skipped\n");
        return -1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/sbx-test-image-XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void) state;
    rm_rf(g_tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rootfs_tarball),
        cmocka_unit_test(test_compressions),
        cmocka_unit_test(test_oci_layers_whiteouts_config),
        cmocka_unit_test(test_oci_image_index),
        cmocka_unit_test(test_docker_save),
        cmocka_unit_test(test_dotdot_refused),
        cmocka_unit_test(test_symlink_escape),
        cmocka_unit_test(test_hardlink_attacks),
        cmocka_unit_test(test_devices_skipped),
        cmocka_unit_test(test_digest_mismatch),
        cmocka_unit_test(test_max_bytes),
        cmocka_unit_test(test_whiteout_through_symlink),
        cmocka_unit_test(test_refusals),
    };
    if (geteuid() != 0) {
        fprintf(stderr, "test_image: needs root (the importer chowns); skipped\n");
        return 77; /* meson: skipped */
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}
