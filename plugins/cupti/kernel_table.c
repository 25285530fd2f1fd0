/* SPDX-License-Identifier: Apache-2.0 */
/* GPU kernel executions folded per (name, device, stream); see kernel_table.h. */
#include "plugins/cupti/kernel_table.h"

#include <errno.h>
#include <string.h>

void kernel_table_reset(struct kernel_table *t)
{
	for (uint32_t i = 0; i < KT_MAX_KEYS; i++)
		t->keys[i].name_off = UINT32_MAX;
	t->nkeys = 0;
	t->names_len = 0;
	t->folded = 0;
	t->dropped = 0;
}

static uint64_t hash_of(const char *name, size_t len, uint32_t device, uint64_t stream)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
	h ^= device * 0x9e3779b97f4a7c15ull;
	h ^= stream + 0xbf58476d1ce4e5b9ull + (h << 6) + (h >> 2);
	return h * 0x94d049bb133111ebull;
}

int kernel_table_add(struct kernel_table *t, const char *name, uint32_t device, uint64_t stream,
		     uint64_t start_ns, uint64_t end_ns)
{
	uint64_t ns = end_ns > start_ns ? end_ns - start_ns : 0;
	size_t len;
	uint64_t h;

	if (!name || !*name) {
		t->dropped++;
		return -EINVAL;
	}
	len = strnlen(name, KT_NAME_MAX);
	h = hash_of(name, len, device, stream);
	for (uint32_t probe = 0; probe < KT_MAX_KEYS; probe++) {
		struct kernel_key *k = &t->keys[(h + probe) % KT_MAX_KEYS];

		if (k->name_off == UINT32_MAX) {
			/* A new key: room for it and its name (keys stay below 7/8 full so probes
			 * stay short). */
			if (t->nkeys >= KT_MAX_KEYS / 8 * 7 || t->names_len + len + 1 > KT_NAME_BYTES) {
				t->dropped++;
				return -ENOSPC;
			}
			memcpy(t->names + t->names_len, name, len);
			t->names[t->names_len + len] = '\0';
			memset(k, 0, sizeof(*k));
			k->hash = h;
			k->name_off = t->names_len;
			k->device = device;
			k->stream = stream;
			k->r.device = device;
			k->r.stream = stream;
			k->r.min_ns = UINT64_MAX;
			t->names_len += (uint32_t)len + 1;
			t->nkeys++;
		} else if (k->hash != h || k->device != device || k->stream != stream ||
			   strncmp(t->names + k->name_off, name, len) != 0 ||
			   t->names[k->name_off + len] != '\0') {
			continue;
		}
		k->r.count++;
		k->r.total_ns += ns;
		if (ns < k->r.min_ns)
			k->r.min_ns = ns;
		if (ns > k->r.max_ns)
			k->r.max_ns = ns;
		k->r.hist[sysom_rec_hist_bucket(ns)]++;
		t->folded++;
		return 0;
	}
	t->dropped++;
	return -ENOSPC;
}

void kernel_table_foreach(const struct kernel_table *t,
			  void (*fn)(void *arg, const struct sysom_rec_kernel *e, const char *name),
			  void *arg)
{
	for (uint32_t i = 0; i < KT_MAX_KEYS; i++) {
		const struct kernel_key *k = &t->keys[i];

		if (k->name_off != UINT32_MAX)
			fn(arg, &k->r, t->names + k->name_off);
	}
}
