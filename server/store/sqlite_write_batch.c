/* SPDX-License-Identifier: Apache-2.0 */
/* Storing a batch in SQLite: the duplicate check, nodes, objects, processes, stacks, samples. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/sqlite_internal.h"

static const char batch_find_sql[] =
	"SELECT b.content_hash FROM batches b JOIN nodes n ON n.id = b.node"
	" WHERE n.node_id = ?1 AND b.epoch = ?2 AND b.sequence = ?3";
static const char node_upsert_sql[] =
	"INSERT INTO nodes (node_id, hostname, kernel_release, machine, agent_version, boot_id,"
	" kernel_object, sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
	" batches, last_epoch, last_sequence)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, 1, ?12, ?13)"
	" ON CONFLICT (node_id) DO UPDATE SET hostname = excluded.hostname,"
	" kernel_release = excluded.kernel_release, machine = excluded.machine,"
	" agent_version = excluded.agent_version, boot_id = excluded.boot_id,"
	" kernel_object = excluded.kernel_object, sample_hz = excluded.sample_hz,"
	" sample_rate_ppm = excluded.sample_rate_ppm, online_cpus = excluded.online_cpus,"
	" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
	" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns), batches = batches + 1,"
	" last_sequence = CASE WHEN last_epoch = excluded.last_epoch"
	"   THEN max(last_sequence, excluded.last_sequence) ELSE excluded.last_sequence END,"
	" last_epoch = excluded.last_epoch"
	" RETURNING id";
static const char batch_insert_sql[] =
	"INSERT INTO batches (node, epoch, sequence, received_ns, window_start_ns,"
	" window_end_ns, samples, sample_rows, counters, content_hash)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
	" ON CONFLICT (node, epoch, sequence) DO NOTHING";
static const char object_find_sql[] = "SELECT id FROM objects WHERE kind = ?1 AND key = ?2";
static const char object_insert_sql[] =
	"INSERT INTO objects (kind, key, build_id, name) VALUES (?1, ?2, ?3, ?4)";
static const char process_upsert_sql[] =
	"INSERT INTO processes (node, tgid, start_time_ns, generation, ppid, comm, exe, cmdline,"
	" first_seen_ns, last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
	" ON CONFLICT (node, tgid, start_time_ns, generation) DO UPDATE SET"
	" ppid = excluded.ppid, comm = excluded.comm, exe = excluded.exe,"
	" cmdline = excluded.cmdline, first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
	" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)"
	" RETURNING id";
static const char stack_find_sql[] = "SELECT kind, stop_reason, frames FROM stacks WHERE id = ?1";
static const char stack_insert_sql[] =
	"INSERT INTO stacks (id, kind, stop_reason, nframes, frames) VALUES (?1, ?2, ?3, ?4, ?5)";
static const char sample_insert_sql[] =
	"INSERT INTO samples (time_ms, node, process, tid, cpu, thread_comm,"
	" kernel_stack, user_stack, count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
static const char offcpu_insert_sql[] =
	"INSERT INTO offcpu (time_ms, node, process, tid, thread_comm, state, kernel_stack,"
	" user_stack, count, blocked_ns, max_ns)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
/* The per-minute rollups (schema 14) of the rows this batch stored: those after the newest
 * rowid before it (?1), in the batch's transaction. */
static const char samples_rowid_max_sql[] = "SELECT coalesce(max(rowid), 0) FROM samples";
static const char offcpu_rowid_max_sql[] = "SELECT coalesce(max(rowid), 0) FROM offcpu";
static const char sample_minutes_add_sql[] =
	"INSERT INTO sample_minutes (minute_ms, node, process, user_stack, kernel_stack, count)"
	" SELECT time_ms - time_ms % 60000 AS m, node, process, coalesce(user_stack, 0) AS u,"
	" coalesce(kernel_stack, 0) AS k, sum(count) FROM samples WHERE rowid > ?1"
	" GROUP BY process, m, u, k"
	" ON CONFLICT (process, minute_ms, user_stack, kernel_stack)"
	" DO UPDATE SET count = count + excluded.count";
static const char offcpu_minutes_add_sql[] =
	"INSERT INTO offcpu_minutes (minute_ms, node, process, user_stack, kernel_stack,"
	" blocked_ns)"
	" SELECT time_ms - time_ms % 60000 AS m, node, process, coalesce(user_stack, 0) AS u,"
	" coalesce(kernel_stack, 0) AS k, sum(blocked_ns) FROM offcpu WHERE rowid > ?1"
	" GROUP BY process, m, u, k"
	" ON CONFLICT (process, minute_ms, user_stack, kernel_stack)"
	" DO UPDATE SET blocked_ns = blocked_ns + excluded.blocked_ns";
static const char counter_add_sql[] =
	"INSERT INTO node_counters (node, counter, total) VALUES (?1, ?2, ?3)"
	" ON CONFLICT (node, counter) DO UPDATE SET total = total + excluded.total";

/* A statement returning one id (RETURNING or a lookup): 0 with *out, -ENOENT, or an error. */
static int query_id(struct conn *c, const char *sql, const struct store__arg *args, size_t nargs,
		    sqlite3_int64 *out)
{
	uint64_t rows = 0;
	int rc = store__query(c, &(struct store__query){ .sql = sql, .args = args, .nargs = nargs,
							  .row = store__row_i64, .ctx = out,
							  .max_rows = 1, .rows = &rows });

	return rc ? rc : rows ? 0 : -ENOENT;
}

/* The store-wide id of a batch object, inserting it when new. */
static int object_id(struct conn *c, const struct sysom_batch *b, const struct sysom_object *o,
		     sqlite3_int64 *out)
{
	const char *name = sysom_batch_string(b, o->name);
	bool by_id = store__object_by_build_id(o->kind);
	const void *key = by_id ? (const void *)o->build_id : (const void *)name;
	int key_len = by_id ? o->build_id_len : (int)strlen(name);
	/* A zero-length blob needs a non-NULL pointer (NULL would bind SQL NULL). */
	const struct store__arg args[] = {
		STORE__INT(o->kind),
		STORE__BLOB(key_len ? key : "", key_len),
		by_id ? STORE__BLOB(o->build_id, o->build_id_len) : STORE__SKIP,
		STORE__TEXT(name),
	};
	int rc = query_id(c, object_find_sql, args, 2, out);

	if (rc != -ENOENT)
		return rc;
	rc = store__query(c, &(struct store__query){ .sql = object_insert_sql, .args = args,
						      .nargs = 4 });
	if (!rc)
		*out = sqlite3_last_insert_rowid(c->db);
	return rc;
}

static int node_upsert(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       sqlite3_int64 kernel_object, int64_t received_ns, sqlite3_int64 *out)
{
	const struct sysom_node_info *n = &b->node;
	char boot_hex[33];
	int rc;

	store__hex(n->boot_id, sizeof(n->boot_id), boot_hex, sizeof(boot_hex));
	const struct store__arg args[] = {
		STORE__TEXT(node_hex),
		STORE__TEXT(sysom_batch_string(b, n->hostname)),
		STORE__TEXT(sysom_batch_string(b, n->kernel_release)),
		STORE__TEXT(sysom_batch_string(b, n->machine)),
		STORE__TEXT(sysom_batch_string(b, n->agent_version)),
		STORE__TEXT(boot_hex),
		kernel_object ? STORE__INT(kernel_object) : STORE__SKIP,
		STORE__INT(n->sample_hz),
		STORE__INT(n->sample_rate_ppm),
		STORE__INT(n->online_cpus),
		STORE__INT(received_ns),
		STORE__INT(store__i64(b->agent_epoch)),
		STORE__INT(store__i64(b->sequence)),
	};
	rc = query_id(c, node_upsert_sql, args, sizeof(args) / sizeof(args[0]), out);
	return rc == -ENOENT ? -EPROTO : rc;
}

static int batch_insert(struct conn *c, const struct sysom_batch *b, sqlite3_int64 node,
			uint64_t content_hash, int64_t received_ns, uint64_t samples,
			const char *counters, bool *inserted)
{
	int rc = store__query(c, &(struct store__query){
		.sql = batch_insert_sql,
		.args = STORE__ARGS(STORE__INT(node), STORE__INT(store__i64(b->agent_epoch)),
				    STORE__INT(store__i64(b->sequence)), STORE__INT(received_ns),
				    STORE__INT(store__clamp(b->window_start_ns)),
				    STORE__INT(store__clamp(b->window_end_ns)),
				    STORE__INT(store__clamp(samples)), STORE__INT(b->sample_count),
				    STORE__TEXT(counters), STORE__INT(store__i64(content_hash))) });

	if (!rc)
		*inserted = sqlite3_changes(c->db) == 1;
	return rc;
}

static int process_upsert(struct conn *c, const struct sysom_batch *b, const struct sysom_process *p,
			  sqlite3_int64 node, sqlite3_int64 *out)
{
	const struct store__arg args[] = {
		STORE__INT(node),
		STORE__INT(p->tgid),
		STORE__INT(store__i64(p->start_time_ns)),
		STORE__INT(p->generation),
		STORE__INT(p->ppid),
		STORE__TEXT(sysom_batch_string(b, p->comm)),
		STORE__TEXT(sysom_batch_string(b, p->exe)),
		STORE__TEXT(sysom_batch_string(b, p->cmdline)),
		STORE__INT(store__clamp(b->window_start_ns)),
		STORE__INT(store__clamp(b->window_end_ns)),
	};
	int rc = query_id(c, process_upsert_sql, args, sizeof(args) / sizeof(args[0]), out);

	return rc == -ENOENT ? -EPROTO : rc;
}

/* What a stored stack must equal to be the same stack. */
struct stack_probe {
	uint8_t kind, stop;
	const struct byte_buf *blob;
	bool same;
};

static int stack_row(void *ctx, sqlite3_stmt *st)
{
	struct stack_probe *p = ctx;

	p->same = sqlite3_column_int(st, 0) == p->kind && sqlite3_column_int(st, 1) == p->stop &&
		  (size_t)sqlite3_column_bytes(st, 2) == p->blob->len &&
		  memcmp(sqlite3_column_blob(st, 2), p->blob->data, p->blob->len) == 0;
	return 0;
}

/*
 * The content-addressed id of a stack whose frames (already mapped to store-wide object ids)
 * are in `blob`, inserting it when new; *created says whether it was.
 */
static int stack_id(struct conn *c, uint8_t kind, uint8_t stop, uint16_t nframes,
		    const struct byte_buf *blob, sqlite3_int64 *out, bool *created)
{
	uint64_t h = store__stack_hash(kind, stop, blob->data, blob->len);
	int rc;

	for (int probe = 0; probe < STORE__STACK_PROBES; probe++, h++) {
		sqlite3_int64 id = store__i64(h);
		struct stack_probe p = { .kind = kind, .stop = stop, .blob = blob };
		uint64_t rows = 0;

		if (id == STORE_STACK_NONE)
			continue;
		rc = store__query(c, &(struct store__query){ .sql = stack_find_sql,
							      .args = STORE__ARGS(STORE__INT(id)),
							      .row = stack_row, .ctx = &p,
							      .max_rows = 1, .rows = &rows });
		if (rc)
			return rc;
		if (rows && p.same) {
			*out = id;
			*created = false;
			return 0;
		}
		if (rows)
			continue; /* a different stack holds this hash: probe the next id */
		rc = store__query(c, &(struct store__query){
			.sql = stack_insert_sql,
			.args = STORE__ARGS(STORE__INT(id), STORE__INT(kind), STORE__INT(stop),
					    STORE__INT(nframes), STORE__BLOB(blob->data, blob->len)) });
		if (!rc) {
			*out = id;
			*created = true;
		}
		return rc;
	}
	return -EOVERFLOW;
}

static int sample_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_sample *smp,
			 const struct store__batch_ids *ids)
{
	int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + smp->time_offset_ms;

	return store__query(c, &(struct store__query){
		.sql = sample_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(time_ms), STORE__INT(ids->node),
			STORE__INT(ids->processes[smp->process]), STORE__INT(smp->tid),
			STORE__INT(smp->cpu), STORE__TEXT(sysom_batch_string(b, smp->thread_comm)),
			smp->kernel_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[smp->kernel_stack])
							     : STORE__SKIP,
			smp->user_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[smp->user_stack])
							   : STORE__SKIP,
			STORE__INT(store__clamp(smp->count))) });
}

static int offcpu_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_offcpu *o,
			 const struct store__batch_ids *ids)
{
	int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + o->time_offset_ms;

	return store__query(c, &(struct store__query){
		.sql = offcpu_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(time_ms), STORE__INT(ids->node),
			STORE__INT(ids->processes[o->process]), STORE__INT(o->tid),
			STORE__TEXT(sysom_batch_string(b, o->thread_comm)), STORE__INT(o->state),
			o->kernel_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[o->kernel_stack])
							   : STORE__SKIP,
			o->user_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[o->user_stack])
							 : STORE__SKIP,
			STORE__INT(store__clamp(o->count)), STORE__INT(store__clamp(o->blocked_ns)),
			STORE__INT(store__clamp(o->max_ns))) });
}

static int counter_add(struct conn *c, sqlite3_int64 node, const struct sysom_counter *ctr)
{
	return store__query(c, &(struct store__query){
		.sql = counter_add_sql,
		.args = STORE__ARGS(STORE__INT(node), STORE__INT(ctr->id),
				    STORE__INT(store__clamp(ctr->value))) });
}

/* The newest rowid of the table `sql` reads (0 when empty) into *out. */
static int rowid_max(struct conn *c, const char *sql, sqlite3_int64 *out)
{
	uint64_t rows = 0;
	int rc = store__query(c, &(struct store__query){ .sql = sql, .row = store__row_i64,
							  .ctx = out, .max_rows = 1,
							  .rows = &rows });

	return !rc && !rows ? -EPROTO : rc;
}

/* Adds the rows after rowid `after` (this batch's) to the rollup `add_sql` names. */
static int minutes_add(struct conn *c, const char *add_sql, sqlite3_int64 after)
{
	return store__query(c, &(struct store__query){ .sql = add_sql,
						      .args = STORE__ARGS(STORE__INT(after)) });
}

/* The content hash column: NULL for batches stored before schema version 5. */
static int batch_record_row(void *ctx, sqlite3_stmt *st)
{
	struct store_batch_record *r = ctx;

	r->exists = true;
	r->hash_known = sqlite3_column_type(st, 0) != SQLITE_NULL;
	r->content_hash = r->hash_known ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
	return 0;
}

static int batch_find(struct conn *c, const char *node_hex, uint64_t epoch, uint64_t sequence,
		      struct store_batch_record *out)
{
	struct store_batch_record r = { 0 };
	uint64_t rows = 0;
	int rc = store__query(c, &(struct store__query){
		.sql = batch_find_sql,
		.args = STORE__ARGS(STORE__TEXT(node_hex), STORE__INT(store__i64(epoch)),
				    STORE__INT(store__i64(sequence))),
		.row = batch_record_row, .ctx = &r, .max_rows = 1, .rows = &rows });

	if (!rc)
		*out = r;
	return rc;
}

/* Maps the batch's stacks to content-addressed stack ids, counting new ones. */
static int stacks_write(struct conn *c, const struct sysom_batch *b, const sqlite3_int64 *objects,
			sqlite3_int64 *stacks, struct store_put_result *r)
{
	struct byte_buf blob = { 0 };
	int rc = 0;

	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct sysom_stack *stk = &b->stacks[i];
		const struct sysom_frame *f = sysom_batch_stack_frames(b, i);
		bool created = false;

		blob.len = 0;
		for (uint16_t j = 0; j < stk->nframes; j++) {
			byte_buf_put_u64(&blob, (uint64_t)objects[f[j].object]);
			byte_buf_put_u64(&blob, f[j].offset);
		}
		if ((rc = byte_buf_error(&blob)))
			goto cleanup;
		rc = stack_id(c, stk->kind, stk->stop_reason, stk->nframes, &blob, &stacks[i], &created);
		if (rc)
			goto cleanup;
		r->new_stacks += created;
	}
cleanup:
	byte_buf_free(&blob);
	return rc;
}

/* Everything of a batch after the duplicate check, inside the open transaction. */
static int batch_write(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       uint64_t content_hash, int64_t received_ns, struct store_put_result *r)
{
	sqlite3_int64 *objects = calloc(b->object_count + 1, sizeof(*objects));
	sqlite3_int64 *processes = calloc(b->process_count + 1, sizeof(*processes));
	sqlite3_int64 *stacks = calloc(b->stack_count + 1, sizeof(*stacks));
	struct store__batch_ids ids = { .processes = processes, .stacks = stacks };
	sqlite3_int64 kernel_object = 0, samples_before = 0, offcpu_before = 0;
	char *counters = store__counters_json(b);
	bool inserted = false;
	int rc = 0;

	if (!objects || !processes || !stacks || !counters) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		r->samples = b->samples[i].count > UINT64_MAX - r->samples ? UINT64_MAX
									    : r->samples + b->samples[i].count;
	for (uint32_t i = 0; i < b->object_count; i++)
		if ((rc = object_id(c, b, &b->objects[i], &objects[i])))
			goto cleanup;
	if (b->node.kernel_object != SYSOM_WIRE_NONE && b->node.kernel_object < b->object_count)
		kernel_object = objects[b->node.kernel_object];
	if ((rc = store__ksyms_touch(c, b, received_ns)))
		goto cleanup;
	if ((rc = node_upsert(c, b, node_hex, kernel_object, received_ns, &ids.node)) ||
	    (rc = batch_insert(c, b, ids.node, content_hash, received_ns, r->samples, counters,
				&inserted)))
		goto cleanup;
	if (!inserted) {
		rc = -EPROTO; /* the duplicate check ran in this transaction: cannot happen */
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->process_count; i++)
		if ((rc = process_upsert(c, b, &b->processes[i], ids.node, &processes[i])))
			goto cleanup;
	r->processes = b->process_count;
	if ((rc = stacks_write(c, b, objects, stacks, r)))
		goto cleanup;
	if ((b->sample_count && (rc = rowid_max(c, samples_rowid_max_sql, &samples_before))) ||
	    (b->offcpu_count && (rc = rowid_max(c, offcpu_rowid_max_sql, &offcpu_before))))
		goto cleanup;
	for (uint32_t i = 0; i < b->sample_count; i++)
		if ((rc = sample_insert(c, b, &b->samples[i], &ids)))
			goto cleanup;
	r->sample_rows = b->sample_count;
	for (uint32_t i = 0; i < b->offcpu_count; i++)
		if ((rc = offcpu_insert(c, b, &b->offcpu[i], &ids)))
			goto cleanup;
	if ((b->sample_count && (rc = minutes_add(c, sample_minutes_add_sql, samples_before))) ||
	    (b->offcpu_count && (rc = minutes_add(c, offcpu_minutes_add_sql, offcpu_before))))
		goto cleanup;
	for (uint32_t i = 0; i < b->counter_count; i++)
		if ((rc = counter_add(c, ids.node, &b->counters[i])))
			goto cleanup;
	if ((rc = store__batch_write_gpu(c, b, &ids, r)) || (rc = store__batch_write_os(c, b, &ids, r)))
		goto cleanup;
cleanup:
	free(objects);
	free(processes);
	free(stacks);
	free(counters);
	return rc;
}

int store__sqlite_batch_put(struct store *base, const struct sysom_batch *b, uint64_t content_hash,
			    int64_t received_ns, struct store_put_result *res)
{
	struct sqlite_store *s = store__sqlite(base);
	struct store_put_result r = { 0 };
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	struct conn *c;
	int rc;

	store__hex(b->node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	if ((rc = store__write_begin(s, &c)))
		return rc;
	if ((rc = batch_find(c, node_hex, b->agent_epoch, b->sequence, &r.existing)))
		goto cleanup;
	if (r.existing.exists) {
		/* An unknown hash (stored before schema 5) cannot be compared: a duplicate. */
		r.conflict = r.existing.hash_known && r.existing.content_hash != content_hash;
		r.duplicate = !r.conflict;
		goto cleanup; /* rc == 0: nothing to commit, the read-only transaction is rolled back */
	}
	rc = batch_write(c, b, node_hex, content_hash, received_ns, &r);
cleanup:
	rc = store__write_end(s, c, rc, !r.existing.exists);
	if (!rc)
		*res = r;
	return rc;
}

int store__sqlite_batch_find(struct store *base, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
			     uint64_t epoch, uint64_t sequence, struct store_batch_record *out)
{
	struct sqlite_store *s = store__sqlite(base);
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	struct conn *c = store__reader_acquire(s);
	int rc;

	store__hex(node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	rc = batch_find(c, node_hex, epoch, sequence, out);
	store__reader_release(s, c);
	return rc;
}
