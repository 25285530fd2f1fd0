// SPDX-License-Identifier: GPL-2.0-only
/*
 * OS signals per CPU and per thread of the tracked (training) processes: device interrupts and
 * softirqs, context switches and on-CPU time, run-queue latency, migrations (NUMA ones apart)
 * and page migrations. Everything is aggregated here, cumulatively; the agent reads per-window
 * differences (agent/os/ossignals.c). BTF tracepoints (tp_btf): typed arguments, no tracefs, and
 * cheaper than classic tracepoints (no argument buffer is built).
 *
 * Run-queue latency comes from the scheduler's own accounting (task_struct.sched_info, kept
 * with CONFIG_SCHED_INFO, which SCHEDSTATS and TASK_DELAY_ACCT select): it stamps a task when
 * it is queued (woken, new, or preempted and still runnable) and adds the wait to run_delay when
 * the task gets the CPU, counting it in pcount. Reading those at sched_switch gives every wait,
 * also one split by a migration, without a program on sched_wakeup/sched_wakeup_new: those fire
 * as often as switches, and each attached program costs every event of the node (about 100 ns
 * in a VM even when empty, docs/PERFORMANCE.md).
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/ossignals.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_EXITING 0x00000004
#define PF_KTHREAD 0x00200000
#define TASK_RUNNING 0

/* Track every user thread, not only the processes in `tracked` (set before load). */
const volatile bool track_all = false;

/* Run-time settings, written by the agent through the skeleton's mmapped .data. */
__u32 window = 0;      /* number of the current collection window (CPU masks) */
__u32 track_epoch = 1; /* bumped by the agent after every change of `tracked` */

/* tgid → 1: the processes whose threads are measured. Filled by the agent; an entry is deleted
 * here when the whole thread group has exited, so a pid reused later is not tracked by
 * mistake. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OS_MAX_TRACKED);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps");

/* CPU → NUMA node, -1 unknown (the agent fills it from /sys/devices/system/node). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OS_MAX_CPUS);
	__type(key, __u32);
	__type(value, __s32);
} cpu_node SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct os_cpu);
} cpus SEC(".maps");

/* Per tracked thread. Not preallocated: memory follows the threads actually tracked. Entries
 * are deleted only by the agent, after the thread exited and a drain later (nothing updates a
 * dead thread's entry then, so an element is never freed under a program). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OS_MAX_THREADS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct os_thread_key);
	__type(value, struct os_thread);
} threads SEC(".maps");

/* Per (CPU, IRQ): only ever updated on that CPU, with interrupts off. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OS_MAX_IRQ_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct os_irq_key);
	__type(value, struct os_irq_value);
} irqs SEC(".maps");

/* Per task: whether it is tracked, so that the tgid lookup is made once per task (and change
 * of the tracked set), not at every switch; and its run_delay when its waits were last charged
 * to a CPU (the per-CPU run-queue wait covers every task). The kernel frees it with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct os_task);
} tasks SEC(".maps");

static const struct os_thread zero_thread;
static const struct os_irq_value zero_irq;

static __always_inline struct os_cpu *this_cpu(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpus, &zero);
}

static __always_inline struct os_task *task_state(struct task_struct *p, bool create)
{
	return bpf_task_storage_get(&tasks, p, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* Whether `p` belongs to a tracked process; cached in its task storage per track_epoch, so
 * the tgid lookup happens once per task and change of the tracked set, not per switch. */
static __always_inline bool is_tracked(struct task_struct *p, struct os_task *ts)
{
	__u32 epoch = track_epoch;
	bool yes;

	if (ts && ts->epoch == epoch)
		return ts->tracked;
	if (p->flags & PF_KTHREAD) {
		yes = false;
	} else if (track_all) {
		yes = true;
	} else {
		__u32 tgid = p->tgid;
		yes = bpf_map_lookup_elem(&tracked, &tgid) != NULL;
	}
	if (ts) {
		ts->tracked = yes;
		ts->epoch = epoch;
	}
	return yes;
}

/* floor(log2(µs)), 0 below 2 µs, at most OS_HIST_BUCKETS - 1 (SYSOM_RUNQ_HIST_BUCKETS). */
static __always_inline __u32 hist_bucket(__u64 ns)
{
	__u64 us = ns / 1000;
	__u32 b = 0;

	if (us >> 32) {
		b += 32;
		us >>= 32;
	}
	if (us >> 16) {
		b += 16;
		us >>= 16;
	}
	if (us >> 8) {
		b += 8;
		us >>= 8;
	}
	if (us >> 4) {
		b += 4;
		us >>= 4;
	}
	if (us >> 2) {
		b += 2;
		us >>= 2;
	}
	if (us >> 1)
		b += 1;
	return b < OS_HIST_BUCKETS ? b : OS_HIST_BUCKETS - 1;
}

static __always_inline __u64 run_delay_of(struct task_struct *p)
{
	/* Direct loads from the BTF-typed task (relocated by CO-RE): no helper call. */
	return bpf_core_field_exists(p->sched_info) ? p->sched_info.run_delay : 0;
}

static __always_inline __u64 pcount_of(struct task_struct *p)
{
	return bpf_core_field_exists(p->sched_info) ? p->sched_info.pcount : 0;
}

/* The thread's entry, created on first use (not for an exiting thread: its entry may already
 * have been read for the last time). A full map is counted once per thread; a failure for a
 * moment (-ENOMEM: no free element at hand on this CPU; -EBUSY: the bucket is held by the
 * program this one interrupted) is retried at the thread's next event, and counted at its exit
 * only if no insert ever succeeded. */
static __always_inline struct os_thread *thread_of(struct task_struct *p, struct os_task *ts,
						   struct os_cpu *c)
{
	struct os_thread_key key = { .tid = p->pid, .start_ns = p->start_time };
	struct os_thread *t = bpf_map_lookup_elem(&threads, &key);
	long rc;

	if (t)
		return t;
	if (p->flags & PF_EXITING)
		return NULL;
	rc = bpf_map_update_elem(&threads, &key, &zero_thread, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&threads, &key);
	if (!t) {
		if (rc == -7 /* E2BIG: full */ && c && (!ts || !(ts->flags & OS_THREAD_LOST))) {
			c->threads_lost++;
			if (ts)
				ts->flags |= OS_THREAD_LOST;
		} else if (rc && ts) {
			ts->flags |= OS_THREAD_INSERT_FAILED;
		}
		return NULL;
	}
	if (rc == 0) {
		t->tgid = p->tgid;
		/* Waits count from here (at a switch-in, the wait that just ended is added to
		 * run_delay after the tracepoint: it is folded in at the next switch-out). */
		t->last_run_delay = run_delay_of(p);
		t->last_pcount = pcount_of(p);
	}
	return t;
}

/* Folds the waits the scheduler added to `p`'s run_delay since the last fold. Between two
 * switch-outs the task got the CPU once, so that is normally one wait (pcount + 1). */
static __always_inline void fold_waits(struct os_thread *t, struct task_struct *p)
{
	__u64 delay = run_delay_of(p), count = pcount_of(p);
	__u64 waited, waits;

	if (delay < t->last_run_delay || count < t->last_pcount)
		goto rebase; /* not ours to explain (cannot happen for a live task): start over */
	waits = count - t->last_pcount;
	if (!waits)
		return; /* part of a wait a migration split off: it comes with the rest */
	waited = delay - t->last_run_delay;
	t->runq_wait_ns += waited;
	t->runq_waits += waits;
	t->runq_hist[hist_bucket(waited / waits)] += (__u32)waits;
rebase:
	t->last_run_delay = delay;
	t->last_pcount = count;
}

/* Charges the waits the scheduler added to `p`'s run_delay since the last charge to this CPU:
 * the task ran here after them. The first sight of a task only takes the baseline. */
static __always_inline void charge_cpu_waits(struct os_cpu *c, struct task_struct *p,
					     struct os_task *ts)
{
	__u64 delay = run_delay_of(p);

	if ((ts->flags & OS_TASK_BASELINE) && delay > ts->last_run_delay)
		c->runq_wait_ns += delay - ts->last_run_delay;
	ts->last_run_delay = delay;
	ts->flags |= OS_TASK_BASELINE;
}

/* Records that the thread ran on `cpu` in the current window. */
static __always_inline void mark_cpu(struct os_thread *t, __u32 cpu)
{
	__u32 w = window;
	__u32 slot = w & 1;
	__u64 *mask;

	t->last_cpu = cpu;
	if (slot == 0) {
		if (t->mask_window[0] != w) {
			__builtin_memset(t->cpus[0], 0, sizeof(t->cpus[0]));
			t->mask_window[0] = w;
		}
		mask = t->cpus[0];
	} else {
		if (t->mask_window[1] != w) {
			__builtin_memset(t->cpus[1], 0, sizeof(t->cpus[1]));
			t->mask_window[1] = w;
		}
		mask = t->cpus[1];
	}
	if (cpu < 64 * OS_CPU_MASK_WORDS)
		mask[(cpu / 64) & (OS_CPU_MASK_WORDS - 1)] |= 1ULL << (cpu % 64);
}

static __always_inline __s32 node_of(__u32 cpu)
{
	__s32 *node = bpf_map_lookup_elem(&cpu_node, &cpu);

	return node ? *node : -1;
}

/* task_cpu(p): thread_info.cpu since 5.16 (THREAD_INFO_IN_TASK), task_struct.cpu before. */
struct task_struct___old {
	unsigned int cpu;
} __attribute__((preserve_access_index));

static __always_inline __u32 task_cpu_of(struct task_struct *p)
{
	if (bpf_core_field_exists(p->thread_info.cpu))
		return p->thread_info.cpu;
	return BPF_CORE_READ((struct task_struct___old *)p, cpu);
}

/* The tracked thread current on this CPU, if any (interrupts are charged to it). */
static __always_inline struct os_thread *current_thread(struct os_cpu *c)
{
	struct os_thread_key key = { .tid = c->cur_tid, .start_ns = c->cur_start };

	return c->cur_tracked ? bpf_map_lookup_elem(&threads, &key) : NULL;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(os_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	struct os_cpu *c = this_cpu();
	__u32 prev_pid = prev->pid, next_pid = next->pid, epoch = track_epoch;
	/* Preempted, or yielded: it stays on the run queue. */
	bool runnable = preempt || prev_state == TASK_RUNNING;
	struct os_thread *t = NULL;
	struct os_task *ts;
	__u64 ran;

	if (!c)
		return 0;
	c->context_switches++;
	ran = c->switch_ns && now > c->switch_ns ? now - c->switch_ns : 0;
	if (prev_pid) {
		c->busy_ns += ran;
		ts = task_state(prev, true);
		if (ts)
			charge_cpu_waits(c, prev, ts);
		/* Whether prev is tracked was decided when it was switched in. */
		if (c->cur_pid == prev_pid && c->cur_epoch == epoch)
			t = current_thread(c);
		else if (is_tracked(prev, ts))
			t = thread_of(prev, ts, c);
		if (t) {
			t->oncpu_ns += ran;
			if (runnable)
				t->involuntary_switches++;
			else
				t->voluntary_switches++;
			fold_waits(t, prev);
			bpf_get_current_comm(t->comm, sizeof(t->comm)); /* current is still prev */
		}
	}
	c->switch_ns = now;
	c->cur_pid = next_pid;
	c->cur_tracked = 0;
	c->cur_epoch = epoch;
	if (!next_pid)
		return 0;
	ts = task_state(next, true);
	if (!is_tracked(next, ts) || !(t = thread_of(next, ts, c)))
		return 0;
	mark_cpu(t, bpf_get_smp_processor_id());
	c->cur_tracked = 1;
	c->cur_tid = next_pid;
	c->cur_start = next->start_time;
	return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(os_sched_migrate, struct task_struct *p, int dest_cpu)
{
	struct os_task *ts = task_state(p, false);
	struct os_thread *t;
	__u32 orig_cpu;
	__s32 from, to;

	if (!p->pid || !is_tracked(p, ts) || !(t = thread_of(p, ts, this_cpu())))
		return 0;
	/* May run on another CPU than the thread's: atomic. */
	__sync_fetch_and_add(&t->migrations, 1);
	orig_cpu = task_cpu_of(p);
	from = node_of(orig_cpu);
	to = node_of((__u32)dest_cpu);
	if (from >= 0 && to >= 0 && from != to)
		__sync_fetch_and_add(&t->numa_migrations, 1);
	return 0;
}

/* Pages migrated (NUMA balancing, compaction, mbind) in the context of the current task. */
SEC("tp_btf/mm_migrate_pages")
int BPF_PROG(os_mm_migrate_pages, unsigned long succeeded)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct os_task *ts;
	struct os_thread *t;

	if (!succeeded || !cur->pid)
		return 0;
	ts = task_state(cur, false);
	if (!is_tracked(cur, ts) || !(t = thread_of(cur, ts, this_cpu())))
		return 0;
	__sync_fetch_and_add(&t->pages_migrated, succeeded);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(os_process_exit, struct task_struct *p)
{
	struct os_thread_key key = { .tid = p->pid, .start_ns = p->start_time };
	struct os_thread *t = bpf_map_lookup_elem(&threads, &key);

	if (t) {
		t->flags |= OS_THREAD_EXITED; /* only the exiting thread itself writes `flags` */
	} else {
		/* Never measured: every insert of its entry failed for a moment. */
		struct os_task *ts = task_state(p, false);
		struct os_cpu *c = this_cpu();
		if (ts && c && (ts->flags & (OS_THREAD_INSERT_FAILED | OS_THREAD_LOST)) ==
				       OS_THREAD_INSERT_FAILED)
			__sync_fetch_and_add(&c->threads_lost, 1); /* preemptible here */
	}
	/* The last thread of the group: signal->live has dropped to zero by now. */
	if (p->signal->live.counter == 0) {
		__u32 tgid = p->tgid;
		bpf_map_delete_elem(&tracked, &tgid);
	}
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(os_irq_entry, int irq, struct irqaction *action)
{
	struct os_cpu *c = this_cpu();

	if (c)
		c->hardirq_start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(os_irq_exit, int irq, struct irqaction *action, int ret)
{
	__u64 now = bpf_ktime_get_ns();
	struct os_cpu *c = this_cpu();
	struct os_irq_key key = { .cpu = bpf_get_smp_processor_id(), .irq = (__u32)irq };
	struct os_irq_value *v;
	struct os_thread *t;
	__u64 ns;

	if (!c || !c->hardirq_start_ns)
		return 0; /* attached while the handler ran */
	ns = now > c->hardirq_start_ns ? now - c->hardirq_start_ns : 0;
	c->hardirq_start_ns = 0;
	c->hardirq_count++;
	c->hardirq_ns += ns;
	v = bpf_map_lookup_elem(&irqs, &key);
	if (!v) {
		bpf_map_update_elem(&irqs, &key, &zero_irq, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&irqs, &key);
	}
	if (v) {
		v->count++;
		v->ns += ns;
	} else {
		c->irqs_lost++;
	}
	if ((t = current_thread(c)))
		t->hardirq_ns += ns;
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(os_softirq_entry, unsigned int vec)
{
	struct os_cpu *c = this_cpu();

	if (!c)
		return 0;
	c->softirq_start_ns = bpf_ktime_get_ns();
	c->softirq_hardirq_base = c->hardirq_ns;
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(os_softirq_exit, unsigned int vec)
{
	__u64 now = bpf_ktime_get_ns();
	struct os_cpu *c = this_cpu();
	struct os_thread *t;
	__u64 ns, nested;

	if (!c || !c->softirq_start_ns)
		return 0;
	ns = now > c->softirq_start_ns ? now - c->softirq_start_ns : 0;
	nested = c->hardirq_ns - c->softirq_hardirq_base;
	ns = ns > nested ? ns - nested : 0;
	c->softirq_start_ns = 0;
	if (vec >= OS_SOFTIRQS)
		return 0;
	c->softirq_count[vec]++;
	c->softirq_ns[vec] += ns;
	if ((t = current_thread(c)))
		t->softirq_ns += ns;
	return 0;
}

/*
 * Run by the agent on each CPU in turn (BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU, i.e. from
 * an IPI, or with preemption off on the agent's own CPU) after it advanced `window`: charges
 * the time the current task has run since it was switched in, so a thread that never switches
 * (a busy-polling thread alone on its CPU) is accounted per window instead of at its next
 * switch, and marks it in the new window's CPU mask. The scheduler cannot run here meanwhile.
 */
SEC("raw_tp")
int os_flush(void *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct os_cpu *c = this_cpu();
	struct os_thread *t;

	if (!c)
		return 0;
	c->flush_ns = now;
	if (!c->switch_ns)
		return 0;
	__u64 ran = now > c->switch_ns ? now - c->switch_ns : 0;
	c->switch_ns = now;
	if (!c->cur_pid)
		return 0;
	c->busy_ns += ran;
	struct task_struct *cur = bpf_get_current_task_btf();
	struct os_task *ts = cur->pid == c->cur_pid ? task_state(cur, false) : NULL;
	if (ts)
		charge_cpu_waits(c, cur, ts); /* the wait before this run, in this window */
	if (!c->cur_tracked || cur->pid != c->cur_tid) {
		/* Switched in before its process was tracked (a thread that was already running
		 * when the agent started, or when its process got its job identity): decide now,
		 * as its next switch-in would, so a thread that never switches is measured from
		 * this window on instead of never. */
		if (cur->pid != c->cur_pid || !is_tracked(cur, ts) || !(t = thread_of(cur, ts, c))) {
			c->cur_tracked = 0;
			return 0;
		}
		c->cur_tracked = 1;
		c->cur_tid = cur->pid;
		c->cur_start = cur->start_time;
		c->cur_epoch = track_epoch;
	} else if (!is_tracked(cur, ts)) {
		/* Its process stopped being tracked since it was switched in: leave its entry
		 * alone from now on (the agent removes it). */
		c->cur_tracked = 0;
		return 0;
	}
	if ((t = current_thread(c))) {
		t->oncpu_ns += ran;
		fold_waits(t, cur); /* the wait before this run, so it is in this window */
		mark_cpu(t, bpf_get_smp_processor_id());
	}
	return 0;
}
