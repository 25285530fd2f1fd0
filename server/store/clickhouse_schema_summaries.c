/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration 13: small summary tables behind the all-time lists (the node list, the
 * agent counters, the job list), kept at insert by materialized views on `batches`, so that
 * those reads group a few rows per node (or process) and day instead of every batch ever
 * stored (docs/architecture.md, "All-time lists from summaries").
 *
 * Only the batch row feeds them: it is written last and commits its attempt, so rows of an
 * attempt cut short never reach a summary. What the job list needs of a batch's job ranks
 * rides in the batch row (window_day, jr_* arrays) for that reason. Every summary is
 * partitioned by the day of the rows it sums (the batch's receive day; the job ranks' window
 * day, as job_ranks), so retention drops a summary's days with the rows they summed.
 *
 * Two copies of one batch identity (two replicas storing it at once) are both summed; the
 * readers find the nodes with such copies through batch_seqs (a block of 64 sequence numbers
 * per row: their bitmap, and the sums of its low and high halves over the copies, which equal
 * the bitmap's halves exactly when no sequence number has two copies) and read those nodes
 * the old, exact way (clickhouse_read.c).
 *
 * The tables are created by CREATE TABLE IF NOT EXISTS ... AS SELECT (the backfill from the
 * rows already stored, run once: a second run finds the table) before their views. The ALTER
 * of `batches` comes first: from then on a server of an older schema cannot insert batch rows
 * (RowBinary of every column), so no batch row lands between a backfill and its view.
 */
#include "server/store/clickhouse_internal.h"

#define NODE_DAYS_SELECT                                                                     \
	" SELECT day, node_id, argMaxState(hostname, received_ns) AS h,"                     \
	" argMaxState(kernel_release, received_ns) AS kr, argMaxState(machine, received_ns) AS m," \
	" argMaxState(agent_version, received_ns) AS av, argMaxState(boot_id, received_ns) AS bi," \
	" argMaxState(sample_hz, received_ns) AS hz,"                                         \
	" argMaxState(sample_rate_ppm, received_ns) AS ppm,"                                  \
	" argMaxState(online_cpus, received_ns) AS cpus, minState(received_ns) AS f,"          \
	" maxState(received_ns) AS l, countState() AS n, argMaxState(epoch, received_ns) AS le" \
	" FROM batches GROUP BY day, node_id"

/* bits: which of the block's 64 sequence numbers are stored; lo, hi: the sum over every copy
 * of its bit in the low or high half (shifted down), which fits (fewer than 2^32 copies). */
#define BATCH_SEQS_SELECT                                                                    \
	" SELECT day, node_id, epoch, intDiv(sequence, 64) AS blk,"                           \
	" groupBitOrState(bitShiftLeft(toUInt64(1), sequence % 64)) AS bits,"                 \
	" sumState(if(sequence % 64 < 32, bitShiftLeft(toUInt64(1), sequence % 32),"           \
	" toUInt64(0))) AS lo,"                                                               \
	" sumState(if(sequence % 64 < 32, toUInt64(0),"                                       \
	" bitShiftLeft(toUInt64(1), sequence % 32))) AS hi, maxState(sequence) AS top"          \
	" FROM batches GROUP BY day, node_id, epoch, blk"

#define NODE_COUNTERS_SELECT                                                                 \
	" SELECT day, node_id, counter, sumState(value) AS total FROM batches"                \
	" ARRAY JOIN counter_ids AS counter, counter_values AS value"                         \
	" GROUP BY day, node_id, counter"

/* A process's job rank as the job list merges it (the newest window's, as job_ranks). */
#define JOB_PROCESS_STATES(job, rank, ws)                                                    \
	" anyState(node_id) AS node, argMaxState(" job ", (window_end_ns, received_ns)) AS j," \
	" argMaxState(" rank ", (window_end_ns, received_ns)) AS r,"                           \
	" argMaxState(" ws ", (window_end_ns, received_ns)) AS ws,"                            \
	" minState(window_start_ns) AS f, maxState(window_end_ns) AS l"

const char *const ch__migration_summaries[] = {
	/* One statement (this ClickHouse has no ADD COLUMN IF NOT EXISTS). */
	"ALTER TABLE batches ADD COLUMN window_day Date, ADD COLUMN jr_process Array(UInt64),"
	" ADD COLUMN jr_job Array(String), ADD COLUMN jr_rank Array(Int32),"
	" ADD COLUMN jr_world_size Array(Int32)",
	"CREATE TABLE IF NOT EXISTS node_days ENGINE = AggregatingMergeTree PARTITION BY day"
	" ORDER BY node_id AS" NODE_DAYS_SELECT,
	"CREATE MATERIALIZED VIEW IF NOT EXISTS node_days_mv TO node_days AS" NODE_DAYS_SELECT,
	"CREATE TABLE IF NOT EXISTS batch_seqs ENGINE = AggregatingMergeTree PARTITION BY day"
	" ORDER BY (node_id, epoch, blk) AS" BATCH_SEQS_SELECT,
	"CREATE MATERIALIZED VIEW IF NOT EXISTS batch_seqs_mv TO batch_seqs AS" BATCH_SEQS_SELECT,
	"CREATE TABLE IF NOT EXISTS node_counters ENGINE = AggregatingMergeTree PARTITION BY day"
	" ORDER BY (node_id, counter) AS" NODE_COUNTERS_SELECT,
	"CREATE MATERIALIZED VIEW IF NOT EXISTS node_counters_mv TO node_counters AS"
	NODE_COUNTERS_SELECT,
	/* The backfill: job rank rows of attempts that have a batch row (copies merge to the same
	 * values; attempts cut short have none). */
	"CREATE TABLE IF NOT EXISTS job_processes ENGINE = AggregatingMergeTree PARTITION BY day"
	" ORDER BY process AS SELECT day, process,"
	JOB_PROCESS_STATES("job", "rank", "world_size")
	" FROM job_ranks WHERE attempt IN (SELECT attempt FROM batches) GROUP BY day, process",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS job_processes_mv TO job_processes AS"
	" SELECT window_day AS day, process,"
	JOB_PROCESS_STATES("jb", "rk", "wsz")
	" FROM batches ARRAY JOIN jr_process AS process, jr_job AS jb, jr_rank AS rk,"
	" jr_world_size AS wsz GROUP BY day, process",
	NULL,
};

/*
 * Migration 15: the latest comm of each process per receive day, kept by a view on `batches`
 * (whose rows carry their processes' ids and comms since: pn_process, pn_comm), so that a
 * read's process-name join merges a row per process and day instead of grouping every process
 * row of every batch since the day before its range (one per process per batch: as many as a
 * twelfth of the sample rows at a GPU node's density). The backfill takes the process rows of
 * attempts that have a batch row, as the job processes' did.
 */
#define PROCESS_NAMES_STATE(comm) " argMaxState(" comm ", received_ns) AS name"

const char *const ch__migration_process_names[] = {
	"ALTER TABLE batches ADD COLUMN pn_process Array(UInt64), ADD COLUMN pn_comm Array(String)",
	"CREATE TABLE IF NOT EXISTS process_names ENGINE = AggregatingMergeTree PARTITION BY day"
	" ORDER BY process AS SELECT day, process," PROCESS_NAMES_STATE("comm")
	" FROM processes WHERE attempt IN (SELECT attempt FROM batches) GROUP BY day, process",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS process_names_mv TO process_names AS"
	" SELECT day, process," PROCESS_NAMES_STATE("cm")
	" FROM batches ARRAY JOIN pn_process AS process, pn_comm AS cm GROUP BY day, process",
	NULL,
};
