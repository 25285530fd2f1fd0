/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: CPython line tables (3.10 address/line pairs and the 3.11+ location
 * table) as read from a process's code objects → the line of an instruction. Input: byte 0
 * picks the layout, bytes 1–4 the instruction, the rest is the table; the decoder must never
 * read past the table and must answer every instruction the same way twice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// fuzz-sources: agent/sampling/pylinetable.c
#include "agent/sampling/pylinetable.h"
#include "bpf/pyframes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t layout, instr;
	uint8_t *table;
	size_t len;

	if (size < 5)
		return 0;
	layout = PY_LAYOUT_310 + data[0] % 4;
	memcpy(&instr, data + 1, sizeof(instr));
	len = size - 5;
	/* An exact-size copy: ASan catches a read one byte past the end. */
	table = malloc(len ? len : 1);
	if (!table)
		return 0;
	memcpy(table, data + 5, len);
	int a = py_linetable_line(layout, table, len, 7, (long long)(instr % 65536));
	int b = py_linetable_line(layout, table, len, 7, (long long)(instr % 65536));
	if (a != b || a == 0 || a < -1)
		abort();
	if (py_linetable_line(layout, table, len, 7, -1) != 7)
		abort();
	free(table);
	return 0;
}
