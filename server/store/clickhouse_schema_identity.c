/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration 8: who each process belongs to (wire 1.5 IDENTITIES, SQLite's
 * process_identities): container runtime, id and name, pod UID, namespace and name, Slurm job
 * and step, systemd unit. One row per process per batch that names it, appended under the
 * batch's attempt like every other row; readers merge them per process as SQLite's upsert does
 * (sqlite_write_gpu.c, identity_upsert_sql): runtime, container id, pod UID, Slurm job and
 * step and unit are those of the newest window (ties: the later arrival, as SQLite's >=);
 * namespace, pod name and container name are the last non-empty ones to arrive, "" when no
 * batch named them (a name learnt once is not forgotten by a later batch that lacks it).
 * Rows written before migration 8 have no identity: their processes read as unknown, as on
 * SQLite. The table is partitioned by day (of the window), so retention drops it with the
 * batch's other rows.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

const char *const ch__migration_identity[] = {
	"CREATE TABLE IF NOT EXISTS process_identities (day Date, node_id String, process UInt64,"
	" runtime String, container_id String, pod_uid String, namespace String, pod_name String,"
	" container_name String, slurm_job UInt64, slurm_step String, unit String,"
	" last_seen_ns Int64, received_ns Int64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, process)",
	NULL,
};

/* The newest window of an identity record (ties: the later arrival). */
#define ID_ORDER "(last_seen_ns, received_ns)"
/* A name: the last non-empty one to arrive ("" when none did). */
#define ID_NAME(col) "argMaxIf(" col ", received_ns, " col " != '')"

void ch__identities_merged_sql(struct byte_buf *q, const char *job, const char *nodes,
			       int64_t from_ms)
{
	byte_buf_printf(q, "(SELECT process, toUInt8(1) AS i_known,"
			   " argMax(runtime, " ID_ORDER ") AS i_runtime,"
			   " argMax(container_id, " ID_ORDER ") AS i_container_id,"
			   " argMax(pod_uid, " ID_ORDER ") AS i_pod_uid,"
			   " " ID_NAME("namespace") " AS i_namespace,"
			   " " ID_NAME("pod_name") " AS i_pod_name,"
			   " " ID_NAME("container_name") " AS i_container_name,"
			   " argMax(slurm_job, " ID_ORDER ") AS i_slurm_job,"
			   " argMax(slurm_step, " ID_ORDER ") AS i_slurm_step,"
			   " argMax(unit, " ID_ORDER ") AS i_unit"
			   " FROM process_identities WHERE ");
	/* A process's merge reads only its own rows: the job's processes need no others, and
	 * those are on the job's nodes; every batch carries its processes' identities, so the
	 * rows of a range's processes are among those received since the day before it. */
	if (nodes) {
		ch__committed_nodes_begin(q);
		byte_buf_printf(q, "%s", nodes);
		ch__committed_nodes_end(q, from_ms);
		byte_buf_printf(q, " AND node_id IN %s", nodes);
		if (job) {
			byte_buf_printf(q, " AND process IN (SELECT process FROM job_ranks"
					   " WHERE job = ");
			ch__quote(q, job);
			byte_buf_printf(q, ")");
		}
	} else if (from_ms != CH_ALL_TIME) {
		ch__received_since_sql(q, from_ms);
	} else {
		byte_buf_printf(q, CH_COMMITTED);
	}
	byte_buf_printf(q, " GROUP BY process)");
}

/* ASCII lower case, as SQLite's lower(). */
static void quote_lower(struct byte_buf *q, const char *text)
{
	size_t n = strlen(text);
	char *l = malloc(n + 1);

	if (!l) {
		q->error = -ENOMEM;
		return;
	}
	for (size_t i = 0; i <= n; i++)
		l[i] = (char)(text[i] >= 'A' && text[i] <= 'Z' ? text[i] - 'A' + 'a' : text[i]);
	ch__quote(q, l);
	free(l);
}

void ch__identity_processes_sql(struct byte_buf *q, const struct store_sample_filter *f,
				 int64_t from_ms)
{
	byte_buf_printf(q, "(SELECT process FROM ");
	ch__identities_merged_sql(q, NULL, NULL, from_ms);
	byte_buf_printf(q, " WHERE 1");
	if (f->pod_namespace) {
		byte_buf_printf(q, " AND i_namespace = ");
		ch__quote(q, f->pod_namespace);
	}
	if (f->pod) {
		byte_buf_printf(q, " AND (i_pod_name = ");
		ch__quote(q, f->pod);
		byte_buf_printf(q, " OR i_pod_uid = ");
		quote_lower(q, f->pod);
		byte_buf_printf(q, ")");
	}
	/* A container: its name, its id, or the short id Docker and crictl print (a prefix of
	 * at least 12 characters). Ids are lower-case hex, so bytes and characters agree. */
	if (f->container) {
		byte_buf_printf(q, " AND (i_container_name = ");
		ch__quote(q, f->container);
		if (strlen(f->container) >= 12) {
			byte_buf_printf(q, " OR substring(i_container_id, 1, %zu) = ",
					strlen(f->container));
			quote_lower(q, f->container);
		}
		byte_buf_printf(q, ")");
	}
	if (f->unit) {
		byte_buf_printf(q, " AND i_unit = ");
		ch__quote(q, f->unit);
	}
	/* Stored as SQLite stores it: clamped to INT64_MAX. */
	if (f->has_slurm_job)
		byte_buf_printf(q, " AND i_slurm_job = %" PRIu64,
				f->slurm_job > INT64_MAX ? (uint64_t)INT64_MAX : f->slurm_job);
	byte_buf_printf(q, ")");
}

int ch__identity_read(char **f, struct store_identity *id)
{
	uint64_t known, slurm;

	memset(id, 0, sizeof(*id));
	if (ch_tsv_u64(f[0], &known) || known > 1)
		return -EPROTO;
	if (!known)
		return 0;
	for (unsigned i = 1; i < CH_IDENTITY_FIELDS; i++)
		if (!f[i])
			return -EPROTO;
	if (ch_tsv_u64(f[7], &slurm))
		return -EPROTO;
	*id = (struct store_identity){
		.known = true, .runtime = f[1], .container_id = f[2], .pod_uid = f[3],
		.pod_namespace = f[4], .pod_name = f[5], .container_name = f[6],
		.slurm_job = slurm, .slurm_step = f[8], .unit = f[9],
	};
	return 0;
}

int ch__identities_write(struct ch_batch_rows *out, const struct sysom_batch *b,
			 const char *node_hex, const uint64_t *process_keys, int64_t received_ns,
			 uint64_t attempt)
{
	struct byte_buf rows = { 0 };
	int64_t start = b->window_start_ns > INT64_MAX ? INT64_MAX : (int64_t)b->window_start_ns;
	int64_t end = b->window_end_ns > INT64_MAX ? INT64_MAX : (int64_t)b->window_end_ns;
	int rc;

	if (!b->identity_count)
		return 0;
	for (uint32_t i = 0; i < b->identity_count; i++) {
		const struct sysom_identity *id = &b->identities[i];
		const char *runtime = sysom_runtime_name(id->runtime);

		ch__rb_date_ns(&rows, start);
		ch__rb_str(&rows, node_hex);
		byte_buf_put_u64(&rows, process_keys[id->process]);
		ch__rb_str(&rows, runtime ? runtime : "");
		ch__rb_str(&rows, sysom_batch_string(b, id->container_id));
		ch__rb_str(&rows, sysom_batch_string(b, id->pod_uid));
		ch__rb_str(&rows, sysom_batch_string(b, id->pod_namespace));
		ch__rb_str(&rows, sysom_batch_string(b, id->pod_name));
		ch__rb_str(&rows, sysom_batch_string(b, id->container_name));
		/* Clamped as SQLite stores it (a signed integer). */
		byte_buf_put_u64(&rows, id->slurm_job > INT64_MAX ? (uint64_t)INT64_MAX
								   : id->slurm_job);
		ch__rb_str(&rows, sysom_batch_string(b, id->slurm_step));
		ch__rb_str(&rows, sysom_batch_string(b, id->unit));
		byte_buf_put_u64(&rows, (uint64_t)end);
		byte_buf_put_u64(&rows, (uint64_t)received_ns);
		byte_buf_put_u64(&rows, attempt);
	}
	rc = ch__rows_take(out, "process_identities", &rows);
	byte_buf_free(&rows);
	return rc;
}
