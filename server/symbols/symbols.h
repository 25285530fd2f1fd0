/* SPDX-License-Identifier: Apache-2.0 */
/* The Build-ID symbol repository's HTTP side: which files the server lacks, chunked and
 * resumable uploads, per-Build-ID info, and the debuginfod-compatible read side. */
#ifndef SYSOM_SERVER_SYMBOLS_SYMBOLS_H
#define SYSOM_SERVER_SYMBOLS_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/membudget.h"
#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/metrics/metrics.h"
#include "server/symbols/symbolize.h"

struct symrepo;

#define SYMBOLS_PREFIX "/api/v1/symbols/"
#define SYMBOLS_MISSING_PATH "/api/v1/symbols/missing"
#define DEBUGINFOD_PREFIX "/buildid/"

#define SYMBOLS_DEFAULT_MAX_FILE (4ULL << 30)    /* whole file (Content-Range TOTAL) */
#define SYMBOLS_DEFAULT_MAX_CHUNK (64u << 20)    /* one chunk: the PUT route's body limit */
#define SYMBOLS_DEFAULT_MAX_SESSIONS 64          /* partial uploads at once */
#define SYMBOLS_DEFAULT_RESERVE_FILES 4          /* default reserve: this many largest files */
#define SYMBOLS_DEFAULT_UPLOAD_EXPIRY_S (24.0 * 3600) /* idle partial uploads are deleted */
#define SYMBOLS_MAX_MISSING_OBJECTS 4096         /* objects in one "missing" query */
#define SYMBOLS_MISSING_MAX_BODY (1u << 20)      /* body of a "missing" query */
#define SYMBOLS_UPLOAD_ID_MIN 16                 /* X-Sysom-Upload-Id: hex digits */
#define SYMBOLS_UPLOAD_ID_MAX 64

struct symbols_options {
	const char *dir;          /* the repository root (partial uploads go to <dir>/uploads) */
	uint64_t max_file_size;   /* 0: SYMBOLS_DEFAULT_MAX_FILE */
	uint32_t max_sessions;    /* 0: SYMBOLS_DEFAULT_MAX_SESSIONS */
	/* Total bytes the partial uploads may reserve (their declared sizes); at least
	 * max_file_size; 0: SYMBOLS_DEFAULT_RESERVE_FILES x max_file_size. */
	uint64_t max_reserved_bytes;
	double upload_expiry_s;   /* 0: SYMBOLS_DEFAULT_UPLOAD_EXPIRY_S */
	bool debuginfod_auth;     /* /buildid/... requires the bearer token too */
	/*
	 * The server's decode memory budget (borrowed; NULL: nothing is reserved). A chunk's PUT
	 * holds its body and the hashing buffer while it writes, and the installation of a
	 * complete file holds an estimate of what building its symbol file allocates (the file's
	 * size, at most a quarter of the budget): 503 with Retry-After when the budget stays
	 * full, 413 when a chunk needs more than all of it.
	 */
	struct membudget *memory_budget;
};

struct symbols;

/*
 * Creates the handlers' context over borrowed objects that must outlive it: `repo` (open),
 * `auth`, `sym` (optional: told to forget a Build ID's cached frames when a file for it is
 * installed) and `metrics`. Creates <dir>/uploads and takes over the partial uploads found
 * there (their sizes are the resume points, and what they reserve until their next chunk).
 * Returns 0 or -errno with `err` saying why (-EINVAL: max_reserved_bytes below max_file_size).
 */
int symbols_new(struct symrepo *repo, struct auth *auth, struct symbolizer *sym,
		struct server_metrics *metrics, const struct symbols_options *opts,
		struct symbols **out, char *err, size_t errlen);

/* Frees it; accepts NULL. No handler may be running. */
void symbols_free(struct symbols *s);

/*
 * Has `fn` told (without blocking) when an uploaded ELF executable has neither DWARF nor a
 * debug file, e.g. to ask upstream debuginfod servers for the debug file. Call before the
 * handlers run.
 */
void symbols_want_debuginfo_set(struct symbols *s, symbolizer_missing_fn fn, void *ctx);

/*
 * POST /api/v1/symbols/missing (ctx: struct symbols): body {"objects":[{"build_id":HEX,
 * "kind":"elf"|"file-hash"},...]} → 200 {"missing":[{"build_id","executable","debuginfo"}]}
 * listing the objects that lack a file; 400 malformed, 413 over SYMBOLS_MAX_MISSING_OBJECTS.
 */
void symbols_missing_post(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * PUT /api/v1/symbols/{hex}/{executable|debuginfo}: one chunk (Content-Range, X-Sysom-Upload-Id,
 * X-Sysom-Content-Hash, X-Sysom-Identity). 200 present, 201 stored, 202 partial, 409 with
 * resume_at, 413, 422 (hash or identity mismatch: the partial file is deleted), 503 too many
 * sessions or reserved bytes, 507 not enough free disk for the declared size; see
 * docs/http-api.md.
 */
void symbols_put(void *ctx, const struct http_request *req, struct http_response *resp);

/* GET /api/v1/symbols/{hex}: what the repository holds for the Build ID, or 404. */
void symbols_get(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * GET/HEAD /buildid/{hex}/{executable|debuginfo} (debuginfod protocol): the file as a
 * streamed body with X-DEBUGINFOD-SIZE and Last-Modified; debuginfo is the debug file, or
 * the executable when it has DWARF itself; 404 otherwise (also for /source/ and /section/).
 * Without the token unless created with debuginfod_auth.
 */
void symbols_debuginfod_get(void *ctx, const struct http_request *req,
			    struct http_response *resp);

/* What a sweep did. */
struct symbols_sweep_stats {
	uint32_t removed;  /* partial uploads idle longer than the expiry, deleted */
	uint32_t kept;     /* partial uploads still alive */
};

/* Deletes partial uploads idle for longer than the expiry. Thread-safe. 0 or -errno. */
int symbols_sweep(struct symbols *s, struct symbols_sweep_stats *stats);

/*
 * Build IDs the repository holds (any file kind), counted by walking it at most once a
 * minute. Thread-safe. 0 or -errno.
 */
int symbols_build_ids_count(struct symbols *s, uint64_t *count);

/* Partial upload sessions now (gauge). Thread-safe. */
uint32_t symbols_sessions_count(struct symbols *s);

/* Bytes the partial uploads reserve now (gauge; see max_reserved_bytes). Thread-safe. */
uint64_t symbols_reserved_bytes(struct symbols *s);

/*
 * Whether the installed executable of `id` carries DWARF (.debug_info), checked once per
 * Build ID and remembered. False when there is no executable. Thread-safe.
 */
bool symbols_executable_has_dwarf(struct symbols *s, const struct sysom_build_id *id);

#endif
