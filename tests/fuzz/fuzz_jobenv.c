/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a process environment block (as /proc/<pid>/environ) → job identity. */
// fuzz-sources: agent/ranks/jobenv.c
#include <stdlib.h>
#include <string.h>

#include "agent/ranks/jobenv.h"

static void check_text(const char *s)
{
	size_t n = strnlen(s, JOBENV_VALUE_MAX);

	if (n >= JOBENV_VALUE_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			abort(); /* control characters are replaced (UTF-8 bytes are kept) */
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct job_identity j;

	/* A copy of exactly `size` bytes: ASan catches any read past the block. */
	char *block = malloc(size ? size : 1);
	if (!block)
		return 0;
	memcpy(block, data, size);
	if (jobenv_parse(block, size, &j) != 0)
		abort();
	check_text(j.job_id);
	check_text(j.master_addr);
	if (j.has_rank && (j.rank < 0 || j.world_size <= 0 || j.rank >= j.world_size))
		abort();
	if (j.master_port < -1 || j.master_port > 65535)
		abort();
	free(block);
	return 0;
}
