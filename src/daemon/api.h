/* api.h - the REST resources, one file each (api_<resource>.c); the
 * routes binding them to methods and paths are in http.c. */
#ifndef SBX_DAEMON_API_H
#define SBX_DAEMON_API_H

#include "http.h"

/* api_sandboxes.c */
void sbx_api_sandbox_create(sbx_req *r);
void sbx_api_sandbox_list(sbx_req *r);
void sbx_api_sandbox_get(sbx_req *r);
void sbx_api_sandbox_delete(sbx_req *r);
void sbx_api_sandbox_timeout(sbx_req *r);
void sbx_api_sandbox_metrics(sbx_req *r);
void sbx_api_sandbox_pause(sbx_req *r);
/* Give live sandbox b network policy p (taken; NULL: none): its egress
 * listeners, its commands' proxy envs, its record. */
struct sbx_net_policy;
int sbx_sandbox_network(sbx_daemon *d, sbx_box *b, struct sbx_net_policy *p, sbx_error *err);
void sbx_api_sandbox_network(sbx_req *r);
void sbx_api_sandbox_events(sbx_req *r);
/* The JSON of a sandbox, as every endpoint shows it. */
json_t *sbx_box_json(const sbx_box_row *b);
void sbx_api_sandbox_resume(sbx_req *r);

/* api_commands.c */
void sbx_api_cmd_run(sbx_req *r);
void sbx_api_cmd_list(sbx_req *r);
void sbx_api_cmd_stream(sbx_req *r);
void sbx_api_cmd_stdin_begin(sbx_req *r);
void sbx_api_cmd_stdin_data(sbx_req *r, const char *data, size_t len);
void sbx_api_cmd_stdin(sbx_req *r);
void sbx_api_cmd_stdin_close(sbx_req *r);
void sbx_api_cmd_signal(sbx_req *r);
void sbx_api_cmd_kill(sbx_req *r);

/* A command sbxd runs itself in sandbox b (a template's build steps, its
 * start command and readiness check), with the same defaults as the API's. */
typedef struct sbx_exec_opts {
    char *const *argv;
    const char *user;    /* NULL: the template's default */
    const char *cwd;     /* NULL: the template's workdir, else the user's home */
    json_t *envs;        /* extra envs over the sandbox's, or NULL */
    unsigned timeout_s;  /* 0: none */
    bool background;     /* return once started (recorded, like the API's) */
    bool root_caps;      /* a template build step: root keeps a container's capabilities */
    const int *cancel;   /* if set and it becomes non-zero: stop waiting */
    void (*on_output)(void *arg, int stream, const uint8_t *data, size_t len);
    void *arg;
} sbx_exec_opts;
/* 0 once it ran (*exit_code: its code, 128+signal if killed; err says how
 * it ended), or started in the background; -1 if it could not run (err). */
int sbx_box_exec(sbx_daemon *d, sbx_box *b, const sbx_exec_opts *o, int *exit_code, pid_t *pid, sbx_error *err);

/* The environment of a process started in sandbox b as user u: the
 * defaults (PATH, HOME, USER, LOGNAME, HOSTNAME, LANG), an allowlist
 * sandbox's proxy variables, the sandbox's envs, then envs (or NULL) over
 * them.  A NULL-terminated "K=V" list for sbx_strv_free.  Commands and
 * terminals (api_pty.c) alike: a shell must see what a command sees. */
char **sbx_box_env(sbx_box *b, const sbx_user *u, json_t *envs);
void sbx_strv_free(char **v);

/* api_files.c */
void sbx_api_file_put_begin(sbx_req *r);
void sbx_api_file_put_data(sbx_req *r, const char *data, size_t len);
void sbx_api_file_put(sbx_req *r);
void sbx_api_file_get(sbx_req *r);
void sbx_api_file_delete(sbx_req *r);
void sbx_api_file_list(sbx_req *r);
void sbx_api_file_stat(sbx_req *r);
void sbx_api_file_mkdir(sbx_req *r);
void sbx_api_file_move(sbx_req *r);

/* api_pty.c */
void sbx_api_pty(sbx_req *r);

/* api_snapshots.c */
void sbx_api_snapshot_create(sbx_req *r);
void sbx_api_snapshot_list(sbx_req *r);
void sbx_api_snapshot_get(sbx_req *r);
void sbx_api_snapshot_delete(sbx_req *r);
void sbx_api_sandbox_fork(sbx_req *r);

/* api_ports.c */
void sbx_api_port_begin(sbx_req *r);
void sbx_api_port_data(sbx_req *r, const char *data, size_t len);
void sbx_api_port(sbx_req *r);

/* api_templates.c */
void sbx_api_template_build_begin(sbx_req *r);
void sbx_api_template_build_data(sbx_req *r, const char *data, size_t len);
void sbx_api_template_build(sbx_req *r);
void sbx_api_template_list(sbx_req *r);
void sbx_api_template_get(sbx_req *r);
void sbx_api_template_delete(sbx_req *r);

/* api_mcp.c: MCP's Streamable HTTP transport */
void sbx_api_mcp_post(sbx_req *r);
void sbx_api_mcp_get(sbx_req *r);
void sbx_api_mcp_delete(sbx_req *r);

/* api_system.c */
void sbx_api_health(sbx_req *r);
void sbx_api_usage(sbx_req *r);
void sbx_api_openapi(sbx_req *r);
void sbx_api_prometheus(sbx_req *r);

#endif
