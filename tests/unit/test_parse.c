/* test_parse.c - unit tests for src/lib/parse.c: sizes, durations, CPU
 * counts, plain integers, and their human-readable formatting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parse.h"

#define KIB (1ULL << 10)
#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define TIB (1ULL << 40)

/* An error must say something, and must quote the input it rejects (so the
 * user sees which of several options was wrong).  An empty input shows as ''. */
static void check_error_mentions(const char *fn, const char *input, const sbx_error *err, const char *extra)
{
    char quoted[600];
    snprintf(quoted, sizeof quoted, "'%s'", input);
    if (err->msg[0] == '\0')
        fail_msg("%s(\"%s\"): empty error message", fn, input);
    if (!strstr(err->msg, quoted))
        fail_msg("%s(\"%s\"): error message does not quote the input: %s", fn, input, err->msg);
    if (extra && !strstr(err->msg, extra))
        fail_msg("%s(\"%s\"): error message lacks \"%s\": %s", fn, input, extra, err->msg);
}

/* ---- sbx_parse_size ---------------------------------------------------- */

static void expect_size(const char *s, uint64_t want)
{
    sbx_error err = { 0 };
    uint64_t v = 0;
    if (sbx_parse_size(s, &v, &err) != 0)
        fail_msg("sbx_parse_size(\"%s\") failed: %s", s, err.msg);
    if (v != want)
        fail_msg("sbx_parse_size(\"%s\") = %llu, want %llu", s, (unsigned long long) v, (unsigned long long) want);
}

static void expect_size_error(const char *s, const char *extra)
{
    sbx_error err = { 0 };
    uint64_t v = 12345;
    int r = sbx_parse_size(s, &v, &err);
    if (r != -1)
        fail_msg("sbx_parse_size(\"%s\") = %d (value %llu), want -1", s, r, (unsigned long long) v);
    check_error_mentions("sbx_parse_size", s, &err, extra);
}

static void test_size_units(void **state)
{
    (void) state;
    expect_size("512M", 512 * MIB);
    expect_size("2G", 2 * GIB);
    expect_size("64k", 64 * KIB);
    expect_size("64K", 64 * KIB);
    expect_size("1048576", 1048576);
    expect_size("1", 1);
    expect_size("1T", TIB);
    expect_size("3m", 3 * MIB);
    expect_size("1g", GIB);
}

static void test_size_fractions_are_exact(void **state)
{
    (void) state;
    expect_size("1.5G", 1610612736ULL); /* exactly 1.5 * 2^30 */
    expect_size("0.5K", 512);
    expect_size("2.25M", 2 * MIB + MIB / 4);
    /* 0.1 * 2^30 = 107374182.4: rounds down, and is not one byte short as a
     * float computation can make it */
    expect_size("0.1G", 107374182ULL);
    expect_size("0.001K", 1); /* 1.024 bytes */
}

static void test_size_suffixes(void **state)
{
    (void) state;
    expect_size("512MiB", 512 * MIB);
    expect_size("512Mi", 512 * MIB);
    expect_size("512Mb", 512 * MIB);
    expect_size("2GB", 2 * GIB);
    expect_size("64KiB", 64 * KIB);
    expect_size("4096B", 4096);
    expect_size("4096b", 4096);
}

static void test_size_rejects_zero_and_negative(void **state)
{
    (void) state;
    expect_size_error("0", "greater than zero");
    expect_size_error("0M", "greater than zero");
    expect_size_error("0.0001K", "greater than zero"); /* 0.1 byte */
    expect_size_error("-1", NULL);
    expect_size_error("-1M", NULL);
}

static void test_size_rejects_garbage(void **state)
{
    (void) state;
    expect_size_error("", NULL);
    expect_size_error("12Q", "unit");
    expect_size_error("1.5.5G", NULL);
    expect_size_error("G", NULL);
    expect_size_error("M512", NULL);
    expect_size_error(" 512M", NULL);
    expect_size_error("512 M", NULL);
    expect_size_error("512M ", NULL);
    expect_size_error("512MM", NULL);
    expect_size_error("512MiBx", NULL);
    expect_size_error("512iB", NULL); /* "i" only after a unit */
    expect_size_error("0x10", NULL);
    expect_size_error(".", NULL);
}

static void test_size_rejects_overflow(void **state)
{
    (void) state;
    expect_size_error("99999999999T", "too large");
    expect_size_error("16777216T", "too large"); /* exactly 2^64 bytes */
    expect_size_error("99999999999999999999999", NULL);
}

static void test_size_null_error_object(void **state)
{
    (void) state;
    uint64_t v = 0;
    /* err may be NULL: the caller does not want the message */
    assert_int_equal(sbx_parse_size("bogus", &v, NULL), -1);
    assert_int_equal(sbx_parse_size("1K", &v, NULL), 0);
    assert_int_equal(v, 1024);
}

/* ---- sbx_parse_duration ------------------------------------------------ */

static void expect_duration(const char *s, uint64_t want_ms)
{
    sbx_error err = { 0 };
    uint64_t v = 0;
    if (sbx_parse_duration(s, &v, &err) != 0)
        fail_msg("sbx_parse_duration(\"%s\") failed: %s", s, err.msg);
    if (v != want_ms)
        fail_msg("sbx_parse_duration(\"%s\") = %llu ms, want %llu", s, (unsigned long long) v,
                 (unsigned long long) want_ms);
}

static void expect_duration_error(const char *s, const char *extra)
{
    sbx_error err = { 0 };
    uint64_t v = 777;
    int r = sbx_parse_duration(s, &v, &err);
    if (r != -1)
        fail_msg("sbx_parse_duration(\"%s\") = %d (value %llu ms), want -1", s, r, (unsigned long long) v);
    check_error_mentions("sbx_parse_duration", s, &err, extra);
}

static void test_duration_units(void **state)
{
    (void) state;
    expect_duration("30s", 30000);
    expect_duration("5m", 300000);
    expect_duration("1h", 3600000);
    expect_duration("250ms", 250);
    expect_duration("1d", 86400000);
    expect_duration("1ms", 1);
}

static void test_duration_compound_and_fractions(void **state)
{
    (void) state;
    expect_duration("1m30s", 90000);
    expect_duration("1h30m", 5400000);
    expect_duration("1h1m1s", 3661000);
    expect_duration("2s500ms", 2500);
    expect_duration("1.5s", 1500);
    expect_duration("1.5h", 5400000);
    expect_duration("0.25s", 250);
}

static void test_duration_bare_number_is_seconds(void **state)
{
    (void) state;
    expect_duration("10", 10000);
    expect_duration("1", 1000);
    expect_duration("0.5", 500);
}

static void test_duration_rejects(void **state)
{
    (void) state;
    expect_duration_error("0", "greater than zero");
    expect_duration_error("0s", "greater than zero");
    expect_duration_error("0.0001s", "greater than zero"); /* below a millisecond */
    expect_duration_error("5x", "unit");
    expect_duration_error("", NULL);
    expect_duration_error("s", NULL);
    expect_duration_error("ms", NULL);
    expect_duration_error("-5s", NULL);
    expect_duration_error("5 s", NULL);
    expect_duration_error("5s ", NULL);
    expect_duration_error("1m30x", NULL);
    expect_duration_error("5sec", NULL);
}

static void test_duration_rejects_overflow(void **state)
{
    (void) state;
    expect_duration_error("300000000000000h", "too large");
    expect_duration_error("99999999999999999999s", NULL);
}

/* Each component is bounded, but their sum is not checked: 2100 components
 * of ~9.2e15 ms each add up past 2^64 and wrap to a small timeout. */
static void test_duration_sum_overflow(void **state)
{
    (void) state;
    const char *part = "106751991d"; /* 9.2234e15 ms, under the per-part bound */
    size_t n = 2100, pl = strlen(part);
    char *s = malloc(n * pl + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * pl, part, pl);
    s[n * pl] = '\0';
    sbx_error err = { 0 };
    uint64_t v = 0;
    int r = sbx_parse_duration(s, &v, &err);
    free(s);
    if (r == 0)
        fail_msg("a duration of 2100 x 106751991d (more than 2^64 ms) was accepted as %llu ms",
                 (unsigned long long) v);
    assert_non_null(strstr(err.msg, "too large"));
}

/* ---- sbx_parse_cpus ---------------------------------------------------- */

static void expect_cpus(const char *s, uint32_t want)
{
    sbx_error err = { 0 };
    uint32_t v = 0;
    if (sbx_parse_cpus(s, &v, &err) != 0)
        fail_msg("sbx_parse_cpus(\"%s\") failed: %s", s, err.msg);
    if (v != want)
        fail_msg("sbx_parse_cpus(\"%s\") = %u, want %u", s, v, want);
}

static void expect_cpus_error(const char *s, const char *extra)
{
    sbx_error err = { 0 };
    uint32_t v = 4242;
    int r = sbx_parse_cpus(s, &v, &err);
    if (r != -1)
        fail_msg("sbx_parse_cpus(\"%s\") = %d (value %u), want -1", s, r, v);
    check_error_mentions("sbx_parse_cpus", s, &err, extra);
}

static void test_cpus_valid(void **state)
{
    (void) state;
    expect_cpus("1", 1000);
    expect_cpus("0.5", 500);
    expect_cpus("1.25", 1250);
    expect_cpus("2", 2000);
    expect_cpus("0.01", 10);  /* the minimum */
    expect_cpus("1024", 1024000); /* the maximum */
    expect_cpus("1.2345", 1234); /* digits beyond a millicpu are dropped */
}

static void test_cpus_invalid(void **state)
{
    (void) state;
    expect_cpus_error("0", "at least 0.01");
    expect_cpus_error("0.001", "at least 0.01");
    expect_cpus_error("0.009", "at least 0.01");
    expect_cpus_error("2000", "at most 1024");
    expect_cpus_error("1024.001", "at most 1024");
    expect_cpus_error("abc", NULL);
    expect_cpus_error("", NULL);
    expect_cpus_error("-1", NULL);
    expect_cpus_error("1x", NULL);
    expect_cpus_error("1.5.5", NULL);
    expect_cpus_error("99999999999999999999", NULL);
}

/* ---- sbx_parse_uint ---------------------------------------------------- */

static void expect_uint(const char *s, uint64_t max, uint64_t want)
{
    sbx_error err = { 0 };
    uint64_t v = 0;
    if (sbx_parse_uint(s, max, &v, &err) != 0)
        fail_msg("sbx_parse_uint(\"%s\", %llu) failed: %s", s, (unsigned long long) max, err.msg);
    if (v != want)
        fail_msg("sbx_parse_uint(\"%s\") = %llu, want %llu", s, (unsigned long long) v, (unsigned long long) want);
}

static void expect_uint_error(const char *s, uint64_t max, const char *extra)
{
    sbx_error err = { 0 };
    uint64_t v = 31337;
    int r = sbx_parse_uint(s, max, &v, &err);
    if (r != -1)
        fail_msg("sbx_parse_uint(\"%s\", max %llu) = %d (value %llu), want -1", s, (unsigned long long) max, r,
                 (unsigned long long) v);
    check_error_mentions("sbx_parse_uint", s, &err, extra);
}

static void test_uint_bounds(void **state)
{
    (void) state;
    expect_uint("65535", 65535, 65535);
    expect_uint_error("65536", 65535, "at most 65535");
    expect_uint_error("100000", 65535, "at most 65535");
    expect_uint("0", 10, 0);
    expect_uint("10", 10, 10);
    expect_uint_error("11", 10, "at most 10");
    expect_uint("007", 10, 7);
    expect_uint("4194304", 4194304, 4194304);
    expect_uint_error("4194305", 4194304, "at most 4194304");
    expect_uint("18446744073709551615", UINT64_MAX, UINT64_MAX);
    expect_uint_error("18446744073709551616", UINT64_MAX, NULL);
    expect_uint_error("99999999999999999999999", UINT64_MAX, NULL);
}

static void test_uint_rejects_non_digits(void **state)
{
    (void) state;
    expect_uint_error("", 100, NULL);
    expect_uint_error("12a", 100, "non-negative integer");
    expect_uint_error("a", 100, NULL);
    expect_uint_error("-1", 100, NULL);
    expect_uint_error("+1", 100, NULL);
    expect_uint_error(" 1", 100, NULL);
    expect_uint_error("1 ", 100, NULL);
    expect_uint_error("1.0", 100, NULL);
    expect_uint_error("0x1", 100, NULL);
}

/* With max < 9 the bound check computes (max - digit) in unsigned
 * arithmetic, which wraps when the digit exceeds max, so it passes. */
static void test_uint_small_max(void **state)
{
    (void) state;
    expect_uint("5", 5, 5);
    expect_uint_error("7", 5, "at most 5");
    expect_uint_error("1", 0, "at most 0");
    expect_uint_error("9", 8, "at most 8");
}

/* ---- formatting -------------------------------------------------------- */

static void expect_format_size(uint64_t bytes, const char *want)
{
    char buf[64];
    memset(buf, 'X', sizeof buf);
    const char *r = sbx_format_size(bytes, buf, sizeof buf);
    assert_ptr_equal(r, buf);
    if (strcmp(buf, want) != 0)
        fail_msg("sbx_format_size(%llu) = \"%s\", want \"%s\"", (unsigned long long) bytes, buf, want);
}

static void test_format_size(void **state)
{
    (void) state;
    expect_format_size(0, "0 B");
    expect_format_size(1, "1 B");
    expect_format_size(1023, "1023 B");
    expect_format_size(1024, "1 KiB");
    expect_format_size(1536, "1.5 KiB");
    expect_format_size(4096, "4 KiB");
    expect_format_size(512 * MIB, "512 MiB");
    expect_format_size(GIB, "1 GiB");
    expect_format_size(1610612736ULL, "1.5 GiB");
    expect_format_size(2 * GIB + GIB / 4, "2.2 GiB"); /* one decimal, truncated */
    expect_format_size(TIB, "1 TiB");
    expect_format_size(1024 * TIB, "1024 TiB"); /* TiB is the largest unit */
}

static void test_format_size_truncates_safely(void **state)
{
    (void) state;
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    sbx_format_size(512 * MIB, buf, 4);
    assert_string_equal(buf, "512");
    for (size_t i = 4; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'Z');
}

static void expect_format_duration(uint64_t ms, const char *want)
{
    char buf[64];
    memset(buf, 'X', sizeof buf);
    const char *r = sbx_format_duration(ms, buf, sizeof buf);
    assert_ptr_equal(r, buf);
    if (strcmp(buf, want) != 0)
        fail_msg("sbx_format_duration(%llu) = \"%s\", want \"%s\"", (unsigned long long) ms, buf, want);
}

static void test_format_duration(void **state)
{
    (void) state;
    expect_format_duration(250, "250ms");
    expect_format_duration(1500, "1500ms");
    expect_format_duration(0, "0s");
    expect_format_duration(1000, "1s");
    expect_format_duration(30000, "30s");
    expect_format_duration(300000, "5m");
    expect_format_duration(90000, "1m30s");
    expect_format_duration(3600000, "1h");
    expect_format_duration(3605000, "1h5s");
    expect_format_duration(5400000, "1h30m");
    expect_format_duration(3661000, "1h1m1s");
    expect_format_duration(86400000, "24h");
}

static void test_format_duration_truncates_safely(void **state)
{
    (void) state;
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    sbx_format_duration(5400000, buf, 3); /* "1h30m" */
    assert_string_equal(buf, "1h");
    for (size_t i = 3; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'Z');

    memset(buf, 'Z', sizeof buf);
    sbx_format_duration(3661000, buf, 5); /* "1h1m1s" */
    assert_string_equal(buf, "1h1m");
    for (size_t i = 5; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'Z');
}

/* What sbx prints, sbx accepts back. */
static void test_format_parse_duration_round_trip(void **state)
{
    (void) state;
    static const uint64_t values[] = { 1, 250, 999, 1000, 1500, 30000, 60000, 90000, 3600000, 3661000, 5400000,
                                       86400000, 90061001 };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char buf[64];
        sbx_format_duration(values[i], buf, sizeof buf);
        expect_duration(buf, values[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_units),
        cmocka_unit_test(test_size_fractions_are_exact),
        cmocka_unit_test(test_size_suffixes),
        cmocka_unit_test(test_size_rejects_zero_and_negative),
        cmocka_unit_test(test_size_rejects_garbage),
        cmocka_unit_test(test_size_rejects_overflow),
        cmocka_unit_test(test_size_null_error_object),
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_duration_compound_and_fractions),
        cmocka_unit_test(test_duration_bare_number_is_seconds),
        cmocka_unit_test(test_duration_rejects),
        cmocka_unit_test(test_duration_rejects_overflow),
        cmocka_unit_test(test_duration_sum_overflow),
        cmocka_unit_test(test_cpus_valid),
        cmocka_unit_test(test_cpus_invalid),
        cmocka_unit_test(test_uint_bounds),
        cmocka_unit_test(test_uint_rejects_non_digits),
        cmocka_unit_test(test_uint_small_max),
        cmocka_unit_test(test_format_size),
        cmocka_unit_test(test_format_size_truncates_safely),
        cmocka_unit_test(test_format_duration),
        cmocka_unit_test(test_format_duration_truncates_safely),
        cmocka_unit_test(test_format_parse_duration_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
