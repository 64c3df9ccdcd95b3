/* netdev.h - the sandbox's network namespace (--net none: loopback only). */
#ifndef SBX_NETDEV_H
#define SBX_NETDEV_H

/* Bring "lo" up in the current network namespace.  0 or -errno. */
int sbx_net_loopback_up(void);

#endif
