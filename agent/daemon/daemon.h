/* SPDX-License-Identifier: Apache-2.0 */
/* The sysom-agent daemon: event loop over the sampler, the batcher and the uploaders. */
#ifndef SYSOM_AGENT_DAEMON_DAEMON_H
#define SYSOM_AGENT_DAEMON_DAEMON_H

#include "agent/daemon/config.h"

/*
 * Runs the agent until SIGTERM/SIGINT (or --duration): loads and attaches the sampler,
 * drains every drain interval, seals and ships a batch every batch interval, spools while
 * the server is away, reloads on SIGHUP. `config` is borrowed (SIGHUP re-reads its file
 * into a copy). Logs one line when attached. Returns the process exit status: 0 after a
 * clean shutdown, 1 when it cannot start (the reason is logged).
 */
int agent_daemon_run(struct agent_config *config, int argc, char *const argv[]);

#endif
