/* domain_sdlc.c - a developer's loop: a C project built with make and its
 * artefact downloaded and verified; a Python package with its tests; git
 * init, commit, branch, diff. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run cmd in dir; 0, or a failure (127: the tool is not in the template). */
static int step(fz_ctx *c, const char *cmd, char **out)
{
    int code;
    size_t ol, el;
    _cleanup_free_ char *err = NULL;
    if (fz_exec(c, cmd, &code, out, &ol, &err, &el) < 0)
        return -1;
    if (code == 127)
        return fz_fail(c, FZ_UNSUPPORTED, "a tool is missing from this template: %.200s", err);
    if (code != 0)
        return fz_fail(c, FZ_SANDBOX, "`%.100s` failed (exit %d): %.300s", cmd, code, err);
    return 0;
}

static int c_make(fz_ctx *c)
{
    unsigned k = 2 + (unsigned) fz_below(&c->rng, 50);
    char src[256], mk[] = "app: main.o util.o\n\tcc -o app main.o util.o\n%.o: %.c\n\tcc -O2 -c $<\n";
    int n = snprintf(src, sizeof src, "int scale(int x) { return x * %u; }\n", k);
    static const char main_c[] = "#include <stdio.h>\nint scale(int);\nint main(void) { printf(\"%d\\n\", scale(7)); "
                                 "return 0; }\n";
    fz_upload files[] = { { "proj/util.c", src, (size_t) n },
                          { "proj/main.c", main_c, sizeof main_c - 1 },
                          { "proj/Makefile", mk, sizeof mk - 1 } };
    if (fz_put_checked_many(c, files, 3) < 0)
        return -1;
    _cleanup_free_ char *out = NULL;
    if (step(c, "cd proj && make -s && ./app && sha256sum app", &out) < 0)
        return -1;
    char want[32];
    snprintf(want, sizeof want, "%u\n", 7 * k);
    if (strncmp(out, want, strlen(want)) != 0)
        return fz_fail(c, FZ_SANDBOX, "the built program printed %.40s, not %s", out, want);
    const char *hash = out + strlen(want);
    _cleanup_free_ char *bin = NULL;
    size_t bl;
    if (fz_get(c, "proj/app", &bin, &bl) < 0)
        return -1;
    char back[65];
    fz_sha256(bin, bl, back);
    if (bl < 4 || memcmp(bin, "\x7f" "ELF", 4) != 0 || strncmp(back, hash, 64) != 0)
        return fz_fail(c, FZ_INTERFACE, "the artefact came back as %zu other bytes", bl);
    return 0;
}

static int py_package(fz_ctx *c)
{
    unsigned a = (unsigned) fz_below(&c->rng, 1000), b = (unsigned) fz_below(&c->rng, 1000);
    static const char mod[] = "def add(a, b):\n    return a + b\n";
    char test[256];
    int n = snprintf(test, sizeof test,
                     "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n"
                     "    def test_add(self):\n        self.assertEqual(add(%u, %u), %u)\n",
                     a, b, a + b);
    fz_upload files[] = { { "pkg/calc/__init__.py", mod, sizeof mod - 1 },
                          { "pkg/tests/__init__.py", "", 0 },
                          { "pkg/tests/test_calc.py", test, (size_t) n } };
    if (fz_put_checked_many(c, files, 3) < 0)
        return -1;
    _cleanup_free_ char *out = NULL;
    return step(c, "cd pkg && python3 -m unittest -q", &out);
}

static int git_flow(fz_ctx *c)
{
    char cmd[1024];
    unsigned v = (unsigned) fz_below(&c->rng, 100000);
    snprintf(cmd, sizeof cmd,
             "set -e; git config --global user.email f@z; git config --global user.name fz; "
             "git config --global init.defaultBranch main; mkdir -p repo && cd repo && git init -q && "
             "echo v%u > file && git add file && git commit -qm one && git checkout -qb topic && "
             "echo v%u >> file && git commit -qam two && git diff main --stat | tail -1 && "
             "git log --oneline | wc -l && git branch --show-current",
             v, v + 1);
    _cleanup_free_ char *out = NULL;
    if (step(c, cmd, &out) < 0)
        return -1;
    if (!strstr(out, "1 file changed, 1 insertion(+)") || !strstr(out, "\n2\ntopic\n"))
        return fz_fail(c, FZ_SANDBOX, "git gave: %.300s", out);
    return 0;
}

static const fz_test_def tests[] = {
    { "sdlc.c_make", c_make },
    { "sdlc.py_package", py_package },
    { "sdlc.git_flow", git_flow },
};
const fz_domain fz_domain_sdlc = { "sdlc", tests, sizeof tests / sizeof *tests };
