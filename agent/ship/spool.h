/* SPDX-License-Identifier: Apache-2.0 */
/* Durable on-disk spool of sealed batches: crash-safe commit, replay, bounds, quarantine. */
#ifndef SYSOM_AGENT_SHIP_SPOOL_H
#define SYSOM_AGENT_SHIP_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Spool file format version 1 (docs/spool-format.md has the same tables and the directory
 * layout, state file, full policy and crash-safety argument). All integers little-endian.
 * One file per batch, named "<epoch: 16 lower-case hex>-<sequence: 20 decimal digits>.batch".
 *
 * Header, 64 bytes, followed by exactly `body length` bytes of body (the sealed batch):
 *   OFFSET SIZE FIELD
 *   0      4    magic "SYSP"
 *   4      2    version (1): a reader rejects any other version
 *   6      2    header size in bytes (64..4096); the header checksum is its last 8 bytes and
 *               a reader skips the bytes between offset 56 and the checksum it does not know
 *   8      8    agent epoch (must match the file name)
 *   16     8    batch sequence number, >= 1 (must match the file name)
 *   24     8    window end, ns since the Unix epoch (CLOCK_REALTIME)
 *   32     8    creation time of the file, ns since the Unix epoch (age limit)
 *   40     8    body length in bytes (<= SPOOL_MAX_BODY; file size = header size + body length)
 *   48     8    XXH64 (seed 0) of the body
 *   56     8    XXH64 (seed 0) of header bytes [0, header size - 8): the header checksum
 */
#define SPOOL_MAGIC "SYSP"
#define SPOOL_VERSION 1
#define SPOOL_HEADER_SIZE 64
#define SPOOL_HEADER_MAX 4096
#define SPOOL_MAX_BODY (256u << 20) /* largest batch body the spool stores or reads */

#define SPOOL_DEFAULT_MAX_BYTES (512ull << 20) /* 1 h of batches needs far less */
#define SPOOL_DEFAULT_MAX_AGE_S (24u * 3600u)
#define SPOOL_DEFAULT_MAX_FILES 16384u /* 5.6 days of 30 s batches */
#define SPOOL_MAX_FILES_LIMIT (1u << 20) /* largest accepted max_files */
#define SPOOL_KEEP_QUARANTINED 16 /* files kept in corrupt/ and in rejected/ */

/* The fields of a spool file header (what spool_header_decode returns). */
struct spool_header {
	uint16_t version;      /* SPOOL_VERSION */
	uint16_t header_size;  /* bytes before the body */
	uint64_t epoch;        /* agent epoch of the batch */
	uint64_t sequence;     /* batch sequence within the epoch, >= 1 */
	uint64_t window_end_ns; /* end of the batch's window, ns since the Unix epoch */
	uint64_t created_ns;   /* when the file was written, ns since the Unix epoch */
	uint64_t body_len;     /* bytes of body after the header */
	uint64_t body_hash;    /* XXH64 of the body, seed 0 */
};

/*
 * Decodes and validates a header from the first `len` bytes of a file (pure: no I/O, no
 * allocation; every read bounded by `len`). Checks magic, version, header size, checksum,
 * sequence >= 1 and body length <= SPOOL_MAX_BODY; does not look at the body. Returns the
 * header size (> 0) with *out written, or -SYSOM_ECORRUPT / -SYSOM_EVERSION /
 * -SYSOM_ELIMIT with *where (optional) set to the offset of the offending field.
 */
int spool_header_decode(const void *buf, size_t len, struct spool_header *out, size_t *where);

/*
 * Encodes `h` as a version 1 header of SPOOL_HEADER_SIZE bytes into `out`, computing the
 * header checksum (h->version and h->header_size are ignored).
 */
void spool_header_encode(const struct spool_header *h, uint8_t out[SPOOL_HEADER_SIZE]);

/* What a spool reports through its event callback (library code does not log). */
enum spool_event_kind {
	SPOOL_EVENT_STATE_CREATED = 1, /* no state file: a new epoch was created */
	SPOOL_EVENT_STATE_RESET,       /* state file unreadable or corrupt: new epoch (detail) */
	SPOOL_EVENT_STALE_TMP,         /* a *.tmp left by an interrupted write was removed */
	SPOOL_EVENT_CORRUPT,           /* a batch file failed validation: moved to corrupt/ */
	SPOOL_EVENT_DROPPED_FULL,      /* oldest batch deleted: size or file-count limit */
	SPOOL_EVENT_DROPPED_AGE,       /* batch deleted: older than the age limit */
	SPOOL_EVENT_REJECTED,          /* batch moved to rejected/ (spool_batch_reject) */
	SPOOL_EVENT_UNINDEXED,         /* more batch files than SPOOL_MAX_FILES_LIMIT: left alone */
};

struct spool_event {
	enum spool_event_kind kind;
	const char *name;   /* file name concerned or NULL (borrowed for the call) */
	uint64_t epoch;     /* batch identity where known, else 0 */
	uint64_t sequence;
	int error;          /* negative error code where one applies, else 0 */
	const char *detail; /* human-readable reason (borrowed for the call), never NULL */
};

/*
 * Event callback. Called with the spool's lock held, from whichever thread made the call that
 * caused the event (or from spool_open): it must not call back into the spool.
 */
typedef void (*spool_event_fn)(void *ctx, const struct spool_event *ev);

struct spool_options {
	const char *dir;            /* spool directory; created 0700 when missing (its parent
				       must exist); borrowed for the call */
	uint64_t max_bytes;         /* total file bytes; 0: SPOOL_DEFAULT_MAX_BYTES */
	uint64_t max_age_s;         /* by creation time; 0: SPOOL_DEFAULT_MAX_AGE_S */
	uint32_t max_files;         /* 0: SPOOL_DEFAULT_MAX_FILES; at most SPOOL_MAX_FILES_LIMIT */
	spool_event_fn on_event;    /* optional */
	void *event_ctx;
	/* Wall clock in ns since the Unix epoch for creation times and the age limit; NULL:
	 * CLOCK_REALTIME. Tests inject one. */
	uint64_t (*now_ns)(void *ctx);
	void *clock_ctx;
};

/* A batch read back from the spool. */
struct spool_batch {
	uint64_t epoch;
	uint64_t sequence;
	uint64_t window_end_ns;
	uint64_t created_ns;
	uint8_t *body;   /* owned: release with spool_batch_release */
	size_t body_len;
};

/* Counters (monotonic since open) and gauges (files, bytes). */
struct spool_stats {
	uint64_t files;          /* batch files in the spool now */
	uint64_t bytes;          /* their total size (headers included) */
	uint64_t commits;        /* batches committed since open */
	uint64_t commit_errors;  /* commits that failed (the batch was not stored) */
	uint64_t dropped_full;   /* batches deleted by the size/file-count limit */
	uint64_t dropped_age;    /* batches deleted by the age limit */
	uint64_t corrupt;        /* batch files quarantined into corrupt/ */
	uint64_t stale_tmp;      /* *.tmp files removed at open */
	uint64_t rejected;       /* batches moved to rejected/ */
};

struct spool;

/*
 * Opens (creating if needed) the spool in opts->dir: takes an exclusive lock on the directory
 * (-EBUSY when another spool holds it), loads or creates the state file (epoch and next
 * sequence), removes stale *.tmp files, indexes batch files (quarantining those whose header
 * is invalid) and applies the limits. Returns 0 with *out set (free with spool_close), or
 * -SYSOM_ECONFIG for bad options, -ENOMEM or -errno.
 */
int spool_open(const struct spool_options *opts, struct spool **out);

/* Closes the spool and releases its lock; batch files stay for the next open. Accepts NULL. */
void spool_close(struct spool *s);

/* The agent epoch: random, created with the state file, fixed while the state file lives. */
uint64_t spool_epoch(const struct spool *s);

/*
 * Reserves the next sequence number of the epoch and makes the reservation durable before
 * returning it, so a sequence is never handed out twice, even across crashes and restarts
 * with an empty spool. Returns 0 with *out set, or -errno (nothing reserved).
 */
int spool_sequence_next(struct spool *s, uint64_t *out);

/*
 * Stores a batch body (copied; `body` is borrowed) under the spool's epoch and `sequence`
 * (which must have come from spool_sequence_next). The file is complete and durable
 * (written to *.tmp, fsynced, renamed, directory fsynced) when this returns 0. Makes room
 * first by deleting the oldest batches but the pinned one (age limit, then size and
 * file-count limits; counted and reported). Returns 0, -EINVAL (bad sequence), -EEXIST
 * (sequence already stored), -SYSOM_ELIMIT (larger than SPOOL_MAX_BODY or than max_bytes, or
 * no room even without every batch but the pinned one and commits in flight: then nothing
 * is deleted), -ENOSPC / -EDQUOT (disk full: nothing is left behind) or another -errno.
 */
int spool_batch_commit(struct spool *s, uint64_t sequence, uint64_t window_end_ns,
		       const void *body, size_t len);

/*
 * Reads the oldest batch (foreign epochs left by a lost state file first, then the current
 * epoch; by sequence within an epoch) after applying the age limit. Verifies the header and
 * the body checksum; a file that fails is moved to corrupt/ (counted, reported) and the next
 * one is tried. Returns 0 with *out filled (caller releases it), -ENOENT when the spool is
 * empty, -ENOMEM or -errno.
 *
 * The batch returned is pinned: until spool_batch_remove, spool_batch_reject or
 * spool_batch_unpin ends the pin (or the next spool_batch_oldest call, which ends any pin
 * first), neither limit deletes it. It still counts toward the limits, so newer batches are
 * deleted in its place when room is needed. This keeps a batch that is being delivered from
 * also being counted as dropped: a dropped batch is one that will never be delivered. A
 * caller holds a batch only while an attempt is in flight, and unpins it while it waits.
 */
int spool_batch_oldest(struct spool *s, struct spool_batch *out);

/*
 * Ends the pin of batch (epoch, sequence) set by spool_batch_oldest (the caller will read the
 * oldest batch again before its next attempt); the limits may delete it from now on. Does
 * nothing when that batch is not pinned.
 */
void spool_batch_unpin(struct spool *s, uint64_t epoch, uint64_t sequence);

/* Frees a batch's body and clears it; accepts NULL and an already released batch. */
void spool_batch_release(struct spool_batch *b);

/*
 * Deletes the file of batch (epoch, sequence), e.g. after the server acknowledged it, and
 * ends its pin. Returns 0, -ENOENT when the spool does not hold it (already dropped), or -errno.
 */
int spool_batch_remove(struct spool *s, uint64_t epoch, uint64_t sequence);

/*
 * Moves the file of batch (epoch, sequence) into rejected/ (the server refused it for good),
 * ending its pin and keeping only the newest SPOOL_KEEP_QUARANTINED files there. Returns 0, -ENOENT when the
 * spool does not hold it, or -errno.
 */
int spool_batch_reject(struct spool *s, uint64_t epoch, uint64_t sequence);

/* A consistent snapshot of the counters; callable from any thread. */
void spool_stats(struct spool *s, struct spool_stats *out);

#endif
