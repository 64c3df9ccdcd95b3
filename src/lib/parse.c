/* parse.c - sizes, durations and CPU counts as users type them. */
#include "parse.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Parse "D[.D]" into a fixed-point value scaled by 10^frac_digits.  Keeping
 * the arithmetic in integers avoids float rounding surprises such as
 * "0.1G" becoming one byte short. */
static int parse_decimal(const char **p, unsigned frac_digits, uint64_t *out)
{
    const char *s = *p;
    uint64_t whole = 0, frac = 0, scale = 1;
    int any = 0;
    for (unsigned i = 0; i < frac_digits; i++)
        scale *= 10;
    while (isdigit((unsigned char) *s)) {
        if (whole > (UINT64_MAX / 10 - 9) / scale)
            return -ERANGE;
        whole = whole * 10 + (uint64_t) (*s - '0');
        s++;
        any = 1;
    }
    if (*s == '.') {
        s++;
        uint64_t f = scale;
        while (isdigit((unsigned char) *s)) {
            f /= 10;
            frac += (uint64_t) (*s - '0') * f; /* digits past the precision are dropped */
            s++;
            any = 1;
        }
    }
    if (!any)
        return -EINVAL;
    *out = whole * scale + frac;
    *p = s;
    return 0;
}

int sbx_parse_size(const char *s, uint64_t *out, sbx_error *err)
{
    const char *p = s;
    uint64_t milli;
    if (!s || !*s)
        return sbx_error_set(err, 0, "invalid size '': expected a number with an optional unit such as 512M or 2G");
    int r = parse_decimal(&p, 3, &milli);
    if (r < 0)
        return sbx_error_set(err, 0, "invalid size '%.64s': expected a number with an optional unit such as 512M or 2G", s);
    uint64_t mult = 1;
    bool fraction = strchr(s, '.') != NULL;
    switch (toupper((unsigned char) *p)) {
    case 'K': mult = 1ULL << 10; p++; break;
    case 'M': mult = 1ULL << 20; p++; break;
    case 'G': mult = 1ULL << 30; p++; break;
    case 'T': mult = 1ULL << 40; p++; break;
    case 'B': break;
    case '\0': break;
    default:
        return sbx_error_set(err, 0, "invalid size '%.64s': unknown unit (use K, M, G or T)", s);
    }
    if (mult > 1 && *p == 'i')
        p++;
    if (*p == 'B' || *p == 'b')
        p++;
    if (*p)
        return sbx_error_set(err, 0, "invalid size '%.64s': unexpected '%.64s'", s, p);
    if (mult == 1 && fraction)
        return sbx_error_set(err, 0, "invalid size '%.64s': a byte count must be a whole number", s);
    if (milli > UINT64_MAX / mult)
        return sbx_error_set(err, 0, "invalid size '%.64s': too large", s);
    uint64_t bytes = milli * mult / 1000;
    if (bytes == 0)
        return sbx_error_set(err, 0, "invalid size '%.64s': must be greater than zero", s);
    *out = bytes;
    return 0;
}

int sbx_parse_duration(const char *s, uint64_t *out_ms, sbx_error *err)
{
    const char *p = s;
    uint64_t total = 0;
    if (!s || !*s)
        return sbx_error_set(err, 0, "invalid duration '': expected e.g. 30s, 5m, 1h or 250ms");
    while (*p) {
        const char *component = p;
        uint64_t milli;
        if (parse_decimal(&p, 3, &milli) < 0)
            return sbx_error_set(err, 0, "invalid duration '%.64s': expected e.g. 30s, 5m, 1h or 250ms", s);
        uint64_t unit_ms; /* milliseconds per unit; milli is the value x1000 */
        if (strncmp(p, "ms", 2) == 0) {
            unit_ms = 1;
            p += 2;
        } else if (*p == 's') {
            unit_ms = 1000;
            p++;
        } else if (*p == 'm') {
            unit_ms = 60 * 1000;
            p++;
        } else if (*p == 'h') {
            unit_ms = 3600 * 1000;
            p++;
        } else if (*p == 'd') {
            unit_ms = 86400 * 1000;
            p++;
        } else if (*p == '\0' && component == s) {
            unit_ms = 1000; /* a bare number (the whole string) means seconds */
        } else {
            return sbx_error_set(err, 0, "invalid duration '%.64s': unknown unit (use ms, s, m, h or d)", s);
        }
        /* cap at ~292 million years: far beyond any use, far from overflow */
        const uint64_t cap = UINT64_MAX / 2000;
        if (milli > cap / unit_ms || total + milli * unit_ms / 1000 > cap)
            return sbx_error_set(err, 0, "invalid duration '%.64s': too large", s);
        total += milli * unit_ms / 1000;
    }
    if (total == 0)
        return sbx_error_set(err, 0, "invalid duration '%.64s': must be greater than zero", s);
    *out_ms = total;
    return 0;
}

int sbx_parse_cpus(const char *s, uint32_t *out, sbx_error *err)
{
    const char *p = s;
    uint64_t milli;
    if (!s || parse_decimal(&p, 3, &milli) < 0 || *p)
        return sbx_error_set(err, 0, "invalid CPU count '%.64s': expected a number such as 1, 2 or 0.5", s ? s : "");
    if (milli < 10)
        return sbx_error_set(err, 0, "invalid CPU count '%.64s': must be at least 0.01", s);
    if (milli > 1024 * 1000)
        return sbx_error_set(err, 0, "invalid CPU count '%.64s': must be at most 1024", s);
    *out = (uint32_t) milli;
    return 0;
}

int sbx_parse_uint(const char *s, uint64_t max, uint64_t *out, sbx_error *err)
{
    uint64_t v = 0;
    if (!s || !*s)
        return sbx_error_set(err, 0, "invalid number '': expected a non-negative integer");
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char) *p))
            return sbx_error_set(err, 0, "invalid number '%.64s': expected a non-negative integer", s);
        uint64_t d = (uint64_t) (*p - '0');
        if (v > max / 10 || (v == max / 10 && d > max % 10))
            return sbx_error_set(err, 0, "invalid number '%.64s': must be at most %" PRIu64, s, max);
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

const char *sbx_format_size(uint64_t b, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    unsigned u = 0;
    uint64_t whole = b, rem = 0;
    while (whole >= 1024 && u < 4) {
        rem = whole % 1024;
        whole /= 1024;
        u++;
    }
    if (rem == 0 || u == 0)
        snprintf(buf, len, "%" PRIu64 " %s", whole, units[u]);
    else
        snprintf(buf, len, "%" PRIu64 ".%" PRIu64 " %s", whole, rem * 10 / 1024, units[u]);
    return buf;
}

const char *sbx_format_duration(uint64_t ms, char *buf, size_t len)
{
    if (ms % 1000) {
        snprintf(buf, len, "%" PRIu64 "ms", ms);
        return buf;
    }
    uint64_t s = ms / 1000, h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
    size_t n = 0;
    buf[0] = '\0';
    if (h)
        n += (size_t) snprintf(buf + n, len - n, "%" PRIu64 "h", h);
    if (m && n < len)
        n += (size_t) snprintf(buf + n, len - n, "%" PRIu64 "m", m);
    if ((sec || (!h && !m)) && n < len)
        snprintf(buf + n, len - n, "%" PRIu64 "s", sec);
    return buf;
}
