/* SPDX-License-Identifier: Apache-2.0 */
/* Storing a batch's training-job rows in SQLite: ranks, communicators, NCCL, GPU kernels. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static const char nccl_call_insert_sql[] =
	"INSERT INTO nccl_calls (node, process, tid, comm_key, op, seq, entry_ns, exit_ns,"
	" count, bytes, peer, result, rank, datatype, redop, flags, stream) VALUES (?1, ?2,"
	" ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";
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

/* The 17 parameters of one nccl_calls row, in nccl_call_insert_sql's order. */
#define NCCL_CALL_COLUMNS 17

static void nccl_call_args(const struct sysom_nccl_call *k, const struct store__batch_ids *ids,
			   struct store__arg *a)
{
	const struct store__arg row[NCCL_CALL_COLUMNS] = {
		STORE__INT(ids->node), STORE__INT(ids->processes[k->process]),
		STORE__INT(k->tid), STORE__INT(store__i64(k->comm_key)), STORE__INT(k->op),
		STORE__INT(store__i64(k->seq)), STORE__INT(store__clamp(k->entry_ns)),
		STORE__INT(store__clamp(k->exit_ns)), STORE__INT(store__clamp(k->count)),
		STORE__INT(store__clamp(k->bytes)), STORE__INT(k->peer), STORE__INT(k->result),
		STORE__INT(k->rank), STORE__INT(k->datatype), STORE__INT(k->redop),
		STORE__INT(k->flags), STORE__INT(store__i64(k->stream)),
	};

	memcpy(a, row, sizeof(row));
}

static int nccl_call_insert(struct conn *c, const struct sysom_nccl_call *k,
			    const struct store__batch_ids *ids)
{
	struct store__arg a[NCCL_CALL_COLUMNS];

	nccl_call_args(k, ids, a);
	return store__query(c, &(struct store__query){ .sql = nccl_call_insert_sql, .args = a,
						      .nargs = NCCL_CALL_COLUMNS });
}

/*
 * A batch carries tens of thousands of NCCL calls (25,836 per 30-s batch of the simulated
 * 8-rank job) and one statement per row spent an eighth of the ingest time starting and ending
 * statements (docs/PERFORMANCE.md): full groups of NCCL_CALLS_PER_INSERT rows go in one
 * multi-row INSERT (built once; cached per connection by its address like the literals), the
 * rest one by one.
 */
#define NCCL_CALLS_PER_INSERT 32
static char nccl_calls_multi_sql[sizeof(nccl_call_insert_sql) +
				 NCCL_CALLS_PER_INSERT * (2 * NCCL_CALL_COLUMNS + 2)];
static pthread_once_t nccl_calls_multi_once = PTHREAD_ONCE_INIT;

static void nccl_calls_multi_build(void)
{
	size_t n = (size_t)(strstr(nccl_call_insert_sql, " VALUES ") - nccl_call_insert_sql);
	char *p = nccl_calls_multi_sql;

	memcpy(p, nccl_call_insert_sql, n);
	p += n;
	p += sprintf(p, " VALUES ");
	for (int r = 0; r < NCCL_CALLS_PER_INSERT; r++) {
		*p++ = r ? ',' : '(';
		if (r)
			*p++ = '(';
		for (int col = 0; col < NCCL_CALL_COLUMNS; col++) {
			if (col)
				*p++ = ',';
			*p++ = '?';
		}
		*p++ = ')';
	}
	*p = '\0';
}

/* Inserts the returned calls of `b` (in-flight ones are stored when they come again). */
static int nccl_calls_insert(struct conn *c, const struct sysom_batch *b,
			     const struct store__batch_ids *ids)
{
	struct store__arg *a = NULL;
	uint32_t group = 0;
	int rc = 0;

	pthread_once(&nccl_calls_multi_once, nccl_calls_multi_build);
	if (b->nccl_call_count >= NCCL_CALLS_PER_INSERT &&
	    !(a = malloc(sizeof(*a) * NCCL_CALLS_PER_INSERT * NCCL_CALL_COLUMNS)))
		return -ENOMEM;
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		const struct sysom_nccl_call *k = &b->nccl_calls[i];

		if (k->flags & SYSOM_NCCL_IN_FLIGHT)
			continue;
		if (!a) {
			if ((rc = nccl_call_insert(c, k, ids)))
				goto cleanup;
			continue;
		}
		nccl_call_args(k, ids, a + (size_t)group * NCCL_CALL_COLUMNS);
		if (++group < NCCL_CALLS_PER_INSERT)
			continue;
		group = 0;
		if ((rc = store__query(c, &(struct store__query){
			     .sql = nccl_calls_multi_sql, .args = a,
			     .nargs = NCCL_CALLS_PER_INSERT * NCCL_CALL_COLUMNS })))
			goto cleanup;
	}
	/* The last, incomplete group: row by row, from the arguments already made. */
	for (uint32_t g = 0; g < group; g++)
		if ((rc = store__query(c, &(struct store__query){
			     .sql = nccl_call_insert_sql, .args = a + (size_t)g * NCCL_CALL_COLUMNS,
			     .nargs = NCCL_CALL_COLUMNS })))
			goto cleanup;
cleanup:
	free(a);
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
