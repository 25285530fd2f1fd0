/* SPDX-License-Identifier: Apache-2.0 */
/* The store vtable: what a storage backend implements (included by backends only). */
#ifndef SYSOM_SERVER_STORE_STORE_IMPL_H
#define SYSOM_SERVER_STORE_STORE_IMPL_H

#include "server/store/store.h"

/* ---- NCCL instance rollups (store_nccl_rollup.c, nccl_instance.h) ------------------------- */

/* The instances of one (job, communicator, op) whose first entry is in one minute, as the
 * rollup keeps them (several parts when they pass one blob's bounds). */
struct store__nccl_instances {
	const char *job;
	uint64_t comm_key;
	uint8_t op;
	int64_t minute_ns;      /* the minute (its start) of their first entries */
	uint32_t part;          /* 0, 1, ...: the minute's blobs in order */
	int64_t first_min_ns, first_max_ns; /* their first entries */
	int64_t last_max_ns;    /* the latest entry of their calls */
	uint32_t instances, calls;
	const void *data;       /* nccl_instance.h's blob (borrowed) */
	size_t len;
};

/* Which rollup rows a backend lists: job `job`, first_min_ns in [first_lo_ns, first_hi_ns],
 * last_max_ns >= last_from_ns, the communicator and op filters of store_collective_filter;
 * ordered by first_min_ns (descending: newest first), then key, op, part. */
struct store__nccl_rollup_query {
	const char *job;
	int64_t first_lo_ns, first_hi_ns, last_from_ns;
	bool has_comm;
	uint64_t comm;
	uint8_t op;
	bool descending;
};

/* Per listed row; borrowed for the call only. Nonzero stops (> 0: the listing returns 0). */
typedef int (*store__nccl_instances_fn)(void *arg, const struct store__nccl_instances *r);

/* What a kept call's process reference gives back. */
struct store__nccl_process {
	uint32_t pid;
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	char hostname[256];
};

/*
 * Retention's first step: writes the instances of every job whose first entry is in
 * [watermark, before_ms rounded up to a minute) to the rollup, read from the raw calls, then
 * moves the watermark there (a minute's blobs are written whole, once).
 * *instances (may be NULL) gets the instances written, *lost those not kept (more than
 * NCCL_INSTANCE_MAX_CALLS calls, past ROLLUP_MAX_HELD_CALLS in one minute of a job, or a tie
 * of one nanosecond past the pass limit). 0 on a backend without rollups. Returns 0 or a
 * negative error (run it again).
 */
int store__nccl_rollup_run(struct store *s, int64_t before_ms, uint64_t *instances,
			   uint64_t *lost);

/* store_collectives_list over raw calls and the rollups (store.h). */
int store__collectives_read(struct store *s, const struct store_collective_filter *f,
			    uint32_t max_instances, store_collective_fn fn, void *arg);

/* Tests: the most instances one rollup pass reads (0: the default). */
void store__nccl_rollup_pass_set(uint32_t instances);

/* One entry per public store_* call; semantics as documented in store.h. */
struct store_ops {
	bool identities; /* stores process identities and filters by them (wire 1.5) */
	void (*close)(struct store *s);
	int (*schema_version)(struct store *s);
	int (*batch_put)(struct store *s, const struct sysom_batch *b, uint64_t content_hash,
			 int64_t received_ns, struct store_put_result *res);
	int (*batch_find)(struct store *s, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
			  uint64_t epoch, uint64_t sequence, struct store_batch_record *out);
	int (*ksyms_put)(struct store *s, const uint8_t *build_id, size_t build_id_len,
			 const struct store_ksym *syms, size_t count, int64_t uploaded_ns,
			 bool *created);
	int (*ksyms_count)(struct store *s, const uint8_t *build_id, size_t build_id_len,
			   uint64_t *count);
	int (*ksym_range_get)(struct store *s, const uint8_t *build_id, size_t build_id_len,
			      uint64_t offset, struct store_ksym_range *out);
	int (*object_get)(struct store *s, int64_t id, struct store_object *out);
	int (*stack_get)(struct store *s, int64_t id, struct store_stack **out);
	int (*nodes_list)(struct store *s, store_node_fn fn, void *arg);
	int (*processes_list)(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			      store_process_fn fn, void *arg);
	int (*stacks_aggregate)(struct store *s, const struct store_sample_filter *f,
				uint32_t limit, store_stack_count_fn fn, void *arg, uint64_t *total);
	int (*offcpu_aggregate)(struct store *s, const struct store_sample_filter *f,
				uint32_t limit, store_stack_count_fn fn, void *arg, uint64_t *total);
	int (*wall_aggregate)(struct store *s, const struct store_sample_filter *f,
			      uint32_t limit, store_stack_count_fn fn, void *arg, uint64_t *total);
	int (*counters_list)(struct store *s, store_counter_fn fn, void *arg);
	int (*launches_aggregate)(struct store *s, const struct store_sample_filter *f,
				  uint32_t limit, store_launch_count_fn fn, void *arg,
				  uint64_t *total);
	int (*jobs_list)(struct store *s, uint32_t limit, store_job_fn fn, void *arg);
	/* NULL on backends without identities (then -ENOTSUP). */
	int (*jobs_list_identity)(struct store *s, const struct store_sample_filter *f,
				  uint32_t limit, store_job_fn fn, void *arg);
	int (*job_ranks_list)(struct store *s, const char *job, uint32_t limit,
			      store_job_rank_fn fn, void *arg);
	/* NULL on backends without GPU health (then -ENOTSUP). */
	int (*gpu_health_list)(struct store *s, const char *node, int64_t from_ms, int64_t to_ms,
			       uint32_t limit, store_gpu_health_fn fn, void *arg);
	int (*job_communicators_list)(struct store *s, const char *job, uint32_t limit,
				      store_job_communicator_fn fn, void *arg);
	int (*collectives_list)(struct store *s, const struct store_collective_filter *f,
				uint32_t max_instances, store_collective_fn fn, void *arg);
	int (*job_gpu)(struct store *s, const struct store_gpu_filter *f, uint32_t max_rows,
		       const struct store_gpu_visitor *v, bool *truncated);
	int (*gpu_time_aggregate)(struct store *s, const struct store_sample_filter *f,
				  uint32_t limit, store_gpu_time_fn fn, void *arg, uint64_t *total);
	int (*job_os)(struct store *s, const struct store_os_filter *f, uint32_t max_rows,
		      const struct store_os_visitor *v, bool *truncated);
	/* NULL: -ENOTSUP */
	int (*host_signals_list)(struct store *s, const struct store_host_filter *f,
				 uint32_t max_rows, store_host_signal_fn fn, void *arg,
				 bool *truncated);
	int (*diagnosis_upsert)(struct store *s, const struct store_diagnosis *d, int64_t *id,
				bool *opened);
	int (*diagnosis_resolve)(struct store *s, int64_t id, int64_t now_ms);
	int (*diagnoses_list)(struct store *s, const struct store_diagnosis_filter *f,
			      uint32_t limit, store_diagnosis_fn fn, void *arg);
	int (*job_settings_get)(struct store *s, const char *job, char **json);
	int (*job_settings_put)(struct store *s, const char *job, const char *json, int64_t now_ms);
	int (*baseline_put)(struct store *s, const struct store_baseline *b);
	int (*baseline_get)(struct store *s, const char *job,
			    int (*fn)(void *arg, const struct store_baseline *b), void *arg);
	int (*ping)(struct store *s);
	int (*size_get)(struct store *s, uint64_t *bytes);
	int (*size_limit_set)(struct store *s, uint64_t max_bytes); /* NULL: -ENOTSUP */
	int (*ksyms_usage_get)(struct store *s, struct store_ksyms_usage *out);
	/* NULL: -ENOTSUP */
	int (*retention_apply)(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
			       uint32_t *dropped);
	/* NULL: -ENOTSUP */
	int (*fleet_slots_run)(struct store *s, int64_t now_ms,
			       struct store_fleet_slots_pass *out);
	int (*insert_groups_get)(struct store *s, struct store_insert_groups *out);
	/* NULL: -ENOTSUP (a store one server owns) */
	int (*replica_beat)(struct store *s, const char *id, const char *url, int64_t started_ms,
			    uint64_t beat, bool departed);
	int (*replicas_list)(struct store *s, uint32_t max_age_s, uint32_t limit,
			     store_replica_fn fn, void *arg);
	/* NCCL instance rollups (store_nccl_rollup.c); all NULL on a backend that keeps none
	 * (then its NCCL calls are read raw only and go at the raw retention). */
	int (*nccl_rollup_state)(struct store *s, int64_t *watermark_ns, int64_t *max_span_ns);
	/* Writes the rows not written yet (key: job, comm_key, op, minute, part) in one
	 * transaction, keeping the processes their calls name, and the longest
	 * last_max_ns - first_min_ns as the state's max_span_ns; returns how many instances
	 * were new, or an error. */
	int (*nccl_rollup_put)(struct store *s, const struct store__nccl_instances *rows,
			       size_t n);
	int (*nccl_rollup_watermark_set)(struct store *s, int64_t watermark_ns);
	int (*nccl_rollup_list)(struct store *s, const struct store__nccl_rollup_query *q,
				store__nccl_instances_fn fn, void *arg);
	int (*nccl_rollup_process)(struct store *s, int64_t process,
				   struct store__nccl_process *out);
};

/* Every backend's state starts with this. */
struct store {
	const struct store_ops *ops;
	int64_t raw_keep_ms; /* store_rollup_raw_keep_set; 0: ranges read raw rows only */
};

/* ---- per-minute rollups (store_rollup_raw_keep_set) ---------------------------------------- */

#define STORE__MS_PER_MINUTE 60000

/* The start of the minute holding `ms` (times before 1970 round down too). */
int64_t store__minute_floor(int64_t ms);

/*
 * Where readers switch to the rollups: a minute start; the part of a range before it is read
 * from the per-minute rollups, the rest from raw rows. INT64_MIN when raw rows are kept
 * forever (then every range reads raw rows).
 */
int64_t store__rollup_cutoff_ms(const struct store *s);

/* ---- what every backend does the same way (store_backend.c) ------------------------------- */

/* Content-hash collisions a backend tolerates per stack before -EOVERFLOW (never seen). */
#define STORE__STACK_PROBES 16

/* Lower-case hex of `len` bytes (at most SYSOM_BUILD_ID_MAX) into out[outlen]. */
void store__hex(const uint8_t *bytes, size_t len, char *out, size_t outlen);

/* The batch's counters as a JSON object {"name": value}; caller frees; NULL: out of memory. */
char *store__counters_json(const struct sysom_batch *b);

/* Whether objects of this kind are keyed by their build ID (else by their name). */
bool store__object_by_build_id(uint8_t kind);

/* The first candidate id of a stack whose frames, as stored, are `frames` (len bytes); a
 * collision probes the following ids, skipping STORE_STACK_NONE. */
uint64_t store__stack_hash(uint8_t kind, uint8_t stop_reason, const void *frames, size_t len);

/* Checks the arguments of store_ksyms_put: 0 or -EINVAL. */
int store__ksyms_check(size_t build_id_len, const struct store_ksym *syms, size_t count);

#endif
