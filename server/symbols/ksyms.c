/* SPDX-License-Identifier: Apache-2.0 */
/* Strict, bounded parser for kernel symbol uploads. */
#include "server/symbols/ksyms.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/error.h"

__attribute__((format(printf, 4, 5))) static int fail(struct ksyms_error *err, size_t line,
						       int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		int n = 0;

		err->line = line;
		if (line)
			n = snprintf(err->message, sizeof(err->message), "line %zu: ", line);
		va_start(ap, fmt);
		vsnprintf(err->message + n, sizeof(err->message) - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return code;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_letter(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Preference among symbols sharing an offset: global text first. */
static int type_rank(char type)
{
	switch (type) {
	case 'T':
		return 0;
	case 't':
		return 1;
	case 'W':
		return 2;
	case 'w':
		return 3;
	}
	return 4;
}

static int compare_syms(const void *a, const void *b)
{
	const struct store_ksym *x = a, *y = b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (type_rank(x->type) != type_rank(y->type))
		return type_rank(x->type) - type_rank(y->type);
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return (x->type > y->type) - (x->type < y->type);
}

/* Parses one non-empty line [p, end) (in the mutable copy) into *sym. */
static int parse_line(char *p, char *end, size_t lineno, struct store_ksym *sym,
		      struct ksyms_error *err)
{
	uint64_t offset = 0;
	size_t digits = 0;

	while (p < end && !is_blank(*p)) {
		int d = sysom_hex_digit(*p);
		if (d < 0)
			return fail(err, lineno, -SYSOM_ECORRUPT,
				    "offset is not hexadecimal (expected OFFSET_HEX TYPE NAME)");
		if (++digits > 16)
			return fail(err, lineno, -SYSOM_ECORRUPT, "offset has more than 16 digits");
		offset = offset << 4 | (uint64_t)d;
		p++;
	}
	if (digits == 0)
		return fail(err, lineno, -SYSOM_ECORRUPT,
			    "missing offset (expected OFFSET_HEX TYPE NAME)");
	if (offset > INT64_MAX)
		return fail(err, lineno, -SYSOM_ECORRUPT,
			    "offset 0x%llx is not below 2^63 (symbols below _text must be left out)",
			    (unsigned long long)offset);
	while (p < end && is_blank(*p))
		p++;
	if (p == end)
		return fail(err, lineno, -SYSOM_ECORRUPT, "missing type and name");
	char type = *p++;
	if (!is_letter(type))
		return fail(err, lineno, -SYSOM_ECORRUPT, "type is not a letter");
	if (p < end && !is_blank(*p))
		return fail(err, lineno, -SYSOM_ECORRUPT, "type is longer than one letter");
	while (p < end && is_blank(*p))
		p++;
	if (p == end)
		return fail(err, lineno, -SYSOM_ECORRUPT, "missing name");
	char *name = p;
	while (p < end && !is_blank(*p)) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f)
			return fail(err, lineno, -SYSOM_ECORRUPT,
				    "name contains control character 0x%02x", c);
		p++;
	}
	if (p < end)
		return fail(err, lineno, -SYSOM_ECORRUPT, "unexpected text after the name");
	if ((size_t)(p - name) > KSYMS_NAME_MAX)
		return fail(err, lineno, -SYSOM_ECORRUPT, "name longer than %d bytes",
			    KSYMS_NAME_MAX);
	*end = '\0';
	sym->offset = offset;
	sym->type = type;
	sym->name = name;
	return 0;
}

static size_t max_lines_of(const struct ksyms_limits *limits)
{
	return limits && limits->max_lines ? limits->max_lines : KSYMS_DEFAULT_MAX_LINES;
}

/* Non-empty lines among the first `max_lines`: the symbols the parser may keep. */
static size_t symbol_lines(const char *text, size_t len, size_t max_lines)
{
	const char *p = text, *end = len ? text + len : text;
	size_t lines = 0, symbols = 0;

	while (len && p < end && lines < max_lines) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end;

		lines++;
		symbols += line_end > p;
		p = nl ? nl + 1 : end;
	}
	return symbols;
}

uint64_t ksyms_parse_memory(const char *text, size_t len, const struct ksyms_limits *limits)
{
	if (len && (!text || memchr(text, '\0', len)))
		return 0; /* refused before anything is allocated */
	/* The text's copy, the symbol array and qsort's scratch copy of it (glibc's merge sort). */
	return (uint64_t)len + 1 +
	       2 * (uint64_t)symbol_lines(text, len, max_lines_of(limits)) * sizeof(struct store_ksym);
}

int ksyms_table_parse(const char *text, size_t len, const struct ksyms_limits *limits,
		      struct ksyms_table *out, struct ksyms_error *err)
{
	size_t max_lines = max_lines_of(limits);
	struct ksyms_table t = { 0 };
	size_t cap, lineno = 0, kept = 0;
	char *p, *end;
	int rc = 0;

	if (err) {
		err->line = 0;
		err->message[0] = '\0';
	}
	if (!text && len)
		return -EINVAL;
	if (memchr(text ? text : "", '\0', len)) {
		size_t at = (size_t)((const char *)memchr(text, '\0', len) - text), line = 1;
		for (size_t i = 0; i < at; i++)
			line += text[i] == '\n';
		return fail(err, line, -SYSOM_ECORRUPT, "NUL byte");
	}
	/* Sized once from a first pass, so the memory is known before parsing (no doubling). */
	cap = symbol_lines(text, len, max_lines);
	t.text = malloc(len + 1);
	if (!t.text || (cap && !(t.syms = malloc(cap * sizeof(*t.syms))))) {
		free(t.text);
		return -ENOMEM;
	}
	if (len)
		memcpy(t.text, text, len);
	t.text[len] = '\0';
	for (p = t.text, end = t.text + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *line_end = nl ? nl : end;

		if (++lineno > max_lines) {
			rc = fail(err, 0, -SYSOM_ELIMIT, "more than %zu lines", max_lines);
			goto cleanup;
		}
		if (line_end > p) {
			if ((rc = parse_line(p, line_end, lineno, &t.syms[t.count], err)))
				goto cleanup;
			t.count++;
		}
		p = nl ? nl + 1 : end;
	}
	if (t.count == 0) {
		rc = fail(err, 0, -SYSOM_ECORRUPT, "no symbols");
		goto cleanup;
	}
	qsort(t.syms, t.count, sizeof(*t.syms), compare_syms);
	for (size_t i = 0; i < t.count; i++)
		if (kept == 0 || t.syms[i].offset != t.syms[kept - 1].offset)
			t.syms[kept++] = t.syms[i];
	t.count = kept;
cleanup:
	if (rc) {
		ksyms_table_free(&t);
		return rc;
	}
	*out = t;
	return 0;
}

void ksyms_table_free(struct ksyms_table *t)
{
	if (!t)
		return;
	free(t->syms);
	free(t->text);
	t->syms = NULL;
	t->text = NULL;
	t->count = 0;
}
