/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: jansson's allocations through the fault injector (class FAULT_ALLOC). */
#include <errno.h>
#include <stdlib.h>

#include <jansson.h>

#include "tests/support/fault_inject.h"

void *__real_malloc(size_t size); /* ld --wrap=malloc (fault_inject.h) */

static void *json_malloc(size_t size)
{
	if (fault_should_fail(FAULT_ALLOC, "jansson malloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_malloc(size);
}

void fault_jansson_install(void)
{
	json_set_alloc_funcs(json_malloc, free);
}
