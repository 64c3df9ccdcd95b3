/* templates.h - templates as sbxd sees them: their manifests
 * (HOME/templates/<name>/template.json, written by build.c), the defaults
 * a new sandbox takes from them, their start command and readiness check,
 * listing and removal (with the layers nothing uses any more).
 *
 * Templates are shared by every key of an sbxd: any key may use, build or
 * remove one (sbxd is a single-tenant service; see docs/security.md). */
#ifndef SBX_DAEMON_TEMPLATES_H
#define SBX_DAEMON_TEMPLATES_H

#include <jansson.h>
#include <stdbool.h>

#include "http.h"
#include "../lib/template.h"

/* Find a template by name or id: 0 with its name in name_out, -1 if none. */
int sbx_tpl_resolve(const char *home, const char *name_or_id, char name_out[65]);

/* The manifest of template `name` (base and hand-made templates get a
 * synthesized one), or NULL if there is no such template. */
json_t *sbx_tpl_load(const char *home, const char *name);

/* Every template's manifest, sorted by name, each with "in_use". */
json_t *sbx_tpl_list(sbx_daemon *d);

/* The manifest as the API shows it: with "in_use" {sandboxes, snapshots}. */
json_t *sbx_tpl_json(sbx_daemon *d, json_t *manifest);

/* Run the template's start command (in the background) in the new sandbox
 * b and wait until its readiness check exits 0.  0 when ready (or there is
 * nothing to run); -1 with err (the check's last output in the message). */
int sbx_tpl_start(sbx_daemon *d, sbx_box *b, json_t *manifest, sbx_error *err);

/* Remove template `name` and the layers nothing else uses.  If its only
 * users are the sandboxes of its own warm pool, that pool stops (until a
 * template of the name is built again) and they end.  -1 with err->errno_
 * EBUSY (live sandboxes or snapshots use it), EPERM (base), ENOENT. */
int sbx_tpl_remove(sbx_daemon *d, const char *name, sbx_error *err);

/* Remove layers under HOME/layers that nothing needs: no installed
 * template, no build in progress, no live sandbox (which may run on a
 * rebuilt template's older layers) and no snapshot (whose sandboxes mount
 * the version it was taken on).  all: every such layer (the leftovers of
 * failed builds too); else only those let go of (sbx_tpl_release_layers)
 * that were still in use then.  Returns how many went. */
size_t sbx_tpl_sweep_layers(sbx_daemon *d, bool all);

/* The layer keys in `keys` (an object's keys) are let go of: a rebuilt
 * template's old version, a deleted snapshot's template version.  Those
 * nothing needs go now; the others at a later sweep (the lifecycle thread
 * retries while any wait).  Returns how many went now. */
size_t sbx_tpl_release_layers(sbx_daemon *d, json_t *keys);

/* Some let-go-of layers were still in use at the last sweep. */
bool sbx_tpl_released_pending(void);

/* The layer keys of a manifest (its layers, an image root) into keep. */
void sbx_tpl_keep_manifest(json_t *manifest, json_t *keep);

/* Every layer key a `stack` text names (its root and layers) into keep. */
void sbx_tpl_keep_stack(const char *stack, json_t *keep);

/* Open template `name` as installed now and load its manifest, both of
 * one version (a rebuild may swap the template between two reads).
 * *manifest may be NULL (a build's partial template has none). */
int sbx_tpl_pin(const char *home, const char *name, uid_t uid_base, sbx_template *t, json_t **manifest,
                sbx_error *err);

/* {start, ready, ready_timeout_s} of a manifest: what a sandbox of it runs
 * when made (or made again from a snapshot).  A new reference. */
json_t *sbx_tpl_start_pin(json_t *manifest);

/* Pin row's template as installed now: row->stack, template_id and start
 * from one version; its manifest into *manifest if not NULL (the caller
 * decrefs it). */
int sbx_tpl_row_pin(sbx_daemon *d, sbx_box_row *row, json_t **manifest, sbx_error *err);

/* Layers directory: HOME/layers. */
void sbx_tpl_layers_dir(const char *home, char *out, size_t len);

#endif
