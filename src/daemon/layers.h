/* layers.h - read-only file-system layers on the host: snapshots
 * (HOME/snapshots/<id>) and the layers of built templates
 * (HOME/layers/<key>).  Both are a sandbox's writable layer (or an
 * imported image) frozen into a directory an overlay stacks as a lower
 * layer: owners, modes, times, hard links, overlay whiteouts (0/0
 * character devices) and opaque markers (user.overlay.opaque) kept. */
#ifndef SBX_DAEMON_LAYERS_H
#define SBX_DAEMON_LAYERS_H

#include <stdint.h>

#include "../lib/error.h"
#include "registry.h"

/* Run argv (a host tool: cp, rm), its stderr's first line into err; 0 if
 * it exited 0. */
int sbx_run_tool(char *const argv[], sbx_error *err);

/* Copy sandbox b's writable layer to `dest` (which must not exist), with
 * its processes frozen meanwhile so the copy is consistent (a paused
 * sandbox stays as it is). */
int sbx_layer_capture(sbx_registry *reg, sbx_box *b, const char *dest, sbx_error *err);

/* Remove a layer directory tree (never crossing into another file system). */
void sbx_layer_remove(const char *dir);

/* Bytes of the regular files under dir. */
int64_t sbx_layer_bytes(const char *dir);

/* Make a copied tree durable before anything records it: syncfs() of the
 * file system holding `dir` (cp wrote many files; one call flushes them
 * all) and fsync() of dir itself.  The caller renames it into place and
 * then syncs the parent (sbx_dir_sync), so the name is durable too.
 * 0, or -1 with err. */
int sbx_layer_sync(const char *dir, sbx_error *err);

/* fsync() of a directory (a rename in it is then durable). */
int sbx_dir_sync(const char *dir, sbx_error *err);

/* Who may remove layers, and when.  The sweep of unused layers
 * (templates.c) takes this exclusively, while it decides what is unused and
 * moves it out of the way; whatever is about to use layers that nothing
 * records yet takes it shared: a create from the moment it reads a stack
 * until its sandbox is in the registry, a build while it records the layers
 * it stands on.  Writer-preferring: a stream of creates cannot starve a
 * sweep.  Never taken twice by one thread. */
void sbx_layers_use_lock(void);
void sbx_layers_use_unlock(void);
void sbx_layers_sweep_lock(void);
void sbx_layers_sweep_unlock(void);

#endif
