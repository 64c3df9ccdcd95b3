/* main.c - `sbx fuzz run|report` (reached through sbx-client). */
#include "fuzz.h"
#include "../cli/client/client.h"

#include <stdio.h>
#include <string.h>

int sbx_client_fuzz(sbx_cli *cli, int argc, char **argv)
{
    (void) cli; /* its own options: --target and --key, SBX_URL and SBX_API_KEY */
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return fz_run_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return fz_report_main(argc - 1, argv + 1);
    fprintf(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
            "usage: sbx fuzz run [--target URL] [--key KEY] [--count N] [--seed N] [--jobs N] [--domain D,...] "
            "[--db FILE]\n"
            "       sbx fuzz report DB [-o report.html] [--run N]\n"
            "Workflow tests (fs, encoding, exec) against a sandbox service; see docs/fuzz.md.\n");
    return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
