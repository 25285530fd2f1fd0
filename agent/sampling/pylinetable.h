/* SPDX-License-Identifier: Apache-2.0 */
/* CPython line tables (co_linetable) decoded without the interpreter; pure, fuzzed
 * (tests/fuzz/fuzz_py_linetable.c). */
#ifndef SYSOM_AGENT_SAMPLING_PYLINETABLE_H
#define SYSOM_AGENT_SAMPLING_PYLINETABLE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Line of instruction `instr` (code units; < 0: not started) from a code object's line table
 * (`layout`: enum py_layout). 3.10: (byte delta, signed line delta) pairs; 3.11+: the
 * location table. Returns the line (≥ 1), `firstlineno` when `instr` < 0, or -1 when the
 * table has no line for it or is malformed (a line below 1). Reads at most `len` bytes.
 */
int py_linetable_line(uint32_t layout, const uint8_t *table, size_t len, int firstlineno,
		      long long instr);

#endif
