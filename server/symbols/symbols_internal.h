/* SPDX-License-Identifier: Apache-2.0 */
/* State shared by the symbol upload API (symbols.c) and the debuginfod read side
 * (debuginfod.c); nothing else includes this. */
#ifndef SYSOM_SERVER_SYMBOLS_SYMBOLS_INTERNAL_H
#define SYSOM_SERVER_SYMBOLS_SYMBOLS_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "server/symbols/symbols.h"
#include "symrepo/repo.h"

/* One partial upload: <uploads>/<hex>.<kind>.<upload id>.part (its size is the resume point). */
struct symbols_session {
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];      /* lower-case */
	enum symrepo_kind kind;                    /* SYMREPO_EXECUTABLE or SYMREPO_DEBUGINFO */
	char upload_id[SYMBOLS_UPLOAD_ID_MAX + 1]; /* lower-case hex */
	bool busy;                                 /* a request is writing or verifying it */
	/* Disk promised to it: the file's declared size (Content-Range TOTAL of its latest
	 * chunk), or for one found at start its size on disk until its next chunk says more. */
	uint64_t reserved;
	uint64_t received;                         /* its size on disk, <= reserved */
};

/* Remembered answers of symbols_executable_has_dwarf (a lossy table: a collision forgets). */
struct symbols_dwarf_slot {
	bool used;
	bool has_dwarf;
	uint8_t len;
	uint8_t bytes[SYSOM_BUILD_ID_MAX];
};

#define SYMBOLS_DWARF_SLOTS 4096 /* power of two */

struct symbols {
	struct symrepo *repo;
	struct auth *auth;
	struct symbolizer *sym;
	struct server_metrics *metrics;
	struct symbols_options opts;
	symbolizer_missing_fn want_debuginfo; /* optional, see symbols_want_debuginfo_set */
	void *want_debuginfo_ctx;
	char uploads[PATH_MAX];           /* <dir>/uploads */
	pthread_mutex_t lock;             /* sessions, dwarf slots, the Build ID count */
	struct symbols_session *sessions;
	size_t nsessions, sessions_cap;
	uint64_t reserved_bytes;          /* sum of sessions[].reserved */
	uint64_t received_bytes;          /* sum of sessions[].received */
	struct symbols_dwarf_slot dwarf[SYMBOLS_DWARF_SLOTS];
	bool build_ids_valid;
	uint64_t build_ids;
	int64_t build_ids_at;             /* monotonic seconds of the last walk */
};

/* "executable" / "debuginfo" of a file kind. */
const char *symbols__kind_name(enum symrepo_kind kind);

#endif
