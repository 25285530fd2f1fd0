/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse tables of training jobs: job ranks, communicators, NCCL calls and the per-batch
 * spans that index the calls by time (see docs/architecture.md, "ClickHouse backend").
 *
 * Every row carries its batch's `attempt` (CH_COMMITTED decides what counts). SQLite keeps one
 * row per process (job_ranks) or per (process, key) (communicators) and upserts it; here every
 * batch appends its records and readers merge them (clickhouse_read_collectives.c) with the
 * same rules, so a batch write stays one INSERT per table and idempotent across replicas.
 *
 * nccl_calls is the largest row stream (one row per rank per call). It is ordered by the
 * instance identity (comm_key, op, seq): the rows of one collective instance, from every
 * rank, are adjacent, and "the calls of these instances" is a set of point reads. The time
 * filter goes through nccl_spans, one row per (batch, process, communicator, op) with the
 * batch's seq and entry-time bounds (a few dozen rows per batch instead of ~29k): the spans
 * of a job's processes overlapping [from, to] give per (comm_key, op) a seq range, and the
 * instances in [from, to] are read as range reads of nccl_calls's primary key.
 */
#include "server/store/clickhouse_internal.h"

const char *const ch__migration_collectives[] = {
	"CREATE TABLE IF NOT EXISTS job_ranks (day Date, job String, node_id String,"
	" process UInt64, tgid UInt32, start_time_ns UInt64, generation UInt32, rank Int32,"
	" world_size Int32, local_rank Int32, local_world_size Int32, group_rank Int32,"
	" source UInt8, job_id_source String, master String, groups String,"
	" window_start_ns Int64, window_end_ns Int64, received_ns Int64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (job, node_id, process)",
	"CREATE TABLE IF NOT EXISTS communicators (day Date, key UInt64, node_id String,"
	" process UInt64, tgid UInt32, idx UInt32, rank Int32, nranks Int32, parent_key UInt64,"
	" split_color Int32, split_key Int32, split_ordinal UInt32, key_source UInt8,"
	" comm_hash UInt64, handle UInt64, created_ns Int64, destroyed UInt8,"
	" window_start_ns Int64, window_end_ns Int64, received_ns Int64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (key, node_id, process)",
	"CREATE TABLE IF NOT EXISTS nccl_calls (day Date, comm_key UInt64, op UInt8, seq UInt64,"
	" node_id String, process UInt64, tgid UInt32, tid UInt32, entry_ns Int64, exit_ns Int64,"
	" count Int64, bytes Int64, peer Int32, result Int32, rank Int32, datatype UInt8,"
	" redop UInt8, flags UInt8, stream UInt64, received_ns Int64, idx UInt32, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (comm_key, op, seq, node_id, process)",
	"CREATE TABLE IF NOT EXISTS nccl_spans (day Date, node_id String, process UInt64,"
	" comm_key UInt64, op UInt8, min_seq UInt64, max_seq UInt64, min_entry_ns Int64,"
	" max_entry_ns Int64, calls UInt32, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (process, min_entry_ns)",
	NULL,
};
