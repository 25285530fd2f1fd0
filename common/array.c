/* SPDX-License-Identifier: Apache-2.0 */
/* Growable arrays (common/array.h). */
#include "common/array.h"

#include <stdint.h>
#include <stdlib.h>

int sysom_array_reserve(void **items, size_t *cap, size_t count, size_t elem_size, size_t first,
			size_t max_cap)
{
	size_t next;
	void *grown;

	if (count < *cap)
		return 0;
	if (*cap == 0)
		next = first ? first : 1;
	else if (*cap > SIZE_MAX / 2)
		return -EOVERFLOW;
	else
		next = *cap * 2;
	if (next > max_cap)
		next = max_cap;
	if (next <= count || (elem_size && next > SIZE_MAX / elem_size))
		return -EOVERFLOW;
	if (!(grown = realloc(*items, next * elem_size)))
		return -ENOMEM;
	*items = grown;
	*cap = next;
	return 0;
}
