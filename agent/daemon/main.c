/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-agent: configuration, --check, then the daemon. */
#include <stdio.h>
#include <stdlib.h>

#include "agent/daemon/config.h"
#include "agent/daemon/daemon.h"
#include "agent/daemon/preflight.h"
#include "common/error.h"
#include "common/log.h"

int main(int argc, char *argv[])
{
	struct agent_config cfg;
	enum sysom_log_level level;
	char err[512] = "";
	int status;

	sysom_log_setup("sysom-agent", SYSOM_LOG_INFO);
	if (agent_config_defaults(&cfg)) {
		log_error("out of memory");
		return 1;
	}
	if (agent_config_load(&cfg, argc, argv, err, sizeof(err)) ||
	    agent_config_validate(&cfg, err, sizeof(err))) {
		fprintf(stderr, "sysom-agent: %s\n", err);
		status = 2;
		goto cleanup;
	}
	if (cfg.help) {
		agent_config_print_help(stdout);
		status = 0;
		goto cleanup;
	}
	if (cfg.version) {
		printf("sysom-agent %s\n", SYSOM_VERSION);
		status = 0;
		goto cleanup;
	}
	if (sysom_log_level_parse(cfg.log_level, &level)) {
		fprintf(stderr, "sysom-agent: --log-level: '%s' is not error, warn, info or debug\n",
			cfg.log_level);
		status = 2;
		goto cleanup;
	}
	sysom_log_setup("sysom-agent", level);
	if (cfg.check) {
		status = agent_preflight_run(&cfg, stdout) ? 1 : 0;
		goto cleanup;
	}
	status = agent_daemon_run(&cfg, argc, argv);
cleanup:
	agent_config_free(&cfg);
	return status;
}
