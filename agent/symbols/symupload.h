/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload thread: sends each new object's executable and debug file to the server once. */
#ifndef SYSOM_AGENT_SYMBOLS_SYMUPLOAD_H
#define SYSOM_AGENT_SYMBOLS_SYMUPLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"

/*
 * The server's contract (docs/http-api.md):
 *   POST /api/v1/symbols/missing {"objects":[{"build_id":HEX,"kind":"elf"|"file-hash"},...]}
 *        (at most SYMUPLOAD_QUERY_MAX objects) → 200 {"missing":[{"build_id":HEX,
 *        "executable":BOOL,"debuginfo":BOOL},...]} listing only objects lacking something.
 *   PUT /api/v1/symbols/HEX/{executable|debuginfo}, one chunk per request, with
 *        Content-Range: bytes START-END/TOTAL, X-Sysom-Upload-Id (fixed per file upload, kept
 *        across restarts), X-Sysom-Content-Hash: xxh3-128:HEX32 (whole file) and
 *        X-Sysom-Identity: elf|file-hash → 200 present (stop), 202 partial {"received":N}
 *        (next chunk), 201 stored (done), 409 {"resume_at":N} (continue from N), 401/403/408/
 *        429/5xx/network (retry with backoff, Retry-After honoured), other 4xx (give up on the
 *        object for this agent run).
 *
 * State kept in `state_dir` (both text files, '\n'-terminated lines, first line a magic and
 * version; unknown or torn lines are ignored, a torn last line is cut off when loading):
 *   symbols-uploaded  "# sysom symbols-uploaded 1", then one line per Build ID whose files
 *                     the server holds (stored by this node, or already present):
 *                     "HEX IDENTITY" (IDENTITY elf or file-hash). Append-only, fsync'ed per
 *                     batch of appends; loaded at start. More than `uploaded_max` lines: the
 *                     file is rewritten (tmp, fsync, rename) with the newest 3/4 of them.
 *   symbols-inflight  "# sysom symbols-inflight 1", then one line per file upload begun and
 *                     not finished: "HEX IDENTITY PART UPLOAD_ID CONTENT_HASH OFFSET TOTAL"
 *                     (PART executable or debuginfo; UPLOAD_ID 32 hex; CONTENT_HASH the 32 hex
 *                     of XXH3-128; OFFSET the bytes the server acknowledged). Rewritten
 *                     atomically on every change; at most SYMUPLOAD_INFLIGHT_MAX lines.
 */
#define SYMUPLOAD_MISSING_PATH "/api/v1/symbols/missing"
#define SYMUPLOAD_QUERY_MAX 4096u             /* objects per missing query (the server's limit) */
#define SYMUPLOAD_CHUNK_MIN (4u << 10)        /* smallest chunk (the daemon asks for >= 1 MiB) */
#define SYMUPLOAD_CHUNK_MAX (64u << 20)       /* the server's largest chunk */
#define SYMUPLOAD_DEFAULT_CHUNK (8u << 20)
#define SYMUPLOAD_DEFAULT_RATE (4ull << 20)   /* bytes per second */
#define SYMUPLOAD_DEFAULT_MAX_FILE (2ull << 30)
#define SYMUPLOAD_DEFAULT_QUEUE 1024u         /* offers held for the thread */
#define SYMUPLOAD_DEFAULT_SEEN 16384u         /* Build IDs remembered for de-duplication */
#define SYMUPLOAD_DEFAULT_UPLOADED 16384u     /* Build IDs kept in symbols-uploaded */
#define SYMUPLOAD_DEFAULT_QUERY_BATCH 256u    /* this many waiting objects query at once */
#define SYMUPLOAD_DEFAULT_QUERY_INTERVAL_S 5.0
#define SYMUPLOAD_DEFAULT_BACKOFF_INITIAL_S 1.0
#define SYMUPLOAD_DEFAULT_BACKOFF_MAX_S 300.0
#define SYMUPLOAD_DEFAULT_REQUEST_TIMEOUT_S 300.0
#define SYMUPLOAD_DEFAULT_CONNECT_TIMEOUT_S 10.0
#define SYMUPLOAD_WORK_MAX 4096u              /* objects known missing, waiting for upload */
#define SYMUPLOAD_FAILED_MAX 4096u            /* objects given up on in this run (forgotten
						 beyond, and then retried) */
#define SYMUPLOAD_INFLIGHT_MAX 64u            /* resumable uploads remembered */
#define SYMUPLOAD_YIELDED_MAX 8u             /* file uploads left part-way for others at once
						 (each keeps a symbols-inflight record) */
#define SYMUPLOAD_PATH_MAX 4096u              /* longest object path accepted */
#define SYMUPLOAD_MESSAGE_MAX 512u            /* event messages are truncated to this */
#define SYMUPLOAD_UPLOADED_FILE "symbols-uploaded"
#define SYMUPLOAD_INFLIGHT_FILE "symbols-inflight"

enum symupload_event_kind {
	SYMUPLOAD_EVENT_UPLOADED = 1, /* the object's missing files were sent and stored:
					 executable_bytes / debuginfo_bytes (0 when that part was
					 not needed, already present, or no debug file exists) */
	SYMUPLOAD_EVENT_PRESENT,      /* the server already had what this node could send */
	SYMUPLOAD_EVENT_RETRY,        /* a request failed (network, 401/403/408/429/5xx, bad
					 answer); retried after delay_ms */
	SYMUPLOAD_EVENT_FAILED,       /* the server refused a file for good (other 4xx) or it
					 could not be read: not retried in this run */
	SYMUPLOAD_EVENT_SKIPPED,      /* not uploaded: the file no longer has this identity, is
					 over max_file_bytes, or cannot be found (message says) */
	SYMUPLOAD_EVENT_STATE_ERROR,  /* a state file could not be read or written (error); the
					 upload goes on, a restart may query again */
};

struct symupload_event {
	enum symupload_event_kind kind;
	const char *path;          /* the object's path ("[vdso]" for the vDSO); "" for state */
	const char *build_id;      /* hex of the identity; "" for state errors */
	const char *identity;      /* "elf" or "file-hash"; "" for state errors */
	const char *debug_path;    /* debug file used (UPLOADED), or NULL */
	uint64_t executable_bytes; /* UPLOADED: bytes of the executable sent in this run */
	uint64_t debuginfo_bytes;  /* UPLOADED: bytes of the debug file sent in this run */
	int http_status;           /* the server's answer, 0 when none */
	int error;                 /* negative error code where one applies, else 0 */
	uint64_t delay_ms;         /* RETRY: wait before the next attempt */
	uint32_t attempt;          /* RETRY: consecutive failures, this one included */
	const char *message;       /* never NULL: why (transport error, server body, reason) */
};

/*
 * Event callback: called from the upload thread (or from symupload_new for state errors)
 * without locks held; every pointer is borrowed for the call. It may call symupload_stats.
 */
typedef void (*symupload_event_fn)(void *ctx, const struct symupload_event *ev);

struct symupload_options {
	const char *server_url;      /* "http(s)://host:port" (copied) */
	const char *token;           /* bearer token or NULL (copied) */
	const char *ca_file;         /* PEM bundle for https or NULL (copied) */
	const char *state_dir;       /* holds symbols-uploaded and symbols-inflight; must exist
					(copied) */
	uint64_t rate_bytes_per_s;   /* upload bandwidth (token bucket, burst one chunk);
					0: unlimited */
	uint32_t chunk_bytes;        /* bytes per PUT, SYMUPLOAD_CHUNK_MIN..SYMUPLOAD_CHUNK_MAX;
					0: SYMUPLOAD_DEFAULT_CHUNK */
	uint64_t max_file_bytes;     /* larger files are skipped; 0: SYMUPLOAD_DEFAULT_MAX_FILE */
	uint32_t queue_max;          /* offers waiting for the thread; 0: default */
	uint32_t seen_max;           /* de-duplication set (cleared when full); 0: default */
	uint32_t uploaded_max;       /* lines of symbols-uploaded (>= 16); 0: default */
	uint32_t query_batch;        /* query as soon as this many objects wait (1..4096);
					0: default */
	double query_interval_s;     /* else query objects that waited this long; 0: default */
	double backoff_initial_s;    /* 0: default */
	double backoff_max_s;        /* 0: default; also caps Retry-After */
	double request_timeout_s;    /* per request; 0: default */
	double connect_timeout_s;    /* 0: default */
	const char *debug_root;      /* NULL: "/usr/lib/debug" (copied; tests point elsewhere) */
	const char *proc_root;       /* NULL: "/proc" (copied) */
	symupload_event_fn on_event; /* optional */
	void *event_ctx;
	/* Test hooks; NULL for the real ones. now_ns: a monotonic clock in ns. sleep_ns: waits
	 * out a backoff or rate-limit delay (the real wait is a condition-variable wait that
	 * symupload_stop interrupts). random_u64: uniform 64-bit values for the jitter. */
	uint64_t (*now_ns)(void *ctx);
	void (*sleep_ns)(void *ctx, uint64_t ns);
	uint64_t (*random_u64)(void *ctx);
	void *hook_ctx;
};

struct symupload_stats {
	uint64_t queued;            /* offers accepted */
	uint64_t duplicates;        /* offers of a Build ID already seen */
	uint64_t dropped;           /* offers refused: queue full */
	uint64_t already_uploaded;  /* objects found in symbols-uploaded: not queried */
	uint64_t queries;           /* missing queries answered */
	uint64_t queried;           /* objects sent in those */
	uint64_t missing;           /* objects the server lacked a file of */
	uint64_t present;           /* objects the server already had */
	uint64_t uploaded_objects;  /* objects whose files were sent and stored */
	uint64_t uploaded_files;    /* files stored (executables and debug files) */
	uint64_t uploaded_bytes;    /* body bytes of chunks the server acknowledged */
	uint64_t failed;            /* objects given up for this run (4xx, unreadable) */
	uint64_t retries;           /* failed requests that were retried */
	uint64_t resumed;           /* uploads continued with an upload id from an earlier run */
	uint64_t yields;            /* chunks after which a file gave way to other objects */
	uint64_t skipped_too_large;
	uint64_t skipped_identity_mismatch;
	uint64_t skipped_unavailable; /* file not found (process and path gone) */
	uint64_t state_errors;      /* state file reads/writes that failed */
	uint32_t waiting;           /* objects queued, to query or to upload */
	uint32_t known_uploaded;    /* Build IDs in the uploaded set */
};

struct symupload;

/*
 * Creates the component (no thread yet): validates options, creates the HTTP client, loads
 * the state files (problems are reported as STATE_ERROR events and are not fatal). Returns 0
 * with *out set, -SYSOM_ECONFIG for bad options, or -ENOMEM.
 */
int symupload_new(const struct symupload_options *opts, struct symupload **out);

/* Starts the upload thread. 0, -EALREADY, or -errno. Offers made before are kept. */
int symupload_start(struct symupload *u);

/*
 * Offers an object seen mapped by process `pid` at [map_start, map_end) (used to reopen the
 * very file through /proc/PID/map_files): an ELF (SYSOM_OBJECT_ELF) or content-hashed file
 * (SYSOM_OBJECT_FILE_HASH) at absolute `path`, or the vDSO (path "[vdso]"). Never blocks on
 * I/O: it takes only a lock the thread holds for O(1) steps, copies `path` and queues.
 * Returns 0 (queued), 1 (this Build ID was offered before: ignored), -ENOSPC (queue full:
 * dropped and counted), -EINVAL (other kinds or paths), -ESHUTDOWN (stopped) or -ENOMEM.
 */
int symupload_offer(struct symupload *u, const struct sysom_build_id *id, const char *path,
		    uint32_t pid, uint64_t map_start, uint64_t map_end);

/*
 * Stops the thread promptly: a request in flight is aborted, a wait is cut short; what was
 * not finished stays for the next start (symbols-inflight). Idempotent; offers are refused
 * afterwards.
 */
void symupload_stop(struct symupload *u);

/* A consistent snapshot of the counters; callable from any thread, also after stop. */
void symupload_stats(struct symupload *u, struct symupload_stats *out);

/* Stops if needed and frees everything. Accepts NULL. */
void symupload_free(struct symupload *u);

#endif
