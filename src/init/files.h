/* files.h - file operations inside the sandbox, for sbxd.
 *
 * sbxd never opens a sandbox path from the host (DESIGN.md section 2): it
 * asks sbx-init, which forks a worker per request.  The worker takes the
 * user's credentials (uid, gid, no capabilities) and works from the user's
 * home in the sandbox's own mount namespace, so every path -- `..`,
 * absolute symlinks, a parent swapped for a symlink mid-transfer -- is
 * resolved against the sandbox's root with the user's permissions: it can
 * reach nothing the user could not reach with a shell.
 *
 * A worker serves one connection, blocking, and exits; init's event loop
 * never waits for a disk. */
#ifndef SBX_INIT_FILES_H
#define SBX_INIT_FILES_H

#include <stddef.h>
#include <stdint.h>

/* In the forked worker: serve the request already read from `fd` (type
 * and payload), then exit. */
_Noreturn void sbx_files_serve(int fd, uint32_t type, const uint8_t *payload, size_t len);

#endif
