/* server.h - sbx-init's daemon mode: serve sbxd on a listening socket.
 *
 * sbxd opens a connection per request (control.h lists them); a sandbox
 * outlives any one sbxd process, so nothing here depends on a connection
 * staying up: commands keep running and their output keeps being buffered
 * (commands.h) until someone attaches again.  One poll() loop, every
 * descriptor non-blocking: no client, command or pipe can stall the others.
 * File operations go to forked workers (files.h), command starts to the
 * zygote (zygote.h). */
#ifndef SBX_INIT_SERVER_H
#define SBX_INIT_SERVER_H

/* `ctl` is the creator's control socket (STARTED {zygote pid} is sent on
 * it once ready, then it is closed); `init_fds` / `work_fds` the
 * cgroup.procs fds (-1 terminated).  Returns only on a fatal error. */
int sbx_server_run(int ctl, int listen_fd, int *init_fds, int *work_fds);

#endif
