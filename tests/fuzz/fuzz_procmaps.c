/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: /proc/<pid>/maps lines, and whole files through procmaps_read (memfd). */
// fuzz-sources: agent/node/procmaps.c
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/node/procmaps.h"
#include "common/error.h"

static struct procmaps_entry entry;
static int memfd = -1;

static void check_entry(const struct procmaps_entry *e)
{
	if (e->start >= e->end)
		abort();
	if (strnlen(e->path, sizeof(e->path)) >= sizeof(e->path))
		abort();
}

static int count_visit(void *ctx, const struct procmaps_entry *e)
{
	check_entry(e);
	(*(uint32_t *)ctx)++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	uint32_t valid = 0, invalid = 0, visited = 0, malformed = 0;
	char path[64];

	/* The whole input as one line. */
	if (procmaps_parse_line(text, size, &entry) == 0)
		check_entry(&entry);

	/* The input as a maps file: procmaps_read must see exactly the lines a plain split
	 * sees (inputs stay far below its line-length limit). */
	for (size_t pos = 0; pos < size;) {
		const char *nl = memchr(text + pos, '\n', size - pos);
		size_t len = nl ? (size_t)(nl - (text + pos)) + 1 : size - pos;
		if (procmaps_parse_line(text + pos, len, &entry) == 0)
			valid++;
		else
			invalid++;
		pos += len;
	}
	if (size > 16384)
		return 0;
	if (memfd < 0) {
		memfd = memfd_create("fuzz_procmaps", MFD_CLOEXEC);
		if (memfd < 0)
			abort();
	}
	if (ftruncate(memfd, 0) != 0 || (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	int ret = procmaps_read(0, path, false, UINT32_MAX, count_visit, &visited, &malformed);
	if (ret < 0 || (uint32_t)ret != valid || visited != valid || malformed != invalid)
		abort();
	return 0;
}
