/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-agent: configuration, --check, then the daemon. */
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/libbpf.h>

#include "agent/daemon/config.h"
#include "agent/daemon/daemon.h"
#include "agent/daemon/preflight.h"
#include "agent/gpu/nvml.h"
#include "common/error.h"
#include "common/log.h"

/* libbpf's warnings, into the agent's log (the errors it returns say the rest); with
 * SYSOM_LIBBPF_DEBUG=1 everything it prints, the verifier log included, raw to stderr. */
static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list args)
{
	static int debug = -1;
	char msg[1024];
	int n;

	if (debug < 0)
		debug = getenv("SYSOM_LIBBPF_DEBUG") != NULL;
	if (debug)
		return vfprintf(stderr, fmt, args);
	if (level != LIBBPF_WARN)
		return 0;
	n = vsnprintf(msg, sizeof(msg), fmt, args);
	if (n < 0)
		return n;
	for (size_t len = strlen(msg); len && msg[len - 1] == '\n'; len--)
		msg[len - 1] = '\0';
	log_warn("libbpf: %s", msg);
	return n;
}

/* Allocations of at least this many bytes are mmap()ed and returned to the kernel on free. */
#define AGENT_MMAP_THRESHOLD (1 << 20)

int main(int argc, char *argv[])
{
	struct agent_config cfg;
	enum sysom_log_level level;
	char err[512] = "";
	int status;

	sysom_log_setup("sysom-agent", SYSOM_LOG_INFO);
	/*
	 * Large buffers (symbol upload chunks of 8 MiB, batch encodings, CFI tables) get an mmap
	 * of their own, returned on free. glibc's default raises the threshold to the last freed
	 * size (up to 32 MiB), after which such buffers land in arenas that keep their pages: the
	 * always-on agent's RSS then stepped up by tens of MiB after each burst of uploads.
	 */
	mallopt(M_MMAP_THRESHOLD, AGENT_MMAP_THRESHOLD);
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
	libbpf_set_print(libbpf_log);
	if (cfg.check) {
		status = agent_preflight_run(&cfg, stdout) ? 1 : 0;
		goto cleanup;
	}
	if (cfg.probe_nvml) {
		struct nvml_options no = { .library = cfg.nvml_library, .kmsg = cfg.nvml_kmsg };

		status = nvml_probe(&no, 3, 1000, stdout) ? 1 : 0;
		goto cleanup;
	}
	status = agent_daemon_run(&cfg, argc, argv);
cleanup:
	agent_config_free(&cfg);
	return status;
}
