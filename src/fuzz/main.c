/* main.c - `sbx fuzz run|report|diff` (reached through sbx-client). */
#include "fuzz.h"
#include "../cli/client/client.h"

#include <stdio.h>
#include <string.h>

/* Every option of every verb, and every domain: `sbx fuzz --help` is the
 * one place that lists them all (each verb's --help gives its own line). */
static const char usage[] =
    "usage: sbx fuzz run [--target URL] [--key KEY] [--interface rest|mcp] [--count N] [--seed N]\n"
    "                    [--jobs N] [--domain D,...] [--template NAME] [--test-timeout S] [--db FILE]\n"
    "       sbx fuzz run --resume RUN [--key KEY] [--jobs N] [--db FILE]\n"
    "       sbx fuzz report DB [-o FILE] [--run N]\n"
    "       sbx fuzz diff [--db FILE] [--json] RUN_A RUN_B\n"
    "\n"
    "Seeded workflow tests against a sandbox service, through the interface an agent uses; results in\n"
    "SQLite, failures told apart by layer (interface, sandbox, harness, timeout; unsupported is never a pass).\n"
    "\n"
    "run:\n"
    "  --target URL          the service (default $SBX_URL)\n"
    "  --key KEY             its API key (default $SBX_API_KEY; never stored)\n"
    "  --interface rest|mcp  drive its REST API (default) or its MCP tools (URL/mcp)\n"
    "  --count N             tests in the run, spread over the domains (default 1000)\n"
    "  --seed N              the run's seed (default: the time); the same seed, the same tests\n"
    "  --jobs N              workers, each with its own connection (default 4, 1..64)\n"
    "  --domain D,...        only these domains (default all): fs, encoding, exec, lang, lifecycle,\n"
    "                        limits, security, data, sdlc, network\n"
    "  --template NAME       every sandbox from this template (default: the service's)\n"
    "  --test-timeout S      each test's deadline, every request in it included (default 120)\n"
    "  --db FILE             the results file (default fuzz-results.db)\n"
    "  --resume RUN          run what run RUN of --db did not finish, with its options\n"
    "  exit 0: no test failed, 1: some did, 2: usage, 130: interrupted (--resume continues)\n"
    "report:\n"
    "  DB                    the results file\n"
    "  -o, --output FILE     the self-contained HTML page (default report.html)\n"
    "  --run N               the run (default the newest)\n"
    "diff:\n"
    "  RUN_A RUN_B           a run id in --db, or FILE:RUN for a run of another results file\n"
    "  --db FILE             the results file of plain run ids (default fuzz-results.db)\n"
    "  --json                for machines\n"
    "  exit 0: no test regressed (pass -> failure), 1: some did, 2: usage or results file error\n"
    "\n"
    "See docs/fuzz.md.\n";

int sbx_client_fuzz(sbx_cli *cli, int argc, char **argv)
{
    (void) cli; /* its own options: --target and --key, SBX_URL and SBX_API_KEY */
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return fz_run_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return fz_report_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "diff") == 0)
        return fz_diff_main(argc - 1, argv + 1);
    bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                              strcmp(argv[1], "help") == 0);
    if (!help && argc >= 2)
        fprintf(stderr, "sbx fuzz: unknown verb '%s' (run, report or diff)\n", argv[1]);
    fputs(usage, help ? stdout : stderr);
    return help ? 0 : 2;
}
