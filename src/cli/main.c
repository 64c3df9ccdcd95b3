/* sbx - command-line entry point: dispatch to a verb.
 *
 * `sbx run` (no daemon) is handled here.  Every other verb talks to sbxd and
 * lives in sbx-client (src/cli/client/), which links libcurl and jansson:
 * this binary stays static so that `sbx run` starts in ~1.6 ms rather than
 * the ~17 ms the dynamic loader costs once libcurl is in (bench/). */
#define _GNU_SOURCE
#include "cli.h"
#include "../lib/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#ifndef SBX_VERSION
#define SBX_VERSION "dev"
#endif

static void usage(FILE *out)
{
    fprintf(out, "usage: sbx COMMAND [ARGS...]\n"
                 "\n"
                 "Commands:\n"
                 "  run [OPTIONS] -- CMD [ARGS...]   run CMD in a fresh, isolated, throw-away sandbox\n"
                 "  version                          print the version\n"
                 "  help                             this text\n"
                 "\n"
                 "Commands talking to the daemon, sbxd (--url URL or SBX_URL, --key KEY or SBX_API_KEY):\n"
                 "  create [OPTIONS]                 create a sandbox, print its id\n"
                 "  ls [--state S|all] [-m K=V]      list sandboxes\n"
                 "  info ID                          show a sandbox\n"
                 "  exec [OPTIONS] ID -- CMD [ARGS]  run CMD in sandbox ID, stream its output\n"
                 "  cp SRC DST                       copy files in or out (ID:PATH is in the sandbox)\n"
                 "  timeout ID DURATION              expire the sandbox DURATION from now\n"
                 "  metrics ID                       CPU, memory, disk, processes of a sandbox\n"
                 "  kill ID...                       delete sandboxes\n"
                 "  pause ID... / resume ID...       freeze sandboxes (no CPU, state kept) / wake them\n"
                 "  snapshot ID | ls | rm S...       save a sandbox's files; list, delete snapshots\n"
                 "  fork [-n N] ID                   N new sandboxes with a copy of ID's files\n"
                 "  template build|ls|info|rm        build templates from a spec, list, show, remove them\n"
                 "  net ID [none | allow RULE... | open [CIDR...]] [--deny RULE]...\n"
                 "                                   show or set a sandbox's network policy\n"
                 "  fuzz run|report|diff             workflow tests against a sandbox service (docs/fuzz.md)\n"
                 "  shell ID                         a terminal in the sandbox\n"
                 "  mcp                              serve the sandbox tools over MCP on stdio\n"
                 "\n"
                 "`sbx COMMAND --help` lists a command's options; `--json` prints sbxd's answers as is.\n");
}

/* Hand the whole command line to sbx-client; returns only on failure. */
static int exec_client(char **argv)
{
    char path[PATH_MAX];
    sbx_error err = { 0 };
    if (sbx_find_companion("sbx-client", "SBX_CLIENT", path, sizeof path, &err) < 0) {
        fprintf(stderr, "sbx: '%s' needs sbx-client: %s\n", argv[1], err.msg);
        return SBX_EXIT_FAILURE;
    }
    execv(path, argv);
    fprintf(stderr, "sbx: cannot run %s: %s (set SBX_CLIENT)\n", path, strerror(errno));
    return SBX_EXIT_FAILURE;
}

/* A caller may start us with stdin, stdout or stderr closed.  Our own
 * descriptors would then take those numbers and the sandbox would inherit
 * them as its stdio; give any closed one /dev/null first. */
static void ensure_stdio(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", O_RDWR);
            if (n >= 0 && n != fd) {
                dup2(n, fd);
                close(n);
            }
        }
    }
}

int main(int argc, char **argv)
{
    ensure_stdio();
    if (argc < 2) {
        usage(stderr);
        return SBX_EXIT_FAILURE;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "run") == 0)
        return sbx_cmd_run(argc - 1, argv + 1);
    if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
        printf("sbx %s\n", SBX_VERSION);
        return 0;
    }
    if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    /* everything else, unknown verbs included, is sbx-client's to judge */
    return exec_client(argv);
}
