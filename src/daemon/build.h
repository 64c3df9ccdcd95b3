/* build.h - template builds (build.c): a spec and its build context in, a
 * template out, with a stream of events on the way.
 *
 * The request's side: sbx_build_new (the name is claimed: one build per
 * name at a time), sbx_build_body with each piece of the request body,
 * sbx_build_prepare (context unpacked, spec parsed and checked: its
 * errors are the client's), sbx_build_start (a thread builds, writing
 * ndjson events to out_fd, -1 for none), then either the caller reads the
 * events until EOF or calls sbx_build_wait; sbx_build_free last. */
#ifndef SBX_DAEMON_BUILD_H
#define SBX_DAEMON_BUILD_H

#include <jansson.h>
#include <stdbool.h>

#include "http.h"

typedef struct sbx_build sbx_build;

int sbx_build_new(sbx_daemon *d, const char *name, const char *key_id, bool tar_body, bool no_cache, sbx_build **out,
                  sbx_error *err);
int sbx_build_body(sbx_build *bd, const char *data, size_t len, sbx_error *err);
int sbx_build_prepare(sbx_build *bd, sbx_error *err);
int sbx_build_start(sbx_build *bd, int out_fd, sbx_error *err);
/* The built template's JSON, or NULL with err (failed_step: 1-based, 0 if
 * no step's fault; tail: the failed run step's last output). */
json_t *sbx_build_wait(sbx_build *bd, sbx_error *err, int *failed_step, const char **tail);
void sbx_build_free(sbx_build *bd);

/* At start, before any build: remove what interrupted builds left
 * (HOME/builds, partial templates and layers). */
void sbx_build_clean_stale(const char *home);

/* Every layer key builds in progress stand on (the layers of their
 * template so far, the key of the step they run) into keep.  Called by the
 * sweep of unused layers with sbx_layers_sweep_lock held (layers.h). */
void sbx_build_keep_layers(json_t *keep);

/* Check a spec's shape without running anything (also for clients that
 * want to validate): 0, or -1 with err. */
int sbx_build_check_spec(json_t *spec, sbx_error *err);

#endif
