/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading ClickHouse answers in TabSeparated format: rows end with \n, fields are separated by
 * \t, and inside a field \b \f \r \n \t \0 \' \\ are escapes, \N alone is NULL. ClickHouse also
 * escapes other bytes as \xHH in some versions: accepted. Anything else is -EPROTO: the reader
 * never trusts the answer's shape (the fuzz target tests/fuzz/fuzz_clickhouse_tsv.c feeds it
 * arbitrary bytes).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "server/store/clickhouse_internal.h"

void ch_tsv_init(struct ch_tsv *t, char *data, size_t len)
{
	t->p = data;
	t->end = data ? data + len : data;
	t->rows = 0;
}

/* Unescapes the field at [start, end) in place; NUL-terminates it at its new end. */
static int field_end(char *start, char *end, char **out)
{
	char *w = start;

	if (end - start == 2 && start[0] == '\\' && start[1] == 'N') {
		*out = NULL;
		return 0;
	}
	for (char *r = start; r < end; r++) {
		if (*r != '\\') {
			*w++ = *r;
			continue;
		}
		if (++r == end)
			return -EPROTO;
		switch (*r) {
		case 'b': *w++ = '\b'; break;
		case 'f': *w++ = '\f'; break;
		case 'r': *w++ = '\r'; break;
		case 'n': *w++ = '\n'; break;
		case 't': *w++ = '\t'; break;
		case '0': *w++ = '\0'; break;
		case '\'': *w++ = '\''; break;
		case '\\': *w++ = '\\'; break;
		case 'x': {
			int hi, lo;

			if (end - r < 3 || (hi = sysom_hex_digit(r[1])) < 0 ||
			    (lo = sysom_hex_digit(r[2])) < 0)
				return -EPROTO;
			*w++ = (char)(hi << 4 | lo);
			r += 2;
			break;
		}
		default:
			return -EPROTO;
		}
	}
	*w = '\0';
	*out = start;
	return 0;
}

int ch_tsv_row(struct ch_tsv *t, char **fields, unsigned nfields)
{
	char *nl, *start;
	unsigned n = 0;
	int rc;

	if (nfields == 0 || nfields > CH_MAX_FIELDS)
		return -EINVAL;
	if (!t->p || t->p >= t->end)
		return 0;
	nl = memchr(t->p, '\n', (size_t)(t->end - t->p));
	if (!nl)
		return -EPROTO; /* every row ends with a newline: a cut answer */
	start = t->p;
	for (char *c = t->p; c <= nl; c++) {
		if (*c != '\t' && c != nl)
			continue;
		if (n == nfields)
			return -EPROTO;
		if ((rc = field_end(start, c, &fields[n])))
			return rc;
		n++;
		start = c + 1;
	}
	if (n != nfields)
		return -EPROTO;
	t->p = nl + 1;
	t->rows++;
	return 1;
}

bool ch_tsv_blank(struct ch_tsv *t)
{
	if (!t->p || t->p >= t->end || *t->p != '\n')
		return false;
	t->p++;
	return true;
}

int ch_tsv_u64(const char *f, uint64_t *out)
{
	uint64_t v = 0;

	if (!f || !*f)
		return -EPROTO;
	for (const char *p = f; *p; p++) {
		if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -EPROTO;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*out = v;
	return 0;
}

int ch_tsv_u32(const char *f, uint32_t *out)
{
	uint64_t v;

	if (ch_tsv_u64(f, &v) || v > UINT32_MAX)
		return -EPROTO;
	*out = (uint32_t)v;
	return 0;
}

int ch_tsv_i64(const char *f, int64_t *out)
{
	bool neg = f && *f == '-';
	uint64_t v;

	if (!f || ch_tsv_u64(f + neg, &v))
		return -EPROTO;
	if (v > (uint64_t)INT64_MAX + neg)
		return -EPROTO;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

int ch_tsv_hex(const char *f, uint8_t *out, size_t max, size_t *len)
{
	size_t n;

	if (!f)
		return -EPROTO;
	n = strlen(f);
	if (n % 2 || n / 2 > max)
		return -EPROTO;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = sysom_hex_digit(f[2 * i]), lo = sysom_hex_digit(f[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EPROTO;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	*len = n / 2;
	return 0;
}
