/* SPDX-License-Identifier: Apache-2.0 */
/* A bounded set of object identities: 128-bit keys in an open-addressing table. */
#ifndef SYSOM_AGENT_SYMBOLS_IDSET_H
#define SYSOM_AGENT_SYMBOLS_IDSET_H

#include <stdbool.h>
#include <stdint.h>

#include "common/elf_buildid.h"

/* An identity's key: XXH3-128 of (kind, bytes); (0, 0) marks an empty slot and is never a key. */
struct idkey {
	uint64_t hi, lo;
};

/* Linear probing with backward-shift delete; never more than half full. */
struct idset {
	struct idkey *slots;
	uint32_t cap;   /* power of two, at least 2 * max */
	uint32_t count;
	uint32_t max;   /* idset_add refuses beyond */
};

/* The key of identity `id`. */
struct idkey idset_key(const struct sysom_build_id *id);

/* Whether slot `k` is empty (iterating `slots` directly). */
static inline bool idset_key_empty(const struct idkey *k)
{
	return !k->hi && !k->lo;
}

/* An empty set that holds up to `max` keys (fewer when that exceeds 2^29). 0 or -ENOMEM. */
int idset_init(struct idset *s, uint32_t max);

/* Frees the table and zeroes `s` (safe on a zeroed or already freed set). */
void idset_free(struct idset *s);

/* Whether `k` is in the set. */
bool idset_has(const struct idset *s, struct idkey k);

/* Adds `k`: 1 added, 0 already there, -ENOSPC when the set holds `max` keys. */
int idset_add(struct idset *s, struct idkey k);

/* Removes `k` if present. */
void idset_remove(struct idset *s, struct idkey k);

/* Removes every key. */
void idset_clear(struct idset *s);

#endif
