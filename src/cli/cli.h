/* cli.h - the `sbx` command's verbs. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

/* Exit statuses of `sbx run` beyond the command's own (see README). */
#define SBX_EXIT_OOM 123      /* the command was killed for exceeding --memory */
#define SBX_EXIT_TIMEOUT 124  /* --timeout expired */
#define SBX_EXIT_FAILURE 125  /* sbx itself failed: bad option, setup error */
#define SBX_EXIT_CANNOT_EXEC 126
#define SBX_EXIT_NOT_FOUND 127

int sbx_cmd_run(int argc, char **argv);

#endif
