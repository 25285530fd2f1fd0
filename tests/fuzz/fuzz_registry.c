/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: one registration-socket record (header + REGISTER payload) → job identity. */
// fuzz-sources: agent/ranks/registry.c
#include <stdlib.h>
#include <string.h>

#include "agent/ranks/registry.h"

static void check_text(const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	if (n >= size)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			abort(); /* control characters are replaced (UTF-8 bytes are kept) */
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct sysom_frame_header h;
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	int32_t pid;
	int hrc, rc;

	/* A copy of exactly `size` bytes: ASan catches any read past the record. */
	unsigned char *msg = malloc(size ? size : 1);
	if (!msg)
		return 0;
	memcpy(msg, data, size);
	hrc = registry_decode_header(msg, size, &h);
	if (hrc == 0 && (h.length != size - REGISTRY_HEADER_SIZE || size > REGISTRY_MAX_MESSAGE))
		abort();
	rc = registry_decode_register(msg, size, &id, groups, sizeof(groups), &pid);
	if (hrc && rc != hrc)
		abort(); /* header errors come first */
	if (rc == 0) {
		if (h.type != REGISTRY_MSG_REGISTER)
			abort();
		check_text(id.job_id, sizeof(id.job_id));
		check_text(groups, sizeof(groups));
		if (id.has_rank && (id.rank < 0 || id.world_size <= 0 || id.rank >= id.world_size))
			abort();
		if (id.local_rank >= 0 && id.local_world_size > 0 &&
		    id.local_rank >= id.local_world_size)
			abort();
		if (pid == 0 || pid < -1)
			abort();
	}
	free(msg);
	return 0;
}
