/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL call chunks: how the embedded store keeps per-call NCCL records. A 30-s batch of an
 * 8-rank node carries ~26,000 calls; one SQLite row (and two index entries) per call took 96%
 * of the database (2.8 MB per batch, 28 times the batch's compressed size) and most of the
 * ingest time. The calls of one (process, communicator, op) from one batch are stored as one
 * row instead, their fields in a compressed blob whose format is below; the row keeps the
 * ranges (seq, entry time) the queries select chunks by.
 *
 * Blob, version 1 (docs/architecture.md "NCCL call chunks"):
 *   byte 0      version (1)
 *   varint      number of calls, 1..NCCL_CHUNK_MAX_CALLS
 *   varint      payload bytes before compression
 *   rest        one zstd frame of the payload
 * Payload: per call, in the chunk's order, LEB128 varints (z: zigzag of a wrapping u64
 * difference) of tid, z(seq - previous seq), z(entry - previous entry), z(exit - entry),
 * count, bytes, z(peer), z(result), z(rank), datatype, redop, flags, stream; "previous" of
 * the first call is 0. A decoder rejects anything else (trailing bytes, a varint past 10
 * bytes or its field's width, more calls than declared) as corrupt.
 */
#ifndef SYSOM_SERVER_STORE_NCCL_CHUNK_H
#define SYSOM_SERVER_STORE_NCCL_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/wire/wire.h"

#define NCCL_CHUNK_VERSION 1
/* A chunk's bounds (the writer cuts a group into several chunks to keep them): */
#define NCCL_CHUNK_MAX_CALLS 16384           /* calls per chunk: one decode stays small */
#define NCCL_CHUNK_MAX_SEQ_SPAN 65536        /* seq_max - seq_min */
#define NCCL_CHUNK_MAX_ENTRY_SPAN_NS 60000000000LL /* entry_max - entry_min: 60 s */
/* Most payload bytes one call can take (13 varints of at most 10 bytes). */
#define NCCL_CHUNK_CALL_MAX_BYTES 130

/* One call as a chunk keeps it (the chunk's row holds process, communicator and op). */
struct nccl_chunk_call {
	uint32_t tid;
	uint64_t seq, entry_ns, exit_ns, count, bytes, stream;
	int32_t peer, result, rank;
	uint8_t datatype, redop, flags;
};

/* Appends the blob of `n` calls (1..NCCL_CHUNK_MAX_CALLS) to `out`. 0 or -errno. */
int nccl_chunk_encode(const struct nccl_chunk_call *calls, size_t n, struct byte_buf *out);

/*
 * Decodes a blob of untrusted bytes into `*calls` (malloc'd, the caller frees; `*n` calls).
 * Returns 0, -SYSOM_ECORRUPT for anything malformed, -SYSOM_ELIMIT beyond the bounds above,
 * or -ENOMEM.
 */
int nccl_chunk_decode(const void *blob, size_t len, struct nccl_chunk_call **calls, size_t *n);

/* The chunk call of wire call `k`. */
void nccl_chunk_call_from_wire(const struct sysom_nccl_call *k, struct nccl_chunk_call *out);

#endif
