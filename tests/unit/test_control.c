/* test_control.c - unit tests for src/lib/control.c: the buffer and reader
 * codecs, the EXEC request encoding, and framing over a real socket.
 *
 * The decoder faces an untrusted peer, so most tests here feed it hostile
 * input.  Payload copies are allocated at their exact size so that ASan
 * catches any read past the end.
 *
 * Allocation tracking: this file is linked with -Wl,--wrap=malloc,calloc,
 * realloc (see tests/meson.build), so calls made by libsbx go through the
 * __wrap_* functions below, which record the largest single request. */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "control.h"

/* ---- allocation tracking (linker --wrap) ------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

static bool track_allocs;
static size_t largest_alloc;

static void note_alloc(size_t size)
{
    if (track_allocs && size > largest_alloc)
        largest_alloc = size;
}

void *__wrap_malloc(size_t size)
{
    note_alloc(size);
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    size_t total;
    note_alloc(__builtin_mul_overflow(n, size, &total) ? SIZE_MAX : total);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    note_alloc(size);
    return __real_realloc(p, size);
}

static void start_tracking(void)
{
    largest_alloc = 0;
    track_allocs = true;
}

static size_t stop_tracking(void)
{
    track_allocs = false;
    return largest_alloc;
}

/* ---- helpers ----------------------------------------------------------- */

/* An exact-size heap copy: reading one byte too far is an ASan error. */
static uint8_t *dup_exact(const void *data, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (len)
        memcpy(p, data, len);
    return p;
}

static void expect_decode_rejects(const void *data, size_t len)
{
    sbx_exec_req req;
    memset(&req, 0xa5, sizeof req);
    uint8_t *copy = dup_exact(data, len);
    int r = sbx_exec_req_decode(copy, len, &req);
    if (r == 0) {
        free(req.argv);
        free(req.envp);
        free(copy);
        fail_msg("a malformed %zu-byte request was accepted", len);
    }
    free(copy);
    assert_int_equal(r, -EPROTO);
    assert_null(req.argv);
    assert_null(req.envp);
}

/* The fixed part of an EXEC request, up to and including cwd. */
static void put_header(sbx_buf *b, const char *cwd)
{
    sbx_buf_put_u32(b, 1000);
    sbx_buf_put_u32(b, 1000);
    sbx_buf_put_u32(b, 0); /* flags */
    sbx_buf_put_u32(b, 0); /* timeout */
    sbx_buf_put_str(b, cwd);
}

static void socket_pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void write_raw(int fd, const void *data, size_t len)
{
    assert_int_equal(write(fd, data, len), (ssize_t) len);
}

static uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t) (i * 31 + seed + (i >> 8));
    return p;
}

/* ---- sbx_buf / sbx_reader ---------------------------------------------- */

static void test_buf_reader_round_trip(void **state)
{
    (void) state;
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, 0);
    sbx_buf_put_str(&b, "hello");
    sbx_buf_put_u32(&b, 0xffffffffu);
    sbx_buf_put_str(&b, "");
    sbx_buf_put_u32(&b, 0x12345678u);
    sbx_buf_put_str(&b, "gr\xc3\xbc\xc3\x9f dich \xe2\x9c\x93");
    assert_false(b.failed);
    assert_int_equal(b.len, 4 + 6 + 4 + 1 + 4 + 16);

    uint8_t *copy = dup_exact(b.data, b.len);
    sbx_reader r = { copy, copy + b.len, false };
    assert_int_equal(sbx_read_u32(&r), 0);
    assert_string_equal(sbx_read_str(&r), "hello");
    assert_int_equal(sbx_read_u32(&r), 0xffffffffu);
    assert_string_equal(sbx_read_str(&r), "");
    assert_int_equal(sbx_read_u32(&r), 0x12345678u);
    assert_string_equal(sbx_read_str(&r), "gr\xc3\xbc\xc3\x9f dich \xe2\x9c\x93");
    assert_false(r.bad);
    assert_ptr_equal(r.p, r.end);

    /* reading past the end marks the reader bad and yields neutral values */
    assert_int_equal(sbx_read_u32(&r), 0);
    assert_true(r.bad);
    assert_string_equal(sbx_read_str(&r), "");
    assert_true(r.bad);
    free(copy);
    sbx_buf_free(&b);
}

static void test_buf_grows(void **state)
{
    (void) state;
    sbx_buf b = { 0 };
    for (uint32_t i = 0; i < 10000; i++)
        sbx_buf_put_u32(&b, i);
    assert_false(b.failed);
    assert_int_equal(b.len, 40000);
    assert_true(b.cap >= b.len);
    sbx_reader r = { b.data, b.data + b.len, false };
    for (uint32_t i = 0; i < 10000; i++)
        if (sbx_read_u32(&r) != i)
            fail_msg("value %u did not survive the buffer growth", i);
    assert_false(r.bad);
    sbx_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_false(b.failed);
}

static void test_buf_refuses_more_than_a_frame(void **state)
{
    (void) state;
    sbx_buf b = { 0 };
    /* fill to exactly SBX_CTL_MAX_FRAME: allowed */
    size_t n = SBX_CTL_MAX_FRAME - 4 - 1;
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, 'a', n);
    s[n] = '\0';
    sbx_buf_put_str(&b, s);
    sbx_buf_put_u32(&b, 7);
    assert_false(b.failed);
    assert_int_equal(b.len, SBX_CTL_MAX_FRAME);
    /* one byte more is not, and the buffer stays as it was */
    sbx_buf_put_str(&b, "");
    assert_true(b.failed);
    assert_int_equal(b.len, SBX_CTL_MAX_FRAME);
    /* once failed, later puts are ignored even if they would fit */
    sbx_buf_free(&b);
    b.failed = true;
    sbx_buf_put_u32(&b, 1);
    assert_int_equal(b.len, 0);
    sbx_buf_free(&b);
    free(s);
}

static void test_reader_partial_u32(void **state)
{
    (void) state;
    const uint8_t three[3] = { 1, 2, 3 };
    uint8_t *copy = dup_exact(three, sizeof three);
    sbx_reader r = { copy, copy + 3, false };
    assert_int_equal(sbx_read_u32(&r), 0);
    assert_true(r.bad);
    assert_ptr_equal(r.p, copy); /* nothing consumed */
    free(copy);
}

static void test_reader_string_without_nul(void **state)
{
    (void) state;
    uint8_t *copy = dup_exact("abc", 3);
    sbx_reader r = { copy, copy + 3, false };
    assert_string_equal(sbx_read_str(&r), "");
    assert_true(r.bad);
    /* sticky: a later well-formed field does not clear it */
    assert_int_equal(sbx_read_u32(&r), 0);
    assert_true(r.bad);
    free(copy);

    sbx_reader empty = { (const uint8_t *) "x", (const uint8_t *) "x", false };
    assert_string_equal(sbx_read_str(&empty), "");
    assert_true(empty.bad);
}

/* ---- EXEC request ------------------------------------------------------ */

static void assert_strv_equal(const char *const *got, char *const *want, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!got[i] || strcmp(got[i], want[i]) != 0)
            fail_msg("element %u: got \"%s\", want \"%s\"", i, got[i] ? got[i] : "(null)", want[i]);
    }
    assert_null(got[n]);
}

static void round_trip(uint32_t uid, uint32_t gid, uint32_t flags, const char *cwd, char *const *argv,
                       char *const *envp)
{
    uint32_t argc = 0, envc = 0;
    while (argv[argc])
        argc++;
    while (envp && envp[envc])
        envc++;

    sbx_buf b = { 0 };
    sbx_exec_req_encode(&b, uid, gid, flags, 0, cwd, argv, envp);
    assert_false(b.failed);
    size_t len = b.len;
    uint8_t *copy = dup_exact(b.data, len);
    sbx_buf_free(&b);

    sbx_exec_req req;
    memset(&req, 0x5a, sizeof req);
    assert_int_equal(sbx_exec_req_decode(copy, len, &req), 0);
    assert_int_equal(req.uid, uid);
    assert_int_equal(req.gid, gid);
    assert_int_equal(req.flags, flags);
    assert_string_equal(req.cwd, cwd);
    assert_int_equal(req.argc, argc);
    assert_int_equal(req.envc, envc);
    assert_non_null(req.argv);
    assert_non_null(req.envp);
    assert_strv_equal(req.argv, argv, argc);
    if (envp)
        assert_strv_equal(req.envp, envp, envc);
    else
        assert_null(req.envp[0]);
    /* decoded strings point into the payload, not into copies */
    if (argc)
        assert_true((const uint8_t *) req.argv[0] >= copy && (const uint8_t *) req.argv[0] < copy + len);
    free(req.argv);
    free(req.envp);
    free(copy);
}

static void test_exec_round_trip(void **state)
{
    (void) state;
    char *argv[] = { "/bin/sh", "-c", "", "echo \"$0\" \xc3\xa9\xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac", "", NULL };
    char *envp[] = { "PATH=/usr/bin:/bin", "EMPTY=", "", "UNICODE=\xf0\x9f\x98\x80", NULL };
    round_trip(1000, 1001, SBX_EXEC_MAIN, "/home/user", argv, envp);
    round_trip(0, 0, 0, "/", argv, envp);
    round_trip(UINT32_MAX, UINT32_MAX - 1, UINT32_MAX, "/a b/\xc3\xa9", argv, envp);
}

static void test_exec_round_trip_no_env(void **state)
{
    (void) state;
    char *argv[] = { "true", NULL };
    char *empty_env[] = { NULL };
    round_trip(1, 2, 0, "/tmp", argv, NULL);
    round_trip(1, 2, 0, "/tmp", argv, empty_env);
    char *only_empty[] = { "", NULL };
    round_trip(1, 2, 0, "/tmp", only_empty, NULL);
}

static void test_exec_round_trip_1000_args(void **state)
{
    (void) state;
    enum { N = 1000 };
    char **argv = calloc(N + 1, sizeof *argv);
    char **envp = calloc(N + 1, sizeof *envp);
    assert_non_null(argv);
    assert_non_null(envp);
    for (int i = 0; i < N; i++) {
        if (i % 7 == 0)
            argv[i] = strdup(""); /* every 7th argument is empty */
        else
            assert_true(asprintf(&argv[i], "arg-%d", i) > 0);
        assert_non_null(argv[i]);
        assert_true(asprintf(&envp[i], "VAR_%d=%d", i, i * i) > 0);
    }
    round_trip(1000, 1000, SBX_EXEC_MAIN, "/work", argv, envp);
    for (int i = 0; i < N; i++) {
        free(argv[i]);
        free(envp[i]);
    }
    free(argv);
    free(envp);
}

/* Up to SBX_EXEC_MAX_ARGS arguments are accepted, one more is not. */
static void test_exec_max_args(void **state)
{
    (void) state;
    for (uint32_t n = SBX_EXEC_MAX_ARGS; n <= SBX_EXEC_MAX_ARGS + 1; n++) {
        sbx_buf b = { 0 };
        put_header(&b, "/");
        sbx_buf_put_u32(&b, n);
        for (uint32_t i = 0; i < n; i++)
            sbx_buf_put_str(&b, "");
        sbx_buf_put_u32(&b, 0);
        assert_false(b.failed);
        sbx_exec_req req;
        int r = sbx_exec_req_decode(b.data, b.len, &req);
        if (n == SBX_EXEC_MAX_ARGS) {
            assert_int_equal(r, 0);
            assert_int_equal(req.argc, n);
            assert_string_equal(req.argv[n - 1], "");
            assert_null(req.argv[n]);
            free(req.argv);
            free(req.envp);
        } else {
            assert_int_equal(r, -EPROTO);
        }
        sbx_buf_free(&b);
    }
}

static void test_exec_encode_too_large(void **state)
{
    (void) state;
    size_t n = SBX_CTL_MAX_FRAME;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    char *argv[] = { "echo", big, NULL };
    sbx_buf b = { 0 };
    sbx_exec_req_encode(&b, 0, 0, 0, 0, "/", argv, NULL);
    assert_true(b.failed);
    assert_true(b.len <= SBX_CTL_MAX_FRAME);
    sbx_buf_free(&b);
    free(big);
}

/* Every strict prefix of a valid request is rejected. */
static void test_decode_rejects_every_truncation(void **state)
{
    (void) state;
    char *argv[] = { "python3", "-c", "", "print('\xc3\xa9')", NULL };
    char *envp[] = { "A=1", "", "HOME=/home/user", NULL };
    sbx_buf b = { 0 };
    sbx_exec_req_encode(&b, 1000, 1000, SBX_EXEC_MAIN, 0, "/home/user", argv, envp);
    assert_false(b.failed);

    sbx_exec_req req;
    uint8_t *full = dup_exact(b.data, b.len);
    assert_int_equal(sbx_exec_req_decode(full, b.len, &req), 0);
    free(req.argv);
    free(req.envp);
    free(full);

    for (size_t len = 0; len < b.len; len++) {
        memset(&req, 0xa5, sizeof req);
        uint8_t *copy = dup_exact(b.data, len);
        int r = sbx_exec_req_decode(copy, len, &req);
        if (r != -EPROTO)
            fail_msg("a request truncated to %zu of %zu bytes decoded with %d", len, b.len, r);
        assert_null(req.argv);
        assert_null(req.envp);
        free(copy);
    }
    sbx_buf_free(&b);
}

static void test_decode_rejects_argc_zero(void **state)
{
    (void) state;
    char *argv[] = { NULL };
    char *envp[] = { "A=1", NULL };
    sbx_buf b = { 0 };
    sbx_exec_req_encode(&b, 0, 0, 0, 0, "/", argv, envp);
    assert_false(b.failed);
    expect_decode_rejects(b.data, b.len);
    sbx_buf_free(&b);
}

static void test_decode_rejects_relative_cwd(void **state)
{
    (void) state;
    char *argv[] = { "ls", NULL };
    static const char *const bad_cwds[] = { "work", "", "./work", " /work" };
    for (size_t i = 0; i < sizeof bad_cwds / sizeof bad_cwds[0]; i++) {
        sbx_buf b = { 0 };
        sbx_exec_req_encode(&b, 0, 0, 0, 0, bad_cwds[i], argv, NULL);
        assert_false(b.failed);
        expect_decode_rejects(b.data, b.len);
        sbx_buf_free(&b);
    }
}

static void test_decode_rejects_trailing_garbage(void **state)
{
    (void) state;
    char *argv[] = { "ls", "-l", NULL };
    char *envp[] = { "A=1", NULL };
    static const size_t extra[] = { 1, 3, 4, 100 };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        sbx_buf b = { 0 };
        sbx_exec_req_encode(&b, 0, 0, 0, 0, "/", argv, envp);
        for (size_t k = 0; k < extra[i]; k++)
            sbx_buf_put_str(&b, ""); /* one NUL byte */
        assert_false(b.failed);
        expect_decode_rejects(b.data, b.len);
        sbx_buf_free(&b);
    }
}

/* A count far beyond what the payload can hold is refused before anything
 * is allocated for it. */
static void test_decode_rejects_huge_counts(void **state)
{
    (void) state;
    static const uint32_t counts[] = { UINT32_MAX, 0x80000000u, SBX_EXEC_MAX_ARGS + 1, SBX_EXEC_MAX_ARGS, 60000, 100 };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        /* as argc */
        sbx_buf b = { 0 };
        put_header(&b, "/");
        sbx_buf_put_u32(&b, counts[i]);
        sbx_buf_put_str(&b, "x"); /* a few bytes: far fewer strings than announced */
        sbx_buf_put_u32(&b, 0);
        assert_false(b.failed);
        start_tracking();
        expect_decode_rejects(b.data, b.len);
        size_t largest = stop_tracking();
        if (largest > 4096)
            fail_msg("argc %u with a %zu-byte payload: decode allocated %zu bytes", counts[i], b.len, largest);
        sbx_buf_free(&b);

        /* as envc */
        put_header(&b, "/");
        sbx_buf_put_u32(&b, 1);
        sbx_buf_put_str(&b, "sh");
        sbx_buf_put_u32(&b, counts[i]);
        sbx_buf_put_str(&b, "A=1");
        assert_false(b.failed);
        start_tracking();
        expect_decode_rejects(b.data, b.len);
        largest = stop_tracking();
        if (largest > 4096)
            fail_msg("envc %u with a %zu-byte payload: decode allocated %zu bytes", counts[i], b.len, largest);
        sbx_buf_free(&b);
    }
}

static void test_decode_rejects_strings_without_nul(void **state)
{
    (void) state;
    sbx_buf b = { 0 };

    /* cwd runs to the end of the payload */
    static const uint8_t no_cwd_nul[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 'o', 'r', 'k' };
    expect_decode_rejects(no_cwd_nul, sizeof no_cwd_nul);

    /* the last env string lacks its NUL */
    char *argv[] = { "sh", NULL };
    char *envp[] = { "A=1", "B=2", NULL };
    sbx_exec_req_encode(&b, 0, 0, 0, 0, "/", argv, envp);
    assert_int_equal(b.data[b.len - 1], 0);
    expect_decode_rejects(b.data, b.len - 1);
    /* replace that NUL by a byte: same length, no terminator */
    b.data[b.len - 1] = 'x';
    expect_decode_rejects(b.data, b.len);
    sbx_buf_free(&b);

    /* argv says two strings, the payload holds one and then raw bytes */
    put_header(&b, "/");
    sbx_buf_put_u32(&b, 2);
    sbx_buf_put_str(&b, "sh");
    sbx_buf_put_u32(&b, 0x41414141u); /* "AAAA", no NUL anywhere after */
    expect_decode_rejects(b.data, b.len);
    sbx_buf_free(&b);
}

/* ---- framing over a socket --------------------------------------------- */

static void expect_frame(int fd, uint32_t want_type, const uint8_t *want, size_t want_len)
{
    uint32_t type = 0;
    uint8_t *payload = NULL;
    size_t len = 12345;
    int r = sbx_ctl_recv(fd, &type, &payload, &len);
    if (r != 1)
        fail_msg("sbx_ctl_recv = %d (%s), want a frame of %zu bytes", r, r < 0 ? strerror(-r) : "EOF", want_len);
    assert_int_equal(type, want_type);
    assert_int_equal(len, want_len);
    assert_non_null(payload);
    if (want_len)
        assert_memory_equal(payload, want, want_len);
    assert_int_equal(payload[len], '\0'); /* NUL-terminated for convenience */
    free(payload);
}

static void test_ctl_small_frames(void **state)
{
    (void) state;
    int sv[2];
    socket_pair(sv);
    /* around the single-write threshold (256-byte buffer, 8-byte header) */
    static const size_t sizes[] = { 0, 1, 4, 247, 248, 249, 300, 4096 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = pattern(sizes[i], (unsigned) i);
        assert_int_equal(sbx_ctl_send(sv[0], (uint32_t) (100 + i), sizes[i] ? p : NULL, sizes[i]), 0);
        expect_frame(sv[1], (uint32_t) (100 + i), p, sizes[i]);
        free(p);
    }
    close(sv[0]);
    close(sv[1]);
}

static void test_ctl_frames_in_sequence_then_eof(void **state)
{
    (void) state;
    int sv[2];
    socket_pair(sv);
    uint8_t *p = pattern(300, 9);
    assert_int_equal(sbx_ctl_send(sv[0], SBX_MSG_GO, NULL, 0), 0);
    assert_int_equal(sbx_ctl_send(sv[0], SBX_MSG_EXEC, p, 300), 0);
    uint32_t pid = 4242;
    assert_int_equal(sbx_ctl_send(sv[0], SBX_MSG_STARTED, &pid, sizeof pid), 0);
    close(sv[0]);

    expect_frame(sv[1], SBX_MSG_GO, NULL, 0);
    expect_frame(sv[1], SBX_MSG_EXEC, p, 300);
    expect_frame(sv[1], SBX_MSG_STARTED, (const uint8_t *) &pid, sizeof pid);

    uint32_t type = 99;
    uint8_t *payload = NULL;
    size_t len = 99;
    assert_int_equal(sbx_ctl_recv(sv[1], &type, &payload, &len), 0);
    assert_null(payload);
    /* and EOF stays EOF */
    assert_int_equal(sbx_ctl_recv(sv[1], &type, &payload, &len), 0);
    free(p);
    close(sv[1]);
}

/* Frames larger than the socket buffer: the sender runs in a child. */
static void send_from_child(size_t size, uint32_t type)
{
    int sv[2];
    socket_pair(sv);
    uint8_t *p = pattern(size, 3);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[1]);
        int r = sbx_ctl_send(sv[0], type, p, size);
        _exit(r == 0 ? 0 : 1);
    }
    close(sv[0]);
    expect_frame(sv[1], type, p, size);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the child closed its end: clean EOF */
    uint32_t t;
    uint8_t *payload = NULL;
    size_t len;
    assert_int_equal(sbx_ctl_recv(sv[1], &t, &payload, &len), 0);
    close(sv[1]);
    free(p);
}

static void test_ctl_100k_frame(void **state)
{
    (void) state;
    send_from_child(100 * 1024, SBX_MSG_EXEC);
}

static void test_ctl_max_frame(void **state)
{
    (void) state;
    send_from_child(SBX_CTL_MAX_FRAME, SBX_MSG_EXEC);
}

static void test_ctl_send_refuses_oversized(void **state)
{
    (void) state;
    int sv[2];
    socket_pair(sv);
    static const uint8_t dummy[1] = { 0 };
    /* refused before the payload is touched: nothing reaches the peer */
    assert_int_equal(sbx_ctl_send(sv[0], SBX_MSG_EXEC, dummy, (size_t) SBX_CTL_MAX_FRAME + 1), -E2BIG);
    assert_int_equal(sbx_ctl_send(sv[0], SBX_MSG_GO, NULL, 0), 0);
    expect_frame(sv[1], SBX_MSG_GO, NULL, 0);
    close(sv[0]);
    close(sv[1]);
}

static void expect_recv_error(int fd, int want)
{
    uint32_t type = 0;
    uint8_t *payload = NULL;
    size_t len = 0;
    int r = sbx_ctl_recv(fd, &type, &payload, &len);
    if (r != want)
        fail_msg("sbx_ctl_recv = %d, want %d", r, want);
    assert_null(payload);
}

static void test_ctl_recv_rejects_oversized_header(void **state)
{
    (void) state;
    static const uint32_t lens[] = { SBX_CTL_MAX_FRAME + 1, UINT32_MAX };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int sv[2];
        socket_pair(sv);
        uint32_t h[2] = { SBX_MSG_EXEC, lens[i] };
        write_raw(sv[0], h, sizeof h);
        write_raw(sv[0], "abcd", 4);
        close(sv[0]); /* a reader that believed the header would not block */
        start_tracking();
        expect_recv_error(sv[1], -EPROTO);
        size_t largest = stop_tracking();
        if (largest > 4096)
            fail_msg("a header announcing %u bytes made recv allocate %zu bytes", lens[i], largest);
        close(sv[1]);
    }
}

static void test_ctl_recv_eof_mid_payload(void **state)
{
    (void) state;
    int sv[2];
    socket_pair(sv);
    uint32_t h[2] = { SBX_MSG_EXEC, 10 };
    write_raw(sv[0], h, sizeof h);
    write_raw(sv[0], "12345", 5);
    close(sv[0]);
    expect_recv_error(sv[1], -EPROTO);
    close(sv[1]);
}

static void test_ctl_recv_eof_mid_header(void **state)
{
    (void) state;
    for (size_t n = 1; n < 8; n++) {
        int sv[2];
        socket_pair(sv);
        uint32_t h[2] = { SBX_MSG_EXEC, 0 };
        write_raw(sv[0], h, n);
        close(sv[0]);
        expect_recv_error(sv[1], -EPROTO);
        close(sv[1]);
    }
}

static void test_ctl_bad_fd(void **state)
{
    (void) state;
    assert_int_equal(sbx_ctl_send(-1, SBX_MSG_GO, NULL, 0), -EBADF);
    expect_recv_error(-1, -EBADF);
}

/* Sending to a peer that is gone must report -EPIPE, not kill the process
 * with SIGPIPE (nothing in sbx ignores SIGPIPE, and sbx_ctl_send uses write
 * rather than send(MSG_NOSIGNAL)).  Runs in a child so a SIGPIPE shows as a
 * test failure rather than killing the test runner. */
static void test_ctl_send_to_closed_peer(void **state)
{
    (void) state;
    int sv[2];
    socket_pair(sv);
    close(sv[1]);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        int r = sbx_ctl_send(sv[0], SBX_MSG_SIGNAL, "\x0f\0\0\0", 4);
        _exit(r == -EPIPE ? 0 : 1);
    }
    close(sv[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("sbx_ctl_send to a closed peer killed the process with signal %d", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_reader_round_trip),
        cmocka_unit_test(test_buf_grows),
        cmocka_unit_test(test_buf_refuses_more_than_a_frame),
        cmocka_unit_test(test_reader_partial_u32),
        cmocka_unit_test(test_reader_string_without_nul),
        cmocka_unit_test(test_exec_round_trip),
        cmocka_unit_test(test_exec_round_trip_no_env),
        cmocka_unit_test(test_exec_round_trip_1000_args),
        cmocka_unit_test(test_exec_max_args),
        cmocka_unit_test(test_exec_encode_too_large),
        cmocka_unit_test(test_decode_rejects_every_truncation),
        cmocka_unit_test(test_decode_rejects_argc_zero),
        cmocka_unit_test(test_decode_rejects_relative_cwd),
        cmocka_unit_test(test_decode_rejects_trailing_garbage),
        cmocka_unit_test(test_decode_rejects_huge_counts),
        cmocka_unit_test(test_decode_rejects_strings_without_nul),
        cmocka_unit_test(test_ctl_small_frames),
        cmocka_unit_test(test_ctl_frames_in_sequence_then_eof),
        cmocka_unit_test(test_ctl_100k_frame),
        cmocka_unit_test(test_ctl_max_frame),
        cmocka_unit_test(test_ctl_send_refuses_oversized),
        cmocka_unit_test(test_ctl_recv_rejects_oversized_header),
        cmocka_unit_test(test_ctl_recv_eof_mid_payload),
        cmocka_unit_test(test_ctl_recv_eof_mid_header),
        cmocka_unit_test(test_ctl_bad_fd),
        cmocka_unit_test(test_ctl_send_to_closed_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
