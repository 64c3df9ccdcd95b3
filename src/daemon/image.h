/* image.h - turn an image archive into a plain directory tree (a template's
 * root file system) on the host, safely.
 *
 * The archive is hostile input: any name, link target, owner or size in it
 * may be an attack.  So every path is resolved inside the destination with
 * openat2(RESOLVE_IN_ROOT): a symlink in the image (`escape -> /`,
 * `escape -> ../../..`) is followed as if the destination were "/", never out
 * of it.  Names with a ".." component are refused; a leading "/" or "./" is
 * stripped.  Devices and sockets are skipped (a 0/0 character device would
 * be an overlay whiteout in the template), owners are shifted into the
 * sandbox's id range so no file of the tree belongs to a host id below
 * uid_base, and the regular-file bytes written can be bounded.
 *
 * The tree keeps the image's symlinks verbatim, so it must only ever be read
 * from inside a sandbox or through RESOLVE_IN_ROOT, never by plain host
 * paths.  Runs as root (it chowns).  No global state: imports may run in
 * parallel, each into its own destination. */
#ifndef SBX_DAEMON_IMAGE_H
#define SBX_DAEMON_IMAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* What the image's config blob says about how to run it.  Every field may be
 * empty: a plain root file system tarball has no config at all. */
typedef struct sbx_image_config {
    json_t *env;        /* array of "KEY=VALUE" strings (config.Env), or NULL */
    char workdir[4096]; /* config.WorkingDir, "" if unset */
    char user[256];     /* config.User ("name", "uid", "uid:gid"...), "" if unset */
    json_t *cmd;        /* config.Entrypoint then config.Cmd, an array of strings, or NULL when both are empty */
} sbx_image_config;

/* Release the JSON held by c and empty it.  Safe on a zeroed or already freed config. */
void sbx_image_config_free(sbx_image_config *c);

typedef struct sbx_extract_opts {
    /* Owner u (and group g) in the archive becomes uid_base + u (uid_base + g) on the host; ids >= 65536 (or
     * negative) become uid_base + 65534, the sandbox's nobody.  Directories created for missing parents belong
     * to uid_base (the sandbox's root).  0 is refused: it would give files to host root. */
    uid_t uid_base;
    /* Refuse (error, EFBIG) once the regular-file bytes written would exceed this; 0 = no limit.  A file counts
     * with its full length (a sparse file with its holes), and a file that a later layer replaces counts
     * twice.  sbx_image_import also bounds the unpacked outer archive by the same number. */
    uint64_t max_bytes;
    /* Apply OCI/AUFS whiteouts (dir/.wh.NAME removes dir/NAME, dir/.wh..wh..opq empties dir) to what is already
     * in the destination instead of writing them as files.  dir is resolved like any path, symlinks followed
     * inside the destination (as docker and containerd apply layers); NAME itself is never followed. */
    bool whiteouts;
} sbx_extract_opts;

/* Extract one tar archive (ustar, pax or GNU; uncompressed or compressed with anything libarchive reads:
 * gzip, zstd, xz, bzip2...) into the directory dest_fd, which acts as "/" for every path, symlink and hard
 * link in it.  dest_fd may be an O_PATH descriptor.
 *
 * With o->whiteouts the archive is read twice: all whiteouts first, then every other entry, so a layer's
 * whiteouts only ever remove what lower layers left, whatever the order of the tar.
 *
 * Regular files, directories, symlinks, hard links and FIFOs are created; character and block devices and
 * sockets are skipped.  An existing entry of another type at a path is removed first (a directory
 * recursively, without following symlinks); an existing directory stays when the entry is a directory and
 * gets its mode, owner and times.  Permission bits keep setuid, setgid and sticky; mtimes are kept (a
 * directory's once the pass is over); extended attributes, ACLs and file flags are not copied.  A hard link
 * shares its target's inode, owner and mode; a target that is missing (or was skipped) or a directory is an
 * error.
 *
 * Returns 0, or -1 with err naming the archive and the entry.  On failure dest holds whatever was extracted
 * so far: the caller throws it away. */
int sbx_tar_extract(const char *tar_path, int dest_fd, const sbx_extract_opts *o, sbx_error *err);

/* Import an image archive into the existing, empty directory `dest`.  The archive is one of:
 *  - an OCI image layout archive (`skopeo copy ... oci-archive:`, `docker save` of Docker >= 25): oci-layout
 *    and index.json.  The index's manifest is used; when it lists several (or points at an image index), the
 *    one for linux and this machine's architecture (amd64 on x86-64), or the only one;
 *  - a classic `docker save` archive: manifest.json, [{"Config": ..., "Layers": [...]}], with one image;
 *  - anything else: a plain root file system tarball, extracted as one layer (whiteouts as o->whiteouts says).
 *
 * dest becomes 0755 and owned by uid_base (the image's "/" belongs to its root) unless the archive says
 * otherwise in a "./" entry.  The outer archive is unpacked into a temporary directory next to dest
 * (".<name>.import-XXXXXX", removed on success and on failure; its size is bounded by o->max_bytes too).  Every
 * blob's sha256 is checked before it is used: OCI blobs against their digest, a classic archive's config
 * against its file name, its layers against the config's rootfs.diff_ids (a Docker >= 25 blobs/sha256/<hex>
 * path against <hex>).  Then the layers are applied bottom
 * to top with sbx_tar_extract's rules, whiteouts always on, with one o->max_bytes budget for all of them.
 *
 * cfg (may be NULL) receives the image config; free it with sbx_image_config_free().  It is emptied on
 * failure.  Returns 0, or -1 with err naming the layer (digest or path) and the entry; dest then holds a
 * partial tree the caller removes. */
int sbx_image_import(const char *archive_path, const char *dest, const sbx_extract_opts *o, sbx_image_config *cfg,
                     sbx_error *err);

#endif
