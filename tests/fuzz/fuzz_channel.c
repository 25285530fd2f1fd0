/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: one component telemetry payload (first byte: record type) → decoders. */
// fuzz-sources: agent/ranks/channel.c
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ranks/channel.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void check_name(const char *s)
{
	size_t n = strnlen(s, SYSOM_REC_NAME_MAX + 1);

	if (n > SYSOM_REC_NAME_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			abort();
}

/* Every accepted entry satisfies the documented rules and its strings are readable. */
static void walk_table(const struct channel_table *t)
{
	for (uint32_t i = 0; i < t->entry_count; i++) {
		if (t->type == SYSOM_REC_NCCL_COLL) {
			struct sysom_rec_coll e;

			channel_table_coll(t, i, &e);
			if (!e.count || e.kernel_timed > e.count || e.first_seq > e.last_seq ||
			    !*channel_table_string(t, e.func))
				abort();
			(void)strlen(channel_table_string(t, e.algo));
			(void)strlen(channel_table_string(t, e.proto));
			(void)strlen(channel_table_string(t, e.datatype));
		} else if (t->type == SYSOM_REC_NCCL_LINK) {
			struct sysom_rec_link e;

			channel_table_link(t, i, &e);
			if (!e.transfers || e.peer < 0 || !isfinite(e.sxy))
				abort();
		} else {
			struct sysom_rec_kernel e;
			uint64_t sum = 0;

			channel_table_kernel(t, i, &e);
			for (unsigned b = 0; b < SYSOM_REC_HIST_BUCKETS; b++)
				sum += e.hist[b];
			if (sum != e.count || e.min_ns > e.max_ns ||
			    !*channel_table_string(t, e.name))
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	uint8_t *copy;
	uint16_t type;

	if (size < 1)
		return 0;
	type = (uint16_t)(SYSOM_REC_HELLO + data[0] % 7);
	/* A copy of exactly the payload: ASan catches any read past it. */
	copy = malloc(size - 1 ? size - 1 : 1);
	if (!copy)
		return 0;
	memcpy(copy, data + 1, size - 1);
	if (type == SYSOM_REC_HELLO) {
		struct channel_hello h;

		if (channel_decode_hello(copy, size - 1, &h) == 0)
			check_name(h.name);
	} else if (type == SYSOM_REC_NCCL_COMM) {
		struct channel_comm c;

		if (channel_decode_comm(copy, size - 1, &c) == 0) {
			check_name(c.name);
			if (c.rank < 0 || c.rank >= c.nranks || !c.comm_id)
				abort();
		}
	} else if (type == SYSOM_REC_STATS || type == SYSOM_REC_MASK) {
		uint64_t values[CHANNEL_STAT_MAX + 1];
		bool present[CHANNEL_STAT_MAX + 1];

		(void)channel_decode_stats(copy, size - 1, values, present);
	} else {
		struct channel_table t;

		if (channel_decode_table(copy, size - 1, type, &t) == 0)
			walk_table(&t);
	}
	free(copy);
	return 0;
}
