/* SPDX-License-Identifier: Apache-2.0 */
/* Non-cryptographic hashing (xxHash XXH3) and a hash → index table for de-duplication. */
#ifndef SYSOM_COMMON_HASH_H
#define SYSOM_COMMON_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 64-bit XXH3 of a byte range. */
uint64_t sysom_hash64(const void *data, size_t len, uint64_t seed);

/* Mixes a 64-bit value into a running hash (for hashing structs field by field). */
static inline uint64_t sysom_hash_mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

/*
 * Open-addressing table from a 64-bit hash to a 32-bit value (usually an index into an array
 * the caller owns). Equal hashes are disambiguated by the caller's `eq` callback, so the
 * table never confuses two keys that collide.
 */
struct hash_index {
	uint64_t *hashes;
	uint32_t *values; /* UINT32_MAX marks an empty slot */
	uint32_t capacity; /* power of two */
	uint32_t count;
};

#define HASH_INDEX_NONE UINT32_MAX

typedef bool (*hash_index_eq_fn)(const void *ctx, uint32_t value);

/* Prepares an empty table sized for `expected` entries; returns 0 or -ENOMEM. */
int hash_index_init(struct hash_index *t, uint32_t expected);
/* Heap bytes hash_index_init allocates for `expected` entries (no growth up to that many). */
uint64_t hash_index_memory(uint32_t expected);
/* Returns the value stored under `hash` for which eq(ctx, value) holds, or HASH_INDEX_NONE. */
uint32_t hash_index_find(const struct hash_index *t, uint64_t hash, hash_index_eq_fn eq,
			 const void *ctx);
/* Adds (hash, value); grows as needed; returns 0, -ENOMEM or -E2BIG. */
int hash_index_insert(struct hash_index *t, uint64_t hash, uint32_t value);
/* Empties the table, keeping its memory. */
void hash_index_clear(struct hash_index *t);
/* Frees the table; accepts NULL. */
void hash_index_free(struct hash_index *t);

#endif
