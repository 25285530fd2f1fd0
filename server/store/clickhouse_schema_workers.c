/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration: the role of a job's process (wire JOB_RANKS role: 0 the rank's own
 * process, 1 a worker of the rank such as a PyTorch DataLoader worker) and a worker's rank pid.
 * Rows written before it read as ranks (role 0). Lists and counts of ranks skip workers; rank
 * filters include them (they carry their rank's numbers).
 */
#include "server/store/clickhouse_internal.h"

const char *const ch__migration_workers[] = {
	/* One statement (both columns or neither); this ClickHouse has no ADD COLUMN IF NOT
	 * EXISTS. */
	"ALTER TABLE job_ranks ADD COLUMN role UInt8 DEFAULT 0,"
	" ADD COLUMN rank_pid UInt32 DEFAULT 0",
	NULL,
};

/*
 * Migration 9: the rank's GPU (wire 1.7 JOB_RANKS gpu_device - 1, the NVML index on its node;
 * -1 unknown). Rows written before it, and by older agents, read as unknown. Merged per
 * process as SQLite's upsert: the newest window's known device; unknown when no row knows it.
 */
const char *const ch__migration_gpu_device[] = {
	"ALTER TABLE job_ranks ADD COLUMN gpu_device Int16 DEFAULT -1",
	NULL,
};
