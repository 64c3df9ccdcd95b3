/* error.h - error objects (crun's libcrun_error_t style).
 *
 * A function that can fail returns < 0 and fills *err.  Callers may add
 * context with sbx_error_wrap() while the error travels up; the top level
 * prints it once with sbx_error_print(). */
#ifndef SBX_ERROR_H
#define SBX_ERROR_H

#include <stdio.h>

typedef struct sbx_error {
    int errno_;    /* 0 when the error is not a system call failure */
    char msg[512]; /* what failed, on what; context prepended by callers */
} sbx_error;

/* Fill err from a printf format; appends strerror(errnum) when errnum != 0.
 * Always returns -1 so callers can `return sbx_error_set(...)`. */
int sbx_error_set(sbx_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "context: " to an already filled error.  Returns -1. */
int sbx_error_wrap(sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void sbx_error_print(const sbx_error *err, FILE *out);

#endif
