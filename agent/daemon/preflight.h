/* SPDX-License-Identifier: Apache-2.0 */
/* `sysom-agent --check`: each prerequisite checked for real, with a clear verdict. */
#ifndef SYSOM_AGENT_DAEMON_PREFLIGHT_H
#define SYSOM_AGENT_DAEMON_PREFLIGHT_H

#include <stdio.h>

#include "agent/daemon/config.h"

/* Prints one line per check to `out`; returns the number of failed checks. */
int agent_preflight_run(const struct agent_config *cfg, FILE *out);

#endif
