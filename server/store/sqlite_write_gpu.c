/* SPDX-License-Identifier: Apache-2.0 */
/* Storing a batch's training-job rows in SQLite: ranks, communicators, NCCL, GPU kernels. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/store/nccl_chunk.h"
#include "server/store/sqlite_internal.h"

/* Attributes follow the newest window (batches may arrive out of order). */
static const char job_rank_upsert_sql[] =
	"INSERT INTO job_ranks (process, node, job, rank, world_size, local_rank,"
	" local_world_size, group_rank, source, job_id_source, master, groups, first_seen_ns,"
	" last_seen_ns, role, rank_pid, gpu_device)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
	" ON CONFLICT (process) DO UPDATE SET"
	/* a newer window that does not know the GPU keeps the one known */
	" gpu_device = iif(excluded.last_seen_ns >= last_seen_ns AND excluded.gpu_device >= 0,"
	"   excluded.gpu_device, gpu_device),"
	" role = iif(excluded.last_seen_ns >= last_seen_ns, excluded.role, role),"
	" rank_pid = iif(excluded.last_seen_ns >= last_seen_ns, excluded.rank_pid, rank_pid),"
	" job = iif(excluded.last_seen_ns >= last_seen_ns, excluded.job, job),"
	" rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.rank, rank),"
	" world_size = iif(excluded.last_seen_ns >= last_seen_ns, excluded.world_size, world_size),"
	" local_rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.local_rank, local_rank),"
	" local_world_size = iif(excluded.last_seen_ns >= last_seen_ns,"
	"   excluded.local_world_size, local_world_size),"
	" group_rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.group_rank, group_rank),"
	" source = iif(excluded.last_seen_ns >= last_seen_ns, excluded.source, source),"
	" job_id_source = iif(excluded.last_seen_ns >= last_seen_ns, excluded.job_id_source,"
	"   job_id_source),"
	" master = iif(excluded.last_seen_ns >= last_seen_ns, excluded.master, master),"
	" groups = iif(excluded.last_seen_ns >= last_seen_ns, excluded.groups, groups),"
	" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
	" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)";
/* The newest window's identity wins; a name learnt once is not forgotten by a later batch
 * that lacks it (the pod log directory may go before the process). */
static const char identity_upsert_sql[] =
	"INSERT INTO process_identities (process, node, runtime, container_id, pod_uid,"
	" namespace, pod_name, container_name, slurm_job, slurm_step, unit, last_seen_ns)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
	" ON CONFLICT (process) DO UPDATE SET"
	" runtime = iif(excluded.last_seen_ns >= last_seen_ns, excluded.runtime, runtime),"
	" container_id = iif(excluded.last_seen_ns >= last_seen_ns, excluded.container_id,"
	"   container_id),"
	" pod_uid = iif(excluded.last_seen_ns >= last_seen_ns, excluded.pod_uid, pod_uid),"
	" namespace = iif(excluded.namespace != '', excluded.namespace, namespace),"
	" pod_name = iif(excluded.pod_name != '', excluded.pod_name, pod_name),"
	" container_name = iif(excluded.container_name != '', excluded.container_name,"
	"   container_name),"
	" slurm_job = iif(excluded.last_seen_ns >= last_seen_ns, excluded.slurm_job, slurm_job),"
	" slurm_step = iif(excluded.last_seen_ns >= last_seen_ns, excluded.slurm_step,"
	"   slurm_step),"
	" unit = iif(excluded.last_seen_ns >= last_seen_ns, excluded.unit, unit),"
	" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)";
static const char communicator_upsert_sql[] =
	"INSERT INTO communicators (process, key, node, rank, nranks, parent_key, split_color,"
	" split_key, split_ordinal, key_source, comm_hash, handle, created_ns, destroyed,"
	" first_seen_ns, last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
	" ?12, ?13, ?14, ?15, ?16)"
	" ON CONFLICT (process, key) DO UPDATE SET"
	" rank = iif(excluded.rank >= 0, excluded.rank, rank),"
	" nranks = iif(excluded.nranks >= 1, excluded.nranks, nranks),"
	" parent_key = iif(excluded.parent_key != 0, excluded.parent_key, parent_key),"
	" split_color = iif(excluded.split_color != -1, excluded.split_color, split_color),"
	" split_key = iif(excluded.split_key != -1, excluded.split_key, split_key),"
	" split_ordinal = iif(excluded.split_ordinal != 0, excluded.split_ordinal, split_ordinal),"
	" key_source = excluded.key_source,"
	" comm_hash = iif(excluded.comm_hash != 0, excluded.comm_hash, comm_hash),"
	" handle = excluded.handle,"
	" created_ns = iif(excluded.created_ns != 0, excluded.created_ns, created_ns),"
	" destroyed = max(destroyed, excluded.destroyed),"
	" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
	" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)";
static const char nccl_chunk_insert_sql[] =
	"INSERT INTO nccl_call_chunks (node, process, comm_key, op, seq_min, seq_max, entry_min_ns,"
	" entry_max_ns, calls, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
static const char launch_insert_sql[] =
	"INSERT INTO launches (time_ms, node, process, function, kernel_name, user_stack,"
	" kernel_stack, count, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem,"
	" flags) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";
static const char gpu_kernel_insert_sql[] =
	"INSERT INTO gpu_kernels (time_ms, node, process, name, device, stream, count, total_ns,"
	" min_ns, max_ns, hist) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
static const char nccl_profile_insert_sql[] =
	"INSERT INTO nccl_profiles (time_ms, node, process, comm_id, comm_name, rank, nranks,"
	" func, algo, proto, datatype, peer, nchannels, count, bytes, kernel_timed,"
	" kernel_ns_total, kernel_ns_min, kernel_ns_max, span_timed, span_ns_total,"
	" enqueue_ns_total, transfers, transfer_bytes, first_seq, last_seq) VALUES (?1, ?2,"
	" ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,"
	" ?21, ?22, ?23, ?24, ?25, ?26)";
static const char nccl_link_insert_sql[] =
	"INSERT INTO nccl_links (time_ms, node, process, comm_id, rank, peer, channel,"
	" transfers, bytes, time_ns_total, sx, sy, sxx, sxy, syy, min_latency_ns,"
	" min_bytes_per_ns, min_r2, min_points) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
	" ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)";

/* The batch window end in ms: the time of per-window rows. */
static sqlite3_int64 window_end_ms(const struct sysom_batch *b)
{
	return store__clamp(b->window_end_ns / 1000000);
}

static int job_rank_upsert(struct conn *c, const struct sysom_batch *b, const struct sysom_job_rank *j,
			   const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = job_rank_upsert_sql,
		.args = STORE__ARGS(
			STORE__INT(ids->processes[j->process]), STORE__INT(ids->node),
			STORE__TEXT(sysom_batch_string(b, j->job)), STORE__INT(j->rank),
			STORE__INT(j->world_size), STORE__INT(j->local_rank),
			STORE__INT(j->local_world_size), STORE__INT(j->group_rank),
			STORE__INT(j->source), STORE__TEXT(sysom_batch_string(b, j->job_id_source)),
			STORE__TEXT(sysom_batch_string(b, j->master)),
			STORE__TEXT(sysom_batch_string(b, j->groups)),
			STORE__INT(store__clamp(b->window_start_ns)),
			STORE__INT(store__clamp(b->window_end_ns)), STORE__INT(j->role),
			STORE__INT(j->rank_pid), STORE__INT((int)j->gpu_device - 1)) });
}

static int identity_upsert(struct conn *c, const struct sysom_batch *b,
			   const struct sysom_identity *id, const struct store__batch_ids *ids)
{
	const char *runtime = sysom_runtime_name(id->runtime);

	return store__query(c, &(struct store__query){
		.sql = identity_upsert_sql,
		.args = STORE__ARGS(
			STORE__INT(ids->processes[id->process]), STORE__INT(ids->node),
			STORE__TEXT(runtime ? runtime : ""),
			STORE__TEXT(sysom_batch_string(b, id->container_id)),
			STORE__TEXT(sysom_batch_string(b, id->pod_uid)),
			STORE__TEXT(sysom_batch_string(b, id->pod_namespace)),
			STORE__TEXT(sysom_batch_string(b, id->pod_name)),
			STORE__TEXT(sysom_batch_string(b, id->container_name)),
			STORE__INT(store__clamp(id->slurm_job)),
			STORE__TEXT(sysom_batch_string(b, id->slurm_step)),
			STORE__TEXT(sysom_batch_string(b, id->unit)),
			STORE__INT(store__clamp(b->window_end_ns))) });
}

static int communicator_upsert(struct conn *c, const struct sysom_batch *b,
			       const struct sysom_communicator *m, const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = communicator_upsert_sql,
		.args = STORE__ARGS(
			STORE__INT(ids->processes[m->process]), STORE__INT(store__i64(m->key)),
			STORE__INT(ids->node), STORE__INT(m->rank), STORE__INT(m->nranks),
			STORE__INT(store__i64(m->parent_key)), STORE__INT(m->split_color),
			STORE__INT(m->split_key), STORE__INT(m->split_ordinal),
			STORE__INT(m->key_source), STORE__INT(store__i64(m->nccl_comm_hash)),
			STORE__INT(store__i64(m->handle)), STORE__INT(store__clamp(m->created_ns)),
			STORE__INT((m->flags & SYSOM_COMM_DESTROYED) ? 1 : 0),
			STORE__INT(store__clamp(b->window_start_ns)),
			STORE__INT(store__clamp(b->window_end_ns))) });
}

/* The store's order of a batch's calls: by chunk group (process, communicator, op), then
 * entry time, then arrival (a stable order: ties keep the batch's). calls_order groups them;
 * call_ref_cmp orders the calls of one group. */
struct call_ref {
	const struct sysom_nccl_call *k;
	uint32_t index;
};

static int call_ref_cmp(const void *x, const void *y)
{
	const struct call_ref *a = x, *b = y;

	if (a->k->entry_ns != b->k->entry_ns)
		return a->k->entry_ns < b->k->entry_ns ? -1 : 1;
	return (a->index > b->index) - (a->index < b->index);
}

/* A chunk group of a batch: its calls' (process, communicator, op). */
struct call_group {
	uint32_t process;
	uint64_t comm_key;
	uint8_t op;
	uint32_t count, first; /* calls; where they start in the ordered refs */
	uint64_t last_entry;
	bool unsorted;         /* its calls are not in entry order in the batch */
};

struct group_probe {
	const struct call_group *groups;
	const struct sysom_nccl_call *k;
};

static bool group_eq(const void *ctx, uint32_t value)
{
	const struct group_probe *p = ctx;
	const struct call_group *g = &p->groups[value];

	return g->process == p->k->process && g->comm_key == p->k->comm_key && g->op == p->k->op;
}

static int group_cmp(const void *x, const void *y)
{
	const struct call_group *a = x, *b = y;

	if (a->process != b->process)
		return a->process < b->process ? -1 : 1;
	if (a->comm_key != b->comm_key)
		return a->comm_key < b->comm_key ? -1 : 1;
	return (a->op > b->op) - (a->op < b->op);
}

/*
 * Puts the returned calls of `b` in the store's order (call_ref_cmp) into refs[0..*nrefs):
 * groups found by hashing, the calls placed group by group in batch order (a stable counting
 * sort), and only a group whose calls are not already in entry order is sorted; an agent's
 * calls mostly are, and sorting all ~26,000 of a batch took a tenth of the ingest time.
 */
static int calls_order(const struct sysom_batch *b, struct call_ref *refs, size_t *nrefs)
{
	struct hash_index index = { 0 };
	struct call_group *groups = NULL;
	uint32_t *group_of = NULL, *rank_of = NULL;
	size_t ngroups = 0, cap = 0, n = 0;
	int rc;

	if (!(group_of = malloc(sizeof(*group_of) * b->nccl_call_count))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = hash_index_init(&index, 64)))
		goto cleanup;
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		const struct sysom_nccl_call *k = &b->nccl_calls[i];
		if (k->flags & SYSOM_NCCL_IN_FLIGHT) {
			group_of[i] = UINT32_MAX;
			continue;
		}
		uint64_t h = sysom_hash_mix(sysom_hash_mix(k->process, k->comm_key), k->op);
		struct group_probe probe = { groups, k };
		uint32_t g = hash_index_find(&index, h, group_eq, &probe);
		if (g == HASH_INDEX_NONE) {
			if (SYSOM_ARRAY_RESERVE(groups, cap, ngroups, 16)) {
				rc = -ENOMEM;
				goto cleanup;
			}
			g = (uint32_t)ngroups++;
			groups[g] = (struct call_group){ .process = k->process, .comm_key = k->comm_key,
							 .op = k->op };
			if ((rc = hash_index_insert(&index, h, g)))
				goto cleanup;
		}
		struct call_group *gr = &groups[g];
		gr->unsorted |= gr->count && k->entry_ns < gr->last_entry;
		gr->last_entry = k->entry_ns;
		gr->count++;
		group_of[i] = g;
		n++;
	}
	/* The groups in (process, communicator, op) order: rank_of[original index] = place. */
	if (!(rank_of = malloc(sizeof(*rank_of) * (ngroups + 1)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t g = 0; g < ngroups; g++)
		groups[g].first = (uint32_t)g; /* the original index, through the sort */
	if (ngroups)
		qsort(groups, ngroups, sizeof(*groups), group_cmp);
	uint32_t at = 0;
	for (size_t g = 0; g < ngroups; g++) {
		rank_of[groups[g].first] = (uint32_t)g;
		groups[g].first = at;
		at += groups[g].count;
	}
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		uint32_t g = group_of[i];
		if (g == UINT32_MAX)
			continue;
		g = rank_of[g];
		refs[groups[g].first++] = (struct call_ref){ &b->nccl_calls[i], i };
	}
	for (size_t g = 0; g < ngroups; g++) {
		groups[g].first -= groups[g].count;
		if (groups[g].unsorted)
			qsort(refs + groups[g].first, groups[g].count, sizeof(*refs), call_ref_cmp);
	}
	*nrefs = n;
	rc = 0;
cleanup:
	hash_index_free(&index);
	free(rank_of);
	free(group_of);
	free(groups);
	return rc;
}

/*
 * Cuts a stream of calls, in the store's order, into nccl_call_chunks rows: a chunk holds one
 * (node, process, communicator, op) and ends where it would pass NCCL_CHUNK_MAX_CALLS calls,
 * NCCL_CHUNK_MAX_SEQ_SPAN sequence numbers or NCCL_CHUNK_MAX_ENTRY_SPAN_NS of entry times (the
 * bounds the readers' index ranges rely on). Used by the writer and by migration 13.
 */
struct chunk_builder {
	struct conn *c;
	struct nccl_chunk_call *calls; /* NCCL_CHUNK_MAX_CALLS */
	size_t n;
	sqlite3_int64 node, process;
	uint64_t comm_key;
	uint8_t op;
	uint64_t seq_min, seq_max, entry_min, entry_max; /* of calls[0..n) */
	struct byte_buf blob;
};

static int chunk_builder_init(struct chunk_builder *cb, struct conn *c)
{
	*cb = (struct chunk_builder){ .c = c };
	return (cb->calls = malloc(sizeof(*cb->calls) * NCCL_CHUNK_MAX_CALLS)) ? 0 : -ENOMEM;
}

static void chunk_builder_free(struct chunk_builder *cb)
{
	byte_buf_free(&cb->blob);
	free(cb->calls);
	cb->calls = NULL;
}

/* Writes the calls gathered so far as one row. */
static int chunk_builder_flush(struct chunk_builder *cb)
{
	int rc;

	if (!cb->n)
		return 0;
	cb->blob.len = 0;
	if ((rc = nccl_chunk_encode(cb->calls, cb->n, &cb->blob)))
		return rc;
	rc = store__query(cb->c, &(struct store__query){
		.sql = nccl_chunk_insert_sql,
		.args = STORE__ARGS(STORE__INT(cb->node), STORE__INT(cb->process),
				    STORE__INT(store__i64(cb->comm_key)), STORE__INT(cb->op),
				    STORE__INT(store__clamp(cb->seq_min)),
				    STORE__INT(store__clamp(cb->seq_max)),
				    STORE__INT(store__clamp(cb->entry_min)),
				    STORE__INT(store__clamp(cb->entry_max)), STORE__INT(cb->n),
				    STORE__BLOB(cb->blob.data, cb->blob.len)) });
	cb->n = 0;
	return rc;
}

static int chunk_builder_add(struct chunk_builder *cb, sqlite3_int64 node, sqlite3_int64 process,
			     uint64_t comm_key, uint8_t op, const struct nccl_chunk_call *k)
{
	int rc;

	if (cb->n) {
		uint64_t seq_lo = k->seq < cb->seq_min ? k->seq : cb->seq_min;
		uint64_t seq_hi = k->seq > cb->seq_max ? k->seq : cb->seq_max;
		uint64_t entry_lo = k->entry_ns < cb->entry_min ? k->entry_ns : cb->entry_min;
		uint64_t entry_hi = k->entry_ns > cb->entry_max ? k->entry_ns : cb->entry_max;
		bool same = node == cb->node && process == cb->process && comm_key == cb->comm_key &&
			    op == cb->op;
		if (!same || cb->n == NCCL_CHUNK_MAX_CALLS || seq_hi - seq_lo > NCCL_CHUNK_MAX_SEQ_SPAN ||
		    entry_hi - entry_lo > (uint64_t)NCCL_CHUNK_MAX_ENTRY_SPAN_NS) {
			if ((rc = chunk_builder_flush(cb)))
				return rc;
		} else {
			cb->seq_min = seq_lo, cb->seq_max = seq_hi;
			cb->entry_min = entry_lo, cb->entry_max = entry_hi;
		}
	}
	if (!cb->n) {
		cb->node = node, cb->process = process, cb->comm_key = comm_key, cb->op = op;
		cb->seq_min = cb->seq_max = k->seq;
		cb->entry_min = cb->entry_max = k->entry_ns;
	}
	cb->calls[cb->n++] = *k;
	return 0;
}

/* Stores the returned calls of `b` (in-flight ones are stored when they come again) as chunks,
 * one or more per (process, communicator, op) of the batch. */
static int nccl_calls_insert(struct conn *c, const struct sysom_batch *b,
			     const struct store__batch_ids *ids)
{
	struct call_ref *refs = NULL;
	struct chunk_builder cb = { 0 };
	size_t nrefs = 0;
	int rc;

	if (!b->nccl_call_count)
		return 0;
	if ((rc = chunk_builder_init(&cb, c)))
		goto cleanup;
	if (!(refs = malloc(sizeof(*refs) * b->nccl_call_count))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = calls_order(b, refs, &nrefs)))
		goto cleanup;
	for (size_t i = 0; i < nrefs; i++) {
		const struct sysom_nccl_call *k = refs[i].k;
		struct nccl_chunk_call call;
		nccl_chunk_call_from_wire(k, &call);
		if ((rc = chunk_builder_add(&cb, ids->node, ids->processes[k->process], k->comm_key,
					    k->op, &call)))
			goto cleanup;
	}
	rc = chunk_builder_flush(&cb);
cleanup:
	chunk_builder_free(&cb);
	free(refs);
	return rc;
}

/* ---- schema 13: the per-call rows of older databases become chunks -------------------------- */

static int chunk_convert_row(void *ctx, sqlite3_stmt *st)
{
	struct chunk_builder *cb = ctx;
	struct nccl_chunk_call k = {
		.seq = store__u64(sqlite3_column_int64(st, 4)),
		.entry_ns = (uint64_t)sqlite3_column_int64(st, 5),
		.exit_ns = (uint64_t)sqlite3_column_int64(st, 6),
		.tid = (uint32_t)sqlite3_column_int64(st, 7),
		.count = (uint64_t)sqlite3_column_int64(st, 8),
		.bytes = (uint64_t)sqlite3_column_int64(st, 9),
		.peer = sqlite3_column_int(st, 10),
		.result = sqlite3_column_int(st, 11),
		.rank = sqlite3_column_int(st, 12),
		.datatype = (uint8_t)sqlite3_column_int(st, 13),
		.redop = (uint8_t)sqlite3_column_int(st, 14),
		.flags = (uint8_t)sqlite3_column_int(st, 15),
		.stream = store__u64(sqlite3_column_int64(st, 16)),
	};

	return chunk_builder_add(cb, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
				 store__u64(sqlite3_column_int64(st, 2)),
				 (uint8_t)sqlite3_column_int(st, 3), &k);
}

int store__nccl_calls_to_chunks(struct conn *c)
{
	struct chunk_builder cb;
	int rc;

	if ((rc = chunk_builder_init(&cb, c)))
		goto cleanup;
	rc = store__query(c, &(struct store__query){
		.sql = "SELECT node, process, comm_key, op, seq, entry_ns, exit_ns, tid, count, bytes,"
		       " peer, result, rank, datatype, redop, flags, stream FROM nccl_calls"
		       " ORDER BY process, comm_key, op, entry_ns, id",
		.once = true, .row = chunk_convert_row, .ctx = &cb });
	if (!rc)
		rc = chunk_builder_flush(&cb);
	if (!rc)
		rc = store__conn_exec(c, "DROP TABLE nccl_calls");
cleanup:
	chunk_builder_free(&cb);
	return rc;
}

static int launch_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_launch *l,
			 const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = launch_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(window_end_ms(b)), STORE__INT(ids->node),
			STORE__INT(ids->processes[l->process]), STORE__INT(store__i64(l->function)),
			STORE__TEXT(sysom_batch_string(b, l->kernel_name)),
			l->user_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[l->user_stack])
							 : STORE__SKIP,
			l->kernel_stack != SYSOM_WIRE_NONE ? STORE__INT(ids->stacks[l->kernel_stack])
							   : STORE__SKIP,
			STORE__INT(store__clamp(l->count)), STORE__INT(l->grid[0]),
			STORE__INT(l->grid[1]), STORE__INT(l->grid[2]), STORE__INT(l->block[0]),
			STORE__INT(l->block[1]), STORE__INT(l->block[2]), STORE__INT(l->shared_mem),
			STORE__INT(l->flags)) });
}

static int gpu_kernel_insert(struct conn *c, const struct sysom_batch *b,
			     const struct sysom_gpu_kernel *k, const struct store__batch_ids *ids)
{
	uint8_t hist[4 * SYSOM_GPU_HIST_BUCKETS];

	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		store_le32(hist + 4 * i, k->hist[i]);
	return store__query(c, &(struct store__query){
		.sql = gpu_kernel_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(window_end_ms(b)), STORE__INT(ids->node),
			STORE__INT(ids->processes[k->process]),
			STORE__TEXT(sysom_batch_string(b, k->name)), STORE__INT(k->device),
			STORE__INT(store__i64(k->stream)), STORE__INT(store__clamp(k->count)),
			STORE__INT(store__clamp(k->total_ns)), STORE__INT(store__clamp(k->min_ns)),
			STORE__INT(store__clamp(k->max_ns)), STORE__BLOB(hist, sizeof(hist))) });
}

static int nccl_profile_insert(struct conn *c, const struct sysom_batch *b,
			       const struct sysom_nccl_profile *p, const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = nccl_profile_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(window_end_ms(b)), STORE__INT(ids->node),
			STORE__INT(ids->processes[p->process]), STORE__INT(store__i64(p->comm_id)),
			STORE__TEXT(sysom_batch_string(b, p->comm_name)), STORE__INT(p->rank),
			STORE__INT(p->nranks), STORE__TEXT(sysom_batch_string(b, p->func)),
			STORE__TEXT(sysom_batch_string(b, p->algo)),
			STORE__TEXT(sysom_batch_string(b, p->proto)),
			STORE__TEXT(sysom_batch_string(b, p->datatype)), STORE__INT(p->peer),
			STORE__INT(p->nchannels), STORE__INT(store__clamp(p->count)),
			STORE__INT(store__clamp(p->bytes)), STORE__INT(store__clamp(p->kernel_timed)),
			STORE__INT(store__clamp(p->kernel_ns_total)),
			STORE__INT(store__clamp(p->kernel_ns_min)),
			STORE__INT(store__clamp(p->kernel_ns_max)),
			STORE__INT(store__clamp(p->span_timed)),
			STORE__INT(store__clamp(p->span_ns_total)),
			STORE__INT(store__clamp(p->enqueue_ns_total)),
			STORE__INT(store__clamp(p->transfers)),
			STORE__INT(store__clamp(p->transfer_bytes)),
			STORE__INT(store__clamp(p->first_seq)),
			STORE__INT(store__clamp(p->last_seq))) });
}

/* NaN (no MIN-mode fit) is stored as NULL. */
static struct store__arg real_or_null(double v)
{
	return v == v ? STORE__REAL(v) : STORE__NULL;
}

static int nccl_link_insert(struct conn *c, const struct sysom_batch *b,
			    const struct sysom_nccl_link *l, const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = nccl_link_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(window_end_ms(b)), STORE__INT(ids->node),
			STORE__INT(ids->processes[l->process]), STORE__INT(store__i64(l->comm_id)),
			STORE__INT(l->rank), STORE__INT(l->peer), STORE__INT(l->channel),
			STORE__INT(store__clamp(l->transfers)), STORE__INT(store__clamp(l->bytes)),
			STORE__INT(store__clamp(l->time_ns_total)), STORE__REAL(l->sx),
			STORE__REAL(l->sy), STORE__REAL(l->sxx), STORE__REAL(l->sxy),
			STORE__REAL(l->syy), real_or_null(l->min_latency_ns),
			real_or_null(l->min_bytes_per_ns), real_or_null(l->min_r2),
			STORE__INT(l->min_points)) });
}

static const char gpu_health_sql[] =
	"INSERT OR REPLACE INTO gpu_health (node, window_start_ns, window_end_ns, device, uuid,"
	" pci_bus_id, name, samples, slowdown_samples, reasons_any, reasons_last, sm_clock_min,"
	" sm_clock_last, sm_clock_max, mem_clock_last, mem_clock_max, temp_max, temp_last,"
	" temp_slowdown, temp_shutdown, power_max_mw, power_last_mw, power_limit_mw, util_gpu,"
	" util_mem, ecc_corrected, ecc_uncorrected, retired_sbe, retired_dbe, pcie_replays, flags,"
	" nvlink_errors, xid_count, xid_last) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
	" ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27,"
	" ?28, ?29, ?30, ?31, ?32, ?33, ?34)";

#define U32(v) ((v) == SYSOM_GPU_UNKNOWN ? STORE__NULL : STORE__INT(v))
#define U64(v) ((v) == SYSOM_GPU_UNKNOWN64 ? STORE__NULL : STORE__INT(store__clamp(v)))

static int gpu_health_insert(struct conn *c, const struct sysom_batch *b,
			     const struct sysom_gpu_health *g, const struct store__batch_ids *ids)
{
	return store__query(c, &(struct store__query){
		.sql = gpu_health_sql,
		.args = STORE__ARGS(
			STORE__INT(ids->node), STORE__INT(store__clamp(b->window_start_ns)),
			STORE__INT(store__clamp(b->window_end_ns)), STORE__INT(g->device),
			STORE__TEXT(sysom_batch_string(b, g->uuid)),
			STORE__TEXT(sysom_batch_string(b, g->pci_bus_id)),
			STORE__TEXT(sysom_batch_string(b, g->name)), STORE__INT(g->samples),
			STORE__INT(g->slowdown_samples), U64(g->reasons_any), U64(g->reasons_last),
			U32(g->sm_clock_min), U32(g->sm_clock_last), U32(g->sm_clock_max),
			U32(g->mem_clock_last), U32(g->mem_clock_max), U32(g->temp_max),
			U32(g->temp_last), U32(g->temp_slowdown), U32(g->temp_shutdown),
			U32(g->power_max_mw), U32(g->power_last_mw), U32(g->power_limit_mw),
			U32(g->util_gpu), U32(g->util_mem), U64(g->ecc_corrected),
			U64(g->ecc_uncorrected), U32(g->retired_sbe), U32(g->retired_dbe),
			U32(g->pcie_replays), STORE__INT(g->flags), U64(g->nvlink_errors),
			STORE__INT(g->xid_count), STORE__INT(g->xid_last)) });
}

#undef U32
#undef U64

int store__batch_write_gpu(struct conn *c, const struct sysom_batch *b,
			   const struct store__batch_ids *ids, struct store_put_result *r)
{
	int rc;

	for (uint32_t i = 0; i < b->job_rank_count; i++)
		if ((rc = job_rank_upsert(c, b, &b->job_ranks[i], ids)))
			return rc;
	r->job_ranks = b->job_rank_count;
	for (uint32_t i = 0; i < b->identity_count; i++)
		if ((rc = identity_upsert(c, b, &b->identities[i], ids)))
			return rc;
	for (uint32_t i = 0; i < b->gpu_health_count; i++)
		if ((rc = gpu_health_insert(c, b, &b->gpu_health[i], ids)))
			return rc;
	/* A repeated (process, key) updates the row: the last record wins. */
	for (uint32_t i = 0; i < b->communicator_count; i++)
		if ((rc = communicator_upsert(c, b, &b->communicators[i], ids)))
			return rc;
	r->communicators = b->communicator_count;
	/* In-flight calls are stored once they return (they come again then): only the monitor's
	 * hang detector reads them, from memory. */
	if ((rc = nccl_calls_insert(c, b, ids)))
		return rc;
	r->nccl_calls = b->nccl_call_count;
	for (uint32_t i = 0; i < b->launch_count; i++) {
		const struct sysom_launch *l = &b->launches[i];

		if ((rc = launch_insert(c, b, l, ids)))
			return rc;
		r->launches = l->count > UINT64_MAX - r->launches ? UINT64_MAX : r->launches + l->count;
	}
	r->launch_rows = b->launch_count;
	for (uint32_t i = 0; i < b->gpu_kernel_count; i++)
		if ((rc = gpu_kernel_insert(c, b, &b->gpu_kernels[i], ids)))
			return rc;
	r->gpu_kernel_rows = b->gpu_kernel_count;
	for (uint32_t i = 0; i < b->nccl_profile_count; i++)
		if ((rc = nccl_profile_insert(c, b, &b->nccl_profiles[i], ids)))
			return rc;
	r->nccl_profile_rows = b->nccl_profile_count;
	for (uint32_t i = 0; i < b->nccl_link_count; i++)
		if ((rc = nccl_link_insert(c, b, &b->nccl_links[i], ids)))
			return rc;
	r->nccl_link_rows = b->nccl_link_count;
	return 0;
}
