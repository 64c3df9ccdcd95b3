/* spec.c - defaults for a sandbox description. */
#include "spec.h"

#include <string.h>

void sbx_spec_init(sbx_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->uid = SBX_DEFAULT_UID;
    spec->gid = SBX_DEFAULT_UID;
    spec->memory_bytes = SBX_DEFAULT_MEMORY;
    spec->millicpus = SBX_DEFAULT_MILLICPUS;
    spec->pids = SBX_DEFAULT_PIDS;
    spec->disk_bytes = SBX_DEFAULT_DISK;
    spec->shm_bytes = SBX_DEFAULT_SHM;
    spec->timeout_ms = SBX_DEFAULT_TIMEOUT_MS;
    spec->template_name = SBX_DEFAULT_TEMPLATE;
    spec->sbx_home = SBX_DEFAULT_HOME;
    spec->uid_base = SBX_DEFAULT_UID_BASE;
    spec->listen_fd = -1;
}
