/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host signals (wire 1.6 HOST_SIGNALS): the node-level signals Reveal (seed 003) scores that this
 * kernel exposes without hardware counters, read from /proc and /sys once per batch window:
 * CPU frequency (cpufreq, absent in most VMs), CPU time shares and context switches
 * (/proc/stat), network softirqs (/proc/softirqs), pressure stall information
 * (/proc/pressure/{cpu,memory,io}), TCP retransmits and errors (/proc/net/snmp, netstat),
 * device drops and errors (/proc/net/dev), disk IOPS and mean latency (/proc/diskstats),
 * available memory (/proc/meminfo) and major faults (/proc/vmstat).
 *
 * Counters become per-second rates (or shares of the window) against the previous collect; a
 * file that is missing or malformed, the first collect of a counter, or a counter that went
 * backwards leaves its signals unknown (never 0). Every file is read into one bounded buffer
 * (HOSTSIG_FILE_MAX bytes; a longer file is parsed as far as it was read).
 */
#ifndef SYSOM_AGENT_OS_HOSTSIG_H
#define SYSOM_AGENT_OS_HOSTSIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/wire/wire.h"

#define HOSTSIG_FILE_MAX (1u << 20) /* bytes of one file read */
#define HOSTSIG_MAX_CPUS 8192       /* cpufreq files read at most */

struct hostsig;

struct hostsig_options {
	const char *proc_root; /* "/proc" (tests: a fixture tree) */
	const char *sys_root;  /* "/sys" */
};

/* One window's signals: value[s] is meaningful only where known[s]. */
struct hostsig_window {
	double value[SYSOM_HOST_SIGNAL_MAX + 1];
	bool known[SYSOM_HOST_SIGNAL_MAX + 1];
	uint32_t nknown;
	uint32_t files_missing; /* files absent or unreadable in this collect */
	uint32_t parse_errors;  /* files present but not in the expected format */
};

/* 0, -ENOMEM or -EINVAL (a root longer than PATH_MAX / 2). */
int hostsig_open(const struct hostsig_options *o, struct hostsig **out);
/* Accepts NULL. */
void hostsig_close(struct hostsig *h);

/*
 * Reads every source now; `now_ns` is a monotonic time, rates are over the time since the
 * previous collect (the first collect gives only levels: frequency, PSI averages, memory,
 * blocked tasks). Never fails: what cannot be read is unknown and counted in `out`.
 */
void hostsig_collect(struct hostsig *h, uint64_t now_ns, struct hostsig_window *out);

#endif
