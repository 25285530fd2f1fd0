/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Folded profiles ("frame;frame;frame count" lines, as flamegraph.pl reads them) merged side
 * by side into "stack count_a count_b" lines (difffolded's format), the input of differential
 * flame graphs and of the CPU-layer and baseline comparisons.
 */
#ifndef SYSOM_SERVER_QUERY_FOLDED_H
#define SYSOM_SERVER_QUERY_FOLDED_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

/* One stack of a two-sided profile with its sample count on each side. */
struct folded_stack {
	char *stack;        /* owned, NUL-terminated: "comm;frame;...;leaf" */
	size_t len;
	uint64_t count[2];
};

/* Two profiles side by side, typed: what the CPU-layer and baseline comparisons read. */
struct folded_diff {
	struct folded_stack *stacks;
	size_t n, cap;
	uint64_t total[2];  /* each side's sample total */
};

/*
 * The stacks present in folded profiles `a` or `b` ("stack count" lines; lines without a
 * count are skipped) with their count on each side (repeated stacks add), in byte order of
 * the stack. Free with folded_diff_free (also after an error). 0 or -ENOMEM.
 */
int folded_diff_build(const struct byte_buf *a, const struct byte_buf *b, struct folded_diff *out);

/*
 * Reads "stack count_a count_b" lines (the format of folded_diff_render, as the HTTP diff
 * endpoint serves it), one entry per line in order. 0, -EINVAL (a line without two counts)
 * or -ENOMEM; free with folded_diff_free (also after an error).
 */
int folded_diff_parse(const char *text, size_t len, struct folded_diff *out);

/* Appends "stack count_a count_b" lines, one per stack. 0 or -ENOMEM. */
int folded_diff_render(const struct folded_diff *d, struct byte_buf *out);

void folded_diff_free(struct folded_diff *d);

/* folded_diff_build, rendered: appends one line per stack present in `a` or `b`. 0 or -ENOMEM. */
int folded_merge(const struct byte_buf *a, const struct byte_buf *b, struct byte_buf *out);

/* The sum of the counts of folded "stack count" lines (a line's last field), read within the
 * buffer (it need not be NUL-terminated). */
uint64_t folded_samples(const struct byte_buf *b);

#endif
