/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One window of GPU kernel executions folded per (kernel name, device, stream): count, total,
 * min, max and a duration histogram (the GPU_KERNEL entry of docs/channel-records.md). Pure
 * and bounded: at most KT_MAX_KEYS keys and KT_NAME_BYTES of names per window; executions of a
 * key that does not fit are dropped and counted. Not thread-safe (the caller locks).
 */
#ifndef SYSOM_PLUGINS_CUPTI_KERNEL_TABLE_H
#define SYSOM_PLUGINS_CUPTI_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "include/sysom/records.h"

#define KT_MAX_KEYS 4096
#define KT_NAME_MAX 1023          /* longer names are cut (as the channel requires) */
#define KT_NAME_BYTES (1u << 20)  /* name storage per window */

struct kernel_key {
	uint64_t hash;
	uint32_t name_off;        /* into names; UINT32_MAX: slot unused */
	uint32_t device;
	uint64_t stream;
	struct sysom_rec_kernel r; /* r.name unused here */
};

struct kernel_table {
	struct kernel_key keys[KT_MAX_KEYS];
	uint32_t nkeys;
	char names[KT_NAME_BYTES];
	uint32_t names_len;
	uint64_t folded;           /* executions folded this window */
	uint64_t dropped;          /* executions dropped this window (table or names full) */
};

/* Empties the table (also the initial state; the struct is large: allocate it). */
void kernel_table_reset(struct kernel_table *t);

/* Folds one execution [start, end] (ns; end < start counts as 0 ns). Returns 0, or -ENOSPC
 * when it was dropped (counted in t->dropped), -EINVAL for a NULL or empty name (dropped). */
int kernel_table_add(struct kernel_table *t, const char *name, uint32_t device, uint64_t stream,
		     uint64_t start_ns, uint64_t end_ns);

/* Calls `fn` for every key (entry with r.name = 0; the name passed separately). */
void kernel_table_foreach(const struct kernel_table *t,
			  void (*fn)(void *arg, const struct sysom_rec_kernel *e, const char *name),
			  void *arg);

#endif
