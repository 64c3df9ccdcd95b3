/* domain_encoding.c - byte-exact round trips: every byte value, NUL runs,
 * trailing NULs, invalid UTF-8, CRLF, a BOM, empty files, binary formats,
 * sizes from 0 to 100 MiB; through uploads and downloads, and through a
 * command's output. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const fz_test_def tests[] = {
    { "encoding.file_round_trip", file_round_trip },
    { "encoding.exec_output", exec_output },
    { "encoding.made_inside", made_inside },
    { "encoding.large_file", large_file },
};
const fz_domain fz_domain_encoding = { "encoding", tests, sizeof tests / sizeof *tests };
