/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: peak heap measurement through the sanitizer allocator's hooks. */
#include "tests/support/heap_peak.h"

#include <stdatomic.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#if defined(__SANITIZE_ADDRESS__)
#define HEAP_PEAK_ASAN 1
#elif __has_feature(address_sanitizer)
#define HEAP_PEAK_ASAN 1
#endif
#endif

#ifdef HEAP_PEAK_ASAN
/* From <sanitizer/allocator_interface.h>, which gcc does not ship. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
					      void (*free_hook)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

static atomic_bool installed;
static atomic_int_least64_t current, peak; /* relative to the start of the measurement */

static void on_malloc(const volatile void *p, size_t size)
{
	int_least64_t now = atomic_fetch_add(&current, (int_least64_t)size) + (int_least64_t)size;
	int_least64_t seen = atomic_load(&peak);

	(void)p;
	while (now > seen && !atomic_compare_exchange_weak(&peak, &seen, now))
		;
}

static void on_free(const volatile void *p)
{
	if (p)
		atomic_fetch_sub(&current, (int_least64_t)__sanitizer_get_allocated_size(p));
}

bool heap_peak_available(void)
{
	return true;
}

void heap_peak_begin(void)
{
	if (!atomic_exchange(&installed, true))
		__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
	atomic_store(&current, 0);
	atomic_store(&peak, 0);
}

uint64_t heap_peak_end(void)
{
	int_least64_t p = atomic_load(&peak);

	return p > 0 ? (uint64_t)p : 0;
}
#else
bool heap_peak_available(void)
{
	return false;
}

void heap_peak_begin(void)
{
}

uint64_t heap_peak_end(void)
{
	return 0;
}
#endif
