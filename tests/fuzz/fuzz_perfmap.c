/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: perf map text (/tmp/perf-PID.map) through perfmap_parse, then lookups. */
// fuzz-sources: agent/symbols/perfmap.c agent/node/host.c
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/symbols/perfmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perfmap_table t;
	const char *name;
	uint64_t start;

	if (perfmap_parse((const char *)data, size, &t))
		return 0; /* -ENOMEM */
	/* Sorted by start, names terminated inside the name buffer and cut at the limit, no
	 * function empty or past the address space. */
	for (size_t i = 0; i < t.count; i++) {
		const struct perfmap_entry *e = &t.entries[i];
		if (e->size == 0 || e->start + e->size < e->start || e->name >= t.names_len)
			abort();
		size_t n = strnlen(t.names + e->name, t.names_len - e->name);
		if (n == t.names_len - e->name || n == 0 || n > PERFMAP_NAME_MAX)
			abort();
		if (i && t.entries[i - 1].start > e->start)
			abort();
	}
	if (t.count > PERFMAP_MAX_ENTRIES)
		abort();
	/* Every function's first and last byte are found, in a function that contains them. */
	for (size_t i = 0; i < t.count && i < 64; i++) {
		const struct perfmap_entry *e = &t.entries[i];
		uint64_t probe[2] = { e->start, e->start + e->size - 1 };
		for (int k = 0; k < 2; k++) {
			if (!perfmap_table_find(&t, probe[k], &name, &start))
				continue; /* hidden by more than the overlap scan of later starts */
			if (probe[k] < start || !*name)
				abort();
		}
	}
	(void)perfmap_table_find(&t, size ? data[0] * 0x1000ull : 0, &name, &start);
	perfmap_table_free(&t);
	return 0;
}
