/* domain_encoding.c - byte-exact round trips: every byte value, NUL runs,
 * trailing NULs, invalid UTF-8, CRLF, a BOM, empty files, binary formats,
 * sizes from 0 to 100 MiB; through uploads and downloads, and through a
 * command's output. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint8_t *pattern(fz_ctx *c, size_t *len, const char **what)
{
    static const char *const kinds[] = { "every byte value", "NUL runs", "trailing NULs", "invalid UTF-8",
                                         "CRLF text", "BOM + text", "empty", "PNG-like", "random" };
    int k = (int) fz_below(&c->rng, 9);
    *what = kinds[k];
    size_t n = k == 6 ? 0 : 1 + (size_t) fz_below(&c->rng, k == 8 ? (3u << 20) : 70000);
    uint8_t *d = calloc(1, n + 16);
    switch (k) {
    case 0:
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t) i;
        break;
    case 1:
        fz_bytes(&c->rng, d, n);
        for (size_t i = 0; i < n; i += 64)
            memset(d + i, 0, n - i < 16 ? n - i : 16);
        break;
    case 2:
        fz_bytes(&c->rng, d, n);
        memset(d + n / 2, 0, n - n / 2);
        break;
    case 3:
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t) (0x80 | fz_below(&c->rng, 0x40)); /* continuation bytes alone */
        break;
    case 4:
        for (size_t i = 0; i < n; i++)
            d[i] = i % 10 == 8 ? '\r' : i % 10 == 9 ? '\n' : (uint8_t) ('a' + i % 26);
        break;
    case 5:
        memcpy(d, "\xef\xbb\xbf", n < 3 ? n : 3);
        for (size_t i = 3; i < n; i++)
            d[i] = (uint8_t) ('A' + i % 26);
        break;
    case 7:
        fz_bytes(&c->rng, d, n);
        memcpy(d, "\x89PNG\r\n\x1a\n", n < 8 ? n : 8);
        break;
    default:
        fz_bytes(&c->rng, d, n);
    }
    *len = n;
    return d;
}

/* data up, its SHA-256 computed inside, and back down: which of the
 * three disagrees says which way the bytes changed */
static int round_trip(fz_ctx *c, const uint8_t *data, size_t len, const char *what)
{
    char want[65], back[65];
    fz_sha256(data, len, want);
    fz_evidence(c, "input", "%s, %zu bytes, sha256 %s", what, len, want);
    if (fz_put_checked(c, "/home/user/enc.bin", data, len) < 0)
        return -1;
    _cleanup_free_ char *got = NULL;
    size_t gl;
    if (fz_get(c, "/home/user/enc.bin", &got, &gl) < 0)
        return -1;
    fz_sha256(got, gl, back);
    if (gl != len || strcmp(back, want) != 0)
        return fz_fail(c, FZ_INTERFACE, "%s: the download changed the bytes (%zu of %zu bytes, %s)", what, gl, len,
                       back);
    return 0;
}

static int file_round_trip(fz_ctx *c)
{
    size_t len;
    const char *what;
    _cleanup_free_ uint8_t *data = pattern(c, &len, &what);
    return round_trip(c, data, len, what);
}

/* Large files, around the sizes where interfaces change their ways: MCP's
 * files_read limit (8 MiB), its files_write part (24 MiB), up to 100 MiB. */
static int large_file(fz_ctx *c)
{
    static const size_t sizes[] = { 8u << 20, 24u << 20, 48u << 20, 100u << 20 };
    size_t base = sizes[fz_below(&c->rng, sizeof sizes / sizeof *sizes)];
    size_t len = base - 1 + (size_t) fz_below(&c->rng, 3); /* one under, at, one over */
    _cleanup_free_ uint8_t *data = malloc(len);
    if (!data)
        return fz_fail(c, FZ_HARNESS, "out of memory for %zu bytes", len);
    fz_bytes(&c->rng, data, len);
    for (size_t i = 0; i + 4096 <= len; i += 1u << 20) /* NUL runs, one per MiB */
        memset(data + i, 0, 4096);
    char what[64];
    snprintf(what, sizeof what, "%zu random bytes with NUL runs", len);
    return round_trip(c, data, len, what);
}

/* A command prints bytes; the answer must carry them exactly. */
static int exec_output(fz_ctx *c)
{
    size_t n = 1 + (size_t) fz_below(&c->rng, 200);
    uint8_t bytes[256];
    fz_bytes(&c->rng, bytes, n);
    if (fz_below(&c->rng, 2))
        bytes[fz_below(&c->rng, n)] = 0;
    char cmd[2048] = "printf '";
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(cmd);
        snprintf(cmd + l, sizeof cmd - l, "\\%03o", bytes[i]);
    }
    strcat(cmd, "'");
    fz_evidence(c, "input", "%s", cmd);
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, cmd, &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0)
        return fz_fail(c, FZ_SANDBOX, "printf failed (exit %d)", code);
    if (ol != n || memcmp(out, bytes, n) != 0)
        return fz_fail(c, FZ_INTERFACE, "a command printed %zu bytes, the answer carried %zu other ones", n, ol);
    return 0;
}

/* The harness writes bytes in the sandbox with a command; a download must
 * give exactly those (what the sandbox made, not what was uploaded). */
static int made_inside(fz_ctx *c)
{
    size_t n = 1 + (size_t) fz_below(&c->rng, 1 << 18);
    char cmd[256];
    unsigned seed = (unsigned) fz_below(&c->rng, 1u << 30);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import random,sys; r=random.Random(%u); sys.stdout.buffer.write(bytes(r.getrandbits(8) "
             "for _ in range(%zu)))' > /home/user/made.bin && sha256sum /home/user/made.bin",
             seed, n);
    fz_evidence(c, "input", "%zu bytes from Python's random.Random(%u)", n, seed);
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, cmd, &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code != 0 || ol < 64)
        return fz_fail(c, FZ_SANDBOX, "python3 could not write the file (exit %d)", code);
    _cleanup_free_ char *got = NULL;
    size_t gl;
    if (fz_get(c, "/home/user/made.bin", &got, &gl) < 0)
        return -1;
    char back[65];
    fz_sha256(got, gl, back);
    if (gl != n || strncmp(back, out, 64) != 0)
        return fz_fail(c, FZ_INTERFACE, "made inside: %zu bytes %.64s; downloaded: %zu bytes %s", n, out, gl, back);
    return 0;
}

/* ---- real binary formats */

/* archive_write_open2's sink: the archive into a memory stream */
static la_ssize_t to_memstream(struct archive *a, void *ctx, const void *buf, size_t n)
{
    (void) a;
    return fwrite(buf, 1, n, ctx) == n ? (la_ssize_t) n : -1;
}

/* A real ZIP made with libarchive's writer: 1-8 members (text that
 * compresses, random bytes that do not, an empty one) in directories,
 * stored or deflated as the seed says. */
static int make_zip(fz_ctx *c, char **zip, size_t *zip_len, char *listing, size_t listing_size)
{
    *zip = NULL;
    *zip_len = 0;
    FILE *mem = open_memstream(zip, zip_len);
    struct archive *a = archive_write_new();
    bool deflate = fz_below(&c->rng, 2);
    if (!mem || !a || archive_write_set_format_zip(a) != ARCHIVE_OK ||
        archive_write_set_options(a, deflate ? "zip:compression=deflate" : "zip:compression=store") != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK || /* no padding to 10 KiB blocks */
        archive_write_open2(a, mem, NULL, to_memstream, NULL, NULL) != ARCHIVE_OK) {
        if (a)
            archive_write_free(a);
        if (mem)
            fclose(mem);
        return fz_fail(c, FZ_HARNESS, "libarchive could not start a zip");
    }
    size_t n = 1 + (size_t) fz_below(&c->rng, 8), used = 0;
    listing[0] = '\0';
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s/m%zu-%llu.%s", i % 3 ? "docs" : "data/raw", i,
                 (unsigned long long) fz_below(&c->rng, 1000), i % 2 ? "txt" : "bin");
        size_t len = i == 2 ? 0 : (size_t) fz_below(&c->rng, 200000);
        _cleanup_free_ uint8_t *d = malloc(len + 1);
        if (!d) {
            r = fz_fail(c, FZ_HARNESS, "out of memory");
            break;
        }
        if (i % 2) /* text: words, compresses */
            for (size_t k = 0; k < len; k++)
                d[k] = k % 7 == 6 ? ' ' : (uint8_t) ('a' + fz_below(&c->rng, 6));
        else
            fz_bytes(&c->rng, d, len);
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_size(e, (la_int64_t) len);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_mtime(e, 1700000000 + (time_t) fz_below(&c->rng, 1u << 24), 0);
        if (archive_write_header(a, e) != ARCHIVE_OK ||
            (len && archive_write_data(a, d, len) != (la_ssize_t) len))
            r = fz_fail(c, FZ_HARNESS, "libarchive: %s", archive_error_string(a));
        archive_entry_free(e);
        char hex[65];
        fz_sha256(d, len, hex);
        used += (size_t) snprintf(listing + used, listing_size - used, "%s %s\n", hex, name);
    }
    if (archive_write_close(a) != ARCHIVE_OK && r == 0)
        r = fz_fail(c, FZ_HARNESS, "libarchive: %s", archive_error_string(a));
    archive_write_free(a);
    fclose(mem);
    return r;
}

/* A tool inside the sandbox checks the file: exit 0 and the output it
 * should print, 127 (not in this template: evidence, no verdict), or the
 * harness's file was not valid after all. */
static int valid_inside(fz_ctx *c, const char *cmd, const char *tool, const char *want)
{
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    size_t ol, el;
    if (fz_exec(c, cmd, &code, &out, &ol, &err, &el) < 0)
        return -1;
    if (code == 127) {
        fz_evidence(c, "unsupported", "%s is not in this template", tool);
        return 0;
    }
    /* the bytes inside are the harness's (checked): a file the tool rejects
     * is the harness's doing, or a broken tool */
    if (code != 0 || (want && !strstr(out, want)))
        return fz_fail(c, FZ_HARNESS, "%s rejects the file the harness made (exit %d): %.300s %.200s", tool, code, out,
                       err);
    return 0;
}

static int zip_file(fz_ctx *c)
{
    char listing[8 * 200];
    char *zip = NULL;
    size_t len = 0;
    if (make_zip(c, &zip, &len, listing, sizeof listing) < 0) {
        free(zip);
        return -1;
    }
    _cleanup_free_ char *z = zip;
    fz_evidence(c, "input", "a zip of %zu bytes:\n%s", len, listing);
    if (round_trip(c, (const uint8_t *) zip, len, "a zip") < 0)
        return -1;
    if (valid_inside(c, "unzip -tq /home/user/enc.bin", "unzip", "No errors detected") < 0)
        return -1;
    /* every member, read by Python's zipfile: the harness's bytes */
    return valid_inside(c,
                        "python3 -c 'import zipfile,hashlib\nz = zipfile.ZipFile(\"/home/user/enc.bin\")\n"
                        "assert z.testzip() is None\nfor i in z.infolist(): print(hashlib.sha256(z.read(i)).hexdigest(), "
                        "i.filename)'",
                        "python3 zipfile", listing);
}

/* A minimal valid PDF: catalog, pages, a page with text, a font, and a
 * binary stream (an image of random grey bytes, NULs among them); the
 * cross-reference table points at each object. */
static char *make_pdf(fz_ctx *c, size_t *len)
{
    char *pdf = NULL;
    *len = 0;
    FILE *f = open_memstream(&pdf, len);
    if (!f)
        return NULL;
    /* an 8-bit grey image, W x H raw bytes: valid whatever they are */
    size_t w = 16 + (size_t) fz_below(&c->rng, 240), h = 1 + (size_t) fz_below(&c->rng, 400), blob = w * h;
    _cleanup_free_ uint8_t *b = malloc(blob);
    if (!b) {
        fclose(f);
        free(pdf);
        return NULL;
    }
    fz_bytes(&c->rng, b, blob);
    memset(b, 0, 8);
    char text[64];
    snprintf(text, sizeof text, "sbx fuzz %llu", (unsigned long long) fz_below(&c->rng, 1u << 30));
    char content[160];
    int cl = snprintf(content, sizeof content, "BT /F1 24 Tf 72 720 Td (%s) Tj ET", text);
    long off[7];
    fputs("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", f);
    off[1] = ftell(f);
    fputs("1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n", f);
    off[2] = ftell(f);
    fputs("2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n", f);
    off[3] = ftell(f);
    fputs("3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
          "/Resources << /Font << /F1 5 0 R >> /XObject << /B 6 0 R >> >> >>\nendobj\n",
          f);
    off[4] = ftell(f);
    fprintf(f, "4 0 obj\n<< /Length %d >>\nstream\n%s\nendstream\nendobj\n", cl, content);
    off[5] = ftell(f);
    fputs("5 0 obj\n<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>\nendobj\n", f);
    off[6] = ftell(f);
    fprintf(f, "6 0 obj\n<< /Type /XObject /Subtype /Image /Width %zu /Height %zu /BitsPerComponent 8 "
               "/ColorSpace /DeviceGray /Length %zu >>\nstream\n", w, h, blob);
    fwrite(b, 1, blob, f);
    fputs("\nendstream\nendobj\n", f);
    long xref = ftell(f);
    fputs("xref\n0 7\n0000000000 65535 f \n", f);
    for (int i = 1; i <= 6; i++)
        fprintf(f, "%010ld 00000 n \n", off[i]);
    fprintf(f, "trailer\n<< /Size 7 /Root 1 0 R >>\nstartxref\n%ld\n%%%%EOF\n", xref);
    fclose(f);
    return pdf;
}

/* The PDF's structure as a reader finds it: startxref leads to the table,
 * each entry to its object. */
static const char PDF_CHECK[] =
    "python3 -c 'import re,sys\n"
    "d = open(\"/home/user/enc.bin\", \"rb\").read()\n"
    "assert d.startswith(b\"%PDF-1.4\") and d.rstrip().endswith(b\"%%EOF\")\n"
    "x = int(re.findall(rb\"startxref\\s+(\\d+)\", d)[-1])\n"
    "assert d[x:x + 4] == b\"xref\"\n"
    "n = int(d[x:].split()[2])\n"
    "for i in range(1, n):\n"
    "    o = int(d[x + 9 + 20 * i:x + 19 + 20 * i])\n"
    "    assert d[o:].startswith(b\"%d 0 obj\" % i), i\n"
    "print(\"pdf ok\", n - 1)'";

static int pdf_file(fz_ctx *c)
{
    size_t len;
    _cleanup_free_ char *pdf = make_pdf(c, &len);
    if (!pdf)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    if (round_trip(c, (const uint8_t *) pdf, len, "a PDF") < 0)
        return -1;
    if (valid_inside(c, "file -b /home/user/enc.bin", "file", "PDF document, version 1.4") < 0)
        return -1;
    return valid_inside(c, PDF_CHECK, "python3", "pdf ok 6");
}

static const fz_test_def tests[] = {
    { "encoding.zip", zip_file },
    { "encoding.pdf", pdf_file },
    { "encoding.file_round_trip", file_round_trip },
    { "encoding.exec_output", exec_output },
    { "encoding.made_inside", made_inside },
    { "encoding.large_file", large_file },
};
const fz_domain fz_domain_encoding = { "encoding", tests, sizeof tests / sizeof *tests };
