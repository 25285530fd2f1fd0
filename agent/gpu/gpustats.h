/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Folds the telemetry records of in-process components (NCCL profiler plugin, CUPTI library)
 * into the open batch: GPU kernel time, NCCL operation profiles and links, component counters.
 * Fed by the registration socket (agent/ranks/registry.h on_record / on_conn_close); keeps per
 * connection the component's identity, its communicators and its last cumulative counters.
 */
#ifndef SYSOM_AGENT_GPU_GPUSTATS_H
#define SYSOM_AGENT_GPU_GPUSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "agent/ship/batcher.h"
#include "common/report.h"

#define GPUSTATS_MAX_COMMS 256 /* communicators per connection; more are refused */

struct gpustats_options {
	struct batcher *batcher;
	/* The process's current incarnation (the sampler's exec generation); may be NULL (0). */
	uint32_t (*generation_of)(void *ctx, uint32_t tgid);
	void *ctx;
	/* Messages for the log (components connected): the daemon logs them. */
	struct sysom_reporter report;
};

struct gpustats_stats {
	uint64_t records;       /* accepted */
	uint64_t rejected;      /* malformed, or naming a communicator never announced */
	uint64_t kernels, profiles, links; /* rows folded */
	uint64_t components;    /* connections that said HELLO */
};

struct gpustats;

int gpustats_new(const struct gpustats_options *o, struct gpustats **out);
void gpustats_free(struct gpustats *g);

/* One record (the registry's on_record contract: 0, -ENOSYS for types it does not handle,
 * another -errno for a rejected record). `*state` is the connection's state. */
int gpustats_record(struct gpustats *g, uint32_t tgid, void **state, uint16_t type,
		    const uint8_t *payload, size_t len);

/* The connection closed: frees its state. */
void gpustats_conn_closed(struct gpustats *g, void *state);

void gpustats_stats_read(const struct gpustats *g, struct gpustats_stats *out);

#endif
