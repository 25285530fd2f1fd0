/* SPDX-License-Identifier: Apache-2.0 */
/* Backend-neutral pieces of storing a batch: hex ids, counter JSON, object keys, stack ids. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/hash.h"
#include "server/store/store_impl.h"

void store__hex(const uint8_t *bytes, size_t len, char *out, size_t outlen)
{
	struct sysom_build_id id = { .len = (uint8_t)len };

	memcpy(id.bytes, bytes, len);
	sysom_build_id_hex(&id, out, outlen);
}

char *store__counters_json(const struct sysom_batch *b)
{
	json_t *obj = json_object();
	char *text = NULL;

	if (!obj)
		return NULL;
	for (uint32_t i = 0; i < b->counter_count; i++) {
		const char *name = sysom_counter_name(b->counters[i].id);
		uint64_t v = b->counters[i].value;
		char fallback[32];

		if (!name) {
			snprintf(fallback, sizeof(fallback), "counter_%u", b->counters[i].id);
			name = fallback;
		}
		if (json_object_set_new(obj, name, json_integer(v > INT64_MAX ? INT64_MAX
										: (json_int_t)v)))
			goto cleanup;
	}
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
cleanup:
	json_decref(obj);
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
