/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoders of the telemetry records in-process components send over the registration socket
 * (include/sysom/records.h, docs/channel-records.md). Pure functions over untrusted bytes:
 * every length, count, offset and value is checked; tests/fuzz/fuzz_channel.c fuzzes them.
 */
#ifndef SYSOM_AGENT_RANKS_CHANNEL_H
#define SYSOM_AGENT_RANKS_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/sysom/records.h"

#define CHANNEL_MAX_ENTRY_SIZE 4096  /* a table entry larger than this is rejected */
#define CHANNEL_MAX_CHANNELS 1024    /* nchannels / channel ids above this are rejected */
#define CHANNEL_MAX_STRING 1023      /* bytes of a table string (what producers cut to) */
#define CHANNEL_STAT_MAX SYSOM_STAT_CUPTI_DROPPED

struct channel_hello {
	uint16_t component;       /* enum sysom_component (any value; unknown ones are kept) */
	uint16_t interface;
	uint32_t activation_mask;
	char name[SYSOM_REC_NAME_MAX + 1]; /* control characters replaced by spaces */
};

struct channel_comm {
	uint64_t comm_id;
	int32_t rank, nranks, nnodes;
	uint32_t flags;
	char name[SYSOM_REC_NAME_MAX + 1];
};

/* A validated table; entries and strings point into the decoded payload (borrowed). */
struct channel_table {
	uint16_t type;            /* SYSOM_REC_NCCL_COLL, _NCCL_LINK or _GPU_KERNEL */
	uint16_t entry_size;
	uint32_t entry_count;
	uint64_t comm_id;
	uint64_t window_start_ns, window_end_ns;
	const uint8_t *entries;
	const char *strings;      /* strings_size bytes, the last one NUL */
	uint32_t strings_size;
};

/* Each returns 0, -SYSOM_ECORRUPT for a malformed payload or -EINVAL for a value out of
 * range; outputs are written only on success. */
int channel_decode_hello(const uint8_t *p, size_t len, struct channel_hello *out);
int channel_decode_comm(const uint8_t *p, size_t len, struct channel_comm *out);
/* Validates the table and every entry of `type` (the record's type). */
int channel_decode_table(const uint8_t *p, size_t len, uint16_t type, struct channel_table *out);
/* Cumulative counters: values[id] for ids 1..CHANNEL_STAT_MAX that are present (present[id]
 * set); unknown ids are skipped; a repeated id is -SYSOM_ECORRUPT. */
int channel_decode_stats(const uint8_t *p, size_t len, uint64_t values[CHANNEL_STAT_MAX + 1],
			 bool present[CHANNEL_STAT_MAX + 1]);

/* Entry `i` of a validated table (the fields this agent knows; later fields ignored). */
void channel_table_coll(const struct channel_table *t, uint32_t i, struct sysom_rec_coll *out);
void channel_table_link(const struct channel_table *t, uint32_t i, struct sysom_rec_link *out);
void channel_table_kernel(const struct channel_table *t, uint32_t i, struct sysom_rec_kernel *out);
/* The string at a validated offset. */
static inline const char *channel_table_string(const struct channel_table *t, uint32_t off)
{
	return t->strings + off;
}

#endif
