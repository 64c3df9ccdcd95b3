/* spec.h - what a sandbox is made of: the description `sbx run` (and later
 * sbxd) builds, and libsbx turns into namespaces, mounts and cgroups. */
#ifndef SBX_SPEC_H
#define SBX_SPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Defaults, documented in `sbx run --help` and docs/configuration.md. */
#define SBX_DEFAULT_MEMORY (1024ULL << 20) /* 1 GiB */
#define SBX_DEFAULT_MILLICPUS 1000         /* 1 vCPU */
#define SBX_DEFAULT_PIDS 512
#define SBX_DEFAULT_DISK (512ULL << 20)    /* writable layer, 512 MiB */
#define SBX_DEFAULT_SHM (64ULL << 20)      /* /dev/shm */
#define SBX_DEFAULT_TIMEOUT_MS 0           /* none for `sbx run` */
#define SBX_DEFAULT_TEMPLATE "base"
#define SBX_DEFAULT_UID 1000
#define SBX_DEFAULT_HOME "/var/lib/sbx"

/* The sandbox's uids 0..SBX_UID_COUNT-1 map to host uids
 * uid_base..uid_base+SBX_UID_COUNT-1: sandbox root is never host root. */
#define SBX_UID_COUNT 65536
#define SBX_DEFAULT_UID_BASE 1000000000U

#define SBX_ID_LEN 32    /* hex characters */
#define SBX_SHORT_ID 12  /* shown in the hostname */

typedef struct sbx_bind {
    const char *host;
    const char *dest; /* absolute path inside the sandbox */
    bool readonly;
} sbx_bind;

typedef struct sbx_spec {
    char id[SBX_ID_LEN + 1];
    char hostname[64];

    /* the command */
    char *const *argv;
    char **env;       /* NULL-terminated, KEY=VALUE; owned by caller */
    const char *cwd;  /* NULL: the user's home */
    uid_t uid;        /* inside the sandbox */
    gid_t gid;
    const char *home; /* of uid, from the template's passwd */
    const char *user_name;

    /* limits */
    uint64_t memory_bytes;
    uint32_t millicpus;
    uint32_t pids;
    uint64_t disk_bytes;
    uint64_t shm_bytes;
    uint64_t timeout_ms; /* 0: none */

    /* file system */
    const char *template_name;
    const char *sbx_home; /* state directory: templates live under it */
    const char *layer;    /* snapshot layers over the template: host paths joined by ':', top first; NULL: none */
    sbx_bind *binds;
    size_t n_binds;

    uid_t uid_base;

    /* Daemon mode (sbxd): a listening unix socket sbx-init serves requests
     * on (its fd 4), -1 for `sbx run`.  The sandbox then outlives its
     * creator: no parent-death signal, no end on control-socket EOF.
     * sbx-init then also holds the writable layer's upper directory as fd
     * SBX_UPPER_FD, so that the host can snapshot it through
     * /proc/PID/fd/5 (nothing else reaches it after pivot_root). */
    int listen_fd;
} sbx_spec;

#define SBX_UPPER_FD 5

void sbx_spec_init(sbx_spec *spec);

#endif
