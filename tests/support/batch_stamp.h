/* SPDX-License-Identifier: Apache-2.0 */
/* Re-stamps a captured agent batch as if another node had sent it (load generation). */
#ifndef SYSOM_TESTS_SUPPORT_BATCH_STAMP_H
#define SYSOM_TESTS_SUPPORT_BATCH_STAMP_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/wire/wire.h"

/*
 * A template made from one real batch (decoded with sysom_batch_decode). Every encoding of it
 * is the same batch, with what identifies a node and a moment replaced:
 *
 *   header       node id, agent epoch, sequence; the window moved to end at window_end_ns
 *                (its length kept)
 *   NODE         hostname
 *   JOB_RANKS    every non-empty job id becomes "<job id>-<hostname>": each simulated node
 *                runs its own job, so no two nodes claim the same rank of one job
 *   NCCL         communicator keys, parent keys, NCCL comm hashes and the comm ids of
 *                NCCL_PROFILES / NCCL_LINKS XORed with key_salt (the same mapping on every
 *                record, so the communicators of the node stay consistent); sequence numbers
 *                of collective calls and profile ranges advance by seq_offset; call entry/exit
 *                and communicator creation times move with the window; calls in flight at
 *                the captured window's end are left out (their return cannot be replayed:
 *                every copy's seqs move on, so they would wait forever, a hang per copy)
 *
 * Everything else (stacks, samples, objects, processes, counters, GPU and OS rows) is sent
 * as captured. Times relative to the window (sample offsets) need no change.
 */
struct batch_stamp;

/* Who sends the stamped batch, and when. */
struct batch_stamp_identity {
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	const char *hostname;   /* 1..BATCH_STAMP_HOSTNAME_MAX bytes, no NUL (borrowed) */
	uint64_t epoch;
	uint64_t sequence;      /* >= 1 */
	uint64_t window_end_ns; /* ns since the Unix epoch; >= the captured window's length */
	uint64_t key_salt;      /* != 0 */
	uint64_t seq_offset;    /* added to NCCL sequence numbers */
};

#define BATCH_STAMP_HOSTNAME_MAX 64

/*
 * Makes a template of `captured`, taking ownership of everything it holds in every case
 * (`captured` is left empty). Returns 0 with *out set (free with batch_stamp_free), -EINVAL
 * when the batch is not a decoded one (builder indexes present, or no strings) or -ENOMEM.
 */
int batch_stamp_new(struct sysom_batch *captured, struct batch_stamp **out);

/* Frees a template; accepts NULL. */
void batch_stamp_free(struct batch_stamp *t);

/*
 * Appends the template stamped with `id` (uncompressed wire format) to `out`. Returns 0,
 * -EINVAL for an invalid identity (empty or long hostname, sequence 0, salt 0, a window end
 * before the window's length) or the encoder's negative errno.
 */
int batch_stamp_encode(struct batch_stamp *t, const struct batch_stamp_identity *id,
		       struct byte_buf *out);

/*
 * One more than the highest NCCL sequence number in the template (0 without NCCL data):
 * stamping batch n of a node with seq_offset = (n - 1) x this keeps its sequence numbers
 * increasing from batch to batch, as a running job's do.
 */
uint64_t batch_stamp_seq_span(const struct batch_stamp *t);

/* The template's batch as it is encoded (borrowed; fields change with every encode). */
const struct sysom_batch *batch_stamp_batch(const struct batch_stamp *t);

#endif
