/* userns.c - see userns.h. */
#define _GNU_SOURCE
#include "userns.h"
#include "cleanup.h"
#include "fsutil.h"
#include "parse.h"
#include "spec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbx_userns_write_maps(pid_t pid, uid_t base, sbx_error *err)
{
    char path[64], map[64];
    snprintf(map, sizeof map, "0 %u %u\n", (unsigned) base, (unsigned) SBX_UID_COUNT);
    static const char *const files[] = { "uid_map", "gid_map" };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, files[i]);
        int r = sbx_write_file(path, map);
        if (r < 0)
            return sbx_error_set(err, -r, "write %s", path);
    }
    return 0;
}

int sbx_userns_uid_base(uid_t *out, sbx_error *err)
{
    const char *env = getenv("SBX_UID_BASE");
    uint64_t v = SBX_DEFAULT_UID_BASE;
    if (env && *env) {
        if (sbx_parse_uint(env, UINT32_MAX - SBX_UID_COUNT, &v, err) < 0)
            return sbx_error_wrap(err, "SBX_UID_BASE");
    } else {
        _cleanup_fclose_ FILE *f = fopen("/etc/subuid", "re");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            unsigned long start, count;
            if (sscanf(line, "sbx:%lu:%lu", &start, &count) == 2 && count >= SBX_UID_COUNT) {
                v = start;
                break;
            }
        }
    }
    if (v == 0)
        return sbx_error_set(err, 0, "uid base 0 would map sandbox root to host root; refusing");
    *out = (uid_t) v;
    return 0;
}
