/* cleanup.h - scope-bound cleanup helpers, in the style of bubblewrap and crun.
 *
 * A variable declared with one of these attributes is released when it goes
 * out of scope, on every return path.  Set it to NULL / -1 (or use the
 * steal_* helpers) to hand ownership elsewhere. */
#ifndef SBX_CLEANUP_H
#define SBX_CLEANUP_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dirent.h>
#include <errno.h>

static inline void sbx_freep(void *p)
{
    free(*(void **) p);
}

static inline void sbx_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno; /* close() must not clobber the errno we report */
        close(*fd);
        errno = saved;
    }
}

static inline void sbx_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

static inline void sbx_closedirp(DIR **d)
{
    if (*d)
        closedir(*d);
}

#define _cleanup_free_ __attribute__((cleanup(sbx_freep)))
#define _cleanup_close_ __attribute__((cleanup(sbx_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(sbx_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(sbx_closedirp)))

static inline int steal_fd(int *fd)
{
    int r = *fd;
    *fd = -1;
    return r;
}

static inline void *steal_pointer(void *pp)
{
    void **p = pp;
    void *r = *p;
    *p = NULL;
    return r;
}

#endif
