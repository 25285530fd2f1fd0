/* SPDX-License-Identifier: Apache-2.0 */
/* Growable arrays: room for one more element, by doubling, with overflow checks. */
#ifndef SYSOM_COMMON_ARRAY_H
#define SYSOM_COMMON_ARRAY_H

#include <errno.h>
#include <stddef.h>

/*
 * Makes `*items` (capacity `*cap` elements of `elem_size` bytes) hold at least `count + 1`:
 * when full, doubles it (`first` elements the first time), never past `max_cap`. Returns 0,
 * or -ENOMEM (allocation failed) / -EOVERFLOW (past max_cap or SIZE_MAX bytes), leaving
 * `*items` and `*cap` unchanged.
 */
int sysom_array_reserve(void **items, size_t *cap, size_t count, size_t elem_size, size_t first,
			size_t max_cap);

/*
 * sysom_array_reserve for an array named by the lvalues `items` (a typed pointer) and `cap`
 * (any unsigned integer type: its largest value bounds the capacity). Evaluates to 0 or a
 * negative errno; on success `items` and `cap` are updated.
 */
#define SYSOM_ARRAY_RESERVE(items, cap, count, first)                                          \
	__extension__({                                                                        \
		void *array_items_ = (items);                                                  \
		size_t array_cap_ = (cap);                                                     \
		int array_rc_ = sysom_array_reserve(&array_items_, &array_cap_, (count),        \
						    sizeof(*(items)), (first),                 \
						    (size_t)(__typeof__(cap))-1);              \
		if (array_rc_ == 0) {                                                          \
			(items) = array_items_;                                                \
			(cap) = (__typeof__(cap))array_cap_;                                   \
		}                                                                              \
		array_rc_;                                                                     \
	})

#endif
