/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instance rollups: the long-term form of a job's NCCL calls (issue 19). Per-call rows
 * (nccl_call_chunks, ClickHouse nccl_calls) go at --retention-days; before they go, retention
 * keeps one row per collective instance (job, communicator, op, seq, first entry, size),
 * kept --rollup-retention-days, with what the analyses read of each rank's call in a blob:
 * the store's process (pid, node and hostname come from it), rank, job rank, lateness
 * (entry - the instance's first entry), duration (exit - entry), count, bytes, peer, result.
 * A call's entry is first_entry + lateness and its exit entry + duration, exactly; its tid,
 * stream, datatype, reduction op and flags are not kept (tid reads back as 0).
 *
 * Blob, version 1 (docs/architecture.md "NCCL instances kept past the raw calls"):
 *   byte 0      version (1)
 *   varint      number of calls, 1..NCCL_INSTANCE_MAX_CALLS
 *   varint      payload bytes before compression
 *   rest        one zstd frame of the payload
 * Payload: per call, in the order the store answers them (rank, unknown last, then entry),
 * LEB128 varints (z: zigzag of a wrapping 64-bit difference or of a signed value) of
 * z(process - previous process), z(rank), z(job_rank), z(lateness), z(duration), count,
 * bytes, z(peer), z(result); "previous" of the first call is 0. A decoder rejects anything
 * else (trailing bytes, a varint past 10 bytes or its field's width, fewer bytes than
 * declared) as corrupt.
 */
#ifndef SYSOM_SERVER_STORE_NCCL_INSTANCE_H
#define SYSOM_SERVER_STORE_NCCL_INSTANCE_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

#define NCCL_INSTANCE_VERSION 1
/* Calls per instance (ranks of a communicator); an instance with more is not kept. */
#define NCCL_INSTANCE_MAX_CALLS 65536
/* Most payload bytes one call can take (9 varints of at most 10 bytes). */
#define NCCL_INSTANCE_CALL_MAX_BYTES 90

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

/* Appends the blob of `n` calls (1..NCCL_INSTANCE_MAX_CALLS) to `out`. 0 or -errno. */
int nccl_instance_encode(const struct nccl_instance_call *calls, size_t n, struct byte_buf *out);

/*
 * Decodes a blob of untrusted bytes into `*calls` (malloc'd, the caller frees; `*n` calls).
 * Returns 0, -SYSOM_ECORRUPT for anything malformed, -SYSOM_ELIMIT beyond the bounds above,
 * or -ENOMEM; on error *calls is NULL and *n 0.
 */
int nccl_instance_decode(const void *blob, size_t len, struct nccl_instance_call **calls,
			 size_t *n);

#endif
