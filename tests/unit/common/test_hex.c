/* SPDX-License-Identifier: Apache-2.0 */
/* common/hex: encoding, decoding (either case, all or nothing) and digit checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/hex.h"

static void test_encode(void **state)
{
	const uint8_t b[] = { 0x00, 0x01, 0xab, 0xff, 0x7e };
	char out[16];

	(void)state;
	assert_int_equal(sysom_hex_encode(b, sizeof(b), out, sizeof(out)), 10);
	assert_string_equal(out, "0001abff7e");
	/* Exactly enough room (2n + 1). */
	assert_int_equal(sysom_hex_encode(b, 2, out, 5), 4);
	assert_string_equal(out, "0001");
	/* Nothing to encode: the empty string. */
	memset(out, 'x', sizeof(out));
	assert_int_equal(sysom_hex_encode(b, 0, out, 1), 0);
	assert_string_equal(out, "");
}

static void test_encode_no_room(void **state)
{
	const uint8_t b[] = { 0x12, 0x34 };
	char out[8];

	(void)state;
	memset(out, 'x', sizeof(out));
	assert_int_equal(sysom_hex_encode(b, 2, out, 4), -ENOSPC); /* the NUL does not fit */
	assert_string_equal(out, "");
	out[0] = 'x';
	assert_int_equal(sysom_hex_encode(b, 2, out, 0), -ENOSPC); /* nothing written at all */
	assert_int_equal(out[0], 'x');
}

static void test_decode(void **state)
{
	uint8_t out[4];

	(void)state;
	assert_int_equal(sysom_hex_decode("00Ab7fFF", 8, out, sizeof(out)), 4);
	assert_memory_equal(out, "\x00\xab\x7f\xff", 4);
	/* Only `len` characters are read: the rest of the string does not matter. */
	assert_int_equal(sysom_hex_decode("beefZZ", 4, out, sizeof(out)), 2);
	assert_memory_equal(out, "\xbe\xef", 2);
	assert_int_equal(sysom_hex_decode("", 0, out, 0), 0);
}

static void test_decode_invalid(void **state)
{
	uint8_t out[8];

	(void)state;
	memset(out, 0x55, sizeof(out));
	assert_int_equal(sysom_hex_decode("abc", 3, out, sizeof(out)), -EINVAL);     /* odd */
	assert_int_equal(sysom_hex_decode("abcg", 4, out, sizeof(out)), -EINVAL);    /* not hex */
	assert_int_equal(sysom_hex_decode("ab c", 4, out, sizeof(out)), -EINVAL);    /* space */
	assert_int_equal(sysom_hex_decode("0x12", 4, out, sizeof(out)), -EINVAL);    /* prefix */
	assert_int_equal(sysom_hex_decode("-1", 2, out, sizeof(out)), -EINVAL);
	assert_int_equal(sysom_hex_decode("ab\0d", 4, out, sizeof(out)), -EINVAL);   /* NUL */
	assert_int_equal(sysom_hex_decode("\xc3\xa9", 2, out, sizeof(out)), -EINVAL); /* UTF-8 */
	assert_int_equal(sysom_hex_decode("aabbcc", 6, out, 2), -ENOSPC);
	/* Failures write nothing, even when the bad digit comes late. */
	assert_int_equal(sysom_hex_decode("aabbccdx", 8, out, sizeof(out)), -EINVAL);
	for (size_t i = 0; i < sizeof(out); i++)
		assert_int_equal(out[i], 0x55);
}

static void test_round_trip(void **state)
{
	uint8_t all[256], back[256];
	char text[513];

	(void)state;
	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	assert_int_equal(sysom_hex_encode(all, sizeof(all), text, sizeof(text)), 512);
	assert_true(sysom_hex_valid_lower(text, 512));
	assert_int_equal(sysom_hex_decode(text, 512, back, sizeof(back)), 256);
	assert_memory_equal(all, back, sizeof(all));
}

static void test_valid(void **state)
{
	(void)state;
	assert_true(sysom_hex_valid("0123456789abcdefABCDEF", 22));
	assert_false(sysom_hex_valid_lower("0123456789abcdefABCDEF", 22));
	assert_true(sysom_hex_valid_lower("0123456789abcdef", 16));
	assert_true(sysom_hex_valid("", 0));
	assert_true(sysom_hex_valid_lower("", 0));
	assert_false(sysom_hex_valid("12g4", 4));
	assert_false(sysom_hex_valid("12 4", 4));
	assert_false(sysom_hex_valid_lower("12\0" "4", 4));
	assert_true(sysom_hex_valid("12g4", 2)); /* only the first `len` characters */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode),
		cmocka_unit_test(test_encode_no_room),
		cmocka_unit_test(test_decode),
		cmocka_unit_test(test_decode_invalid),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
