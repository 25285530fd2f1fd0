/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instance rollups: the long-term form of a job's NCCL calls (issue 19). Per-call rows
 * (nccl_call_chunks, ClickHouse nccl_calls) go at --retention-days; before they go, retention
 * keeps every collective instance (communicator, op, seq, first entry, size) with what the
 * analyses read of each rank's call: the store's process (pid, node and hostname come from
 * it), rank, job rank, lateness (entry - the instance's first entry), duration (exit - entry),
 * count, bytes, peer, result. A call's entry is first_entry + lateness and its exit entry +
 * duration, exactly; its tid, stream, datatype, reduction op and flags are not kept (tid
 * reads back as 0). The instances of one (job, communicator, op) whose first entry is in one
 * minute are stored together, as one blob (one row per instance would cost more than the raw
 * chunks: a zstd frame and a row per 8 calls).
 *
 * Blob, version 1 (docs/architecture.md "NCCL instances kept past the raw calls"):
 *   byte 0      version (1)
 *   varint      number of instances, 1..NCCL_INSTANCE_MAX_INSTANCES
 *   varint      number of calls, 1..NCCL_INSTANCE_MAX_CALLS
 *   varint      payload bytes before compression
 *   rest        one zstd frame of the payload
 * Payload: per instance, LEB128 varints (z: zigzag of a wrapping 64-bit difference or of a
 * signed value) of z(seq - previous seq), z(first entry - previous first entry), z(nranks),
 * its number of calls (>= 1), then per call, in the order the store answers them (rank,
 * unknown last, then entry): z(process - previous process), z(rank), z(job_rank),
 * z(lateness), z(exit - previous exit), count, bytes, z(peer), z(result), where a call's
 * exit is lateness + duration (relative to the instance's first entry: ranks leave a
 * collective together, so exits differ little) and "previous" is the previous call's of the
 * instance (exit) or of the blob (process), 0 for the first. A decoder rejects anything else (trailing bytes, a varint past 10
 * bytes or its field's width, calls not adding up to the declared count) as corrupt.
 */
#ifndef SYSOM_SERVER_STORE_NCCL_INSTANCE_H
#define SYSOM_SERVER_STORE_NCCL_INSTANCE_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

#define NCCL_INSTANCE_VERSION 1
/* Per blob: instances, and calls of all of them (what one decode holds: ~56 bytes a call). */
#define NCCL_INSTANCE_MAX_INSTANCES 65536
#define NCCL_INSTANCE_MAX_CALLS 262144
/* Most payload bytes one instance header (4 varints) and one call (9) can take. */
#define NCCL_INSTANCE_HEAD_MAX_BYTES 40
#define NCCL_INSTANCE_CALL_MAX_BYTES 90

/* One instance of a blob; its calls are calls[call0 .. call0 + ncalls - 1]. */
struct nccl_instance {
	uint64_t seq;
	int64_t first_entry_ns; /* the earliest entry of its calls */
	int32_t nranks;         /* the communicator's size, -1 unknown */
	uint32_t ncalls;        /* >= 1 */
	size_t call0;           /* set by the decoder; the encoder takes the calls in order */
};

/* One rank's call of an instance as the rollup keeps it. */
struct nccl_instance_call {
	int64_t process;     /* the store's process id (pid, node, hostname); 0 unknown */
	int32_t rank;        /* the call's rank in the communicator, -1 unknown */
	int32_t job_rank;    /* the process's rank in the job, -1 unknown */
	int64_t lateness_ns; /* entry - the instance's first entry */
	int64_t duration_ns; /* exit - entry */
	uint64_t count, bytes;
	int32_t peer, result;
};

/*
 * Appends the blob of `ninst` instances (1..NCCL_INSTANCE_MAX_INSTANCES) to `out`, whose calls
 * are `calls` in order (ncalls, the sum of their ncalls, 1..NCCL_INSTANCE_MAX_CALLS).
 * 0 or -errno (-EINVAL beyond the bounds).
 */
int nccl_instance_encode(const struct nccl_instance *inst, size_t ninst,
			 const struct nccl_instance_call *calls, size_t ncalls,
			 struct byte_buf *out);

/*
 * Decodes a blob of untrusted bytes into `*inst` and `*calls` (malloc'd, the caller frees
 * both). Returns 0, -SYSOM_ECORRUPT for anything malformed, -SYSOM_ELIMIT beyond the bounds
 * above, or -ENOMEM; on error both are NULL and the counts 0.
 */
int nccl_instance_decode(const void *blob, size_t len, struct nccl_instance **inst,
			 size_t *ninst, struct nccl_instance_call **calls, size_t *ncalls);

#endif
