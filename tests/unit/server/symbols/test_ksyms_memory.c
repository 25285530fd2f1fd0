/* SPDX-License-Identifier: Apache-2.0 */
/* ksyms_parse_memory: the bound holds what the parser allocates (measured with the sanitizer's
 * hooks) on a kallsyms-like table, on the densest input, past the line limit and on malformed
 * text; the parser allocates its array once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/error.h"
#include "server/symbols/ksyms.h"
#include "tests/support/heap_peak.h"

static int check_bound(const struct byte_buf *text, size_t max_lines, const char *what)
{
	struct ksyms_limits limits = { .max_lines = max_lines };
	struct ksyms_table t = { 0 };
	struct ksyms_error err;
	uint64_t bound = ksyms_parse_memory((const char *)text->data, text->len, &limits), peak;
	int rc;

	heap_peak_begin();
	rc = ksyms_table_parse((const char *)text->data, text->len, &limits, &t, &err);
	peak = heap_peak_end();
	ksyms_table_free(&t);
	if (heap_peak_available()) {
		print_message("# %s: %zu bytes, parser peak %llu (%.2f per byte), bound %llu (%s)\n",
			      what, text->len, (unsigned long long)peak,
			      text->len ? (double)peak / (double)text->len : 0.0,
			      (unsigned long long)bound, rc ? err.message : "parsed");
		assert_true(peak <= bound);
	}
	return rc;
}

static void test_kallsyms_like(void **state)
{
	struct byte_buf text = { 0 };

	(void)state;
	for (unsigned i = 0; i < 50000; i++)
		byte_buf_printf(&text, "%016x %c some_kernel_function_name_%u\n", i * 48,
				i % 3 ? 't' : 'T', i);
	assert_int_equal(check_bound(&text, 0, "50000 kallsyms lines"), 0);
	byte_buf_free(&text);
}

static void test_densest_input(void **state)
{
	struct byte_buf text = { 0 };

	(void)state;
	/* "0 T a\n": six bytes a symbol, all at one offset (one survives the sort). */
	for (unsigned i = 0; i < 100000; i++)
		byte_buf_printf(&text, "%x T a\n", i % 16);
	assert_int_equal(check_bound(&text, 0, "100000 six-byte lines"), 0);
	byte_buf_free(&text);
}

static void test_line_limit_and_empty_lines(void **state)
{
	struct byte_buf text = { 0 };
	struct ksyms_limits limits = { .max_lines = 1000 };

	(void)state;
	for (unsigned i = 0; i < 5000; i++)
		byte_buf_printf(&text, "%x T f%u\n\n", i, i);
	/* 1000 lines, every other one empty: 500 symbols counted, then the limit. */
	assert_int_equal(ksyms_parse_memory((const char *)text.data, text.len, &limits),
			 text.len + 1 + 2 * 500 * sizeof(struct store_ksym));
	assert_int_equal(check_bound(&text, 1000, "past the line limit"), -SYSOM_ELIMIT);
	byte_buf_free(&text);
}

static void test_malformed(void **state)
{
	static const char bad[] = "0 T ok\nnot a symbol line\n1 T fine\n";
	struct byte_buf text = { .data = (uint8_t *)bad, .len = sizeof(bad) - 1 };
	static const char nul[] = "0 T a\0b\n";

	(void)state;
	assert_int_equal(check_bound(&text, 0, "a malformed line"), -SYSOM_ECORRUPT);
	assert_int_equal(ksyms_parse_memory(nul, sizeof(nul) - 1, NULL), 0); /* refused first */
	assert_int_equal(ksyms_parse_memory("", 0, NULL), 1);
	assert_int_equal(ksyms_parse_memory(NULL, 0, NULL), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kallsyms_like),
		cmocka_unit_test(test_densest_input),
		cmocka_unit_test(test_line_limit_and_empty_lines),
		cmocka_unit_test(test_malformed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
