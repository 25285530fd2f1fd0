/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: run the chain_workload fixture and know where its functions are. */
#ifndef SYSOM_TESTS_SUPPORT_WORKLOAD_H
#define SYSOM_TESTS_SUPPORT_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define WORKLOAD_MAX_FUNCTIONS 16

struct workload_function {
	char name[64];
	uint64_t start, end; /* runtime addresses [start, end) */
};

struct workload {
	pid_t pid;
	int stdout_fd;
	struct workload_function functions[WORKLOAD_MAX_FUNCTIONS];
	int function_count;
};

/*
 * Starts `$SYSOM_BUILD/tests/fixtures/chain_workload SECONDS ARGS...` (ARGS a NULL-terminated
 * list), waits for its "ready" banner, and fills in the runtime ranges of its functions
 * (start from the banner, size from `nm -S`). Returns 0 or -errno.
 */
int workload_start(struct workload *w, double seconds, const char *const *args);

/*
 * Starts `BINARY SECONDS ARGS...` (ARGS NULL-terminated) with its stdout on w->stdout_fd,
 * without reading anything. 0 or -errno.
 */
int workload_spawn(struct workload *w, const char *binary, double seconds,
		   const char *const *args);

/* Waits for the workload to exit; returns its exit status or -errno. */
int workload_wait(struct workload *w);

/* Kills it (if running) and reaps it. */
void workload_stop(struct workload *w);

/* Index of the function containing `addr`, or -1. */
int workload_function_at(const struct workload *w, uint64_t addr);

/* Index of function `name`, or -1. */
int workload_function_index(const struct workload *w, const char *name);

/* CPU time (user + system) consumed so far by the workload, in seconds; < 0 on error. */
double workload_cpu_seconds(const struct workload *w);

/* Reads one line (without its newline) from fd with a timeout; its length or -errno. */
int workload_read_line(int fd, char *buf, size_t size, int timeout_ms);

/* Path of a fixture binary under $SYSOM_BUILD (static storage). */
const char *fixture_path(const char *name);

#endif
