/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the symbol upload module shared by its files (not for use outside agent/symbols). */
#ifndef SYSOM_AGENT_SYMBOLS_SYMUPLOAD_INTERNAL_H
#define SYSOM_AGENT_SYMBOLS_SYMUPLOAD_INTERNAL_H

/*
 * The module's files:
 *   symupload.c        the thread: offers → missing queries → uploads; events; public API
 *   answers.c          the server's JSON answers
 *   upload_state.c     the state files symbols-uploaded and symbols-inflight
 *   debug_discovery.c  finding and proving the executable and its debug file (ELF, debuglink)
 *   idset.c            the identity sets; rate_limit.c the upload token bucket
 */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "agent/ship/retry.h"
#include "agent/symbols/idset.h"
#include "agent/symbols/rate_limit.h"
#include "agent/symbols/symupload.h"
#include "common/clock.h"
#include "common/elf_buildid.h"
#include "common/fileio.h"

#define NS_PER_S SYSOM_NS_PER_S
#define NS_PER_MS SYSOM_NS_PER_MS
#define HEX_MAX (2 * SYSOM_BUILD_ID_MAX + 1)
#define UPLOAD_ID_HEX 32                 /* 16 random bytes */
#define HASH_HEX 32                      /* XXH3-128 */
#define STATE_LINE_MAX 512               /* longest state line read */
#define RESPONSE_MAX (2u << 20)          /* a 4096-object missing answer fits */
#define DEBUGLINK_MAX 4096u              /* .gnu_debuglink section size bound */
#define VDSO_MAX (1u << 20)
#define STALL_MAX 8                      /* chunk answers without progress before backing off */
#define UPLOADED_MAGIC "# sysom symbols-uploaded 1"
#define INFLIGHT_MAGIC "# sysom symbols-inflight 1"

enum part { PART_EXECUTABLE = 0, PART_DEBUGINFO = 1 };

/* "executable" or "debuginfo": the part as the server's paths and symbols-inflight name it. */
static inline const char *part_name(int part)
{
	return part == PART_DEBUGINFO ? "debuginfo" : "executable";
}

/* An object waiting: in the offer queue, or in `pending` for a missing query. */
struct waiting {
	struct sysom_build_id id;
	char *path;         /* owned */
	uint32_t pid;
	uint64_t start, end;
	uint64_t since_ns;  /* when it entered `pending` */
};

/* What is known of one file of an item between attempts. */
struct part_state {
	bool hashed;
	uint64_t dev, ino, size, mtime_ns; /* the file the hash is of */
	uint8_t hash[16];
	bool done;          /* stored or present on the server */
	bool resumed;       /* counted in stats.resumed */
	uint64_t sent;      /* bytes acknowledged in this run */
};

/* An object the server lacks something of. */
struct item {
	struct waiting w;
	bool need[2];       /* per part: the server asked for it */
	struct part_state part[2];
	char *debug_path;   /* the debug file chosen last (owned), for the event */
	bool yielded;       /* gave way to other objects after a chunk (counted in yielded_items) */
};

/* A file upload begun and not finished (symbols-inflight). */
struct inflight {
	struct sysom_build_id id;
	uint8_t part;
	char upload_id[UPLOAD_ID_HEX + 1];
	char hash[HASH_HEX + 1];
	uint64_t offset, total;
	uint64_t seq;       /* age, for eviction */
};

struct symupload {
	/* Settings (immutable after new). */
	char *state_dir, *debug_root, *proc_root;
	uint64_t rate;
	uint32_t chunk;
	uint64_t max_file;
	uint32_t queue_max;
	uint32_t uploaded_max;
	uint32_t query_batch;
	uint64_t query_interval_ns;
	uint64_t backoff_initial_ns, backoff_max_ns;
	uint64_t request_timeout_ns;
	symupload_event_fn on_event;
	void *event_ctx;

	/* Shared with symupload_offer, under `lock` (held only for O(1) steps or copies). */
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* offers, stop */
	pthread_t thread;
	bool running;
	bool closed;
	atomic_bool stopping;      /* also read without the lock by should_abort */
	struct waiting *queue;     /* ring of queue_max */
	uint32_t queue_head, queue_count;
	struct idset seen;
	struct symupload_stats stats;
	uint32_t backlog;          /* pending + work, published by the thread */

	/* Upload thread only (and new/free before/after it). */
	struct http_client *http;
	struct retry_clock clock;  /* its jitter source */
	struct waiting *pending;   /* SYMUPLOAD_QUERY_MAX, oldest first */
	uint32_t pending_count;
	struct item **work;        /* ring of SYMUPLOAD_WORK_MAX */
	uint32_t work_head, work_count;
	uint32_t yielded_items; /* items in work whose file upload gave way part-way */
	struct idset active;       /* in pending or work */
	struct idset done;         /* in symbols-uploaded */
	struct idset failed;       /* given up in this run */
	uint8_t *buf;              /* one chunk, while an item is processed */
	uint64_t next_attempt_ns;
	uint32_t failures;         /* consecutive */
	struct rate_limit bucket;  /* when rate > 0: the upload rate limiter */
	int uploaded_fd;           /* symbols-uploaded, O_APPEND */
	uint32_t uploaded_lines;   /* valid lines in it */
	char *linebuf;             /* appends not yet written */
	size_t linebuf_len, linebuf_cap;
	struct inflight inflight[SYMUPLOAD_INFLIGHT_MAX];
	uint32_t inflight_count;
	uint64_t inflight_seq;
};

#define STAT_ADD(u, field, n)                        \
	do {                                         \
		pthread_mutex_lock(&(u)->lock);      \
		(u)->stats.field += (n);             \
		pthread_mutex_unlock(&(u)->lock);    \
	} while (0)

/* The thread's clock (injectable by tests). */
static inline uint64_t now(struct symupload *u)
{
	return retry_clock_now(&u->clock);
}

/* Whether stop was asked (any thread, no lock needed). */
static inline bool stopping(struct symupload *u)
{
	return atomic_load(&u->stopping);
}

/* "elf" or "file-hash": the identity kind as the server and the state files spell it. */
static inline const char *identity_name(const struct sysom_build_id *id)
{
	return id->kind == SYSOM_OBJECT_FILE_HASH ? "file-hash" : "elf";
}

/* The identity's bytes as lowercase hex. */
static inline void hex_of(const struct sysom_build_id *id, char out[HEX_MAX])
{
	sysom_build_id_hex(id, out, HEX_MAX);
}

/* A file's modification time in nanoseconds (part of what a content hash is valid for). */
static inline uint64_t mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * NS_PER_S + (uint64_t)st->st_mtim.tv_nsec;
}

/* Reads exactly `len` bytes at `off`: 0, -errno, or -ESTALE when the file has shrunk since it
 * was measured. */
static inline int pread_exact(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = sysom_pread_full(fd, buf, len, off);

	if (n < 0)
		return (int)n;
	return (size_t)n < len ? -ESTALE : 0;
}

/* ---- symupload.c ---------------------------------------------------------------------- */

/* Counts a state file problem and reports it as a SYMUPLOAD_EVENT_STATE_ERROR event. */
void symupload__state_error(struct symupload *u, int error, const char *what);

/* Moves offers from the shared queue into `pending` (what fits), dropping those known. */
void symupload__take_offers(struct symupload *u);

/* ---- answers.c: the server's answers (bodies are bounded by the HTTP client) ----------- */

/* One entry of a missing answer. */
struct missing_entry {
	char build_id[HEX_MAX];
	bool executable, debuginfo;
};

typedef void (*missing_fn)(void *ctx, const struct missing_entry *e);

/*
 * Parses {"missing":[{"build_id":..,"executable":..,"debuginfo":..},...],...}, calling `fn`
 * for each entry with a usable build_id. 0 or -SYSOM_ECORRUPT.
 */
int symupload__parse_missing(const void *body, size_t len, missing_fn fn, void *ctx);

/* The non-negative integer member `name` of a top-level object into *out; 0, -SYSOM_ECORRUPT
 * or -ENOENT. */
int symupload__parse_uint_member(const void *body, size_t len, const char *name, uint64_t *out);

/* ---- upload_state.c: symbols-uploaded and symbols-inflight ---------------------------- */

/* Loads symbols-uploaded into the done set, creating or repairing the file as needed.
 * 0 or -errno. */
int symupload__uploaded_load(struct symupload *u);

/* Records that the server holds `id` (call symupload__done_flush after a batch). */
void symupload__done_add(struct symupload *u, const struct sysom_build_id *id);

/* Writes the lines collected by symupload__done_add and makes them durable. */
void symupload__done_flush(struct symupload *u);

/* Reads symbols-inflight into u->inflight (a missing or foreign file: nothing). */
void symupload__inflight_load(struct symupload *u);

/* Rewrites symbols-inflight atomically; 0 or -errno (also reported as a state error). */
int symupload__inflight_save(struct symupload *u);

/* The record of the upload of `part` of `id`, or NULL. */
struct inflight *symupload__inflight_find(struct symupload *u, const struct sysom_build_id *id,
					  int part);

/* Forgets the record of `part` of `id` (if any), saved. */
void symupload__inflight_remove(struct symupload *u, const struct sysom_build_id *id, int part);

/* A new record (the oldest is evicted when full), saved. Returns it. */
struct inflight *symupload__inflight_put(struct symupload *u, const struct sysom_build_id *id,
					 int part, const char *upload_id, const char *hash,
					 uint64_t total);

/* A fresh random upload id: UPLOAD_ID_HEX lowercase hex digits. */
void symupload__new_upload_id(struct symupload *u, char out[UPLOAD_ID_HEX + 1]);

/* ---- debug_discovery.c: finding and proving files ------------------------------------- */

enum find_result { FOUND = 0, NOT_FOUND, MISMATCH, TOO_LARGE };

/* XXH3-128 (canonical, big-endian) of bytes [0, size) of `fd`, read through u->buf.
 * 0, -ECANCELED when stopped, -ESTALE when the file shrank, or -errno. */
int symupload__hash_file(struct symupload *u, int fd, uint64_t size, uint8_t out[16]);

/*
 * Opens the object's executable and proves it: through /proc/PID/map_files (the very mapping:
 * deleted files, other mount namespaces), else /proc/PID/root/PATH, else PATH; the first whose
 * identity equals the object's wins. The vDSO comes from our own image. 0 with *result
 * (FOUND: *fd_out and *st_out set, the caller closes), or -ECANCELED / -ENOMEM / -errno.
 */
int symupload__open_executable(struct symupload *u, struct item *it, int *fd_out,
			       struct stat *st_out, enum find_result *result);

/*
 * Finds the object's debug file: DEBUG_ROOT/.build-id/xx/rest.debug (its build ID checked),
 * else the .gnu_debuglink name in the executable's directory, its .debug/ and
 * DEBUG_ROOT/<directory> (the build ID and the link's CRC-32 checked);
 * each first inside the process's root (containers), then in ours. Returns 1 with *fd_out
 * and its path in `dpath`, 0 when there is none, or -ECANCELED.
 */
int symupload__find_debug(struct symupload *u, struct item *it, int exe_fd,
			  const struct stat *exe_st, char *dpath, size_t dlen, int *fd_out,
			  struct stat *st_out, bool *too_large);

#endif
