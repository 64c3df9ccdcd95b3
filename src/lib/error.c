/* error.c - error objects; see error.h. */
#include "error.h"

#include <stdarg.h>
#include <string.h>

int sbx_error_set(sbx_error *err, int errnum, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if (errnum && (size_t) n < sizeof err->msg)
        snprintf(err->msg + n, sizeof err->msg - (size_t) n, ": %s", strerror(errnum));
    err->errno_ = errnum;
    return -1;
}

int sbx_error_wrap(sbx_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return -1;
}

void sbx_error_print(const sbx_error *err, FILE *out)
{
    fprintf(out, "sbx: %s\n", err->msg[0] ? err->msg : "unknown error");
}
