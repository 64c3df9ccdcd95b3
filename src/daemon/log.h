/* log.h - one line per event on stderr: "TIME LEVEL key=value ...". */
#ifndef SBX_DAEMON_LOG_H
#define SBX_DAEMON_LOG_H

void sbx_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
