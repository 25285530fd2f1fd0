/* SPDX-License-Identifier: Apache-2.0 */
/* Two folded profiles side by side (server/query/folded.h). */
#include "server/query/folded.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"


struct diff_line {
	char *text;
	size_t len;
	uint64_t count[2];
};

struct diff_lines {
	struct diff_line *lines;
	size_t n, cap;
	struct hash_index index;
};

struct diff_match {
	const struct diff_line *lines;
	const char *text;
	size_t len;
};

static bool diff_line_eq(const void *ctx, uint32_t idx)
{
	const struct diff_match *m = ctx;
	const struct diff_line *l = &m->lines[idx];

	return l->len == m->len && memcmp(l->text, m->text, m->len) == 0;
}

/* Adds every "stack count" line of folded text to side `side`. */
static int diff_lines_add(struct diff_lines *d, const struct byte_buf *folded, int side)
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
		struct diff_match m = { d->lines, p, len };
		uint32_t found = hash_index_find(&d->index, h, diff_line_eq, &m);
		int rc;

		if (found == HASH_INDEX_NONE) {
			if (d->n == d->cap) {
				size_t cap = d->cap ? d->cap * 2 : 1024;
				struct diff_line *grown = realloc(d->lines, cap * sizeof(*grown));
				if (!grown)
					return -ENOMEM;
				d->lines = grown;
				d->cap = cap;
			}
			struct diff_line *l = &d->lines[d->n];
			if (!(l->text = malloc(len + 1)))
				return -ENOMEM;
			memcpy(l->text, p, len);
			l->text[len] = '\0';
			l->len = len;
			l->count[0] = l->count[1] = 0;
			if ((rc = hash_index_insert(&d->index, h, (uint32_t)d->n)))
				return rc;
			found = (uint32_t)d->n++;
		}
		d->lines[found].count[side] += count;
		p = nl + 1;
	}
	return 0;
}

static int diff_line_compare(const void *a, const void *b)
{
	const struct diff_line *x = a, *y = b;

	return strcmp(x->text, y->text);
}

static void diff_lines_free(struct diff_lines *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->lines[i].text);
	free(d->lines);
	hash_index_free(&d->index);
}


int folded_merge(const struct byte_buf *a, const struct byte_buf *b, struct byte_buf *out)
{
	const struct byte_buf *sides[2] = { a, b };
	struct diff_lines d = { 0 };
	int rc;

	if ((rc = hash_index_init(&d.index, 1024)))
		goto cleanup;
	for (int side = 0; side < 2; side++)
		if ((rc = diff_lines_add(&d, sides[side], side)))
			goto cleanup;
	if (d.n > 1)
		qsort(d.lines, d.n, sizeof(*d.lines), diff_line_compare);
	for (size_t i = 0; i < d.n; i++)
		byte_buf_printf(out, "%s %" PRIu64 " %" PRIu64 "\n", d.lines[i].text,
				d.lines[i].count[0], d.lines[i].count[1]);
	rc = byte_buf_error(out);
cleanup:
	diff_lines_free(&d);
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
