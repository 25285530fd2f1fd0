/* SPDX-License-Identifier: Apache-2.0 */
/* Two folded profiles side by side (server/query/folded.h). */
#include "server/query/folded.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"


struct diff_match {
	const struct folded_stack *stacks;
	const char *text;
	size_t len;
};

static bool stack_eq(const void *ctx, uint32_t idx)
{
	const struct diff_match *m = ctx;
	const struct folded_stack *l = &m->stacks[idx];

	return l->len == m->len && memcmp(l->stack, m->text, m->len) == 0;
}

/* Appends a stack (a copy of `len` bytes) with its counts. */
static int stack_append(struct folded_diff *d, const char *text, size_t len, uint64_t a, uint64_t b)
{
	struct folded_stack *l;

	if (SYSOM_ARRAY_RESERVE(d->stacks, d->cap, d->n, 1024))
		return -ENOMEM;
	l = &d->stacks[d->n];
	if (!(l->stack = malloc(len + 1)))
		return -ENOMEM;
	memcpy(l->stack, text, len);
	l->stack[len] = '\0';
	l->len = len;
	l->count[0] = a;
	l->count[1] = b;
	d->n++;
	d->total[0] += a;
	d->total[1] += b;
	return 0;
}

/* Adds every "stack count" line of folded text to side `side`. */
static int diff_add(struct folded_diff *d, struct hash_index *index, const struct byte_buf *folded,
		    int side)
{
	const char *p = (const char *)folded->data, *end = p + folded->len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp;
		size_t len;

		if (!nl)
			nl = end;
		for (sp = nl; sp > p && sp[-1] != ' '; sp--)
			;
		if (sp <= p + 1) {
			p = nl + 1;
			continue;
		}
		len = (size_t)(sp - 1 - p);
		uint64_t count = strtoull(sp, NULL, 10), h = sysom_hash64(p, len, 0);
		struct diff_match m = { d->stacks, p, len };
		uint32_t found = hash_index_find(index, h, stack_eq, &m);
		int rc;

		if (found == HASH_INDEX_NONE) {
			if ((rc = stack_append(d, p, len, 0, 0)) ||
			    (rc = hash_index_insert(index, h, (uint32_t)(d->n - 1))))
				return rc;
			found = (uint32_t)(d->n - 1);
		}
		d->stacks[found].count[side] += count;
		d->total[side] += count;
		p = nl + 1;
	}
	return 0;
}

static int stack_compare(const void *a, const void *b)
{
	const struct folded_stack *x = a, *y = b;

	return strcmp(x->stack, y->stack);
}

void folded_diff_free(struct folded_diff *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->stacks[i].stack);
	free(d->stacks);
	memset(d, 0, sizeof(*d));
}

int folded_diff_build(const struct byte_buf *a, const struct byte_buf *b, struct folded_diff *out)
{
	const struct byte_buf *sides[2] = { a, b };
	struct hash_index index = { 0 };
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = hash_index_init(&index, 1024)))
		goto cleanup;
	for (int side = 0; side < 2; side++)
		if ((rc = diff_add(out, &index, sides[side], side)))
			goto cleanup;
	if (out->n > 1)
		qsort(out->stacks, out->n, sizeof(*out->stacks), stack_compare);
cleanup:
	hash_index_free(&index);
	return rc;
}

int folded_diff_parse(const char *text, size_t len, struct folded_diff *out)
{
	const char *p = text, *end = text + len;
	int rc;

	memset(out, 0, sizeof(*out));
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp1, *sp2;
		char counts[128];
		unsigned long long c[2];

		if (!nl)
			nl = end;
		/* "stack a b": the last two space-separated fields are the counts. */
		for (sp2 = nl; sp2 > p && sp2[-1] != ' '; sp2--)
			;
		for (sp1 = sp2 - 1; sp1 > p && sp1[-1] != ' '; sp1--)
			;
		if (sp2 <= p + 1 || sp1 <= p + 1 || (size_t)(nl - sp1) >= sizeof(counts))
			return -EINVAL;
		memcpy(counts, sp1, (size_t)(nl - sp1));
		counts[nl - sp1] = '\0';
		if (sscanf(counts, "%llu %llu", &c[0], &c[1]) != 2)
			return -EINVAL;
		if ((rc = stack_append(out, p, (size_t)(sp1 - 1 - p), c[0], c[1])))
			return rc;
		p = nl + 1;
	}
	return 0;
}

int folded_diff_render(const struct folded_diff *d, struct byte_buf *out)
{
	for (size_t i = 0; i < d->n; i++)
		byte_buf_printf(out, "%s %" PRIu64 " %" PRIu64 "\n", d->stacks[i].stack,
				d->stacks[i].count[0], d->stacks[i].count[1]);
	return byte_buf_error(out);
}

int folded_merge(const struct byte_buf *a, const struct byte_buf *b, struct byte_buf *out)
{
	struct folded_diff d;
	int rc;

	if (!(rc = folded_diff_build(a, b, &d)))
		rc = folded_diff_render(&d, out);
	folded_diff_free(&d);
	return rc;
}

uint64_t folded_samples(const struct byte_buf *b)
{
	const char *p = (const char *)b->data, *end = p + b->len;
	uint64_t total = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp;
		uint64_t count = 0;

		if (!nl)
			nl = end;
		for (sp = nl; sp > p && sp[-1] != ' '; sp--)
			;
		for (const char *d = sp; sp > p && d < nl && *d >= '0' && *d <= '9'; d++)
			count = count * 10 + (uint64_t)(*d - '0');
		total += count;
		p = nl + 1;
	}
	return total;
}
