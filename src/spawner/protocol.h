/* protocol.h - what sbxd and sbx-spawner (src/spawner/main.c) say to each
 * other over their socketpair: one request, one reply, fixed-size records
 * (SOCK_SEQPACKET), in the order sent.
 *
 * sbx-spawner is started as
 *     sbx-spawner PPID HOME INIT_PATH UID_BASE CG_MODE BASE CTRL [BASE CTRL]...
 * with the socket as fd 3 and no other descriptor: sbxd's cgroup layout
 * (sbx_cg_host: v1/v2, per hierarchy the directory sandboxes nest under
 * and its controllers, "-" for none) travels in argv, so the spawner does
 * not detect it again and cannot disagree with sbxd about it. */
#ifndef SBX_SPAWNER_PROTOCOL_H
#define SBX_SPAWNER_PROTOCOL_H

#include <stdint.h>

#include "../lib/spec.h"

#define SBX_SPAWNER_FD 3

typedef struct sbx_spawn_req {
    char id[SBX_ID_LEN + 1];
    char template_name[65];
    char sock_path[108];
    char layer[2048]; /* snapshot layers over the template, ':'-joined, top first; "" for none */
    /* the template version to mount: its `stack` text (template.h), so the
     * spawner mounts exactly what sbxd recorded, even if the template was
     * rebuilt since; "" for none (base, hand-made: opened by name) */
    char stack[12288];
    uint64_t memory_bytes, disk_bytes;
    uint32_t millicpus, pids;
} sbx_spawn_req;

typedef struct sbx_spawn_reply {
    int32_t errno_;      /* 0: created */
    int32_t pid;         /* host pid of sbx-init */
    uint64_t start_time; /* its start time (/proc/PID/stat field 22) */
    char msg[512];
} sbx_spawn_reply;

#endif
