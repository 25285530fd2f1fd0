/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the kernel symbol upload parser, with its invariants checked on success
 * and its allocations (ASan's hooks) within ksyms_parse_memory. */
// fuzz-sources: server/symbols/ksyms.c tests/support/heap_peak.c
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/symbols/ksyms.h"
#include "tests/support/heap_peak.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ksyms_limits limits = { .max_lines = 10000 };
	struct ksyms_table t = { 0 };
	struct ksyms_error err;
	uint64_t bound = ksyms_parse_memory((const char *)data, size, &limits);
	int rc;

	heap_peak_begin();
	rc = ksyms_table_parse((const char *)data, size, &limits, &t, &err);
	if (heap_peak_end() > bound + 1024)
		abort(); /* allocated more than ksyms_parse_memory announced */
	if (rc != 0) {
		if (rc != -SYSOM_ECORRUPT && rc != -SYSOM_ELIMIT && rc != -ENOMEM)
			abort();
		if (!err.message[0] || t.syms || t.text)
			abort(); /* a failure says why and leaves the output untouched */
		return 0;
	}
	if (t.count == 0)
		abort();
	for (size_t i = 0; i < t.count; i++) {
		const struct store_ksym *s = &t.syms[i];
		size_t len = strlen(s->name);

		if (s->offset > INT64_MAX || (i && s->offset <= t.syms[i - 1].offset))
			abort(); /* sorted, unique, storable */
		if (len == 0 || len > KSYMS_NAME_MAX || strpbrk(s->name, " \t\n"))
			abort();
		if (!((s->type >= 'a' && s->type <= 'z') || (s->type >= 'A' && s->type <= 'Z')))
			abort();
	}
	ksyms_table_free(&t);
	return 0;
}
