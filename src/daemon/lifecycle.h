/* lifecycle.h - sbxd's clock: one thread that, every second, ends
 * sandboxes past their timeout ("expired") and whose sbx-init died
 * ("failed"), samples usage every 5 s, and every --health-interval seconds
 * pings each sbx-init: one that does not answer within 5 s is "unhealthy",
 * killed, and recorded with the reason. */
#ifndef SBX_DAEMON_LIFECYCLE_H
#define SBX_DAEMON_LIFECYCLE_H

#include "http.h"

int sbx_lifecycle_start(sbx_daemon *d, sbx_error *err);
void sbx_lifecycle_stop(void);

#endif
