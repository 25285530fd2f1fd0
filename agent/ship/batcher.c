/* SPDX-License-Identifier: Apache-2.0 */
/* Folds drained samples into the open window and seals windows into zstd batches. */
#include "agent/ship/batcher.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/array.h"
#include "common/compress.h"
#include "common/hash.h"
#include "common/wire/wire.h"
#include "agent/sampling/pyframes.h"
#include "agent/symbols/perfmap.h"

#define OBJECT_CACHE_SLOTS 256

/* Raw BPF stack (by its hash, per process for user stacks) → stack index in the batch. */
struct stack_cache_entry {
	uint64_t raw_hash;
	uint32_t tgid, generation;
	uint8_t side;
	uint8_t lost;
	uint32_t stack_idx;
};

/* Process incarnation → process index in the batch. */
struct process_cache_entry {
	uint32_t tgid, generation;
	uint32_t process_idx;
};

struct batcher {
	struct batcher_options opts;
	struct proctrack *pt;
	struct sysom_batch batch;
	bool batch_open;
	uint64_t window_start_ns;
	uint32_t drain_offset_ms;
	uint32_t kernel_object;
	bool jit_names;          /* batcher_set_jit_names */

	struct hash_index stack_cache;
	struct stack_cache_entry *stacks;
	uint32_t stack_count, stack_cap;
	struct hash_index process_cache;
	struct process_cache_entry *procs;
	uint32_t proc_count, proc_cap;
	/* Direct-mapped cache: tracker object pointer → batch object index. */
	struct {
		const void *key;
		uint32_t idx;
	} object_cache[OBJECT_CACHE_SLOTS];

	struct sysom_frame frames[SYSOM_PROFILE_MAX_DEPTH];
};

static void reset_caches(struct batcher *b)
{
	hash_index_clear(&b->stack_cache);
	hash_index_clear(&b->process_cache);
	b->stack_count = 0;
	b->proc_count = 0;
	memset(b->object_cache, 0, sizeof(b->object_cache));
}

/* Opens a new, empty window batch with the node's description. */
static int open_batch(struct batcher *b)
{
	struct sysom_batch *bt = &b->batch;
	const struct host_identity *h = b->opts.host;
	const struct kernel_info *k = b->opts.kernel;
	int rc;

	if ((rc = sysom_batch_init(bt)))
		return rc;
	if ((rc = sysom_batch_intern_cstring(bt, h->hostname, &bt->node.hostname)) ||
	    (rc = sysom_batch_intern_cstring(bt, h->kernel_release, &bt->node.kernel_release)) ||
	    (rc = sysom_batch_intern_cstring(bt, h->machine, &bt->node.machine)) ||
	    (rc = sysom_batch_intern_cstring(bt, b->opts.agent_version, &bt->node.agent_version)) ||
	    (rc = sysom_batch_add_object(bt, SYSOM_OBJECT_KERNEL, k->id.bytes, k->id.len,
					 "[kernel.kallsyms]", &b->kernel_object))) {
		sysom_batch_free(bt);
		return rc;
	}
	bt->node.kernel_object = b->kernel_object;
	memcpy(bt->node.boot_id, h->boot_id, sizeof(bt->node.boot_id));
	reset_caches(b);
	b->batch_open = true;
	return 0;
}

int batcher_new(const struct batcher_options *opts, struct proctrack *pt, struct batcher **out)
{
	struct batcher *b = calloc(1, sizeof(*b));
	int rc;

	if (!b)
		return -ENOMEM;
	b->opts = *opts;
	b->pt = pt;
	if ((rc = hash_index_init(&b->stack_cache, 1024)) ||
	    (rc = hash_index_init(&b->process_cache, 64)) || (rc = open_batch(b))) {
		batcher_free(b);
		return rc;
	}
	b->window_start_ns = sysom_realtime_ns();
	*out = b;
	return 0;
}

void batcher_free(struct batcher *b)
{
	if (!b)
		return;
	sysom_batch_free(&b->batch);
	hash_index_free(&b->stack_cache);
	hash_index_free(&b->process_cache);
	free(b->stacks);
	free(b->procs);
	free(b);
}

void batcher_begin_drain(struct batcher *b, uint64_t drain_realtime_ns)
{
	uint64_t offset = drain_realtime_ns > b->window_start_ns
				  ? (drain_realtime_ns - b->window_start_ns) / 1000000
				  : 0;
	b->drain_offset_ms = offset > UINT32_MAX ? UINT32_MAX : (uint32_t)offset;
}

void batcher_add_counter(struct batcher *b, uint16_t id, uint64_t delta)
{
	if (delta)
		sysom_batch_add_counter(&b->batch, id, delta);
}

void batcher_set_sampling(struct batcher *b, uint32_t hz, double sample_rate,
			  double drain_interval_s, double batch_interval_s)
{
	b->opts.hz = hz;
	b->opts.sample_rate = sample_rate;
	b->opts.drain_interval_s = drain_interval_s;
	b->opts.batch_interval_s = batch_interval_s;
}

/* Batch object index for a tracker object (pointer-keyed cache in front of the batch's
 * own de-duplication). */
static int object_index(struct batcher *b, const struct pt_object *o, uint32_t *idx)
{
	uint32_t slot = (uint32_t)(((uintptr_t)o >> 4) % OBJECT_CACHE_SLOTS);
	int rc;

	if (b->object_cache[slot].key == o) {
		*idx = b->object_cache[slot].idx;
		return 0;
	}
	rc = sysom_batch_add_object(&b->batch, o->id.kind, o->id.bytes, o->id.len, o->path, idx);
	if (rc)
		return rc;
	b->object_cache[slot].key = o;
	b->object_cache[slot].idx = *idx;
	return 0;
}

struct process_key {
	const struct batcher *b;
	uint32_t tgid, generation;
};

static bool process_eq(const void *ctx, uint32_t i)
{
	const struct process_key *k = ctx;

	return k->b->procs[i].tgid == k->tgid && k->b->procs[i].generation == k->generation;
}

_Static_assert((int)IDENTITY_RUNTIME_CONTAINERD == (int)SYSOM_RUNTIME_CONTAINERD &&
		       (int)IDENTITY_RUNTIME_CRIO == (int)SYSOM_RUNTIME_CRIO &&
		       (int)IDENTITY_RUNTIME_DOCKER == (int)SYSOM_RUNTIME_DOCKER &&
		       (int)IDENTITY_RUNTIME_PODMAN == (int)SYSOM_RUNTIME_PODMAN &&
		       (int)IDENTITY_RUNTIME_UNKNOWN == (int)SYSOM_RUNTIME_UNKNOWN,
	       "identity runtimes are the wire's numbers");

/* The IDENTITIES record of a process (none when its cgroup said nothing). A record the
 * wire would refuse (a name it cannot carry) is left out rather than failing the batch. */
static int add_identity(struct sysom_batch *bt, const struct pt_identity *id, uint32_t process)
{
	struct sysom_identity rec = { .process = process, .slurm_job = id ? id->cg.slurm_job : 0 };
	int rc;

	if (!id)
		return 0;
	rec.runtime = id->cg.container_id[0] ? (uint8_t)id->cg.runtime : SYSOM_RUNTIME_NONE;
	if ((rc = sysom_batch_intern_cstring(bt, id->cg.container_id, &rec.container_id)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->cg.pod_uid, &rec.pod_uid)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->pod_namespace, &rec.pod_namespace)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->pod_name, &rec.pod_name)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->container_name, &rec.container_name)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->cg.slurm_step, &rec.slurm_step)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->cg.unit, &rec.unit)))
		return rc;
	rc = sysom_batch_set_identity(bt, &rec);
	return rc == -EINVAL ? 0 : rc;
}

/* Batch process index for an incarnation, adding it and its executable mappings once. */
static int process_index(struct batcher *b, struct pt_process *p, uint32_t *idx)
{
	struct process_key key = { b, p->tgid, p->generation };
	uint64_t h = sysom_hash_mix(p->tgid, p->generation);
	uint32_t found = hash_index_find(&b->process_cache, h, process_eq, &key);
	struct sysom_batch *bt = &b->batch;
	struct sysom_process rec = { .tgid = p->tgid, .generation = p->generation,
				     .start_time_ns = p->start_time_ns, .ppid = p->ppid };
	int rc;

	if (found != HASH_INDEX_NONE) {
		*idx = b->procs[found].process_idx;
		return 0;
	}
	if ((rc = sysom_batch_intern_cstring(bt, p->comm, &rec.comm)) ||
	    (rc = sysom_batch_intern_cstring(bt, p->exe, &rec.exe)) ||
	    (rc = sysom_batch_intern_cstring(bt, p->cmdline, &rec.cmdline)) ||
	    (rc = sysom_batch_add_process(bt, &rec, idx)) ||
	    (rc = add_identity(bt, p->identity, *idx)))
		return rc;
	for (uint32_t i = 0; i < p->mapping_count; i++) {
		const struct pt_mapping *m = &p->mappings[i];
		struct sysom_mapping wm = { .process = *idx, .start = m->start, .end = m->end,
					    .file_offset = m->file_offset };
		if ((rc = object_index(b, m->object, &wm.object)) ||
		    (rc = sysom_batch_add_mapping(bt, &wm)))
			return rc;
	}
	if (SYSOM_ARRAY_RESERVE(b->procs, b->proc_cap, b->proc_count, 64))
		return -ENOMEM;
	b->procs[b->proc_count] = (struct process_cache_entry){ p->tgid, p->generation, *idx };
	if ((rc = hash_index_insert(&b->process_cache, h, b->proc_count)))
		return rc;
	b->proc_count++;
	return 0;
}

struct stack_key {
	const struct batcher *b;
	const struct stack_cache_entry *want;
};

static bool stack_eq(const void *ctx, uint32_t i)
{
	const struct stack_key *k = ctx;
	const struct stack_cache_entry *e = &k->b->stacks[i];

	return e->raw_hash == k->want->raw_hash && e->tgid == k->want->tgid &&
	       e->generation == k->want->generation && e->side == k->want->side &&
	       e->lost == k->want->lost;
}

/*
 * A Python frame of `p` (bpf/pyframes.h): object kind PYTHON named "<qualname>\t<file>",
 * offset its line. One whose code object cannot be read any more (freed, corrupted), or was
 * freed and its address given to another code object (its check differs), becomes
 * "[python unresolved]" and is counted (the second kind also as py_name_reused).
 */
static int python_frame(struct batcher *b, const struct pt_process *p, uint64_t value,
			struct sysom_frame *out)
{
	struct pyframes_stats before, after;
	struct py_name name;
	char text[2 * 1100];
	int rc = -ENOENT;

	if (b->opts.py) {
		pyframes_stats_read(b->opts.py, &before);
		rc = pyframes_resolve(b->opts.py, p->tgid, p->generation, value, &name);
		pyframes_stats_read(b->opts.py, &after);
		batcher_add_counter(b, SYSOM_COUNTER_PY_NAME_LOOKUPS, 1);
		batcher_add_counter(b, SYSOM_COUNTER_PY_NAME_CACHE_HITS,
				    after.cache_hits - before.cache_hits);
		batcher_add_counter(b, SYSOM_COUNTER_PY_NAME_REUSED, after.reused - before.reused);
	}
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		batcher_add_counter(b, SYSOM_COUNTER_PY_UNRESOLVED, 1);
		snprintf(text, sizeof(text), "[python unresolved]\t");
		out->offset = 0;
	} else {
		snprintf(text, sizeof(text), "%s\t%s", name.qualname, name.filename);
		out->offset = name.line > 0 ? (uint64_t)name.line : 0;
	}
	return sysom_batch_add_object(&b->batch, SYSOM_OBJECT_PYTHON, NULL, 0, text, &out->object);
}

/*
 * A frame in anonymous executable memory at `ip` (a return address when `caller`: looked up one
 * byte before, inside the call): 1 with object kind JIT named by the process's perf map and
 * the offset into that function; 0 when none names it (or the server does not read 1.8); or
 * -ENOMEM.
 */
static int jit_frame(struct batcher *b, const struct pt_process *p, uint64_t ip, bool caller,
		     struct sysom_frame *out)
{
	const char *name;
	uint64_t start;
	int rc;

	if (!b->opts.jit || !b->jit_names)
		return 0;
	rc = perfmap_lookup(b->opts.jit, p->tgid, p->generation, caller && ip ? ip - 1 : ip, &name,
			    &start);
	if (rc < 0)
		return rc;
	batcher_add_counter(b, rc ? SYSOM_COUNTER_JIT_NAMED : SYSOM_COUNTER_JIT_UNNAMED, 1);
	if (!rc)
		return 0;
	out->offset = ip - start;
	rc = sysom_batch_add_object(&b->batch, SYSOM_OBJECT_JIT, NULL, 0, name, &out->object);
	return rc ? rc : 1;
}

void batcher_set_jit_names(struct batcher *b, bool on)
{
	b->jit_names = on;
}

/* Resolves a BPF stack into wire frames and adds it to the batch (cached per window). */
static int stack_index(struct batcher *b, struct pt_process *p, uint8_t side, uint64_t raw_hash,
		       const struct sysom_stack_trace *st, bool lost, uint32_t *idx)
{
	struct stack_cache_entry want = {
		.raw_hash = raw_hash,
		.tgid = side == SYSOM_SIDE_USER ? p->tgid : 0,
		.generation = side == SYSOM_SIDE_USER ? p->generation : 0,
		.side = side,
		.lost = lost,
	};
	struct stack_key key = { b, &want };
	uint64_t h = sysom_hash_mix(sysom_hash_mix(raw_hash, side | (uint64_t)lost << 8),
				    (uint64_t)want.tgid << 32 | want.generation);
	uint32_t found = hash_index_find(&b->stack_cache, h, stack_eq, &key);
	uint8_t kind = side == SYSOM_SIDE_KERNEL ? SYSOM_STACK_KERNEL : SYSOM_STACK_USER;
	uint16_t n = 0;
	uint8_t stop;
	int rc;

	if (found != HASH_INDEX_NONE) {
		*idx = b->stacks[found].stack_idx;
		return 0;
	}
	if (lost || !st) {
		/* The stack store was full: one unknown frame, marked so it shows as lost. */
		const struct pt_object unknown = { .id = { .kind = SYSOM_OBJECT_UNKNOWN },
						   .path = "[unknown]" };
		if ((rc = sysom_batch_add_object(&b->batch, unknown.id.kind, NULL, 0, unknown.path,
						 &b->frames[0].object)))
			return rc;
		b->frames[0].offset = 0;
		n = 1;
		stop = SYSOM_STOP_STACK_LOST;
	} else {
		stop = st->stop_reason;
		for (uint16_t i = 0; i < st->nframes && i < SYSOM_PROFILE_MAX_DEPTH; i++) {
			if (side == SYSOM_SIDE_KERNEL) {
				struct kernel_location loc;
				kernel_resolve(b->opts.kernel, st->ips[i], &loc);
				if (loc.kind == SYSOM_OBJECT_KERNEL) {
					b->frames[n].object = b->kernel_object;
				} else if ((rc = sysom_batch_add_object(
						    &b->batch, loc.kind, loc.id ? loc.id->bytes : NULL,
						    loc.id ? loc.id->len : 0, loc.name,
						    &b->frames[n].object))) {
					return rc;
				}
				b->frames[n].offset = loc.offset;
			} else if (PY_FRAME_IS(st->ips[i])) {
				if ((rc = python_frame(b, p, st->ips[i], &b->frames[n])))
					return rc;
			} else {
				struct pt_resolved r;
				proctrack_resolve(b->pt, p, st->ips[i], &r);
				if (!r.object)
					return -ENOMEM;
				if (r.object->id.kind == SYSOM_OBJECT_UNKNOWN)
					batcher_add_counter(b, SYSOM_COUNTER_FRAMES_UNMAPPED, 1);
				if (r.object->id.kind == SYSOM_OBJECT_ANON &&
				    (rc = jit_frame(b, p, st->ips[i], i > 0, &b->frames[n])) != 0) {
					if (rc < 0)
						return rc;
					n++;
					continue;
				}
				if ((rc = object_index(b, r.object, &b->frames[n].object)))
					return rc;
				b->frames[n].offset = r.offset;
			}
			n++;
		}
		if (n == 0)
			return -EINVAL;
	}
	if ((rc = sysom_batch_add_stack(&b->batch, kind, stop, b->frames, n, idx)))
		return rc;
	if (SYSOM_ARRAY_RESERVE(b->stacks, b->stack_cap, b->stack_count, 256))
		return -ENOMEM;
	want.stack_idx = *idx;
	b->stacks[b->stack_count] = want;
	if ((rc = hash_index_insert(&b->stack_cache, h, b->stack_count)))
		return rc;
	b->stack_count++;
	return 0;
}

int batcher_add_entry(void *batcher, const struct sampler_entry *e)
{
	struct batcher *b = batcher;
	struct sysom_sample s = { .tid = e->key->tid, .cpu = e->key->cpu,
				  .time_offset_ms = b->drain_offset_ms,
				  .kernel_stack = SYSOM_WIRE_NONE, .user_stack = SYSOM_WIRE_NONE,
				  .count = e->count };
	struct pt_process *p;
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	if (b->batch.sample_count >= b->opts.max_sample_rows) {
		batcher_add_counter(b, SYSOM_COUNTER_BATCH_LIMIT_DROPS, e->count);
		return 0;
	}
	p = proctrack_get(b->pt, e->key->tgid, e->key->generation);
	if (!p) {
		batcher_add_counter(b, SYSOM_COUNTER_BATCH_LIMIT_DROPS, e->count);
		return 0;
	}
	/* The main thread's name is the process's: a rename since exec shows from the next
	 * batch on (this one already holds the process record). */
	if (e->key->tid == e->key->tgid)
		proctrack_note_comm(p, e->comm);
	if ((rc = process_index(b, p, &s.process)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, e->comm, &s.thread_comm)))
		return rc;
	if ((e->kernel || e->kernel_lost) &&
	    (rc = stack_index(b, p, SYSOM_SIDE_KERNEL, e->key->kernel_stack, e->kernel,
			      e->kernel_lost, &s.kernel_stack)))
		return rc;
	if ((e->user || e->user_lost) &&
	    (rc = stack_index(b, p, SYSOM_SIDE_USER, e->key->user_stack, e->user, e->user_lost,
			      &s.user_stack)))
		return rc;
	if (s.kernel_stack == SYSOM_WIRE_NONE && s.user_stack == SYSOM_WIRE_NONE)
		return 0; /* BPF records at least one side; nothing to attribute otherwise */
	return sysom_batch_add_sample(&b->batch, &s);
}

int batcher_add_offcpu(void *batcher, const struct sampler_offcpu_entry *e)
{
	struct batcher *b = batcher;
	struct sysom_offcpu o = { .tid = e->key->tid, .time_offset_ms = b->drain_offset_ms,
				  .kernel_stack = SYSOM_WIRE_NONE, .user_stack = SYSOM_WIRE_NONE,
				  .state = (uint8_t)e->key->state, .count = e->count,
				  .blocked_ns = e->total_ns, .max_ns = e->max_ns };
	struct pt_process *p;
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	if (o.count == 0 || o.max_ns == 0 || o.max_ns > o.blocked_ns || o.state == 0 ||
	    o.state > SYSOM_OFFCPU_STATE_MAX)
		return 0; /* BPF never produces these */
	p = proctrack_get(b->pt, e->key->tgid, e->key->generation);
	if (!p || b->batch.offcpu_count >= b->opts.max_sample_rows) {
		batcher_add_counter(b, SYSOM_COUNTER_OFFCPU_LOST, e->count);
		return 0;
	}
	if ((rc = process_index(b, p, &o.process)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, e->comm, &o.thread_comm)))
		return rc;
	if ((e->kernel || e->kernel_lost) &&
	    (rc = stack_index(b, p, SYSOM_SIDE_KERNEL, e->key->kernel_stack, e->kernel,
			      e->kernel_lost, &o.kernel_stack)))
		return rc;
	if ((e->user || e->user_lost) &&
	    (rc = stack_index(b, p, SYSOM_SIDE_USER, e->key->user_stack, e->user, e->user_lost,
			      &o.user_stack)))
		return rc;
	if (o.kernel_stack == SYSOM_WIRE_NONE && o.user_stack == SYSOM_WIRE_NONE)
		return 0;
	return sysom_batch_add_offcpu(&b->batch, &o);
}

/* The open batch and the process's index in it; *idx stays SYSOM_WIRE_NONE (and 0 is
 * returned) when the tracker cannot hold the process, or, with `live_only`, when it no longer
 * tracks it and the process is gone (a record that would only name an "[exited]" stranger). */
static int job_process(struct batcher *b, uint32_t tgid, uint32_t generation, bool live_only,
		       struct pt_process **proc, uint32_t *idx)
{
	struct pt_process *p;
	int rc;

	*idx = SYSOM_WIRE_NONE;
	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	p = live_only ? proctrack_get_live(b->pt, tgid, generation)
		      : proctrack_get(b->pt, tgid, generation);
	if (!p)
		return 0;
	if (proc)
		*proc = p;
	return process_index(b, p, idx);
}

int batcher_add_nccl_call(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_nccl_call *c)
{
	struct sysom_nccl_call rec = *c;
	uint32_t limit = b->opts.max_nccl_calls ? b->opts.max_nccl_calls : 1u << 20;
	int rc;

	if (b->batch_open && b->batch.nccl_call_count >= limit) {
		batcher_add_counter(b, SYSOM_COUNTER_NCCL_CALLS_DROPPED, 1);
		return 0;
	}
	if ((rc = job_process(b, tgid, generation, false, NULL, &rec.process)))
		return rc;
	if (rec.process == SYSOM_WIRE_NONE) {
		batcher_add_counter(b, SYSOM_COUNTER_NCCL_CALLS_DROPPED, 1);
		return 0;
	}
	return sysom_batch_add_nccl_call(&b->batch, &rec);
}

int batcher_set_communicator(struct batcher *b, uint32_t tgid, uint32_t generation,
			     const struct sysom_communicator *c)
{
	struct sysom_communicator rec = *c;
	int rc;

	if ((rc = job_process(b, tgid, generation, true, NULL, &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	return sysom_batch_set_communicator(&b->batch, &rec);
}

int batcher_set_job_rank(struct batcher *b, uint32_t tgid, uint32_t generation,
			 const struct job_identity *id, uint8_t source, const char *groups,
			 uint32_t rank_pid, uint8_t gpu_device)
{
	struct sysom_batch *bt = &b->batch;
	struct sysom_job_rank rec = {
		.rank = id->has_rank ? id->rank : -1,
		.world_size = id->has_rank ? id->world_size : -1,
		.local_rank = id->has_rank ? id->local_rank : -1,
		.local_world_size = id->has_rank ? id->local_world_size : -1,
		.group_rank = id->group_rank >= 0 ? id->group_rank : -1,
		.source = source,
		.role = rank_pid && id->has_rank ? SYSOM_JOB_ROLE_WORKER : SYSOM_JOB_ROLE_RANK,
		.rank_pid = rank_pid && id->has_rank ? rank_pid : 0,
		.gpu_device = id->has_rank && gpu_device <= SYSOM_GPU_MAX_DEVICES ? gpu_device : 0,
	};
	char master[JOBENV_VALUE_MAX + 16] = "";
	int rc;

	if ((rc = job_process(b, tgid, generation, true, NULL, &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	if (rec.local_rank < 0 || rec.local_world_size <= 0)
		rec.local_rank = rec.local_world_size = -1;
	if (id->master_addr[0])
		snprintf(master, sizeof(master), "%s:%d", id->master_addr, id->master_port);
	if ((rc = sysom_batch_intern_cstring(bt, id->job_id, &rec.job)) ||
	    (rc = sysom_batch_intern_cstring(bt, id->job_id_source ? id->job_id_source : "",
					     &rec.job_id_source)) ||
	    (rc = sysom_batch_intern_cstring(bt, master, &rec.master)) ||
	    (rc = sysom_batch_intern_cstring(bt, groups ? groups : "", &rec.groups)))
		return rc;
	return sysom_batch_set_job_rank(bt, &rec);
}

int batcher_add_launch(struct batcher *b, uint32_t tgid, uint32_t generation,
		       const struct batcher_launch *l)
{
	struct sysom_launch rec = { .function = l->function, .user_stack = SYSOM_WIRE_NONE,
				    .kernel_stack = SYSOM_WIRE_NONE, .count = l->count,
				    .shared_mem = l->shared_mem, .flags = l->flags };
	struct pt_process *p = NULL;
	int rc;

	if ((rc = job_process(b, tgid, generation, false, &p, &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	memcpy(rec.grid, l->grid, sizeof(rec.grid));
	memcpy(rec.block, l->block, sizeof(rec.block));
	if ((rc = sysom_batch_intern_cstring(&b->batch, l->kernel_name ? l->kernel_name : "",
					     &rec.kernel_name)))
		return rc;
	if (l->nframes) {
		struct sysom_stack_trace *st = malloc(sizeof(*st));
		uint16_t n = l->nframes < SYSOM_PROFILE_MAX_DEPTH ? l->nframes
								   : SYSOM_PROFILE_MAX_DEPTH;

		if (!st)
			return -ENOMEM;
		memset(st, 0, offsetof(struct sysom_stack_trace, ips));
		st->nframes = n;
		st->side = SYSOM_SIDE_USER;
		st->stop_reason = SYSOM_STOP_COMPLETE;
		memcpy(st->ips, l->ips, n * sizeof(st->ips[0]));
		rc = stack_index(b, p, SYSOM_SIDE_USER, sysom_hash64(st->ips, n * sizeof(st->ips[0]),
							      0x6c61756e6368ull ^ n),
				 st, false, &rec.user_stack);
		free(st);
		if (rc)
			return rc;
	}
	return sysom_batch_add_launch(&b->batch, &rec);
}

/* The batch's process index for a GPU statistics row, or SYSOM_WIRE_NONE (counted as dropped)
 * when the row would exceed the limit or the process is unknown. */
static int gpu_row_process(struct batcher *b, uint32_t tgid, uint32_t generation, uint32_t rows,
			   uint32_t *idx)
{
	int rc;

	*idx = SYSOM_WIRE_NONE;
	if (b->batch_open && rows >= BATCHER_MAX_GPU_ROWS) {
		batcher_add_counter(b, SYSOM_COUNTER_GPU_STATS_DROPPED, 1);
		return 0;
	}
	if ((rc = job_process(b, tgid, generation, false, NULL, idx)))
		return rc;
	if (*idx == SYSOM_WIRE_NONE)
		batcher_add_counter(b, SYSOM_COUNTER_GPU_STATS_DROPPED, 1);
	return 0;
}

int batcher_add_gpu_kernel(struct batcher *b, uint32_t tgid, uint32_t generation,
			   const struct sysom_gpu_kernel *k, const char *name)
{
	struct sysom_gpu_kernel rec = *k;
	int rc;

	if ((rc = gpu_row_process(b, tgid, generation, b->batch.gpu_kernel_count, &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	if ((rc = sysom_batch_intern_cstring(&b->batch, name, &rec.name)))
		return rc;
	return sysom_batch_add_gpu_kernel(&b->batch, &rec);
}

int batcher_add_nccl_profile(struct batcher *b, uint32_t tgid, uint32_t generation,
			     const struct sysom_nccl_profile *p,
			     const struct batcher_profile_names *names)
{
	struct sysom_nccl_profile rec = *p;
	int rc;

	if ((rc = gpu_row_process(b, tgid, generation, b->batch.nccl_profile_count,
				  &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	if ((rc = sysom_batch_intern_cstring(&b->batch, names->comm_name, &rec.comm_name)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, names->func, &rec.func)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, names->algo, &rec.algo)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, names->proto, &rec.proto)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, names->datatype, &rec.datatype)))
		return rc;
	return sysom_batch_add_nccl_profile(&b->batch, &rec);
}

int batcher_add_nccl_link(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_nccl_link *l)
{
	struct sysom_nccl_link rec = *l;
	int rc;

	if ((rc = gpu_row_process(b, tgid, generation, b->batch.nccl_link_count, &rec.process)) ||
	    rec.process == SYSOM_WIRE_NONE)
		return rc;
	return sysom_batch_add_nccl_link(&b->batch, &rec);
}

/* Whether a new OS row fits (`rows` of the kind so far); counts the drop otherwise. */
static bool os_row_fits(struct batcher *b, uint32_t rows, uint32_t limit)
{
	if (rows < limit)
		return true;
	batcher_add_counter(b, SYSOM_COUNTER_OS_ROWS_DROPPED, 1);
	return false;
}

int batcher_add_os_cpu(struct batcher *b, const struct sysom_os_cpu *c)
{
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	if (!os_row_fits(b, b->batch.os_cpu_count, BATCHER_MAX_OS_CPUS))
		return 0;
	return sysom_batch_add_os_cpu(&b->batch, c);
}

int batcher_set_host_signal(struct batcher *b, uint16_t signal, double value)
{
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	return sysom_batch_set_host_signal(&b->batch, signal, value);
}

int batcher_add_os_irq(struct batcher *b, const struct sysom_os_irq *q, const char *name)
{
	struct sysom_os_irq rec = *q;
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	if (!os_row_fits(b, b->batch.os_irq_count, BATCHER_MAX_OS_ROWS))
		return 0;
	if ((rc = sysom_batch_intern_cstring(&b->batch, name, &rec.name)))
		return rc;
	return sysom_batch_add_os_irq(&b->batch, &rec);
}

int batcher_add_gpu_health(struct batcher *b, const struct sysom_gpu_health *g, const char *uuid,
			   const char *pci_bus_id, const char *name)
{
	struct sysom_gpu_health rec = *g;
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	if ((rc = sysom_batch_intern_cstring(&b->batch, uuid, &rec.uuid)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, pci_bus_id, &rec.pci_bus_id)) ||
	    (rc = sysom_batch_intern_cstring(&b->batch, name, &rec.name)))
		return rc;
	return sysom_batch_set_gpu_health(&b->batch, &rec);
}

int batcher_add_os_thread(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_os_thread *t, const char *comm)
{
	struct sysom_os_thread rec = *t;
	int rc;

	if (b->batch_open && !os_row_fits(b, b->batch.os_thread_count, BATCHER_MAX_OS_ROWS))
		return 0;
	if ((rc = job_process(b, tgid, generation, false, NULL, &rec.process)))
		return rc;
	if (rec.process == SYSOM_WIRE_NONE) {
		batcher_add_counter(b, SYSOM_COUNTER_OS_ROWS_DROPPED, 1);
		return 0;
	}
	if ((rc = sysom_batch_intern_cstring(&b->batch, comm, &rec.comm)))
		return rc;
	return sysom_batch_add_os_thread(&b->batch, &rec);
}

int batcher_seal(struct batcher *b, const uint8_t node_id[16], uint64_t epoch, uint64_t sequence,
		 uint64_t now_realtime_ns, struct byte_buf *out, struct batcher_seal_info *info)
{
	struct sysom_batch *bt = &b->batch;
	struct byte_buf encoded = { 0 };
	size_t before = out->len;
	int rc;

	if (!b->batch_open && (rc = open_batch(b)))
		return rc;
	memcpy(bt->node_id, node_id, SYSOM_NODE_ID_SIZE);
	bt->agent_epoch = epoch;
	bt->sequence = sequence;
	bt->window_start_ns = b->window_start_ns;
	bt->window_end_ns = now_realtime_ns > b->window_start_ns ? now_realtime_ns : b->window_start_ns;
	/* Drains stamped after `now` (clock steps) are clamped into the window. */
	uint64_t window_ms = (bt->window_end_ns - bt->window_start_ns) / 1000000;
	for (uint32_t i = 0; i < bt->sample_count; i++)
		if (bt->samples[i].time_offset_ms > window_ms)
			bt->samples[i].time_offset_ms = (uint32_t)window_ms;
	bt->node.sample_hz = b->opts.hz;
	bt->node.sample_rate_ppm = (uint32_t)(b->opts.sample_rate * 1000000.0 + 0.5);
	bt->node.drain_interval_ms = (uint32_t)(b->opts.drain_interval_s * 1000.0);
	bt->node.batch_interval_ms = (uint32_t)(b->opts.batch_interval_s * 1000.0);
	bt->node.online_cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);

	rc = sysom_batch_encode(bt, &encoded);
	if (rc)
		goto cleanup;
	rc = sysom_zstd_compress(encoded.data, encoded.len, b->opts.zstd_level, out);
	if (rc) {
		out->len = before;
		goto cleanup;
	}
	if (info) {
		uint64_t samples = 0;
		for (uint32_t i = 0; i < bt->sample_count; i++)
			samples += bt->samples[i].count;
		*info = (struct batcher_seal_info){
			.sequence = sequence,
			.window_start_ns = bt->window_start_ns,
			.window_end_ns = bt->window_end_ns,
			.samples = samples,
			.drained_keys = sysom_batch_counter(bt, SYSOM_COUNTER_DISTINCT_KEYS),
			.sample_rows = bt->sample_count,
			.stacks = bt->stack_count,
			.processes = bt->process_count,
			.objects = bt->object_count,
			.encoded_bytes = encoded.len,
			.compressed_bytes = out->len - before,
		};
	}
	b->window_start_ns = bt->window_end_ns;
	sysom_batch_free(bt);
	b->batch_open = false;
	/* The batch is sealed; if the next one cannot be opened now, the next add retries. */
	open_batch(b);
cleanup:
	byte_buf_free(&encoded);
	return rc;
}
