/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: the most heap memory live at once during a stretch of code, from the address
 * sanitizer's malloc and free hooks (every allocation of the process, libraries included). */
#ifndef SYSOM_TESTS_SUPPORT_HEAP_PEAK_H
#define SYSOM_TESTS_SUPPORT_HEAP_PEAK_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the build can measure (an ASan build); the other calls do nothing otherwise. */
bool heap_peak_available(void);

/* Starts a measurement: the peak is counted from the heap in use now. One at a time. */
void heap_peak_begin(void);

/* Bytes allocated beyond the level at heap_peak_begin, at the highest point since. */
uint64_t heap_peak_end(void);

#endif
