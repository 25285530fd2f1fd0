/* SPDX-License-Identifier: Apache-2.0 */
/* Parser of uploaded kernel symbol tables ("OFFSET_HEX TYPE NAME" lines); no I/O, no storage. */
#ifndef SYSOM_SERVER_SYMBOLS_KSYMS_H
#define SYSOM_SERVER_SYMBOLS_KSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "server/store/store.h"

#define KSYMS_NAME_MAX 512
#define KSYMS_DEFAULT_MAX_LINES 4000000

/*
 * Upload format (docs/http-api.md): one symbol per line, "OFFSET_HEX TYPE NAME", fields
 * separated by spaces or tabs. OFFSET_HEX: 1..16 hex digits, relative to the kernel's _text
 * (or the module's base), below 2^63. TYPE: one kallsyms type letter. NAME: 1..512 bytes, no
 * spaces or control characters. Empty lines are ignored. Several symbols at one offset keep
 * one: T before t before W before w before other types, then the smallest name.
 */
struct ksyms_limits {
	size_t max_lines; /* lines, empty ones included (0: KSYMS_DEFAULT_MAX_LINES) */
};

/* A parsed table: sorted by offset, offsets unique. */
struct ksyms_table {
	struct store_ksym *syms; /* names point into `text` */
	size_t count;
	char *text;              /* owned copy of the input with names NUL-terminated */
};

/* Where parsing failed. */
struct ksyms_error {
	size_t line;        /* 1-based line number; 0 when the failure is not about one line */
	char message[160];  /* "line 7: offset \"xyz\" is not hexadecimal" */
};

/*
 * Parses `len` bytes of upload text into *out (free it with ksyms_table_free). Returns 0,
 * -SYSOM_ECORRUPT for a malformed line or a table without symbols, -SYSOM_ELIMIT beyond
 * max_lines, or -ENOMEM; on failure `err` (optional) says where and why and *out is untouched.
 */
int ksyms_table_parse(const char *text, size_t len, const struct ksyms_limits *limits,
		      struct ksyms_table *out, struct ksyms_error *err);

/*
 * The most heap memory ksyms_table_parse allocates at once for this input (the text's copy,
 * the symbol array and the sort's scratch space), whether it then succeeds or fails; one pass
 * over the text. For reserving memory before parsing untrusted input.
 */
uint64_t ksyms_parse_memory(const char *text, size_t len, const struct ksyms_limits *limits);

/* Frees what a table owns; accepts NULL. */
void ksyms_table_free(struct ksyms_table *t);

#endif
