/* domain_lang.c - languages the template offers: the same small program in
 * two languages must print the same thing; C is compiled and run. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run cmd; its stdout, or NULL after recording a failure. */
static char *output(fz_ctx *c, const char *cmd, const char *what)
{
    int code;
    char *out = NULL, *err = NULL;
    size_t ol, el;
    if (fz_exec(c, cmd, &code, &out, &ol, &err, &el) < 0)
        return NULL;
    if (code == 127) {
        fz_fail(c, FZ_UNSUPPORTED, "%s: not in this template (%s)", what, err);
        free(out);
        out = NULL;
    } else if (code != 0) {
        fz_fail(c, FZ_SANDBOX, "%s failed (exit %d): %.300s", what, code, err);
        free(out);
        out = NULL;
    }
    free(err);
    return out;
}

/* sum of i*k for i < n, and a word count, in Python and in shell */
static int python_vs_shell(fz_ctx *c)
{
    unsigned n = 1 + (unsigned) fz_below(&c->rng, 2000), k = 1 + (unsigned) fz_below(&c->rng, 97);
    char py[256], sh[256];
    snprintf(py, sizeof py, "python3 -c 'print(sum(i * %u for i in range(%u)))'", k, n);
    snprintf(sh, sizeof sh, "s=0; i=0; while [ $i -lt %u ]; do s=$((s + i * %u)); i=$((i + 1)); done; echo $s", n, k);
    _cleanup_free_ char *a = output(c, py, "python3");
    if (!a)
        return -1;
    _cleanup_free_ char *b = output(c, sh, "sh");
    if (!b)
        return -1;
    unsigned long long want = (unsigned long long) k * n * (n - 1) / 2;
    char expect[32];
    snprintf(expect, sizeof expect, "%llu\n", want);
    if (strcmp(a, expect) != 0 || strcmp(b, expect) != 0)
        return fz_fail(c, FZ_SANDBOX, "python3 printed %s, sh printed %s, the harness computed %s", a, b, expect);
    return 0;
}

static int c_compile_run(fz_ctx *c)
{
    unsigned n = 1 + (unsigned) fz_below(&c->rng, 40);
    char src[512];
    int len = snprintf(src, sizeof src,
                       "#include <stdio.h>\nint main(void) { unsigned long long a = 0, b = 1;\n"
                       "  for (int i = 0; i < %u; i++) { unsigned long long t = a + b; a = b; b = t; }\n"
                       "  printf(\"%%llu\\n\", a); return 0; }\n",
                       n);
    if (fz_put(c, "/home/user/fib.c", src, (size_t) len) < 0)
        return -1;
    _cleanup_free_ char *out = output(c, "cd /home/user && cc -O2 -o fib fib.c && ./fib", "cc");
    if (!out)
        return -1;
    unsigned long long a = 0, b = 1;
    for (unsigned i = 0; i < n; i++) {
        unsigned long long t = a + b;
        a = b;
        b = t;
    }
    char expect[32];
    snprintf(expect, sizeof expect, "%llu\n", a);
    _cleanup_free_ char *py = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "python3 -c 'a,b=0,1\nfor _ in range(%u): a,b=b,a+b\nprint(a)'", n);
    py = output(c, cmd, "python3");
    if (!py)
        return -1;
    if (strcmp(out, expect) != 0 || strcmp(py, expect) != 0)
        return fz_fail(c, FZ_SANDBOX, "fib(%u): C printed %s, Python %s, the harness %s", n, out, py, expect);
    return 0;
}

static const fz_test_def tests[] = {
    { "lang.python_vs_shell", python_vs_shell },
    { "lang.c_compile_run", c_compile_run },
};
const fz_domain fz_domain_lang = { "lang", tests, sizeof tests / sizeof *tests };
