// fuzz-sources: symrepo/symfile.c
/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: symbol files from memory → open, verify, lookups and offset translation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/error.h"
#include "symrepo/symfile.h"

#define MAX_FRAMES 8
#define MAX_PROBES 512 /* addresses derived from the input */

/* Reads every byte of a returned string: ASan reports any that lies outside the input. */
static size_t touch(const char *s)
{
	return s ? strlen(s) : 0;
}

static void probe(const struct symfile *f, uint64_t addr, int verified)
{
	struct symfile_frame frames[MAX_FRAMES];
	uint64_t vaddr;
	size_t sum = 0;
	int n;

	n = symfile_lookup(f, addr, frames, MAX_FRAMES);
	if (n < 0 && n != -SYSOM_ECORRUPT)
		abort();
	/* A file symfile_verify accepted never fails a lookup. */
	if (n < 0 && verified)
		abort();
	if (n > MAX_FRAMES)
		abort();
	for (int k = 0; k < n; k++) {
		if (!frames[k].name)
			abort();
		sum += touch(frames[k].name) + touch(frames[k].demangled) + touch(frames[k].file);
		if (!frames[k].file && frames[k].line)
			abort();
	}
	if (symfile_lookup(f, addr, frames, 1) > 1)
		abort();
	if (symfile_offset_to_vaddr(f, addr, &vaddr) == 0)
		sum += (size_t)symfile_lookup(f, vaddr, frames, MAX_FRAMES);
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct symfile_error err;
	struct symfile_info info;
	struct symfile *f = NULL;
	int verified;

	if (symfile_open_memory(data, size, &f, &err) != 0)
		return 0;
	symfile_info_get(f, &info);
	if (info.file_bytes != size)
		abort();
	verified = symfile_verify(f, &err) == 0;
	/* Every aligned u64 of the input is a candidate address (range starts, line rows,
	 * segment offsets all appear there), with its neighbours. */
	for (size_t i = 0, n = 0; i + 8 <= size && n < MAX_PROBES; i += 8, n++) {
		uint64_t a = load_le64(data + i);
		probe(f, a, verified);
		probe(f, a - 1, verified);
		probe(f, a + 1, verified);
	}
	probe(f, 0, verified);
	probe(f, UINT64_MAX, verified);
	symfile_close(f);
	return 0;
}
