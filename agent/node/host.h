/* SPDX-License-Identifier: Apache-2.0 */
/* Facts about this node: identity, kernel, CPUs, boot; and small /proc and /sys readers. */
#ifndef SYSOM_AGENT_NODE_HOST_H
#define SYSOM_AGENT_NODE_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"

struct host_identity {
	uint8_t node_id[SYSOM_NODE_ID_SIZE]; /* /etc/machine-id (128-bit hex), else a hash */
	uint8_t boot_id[16];                 /* /proc/sys/kernel/random/boot_id */
	char hostname[256];
	char kernel_release[128];            /* uname -r */
	char machine[128];                   /* uname -m */
	uint64_t boot_time_realtime_ns;      /* CLOCK_REALTIME at boot (for start-time math) */
	long clock_ticks;                    /* sysconf(_SC_CLK_TCK) */
};

/* Reads the node's identity. `machine_id_path` NULL means /etc/machine-id. 0 or -errno. */
int host_identity_read(const char *machine_id_path, struct host_identity *out);

/* Parses 32 hex digits (optionally with dashes, as in boot_id) into 16 bytes; 0 or -EINVAL. */
int host_parse_uuid(const char *text, uint8_t out[16]);

/*
 * Parses a kernel CPU list ("0-3,8,10-11\n") into a bitmap of `nbits` bits (out must hold
 * (nbits + 63) / 64 words). Returns the number of CPUs set, or -EINVAL for malformed text or
 * CPUs >= nbits.
 */
int host_cpulist_parse(const char *text, uint64_t *out, uint32_t nbits);

/* Reads /sys/devices/system/cpu/online (or `path`) into a bitmap as above. */
int host_online_cpus(const char *path, uint64_t *out, uint32_t nbits);

/* Reads a small text file (≤ max bytes) into buf with a NUL; returns length or -errno. */
int host_read_text(const char *path, char *buf, size_t max);

/* Reads a whole file up to `max` bytes into a new buffer (caller frees). Length or -errno;
 * -E2BIG when the file is larger than `max`. */
long host_read_file(const char *path, size_t max, char **out);

#endif
