/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Folded profiles ("frame;frame;frame count" lines, as flamegraph.pl reads them) merged side
 * by side into "stack count_a count_b" lines (difffolded's format), the input of differential
 * flame graphs and of the CPU-layer and baseline comparisons.
 */
#ifndef SYSOM_SERVER_QUERY_FOLDED_H
#define SYSOM_SERVER_QUERY_FOLDED_H

#include <stdint.h>

#include "common/bytes.h"

/*
 * Appends to `out` one line per stack present in `a` or `b` with its count on each side
 * (repeated stacks add), stacks in byte order. Lines without a count are skipped. 0 or -ENOMEM.
 */
int folded_merge(const struct byte_buf *a, const struct byte_buf *b, struct byte_buf *out);

/* The sum of the counts of folded "stack count" lines (a line's last field), read within the
 * buffer (it need not be NUL-terminated). */
uint64_t folded_samples(const struct byte_buf *b);

#endif
