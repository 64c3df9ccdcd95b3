/* parse.h - parsers for user-facing values: sizes, durations, CPU counts.
 * Pure functions, unit-tested in tests/unit/test_parse.c. */
#ifndef SBX_PARSE_H
#define SBX_PARSE_H

#include <stdint.h>
#include "error.h"

/* "512M", "2G", "64k", "1048576", "1.5G" (binary units: K=1024).  Accepts an
 * optional "i"/"iB"/"B" suffix ("512MiB", "2GB").  Rejects zero, negatives,
 * garbage and overflow. */
int sbx_parse_size(const char *s, uint64_t *out, sbx_error *err);

/* "30s", "5m", "1h", "250ms", "1m30s", or a plain number of seconds.
 * Result in milliseconds, > 0. */
int sbx_parse_duration(const char *s, uint64_t *out_ms, sbx_error *err);

/* "2", "0.5", "1.25": vCPUs as a fraction, result in millicpus (1000 = one CPU).
 * Must be >= 0.01 and <= 1024. */
int sbx_parse_cpus(const char *s, uint32_t *out_millicpus, sbx_error *err);

/* A non-negative decimal integer fitting in `max`. */
int sbx_parse_uint(const char *s, uint64_t max, uint64_t *out, sbx_error *err);

/* Human-readable size ("512 MiB", "1.5 GiB", "100 B") into buf. */
const char *sbx_format_size(uint64_t bytes, char *buf, size_t len);

/* Human-readable duration ("30s", "5m", "1h30m", "250ms") into buf. */
const char *sbx_format_duration(uint64_t ms, char *buf, size_t len);

#endif
