/* SPDX-License-Identifier: Apache-2.0 */
/* Backend-neutral pieces of storing a batch: hex ids, counter JSON, object keys, stack ids. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bytes.h"
#include "common/hash.h"
#include "server/store/store_impl.h"

void store__hex(const uint8_t *bytes, size_t len, char *out, size_t outlen)
{
	struct sysom_build_id id = { .len = (uint8_t)len };

	memcpy(id.bytes, bytes, len);
	sysom_build_id_hex(&id, out, outlen);
}

/* A counter of the batch and its place there (a repeated id: the last one wins). */
struct counter_entry {
	uint16_t id;
	uint32_t order;
	uint64_t value;
};

/* The counter's JSON key: its wire name, or "counter_<id>" for an id this build does not name. */
static const char *counter_key(uint16_t id, char fallback[16])
{
	const char *name = sysom_counter_name(id);

	if (name)
		return name;
	snprintf(fallback, 16, "counter_%u", id);
	return fallback;
}

static int counter_entry_cmp(const void *a, const void *b)
{
	const struct counter_entry *x = a, *y = b;
	char fx[16], fy[16];
	int c = strcmp(counter_key(x->id, fx), counter_key(y->id, fy));

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

/*
 * Written here rather than with jansson: json_dumps ignores a failed allocation while writing
 * an object key and returns malformed JSON as if nothing happened (akheron/jansson#655), which
 * the store would keep. The keys are the wire's counter names or "counter_<id>" ([a-z0-9_]:
 * nothing to escape), sorted, compact: what jansson's JSON_SORT_KEYS | JSON_COMPACT wrote.
 */
char *store__counters_json(const struct sysom_batch *b)
{
	struct counter_entry *list = calloc(b->counter_count + 1, sizeof(*list));
	struct byte_buf out = { 0 };
	char *text = NULL;
	bool first = true;

	if (!list)
		return NULL;
	for (uint32_t i = 0; i < b->counter_count; i++) {
		uint64_t v = b->counters[i].value;

		list[i] = (struct counter_entry){ .id = b->counters[i].id, .order = i,
						  .value = v > INT64_MAX ? INT64_MAX : v };
	}
	qsort(list, b->counter_count, sizeof(*list), counter_entry_cmp);
	byte_buf_append(&out, "{", 1);
	for (uint32_t i = 0; i < b->counter_count; i++) {
		char fallback[16];

		if (i + 1 < b->counter_count && list[i].id == list[i + 1].id)
			continue;
		byte_buf_printf(&out, "%s\"%s\":%" PRIu64, first ? "" : ",",
				counter_key(list[i].id, fallback), list[i].value);
		first = false;
	}
	byte_buf_append(&out, "}", 2); /* with the NUL */
	if (!byte_buf_error(&out))
		text = (char *)byte_buf_steal(&out, NULL);
	byte_buf_free(&out);
	free(list);
	return text;
}

bool store__object_by_build_id(uint8_t kind)
{
	return kind == SYSOM_OBJECT_ELF || kind == SYSOM_OBJECT_FILE_HASH ||
	       kind == SYSOM_OBJECT_KERNEL || kind == SYSOM_OBJECT_KMODULE;
}

uint64_t store__stack_hash(uint8_t kind, uint8_t stop_reason, const void *frames, size_t len)
{
	return sysom_hash_mix(sysom_hash64(frames, len, 0), (uint64_t)kind << 8 | stop_reason);
}

int store__ksyms_check(size_t build_id_len, const struct store_ksym *syms, size_t count)
{
	if (build_id_len == 0 || build_id_len > SYSOM_BUILD_ID_MAX)
		return -EINVAL;
	for (size_t i = 0; i < count; i++)
		if (syms[i].offset > INT64_MAX || (i && syms[i].offset <= syms[i - 1].offset))
			return -EINVAL;
	return 0;
}

int64_t store__minute_floor(int64_t ms)
{
	int64_t r = ms % STORE__MS_PER_MINUTE;

	return r < 0 ? ms - r - STORE__MS_PER_MINUTE : ms - r;
}

int64_t store__rollup_cutoff_ms(const struct store *s)
{
	struct timespec ts;

	if (s->raw_keep_ms <= 0)
		return INT64_MIN;
	clock_gettime(CLOCK_REALTIME, &ts);
	return store__minute_floor((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 -
				   s->raw_keep_ms);
}
