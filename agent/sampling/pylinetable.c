/* SPDX-License-Identifier: Apache-2.0 */
/* CPython line tables: instruction → source line (3.10 address/line pairs, 3.11+ locations). */
#include "agent/sampling/pylinetable.h"

#include <limits.h>
#include <stddef.h>

#include "bpf/pyframes.h"

static int line_310(const uint8_t *t, size_t len, int firstlineno, long long instr)
{
	long long addr = instr * 2, start, end = 0;
	int line = firstlineno;

	for (size_t i = 0; i + 1 < len; i += 2) {
		int sdelta = t[i], ldelta = (int8_t)t[i + 1];
		int l;

		start = end;
		end = start + sdelta;
		if (ldelta == -128) {
			l = -1;
		} else {
			line += ldelta;
			l = line;
		}
		if (addr >= start && addr < end)
			return l;
	}
	return -1;
}

/* 6-bit chunks, bit 6 continues (Objects/locations.md). -1 when the table ends first. */
static int read_varint(const uint8_t *t, size_t len, size_t *i, unsigned *out)
{
	unsigned val = 0, shift = 0;
	uint8_t b;

	do {
		if (*i >= len || shift > 28)
			return -1;
		b = t[(*i)++];
		val |= (unsigned)(b & 63) << shift;
		shift += 6;
	} while (b & 64);
	*out = val;
	return 0;
}

static int read_svarint(const uint8_t *t, size_t len, size_t *i, int *out)
{
	unsigned u;

	if (read_varint(t, len, i, &u))
		return -1;
	*out = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
	return 0;
}

static int line_311(const uint8_t *t, size_t len, int firstlineno, long long instr)
{
	long long addr = 0;
	long long line = firstlineno;
	size_t i = 0;

	while (i < len) {
		uint8_t first = t[i++];
		int code, delta = 0, entry_line;
		unsigned skip;
		long long length;

		if (!(first & 0x80))
			return -1; /* not at the start of an entry: malformed */
		code = (first >> 3) & 15;
		length = (first & 7) + 1;
		switch (code) {
		case 15: /* no location */
			entry_line = -1;
			break;
		case 14: /* long form: line delta, end line delta, column, end column */
			if (read_svarint(t, len, &i, &delta) || read_varint(t, len, &i, &skip) ||
			    read_varint(t, len, &i, &skip) || read_varint(t, len, &i, &skip))
				return -1;
			line += delta;
			entry_line = (int)line;
			break;
		case 13: /* no column */
			if (read_svarint(t, len, &i, &delta))
				return -1;
			line += delta;
			entry_line = (int)line;
			break;
		case 10:
		case 11:
		case 12: /* one line: delta = code - 10, then two column bytes */
			line += code - 10;
			entry_line = (int)line;
			if (i + 2 > len)
				return -1;
			i += 2;
			break;
		default: /* short form, same line, one column byte */
			entry_line = (int)line;
			if (i + 1 > len)
				return -1;
			i += 1;
			break;
		}
		if (line < INT_MIN / 2 || line > INT_MAX / 2)
			return -1;
		if (instr >= addr && instr < addr + length)
			return entry_line;
		addr += length;
	}
	return -1;
}

int py_linetable_line(uint32_t layout, const uint8_t *table, size_t len, int firstlineno,
		      long long instr)
{
	int line = -1;

	if (instr < 0)
		line = firstlineno;
	else if (instr > (1LL << 40))
		line = -1;
	else if (layout == PY_LAYOUT_310)
		line = line_310(table, len, firstlineno, instr);
	else if (layout >= PY_LAYOUT_311 && layout <= PY_LAYOUT_313)
		line = line_311(table, len, firstlineno, instr);
	return line >= 1 ? line : -1; /* lines are 1-based: anything else is a corrupted table */
}

