/* sbx - command-line entry point: dispatch to a verb. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
                 "`sbx run --help` lists the sandbox options and their defaults.\n");
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
    fprintf(stderr, "sbx: unknown command '%s' (see `sbx help`)\n", verb);
    return SBX_EXIT_FAILURE;
}
