/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration 10 and the replica heartbeats (store_replica_beat, store_replicas_list):
 * the servers that share one ClickHouse learn of each other here (server/cluster/cluster.h).
 *
 * One row per heartbeat; ReplacingMergeTree(beat) keeps each replica's newest row once parts
 * merge, and the readers take argMax(..., beat) per replica, so unmerged rows never show an
 * older state. `seen` is ClickHouse's own clock (now() in the INSERT ... SELECT), so the age of
 * a heartbeat compares two readings of one clock: replicas whose clocks disagree still agree
 * on who is alive.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

const char *const ch__migration_replicas[] = {
	"CREATE TABLE IF NOT EXISTS replicas (replica_id String, url String, started_ms Int64,"
	" beat UInt64, departed UInt8, seen DateTime)"
	" ENGINE = ReplacingMergeTree(beat) ORDER BY replica_id",
	NULL,
};

int ch__replica_beat(struct store *base, const char *id, const char *url, int64_t started_ms,
		     uint64_t beat, bool departed)
{
	struct ch_store *s = ch__store(base);
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "INSERT INTO replicas (replica_id, url, started_ms, beat, departed, seen)"
			    " SELECT ");
	ch__quote(&q, id);
	byte_buf_printf(&q, ", ");
	ch__quote(&q, url);
	byte_buf_printf(&q, ", toInt64(%" PRId64 "), toUInt64(%" PRIu64 "), toUInt8(%d), now()",
			started_ms, beat, departed ? 1 : 0);
	byte_buf_append(&q, "", 1);
	if ((rc = byte_buf_error(&q)))
		goto cleanup;
	rc = ch__exec(s, (const char *)q.data, NULL, 0, NULL);
cleanup:
	byte_buf_free(&q);
	return rc;
}

int ch__replicas_list(struct store *base, uint32_t max_age_s, uint32_t limit,
		      store_replica_fn fn, void *arg)
{
	struct ch_store *s = ch__store(base);
	struct byte_buf q = { 0 }, ans = { 0 };
	struct ch_tsv t;
	char *f[4];
	int rc;

	byte_buf_printf(&q,
			"SELECT replica_id, argMax(url, beat), argMax(started_ms, beat),"
			" toInt64(now()) - toInt64(max(seen)) FROM replicas GROUP BY replica_id"
			" HAVING max(seen) >= now() - %u AND argMax(departed, beat) = 0"
			" ORDER BY replica_id LIMIT %u FORMAT TabSeparated",
			max_age_s, limit);
	byte_buf_append(&q, "", 1);
	if ((rc = byte_buf_error(&q)) || (rc = ch__exec(s, (const char *)q.data, NULL, 0, &ans)))
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	while ((rc = ch_tsv_row(&t, f, 4)) == 1) {
		struct store_replica r = { .id = f[0], .url = f[1] };
		int64_t age;
		if ((rc = ch_tsv_i64(f[2], &r.started_ms)) || (rc = ch_tsv_i64(f[3], &age)))
			goto cleanup;
		r.age_s = age < 0 ? 0 : age > UINT32_MAX ? UINT32_MAX : (uint32_t)age;
		if ((rc = fn(arg, &r)))
			goto cleanup;
	}
	if (rc > 0)
		rc = 0;
cleanup:
	byte_buf_free(&q);
	byte_buf_free(&ans);
	return rc;
}
