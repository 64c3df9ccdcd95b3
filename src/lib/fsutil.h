/* fsutil.h - small file helpers shared by the modules that talk to the
 * kernel through pseudo files (cgroupfs, procfs). */
#ifndef SBX_FSUTIL_H
#define SBX_FSUTIL_H

#include <stddef.h>
#include <sys/types.h>

/* Write the whole string to an existing file (no O_CREAT).  0 or -errno. */
int sbx_write_file(const char *path, const char *content);
/* Same, relative to a directory fd. */
int sbx_write_file_at(int dirfd, const char *name, const char *content);
/* Read up to cap-1 bytes, NUL-terminate.  Returns length or -errno. */
ssize_t sbx_read_file(const char *path, char *buf, size_t cap);
/* Read a whole (small, < 1 MiB) file into a malloc'ed NUL-terminated string. */
char *sbx_read_file_alloc(const char *path, size_t *len);

/* The start time of a process (/proc/PID/stat field 22; 0 if gone): a pid
 * alone may be reused, the pair names one process. */
unsigned long long sbx_proc_start_time(pid_t pid);
/* Create a file with content, mode, atomically replacing (via rename). */
int sbx_create_file(const char *path, const char *content, mode_t mode);
/* mkdir -p with mode; existing directories are fine. 0 or -errno. */
int sbx_mkdir_p(const char *path, mode_t mode);

#endif
