/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: arbitrary bytes through the spool file header decoder; re-encode round trip. */
// fuzz-sources: agent/ship/spool.c
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agent/ship/spool.h"
#include "common/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct spool_header h;
	uint8_t again[SPOOL_HEADER_SIZE];
	size_t where = SIZE_MAX;
	int r = spool_header_decode(data, size, &h, &where);

	if (r < 0) {
		/* Only the documented errors, located inside the input. */
		if (r != -SYSOM_ECORRUPT && r != -SYSOM_EVERSION && r != -SYSOM_ELIMIT)
			__builtin_trap();
		if (where > size || where >= SPOOL_HEADER_MAX)
			__builtin_trap();
		return 0;
	}
	/* Accepted: every documented bound holds. */
	if (r < SPOOL_HEADER_SIZE || r > SPOOL_HEADER_MAX || (size_t)r > size ||
	    r != h.header_size || h.version != SPOOL_VERSION || h.sequence == 0 ||
	    h.body_len > SPOOL_MAX_BODY)
		__builtin_trap();
	/* A standard-size header re-encodes to the same bytes. */
	if (r == SPOOL_HEADER_SIZE) {
		spool_header_encode(&h, again);
		if (memcmp(again, data, SPOOL_HEADER_SIZE) != 0)
			__builtin_trap();
	}
	return 0;
}
