/* SPDX-License-Identifier: Apache-2.0 */
/* Dispatch of the public store calls to the backend's vtable. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/store_impl.h"

void store_close(struct store *s)
{
	if (s)
		s->ops->close(s);
}

int store_schema_version(struct store *s)
{
	return s->ops->schema_version(s);
}

int store_batch_put(struct store *s, const struct sysom_batch *b, uint64_t content_hash,
		    int64_t received_ns, struct store_put_result *res)
{
	return s->ops->batch_put(s, b, content_hash, received_ns, res);
}

int store_batch_find(struct store *s, const uint8_t node_id[SYSOM_NODE_ID_SIZE], uint64_t epoch,
		     uint64_t sequence, struct store_batch_record *out)
{
	return s->ops->batch_find(s, node_id, epoch, sequence, out);
}

int store_ksyms_put(struct store *s, const uint8_t *build_id, size_t build_id_len,
		    const struct store_ksym *syms, size_t count, int64_t uploaded_ns, bool *created)
{
	return s->ops->ksyms_put(s, build_id, build_id_len, syms, count, uploaded_ns, created);
}

int store_ksyms_count(struct store *s, const uint8_t *build_id, size_t build_id_len,
		      uint64_t *count)
{
	return s->ops->ksyms_count(s, build_id, build_id_len, count);
}

int store_ksym_range_get(struct store *s, const uint8_t *build_id, size_t build_id_len,
			 uint64_t offset, struct store_ksym_range *out)
{
	return s->ops->ksym_range_get(s, build_id, build_id_len, offset, out);
}

void store_ksym_range_release(struct store_ksym_range *r)
{
	if (!r)
		return;
	free(r->floor_name);
	r->floor_name = NULL;
}

int store_ksyms_usage_get(struct store *s, struct store_ksyms_usage *out)
{
	return s->ops->ksyms_usage_get(s, out);
}

int store_object_get(struct store *s, int64_t id, struct store_object *out)
{
	return s->ops->object_get(s, id, out);
}

void store_object_release(struct store_object *o)
{
	if (!o)
		return;
	free(o->name);
	o->name = NULL;
}

int store_stack_get(struct store *s, int64_t id, struct store_stack **out)
{
	return s->ops->stack_get(s, id, out);
}

int store_nodes_list(struct store *s, store_node_fn fn, void *arg)
{
	return s->ops->nodes_list(s, fn, arg);
}

bool store_filter_has_identity(const struct store_sample_filter *f)
{
	return f->pod_namespace || f->pod || f->container || f->unit || f->has_slurm_job;
}

/* A backend that stores no identities cannot filter by them: it says so rather than answer
 * unfiltered. */
#define IDENTITY_GUARD(s, f)                                                                   \
	do {                                                                                   \
		if (store_filter_has_identity(f) && !(s)->ops->identities)                    \
			return -ENOTSUP;                                                       \
	} while (0)

int store_processes_list(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			 store_process_fn fn, void *arg)
{
	IDENTITY_GUARD(s, f);
	return s->ops->processes_list(s, f, limit, fn, arg);
}

int store_stacks_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			   store_stack_count_fn fn, void *arg, uint64_t *total)
{
	IDENTITY_GUARD(s, f);
	return s->ops->stacks_aggregate(s, f, limit, fn, arg, total);
}

int store_counters_list(struct store *s, store_counter_fn fn, void *arg)
{
	return s->ops->counters_list(s, fn, arg);
}

int store_launches_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			     store_launch_count_fn fn, void *arg, uint64_t *total)
{
	IDENTITY_GUARD(s, f);
	return s->ops->launches_aggregate(s, f, limit, fn, arg, total);
}

int store_jobs_list(struct store *s, uint32_t limit, store_job_fn fn, void *arg)
{
	return s->ops->jobs_list(s, limit, fn, arg);
}

int store_jobs_list_identity(struct store *s, const struct store_sample_filter *f,
			     uint32_t limit, store_job_fn fn, void *arg)
{
	if (!s->ops->jobs_list_identity)
		return -ENOTSUP;
	return s->ops->jobs_list_identity(s, f, limit, fn, arg);
}

int store_gpu_health_list(struct store *s, const char *node, int64_t from_ms, int64_t to_ms,
			  uint32_t limit, store_gpu_health_fn fn, void *arg)
{
	if (!s->ops->gpu_health_list)
		return -ENOTSUP;
	return s->ops->gpu_health_list(s, node, from_ms, to_ms, limit, fn, arg);
}

int store_job_ranks_list(struct store *s, const char *job, uint32_t limit, store_job_rank_fn fn,
			 void *arg)
{
	return s->ops->job_ranks_list(s, job, limit, fn, arg);
}

int store_job_communicators_list(struct store *s, const char *job, uint32_t limit,
				 store_job_communicator_fn fn, void *arg)
{
	return s->ops->job_communicators_list(s, job, limit, fn, arg);
}

int store_collectives_list(struct store *s, const struct store_collective_filter *f,
			   uint32_t max_instances, store_collective_fn fn, void *arg)
{
	return store__collectives_read(s, f, max_instances, fn, arg);
}

int store_ping(struct store *s)
{
	return s->ops->ping(s);
}

int store_size_get(struct store *s, uint64_t *bytes)
{
	return s->ops->size_get(s, bytes);
}

int store_size_limit_set(struct store *s, uint64_t max_bytes)
{
	if (!s->ops->size_limit_set)
		return -ENOTSUP;
	return s->ops->size_limit_set(s, max_bytes);
}

int store_retention_apply(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
			  uint32_t *dropped)
{
	*dropped = 0;
	if (!s->ops->retention_apply)
		return -ENOTSUP;
	if (rollup_before_ms > before_ms)
		return -EINVAL;
	/* The NCCL instances first: the raw calls they are read from go next. */
	int rc = store__nccl_rollup_run(s, before_ms, NULL, NULL);
	if (rc)
		return rc;
	return s->ops->retention_apply(s, before_ms, rollup_before_ms, dropped);
}

int store_fleet_slots_run(struct store *s, int64_t now_ms, struct store_fleet_slots_pass *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->ops->fleet_slots_run)
		return -ENOTSUP;
	return s->ops->fleet_slots_run(s, now_ms, out);
}

int store_insert_groups_get(struct store *s, struct store_insert_groups *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->ops->insert_groups_get)
		return -ENOTSUP;
	return s->ops->insert_groups_get(s, out);
}

void store_rollup_raw_keep_set(struct store *s, int64_t raw_keep_ms)
{
	s->raw_keep_ms = raw_keep_ms > 0 ? raw_keep_ms : 0;
}

int store_job_gpu(struct store *s, const struct store_gpu_filter *f, uint32_t max_rows,
		  const struct store_gpu_visitor *v, bool *truncated)
{
	*truncated = false;
	return s->ops->job_gpu(s, f, max_rows, v, truncated);
}

int store_offcpu_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			   store_stack_count_fn fn, void *arg, uint64_t *total)
{
	*total = 0;
	IDENTITY_GUARD(s, f);
	return s->ops->offcpu_aggregate(s, f, limit, fn, arg, total);
}

int store_wall_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			 store_stack_count_fn fn, void *arg, uint64_t *total)
{
	*total = 0;
	IDENTITY_GUARD(s, f);
	return s->ops->wall_aggregate(s, f, limit, fn, arg, total);
}

int store_gpu_time_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			     store_gpu_time_fn fn, void *arg, uint64_t *total)
{
	*total = 0;
	IDENTITY_GUARD(s, f);
	return s->ops->gpu_time_aggregate(s, f, limit, fn, arg, total);
}

int store_job_os(struct store *s, const struct store_os_filter *f, uint32_t max_rows,
		 const struct store_os_visitor *v, bool *truncated)
{
	*truncated = false;
	return s->ops->job_os(s, f, max_rows, v, truncated);
}

int store_host_signals_list(struct store *s, const struct store_host_filter *f, uint32_t max_rows,
			    store_host_signal_fn fn, void *arg, bool *truncated)
{
	*truncated = false;
	if (!s->ops->host_signals_list)
		return -ENOTSUP;
	return s->ops->host_signals_list(s, f, max_rows, fn, arg, truncated);
}

int store_diagnosis_upsert(struct store *s, const struct store_diagnosis *d, int64_t *id,
			   bool *opened)
{
	*id = 0;
	*opened = false;
	return s->ops->diagnosis_upsert(s, d, id, opened);
}

int store_diagnosis_resolve(struct store *s, int64_t id, int64_t now_ms)
{
	return s->ops->diagnosis_resolve(s, id, now_ms);
}

int store_diagnoses_list(struct store *s, const struct store_diagnosis_filter *f, uint32_t limit,
			 store_diagnosis_fn fn, void *arg)
{
	return s->ops->diagnoses_list(s, f, limit, fn, arg);
}

int store_job_settings_get(struct store *s, const char *job, char **json)
{
	*json = NULL;
	return s->ops->job_settings_get(s, job, json);
}

int store_job_settings_put(struct store *s, const char *job, const char *json, int64_t now_ms)
{
	return s->ops->job_settings_put(s, job, json, now_ms);
}

int store_baseline_put(struct store *s, const struct store_baseline *b)
{
	return s->ops->baseline_put(s, b);
}

int store_baseline_get(struct store *s, const char *job,
		       int (*fn)(void *arg, const struct store_baseline *b), void *arg)
{
	return s->ops->baseline_get(s, job, fn, arg);
}

int store_replica_beat(struct store *s, const char *id, const char *url, int64_t started_ms,
		       uint64_t beat, bool departed)
{
	if (!s->ops->replica_beat)
		return -ENOTSUP;
	return s->ops->replica_beat(s, id, url, started_ms, beat, departed);
}

int store_replicas_list(struct store *s, uint32_t max_age_s, uint32_t limit,
			store_replica_fn fn, void *arg)
{
	if (!s->ops->replicas_list)
		return -ENOTSUP;
	return s->ops->replicas_list(s, max_age_s, limit, fn, arg);
}
