/* domain_data.c - data work: a generated CSV uploaded, transformed to JSON
 * and the JSON to a report with Python inside, both checked against what
 * the harness computed; a chart drawn when the template has matplotlib. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TRANSFORM[] =
    "import csv, json, sys\n"
    "tot, cnt = {}, {}\n"
    "with open(sys.argv[1], newline='') as f:\n"
    "    for row in csv.DictReader(f):\n"
    "        k = row['category']\n"
    "        tot[k] = tot.get(k, 0) + int(row['value'])\n"
    "        cnt[k] = cnt.get(k, 0) + 1\n"
    "json.dump({k: {'sum': tot[k], 'count': cnt[k]} for k in sorted(tot)}, open(sys.argv[2], 'w'), sort_keys=True)\n";

/* The report step: the JSON summary made into a markdown table. */
static const char REPORT[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1]))\n"
    "out = ['# Summary of in.csv', '', '| category | rows | sum | mean |', '|---|---:|---:|---:|']\n"
    "n = s = 0\n"
    "for k in sorted(d):\n"
    "    c, t = d[k]['count'], d[k]['sum']\n"
    "    n += c\n"
    "    s += t\n"
    "    out.append('| %s | %d | %d | %.2f |' % (k, c, t, t / c))\n"
    "out.append('| total | %d | %d | %.2f |' % (n, s, s / n))\n"
    "open(sys.argv[2], 'w').write('\\n'.join(out) + '\\n')\n";

/* A file the sandbox made must hold what the harness computed (else the
 * sandbox's work is wrong), and its download those bytes (else the way
 * out changed them).  what: for messages. */
static int check_made(fz_ctx *c, const char *path, const char *want, size_t wl, const char *what)
{
    fz_upload expect = { path, want, wl };
    if (fz_check_inside(c, &expect, 1, FZ_SANDBOX) < 0) {
        _cleanup_free_ char *got = NULL;
        size_t gl;
        if (fz_get(c, path, &got, &gl) == 0)
            fz_evidence(c, "made", "%s (%zu bytes): %.400s; the harness expected %.400s", what, gl, got, want);
        return -1;
    }
    _cleanup_free_ char *got = NULL;
    size_t gl;
    if (fz_get(c, path, &got, &gl) < 0)
        return -1;
    if (gl != wl || memcmp(got, want, wl) != 0)
        return fz_fail(c, FZ_INTERFACE, "%s: the sandbox holds the right %zu bytes, the download gave %zu other ones",
                       what, wl, gl);
    return 0;
}

/* A generated CSV (mostly small; one test in eight up to 50 MB) summarised
 * to JSON by Python inside, then the JSON made into a report (markdown):
 * both checked byte for byte against what the harness computed, inside
 * and downloaded. */
static int csv_pipeline(fz_ctx *c)
{
    bool big = fz_below(&c->rng, 8) == 0;
    size_t max_rows = big ? 2300000 : 10 + (size_t) fz_below(&c->rng, 50000);
    size_t max_bytes = big ? 1000000 + (size_t) fz_below(&c->rng, 49000000) : SIZE_MAX; /* 50 MB at most */
    int ncat = 1 + (int) fz_below(&c->rng, 12);
    long long sum[12] = { 0 };
    long cnt[12] = { 0 };
    char *csv = NULL;
    size_t len = 0, rows = 0;
    FILE *f = open_memstream(&csv, &len);
    if (!f)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    size_t bytes = (size_t) fprintf(f, "id,category,value\r\n");
    for (; rows < max_rows; rows++) {
        int k = (int) fz_below(&c->rng, (uint64_t) ncat);
        long v = (long) fz_below(&c->rng, 2000000) - 1000000;
        char row[64];
        int n = snprintf(row, sizeof row, "%zu,cat-%02d,%ld\r\n", rows, k, v);
        if (bytes + (size_t) n > max_bytes)
            break;
        fputs(row, f);
        bytes += (size_t) n;
        sum[k] += v;
        cnt[k]++;
    }
    fclose(f);
    fz_evidence(c, "input", "%zu rows, %d categories, %zu bytes", rows, ncat, len);
    /* what json.dump(..., sort_keys=True) writes, and the report */
    char *js = NULL, *md = NULL;
    size_t jl = 0, ml = 0;
    FILE *j = open_memstream(&js, &jl), *m = open_memstream(&md, &ml);
    if (!j || !m) {
        if (j)
            fclose(j);
        if (m)
            fclose(m);
        free(csv);
        return fz_fail(c, FZ_HARNESS, "out of memory");
    }
    fputc('{', j);
    fputs("# Summary of in.csv\n\n| category | rows | sum | mean |\n|---|---:|---:|---:|\n", m);
    long long total = 0;
    long n = 0;
    for (int k = 0, first = 1; k < ncat; k++) {
        if (!cnt[k])
            continue;
        fprintf(j, "%s\"cat-%02d\": {\"count\": %ld, \"sum\": %lld}", first ? "" : ", ", k, cnt[k], sum[k]);
        fprintf(m, "| cat-%02d | %ld | %lld | %.2f |\n", k, cnt[k], sum[k], (double) sum[k] / (double) cnt[k]);
        first = 0;
        total += sum[k];
        n += cnt[k];
    }
    fputc('}', j);
    fprintf(m, "| total | %ld | %lld | %.2f |\n", n, total, (double) total / (double) n);
    fclose(j);
    fclose(m);
    _cleanup_free_ char *want_json = js, *want_md = md;
    fz_upload files[] = { { "/home/user/data/in.csv", csv, len },
                          { "/home/user/data/transform.py", TRANSFORM, sizeof TRANSFORM - 1 },
                          { "/home/user/data/report.py", REPORT, sizeof REPORT - 1 } };
    int r = fz_put_checked_many(c, files, 3);
    free(csv);
    int code = 0;
    _cleanup_free_ char *err = NULL;
    size_t el;
    if (r == 0)
        r = fz_exec(c, "cd /home/user/data && python3 transform.py in.csv out.json && python3 report.py out.json report.md",
                    &code, NULL, NULL, &err, &el);
    if (r == 0 && code != 0)
        return fz_fail(c, FZ_SANDBOX, "the transform or the report failed (exit %d): %.300s", code, err);
    if (r < 0 || check_made(c, "/home/user/data/out.json", want_json, jl, "out.json") < 0)
        return -1;
    return check_made(c, "/home/user/data/report.md", want_md, ml, "report.md");
}

static int chart(fz_ctx *c)
{
    int n = 3 + (int) fz_below(&c->rng, 20);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import matplotlib' 2>/dev/null || exit 42; cd /home/user && MPLBACKEND=Agg python3 -c '"
             "import matplotlib.pyplot as p; p.plot(range(%d), [i * i for i in range(%d)]); p.savefig(\"c.png\")' "
             "&& sha256sum c.png",
             n, n);
    int code;
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (fz_exec(c, cmd, &code, &out, &ol, NULL, NULL) < 0)
        return -1;
    if (code == 42)
        return fz_fail(c, FZ_UNSUPPORTED, "no matplotlib in this template");
    if (code != 0 || ol < 64)
        return fz_fail(c, FZ_SANDBOX, "drawing the chart failed (exit %d)", code);
    _cleanup_free_ char *png = NULL;
    size_t pl;
    if (fz_get(c, "/home/user/c.png", &png, &pl) < 0)
        return -1;
    char back[65];
    fz_sha256(png, pl, back);
    if (pl < 8 || memcmp(png, "\x89PNG\r\n\x1a\n", 8) != 0 || strncmp(back, out, 64) != 0)
        return fz_fail(c, FZ_INTERFACE, "the chart came back as %zu other bytes (%s, inside %.64s)", pl, back, out);
    return 0;
}

static const fz_test_def tests[] = {
    { "data.csv_pipeline", csv_pipeline },
    { "data.chart", chart },
};
const fz_domain fz_domain_data = { "data", tests, sizeof tests / sizeof *tests };
