/* SPDX-License-Identifier: Apache-2.0 */
/* XXH3 wrapper and an open-addressing hash → index table. */
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t sysom_hash64(const void *data, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(data, len, seed);
}

static int table_alloc(struct hash_index *t, uint32_t capacity)
{
	t->hashes = calloc(capacity, sizeof(*t->hashes));
	t->values = malloc((size_t)capacity * sizeof(*t->values));
	if (!t->hashes || !t->values) {
		free(t->hashes);
		free(t->values);
		t->hashes = NULL;
		t->values = NULL;
		return -ENOMEM;
	}
	memset(t->values, 0xff, (size_t)capacity * sizeof(*t->values));
	t->capacity = capacity;
	t->count = 0;
	return 0;
}

/* Slots for `expected` entries: a power of two at least twice as many (load <= 1/2). */
static uint32_t capacity_for(uint32_t expected)
{
	uint32_t capacity = 16;

	while ((uint64_t)capacity < (uint64_t)expected * 2u && capacity < (1u << 30))
		capacity <<= 1;
	return capacity;
}

int hash_index_init(struct hash_index *t, uint32_t expected)
{
	memset(t, 0, sizeof(*t));
	return table_alloc(t, capacity_for(expected));
}

uint64_t hash_index_memory(uint32_t expected)
{
	return (uint64_t)capacity_for(expected) * (sizeof(uint64_t) + sizeof(uint32_t));
}

uint32_t hash_index_find(const struct hash_index *t, uint64_t hash, hash_index_eq_fn eq,
			 const void *ctx)
{
	if (!t->capacity)
		return HASH_INDEX_NONE;
	uint32_t mask = t->capacity - 1;
	for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
		uint32_t v = t->values[i];
		if (v == HASH_INDEX_NONE)
			return HASH_INDEX_NONE;
		if (t->hashes[i] == hash && (!eq || eq(ctx, v)))
			return v;
	}
}

static void place(struct hash_index *t, uint64_t hash, uint32_t value)
{
	uint32_t mask = t->capacity - 1;
	uint32_t i = (uint32_t)hash & mask;

	while (t->values[i] != HASH_INDEX_NONE)
		i = (i + 1) & mask;
	t->hashes[i] = hash;
	t->values[i] = value;
	t->count++;
}

int hash_index_insert(struct hash_index *t, uint64_t hash, uint32_t value)
{
	if (value == HASH_INDEX_NONE)
		return -EINVAL;
	if (!t->capacity) {
		int err = table_alloc(t, 16);
		if (err)
			return err;
	}
	if ((t->count + 1) * 4 > t->capacity * 3) { /* keep the load factor under 3/4 */
		if (t->capacity >= (1u << 30))
			return -E2BIG;
		struct hash_index old = *t;
		int err = table_alloc(t, old.capacity * 2);
		if (err) {
			*t = old;
			return err;
		}
		for (uint32_t i = 0; i < old.capacity; i++)
			if (old.values[i] != HASH_INDEX_NONE)
				place(t, old.hashes[i], old.values[i]);
		free(old.hashes);
		free(old.values);
	}
	place(t, hash, value);
	return 0;
}

void hash_index_clear(struct hash_index *t)
{
	if (t->values)
		memset(t->values, 0xff, (size_t)t->capacity * sizeof(*t->values));
	t->count = 0;
}

void hash_index_free(struct hash_index *t)
{
	if (!t)
		return;
	free(t->hashes);
	free(t->values);
	memset(t, 0, sizeof(*t));
}
