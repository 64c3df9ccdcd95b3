/* template.h - where a sandbox's root file system comes from.
 *
 * A template is a read-only root file system directory under
 * <sbx home>/templates/<name>/rootfs, plus host paths it binds read-only.
 * The built-in `base` template is generated on first use: a small tree
 * owned by the sandbox's root (passwd, group, hosts, resolv.conf,
 * nsswitch.conf, the merged-/usr links, /home/user) whose /usr, /etc/ssl,
 * /etc/alternatives and /etc/ld.so.cache are the host's, read-only.  So
 * python3, sh and cc work in it out of the box. */
#ifndef SBX_TEMPLATE_H
#define SBX_TEMPLATE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "spec.h"

#define SBX_TEMPLATE_MAX_BINDS 8

typedef struct sbx_template {
    char name[65];
    char rootfs[4096];
    sbx_bind binds[SBX_TEMPLATE_MAX_BINDS];
    size_t n_binds;
} sbx_template;

/* Template names: 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'. */
int sbx_template_name_valid(const char *name);

/* Find (and for `base`, create on first use) the template. */
int sbx_template_open(sbx_template *tpl, const char *home, const char *name, uid_t uid_base, sbx_error *err);

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
