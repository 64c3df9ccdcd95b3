/* domain_data.c - data work: a generated CSV uploaded, transformed to JSON
 * with Python inside, downloaded and checked against what the harness
 * computed; a chart drawn when the template has matplotlib. */
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

static int csv_pipeline(fz_ctx *c)
{
    /* mostly small; one in eight up to two million rows (about 45 MB) */
    size_t rows = 10 + (size_t) fz_below(&c->rng, fz_below(&c->rng, 8) ? 50000 : 2000000);
    int ncat = 1 + (int) fz_below(&c->rng, 12);
    long long sum[12] = { 0 };
    long cnt[12] = { 0 };
    char *csv = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&csv, &len);
    fprintf(f, "id,category,value\r\n");
    for (size_t i = 0; i < rows; i++) {
        int k = (int) fz_below(&c->rng, (uint64_t) ncat);
        long v = (long) fz_below(&c->rng, 2000000) - 1000000;
        sum[k] += v;
        cnt[k]++;
        fprintf(f, "%zu,cat-%02d,%ld\r\n", i, k, v);
    }
    fclose(f);
    fz_evidence(c, "input", "%zu rows, %d categories, %zu bytes", rows, ncat, len);
    int r = fz_put(c, "/home/user/data/in.csv", csv, len);
    free(csv);
    if (r == 0)
        r = fz_put(c, "/home/user/data/transform.py", TRANSFORM, sizeof TRANSFORM - 1);
    int code = 0;
    _cleanup_free_ char *err = NULL;
    size_t el;
    if (r == 0)
        r = fz_exec(c, "cd /home/user/data && python3 transform.py in.csv out.json", &code, NULL, NULL, &err, &el);
    if (r == 0 && code != 0)
        return fz_fail(c, FZ_SANDBOX, "the transform failed (exit %d): %.300s", code, err);
    _cleanup_free_ char *out = NULL;
    size_t ol;
    if (r < 0 || fz_get(c, "/home/user/data/out.json", &out, &ol) < 0)
        return -1;
    json_t *j = json_loadb(out, ol, 0, NULL);
    if (!j)
        return fz_fail(c, FZ_INTERFACE, "out.json came back as no JSON (%zu bytes)", ol);
    for (int k = 0; k < ncat && r == 0; k++) {
        if (!cnt[k])
            continue;
        char name[16];
        snprintf(name, sizeof name, "cat-%02d", k);
        json_t *e = json_object_get(j, name);
        if (json_integer_value(json_object_get(e, "sum")) != sum[k] ||
            json_integer_value(json_object_get(e, "count")) != cnt[k])
            r = fz_fail(c, FZ_SANDBOX, "%s: the sandbox computed sum %lld count %lld, the harness %lld and %ld", name,
                        (long long) json_integer_value(json_object_get(e, "sum")),
                        (long long) json_integer_value(json_object_get(e, "count")), sum[k], cnt[k]);
    }
    json_decref(j);
    return r;
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
