// SPDX-License-Identifier: GPL-2.0-only
/*
 * NCCL and CUDA driver uprobes: every NCCL API call (entry + return) becomes one ring-buffer
 * event; kernel launches are counted in-kernel per (process, function, user stack); the
 * driver's function lookups name the function handles. x86-64 SysV calling convention.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/gputrace.h"
#include "bpf/profile.h"

char LICENSE[] SEC("license") = "GPL";

/* Launch stacks by the sampler's hybrid unwinder (its maps shared by the agent before load);
 * false: the kernel's frame-pointer walk. */
const volatile bool hybrid_unwind = false;

/* Unknown addresses are reported by the sampler (its own samples meet them too). */
#define UNWIND_ON_UNMAPPED(c, addr) ((void)(c), (void)(addr))
#define UNWIND_PYTHON 1 /* Python frames in launch stacks too (bpf/pyframes.h) */
#include "bpf/unwind_core.bpf.h"

#ifndef PT_REGS_PARM6
#define PT_REGS_PARM6(x) ((x)->r9) /* older libbpf headers stop at 5 */
#endif

/* Per thread; LRU so threads that exit or never return cost nothing forever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct thread_state);
} threads SEC(".maps");

struct seq_key {
	__u32 tgid;
	__u32 fn;
	__u64 comm;
	__s64 peer; /* Send/Recv: the peer rank (a per-pair sequence); -1 for collectives */
};

/* Call number per (process, communicator, function): NCCL's own seqNumber for collectives;
 * per (process, communicator, function, peer) for Send/Recv, so that the k-th send from A to B
 * and the k-th receive on B from A carry the same number (the server pairs them by it). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct seq_key);
	__type(value, __u64);
} seqs SEC(".maps");

/* tgid → incarnation: the sampler's map (profile.bpf.c), shared by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} exec_generation SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GPUTRACE_MAX_LIBRARIES);
	__type(key, __u32);
	__type(value, struct gt_comm_layout);
} nccl_layouts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* the agent may resize before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct gt_launch_key);
	__type(value, struct gt_launch_value);
} launches SEC(".maps");

/* cuModuleGetFunction & co.: output pointer and name pointer between entry and return. */
struct name_call {
	__u64 out;
	__u64 name;
	__u64 source;
	__u32 fn;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct name_call);
} name_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gt_stats);
} stats SEC(".maps");

/* The launch being recorded, across the unwinder's tail calls. Uprobe programs run with
 * preemption off and do not nest on a CPU, so one slot per CPU is never used twice at once. */
struct launch_scratch {
	struct gt_launch_key key;
	struct gt_launch_value val;
	struct unwind_regs regs;
	__u32 tail_calls;
	struct sysom_stack_trace trace;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct launch_scratch);
} launch_scratch SEC(".maps");

#define UNWIND_FRAMES_PER_PROG 32
#define UNWIND_MAX_TAIL_CALLS 3 /* 128 frames; launch keys keep 64 */

int sysom_cu_launch_unwind(struct pt_regs *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__array(values, int(struct pt_regs *));
} launch_unwind_progs SEC(".maps") = {
	.values = { [0] = (void *)&sysom_cu_launch_unwind },
};

static const struct thread_state zero_thread;

static __always_inline struct gt_stats *my_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

static __always_inline __u32 generation_of(__u32 tgid)
{
	__u32 *gen = bpf_map_lookup_elem(&exec_generation, &tgid);

	return gen ? *gen : 0;
}

static __always_inline __u64 stack_arg(struct pt_regs *ctx, int n)
{
	__u64 v = 0;

	/* At the first instruction the return address is at rsp; argument 7 at rsp + 8. */
	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * n));
	return v;
}

/* The communicator argument of a collective, by function. */
static __always_inline __u64 comm_of(const struct pending_call *c)
{
	switch (c->fn) {
	case GT_NCCL_ALL_REDUCE:
	case GT_NCCL_REDUCE_SCATTER:
	case GT_NCCL_BROADCAST:
	case GT_NCCL_GATHER:
	case GT_NCCL_SCATTER:
		return c->args[5];
	case GT_NCCL_REDUCE:
		return c->stack_args[0];
	case GT_NCCL_ALL_GATHER:
	case GT_NCCL_ALL_TO_ALL:
	case GT_NCCL_SEND:
	case GT_NCCL_RECV:
		return c->args[4];
	case GT_NCCL_COMM_DESTROY:
	case GT_NCCL_COMM_ABORT:
	case GT_NCCL_COMM_FINALIZE:
	case GT_NCCL_COMM_SPLIT:
		return c->args[0];
	}
	return 0;
}

/* Reads rank, nRanks and commHash from a communicator when the library's layout is known. */
static __always_inline bool read_comm_fields(__u32 slot, __u64 comm, __s32 *rank, __s32 *nranks,
					     __u64 *hash)
{
	struct gt_comm_layout *l = bpf_map_lookup_elem(&nccl_layouts, &slot);

	if (!l || !l->valid || !comm)
		return false;
	*hash = 0;
	if (bpf_probe_read_user(rank, sizeof(*rank), (void *)(comm + l->rank_offset)) ||
	    bpf_probe_read_user(nranks, sizeof(*nranks), (void *)(comm + l->nranks_offset)) ||
	    (l->comm_hash_size == 8 &&
	     bpf_probe_read_user(hash, sizeof(*hash), (void *)(comm + l->comm_hash_offset))))
		return false;
	return true;
}

static __always_inline bool is_collective(__u32 fn)
{
	return fn >= GT_NCCL_ALL_REDUCE && fn <= GT_NCCL_RECV;
}

static __always_inline bool is_init(__u32 fn)
{
	return fn == GT_NCCL_COMM_INIT_RANK || fn == GT_NCCL_COMM_INIT_RANK_CONFIG ||
	       fn == GT_NCCL_COMM_INIT_RANK_SCALABLE || fn == GT_NCCL_COMM_INIT_ALL;
}

SEC("uprobe")
int sysom_nccl_enter(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 fn = GPUTRACE_COOKIE_FN(cookie);
	__u64 id = bpf_get_current_pid_tgid();
	struct thread_state *t;
	struct pending_call *c;
	struct gt_stats *st = my_stats();
	__u32 depth;

	t = bpf_map_lookup_elem(&threads, &id);
	if (!t) {
		bpf_map_update_elem(&threads, &id, &zero_thread, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&threads, &id);
		if (!t)
			return 0;
	}
	depth = t->depth;
	if (depth >= GT_MAX_NESTING) {
		if (st)
			st->nesting_overflow++;
		return 0;
	}
	c = &t->calls[depth];
	c->fn = fn;
	c->flags = t->group_depth ? GT_IN_GROUP : 0;
	c->args[0] = PT_REGS_PARM1(ctx);
	c->args[1] = PT_REGS_PARM2(ctx);
	c->args[2] = PT_REGS_PARM3(ctx);
	c->args[3] = PT_REGS_PARM4(ctx);
	c->args[4] = PT_REGS_PARM5(ctx);
	c->args[5] = PT_REGS_PARM6(ctx);
	c->stack_args[0] = 0;
	c->stack_args[1] = 0;
	if (fn == GT_NCCL_ALL_REDUCE || fn == GT_NCCL_REDUCE_SCATTER || fn == GT_NCCL_BROADCAST ||
	    fn == GT_NCCL_GATHER || fn == GT_NCCL_SCATTER || fn == GT_NCCL_REDUCE)
		c->stack_args[0] = stack_arg(ctx, 1);
	if (fn == GT_NCCL_REDUCE)
		c->stack_args[1] = stack_arg(ctx, 2);
	c->seq = 0;
	c->rank = c->nranks = -1;
	c->comm_hash = 0;
	if (fn == GT_NCCL_COMM_INIT_RANK || fn == GT_NCCL_COMM_INIT_RANK_CONFIG)
		bpf_probe_read_user(t->unique_id, sizeof(t->unique_id),
				    (void *)(PT_REGS_SP(ctx) + 8));
	else if (fn == GT_NCCL_COMM_INIT_RANK_SCALABLE)
		bpf_probe_read_user(t->unique_id, sizeof(t->unique_id), (void *)c->args[4]);
	if (is_collective(fn)) {
		struct seq_key k = { .tgid = id >> 32, .fn = fn, .comm = comm_of(c),
				     .peer = fn == GT_NCCL_SEND || fn == GT_NCCL_RECV
						     ? (__s32)c->args[3] : -1 };
		__u64 one = 1, *n = bpf_map_lookup_elem(&seqs, &k);

		if (n)
			c->seq = __sync_fetch_and_add(n, 1);
		else if (bpf_map_update_elem(&seqs, &k, &one, BPF_NOEXIST) &&
			 (n = bpf_map_lookup_elem(&seqs, &k)))
			c->seq = __sync_fetch_and_add(n, 1); /* another thread created it */
		if (read_comm_fields(GPUTRACE_COOKIE_SLOT(cookie), k.comm, &c->rank, &c->nranks,
				     &c->comm_hash))
			c->flags |= GT_COMM_FIELDS;
	}
	if (fn == GT_NCCL_GROUP_START)
		t->group_depth++;
	else if (fn == GT_NCCL_GROUP_END && t->group_depth)
		t->group_depth--;
	/* Entry time last, so the argument reads are not counted in the call. */
	c->entry_ns = bpf_ktime_get_ns();
	t->depth = depth + 1;
	return 0;
}

static __always_inline void fill_call(struct gt_nccl_event *e, const struct pending_call *c,
				      __u64 id, __u32 slot, __u64 now, __s32 result)
{
	__u32 fn = c->fn;

	e->tgid = id >> 32;
	e->tid = (__u32)id;
	e->generation = generation_of(id >> 32);
	e->pad = 0;
	e->fn = fn;
	e->flags = c->flags;
	e->slot = slot;
	e->entry_ns = c->entry_ns;
	e->exit_ns = now;
	e->comm = comm_of(c);
	e->parent = 0;
	e->count = 0;
	e->stream = 0;
	e->seq = c->seq;
	e->comm_hash = c->comm_hash;
	e->datatype = -1;
	e->redop = -1;
	e->peer = -1;
	e->result = result;
	e->rank = c->rank;
	e->nranks = c->nranks;
	e->color = -1;
	e->key = -1;
	switch (fn) {
	case GT_NCCL_ALL_REDUCE:
	case GT_NCCL_REDUCE_SCATTER:
		e->count = c->args[2];
		e->datatype = (__s32)c->args[3];
		e->redop = (__s32)c->args[4];
		e->stream = c->stack_args[0];
		break;
	case GT_NCCL_BROADCAST:
	case GT_NCCL_GATHER:
	case GT_NCCL_SCATTER:
		e->count = c->args[2];
		e->datatype = (__s32)c->args[3];
		e->peer = (__s32)c->args[4];
		e->stream = c->stack_args[0];
		break;
	case GT_NCCL_REDUCE:
		e->count = c->args[2];
		e->datatype = (__s32)c->args[3];
		e->redop = (__s32)c->args[4];
		e->peer = (__s32)c->args[5];
		e->stream = c->stack_args[1];
		break;
	case GT_NCCL_ALL_GATHER:
	case GT_NCCL_ALL_TO_ALL:
		e->count = c->args[2];
		e->datatype = (__s32)c->args[3];
		e->stream = c->args[5];
		break;
	case GT_NCCL_SEND:
	case GT_NCCL_RECV:
		e->count = c->args[1];
		e->datatype = (__s32)c->args[2];
		e->peer = (__s32)c->args[3];
		e->stream = c->args[5];
		break;
	case GT_NCCL_COMM_INIT_RANK:
	case GT_NCCL_COMM_INIT_RANK_CONFIG:
		/* The 128-byte id goes in memory and takes no register: rank is the 3rd. */
		e->nranks = (__s32)c->args[1];
		e->rank = (__s32)c->args[2];
		break;
	case GT_NCCL_COMM_INIT_RANK_SCALABLE:
		e->nranks = (__s32)c->args[1];
		e->rank = (__s32)c->args[2];
		break;
	case GT_NCCL_COMM_INIT_ALL:
		e->nranks = (__s32)c->args[1];
		break;
	case GT_NCCL_COMM_SPLIT:
		e->parent = c->args[0];
		e->color = (__s32)c->args[1];
		e->key = (__s32)c->args[2];
		break;
	}
}

SEC("uretprobe")
int sysom_nccl_exit(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 fn = GPUTRACE_COOKIE_FN(cookie), slot = GPUTRACE_COOKIE_SLOT(cookie);
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	struct gt_stats *st = my_stats();
	struct thread_state *t;
	struct pending_call *c;
	__s32 result = (__s32)PT_REGS_RC(ctx);
	__u32 depth;

	t = bpf_map_lookup_elem(&threads, &id);
	if (!t)
		goto unmatched;
	depth = t->depth - 1;
	asm volatile("" : "+r"(depth)); /* keep the bound check on the value used as the index */
	if (depth >= GT_MAX_NESTING)
		goto unmatched; /* also depth 0: unsigned wrap */
	c = &t->calls[depth];
	if (c->fn != fn)
		goto unmatched;
	t->depth = depth;
	if (st)
		st->calls++;

	if (is_init(fn) || fn == GT_NCCL_COMM_SPLIT) {
		struct gt_nccl_init_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		__u64 out_ptr = fn == GT_NCCL_COMM_SPLIT ? c->args[3] : c->args[0];

		if (!e)
			goto lost;
		e->call.type = GT_EVENT_NCCL_INIT;
		fill_call(&e->call, c, id, slot, now, result);
		e->call.comm = 0;
		if (fn == GT_NCCL_COMM_INIT_ALL) {
			__u32 n = (__u32)c->args[1];

			__builtin_memset(e->comms, 0, sizeof(e->comms));
			for (__u32 i = 0; i < GT_INIT_ALL_MAX; i++) {
				if (i >= n)
					break;
				bpf_probe_read_user(&e->comms[i], sizeof(__u64),
						    (void *)(out_ptr + i * sizeof(__u64)));
			}
			e->call.comm = e->comms[0];
		} else {
			__builtin_memcpy(e->unique_id, t->unique_id, sizeof(e->unique_id));
			if (out_ptr)
				bpf_probe_read_user(&e->call.comm, sizeof(e->call.comm),
						    (void *)out_ptr);
			if (read_comm_fields(slot, e->call.comm, &e->call.rank, &e->call.nranks,
					     &e->call.comm_hash))
				e->call.flags |= GT_COMM_FIELDS;
		}
		bpf_ringbuf_submit(e, 0);
		return 0;
	} else {
		struct gt_nccl_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

		if (!e)
			goto lost;
		e->type = GT_EVENT_NCCL_CALL;
		fill_call(e, c, id, slot, now, result);
		bpf_ringbuf_submit(e, 0);
		return 0;
	}
lost:
	if (st)
		st->events_lost++;
	return 0;
unmatched:
	if (st)
		st->unmatched++;
	return 0;
}

/* Counts the launch in scratch under its key (stack already in key->ips). */
static __always_inline void record_launch(struct launch_scratch *ls, struct gt_stats *st)
{
	struct gt_launch_key *k = &ls->key;
	struct gt_launch_value *old;

	/* Unused slots must not make equal stacks differ. */
	for (int i = 0; i < GT_LAUNCH_MAX_DEPTH; i++)
		if (i >= k->nframes)
			k->ips[i] = 0;
	if (st)
		st->launches++;
	old = bpf_map_lookup_elem(&launches, k);
	if (old) {
		__sync_fetch_and_add(&old->count, 1);
		__builtin_memcpy(old->grid, ls->val.grid, sizeof(old->grid));
		__builtin_memcpy(old->block, ls->val.block, sizeof(old->block));
		old->shared_mem = ls->val.shared_mem;
		return;
	}
	ls->val.count = 1;
	if (bpf_map_update_elem(&launches, k, &ls->val, BPF_NOEXIST)) {
		old = bpf_map_lookup_elem(&launches, k);
		if (old)
			__sync_fetch_and_add(&old->count, 1);
		else if (st)
			st->launch_map_full++;
	}
}

/* The kernel's frame-pointer walk, with the caller's return address (at rsp on entry, not
 * yet linked by rbp) inserted after the leaf. */
static __always_inline void fp_launch_stack(struct pt_regs *ctx, struct gt_launch_key *k,
					    struct gt_stats *st)
{
	long n = bpf_get_stack(ctx, k->ips, sizeof(k->ips), BPF_F_USER_STACK);
	__u64 ret = 0;

	if (n < 0) {
		if (st)
			st->stack_errors++;
		n = 0;
	}
	k->nframes = n / 8;
	if (k->nframes >= 1 &&
	    bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)) == 0 && ret) {
		for (int i = GT_LAUNCH_MAX_DEPTH - 1; i >= 2; i--)
			if (i <= k->nframes)
				k->ips[i] = k->ips[i - 1];
		k->ips[1] = ret;
		if (k->nframes < GT_LAUNCH_MAX_DEPTH)
			k->nframes++;
	}
}

/* cuLaunchKernel[_ptsz](f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) and
 * cuLaunchKernelEx[_ptsz](const CUlaunchConfig *config, f, params, extra). */
SEC("uprobe")
int sysom_cu_launch(struct pt_regs *ctx)
{
	__u32 fn = GPUTRACE_COOKIE_FN(bpf_get_attach_cookie(ctx));
	struct gt_stats *st = my_stats();
	struct launch_scratch *ls;
	struct gt_launch_key *k;
	__u32 zero = 0;

	ls = bpf_map_lookup_elem(&launch_scratch, &zero);
	if (!ls)
		return 0;
	k = &ls->key;
	__builtin_memset(&ls->val, 0, sizeof(ls->val));
	k->tgid = bpf_get_current_pid_tgid() >> 32;
	k->generation = generation_of(k->tgid);
	k->pad = 0;
	k->flags = 0;
	if (fn == GT_CU_LAUNCH_KERNEL_EX || fn == GT_CU_LAUNCH_KERNEL_EX_PTSZ) {
		__u32 cfg[7] = {};

		k->flags |= 1; /* SYSOM_LAUNCH_EX */
		k->function = PT_REGS_PARM2(ctx);
		bpf_probe_read_user(cfg, sizeof(cfg), (void *)PT_REGS_PARM1(ctx));
		ls->val.grid[0] = cfg[0];
		ls->val.grid[1] = cfg[1];
		ls->val.grid[2] = cfg[2];
		ls->val.block[0] = cfg[3];
		ls->val.block[1] = cfg[4];
		ls->val.block[2] = cfg[5];
		ls->val.shared_mem = cfg[6];
	} else {
		k->function = PT_REGS_PARM1(ctx);
		ls->val.grid[0] = (__u32)PT_REGS_PARM2(ctx);
		ls->val.grid[1] = (__u32)PT_REGS_PARM3(ctx);
		ls->val.grid[2] = (__u32)PT_REGS_PARM4(ctx);
		ls->val.block[0] = (__u32)PT_REGS_PARM5(ctx);
		ls->val.block[1] = (__u32)PT_REGS_PARM6(ctx);
		ls->val.block[2] = (__u32)stack_arg(ctx, 1);
		ls->val.shared_mem = (__u32)stack_arg(ctx, 2);
	}
	if (fn == GT_CU_LAUNCH_KERNEL_PTSZ || fn == GT_CU_LAUNCH_KERNEL_EX_PTSZ)
		k->flags |= 2; /* SYSOM_LAUNCH_PTSZ */
	if (hybrid_unwind) {
		const struct unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &k->tgid);

		/* Published for this incarnation: the same unwinder as the CPU samples. */
		if (proc && proc->generation == k->generation) {
			ls->regs.ip = PT_REGS_IP(ctx);
			ls->regs.sp = PT_REGS_SP(ctx);
			ls->regs.bp = PT_REGS_FP(ctx);
			ls->regs.bp_known = 1;
			ls->regs.ip_exact = 1;
			/* Probed at its entry: stepped by the entry rule, the one frame whose
			 * file the agent may not have published yet (dlopen'ed just now). */
			ls->regs.at_entry = 1;
			ls->tail_calls = 0;
			ls->trace.nframes = 0;
			bpf_tail_call(ctx, &launch_unwind_progs, 0);
		} else if (st) {
			st->unwind.fallback_no_proc++;
		}
	}
	fp_launch_stack(ctx, k, st);
	record_launch(ls, st);
	return 0;
}

/* Ends a hybrid launch stack: the first GT_LAUNCH_MAX_DEPTH frames key the count. */
static __always_inline void finish_launch(struct launch_scratch *ls, struct gt_stats *st,
					  __u8 reason)
{
	__u16 n = ls->trace.nframes;

	if (st && reason < UNWIND_STOP_REASONS)
		st->unwind.stops[reason]++;
	if (st)
		st->launch_stacks_hybrid++;
	if (n > GT_LAUNCH_MAX_DEPTH)
		n = GT_LAUNCH_MAX_DEPTH;
	for (int i = 0; i < GT_LAUNCH_MAX_DEPTH; i++)
		if (i < n && i < SYSOM_PROFILE_MAX_DEPTH)
			ls->key.ips[i] = ls->trace.ips[i];
	ls->key.nframes = n;
	record_launch(ls, st);
}

/* Unwinds up to UNWIND_FRAMES_PER_PROG frames of the launching thread, then tail-calls
 * itself or records the launch. */
SEC("uprobe")
int sysom_cu_launch_unwind(struct pt_regs *ctx)
{
	struct unwind_ctx c = {};
	struct gt_stats *st = my_stats();
	struct launch_scratch *ls;
	__u32 zero = 0, tgid;

	ls = bpf_map_lookup_elem(&launch_scratch, &zero);
	if (!ls || !st)
		return 0;
	tgid = ls->key.tgid;
	c.proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!c.proc) {
		finish_launch(ls, st, UNWIND_STOP_NO_MAPPING);
		return 0;
	}
	if (ls->tail_calls == 0) {
		st->unwind.unwinds++;
		ls->regs.py_frame = 0;
		ls->regs.py_in_run = 0;
		ls->regs.py_skip = 0;
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
		if (c.py && c.py->generation == ls->key.generation)
			ls->regs.py_frame = py_current_frame(c.py, &st->py);
	}
	if (!c.py && ls->regs.py_frame)
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (c.py && c.py->generation != ls->key.generation)
		c.py = NULL;
	c.pystats = &st->py;
	c.regs = &ls->regs;
	c.trace = &ls->trace;
	c.stats = &st->unwind;
	c.tgid = tgid;
	c.generation = ls->key.generation;
	bpf_loop(UNWIND_FRAMES_PER_PROG, unwind_one_frame, &c, 0);
	if (c.done || ls->trace.nframes >= GT_LAUNCH_MAX_DEPTH) {
		finish_launch(ls, st, c.done ? c.stop : UNWIND_STOP_DEPTH);
		return 0;
	}
	if (ls->tail_calls < UNWIND_MAX_TAIL_CALLS) {
		ls->tail_calls++;
		st->unwind.tail_calls++;
		bpf_tail_call(ctx, &launch_unwind_progs, 0);
	}
	finish_launch(ls, st, UNWIND_STOP_TAIL_CALLS);
	return 0;
}

SEC("uprobe")
int sysom_cu_name_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct name_call c = {
		.out = PT_REGS_PARM1(ctx),
		.source = PT_REGS_PARM2(ctx),
		.name = PT_REGS_PARM3(ctx),
		.fn = GPUTRACE_COOKIE_FN(bpf_get_attach_cookie(ctx)),
	};

	bpf_map_update_elem(&name_calls, &id, &c, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int sysom_cu_name_exit(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct gt_stats *st = my_stats();
	struct name_call *c = bpf_map_lookup_elem(&name_calls, &id);
	struct gt_name_event *e;
	__u64 handle = 0;
	long n;

	if (!c)
		return 0;
	if (PT_REGS_RC(ctx) != 0 || bpf_probe_read_user(&handle, sizeof(handle), (void *)c->out) ||
	    !handle)
		goto done;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		if (st)
			st->events_lost++;
		goto done;
	}
	e->tgid = id >> 32;
	e->handle = handle;
	e->generation = generation_of(e->tgid);
	e->name_len = 0;
	if (c->fn == GT_CU_KERNEL_GET_FUNCTION) {
		e->type = GT_EVENT_CU_ALIAS;
		e->source = c->source;
		e->name[0] = 0;
	} else {
		e->type = GT_EVENT_CU_NAME;
		e->source = 0;
		n = bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)c->name);
		e->name_len = n > 0 ? n - 1 : 0;
	}
	if (st)
		st->names++;
	bpf_ringbuf_submit(e, 0);
done:
	bpf_map_delete_elem(&name_calls, &id);
	return 0;
}

/* ---- the dynamic loader's notification (see gputrace.h) --------------------------------- */

/* Stop a process that mapped NCCL/CUDA until the agent has attached (SIGCONT): set by the
 * agent before load. false: report only (the process runs on while the agent attaches). */
const volatile bool dl_hold = false;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GT_LOADER_MAX);
	__type(key, __u32);
	__type(value, struct gt_dl_layout);
} dl_layouts SEC(".maps");

/* Per process: link-map entries already examined (new objects are appended at the end). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} dl_seen SEC(".maps");

/* The walk's state, in map memory rather than on the stack: the verifier does not follow
 * values kept there, so the loop callback is verified once, not once per value of each. */
struct dl_walk {
	char name[GT_DL_NAME_BYTES + 16];
	__u64 lm;      /* struct link_map * of the entry to visit */
	__u32 index;
	__u32 seen;
	__u32 kinds;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dl_walk);
} dl_walks SEC(".maps");

/* struct link_map (the public part, <link.h>): l_addr, l_name, l_ld, l_next, l_prev. */
#define LM_NAME_OFF 8
#define LM_NEXT_OFF 24
#define R_DEBUG_MAP_OFF 8
#define R_DEBUG_STATE_OFF 24
#define RT_CONSISTENT 0

static __always_inline __u32 dl_name_kind(const char *b)
{
	if (b[0] != 'l' || b[1] != 'i' || b[2] != 'b' || b[7] != '.' || b[8] != 's' || b[9] != 'o')
		return 0;
	if (b[3] == 'n' && b[4] == 'c' && b[5] == 'c' && b[6] == 'l')
		return GT_DL_NCCL;
	if (b[3] == 'c' && b[4] == 'u' && b[5] == 'd' && b[6] == 'a')
		return GT_DL_CUDA;
	return 0;
}

static long dl_visit(__u32 i, void *arg)
{
	__u32 zero = 0, base;
	struct dl_walk *w = bpf_map_lookup_elem(&dl_walks, &zero);
	__u64 name = 0, next = 0;
	long n;

	(void)i;
	(void)arg;
	if (!w || !w->lm)
		return 1;
	if (w->index >= w->seen &&
	    bpf_probe_read_user(&name, sizeof(name), (void *)(w->lm + LM_NAME_OFF)) == 0 && name) {
		n = bpf_probe_read_user_str(w->name, GT_DL_NAME_BYTES, (void *)name);
		/* The basename is one of a few lengths ("libnccl.so" .. "libnccl.so.2.28.9" and
		 * longer): try each, no byte loop for the verifier to follow. */
#pragma unroll
		for (int len = 10; len <= GT_DL_BASENAME_MAX; len++) {
			long at = n - 1 - len;
			if (at < 0)
				continue;
			base = (__u32)at & (GT_DL_NAME_BYTES - 1);
			if (at > 0 && w->name[(base - 1) & (GT_DL_NAME_BYTES - 1)] != '/')
				continue;
			w->kinds |= dl_name_kind(&w->name[base]);
		}
	}
	w->index++;
	if (bpf_probe_read_user(&next, sizeof(next), (void *)(w->lm + LM_NEXT_OFF)))
		next = 0;
	w->lm = next;
	return next ? 0 : 1;
}

SEC("uprobe")
int sysom_dl_debug_state(struct pt_regs *ctx)
{
	__u32 slot = (__u32)bpf_get_attach_cookie(ctx);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = (__u32)(id >> 32);
	struct gt_stats *st = my_stats();
	struct gt_dl_layout *l = bpf_map_lookup_elem(&dl_layouts, &slot);
	struct gt_dl_event *e;
	struct dl_walk *w;
	__u64 ip = PT_REGS_IP(ctx), base, r_debug, map = 0;
	__s32 state = -1;
	__u32 *seen, zero = 0, kinds, objects;

	if (!l || !l->debug_state_vaddr)
		return 0;
	/* ld.so is loaded at a page boundary: the probed address, or one past it (the trap). */
	base = ip - l->debug_state_vaddr;
	if (base & 0xfff)
		base = ip - 1 - l->debug_state_vaddr;
	if (base & 0xfff)
		return 0;
	r_debug = base + l->r_debug_vaddr;
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(r_debug + R_DEBUG_STATE_OFF)) ||
	    state != RT_CONSISTENT ||
	    bpf_probe_read_user(&map, sizeof(map), (void *)(r_debug + R_DEBUG_MAP_OFF)) || !map)
		return 0;
	if (st)
		st->dl_notifications++;
	w = bpf_map_lookup_elem(&dl_walks, &zero);
	if (!w)
		return 0;
	seen = bpf_map_lookup_elem(&dl_seen, &tgid);
	w->lm = map;
	w->seen = seen ? *seen : 0;
	w->index = 0;
	w->kinds = 0;
	bpf_loop(GT_DL_MAX_OBJECTS, dl_visit, NULL, 0);
	kinds = w->kinds;
	objects = w->index;
	/* Fewer entries than before: objects were unloaded; look at all of them next time. */
	bpf_map_update_elem(&dl_seen, &tgid, objects < w->seen ? &zero : &objects, BPF_ANY);
	if (!kinds)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		if (st)
			st->events_lost++;
		return 0; /* never stopped unless the agent is told (it sends the SIGCONT) */
	}
	e->type = GT_EVENT_DL_LOAD;
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->generation = generation_of(tgid);
	e->ktime_ns = bpf_ktime_get_ns();
	e->kinds = kinds;
	e->flags = 0;
	e->objects = objects;
	e->pad = 0;
	if (dl_hold && bpf_send_signal(19 /* SIGSTOP */) == 0)
		e->flags |= GT_DL_HELD;
	if (st) {
		st->dl_loads++;
		if (e->flags & GT_DL_HELD)
			st->dl_held++;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* A process image replaced: its link map starts anew. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(sysom_dl_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	bpf_map_delete_elem(&dl_seen, &tgid);
	return 0;
}
