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
