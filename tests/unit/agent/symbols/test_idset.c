/* SPDX-License-Identifier: Apache-2.0 */
/* agent/symbols/idset: add, find, remove (backward shift) and the bound. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/symbols/idset.h"

static struct sysom_build_id make_id(uint32_t i, uint8_t kind)
{
	struct sysom_build_id id = { .kind = kind, .len = 20 };

	memcpy(id.bytes, &i, sizeof(i));
	return id;
}

static void test_many(void **state)
{
	struct idset s;

	(void)state;
	assert_int_equal(idset_init(&s, 1000), 0);
	for (uint32_t i = 0; i < 1000; i++) {
		struct sysom_build_id id = make_id(i, SYSOM_OBJECT_ELF);
		assert_int_equal(idset_add(&s, idset_key(&id)), 1);
	}
	assert_int_equal(s.count, 1000);
	/* Full: a new key is refused, a known one is still "already there". */
	struct sysom_build_id extra = make_id(5000, SYSOM_OBJECT_ELF);
	struct sysom_build_id known = make_id(7, SYSOM_OBJECT_ELF);
	assert_int_equal(idset_add(&s, idset_key(&extra)), -ENOSPC);
	assert_int_equal(idset_add(&s, idset_key(&known)), 0);
	/* The same bytes as another kind are another identity. */
	struct sysom_build_id other_kind = make_id(7, SYSOM_OBJECT_FILE_HASH);
	assert_false(idset_has(&s, idset_key(&other_kind)));
	/* Removing every other key keeps the rest findable (backward-shift delete). */
	for (uint32_t i = 0; i < 1000; i += 2) {
		struct sysom_build_id id = make_id(i, SYSOM_OBJECT_ELF);
		idset_remove(&s, idset_key(&id));
	}
	assert_int_equal(s.count, 500);
	for (uint32_t i = 0; i < 1000; i++) {
		struct sysom_build_id id = make_id(i, SYSOM_OBJECT_ELF);
		assert_int_equal(idset_has(&s, idset_key(&id)), i % 2 == 1);
	}
	idset_remove(&s, idset_key(&extra)); /* absent: nothing happens */
	assert_int_equal(s.count, 500);
	idset_clear(&s);
	assert_int_equal(s.count, 0);
	assert_false(idset_has(&s, idset_key(&known)));
	idset_free(&s);
	idset_free(&s); /* twice is harmless */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
