/* template.h - where a sandbox's root file system comes from.
 *
 * A template is a read-only root file system: a root directory, the layers
 * stacked over it (overlay lower directories, read-only, shared by every
 * sandbox of the template), host paths it binds read-only, and defaults
 * (user, working directory; sbxd also reads envs, the start command and
 * resource defaults from the same manifest).
 *
 * The built-in `base` template is generated on first use under
 * <sbx home>/templates/base/rootfs: a small tree owned by the sandbox's
 * root (passwd, group, hosts, resolv.conf, nsswitch.conf, the merged-/usr
 * links, /home/user) whose /usr, /etc/ssl, /etc/alternatives and
 * /etc/ld.so.cache are the host's, read-only.  So python3, sh and cc work
 * in it out of the box.
 *
 * Built templates (sbxd's `POST /v1/templates`, src/daemon/build.c) are a
 * directory <sbx home>/templates/<name>/ holding template.json (everything
 * about it, for sbxd) and `stack`, the part a sandbox's mounts need, in
 * lines this file reads without a JSON parser (so the static `sbx run`
 * needs none):
 *     root base | root <host path of the bottom layer>
 *     layer <host path>          one per layer over the root, top first
 *     user <name>                optional
 *     workdir <path>             optional
 * Layers live in <sbx home>/layers/<key>/, shared by templates.  The root
 * is either `base` (its tree and binds, the layers over it) or an imported
 * image's tree.  A directory templates/<name>/rootfs without a stack is a
 * hand-made template: that tree alone. */
#ifndef SBX_TEMPLATE_H
#define SBX_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "spec.h"

#define SBX_TEMPLATE_MAX_BINDS 8
/* Layers of a built template over its root (each run or copy step that
 * changed something is one); a sandbox adds up to 8 snapshot layers. */
#define SBX_TEMPLATE_MAX_LAYERS 32

typedef struct sbx_template {
    char name[65];
    char id[33];           /* "" for base and hand-made templates */
    char rootfs[4096];
    char layers[4096];     /* host paths of the layers over rootfs, ':'-joined, top first; "" for none */
    sbx_bind binds[SBX_TEMPLATE_MAX_BINDS];
    size_t n_binds;
    char user[64];         /* default user of commands; "" for "user" */
    char workdir[1024];    /* default working directory; "" for the user's home */
    bool root_base;        /* the root is base's tree (and its binds): "root base" in a stack */
} sbx_template;

/* Template names: 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'. */
int sbx_template_name_valid(const char *name);

/* sbxd's build sandboxes run on a partial template named ".build-<hex>":
 * valid for sbx_template_open, never for a user. */
#define SBX_BUILD_TEMPLATE_PREFIX ".build-"

/* Find (and for `base`, create on first use) the template. */
int sbx_template_open(sbx_template *tpl, const char *home, const char *name, uid_t uid_base, sbx_error *err);

/* Open a template from the text of a `stack` recorded earlier (sbxd keeps
 * the stack each sandbox and snapshot was made on, so that they mount
 * exactly that version after a rebuild of the template).  name is only
 * the template's name, for messages and user lookups. */
int sbx_template_open_stack(sbx_template *tpl, const char *home, const char *name, const char *stack, uid_t uid_base,
                            sbx_error *err);

/* The `stack` text of an open template (malloc'd; NULL: out of memory):
 * what sbx_template_open_stack reads back. */
char *sbx_template_stack_text(const sbx_template *tpl);

/* The id line of templates/<name>/stack into out: the version installed
 * now ("" for base and hand-made templates).  0, or -1 if unreadable. */
int sbx_template_read_id(const char *home, const char *name, char out[33]);

/* The host path of `rel` (relative to the sandbox's /) in the template's
 * layers, top first, then its root; -1 if no layer has it. */
int sbx_template_find(const sbx_template *tpl, const char *rel, char *out, size_t len);

/* A user looked up in the template's /etc/passwd, by name or number. */
typedef struct sbx_user {
    uid_t uid;
    gid_t gid;
    char name[64];
    char home[256];
} sbx_user;

/* `who` is a name or a decimal uid (0..65535).  A uid without a passwd entry
 * is allowed: gid = uid, home = "/".  Returns -1 with a clear error for an
 * unknown name. */
int sbx_template_lookup_user(const sbx_template *tpl, const char *who, sbx_user *out, sbx_error *err);

/* Pure helper for tests: find `who` in passwd text. 1 found, 0 not found. */
int sbx_passwd_find(const char *passwd, const char *who, sbx_user *out);

#endif
