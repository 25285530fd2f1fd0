/* SPDX-License-Identifier: Apache-2.0 */
/* A bounded set of object identities: 128-bit keys in an open-addressing table. */
#include "agent/symbols/idset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct idkey idset_key(const struct sysom_build_id *id)
{
	uint8_t buf[1 + SYSOM_BUILD_ID_MAX];
	size_t len = id->len <= SYSOM_BUILD_ID_MAX ? id->len : SYSOM_BUILD_ID_MAX;

	buf[0] = id->kind;
	memcpy(buf + 1, id->bytes, len);
	XXH128_hash_t h = XXH3_128bits(buf, 1 + len);
	struct idkey k = { h.high64, h.low64 };
	if (!k.hi && !k.lo)
		k.lo = 1;
	return k;
}

int idset_init(struct idset *s, uint32_t max)
{
	uint32_t cap = 16;

	while (cap < 2u * max && cap < (1u << 30))
		cap <<= 1;
	s->slots = calloc(cap, sizeof(*s->slots));
	if (!s->slots)
		return -ENOMEM;
	s->cap = cap;
	s->count = 0;
	s->max = max < cap / 2 ? max : cap / 2;
	return 0;
}

void idset_free(struct idset *s)
{
	free(s->slots);
	memset(s, 0, sizeof(*s));
}

/* The slot holding `k`, or the empty slot where it would go. */
static uint32_t idset_slot(const struct idset *s, struct idkey k)
{
	uint32_t mask = s->cap - 1;
	uint32_t i = (uint32_t)k.lo & mask;

	while (!idset_key_empty(&s->slots[i]) && (s->slots[i].hi != k.hi || s->slots[i].lo != k.lo))
		i = (i + 1) & mask;
	return i;
}

bool idset_has(const struct idset *s, struct idkey k)
{
	return !idset_key_empty(&s->slots[idset_slot(s, k)]);
}

int idset_add(struct idset *s, struct idkey k)
{
	uint32_t i = idset_slot(s, k);

	if (!idset_key_empty(&s->slots[i]))
		return 0;
	if (s->count >= s->max)
		return -ENOSPC;
	s->slots[i] = k;
	s->count++;
	return 1;
}

void idset_remove(struct idset *s, struct idkey k)
{
	uint32_t mask = s->cap - 1;
	uint32_t i = idset_slot(s, k), j = i;

	if (idset_key_empty(&s->slots[i]))
		return;
	/* Backward shift: move later entries of the probe run into the hole when their home
	 * slot does not lie cyclically in (i, j]. */
	for (;;) {
		j = (j + 1) & mask;
		if (idset_key_empty(&s->slots[j]))
			break;
		uint32_t home = (uint32_t)s->slots[j].lo & mask;
		bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
		if (stays)
			continue;
		s->slots[i] = s->slots[j];
		i = j;
	}
	s->slots[i] = (struct idkey){ 0, 0 };
	s->count--;
}

void idset_clear(struct idset *s)
{
	memset(s->slots, 0, (size_t)s->cap * sizeof(*s->slots));
	s->count = 0;
}
