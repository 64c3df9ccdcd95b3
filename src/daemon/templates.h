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

#include "http.h"

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

/* Remove template `name` and the layers no other template uses.  -1 with
 * err->errno_ EBUSY (live sandboxes or snapshots use it, or a warm pool),
 * EPERM (base), ENOENT. */
int sbx_tpl_remove(sbx_daemon *d, const char *name, sbx_error *err);

/* Layers directory: HOME/layers. */
void sbx_tpl_layers_dir(const char *home, char *out, size_t len);

#endif
