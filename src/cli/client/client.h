/* client.h - sbx-client: the `sbx` verbs that talk to sbxd.
 *
 * `sbx` is statically linked so that `sbx run` starts fast; linking it
 * against libcurl would cost ~15 ms per run (bench/).  So every verb `sbx`
 * does not handle itself is exec'd here, with the same argv (src/cli/main.c).
 *
 * Exit statuses: 0 success; 2 usage error; 125 sbx or the API failed (one
 * `sbx: ...` line on stderr); `sbx exec` also passes on the command's own. */
#ifndef SBX_CLIENT_H
#define SBX_CLIENT_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "../../lib/error.h"
#include "../cli.h"
#include "../../mcp/mcp.h" /* _cleanup_json_ */
#include "../../rest/http.h"

#define SBX_EXIT_USAGE 2
#define SBX_DEFAULT_URL "http://127.0.0.1:7700"

/* Global options (--url, --key, --json), from the environment first and then
 * from the command line, before or after the verb. */
typedef struct sbx_cli {
    const char *url;
    const char *key;
    bool json;
    sbx_http *http; /* opened by sbx_cli_http() once the options are known */
} sbx_cli;

/* What a verb accepts. */
typedef struct sbx_cli_verb {
    const char *name;
    const char *usage; /* "sbx create [OPTIONS]": printed with usage errors */
    const char *help;  /* the rest of `sbx VERB --help` */
    const char *shortopts;
    const struct option *longopts; /* NULL-terminated; ids must stay below 0x1000 */
    /* exec: after this many positionals the first non-option starts the
     * command (everything from there is `rest`, options included); -1: never */
    int stop_after;
} sbx_cli_verb;

typedef struct sbx_cli_args {
    char **pos; /* positionals, in order (options may sit between them) */
    int npos;
    char **rest; /* stop_after: the command; NULL if none */
    int nrest;
} sbx_cli_args;

/* Called with each of the verb's own options. */
typedef int (*sbx_cli_opt_fn)(void *ctx, int opt, const char *arg, sbx_error *err);

/* Parse argv (argv[0] is the verb) into *out, handling the global options
 * too.  Returns 0; 1 if --help was asked for and printed; -1 on a usage
 * error (err filled: print it with sbx_cli_usage_error()).  Reorders argv. */
int sbx_cli_parse(sbx_cli *cli, const sbx_cli_verb *v, int argc, char **argv, sbx_cli_opt_fn fn, void *ctx,
                  sbx_cli_args *out, sbx_error *err);

/* Print "sbx: MESSAGE" and the verb's usage line; returns SBX_EXIT_USAGE. */
int sbx_cli_usage_error(const sbx_cli_verb *v, const sbx_error *err);
/* Print "sbx: MESSAGE"; returns SBX_EXIT_FAILURE. */
int sbx_cli_fail(const sbx_error *err);

/* The HTTP client for cli->url and cli->key (opened on first use). */
sbx_http *sbx_cli_http(sbx_cli *cli, sbx_error *err);

/* Print a JSON value on stdout: indented, or as one line. */
void sbx_cli_print_json(const json_t *v, bool pretty);
/* Print a response body as sbxd sent it (for --json), ending in a newline. */
void sbx_cli_print_raw(const sbx_http_resp *r);

/* "KEY=VALUE" into obj[KEY] = VALUE.  allow_host: "KEY" alone takes the
 * value of KEY in our own environment (skipped when unset), as `sbx run -e`. */
int sbx_cli_add_kv(json_t *obj, const char *opt, const char *arg, bool allow_host, sbx_error *err);

/* "/v1/sandboxes/<id><suffix>" with the id escaped. */
char *sbx_cli_sandbox_path(sbx_http *h, const char *id, const char *suffix, sbx_error *err);


/* The verbs. */
int sbx_client_create(sbx_cli *cli, int argc, char **argv);
int sbx_client_ls(sbx_cli *cli, int argc, char **argv);
int sbx_client_info(sbx_cli *cli, int argc, char **argv);
int sbx_client_kill(sbx_cli *cli, int argc, char **argv);
int sbx_client_pause(sbx_cli *cli, int argc, char **argv);
int sbx_client_resume(sbx_cli *cli, int argc, char **argv);
int sbx_client_snapshot(sbx_cli *cli, int argc, char **argv);
int sbx_client_fork(sbx_cli *cli, int argc, char **argv);
int sbx_client_timeout(sbx_cli *cli, int argc, char **argv);
int sbx_client_metrics(sbx_cli *cli, int argc, char **argv);
int sbx_client_exec(sbx_cli *cli, int argc, char **argv);
int sbx_client_cp(sbx_cli *cli, int argc, char **argv);
int sbx_client_shell(sbx_cli *cli, int argc, char **argv);
int sbx_client_mcp(sbx_cli *cli, int argc, char **argv); /* mcp_stdio.c */
int sbx_client_template(sbx_cli *cli, int argc, char **argv); /* templates.c */
int sbx_client_net(sbx_cli *cli, int argc, char **argv);
int sbx_client_fuzz(sbx_cli *cli, int argc, char **argv); /* src/fuzz/main.c */

#endif
