/* SPDX-License-Identifier: Apache-2.0 */
/* Batch builder (de-duplicating) and encoder for wire format version 1. */
#include "common/wire/wire.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/wire/wire_internal.h"
#include "common/wire/wire_layout.h"

const struct sysom_wire_limits sysom_wire_default_limits = {
	.max_strings = 1u << 20,
	.max_string_len = 4096,
	.max_objects = 1u << 16,
	.max_processes = 1u << 16,
	.max_mappings = 1u << 20,
	.max_stacks = 1u << 20,
	.max_frames_per_stack = 512,
	.max_frames = 1u << 24,
	.max_samples = 1u << 22,
	.max_counters = SYSOM_COUNTER_MAX,
	.max_job_ranks = 1u << 16,
	.max_communicators = 1u << 18,
	.max_nccl_calls = 1u << 22,
	.max_launches = 1u << 20,
	.max_gpu_kernels = 1u << 18,
	.max_nccl_profiles = 1u << 18,
	.max_nccl_links = 1u << 18,
	.max_os_cpus = 4096,
	.max_os_irqs = 1u << 16,
	.max_os_threads = 1u << 16,
	.max_offcpu = 1u << 20,
	.max_identities = 1u << 16,
	.max_gpu_health = SYSOM_GPU_MAX_DEVICES,
	.max_host_signals = SYSOM_HOST_SIGNAL_MAX,
};

static const char *const counter_names[SYSOM_COUNTER_MAX] = {
	[SYSOM_COUNTER_TICKS] = "ticks",
	[SYSOM_COUNTER_GATED_OUT] = "gated_out",
	[SYSOM_COUNTER_IDLE_SKIPPED] = "idle_skipped",
	[SYSOM_COUNTER_SAMPLES] = "samples",
	[SYSOM_COUNTER_KSTACK_ERRORS] = "kernel_stack_errors",
	[SYSOM_COUNTER_USTACK_ERRORS] = "user_stack_errors",
	[SYSOM_COUNTER_COUNT_MAP_FULL] = "count_map_full",
	[SYSOM_COUNTER_STACK_MAP_FULL] = "stack_map_full",
	[SYSOM_COUNTER_EVENTS_LOST] = "events_lost",
	[SYSOM_COUNTER_FRAMES_UNMAPPED] = "frames_unmapped",
	[SYSOM_COUNTER_PROCESSES_VANISHED] = "processes_vanished",
	[SYSOM_COUNTER_SPOOL_DROPPED] = "spool_dropped",
	[SYSOM_COUNTER_UPLOAD_RETRIES] = "upload_retries",
	[SYSOM_COUNTER_DRAINS] = "drains",
	[SYSOM_COUNTER_DISTINCT_KEYS] = "distinct_keys",
	[SYSOM_COUNTER_BATCH_LIMIT_DROPS] = "batch_limit_drops",
	[SYSOM_COUNTER_UNWIND_FRAMES] = "unwind_frames",
	[SYSOM_COUNTER_UNWIND_FRAMES_DWARF] = "unwind_frames_dwarf",
	[SYSOM_COUNTER_UNWIND_FRAMES_FP] = "unwind_frames_fp",
	[SYSOM_COUNTER_UNWIND_FRAMES_CACHED] = "unwind_frames_cached",
	[SYSOM_COUNTER_UNWIND_FALLBACK] = "unwind_fallback_fp",
	[22] = "unwind_stop_depth",
	[23] = "unwind_stop_read_fault",
	[24] = "unwind_stop_no_mapping",
	[25] = "unwind_stop_fp_invalid",
	[26] = "unwind_stop_jit",
	[27] = "unwind_stop_sp_order",
	[28] = "unwind_stop_rbp_unknown",
	[29] = "unwind_stop_tail_calls",
	[30] = "unwind_stop_table",
	[SYSOM_COUNTER_NCCL_CALLS] = "nccl_calls",
	[SYSOM_COUNTER_NCCL_EVENTS_LOST] = "nccl_events_lost",
	[SYSOM_COUNTER_NCCL_CALLS_DROPPED] = "nccl_calls_dropped",
	[SYSOM_COUNTER_NCCL_UNMATCHED] = "nccl_unmatched_returns",
	[SYSOM_COUNTER_LAUNCHES] = "gpu_launches",
	[SYSOM_COUNTER_LAUNCH_MAP_FULL] = "gpu_launch_map_full",
	[SYSOM_COUNTER_GPU_LIBRARIES] = "gpu_libraries_attached",
	[SYSOM_COUNTER_GPU_ATTACH_ERRORS] = "gpu_attach_errors",
	[SYSOM_COUNTER_KERNEL_NAMES] = "gpu_kernel_names",
	[SYSOM_COUNTER_LAUNCH_TRACED_MS] = "gpu_launch_traced_ms",
	[SYSOM_COUNTER_CHANNEL_RECORDS] = "channel_records",
	[SYSOM_COUNTER_CHANNEL_REJECTED] = "channel_rejected",
	[SYSOM_COUNTER_PROFILER_EVENTS] = "nccl_profiler_events",
	[SYSOM_COUNTER_PROFILER_DROPPED] = "nccl_profiler_dropped",
	[SYSOM_COUNTER_PROFILER_ORPHANS] = "nccl_profiler_orphans",
	[SYSOM_COUNTER_PROFILER_FORCED] = "nccl_profiler_forced_closes",
	[SYSOM_COUNTER_COMPONENT_SEND_DROPS] = "component_send_drops",
	[SYSOM_COUNTER_CUPTI_RECORDS] = "cupti_records",
	[SYSOM_COUNTER_CUPTI_DROPPED] = "cupti_dropped",
	[SYSOM_COUNTER_GPU_STATS_DROPPED] = "gpu_stats_dropped",
	[SYSOM_COUNTER_OS_THREADS_LOST] = "os_threads_lost",
	[SYSOM_COUNTER_OS_IRQS_LOST] = "os_irqs_lost",
	[SYSOM_COUNTER_OS_ROWS_DROPPED] = "os_rows_dropped",
	[SYSOM_COUNTER_OS_ATTACH_ERRORS] = "os_attach_errors",
	[SYSOM_COUNTER_OS_TRACKED] = "os_tracked_processes",
	[SYSOM_COUNTER_OFFCPU_BLOCKS] = "offcpu_blocks",
	[SYSOM_COUNTER_OFFCPU_SHORT] = "offcpu_short_blocks",
	[SYSOM_COUNTER_OFFCPU_LOST] = "offcpu_lost",
	[SYSOM_COUNTER_OFFCPU_FP_FALLBACK] = "offcpu_fp_fallback",
	[SYSOM_COUNTER_OFFCPU_OVER_BUDGET] = "offcpu_over_budget",
	[SYSOM_COUNTER_PY_NAME_REUSED] = "py_name_reused",
	[SYSOM_COUNTER_OFFCPU_UNWIND_US] = "offcpu_unwind_us",
	[SYSOM_COUNTER_GPU_LOADER_EVENTS] = "gpu_loader_attaches",
	[SYSOM_COUNTER_GPU_LOADER_HELD] = "gpu_loader_held",
	[SYSOM_COUNTER_OFFCPU_OPEN] = "offcpu_open_blocks",
	[SYSOM_COUNTER_UPLOAD_REFUSED_EARLY] = "upload_refused_early",
	[SYSOM_COUNTER_UPLOAD_REFUSED_BYTES] = "upload_refused_body_bytes",
	[SYSOM_COUNTER_NVML_SAMPLES] = "nvml_samples",
	[SYSOM_COUNTER_NVML_ERRORS] = "nvml_errors",
	[SYSOM_COUNTER_XID_EVENTS] = "xid_events",
	[SYSOM_COUNTER_XID_UNMATCHED] = "xid_unmatched",
	[SYSOM_COUNTER_HOST_SIGNALS] = "host_signals",
	[SYSOM_COUNTER_HOST_FILES_MISSING] = "host_files_missing",
	[SYSOM_COUNTER_HOST_PARSE_ERRORS] = "host_parse_errors",
	[SYSOM_COUNTER_NCCL_P2P_CALLS] = "nccl_p2p_calls",
	[SYSOM_COUNTER_NCCL_P2P_BAD_PEER] = "nccl_p2p_bad_peer",
	[SYSOM_COUNTER_PY_FRAMES] = "py_frames",
	[SYSOM_COUNTER_PY_NO_THREAD] = "py_no_thread",
	[SYSOM_COUNTER_PY_LOST_READ] = "py_lost_read",
	[SYSOM_COUNTER_PY_LOST_INVALID] = "py_lost_invalid",
	[SYSOM_COUNTER_PY_LOST_DEPTH] = "py_lost_depth",
	[SYSOM_COUNTER_PY_UNRESOLVED] = "py_unresolved",
	[SYSOM_COUNTER_PY_UNSUPPORTED] = "py_unsupported",
	[SYSOM_COUNTER_PY_NAME_LOOKUPS] = "py_name_lookups",
	[SYSOM_COUNTER_PY_NAME_CACHE_HITS] = "py_name_cache_hits",
	[SYSOM_COUNTER_CONTAINER_LOG_SCANS] = "container_log_scans",
	[SYSOM_COUNTER_CONTAINER_NAMES_MISSING] = "container_names_missing",
	[SYSOM_COUNTER_JIT_NAMED] = "jit_named",
	[SYSOM_COUNTER_JIT_UNNAMED] = "jit_unnamed",
};

const char *sysom_offcpu_state_name(uint8_t state)
{
	switch (state) {
	case SYSOM_OFFCPU_SLEEP:
		return "S";
	case SYSOM_OFFCPU_DISK:
		return "D";
	case SYSOM_OFFCPU_OTHER:
		return "other";
	}
	return NULL;
}

static const char *const softirq_names[SYSOM_SOFTIRQ_COUNT] = {
	[SYSOM_SOFTIRQ_HI] = "HI",
	[SYSOM_SOFTIRQ_TIMER] = "TIMER",
	[SYSOM_SOFTIRQ_NET_TX] = "NET_TX",
	[SYSOM_SOFTIRQ_NET_RX] = "NET_RX",
	[SYSOM_SOFTIRQ_BLOCK] = "BLOCK",
	[SYSOM_SOFTIRQ_IRQ_POLL] = "IRQ_POLL",
	[SYSOM_SOFTIRQ_TASKLET] = "TASKLET",
	[SYSOM_SOFTIRQ_SCHED] = "SCHED",
	[SYSOM_SOFTIRQ_HRTIMER] = "HRTIMER",
	[SYSOM_SOFTIRQ_RCU] = "RCU",
};

const char *sysom_softirq_name(uint32_t vec)
{
	return vec < SYSOM_SOFTIRQ_COUNT ? softirq_names[vec] : NULL;
}

static const char *const stop_reason_names[] = {
	[SYSOM_STOP_DEPTH_LIMIT] = "depth limit",
	[SYSOM_STOP_READ_FAULT] = "read fault",
	[SYSOM_STOP_STACK_LOST] = "stack lost",
	[SYSOM_STOP_NO_MAPPING] = "no mapping",
	[SYSOM_STOP_FP_INVALID] = "invalid frame pointer",
	[SYSOM_STOP_JIT] = "JIT code",
	[SYSOM_STOP_CFA_ORDER] = "stack pointer did not increase",
	[SYSOM_STOP_RBP_UNKNOWN] = "RBP unknown",
	[SYSOM_STOP_TAIL_CALLS] = "tail-call budget",
	[SYSOM_STOP_TABLE] = "unwind table unreadable",
};

const char *sysom_stop_reason_name(uint8_t stop_reason)
{
	if (stop_reason >= sizeof(stop_reason_names) / sizeof(stop_reason_names[0]))
		return NULL;
	return stop_reason_names[stop_reason];
}

const char *sysom_counter_name(uint16_t id)
{
	return id < SYSOM_COUNTER_MAX ? counter_names[id] : NULL;
}

struct batch_dedup {
	struct hash_index strings;
	struct hash_index objects;
	struct hash_index processes;
	struct hash_index stacks;
	struct hash_index samples;
	struct hash_index launches;
	struct hash_index gpu_kernels;
	struct hash_index nccl_profiles;
	struct hash_index nccl_links;
	struct hash_index os_cpus;
	struct hash_index os_irqs;
	struct hash_index os_threads;
	struct hash_index offcpu;
};

/* Grows an array to hold at least `need` elements (doubling). */
static int grow(void **array, uint32_t *cap, uint32_t need, size_t elem_size)
{
	if (need <= *cap)
		return 0;
	uint64_t new_cap = *cap ? *cap : 16;
	while (new_cap < need)
		new_cap *= 2;
	if (new_cap > UINT32_MAX || new_cap * elem_size > SIZE_MAX / 2)
		return -E2BIG;
	void *grown = realloc(*array, (size_t)new_cap * elem_size);
	if (!grown)
		return -ENOMEM;
	*array = grown;
	*cap = (uint32_t)new_cap;
	return 0;
}

#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

int sysom_batch_init(struct sysom_batch *b)
{
	uint32_t empty;

	memset(b, 0, sizeof(*b));
	b->major = SYSOM_WIRE_MAJOR;
	b->minor = SYSOM_WIRE_MINOR;
	b->node.kernel_object = SYSOM_WIRE_NONE;
	b->dedup = calloc(1, sizeof(*b->dedup));
	if (!b->dedup)
		return -ENOMEM;
	return sysom_batch_intern_string(b, "", 0, &empty);
}

uint64_t sysom_batch_memory(const struct sysom_batch *b)
{
	return b->string_data_cap + (uint64_t)b->string_cap * sizeof(*b->strings) +
	       (uint64_t)b->object_cap * sizeof(*b->objects) +
	       (uint64_t)b->process_cap * sizeof(*b->processes) +
	       (uint64_t)b->mapping_cap * sizeof(*b->mappings) +
	       (uint64_t)b->stack_cap * sizeof(*b->stacks) +
	       (uint64_t)b->frame_cap * sizeof(*b->frames) +
	       (uint64_t)b->sample_cap * sizeof(*b->samples) +
	       (uint64_t)b->counter_cap * sizeof(*b->counters) +
	       (uint64_t)b->job_rank_cap * sizeof(*b->job_ranks) +
	       (uint64_t)b->communicator_cap * sizeof(*b->communicators) +
	       (uint64_t)b->nccl_call_cap * sizeof(*b->nccl_calls) +
	       (uint64_t)b->launch_cap * sizeof(*b->launches) +
	       (uint64_t)b->gpu_kernel_cap * sizeof(*b->gpu_kernels) +
	       (uint64_t)b->nccl_profile_cap * sizeof(*b->nccl_profiles) +
	       (uint64_t)b->nccl_link_cap * sizeof(*b->nccl_links) +
	       (uint64_t)b->os_cpu_cap * sizeof(*b->os_cpus) +
	       (uint64_t)b->os_irq_cap * sizeof(*b->os_irqs) +
	       (uint64_t)b->os_thread_cap * sizeof(*b->os_threads) +
	       (uint64_t)b->offcpu_cap * sizeof(*b->offcpu) +
	       (uint64_t)b->identity_cap * sizeof(*b->identities) +
	       (uint64_t)b->gpu_health_cap * sizeof(*b->gpu_health) +
	       (uint64_t)b->host_signal_cap * sizeof(*b->host_signals);
}

void sysom_batch_free(struct sysom_batch *b)
{
	if (!b)
		return;
	if (b->dedup) {
		hash_index_free(&b->dedup->strings);
		hash_index_free(&b->dedup->objects);
		hash_index_free(&b->dedup->processes);
		hash_index_free(&b->dedup->stacks);
		hash_index_free(&b->dedup->samples);
		hash_index_free(&b->dedup->launches);
		hash_index_free(&b->dedup->gpu_kernels);
		hash_index_free(&b->dedup->nccl_profiles);
		hash_index_free(&b->dedup->nccl_links);
		hash_index_free(&b->dedup->os_cpus);
		hash_index_free(&b->dedup->os_irqs);
		hash_index_free(&b->dedup->os_threads);
		hash_index_free(&b->dedup->offcpu);
		free(b->dedup);
	}
	free(b->string_data);
	free(b->strings);
	free(b->objects);
	free(b->processes);
	free(b->mappings);
	free(b->stacks);
	free(b->frames);
	free(b->samples);
	free(b->counters);
	free(b->job_ranks);
	free(b->communicators);
	free(b->nccl_calls);
	free(b->launches);
	free(b->gpu_kernels);
	free(b->nccl_profiles);
	free(b->nccl_links);
	free(b->os_cpus);
	free(b->os_irqs);
	free(b->os_threads);
	free(b->offcpu);
	free(b->identities);
	free(b->gpu_health);
	free(b->host_signals);
	memset(b, 0, sizeof(*b));
}

const char *sysom_batch_string(const struct sysom_batch *b, uint32_t idx)
{
	if (idx >= b->string_count)
		return "";
	return b->string_data + b->strings[idx].offset;
}

int wire__append_string(struct sysom_batch *b, const char *s, size_t len, uint32_t *idx)
{
	int err;

	if (len > UINT32_MAX - 1 || b->string_data_len + len + 1 > UINT32_MAX)
		return -E2BIG;
	if ((err = GROW(b->strings, b->string_cap, b->string_count + 1)))
		return err;
	if (b->string_data_len + len + 1 > b->string_data_cap) {
		size_t cap = b->string_data_cap ? b->string_data_cap : 1024;
		while (cap < b->string_data_len + len + 1)
			cap *= 2;
		char *data = realloc(b->string_data, cap);
		if (!data)
			return -ENOMEM;
		b->string_data = data;
		b->string_data_cap = cap;
	}
	b->strings[b->string_count].offset = (uint32_t)b->string_data_len;
	b->strings[b->string_count].length = (uint32_t)len;
	if (len)
		memcpy(b->string_data + b->string_data_len, s, len);
	b->string_data[b->string_data_len + len] = '\0';
	b->string_data_len += len + 1;
	*idx = b->string_count++;
	return 0;
}

struct string_key {
	const struct sysom_batch *b;
	const char *s;
	size_t len;
};

static bool string_eq(const void *ctx, uint32_t idx)
{
	const struct string_key *k = ctx;

	return k->b->strings[idx].length == k->len &&
	       memcmp(k->b->string_data + k->b->strings[idx].offset, k->s, k->len) == 0;
}

int sysom_batch_intern_string(struct sysom_batch *b, const char *s, size_t len, uint32_t *idx)
{
	struct string_key key = { b, s, len };
	uint64_t h = sysom_hash64(s, len, 0);
	uint32_t found;
	int err;

	if (!b->dedup)
		return -EINVAL;
	found = hash_index_find(&b->dedup->strings, h, string_eq, &key);
	if (found != HASH_INDEX_NONE) {
		*idx = found;
		return 0;
	}
	if ((err = wire__append_string(b, s, len, &found)))
		return err;
	if ((err = hash_index_insert(&b->dedup->strings, h, found)))
		return err;
	*idx = found;
	return 0;
}

int sysom_batch_intern_cstring(struct sysom_batch *b, const char *s, uint32_t *idx)
{
	return sysom_batch_intern_string(b, s ? s : "", s ? strlen(s) : 0, idx);
}

static bool kind_has_build_id(uint8_t kind)
{
	return kind == SYSOM_OBJECT_ELF || kind == SYSOM_OBJECT_FILE_HASH ||
	       kind == SYSOM_OBJECT_KERNEL || kind == SYSOM_OBJECT_KMODULE;
}

struct object_key {
	const struct sysom_batch *b;
	uint8_t kind;
	const uint8_t *build_id;
	uint8_t build_id_len;
	uint32_t name;
};

static bool object_eq(const void *ctx, uint32_t idx)
{
	const struct object_key *k = ctx;
	const struct sysom_object *o = &k->b->objects[idx];

	if (o->kind != k->kind)
		return false;
	if (kind_has_build_id(k->kind))
		return o->build_id_len == k->build_id_len &&
		       memcmp(o->build_id, k->build_id, k->build_id_len) == 0;
	return o->name == k->name;
}

int sysom_batch_add_object(struct sysom_batch *b, uint8_t kind, const uint8_t *build_id,
			   uint8_t build_id_len, const char *name, uint32_t *idx)
{
	struct object_key key = { b, kind, build_id, build_id_len, 0 };
	uint64_t h;
	uint32_t found;
	int err;

	if (!b->dedup || kind < SYSOM_OBJECT_ELF || kind > SYSOM_OBJECT_KIND_MAX ||
	    build_id_len > SYSOM_BUILD_ID_MAX || (build_id_len && !build_id))
		return -EINVAL;
	if ((err = sysom_batch_intern_cstring(b, name, &key.name)))
		return err;
	h = sysom_hash_mix(kind, kind_has_build_id(kind) ? sysom_hash64(build_id, build_id_len, 1)
							  : key.name);
	found = hash_index_find(&b->dedup->objects, h, object_eq, &key);
	if (found != HASH_INDEX_NONE) {
		*idx = found;
		return 0;
	}
	if ((err = GROW(b->objects, b->object_cap, b->object_count + 1)))
		return err;
	struct sysom_object *o = &b->objects[b->object_count];
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->build_id_len = build_id_len;
	if (build_id_len)
		memcpy(o->build_id, build_id, build_id_len);
	o->name = key.name;
	if ((err = hash_index_insert(&b->dedup->objects, h, b->object_count)))
		return err;
	*idx = b->object_count++;
	return 0;
}

struct process_key {
	const struct sysom_batch *b;
	const struct sysom_process *p;
};

static bool process_eq(const void *ctx, uint32_t idx)
{
	const struct process_key *k = ctx;
	const struct sysom_process *o = &k->b->processes[idx];

	return o->tgid == k->p->tgid && o->start_time_ns == k->p->start_time_ns &&
	       o->generation == k->p->generation;
}

int sysom_batch_add_process(struct sysom_batch *b, const struct sysom_process *p, uint32_t *idx)
{
	struct process_key key = { b, p };
	uint64_t h = sysom_hash_mix(sysom_hash_mix(p->tgid, p->start_time_ns), p->generation);
	uint32_t found;
	int err;

	if (!b->dedup)
		return -EINVAL;
	found = hash_index_find(&b->dedup->processes, h, process_eq, &key);
	if (found != HASH_INDEX_NONE) {
		*idx = found;
		return 0;
	}
	if ((err = GROW(b->processes, b->process_cap, b->process_count + 1)))
		return err;
	b->processes[b->process_count] = *p;
	if ((err = hash_index_insert(&b->dedup->processes, h, b->process_count)))
		return err;
	*idx = b->process_count++;
	return 0;
}

int sysom_batch_add_mapping(struct sysom_batch *b, const struct sysom_mapping *m)
{
	int err;

	if (m->process >= b->process_count || m->object >= b->object_count || m->end <= m->start)
		return -EINVAL;
	if ((err = GROW(b->mappings, b->mapping_cap, b->mapping_count + 1)))
		return err;
	b->mappings[b->mapping_count++] = *m;
	return 0;
}

struct stack_key {
	const struct sysom_batch *b;
	uint8_t kind, stop_reason;
	const struct sysom_frame *frames;
	uint16_t nframes;
};

static bool stack_eq(const void *ctx, uint32_t idx)
{
	const struct stack_key *k = ctx;
	const struct sysom_stack *s = &k->b->stacks[idx];
	const struct sysom_frame *f = k->b->frames + s->first_frame;

	if (s->kind != k->kind || s->stop_reason != k->stop_reason || s->nframes != k->nframes)
		return false;
	for (uint16_t i = 0; i < k->nframes; i++)
		if (f[i].object != k->frames[i].object || f[i].offset != k->frames[i].offset)
			return false;
	return true;
}

int sysom_batch_add_stack(struct sysom_batch *b, uint8_t kind, uint8_t stop_reason,
			  const struct sysom_frame *frames, uint16_t nframes, uint32_t *idx)
{
	struct stack_key key = { b, kind, stop_reason, frames, nframes };
	uint64_t h = sysom_hash_mix(kind, (uint64_t)stop_reason << 16 | nframes);
	uint32_t found;
	int err;

	if (!b->dedup || nframes == 0 || (kind != SYSOM_STACK_KERNEL && kind != SYSOM_STACK_USER) ||
	    stop_reason > SYSOM_STOP_REASON_MAX)
		return -EINVAL;
	for (uint16_t i = 0; i < nframes; i++) {
		if (frames[i].object >= b->object_count)
			return -EINVAL;
		h = sysom_hash_mix(sysom_hash_mix(h, frames[i].object), frames[i].offset);
	}
	found = hash_index_find(&b->dedup->stacks, h, stack_eq, &key);
	if (found != HASH_INDEX_NONE) {
		*idx = found;
		return 0;
	}
	if ((err = GROW(b->frames, b->frame_cap, b->frame_count + nframes)) ||
	    (err = GROW(b->stacks, b->stack_cap, b->stack_count + 1)))
		return err;
	memcpy(b->frames + b->frame_count, frames, nframes * sizeof(*frames));
	b->stacks[b->stack_count] = (struct sysom_stack){
		.nframes = nframes,
		.kind = kind,
		.stop_reason = stop_reason,
		.first_frame = b->frame_count,
	};
	if ((err = hash_index_insert(&b->dedup->stacks, h, b->stack_count)))
		return err;
	b->frame_count += nframes;
	*idx = b->stack_count++;
	return 0;
}

struct sample_key {
	const struct sysom_batch *b;
	const struct sysom_sample *s;
};

static bool sample_eq(const void *ctx, uint32_t idx)
{
	const struct sample_key *k = ctx;
	const struct sysom_sample *o = &k->b->samples[idx];

	return o->process == k->s->process && o->tid == k->s->tid && o->cpu == k->s->cpu &&
	       o->time_offset_ms == k->s->time_offset_ms &&
	       o->kernel_stack == k->s->kernel_stack && o->user_stack == k->s->user_stack &&
	       o->thread_comm == k->s->thread_comm;
}

int sysom_batch_add_sample(struct sysom_batch *b, const struct sysom_sample *s)
{
	struct sample_key key = { b, s };
	uint64_t h;
	uint32_t found;
	int err;

	if (!b->dedup || s->count == 0 || s->process >= b->process_count ||
	    (s->kernel_stack != SYSOM_WIRE_NONE && s->kernel_stack >= b->stack_count) ||
	    (s->user_stack != SYSOM_WIRE_NONE && s->user_stack >= b->stack_count) ||
	    s->thread_comm >= b->string_count)
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(s->process, (uint64_t)s->tid << 32 | s->cpu),
			   sysom_hash_mix((uint64_t)s->kernel_stack << 32 | s->user_stack,
					  (uint64_t)s->time_offset_ms << 32 | s->thread_comm));
	found = hash_index_find(&b->dedup->samples, h, sample_eq, &key);
	if (found != HASH_INDEX_NONE) {
		uint64_t *count = &b->samples[found].count;
		*count = *count > UINT64_MAX - s->count ? UINT64_MAX : *count + s->count;
		return 0;
	}
	if ((err = GROW(b->samples, b->sample_cap, b->sample_count + 1)))
		return err;
	b->samples[b->sample_count] = *s;
	if ((err = hash_index_insert(&b->dedup->samples, h, b->sample_count)))
		return err;
	b->sample_count++;
	return 0;
}

struct offcpu_key {
	const struct sysom_batch *b;
	const struct sysom_offcpu *o;
};

static bool offcpu_eq(const void *ctx, uint32_t idx)
{
	const struct offcpu_key *k = ctx;
	const struct sysom_offcpu *a = &k->b->offcpu[idx], *n = k->o;

	return a->process == n->process && a->tid == n->tid &&
	       a->time_offset_ms == n->time_offset_ms && a->kernel_stack == n->kernel_stack &&
	       a->user_stack == n->user_stack && a->thread_comm == n->thread_comm &&
	       a->state == n->state;
}

static uint64_t add_saturated(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int sysom_batch_add_offcpu(struct sysom_batch *b, const struct sysom_offcpu *o)
{
	struct offcpu_key key = { b, o };
	uint64_t h;
	uint32_t found;
	int err;

	if (!b->dedup || o->count == 0 || o->max_ns == 0 || o->max_ns > o->blocked_ns ||
	    o->state == 0 || o->state > SYSOM_OFFCPU_STATE_MAX || o->process >= b->process_count ||
	    (o->kernel_stack == SYSOM_WIRE_NONE && o->user_stack == SYSOM_WIRE_NONE) ||
	    (o->kernel_stack != SYSOM_WIRE_NONE && (o->kernel_stack >= b->stack_count ||
						    b->stacks[o->kernel_stack].kind !=
							    SYSOM_STACK_KERNEL)) ||
	    (o->user_stack != SYSOM_WIRE_NONE && (o->user_stack >= b->stack_count ||
						  b->stacks[o->user_stack].kind !=
							  SYSOM_STACK_USER)) ||
	    o->thread_comm >= b->string_count)
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(o->process, (uint64_t)o->tid << 32 | o->state),
			   sysom_hash_mix((uint64_t)o->kernel_stack << 32 | o->user_stack,
					  (uint64_t)o->time_offset_ms << 32 | o->thread_comm));
	found = hash_index_find(&b->dedup->offcpu, h, offcpu_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_offcpu *r = &b->offcpu[found];
		r->count = add_saturated(r->count, o->count);
		r->blocked_ns = add_saturated(r->blocked_ns, o->blocked_ns);
		if (o->max_ns > r->max_ns)
			r->max_ns = o->max_ns;
		return 0;
	}
	if ((err = GROW(b->offcpu, b->offcpu_cap, b->offcpu_count + 1)))
		return err;
	b->offcpu[b->offcpu_count] = *o;
	if ((err = hash_index_insert(&b->dedup->offcpu, h, b->offcpu_count)))
		return err;
	b->offcpu_count++;
	return 0;
}

int sysom_batch_add_counter(struct sysom_batch *b, uint16_t id, uint64_t delta)
{
	int err;

	if (id == 0 || id >= SYSOM_COUNTER_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < b->counter_count; i++) {
		if (b->counters[i].id == id) {
			b->counters[i].value += delta;
			return 0;
		}
	}
	if ((err = GROW(b->counters, b->counter_cap, b->counter_count + 1)))
		return err;
	b->counters[b->counter_count++] = (struct sysom_counter){ .id = id, .value = delta };
	return 0;
}

uint64_t sysom_batch_counter(const struct sysom_batch *b, uint16_t id)
{
	for (uint32_t i = 0; i < b->counter_count; i++)
		if (b->counters[i].id == id)
			return b->counters[i].value;
	return 0;
}

/* Same rule as the decoder: -1 each when unknown, else 0 <= rank < size. */
static bool rank_ok(int32_t rank, int32_t size)
{
	return rank >= -1 && size >= -1 && size != 0 && !(rank >= 0 && size > 0 && rank >= size);
}

/* A stack reference of the wanted kind, or none. */
static bool stack_ref_ok(const struct sysom_batch *b, uint32_t stack, uint8_t kind)
{
	return stack == SYSOM_WIRE_NONE || (stack < b->stack_count && b->stacks[stack].kind == kind);
}

static bool strings_ok(const struct sysom_batch *b, const uint32_t *idx, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (idx[i] >= b->string_count)
			return false;
	return true;
}

int sysom_batch_set_job_rank(struct sysom_batch *b, const struct sysom_job_rank *j)
{
	const uint32_t strings[] = { j->job, j->job_id_source, j->master, j->groups };
	int err;

	if (j->process >= b->process_count || !strings_ok(b, strings, 4) ||
	    j->source < SYSOM_JOB_FROM_ENVIRONMENT || j->source > SYSOM_JOB_SOURCE_MAX ||
	    !rank_ok(j->rank, j->world_size) || !rank_ok(j->local_rank, j->local_world_size) ||
	    j->group_rank < -1)
		return -EINVAL;
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		if (b->job_ranks[i].process == j->process) {
			b->job_ranks[i] = *j;
			return 0;
		}
	}
	if ((err = GROW(b->job_ranks, b->job_rank_cap, b->job_rank_count + 1)))
		return err;
	b->job_ranks[b->job_rank_count++] = *j;
	return 0;
}

const char *sysom_runtime_name(uint8_t runtime)
{
	static const char *const names[] = { "", "containerd", "cri-o", "docker", "podman",
					     "unknown" };

	return runtime <= SYSOM_RUNTIME_MAX ? names[runtime] : NULL;
}

static bool hex_lower(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* "" or exactly `len` lowercase hex digits, with '-' at the positions of a UUID when uuid. */
static bool ident_hex_ok(const char *s, uint32_t slen, size_t len, bool uuid)
{
	if (slen == 0)
		return true;
	if (slen != len)
		return false;
	for (size_t i = 0; i < len; i++) {
		bool dash = uuid && (i == 8 || i == 13 || i == 18 || i == 23);

		if (dash ? s[i] != '-' : !hex_lower(s[i]))
			return false;
	}
	return true;
}

/* At most `max` printable ASCII bytes without spaces (names of Kubernetes objects, systemd
 * units and Slurm steps are all of that kind). */
static bool ident_name_ok(const char *s, uint32_t slen, size_t max)
{
	if (slen > max)
		return false;
	for (uint32_t i = 0; i < slen; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

const char *sysom_identity_problem(const struct sysom_batch *b, const struct sysom_identity *id)
{
	const uint32_t strings[] = { id->container_id, id->pod_uid, id->pod_namespace,
				     id->pod_name, id->container_name, id->slurm_step, id->unit };

	if (id->process >= b->process_count)
		return "process out of range";
	if (!strings_ok(b, strings, sizeof(strings) / sizeof(strings[0])))
		return "string index out of range";
	if (id->runtime > SYSOM_RUNTIME_MAX)
		return "unknown container runtime";
#define LEN(f) (b->strings[id->f].length)
#define STR(f) (b->string_data + b->strings[id->f].offset)
	if (!ident_hex_ok(STR(container_id), LEN(container_id), SYSOM_IDENT_CONTAINER_ID_LEN, false))
		return "container id is not 64 lowercase hex digits";
	if ((LEN(container_id) == 0) != (id->runtime == SYSOM_RUNTIME_NONE))
		return "container runtime without container id or the reverse";
	if (!ident_hex_ok(STR(pod_uid), LEN(pod_uid), SYSOM_IDENT_POD_UID_LEN, true))
		return "pod uid is not a lowercase UUID";
	if (!ident_name_ok(STR(pod_namespace), LEN(pod_namespace), SYSOM_IDENT_NAME_MAX) ||
	    !ident_name_ok(STR(pod_name), LEN(pod_name), SYSOM_IDENT_NAME_MAX) ||
	    !ident_name_ok(STR(container_name), LEN(container_name), SYSOM_IDENT_NAME_MAX))
		return "namespace, pod or container name too long or not printable";
	if ((LEN(pod_namespace) || LEN(pod_name)) && !LEN(pod_uid))
		return "pod namespace or name without pod uid";
	if (!ident_name_ok(STR(slurm_step), LEN(slurm_step), SYSOM_IDENT_SLURM_STEP_MAX))
		return "Slurm step too long or not printable";
	if (LEN(slurm_step) && !id->slurm_job)
		return "Slurm step without job";
	if (!ident_name_ok(STR(unit), LEN(unit), SYSOM_IDENT_UNIT_MAX))
		return "systemd unit too long or not printable";
	if (!LEN(container_id) && !LEN(pod_uid) && !LEN(container_name) && !id->slurm_job &&
	    !LEN(unit))
		return "says nothing";
#undef LEN
#undef STR
	return NULL;
}

static const char *const host_signal_names[SYSOM_HOST_SIGNAL_MAX + 1] = {
	[SYSOM_HOST_CPU_MHZ] = "cpu_mhz",
	[SYSOM_HOST_CPU_MHZ_MIN] = "cpu_mhz_min",
	[SYSOM_HOST_CPU_BUSY] = "cpu_busy",
	[SYSOM_HOST_CPU_IOWAIT] = "cpu_iowait",
	[SYSOM_HOST_CPU_STEAL] = "cpu_steal",
	[SYSOM_HOST_CONTEXT_SWITCHES] = "context_switches",
	[SYSOM_HOST_PROCS_BLOCKED] = "procs_blocked",
	[SYSOM_HOST_SOFTIRQ_NET_RX] = "softirq_net_rx",
	[SYSOM_HOST_SOFTIRQ_NET_TX] = "softirq_net_tx",
	[SYSOM_HOST_SOFTIRQ_TOTAL] = "softirq_total",
	[SYSOM_HOST_PSI_CPU_SOME_AVG10] = "psi_cpu_some_avg10",
	[SYSOM_HOST_PSI_CPU_SOME] = "psi_cpu_some",
	[SYSOM_HOST_PSI_CPU_FULL_AVG10] = "psi_cpu_full_avg10",
	[SYSOM_HOST_PSI_CPU_FULL] = "psi_cpu_full",
	[SYSOM_HOST_PSI_MEM_SOME_AVG10] = "psi_memory_some_avg10",
	[SYSOM_HOST_PSI_MEM_SOME] = "psi_memory_some",
	[SYSOM_HOST_PSI_MEM_FULL_AVG10] = "psi_memory_full_avg10",
	[SYSOM_HOST_PSI_MEM_FULL] = "psi_memory_full",
	[SYSOM_HOST_PSI_IO_SOME_AVG10] = "psi_io_some_avg10",
	[SYSOM_HOST_PSI_IO_SOME] = "psi_io_some",
	[SYSOM_HOST_PSI_IO_FULL_AVG10] = "psi_io_full_avg10",
	[SYSOM_HOST_PSI_IO_FULL] = "psi_io_full",
	[SYSOM_HOST_TCP_OUT_SEGS] = "tcp_out_segs",
	[SYSOM_HOST_TCP_RETRANS_SEGS] = "tcp_retrans_segs",
	[SYSOM_HOST_TCP_IN_ERRS] = "tcp_in_errs",
	[SYSOM_HOST_TCP_LOST_RETRANSMIT] = "tcp_lost_retransmit",
	[SYSOM_HOST_TCP_TIMEOUTS] = "tcp_timeouts",
	[SYSOM_HOST_NET_RX_DROPS] = "net_rx_drops",
	[SYSOM_HOST_NET_TX_DROPS] = "net_tx_drops",
	[SYSOM_HOST_NET_RX_ERRS] = "net_rx_errs",
	[SYSOM_HOST_NET_TX_ERRS] = "net_tx_errs",
	[SYSOM_HOST_DISK_READ_IOPS] = "disk_read_iops",
	[SYSOM_HOST_DISK_WRITE_IOPS] = "disk_write_iops",
	[SYSOM_HOST_DISK_READ_MS] = "disk_read_ms",
	[SYSOM_HOST_DISK_WRITE_MS] = "disk_write_ms",
	[SYSOM_HOST_MEM_AVAILABLE] = "mem_available",
	[SYSOM_HOST_MEM_AVAILABLE_SHARE] = "mem_available_share",
	[SYSOM_HOST_PGMAJFAULT] = "pgmajfault",
};

const char *sysom_host_signal_name(uint16_t signal)
{
	return signal <= SYSOM_HOST_SIGNAL_MAX ? host_signal_names[signal] : NULL;
}

uint16_t sysom_host_signal_by_name(const char *name)
{
	for (uint16_t i = 1; name && i <= SYSOM_HOST_SIGNAL_MAX; i++)
		if (strcmp(host_signal_names[i], name) == 0)
			return i;
	return 0;
}

int sysom_batch_set_host_signal(struct sysom_batch *b, uint16_t signal, double value)
{
	int err;

	if (!sysom_host_signal_name(signal) || !isfinite(value) || value < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < b->host_signal_count; i++) {
		if (b->host_signals[i].signal == signal) {
			b->host_signals[i].value = value;
			return 0;
		}
	}
	if ((err = GROW(b->host_signals, b->host_signal_cap, b->host_signal_count + 1)))
		return err;
	b->host_signals[b->host_signal_count++] =
		(struct sysom_host_signal_value){ .signal = signal, .value = value };
	return 0;
}

bool sysom_batch_host_signal(const struct sysom_batch *b, uint16_t signal, double *out)
{
	for (uint32_t i = 0; i < b->host_signal_count; i++) {
		if (b->host_signals[i].signal == signal) {
			*out = b->host_signals[i].value;
			return true;
		}
	}
	return false;
}

int sysom_batch_set_identity(struct sysom_batch *b, const struct sysom_identity *id)
{
	int err;

	if (sysom_identity_problem(b, id))
		return -EINVAL;
	for (uint32_t i = 0; i < b->identity_count; i++) {
		if (b->identities[i].process == id->process) {
			b->identities[i] = *id;
			return 0;
		}
	}
	if ((err = GROW(b->identities, b->identity_cap, b->identity_count + 1)))
		return err;
	b->identities[b->identity_count++] = *id;
	return 0;
}

static const struct {
	uint64_t bit;
	const char *name;
} gpu_reason_names[] = {
	{ SYSOM_GPU_REASON_IDLE, "idle" },
	{ SYSOM_GPU_REASON_APP_CLOCKS, "applications_clocks" },
	{ SYSOM_GPU_REASON_SW_POWER_CAP, "sw_power_cap" },
	{ SYSOM_GPU_REASON_HW_SLOWDOWN, "hw_slowdown" },
	{ SYSOM_GPU_REASON_SYNC_BOOST, "sync_boost" },
	{ SYSOM_GPU_REASON_SW_THERMAL, "sw_thermal_slowdown" },
	{ SYSOM_GPU_REASON_HW_THERMAL, "hw_thermal_slowdown" },
	{ SYSOM_GPU_REASON_HW_POWER_BRAKE, "hw_power_brake" },
	{ SYSOM_GPU_REASON_DISPLAY_CLOCKS, "display_clocks" },
};

void sysom_gpu_reasons_format(uint64_t reasons, char *buf, size_t len)
{
	size_t used = 0;

	if (!len)
		return;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(gpu_reason_names) / sizeof(gpu_reason_names[0]); i++) {
		if (!(reasons & gpu_reason_names[i].bit))
			continue;
		int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "",
				 gpu_reason_names[i].name);
		if (n < 0 || (size_t)n >= len - used)
			return;
		used += (size_t)n;
	}
	reasons &= ~(uint64_t)0x1ff;
	if (reasons && used < len)
		snprintf(buf + used, len - used, "%sother(0x%llx)", used ? "," : "",
			 (unsigned long long)reasons);
}

const char *sysom_gpu_health_problem(const struct sysom_batch *b, const struct sysom_gpu_health *g)
{
	const uint32_t strings[] = { g->uuid, g->pci_bus_id, g->name };
	const uint32_t U = SYSOM_GPU_UNKNOWN;

	if (g->device >= SYSOM_GPU_MAX_DEVICES)
		return "device index out of range";
	if (!strings_ok(b, strings, sizeof(strings) / sizeof(strings[0])))
		return "string index out of range";
	if (g->samples == 0)
		return "no samples";
	if (g->slowdown_samples > g->samples)
		return "more slowdown samples than samples";
	if ((g->reasons_any == SYSOM_GPU_UNKNOWN64) != (g->reasons_last == SYSOM_GPU_UNKNOWN64) ||
	    (g->reasons_any != SYSOM_GPU_UNKNOWN64 && (g->reasons_last & ~g->reasons_any)))
		return "last reasons not among the window's reasons";
	if (g->reasons_any == SYSOM_GPU_UNKNOWN64 && g->slowdown_samples)
		return "slowdown samples without reasons";
	if ((g->sm_clock_min == U) != (g->sm_clock_last == U) ||
	    (g->sm_clock_min != U && g->sm_clock_min > g->sm_clock_last))
		return "SM clock minimum above its last value";
	if ((g->temp_max == U) != (g->temp_last == U) ||
	    (g->temp_max != U && g->temp_last > g->temp_max))
		return "temperature above its maximum";
	if ((g->power_max_mw == U) != (g->power_last_mw == U) ||
	    (g->power_max_mw != U && g->power_last_mw > g->power_max_mw))
		return "power above its maximum";
	if ((g->util_gpu != U && g->util_gpu > 100) || (g->util_mem != U && g->util_mem > 100))
		return "utilization above 100%";
	if (g->flags & ~(uint32_t)SYSOM_GPU_FLAGS_ALL)
		return "unknown flags";
	if (g->xid_last && !g->xid_count)
		return "Xid code without events";
	return NULL;
}

int sysom_batch_set_gpu_health(struct sysom_batch *b, const struct sysom_gpu_health *g)
{
	int err;

	if (sysom_gpu_health_problem(b, g))
		return -EINVAL;
	for (uint32_t i = 0; i < b->gpu_health_count; i++) {
		if (b->gpu_health[i].device == g->device) {
			b->gpu_health[i] = *g;
			return 0;
		}
	}
	if ((err = GROW(b->gpu_health, b->gpu_health_cap, b->gpu_health_count + 1)))
		return err;
	b->gpu_health[b->gpu_health_count++] = *g;
	return 0;
}

int sysom_batch_set_communicator(struct sysom_batch *b, const struct sysom_communicator *c)
{
	int err;

	if (c->process >= b->process_count || c->key == 0 || c->key_source == 0 ||
	    c->key_source > SYSOM_COMM_KEY_SOURCE_MAX || !rank_ok(c->rank, c->nranks) ||
	    (c->flags & ~SYSOM_COMM_DESTROYED))
		return -EINVAL;
	for (uint32_t i = 0; i < b->communicator_count; i++) {
		if (b->communicators[i].process == c->process && b->communicators[i].key == c->key) {
			b->communicators[i] = *c;
			return 0;
		}
	}
	if ((err = GROW(b->communicators, b->communicator_cap, b->communicator_count + 1)))
		return err;
	b->communicators[b->communicator_count++] = *c;
	return 0;
}

int sysom_batch_add_nccl_call(struct sysom_batch *b, const struct sysom_nccl_call *c)
{
	int err;

	if (c->process >= b->process_count || c->op == 0 || c->op > SYSOM_NCCL_OP_MAX ||
	    c->exit_ns < c->entry_ns || (c->flags & ~(SYSOM_NCCL_IN_GROUP | SYSOM_NCCL_IN_FLIGHT)) || c->peer < -1 ||
	    c->rank < -1)
		return -EINVAL;
	if ((err = GROW(b->nccl_calls, b->nccl_call_cap, b->nccl_call_count + 1)))
		return err;
	b->nccl_calls[b->nccl_call_count++] = *c;
	return 0;
}

struct launch_key {
	const struct sysom_batch *b;
	const struct sysom_launch *l;
};

static bool launch_eq(const void *ctx, uint32_t idx)
{
	const struct launch_key *k = ctx;
	const struct sysom_launch *o = &k->b->launches[idx];

	return o->process == k->l->process && o->function == k->l->function &&
	       o->user_stack == k->l->user_stack && o->kernel_stack == k->l->kernel_stack;
}

int sysom_batch_add_launch(struct sysom_batch *b, const struct sysom_launch *l)
{
	struct launch_key key = { b, l };
	uint64_t h;
	uint32_t found;
	int err;

	if (!b->dedup || l->count == 0 || l->process >= b->process_count ||
	    l->kernel_name >= b->string_count ||
	    !stack_ref_ok(b, l->user_stack, SYSOM_STACK_USER) ||
	    !stack_ref_ok(b, l->kernel_stack, SYSOM_STACK_KERNEL) ||
	    (l->flags & ~(SYSOM_LAUNCH_EX | SYSOM_LAUNCH_PTSZ)))
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(l->process, l->function),
			   (uint64_t)l->user_stack << 32 | l->kernel_stack);
	found = hash_index_find(&b->dedup->launches, h, launch_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_launch *o = &b->launches[found];
		uint32_t name = o->kernel_name ? o->kernel_name : l->kernel_name;

		o->count = o->count > UINT64_MAX - l->count ? UINT64_MAX : o->count + l->count;
		memcpy(o->grid, l->grid, sizeof(o->grid));
		memcpy(o->block, l->block, sizeof(o->block));
		o->shared_mem = l->shared_mem;
		o->flags |= l->flags;
		o->kernel_name = name;
		return 0;
	}
	if ((err = GROW(b->launches, b->launch_cap, b->launch_count + 1)))
		return err;
	b->launches[b->launch_count] = *l;
	if ((err = hash_index_insert(&b->dedup->launches, h, b->launch_count)))
		return err;
	b->launch_count++;
	return 0;
}

/* ---- GPU-side timing (minor 2) ------------------------------------------------------------ */

static bool string_ok(const struct sysom_batch *b, uint32_t idx)
{
	return idx < b->string_count;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

const char *sysom_gpu_kernel_problem(const struct sysom_batch *b, const struct sysom_gpu_kernel *k)
{
	uint64_t in_buckets = 0;

	if (k->process >= b->process_count)
		return "process out of range";
	if (!string_ok(b, k->name) || k->name == 0)
		return "kernel name missing or out of range";
	if (k->count == 0)
		return "zero count";
	if (k->min_ns > k->max_ns || k->max_ns > k->total_ns)
		return "min > max or max > total";
	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		in_buckets += k->hist[i];
	if (in_buckets > k->count)
		return "histogram holds more executions than count";
	return NULL;
}

const char *sysom_nccl_profile_problem(const struct sysom_batch *b,
				       const struct sysom_nccl_profile *p)
{
	if (p->process >= b->process_count)
		return "process out of range";
	if (p->comm_id == 0)
		return "comm_id 0";
	if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks)
		return "rank outside [0, nranks)";
	if (p->peer < -1 || p->peer >= p->nranks)
		return "peer outside [-1, nranks)";
	if (!string_ok(b, p->comm_name) || !string_ok(b, p->func) || p->func == 0 ||
	    !string_ok(b, p->algo) || !string_ok(b, p->proto) || !string_ok(b, p->datatype))
		return "string out of range (or func empty)";
	if (p->count == 0)
		return "zero count";
	if (p->kernel_timed > p->count || p->span_timed > p->count)
		return "more timed operations than operations";
	if (p->kernel_timed && p->kernel_ns_min > p->kernel_ns_max)
		return "kernel_ns_min > kernel_ns_max";
	if (p->first_seq > p->last_seq)
		return "first_seq > last_seq";
	return NULL;
}

const char *sysom_nccl_link_problem(const struct sysom_batch *b, const struct sysom_nccl_link *l)
{
	const double sums[] = { l->sx, l->sy, l->sxx, l->sxy, l->syy };

	if (l->process >= b->process_count)
		return "process out of range";
	if (l->comm_id == 0)
		return "comm_id 0";
	if (l->rank < 0 || l->peer < 0 || l->channel < -1)
		return "negative rank, peer or channel";
	if (l->transfers == 0)
		return "zero transfers";
	for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
		if (!isfinite(sums[i]))
			return "sufficient statistic not finite";
	if (isinf(l->min_latency_ns) || isinf(l->min_bytes_per_ns) || isinf(l->min_r2))
		return "MIN-mode fit infinite";
	return NULL;
}

struct row_key {
	const struct sysom_batch *b;
	const void *row;
};

static bool gpu_kernel_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;
	const struct sysom_gpu_kernel *a = &k->b->gpu_kernels[idx], *n = k->row;

	return a->process == n->process && a->name == n->name && a->device == n->device &&
	       a->stream == n->stream;
}

int sysom_batch_add_gpu_kernel(struct sysom_batch *b, const struct sysom_gpu_kernel *k)
{
	struct row_key key = { b, k };
	uint32_t found;
	uint64_t h;
	int err;

	if (!b->dedup || sysom_gpu_kernel_problem(b, k))
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(k->process, k->name),
			   sysom_hash_mix(k->device, k->stream));
	found = hash_index_find(&b->dedup->gpu_kernels, h, gpu_kernel_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_gpu_kernel *o = &b->gpu_kernels[found];

		o->count = add_sat(o->count, k->count);
		o->total_ns = add_sat(o->total_ns, k->total_ns);
		o->min_ns = k->min_ns < o->min_ns ? k->min_ns : o->min_ns;
		o->max_ns = k->max_ns > o->max_ns ? k->max_ns : o->max_ns;
		for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
			o->hist[i] = o->hist[i] > UINT32_MAX - k->hist[i] ? UINT32_MAX
									  : o->hist[i] + k->hist[i];
		return 0;
	}
	if ((err = GROW(b->gpu_kernels, b->gpu_kernel_cap, b->gpu_kernel_count + 1)))
		return err;
	b->gpu_kernels[b->gpu_kernel_count] = *k;
	if ((err = hash_index_insert(&b->dedup->gpu_kernels, h, b->gpu_kernel_count)))
		return err;
	b->gpu_kernel_count++;
	return 0;
}

static bool nccl_profile_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;
	const struct sysom_nccl_profile *a = &k->b->nccl_profiles[idx], *n = k->row;

	return a->process == n->process && a->comm_id == n->comm_id && a->func == n->func &&
	       a->algo == n->algo && a->proto == n->proto && a->datatype == n->datatype &&
	       a->peer == n->peer;
}

int sysom_batch_add_nccl_profile(struct sysom_batch *b, const struct sysom_nccl_profile *p)
{
	struct row_key key = { b, p };
	uint32_t found;
	uint64_t h;
	int err;

	if (!b->dedup || sysom_nccl_profile_problem(b, p))
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(p->process, p->comm_id),
			   sysom_hash_mix((uint64_t)p->func << 32 | p->algo,
					  sysom_hash_mix((uint64_t)p->proto << 32 | p->datatype,
							 (uint32_t)p->peer)));
	found = hash_index_find(&b->dedup->nccl_profiles, h, nccl_profile_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_nccl_profile *o = &b->nccl_profiles[found];

		if (p->kernel_timed) {
			o->kernel_ns_min = !o->kernel_timed || p->kernel_ns_min < o->kernel_ns_min
						   ? p->kernel_ns_min : o->kernel_ns_min;
			o->kernel_ns_max = p->kernel_ns_max > o->kernel_ns_max ? p->kernel_ns_max
									      : o->kernel_ns_max;
		}
		o->first_seq = p->first_seq < o->first_seq ? p->first_seq : o->first_seq;
		o->last_seq = p->last_seq > o->last_seq ? p->last_seq : o->last_seq;
		o->nchannels = p->nchannels > o->nchannels ? p->nchannels : o->nchannels;
		if (p->comm_name)
			o->comm_name = p->comm_name;
		o->count = add_sat(o->count, p->count);
		o->bytes = add_sat(o->bytes, p->bytes);
		o->kernel_timed = add_sat(o->kernel_timed, p->kernel_timed);
		o->kernel_ns_total = add_sat(o->kernel_ns_total, p->kernel_ns_total);
		o->span_timed = add_sat(o->span_timed, p->span_timed);
		o->span_ns_total = add_sat(o->span_ns_total, p->span_ns_total);
		o->enqueue_ns_total = add_sat(o->enqueue_ns_total, p->enqueue_ns_total);
		o->transfers = add_sat(o->transfers, p->transfers);
		o->transfer_bytes = add_sat(o->transfer_bytes, p->transfer_bytes);
		/* Saturation could break the invariants the decoder checks: clamp. */
		if (o->kernel_timed > o->count)
			o->kernel_timed = o->count;
		if (o->span_timed > o->count)
			o->span_timed = o->count;
		return 0;
	}
	if ((err = GROW(b->nccl_profiles, b->nccl_profile_cap, b->nccl_profile_count + 1)))
		return err;
	b->nccl_profiles[b->nccl_profile_count] = *p;
	if ((err = hash_index_insert(&b->dedup->nccl_profiles, h, b->nccl_profile_count)))
		return err;
	b->nccl_profile_count++;
	return 0;
}

static bool nccl_link_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;
	const struct sysom_nccl_link *a = &k->b->nccl_links[idx], *n = k->row;

	return a->process == n->process && a->comm_id == n->comm_id && a->peer == n->peer &&
	       a->channel == n->channel;
}

/* Adds finite sums; a sum that overflows to infinity keeps the largest finite value. */
static double add_finite(double a, double b)
{
	double s = a + b;

	return isfinite(s) ? s : (s > 0 ? DBL_MAX : -DBL_MAX);
}

int sysom_batch_add_nccl_link(struct sysom_batch *b, const struct sysom_nccl_link *l)
{
	struct row_key key = { b, l };
	uint32_t found;
	uint64_t h;
	int err;

	if (!b->dedup || sysom_nccl_link_problem(b, l))
		return -EINVAL;
	h = sysom_hash_mix(sysom_hash_mix(l->process, l->comm_id),
			   (uint64_t)(uint32_t)l->peer << 32 | (uint32_t)l->channel);
	found = hash_index_find(&b->dedup->nccl_links, h, nccl_link_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_nccl_link *o = &b->nccl_links[found];

		o->rank = l->rank;
		o->transfers = add_sat(o->transfers, l->transfers);
		o->bytes = add_sat(o->bytes, l->bytes);
		o->time_ns_total = add_sat(o->time_ns_total, l->time_ns_total);
		o->sx = add_finite(o->sx, l->sx);
		o->sy = add_finite(o->sy, l->sy);
		o->sxx = add_finite(o->sxx, l->sxx);
		o->sxy = add_finite(o->sxy, l->sxy);
		o->syy = add_finite(o->syy, l->syy);
		if (l->min_points > o->min_points) {
			o->min_latency_ns = l->min_latency_ns;
			o->min_bytes_per_ns = l->min_bytes_per_ns;
			o->min_r2 = l->min_r2;
			o->min_points = l->min_points;
		}
		return 0;
	}
	if ((err = GROW(b->nccl_links, b->nccl_link_cap, b->nccl_link_count + 1)))
		return err;
	b->nccl_links[b->nccl_link_count] = *l;
	if ((err = hash_index_insert(&b->dedup->nccl_links, h, b->nccl_link_count)))
		return err;
	b->nccl_link_count++;
	return 0;
}

/* ---- OS signals (minor 3) ------------------------------------------------------------------- */

const char *sysom_os_cpu_problem(const struct sysom_os_cpu *c)
{
	if (c->cpu >= SYSOM_OS_CPU_LIMIT)
		return "cpu out of range";
	if (c->numa_node < -1)
		return "NUMA node below -1";
	if (c->hardirq_ns && !c->hardirq_count)
		return "hard interrupt time without interrupts";
	for (int v = 0; v < SYSOM_SOFTIRQ_COUNT; v++)
		if (c->softirq_ns[v] && !c->softirq_count[v])
			return "softirq time without softirqs";
	return NULL;
}

const char *sysom_os_irq_problem(const struct sysom_batch *b, const struct sysom_os_irq *q)
{
	if (q->cpu >= SYSOM_OS_CPU_LIMIT)
		return "cpu out of range";
	if (!string_ok(b, q->name))
		return "name out of range";
	if (q->count == 0)
		return "zero count";
	return NULL;
}

const char *sysom_os_thread_problem(const struct sysom_batch *b, const struct sysom_os_thread *t)
{
	uint64_t in_buckets = 0;

	if (t->process >= b->process_count)
		return "process out of range";
	if (t->tid == 0)
		return "tid 0";
	if (!string_ok(b, t->comm))
		return "comm out of range";
	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		in_buckets += t->runq_hist[i];
	if (in_buckets > t->runq_waits)
		return "histogram holds more waits than runq_waits";
	if (t->numa_migrations > t->migrations)
		return "more NUMA migrations than migrations";
	return NULL;
}

static bool os_cpu_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;

	return k->b->os_cpus[idx].cpu == ((const struct sysom_os_cpu *)k->row)->cpu;
}

int sysom_batch_add_os_cpu(struct sysom_batch *b, const struct sysom_os_cpu *c)
{
	struct row_key key = { b, c };
	uint64_t h = sysom_hash_mix(0x05c9, c->cpu);
	uint32_t found;
	int err;

	if (!b->dedup || sysom_os_cpu_problem(c))
		return -EINVAL;
	found = hash_index_find(&b->dedup->os_cpus, h, os_cpu_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_os_cpu *o = &b->os_cpus[found];

		if (c->numa_node >= 0)
			o->numa_node = c->numa_node;
		o->busy_ns = add_sat(o->busy_ns, c->busy_ns);
		o->hardirq_count = add_sat(o->hardirq_count, c->hardirq_count);
		o->hardirq_ns = add_sat(o->hardirq_ns, c->hardirq_ns);
		for (int v = 0; v < SYSOM_SOFTIRQ_COUNT; v++) {
			o->softirq_count[v] = add_sat(o->softirq_count[v], c->softirq_count[v]);
			o->softirq_ns[v] = add_sat(o->softirq_ns[v], c->softirq_ns[v]);
		}
		o->context_switches = add_sat(o->context_switches, c->context_switches);
		o->runq_wait_ns = add_sat(o->runq_wait_ns, c->runq_wait_ns);
		return 0;
	}
	if ((err = GROW(b->os_cpus, b->os_cpu_cap, b->os_cpu_count + 1)))
		return err;
	b->os_cpus[b->os_cpu_count] = *c;
	if ((err = hash_index_insert(&b->dedup->os_cpus, h, b->os_cpu_count)))
		return err;
	b->os_cpu_count++;
	return 0;
}

static bool os_irq_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;
	const struct sysom_os_irq *a = &k->b->os_irqs[idx], *n = k->row;

	return a->cpu == n->cpu && a->irq == n->irq;
}

int sysom_batch_add_os_irq(struct sysom_batch *b, const struct sysom_os_irq *q)
{
	struct row_key key = { b, q };
	uint64_t h = sysom_hash_mix(q->cpu, q->irq);
	uint32_t found;
	int err;

	if (!b->dedup || sysom_os_irq_problem(b, q))
		return -EINVAL;
	found = hash_index_find(&b->dedup->os_irqs, h, os_irq_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_os_irq *o = &b->os_irqs[found];

		o->count = add_sat(o->count, q->count);
		o->ns = add_sat(o->ns, q->ns);
		if (q->name)
			o->name = q->name; /* the handler's latest name */
		return 0;
	}
	if ((err = GROW(b->os_irqs, b->os_irq_cap, b->os_irq_count + 1)))
		return err;
	b->os_irqs[b->os_irq_count] = *q;
	if ((err = hash_index_insert(&b->dedup->os_irqs, h, b->os_irq_count)))
		return err;
	b->os_irq_count++;
	return 0;
}

static bool os_thread_eq(const void *ctx, uint32_t idx)
{
	const struct row_key *k = ctx;
	const struct sysom_os_thread *a = &k->b->os_threads[idx], *n = k->row;

	return a->process == n->process && a->tid == n->tid;
}

int sysom_batch_add_os_thread(struct sysom_batch *b, const struct sysom_os_thread *t)
{
	struct row_key key = { b, t };
	uint64_t h = sysom_hash_mix(t->process, t->tid);
	uint32_t found;
	int err;

	if (!b->dedup || sysom_os_thread_problem(b, t))
		return -EINVAL;
	found = hash_index_find(&b->dedup->os_threads, h, os_thread_eq, &key);
	if (found != HASH_INDEX_NONE) {
		struct sysom_os_thread *o = &b->os_threads[found];

		o->comm = t->comm;
		o->oncpu_ns = add_sat(o->oncpu_ns, t->oncpu_ns);
		o->runq_wait_ns = add_sat(o->runq_wait_ns, t->runq_wait_ns);
		o->runq_waits = add_sat(o->runq_waits, t->runq_waits);
		/* A saturated bucket only lowers the histogram's sum: still <= runq_waits. */
		for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
			o->runq_hist[i] = o->runq_hist[i] > UINT32_MAX - t->runq_hist[i]
						  ? UINT32_MAX
						  : o->runq_hist[i] + t->runq_hist[i];
		o->voluntary_switches = add_sat(o->voluntary_switches, t->voluntary_switches);
		o->involuntary_switches = add_sat(o->involuntary_switches, t->involuntary_switches);
		o->migrations = add_sat(o->migrations, t->migrations);
		o->numa_migrations = add_sat(o->numa_migrations, t->numa_migrations);
		if (o->numa_migrations > o->migrations) /* only after saturation */
			o->numa_migrations = o->migrations;
		o->pages_migrated = add_sat(o->pages_migrated, t->pages_migrated);
		o->hardirq_ns = add_sat(o->hardirq_ns, t->hardirq_ns);
		o->softirq_ns = add_sat(o->softirq_ns, t->softirq_ns);
		for (int i = 0; i < SYSOM_CPU_MASK_WORDS; i++)
			o->cpus[i] |= t->cpus[i];
		return 0;
	}
	if ((err = GROW(b->os_threads, b->os_thread_cap, b->os_thread_count + 1)))
		return err;
	b->os_threads[b->os_thread_count] = *t;
	if ((err = hash_index_insert(&b->dedup->os_threads, h, b->os_thread_count)))
		return err;
	b->os_thread_count++;
	return 0;
}

/* ---- encoder ------------------------------------------------------------------------------ */

/* Field offsets: common/wire/wire_layout.h, shared with the decoder. */

struct section_entry {
	uint16_t type;
	uint32_t count;
	size_t offset;
	size_t size;
};

/* Appends `size` zeroed bytes for one record and returns them; NULL when the buffer failed
 * (the error sticks to `out`, which sysom_batch_encode checks). */
static uint8_t *put_record(struct byte_buf *out, size_t size)
{
	uint8_t *p = byte_buf_reserve(out, size);

	if (!p)
		return NULL;
	memset(p, 0, size);
	out->len += size;
	return p;
}

static void store_double(uint8_t *p, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	store_le64(p, bits);
}

static void encode_strings(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->string_count; i++) {
		uint8_t *p = put_record(out, WIRE_STRING_LENGTH_SIZE);

		if (!p)
			return;
		store_le32(p, b->strings[i].length);
		byte_buf_append(out, b->string_data + b->strings[i].offset, b->strings[i].length);
	}
}

static void encode_node(const struct sysom_batch *b, struct byte_buf *out)
{
	const struct sysom_node_info *n = &b->node;
	uint8_t *p = put_record(out, SYSOM_NODE_RECORD_SIZE);

	if (!p)
		return;
	store_le32(p + WIRE_NODE_HOSTNAME, n->hostname);
	store_le32(p + WIRE_NODE_KERNEL_RELEASE, n->kernel_release);
	store_le32(p + WIRE_NODE_MACHINE, n->machine);
	store_le32(p + WIRE_NODE_AGENT_VERSION, n->agent_version);
	store_le32(p + WIRE_NODE_KERNEL_OBJECT, n->kernel_object);
	store_le32(p + WIRE_NODE_SAMPLE_HZ, n->sample_hz);
	store_le32(p + WIRE_NODE_SAMPLE_RATE_PPM, n->sample_rate_ppm);
	store_le32(p + WIRE_NODE_DRAIN_INTERVAL_MS, n->drain_interval_ms);
	store_le32(p + WIRE_NODE_BATCH_INTERVAL_MS, n->batch_interval_ms);
	store_le32(p + WIRE_NODE_ONLINE_CPUS, n->online_cpus);
	memcpy(p + WIRE_NODE_BOOT_ID, n->boot_id, sizeof(n->boot_id));
}

static void encode_objects(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->object_count; i++) {
		const struct sysom_object *o = &b->objects[i];
		uint8_t *p = put_record(out, SYSOM_OBJECT_RECORD_SIZE);

		if (!p)
			return;
		p[WIRE_OBJECT_KIND] = o->kind;
		p[WIRE_OBJECT_BUILD_ID_LEN] = o->build_id_len;
		store_le32(p + WIRE_OBJECT_NAME, o->name);
		memcpy(p + WIRE_OBJECT_BUILD_ID, o->build_id, o->build_id_len); /* zero beyond */
	}
}

static void encode_processes(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->process_count; i++) {
		const struct sysom_process *o = &b->processes[i];
		uint8_t *p = put_record(out, SYSOM_PROCESS_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_PROCESS_TGID, o->tgid);
		store_le32(p + WIRE_PROCESS_GENERATION, o->generation);
		store_le64(p + WIRE_PROCESS_START_TIME, o->start_time_ns);
		store_le32(p + WIRE_PROCESS_COMM, o->comm);
		store_le32(p + WIRE_PROCESS_EXE, o->exe);
		store_le32(p + WIRE_PROCESS_CMDLINE, o->cmdline);
		store_le32(p + WIRE_PROCESS_PPID, o->ppid);
	}
}

static void encode_mappings(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->mapping_count; i++) {
		const struct sysom_mapping *m = &b->mappings[i];
		uint8_t *p = put_record(out, SYSOM_MAPPING_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_MAPPING_PROCESS, m->process);
		store_le32(p + WIRE_MAPPING_OBJECT, m->object);
		store_le64(p + WIRE_MAPPING_START, m->start);
		store_le64(p + WIRE_MAPPING_END, m->end);
		store_le64(p + WIRE_MAPPING_FILE_OFFSET, m->file_offset);
	}
}

static void encode_stacks(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct sysom_stack *s = &b->stacks[i];
		const struct sysom_frame *f = b->frames + s->first_frame;
		uint8_t *p = put_record(out, SYSOM_STACK_HEADER_SIZE);

		if (!p)
			return;
		store_le16(p + WIRE_STACK_NFRAMES, s->nframes);
		p[WIRE_STACK_KIND] = s->kind;
		p[WIRE_STACK_STOP_REASON] = s->stop_reason;
		for (uint16_t j = 0; j < s->nframes; j++) {
			if (!(p = put_record(out, SYSOM_FRAME_RECORD_SIZE)))
				return;
			store_le32(p + WIRE_FRAME_OBJECT, f[j].object);
			store_le64(p + WIRE_FRAME_OFFSET, f[j].offset);
		}
	}
}

static void encode_samples(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->sample_count; i++) {
		const struct sysom_sample *s = &b->samples[i];
		uint8_t *p = put_record(out, SYSOM_SAMPLE_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_SAMPLE_PROCESS, s->process);
		store_le32(p + WIRE_SAMPLE_TID, s->tid);
		store_le32(p + WIRE_SAMPLE_CPU, s->cpu);
		store_le32(p + WIRE_SAMPLE_TIME_OFFSET_MS, s->time_offset_ms);
		store_le32(p + WIRE_SAMPLE_KERNEL_STACK, s->kernel_stack);
		store_le32(p + WIRE_SAMPLE_USER_STACK, s->user_stack);
		store_le32(p + WIRE_SAMPLE_THREAD_COMM, s->thread_comm);
		store_le64(p + WIRE_SAMPLE_COUNT, s->count);
	}
}

static void encode_counters(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->counter_count; i++) {
		uint8_t *p = put_record(out, SYSOM_COUNTER_RECORD_SIZE);

		if (!p)
			return;
		store_le16(p + WIRE_COUNTER_ID, b->counters[i].id);
		store_le64(p + WIRE_COUNTER_VALUE, b->counters[i].value);
	}
}

static void encode_job_ranks(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		const struct sysom_job_rank *j = &b->job_ranks[i];
		uint8_t *p = put_record(out, SYSOM_JOB_RANK_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_JOB_RANK_PROCESS, j->process);
		store_le32(p + WIRE_JOB_RANK_JOB, j->job);
		store_le32(p + WIRE_JOB_RANK_RANK, (uint32_t)j->rank);
		store_le32(p + WIRE_JOB_RANK_WORLD_SIZE, (uint32_t)j->world_size);
		store_le32(p + WIRE_JOB_RANK_LOCAL_RANK, (uint32_t)j->local_rank);
		store_le32(p + WIRE_JOB_RANK_LOCAL_WORLD_SIZE, (uint32_t)j->local_world_size);
		store_le32(p + WIRE_JOB_RANK_GROUP_RANK, (uint32_t)j->group_rank);
		p[WIRE_JOB_RANK_SOURCE] = j->source;
		p[WIRE_JOB_RANK_ROLE] = j->role;
		p[WIRE_JOB_RANK_GPU_DEVICE] = j->gpu_device;
		store_le32(p + WIRE_JOB_RANK_RANK_PID, j->rank_pid);
		store_le32(p + WIRE_JOB_RANK_JOB_ID_SOURCE, j->job_id_source);
		store_le32(p + WIRE_JOB_RANK_MASTER, j->master);
		store_le32(p + WIRE_JOB_RANK_GROUPS, j->groups);
	}
}

static void encode_communicators(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->communicator_count; i++) {
		const struct sysom_communicator *c = &b->communicators[i];
		uint8_t *p = put_record(out, SYSOM_COMMUNICATOR_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_COMM_PROCESS, c->process);
		store_le32(p + WIRE_COMM_RANK, (uint32_t)c->rank);
		store_le64(p + WIRE_COMM_KEY, c->key);
		store_le64(p + WIRE_COMM_PARENT_KEY, c->parent_key);
		store_le64(p + WIRE_COMM_NCCL_COMM_HASH, c->nccl_comm_hash);
		store_le32(p + WIRE_COMM_NRANKS, (uint32_t)c->nranks);
		store_le32(p + WIRE_COMM_SPLIT_COLOR, (uint32_t)c->split_color);
		store_le32(p + WIRE_COMM_SPLIT_ORDINAL, c->split_ordinal);
		store_le32(p + WIRE_COMM_SPLIT_KEY, (uint32_t)c->split_key);
		p[WIRE_COMM_KEY_SOURCE] = c->key_source;
		p[WIRE_COMM_FLAGS] = c->flags;
		store_le64(p + WIRE_COMM_CREATED, c->created_ns);
		store_le64(p + WIRE_COMM_HANDLE, c->handle);
	}
}

static void encode_nccl_calls(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		const struct sysom_nccl_call *c = &b->nccl_calls[i];
		uint8_t *p = put_record(out, SYSOM_NCCL_CALL_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_NCCL_CALL_PROCESS, c->process);
		store_le32(p + WIRE_NCCL_CALL_TID, c->tid);
		store_le64(p + WIRE_NCCL_CALL_COMM_KEY, c->comm_key);
		store_le64(p + WIRE_NCCL_CALL_SEQ, c->seq);
		store_le64(p + WIRE_NCCL_CALL_ENTRY, c->entry_ns);
		store_le64(p + WIRE_NCCL_CALL_EXIT, c->exit_ns);
		store_le64(p + WIRE_NCCL_CALL_COUNT, c->count);
		store_le64(p + WIRE_NCCL_CALL_BYTES, c->bytes);
		store_le64(p + WIRE_NCCL_CALL_STREAM, c->stream);
		p[WIRE_NCCL_CALL_OP] = c->op;
		p[WIRE_NCCL_CALL_DATATYPE] = c->datatype;
		p[WIRE_NCCL_CALL_REDOP] = c->redop;
		p[WIRE_NCCL_CALL_FLAGS] = c->flags;
		store_le32(p + WIRE_NCCL_CALL_PEER, (uint32_t)c->peer);
		store_le32(p + WIRE_NCCL_CALL_RESULT, (uint32_t)c->result);
		store_le32(p + WIRE_NCCL_CALL_RANK, (uint32_t)c->rank);
	}
}

static void encode_launches(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->launch_count; i++) {
		const struct sysom_launch *l = &b->launches[i];
		uint8_t *p = put_record(out, SYSOM_LAUNCH_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_LAUNCH_PROCESS, l->process);
		store_le32(p + WIRE_LAUNCH_KERNEL_NAME, l->kernel_name);
		store_le64(p + WIRE_LAUNCH_FUNCTION, l->function);
		store_le32(p + WIRE_LAUNCH_USER_STACK, l->user_stack);
		store_le32(p + WIRE_LAUNCH_KERNEL_STACK, l->kernel_stack);
		store_le64(p + WIRE_LAUNCH_COUNT, l->count);
		for (int k = 0; k < 3; k++) {
			store_le32(p + WIRE_LAUNCH_GRID + 4 * k, l->grid[k]);
			store_le32(p + WIRE_LAUNCH_BLOCK + 4 * k, l->block[k]);
		}
		store_le32(p + WIRE_LAUNCH_SHARED_MEM, l->shared_mem);
		store_le16(p + WIRE_LAUNCH_FLAGS, l->flags);
	}
}

static void encode_gpu_kernels(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->gpu_kernel_count; i++) {
		const struct sysom_gpu_kernel *k = &b->gpu_kernels[i];
		uint8_t *p = put_record(out, SYSOM_GPU_KERNEL_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_GPU_KERNEL_PROCESS, k->process);
		store_le32(p + WIRE_GPU_KERNEL_NAME, k->name);
		store_le32(p + WIRE_GPU_KERNEL_DEVICE, k->device);
		store_le64(p + WIRE_GPU_KERNEL_STREAM, k->stream);
		store_le64(p + WIRE_GPU_KERNEL_COUNT, k->count);
		store_le64(p + WIRE_GPU_KERNEL_TOTAL_NS, k->total_ns);
		store_le64(p + WIRE_GPU_KERNEL_MIN_NS, k->min_ns);
		store_le64(p + WIRE_GPU_KERNEL_MAX_NS, k->max_ns);
		for (int j = 0; j < SYSOM_GPU_HIST_BUCKETS; j++)
			store_le32(p + WIRE_GPU_KERNEL_HIST + 4 * j, k->hist[j]);
	}
}

static void encode_nccl_profiles(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->nccl_profile_count; i++) {
		const struct sysom_nccl_profile *o = &b->nccl_profiles[i];
		uint8_t *p = put_record(out, SYSOM_NCCL_PROFILE_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_NCCL_PROFILE_PROCESS, o->process);
		store_le32(p + WIRE_NCCL_PROFILE_RANK, (uint32_t)o->rank);
		store_le64(p + WIRE_NCCL_PROFILE_COMM_ID, o->comm_id);
		store_le32(p + WIRE_NCCL_PROFILE_COMM_NAME, o->comm_name);
		store_le32(p + WIRE_NCCL_PROFILE_NRANKS, (uint32_t)o->nranks);
		store_le32(p + WIRE_NCCL_PROFILE_FUNC, o->func);
		store_le32(p + WIRE_NCCL_PROFILE_ALGO, o->algo);
		store_le32(p + WIRE_NCCL_PROFILE_PROTO, o->proto);
		store_le32(p + WIRE_NCCL_PROFILE_DATATYPE, o->datatype);
		store_le32(p + WIRE_NCCL_PROFILE_PEER, (uint32_t)o->peer);
		store_le32(p + WIRE_NCCL_PROFILE_NCHANNELS, o->nchannels);
		store_le64(p + WIRE_NCCL_PROFILE_COUNT, o->count);
		store_le64(p + WIRE_NCCL_PROFILE_BYTES, o->bytes);
		store_le64(p + WIRE_NCCL_PROFILE_KERNEL_TIMED, o->kernel_timed);
		store_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_TOTAL, o->kernel_ns_total);
		store_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_MIN, o->kernel_ns_min);
		store_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_MAX, o->kernel_ns_max);
		store_le64(p + WIRE_NCCL_PROFILE_SPAN_TIMED, o->span_timed);
		store_le64(p + WIRE_NCCL_PROFILE_SPAN_NS_TOTAL, o->span_ns_total);
		store_le64(p + WIRE_NCCL_PROFILE_ENQUEUE_NS_TOTAL, o->enqueue_ns_total);
		store_le64(p + WIRE_NCCL_PROFILE_TRANSFERS, o->transfers);
		store_le64(p + WIRE_NCCL_PROFILE_TRANSFER_BYTES, o->transfer_bytes);
		store_le64(p + WIRE_NCCL_PROFILE_FIRST_SEQ, o->first_seq);
		store_le64(p + WIRE_NCCL_PROFILE_LAST_SEQ, o->last_seq);
	}
}

static void encode_nccl_links(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->nccl_link_count; i++) {
		const struct sysom_nccl_link *l = &b->nccl_links[i];
		uint8_t *p = put_record(out, SYSOM_NCCL_LINK_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_NCCL_LINK_PROCESS, l->process);
		store_le32(p + WIRE_NCCL_LINK_RANK, (uint32_t)l->rank);
		store_le64(p + WIRE_NCCL_LINK_COMM_ID, l->comm_id);
		store_le32(p + WIRE_NCCL_LINK_PEER, (uint32_t)l->peer);
		store_le32(p + WIRE_NCCL_LINK_CHANNEL, (uint32_t)l->channel);
		store_le64(p + WIRE_NCCL_LINK_TRANSFERS, l->transfers);
		store_le64(p + WIRE_NCCL_LINK_BYTES, l->bytes);
		store_le64(p + WIRE_NCCL_LINK_TIME_NS_TOTAL, l->time_ns_total);
		store_double(p + WIRE_NCCL_LINK_SX, l->sx);
		store_double(p + WIRE_NCCL_LINK_SY, l->sy);
		store_double(p + WIRE_NCCL_LINK_SXX, l->sxx);
		store_double(p + WIRE_NCCL_LINK_SXY, l->sxy);
		store_double(p + WIRE_NCCL_LINK_SYY, l->syy);
		store_double(p + WIRE_NCCL_LINK_MIN_LATENCY_NS, l->min_latency_ns);
		store_double(p + WIRE_NCCL_LINK_MIN_BYTES_PER_NS, l->min_bytes_per_ns);
		store_double(p + WIRE_NCCL_LINK_MIN_R2, l->min_r2);
		store_le32(p + WIRE_NCCL_LINK_MIN_POINTS, l->min_points);
	}
}

static void encode_os_cpus(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->os_cpu_count; i++) {
		const struct sysom_os_cpu *c = &b->os_cpus[i];
		uint8_t *p = put_record(out, SYSOM_OS_CPU_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_OS_CPU_CPU, c->cpu);
		store_le32(p + WIRE_OS_CPU_NUMA_NODE, (uint32_t)c->numa_node);
		store_le64(p + WIRE_OS_CPU_BUSY_NS, c->busy_ns);
		store_le64(p + WIRE_OS_CPU_HARDIRQ_COUNT, c->hardirq_count);
		store_le64(p + WIRE_OS_CPU_HARDIRQ_NS, c->hardirq_ns);
		for (int v = 0; v < SYSOM_SOFTIRQ_COUNT; v++) {
			store_le64(p + WIRE_OS_CPU_SOFTIRQ_COUNT + 8 * v, c->softirq_count[v]);
			store_le64(p + WIRE_OS_CPU_SOFTIRQ_NS + 8 * v, c->softirq_ns[v]);
		}
		store_le64(p + WIRE_OS_CPU_CONTEXT_SWITCHES, c->context_switches);
		store_le64(p + WIRE_OS_CPU_RUNQ_WAIT_NS, c->runq_wait_ns);
	}
}

static void encode_os_irqs(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->os_irq_count; i++) {
		const struct sysom_os_irq *q = &b->os_irqs[i];
		uint8_t *p = put_record(out, SYSOM_OS_IRQ_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_OS_IRQ_CPU, q->cpu);
		store_le32(p + WIRE_OS_IRQ_IRQ, q->irq);
		store_le32(p + WIRE_OS_IRQ_NAME, q->name);
		store_le64(p + WIRE_OS_IRQ_COUNT, q->count);
		store_le64(p + WIRE_OS_IRQ_NS, q->ns);
	}
}

static void encode_os_threads(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->os_thread_count; i++) {
		const struct sysom_os_thread *t = &b->os_threads[i];
		uint8_t *p = put_record(out, SYSOM_OS_THREAD_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_OS_THREAD_PROCESS, t->process);
		store_le32(p + WIRE_OS_THREAD_TID, t->tid);
		store_le32(p + WIRE_OS_THREAD_COMM, t->comm);
		store_le64(p + WIRE_OS_THREAD_ONCPU_NS, t->oncpu_ns);
		store_le64(p + WIRE_OS_THREAD_RUNQ_WAIT_NS, t->runq_wait_ns);
		store_le64(p + WIRE_OS_THREAD_RUNQ_WAITS, t->runq_waits);
		for (int k = 0; k < SYSOM_RUNQ_HIST_BUCKETS; k++)
			store_le32(p + WIRE_OS_THREAD_RUNQ_HIST + 4 * k, t->runq_hist[k]);
		store_le64(p + WIRE_OS_THREAD_VOLUNTARY_SWITCHES, t->voluntary_switches);
		store_le64(p + WIRE_OS_THREAD_INVOLUNTARY_SWITCHES, t->involuntary_switches);
		store_le64(p + WIRE_OS_THREAD_MIGRATIONS, t->migrations);
		store_le64(p + WIRE_OS_THREAD_NUMA_MIGRATIONS, t->numa_migrations);
		store_le64(p + WIRE_OS_THREAD_PAGES_MIGRATED, t->pages_migrated);
		store_le64(p + WIRE_OS_THREAD_HARDIRQ_NS, t->hardirq_ns);
		store_le64(p + WIRE_OS_THREAD_SOFTIRQ_NS, t->softirq_ns);
		for (int k = 0; k < SYSOM_CPU_MASK_WORDS; k++)
			store_le64(p + WIRE_OS_THREAD_CPUS + 8 * k, t->cpus[k]);
	}
}

static void encode_offcpu(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->offcpu_count; i++) {
		const struct sysom_offcpu *o = &b->offcpu[i];
		uint8_t *p = put_record(out, SYSOM_OFFCPU_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_OFFCPU_PROCESS, o->process);
		store_le32(p + WIRE_OFFCPU_TID, o->tid);
		store_le32(p + WIRE_OFFCPU_TIME_OFFSET_MS, o->time_offset_ms);
		store_le32(p + WIRE_OFFCPU_KERNEL_STACK, o->kernel_stack);
		store_le32(p + WIRE_OFFCPU_USER_STACK, o->user_stack);
		store_le32(p + WIRE_OFFCPU_THREAD_COMM, o->thread_comm);
		p[WIRE_OFFCPU_STATE] = o->state;
		store_le64(p + WIRE_OFFCPU_COUNT, o->count);
		store_le64(p + WIRE_OFFCPU_BLOCKED_NS, o->blocked_ns);
		store_le64(p + WIRE_OFFCPU_MAX_NS, o->max_ns);
	}
}

static void encode_identities(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->identity_count; i++) {
		const struct sysom_identity *o = &b->identities[i];
		uint8_t *p = put_record(out, SYSOM_IDENTITY_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_IDENTITY_PROCESS, o->process);
		p[WIRE_IDENTITY_RUNTIME] = o->runtime;
		store_le32(p + WIRE_IDENTITY_CONTAINER_ID, o->container_id);
		store_le32(p + WIRE_IDENTITY_POD_UID, o->pod_uid);
		store_le32(p + WIRE_IDENTITY_NAMESPACE, o->pod_namespace);
		store_le32(p + WIRE_IDENTITY_POD_NAME, o->pod_name);
		store_le32(p + WIRE_IDENTITY_CONTAINER_NAME, o->container_name);
		store_le64(p + WIRE_IDENTITY_SLURM_JOB, o->slurm_job);
		store_le32(p + WIRE_IDENTITY_SLURM_STEP, o->slurm_step);
		store_le32(p + WIRE_IDENTITY_UNIT, o->unit);
	}
}

static void encode_gpu_health(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->gpu_health_count; i++) {
		const struct sysom_gpu_health *g = &b->gpu_health[i];
		uint8_t *p = put_record(out, SYSOM_GPU_HEALTH_RECORD_SIZE);

		if (!p)
			return;
		store_le32(p + WIRE_GPU_DEVICE, g->device);
		store_le32(p + WIRE_GPU_UUID, g->uuid);
		store_le32(p + WIRE_GPU_PCI_BUS_ID, g->pci_bus_id);
		store_le32(p + WIRE_GPU_NAME, g->name);
		store_le32(p + WIRE_GPU_SAMPLES, g->samples);
		store_le32(p + WIRE_GPU_SLOWDOWN_SAMPLES, g->slowdown_samples);
		store_le64(p + WIRE_GPU_REASONS_ANY, g->reasons_any);
		store_le64(p + WIRE_GPU_REASONS_LAST, g->reasons_last);
		store_le32(p + WIRE_GPU_SM_CLOCK_MIN, g->sm_clock_min);
		store_le32(p + WIRE_GPU_SM_CLOCK_LAST, g->sm_clock_last);
		store_le32(p + WIRE_GPU_SM_CLOCK_MAX, g->sm_clock_max);
		store_le32(p + WIRE_GPU_MEM_CLOCK_LAST, g->mem_clock_last);
		store_le32(p + WIRE_GPU_MEM_CLOCK_MAX, g->mem_clock_max);
		store_le32(p + WIRE_GPU_TEMP_MAX, g->temp_max);
		store_le32(p + WIRE_GPU_TEMP_LAST, g->temp_last);
		store_le32(p + WIRE_GPU_TEMP_SLOWDOWN, g->temp_slowdown);
		store_le32(p + WIRE_GPU_TEMP_SHUTDOWN, g->temp_shutdown);
		store_le32(p + WIRE_GPU_POWER_MAX, g->power_max_mw);
		store_le32(p + WIRE_GPU_POWER_LAST, g->power_last_mw);
		store_le32(p + WIRE_GPU_POWER_LIMIT, g->power_limit_mw);
		store_le32(p + WIRE_GPU_UTIL_GPU, g->util_gpu);
		store_le32(p + WIRE_GPU_UTIL_MEM, g->util_mem);
		store_le64(p + WIRE_GPU_ECC_CORRECTED, g->ecc_corrected);
		store_le64(p + WIRE_GPU_ECC_UNCORRECTED, g->ecc_uncorrected);
		store_le32(p + WIRE_GPU_RETIRED_SBE, g->retired_sbe);
		store_le32(p + WIRE_GPU_RETIRED_DBE, g->retired_dbe);
		store_le32(p + WIRE_GPU_PCIE_REPLAYS, g->pcie_replays);
		store_le32(p + WIRE_GPU_FLAGS, g->flags);
		store_le64(p + WIRE_GPU_NVLINK_ERRORS, g->nvlink_errors);
		store_le32(p + WIRE_GPU_XID_COUNT, g->xid_count);
		store_le32(p + WIRE_GPU_XID_LAST, g->xid_last);
	}
}

static void encode_host_signals(const struct sysom_batch *b, struct byte_buf *out)
{
	for (uint32_t i = 0; i < b->host_signal_count; i++) {
		const struct sysom_host_signal_value *v = &b->host_signals[i];
		uint8_t *p = put_record(out, SYSOM_HOST_SIGNAL_RECORD_SIZE);

		if (!p)
			return;
		store_le16(p + WIRE_HOST_SIGNAL_ID, v->signal);
		store_double(p + WIRE_HOST_SIGNAL_VALUE, v->value);
	}
}

int sysom_batch_encode(const struct sysom_batch *b, struct byte_buf *out)
{
	static const struct {
		uint16_t type;
		void (*encode)(const struct sysom_batch *, struct byte_buf *);
	} order[] = {
		{ SYSOM_SECTION_STRINGS, encode_strings },
		{ SYSOM_SECTION_NODE, encode_node },
		{ SYSOM_SECTION_OBJECTS, encode_objects },
		{ SYSOM_SECTION_PROCESSES, encode_processes },
		{ SYSOM_SECTION_MAPPINGS, encode_mappings },
		{ SYSOM_SECTION_STACKS, encode_stacks },
		{ SYSOM_SECTION_SAMPLES, encode_samples },
		{ SYSOM_SECTION_COUNTERS, encode_counters },
		{ SYSOM_SECTION_JOB_RANKS, encode_job_ranks },
		{ SYSOM_SECTION_COMMUNICATORS, encode_communicators },
		{ SYSOM_SECTION_NCCL_CALLS, encode_nccl_calls },
		{ SYSOM_SECTION_LAUNCHES, encode_launches },
		{ SYSOM_SECTION_GPU_KERNELS, encode_gpu_kernels },
		{ SYSOM_SECTION_NCCL_PROFILES, encode_nccl_profiles },
		{ SYSOM_SECTION_NCCL_LINKS, encode_nccl_links },
		{ SYSOM_SECTION_OS_CPUS, encode_os_cpus },
		{ SYSOM_SECTION_OS_IRQS, encode_os_irqs },
		{ SYSOM_SECTION_OS_THREADS, encode_os_threads },
		{ SYSOM_SECTION_OFFCPU, encode_offcpu },
		{ SYSOM_SECTION_IDENTITIES, encode_identities },
		{ SYSOM_SECTION_GPU_HEALTH, encode_gpu_health },
		{ SYSOM_SECTION_HOST_SIGNALS, encode_host_signals },
	};
	const size_t nsections = sizeof(order) / sizeof(order[0]);
	struct section_entry entries[sizeof(order) / sizeof(order[0])];
	size_t base = out->len;
	uint8_t *header;

	if (b->string_count == 0 || b->window_end_ns < b->window_start_ns)
		return -EINVAL;
	header = byte_buf_reserve(out, SYSOM_WIRE_HEADER_SIZE + nsections * SYSOM_WIRE_SECTION_ENTRY_SIZE);
	if (!header)
		return byte_buf_error(out);
	out->len += SYSOM_WIRE_HEADER_SIZE + nsections * SYSOM_WIRE_SECTION_ENTRY_SIZE;

	for (size_t i = 0; i < nsections; i++) {
		entries[i].type = order[i].type;
		entries[i].offset = out->len - base;
		order[i].encode(b, out);
		entries[i].size = out->len - base - entries[i].offset;
	}
	if (byte_buf_error(out))
		return byte_buf_error(out);
	if (out->len - base > UINT32_MAX)
		return -E2BIG;
	entries[0].count = b->string_count;
	entries[1].count = 1;
	entries[2].count = b->object_count;
	entries[3].count = b->process_count;
	entries[4].count = b->mapping_count;
	entries[5].count = b->stack_count;
	entries[6].count = b->sample_count;
	entries[7].count = b->counter_count;
	entries[8].count = b->job_rank_count;
	entries[9].count = b->communicator_count;
	entries[10].count = b->nccl_call_count;
	entries[11].count = b->launch_count;
	entries[12].count = b->gpu_kernel_count;
	entries[13].count = b->nccl_profile_count;
	entries[14].count = b->nccl_link_count;
	entries[15].count = b->os_cpu_count;
	entries[16].count = b->os_irq_count;
	entries[17].count = b->os_thread_count;
	entries[18].count = b->offcpu_count;
	entries[19].count = b->identity_count;
	entries[20].count = b->gpu_health_count;
	entries[21].count = b->host_signal_count;

	header = out->data + base; /* the buffer may have moved */
	memcpy(header + WIRE_HDR_MAGIC, SYSOM_WIRE_MAGIC, 4);
	store_le16(header + WIRE_HDR_MAJOR, SYSOM_WIRE_MAJOR);
	store_le16(header + WIRE_HDR_MINOR, SYSOM_WIRE_MINOR);
	store_le16(header + WIRE_HDR_HEADER_SIZE, SYSOM_WIRE_HEADER_SIZE);
	store_le16(header + WIRE_HDR_SECTION_COUNT, (uint16_t)nsections);
	store_le32(header + WIRE_HDR_FLAGS, 0);
	memcpy(header + WIRE_HDR_NODE_ID, b->node_id, SYSOM_NODE_ID_SIZE);
	store_le64(header + WIRE_HDR_AGENT_EPOCH, b->agent_epoch);
	store_le64(header + WIRE_HDR_SEQUENCE, b->sequence);
	store_le64(header + WIRE_HDR_WINDOW_START, b->window_start_ns);
	store_le64(header + WIRE_HDR_WINDOW_END, b->window_end_ns);
	for (size_t i = 0; i < nsections; i++) {
		uint8_t *e = header + SYSOM_WIRE_HEADER_SIZE + i * SYSOM_WIRE_SECTION_ENTRY_SIZE;
		store_le16(e + WIRE_SEC_TYPE, entries[i].type);
		store_le16(e + WIRE_SEC_FLAGS, 0);
		store_le32(e + WIRE_SEC_COUNT, entries[i].count);
		store_le32(e + WIRE_SEC_OFFSET, (uint32_t)entries[i].offset);
		store_le32(e + WIRE_SEC_SIZE, (uint32_t)entries[i].size);
	}
	return 0;
}
