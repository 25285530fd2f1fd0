/* SPDX-License-Identifier: Apache-2.0 */
/* BPF CPU sampler lifecycle, CPU hotplug, and the exactly-once double-buffer drain. */
#include "agent/sampling/sampler.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/node/host.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/wire/wire.h"
#include "profile.skel.h"

/* How long a drain waits for programs in flight on the old buffer before giving up. */
#define QUIESCE_TIMEOUT_NS (2ULL * 1000000000ULL)
#define DRAIN_BATCH 512
/* Off-CPU blocks still in progress at a drain, blocked this long at least, are delivered. */
#define OFFCPU_OPEN_MIN_NS 1000000000ULL
#define OFFCPU_OPEN_BATCH 64

/* The BPF program's `offcpu_start` value (struct offcpu_start in bpf/profile.bpf.c): a block
 * in progress. Checked against the map's value size at open; a mismatch turns the delivery of
 * blocks in progress off. */
struct offcpu_open {
	__u64 start_ns;
	__u32 tgid;
	__u32 generation;
	__u32 state;
	__u32 pad;
	char comm[SYSOM_COMM_LEN];
	struct sysom_stack_trace kernel;
	struct sysom_stack_trace user;
};

struct sampler {
	struct profile_bpf *skel;
	struct sampler_options opts;
	bool paused;                /* perf events detached on purpose: sync attaches none */
	uint32_t ncpus;             /* possible CPUs (index space of per-CPU maps) */
	int *perf_fds;              /* per CPU, -1 when not attached */
	struct bpf_link **links;    /* per CPU */
	struct ring_buffer *events;
	sampler_event_fn on_event;
	void *event_ctx;
	struct sysom_cpu_state *cpu_values; /* scratch for per-CPU reads */

	/* Drain scratch, reused between drains. */
	struct sysom_sample_key *keys;
	struct sysom_sample_value *values;
	uint64_t *stack_keys;
	struct sysom_stack_trace *stack_values;
	struct sysom_stack_trace *stacks;   /* stacks read this drain */
	uint32_t stacks_cap;
	struct hash_index stack_index;      /* hash → index into stacks */

	/* Off-CPU: drain scratch and where entries go. */
	struct bpf_link *offcpu_link;
	struct sysom_offcpu_key *offcpu_keys;
	struct sysom_offcpu_value *offcpu_values;
	struct sysom_offcpu_cpu *offcpu_cpu_values;
	sampler_offcpu_fn offcpu_fn;
	void *offcpu_ctx;
	/* Blocks in progress (JOBS mode): scratch for a batch of `offcpu_start` entries. */
	bool offcpu_open_on;
	__u32 *open_keys;
	struct offcpu_open *open_values;
};

/* BPF stop reasons (enum unwind_stop) → wire stop reasons (enum sysom_stack_stop). */
static const uint8_t wire_stop_reasons[UNWIND_STOP_REASONS] = {
	[UNWIND_STOP_COMPLETE] = SYSOM_STOP_COMPLETE,
	[UNWIND_STOP_DEPTH] = SYSOM_STOP_DEPTH_LIMIT,
	[UNWIND_STOP_READ_FAULT] = SYSOM_STOP_READ_FAULT,
	[UNWIND_STOP_NO_MAPPING] = SYSOM_STOP_NO_MAPPING,
	[UNWIND_STOP_FP_INVALID] = SYSOM_STOP_FP_INVALID,
	[UNWIND_STOP_JIT] = SYSOM_STOP_JIT,
	[UNWIND_STOP_CFA_ORDER] = SYSOM_STOP_CFA_ORDER,
	[UNWIND_STOP_RBP_UNKNOWN] = SYSOM_STOP_RBP_UNKNOWN,
	[UNWIND_STOP_TAIL_CALLS] = SYSOM_STOP_TAIL_CALLS,
	[UNWIND_STOP_TABLE] = SYSOM_STOP_TABLE,
};
_Static_assert(UNWIND_STOP_REASONS == 10, "a new BPF stop reason needs a wire stop reason");
/* The daemon reports stops per BPF reason 1..9 as counters UNWIND_STOP_FIRST..LAST. */
_Static_assert(SYSOM_COUNTER_UNWIND_STOP_LAST - SYSOM_COUNTER_UNWIND_STOP_FIRST + 1 ==
		       UNWIND_STOP_REASONS - 1,
	       "one counter per BPF stop reason");

uint8_t sampler_stop_reason_to_wire(uint8_t bpf_reason)
{
	return bpf_reason < UNWIND_STOP_REASONS ? wire_stop_reasons[bpf_reason]
						: SYSOM_STOP_REASON_MAX;
}

void sampler_options_default(struct sampler_options *opts)
{
	*opts = (struct sampler_options){
		.hz = 99,
		.sample_rate = 0.10,
		.include_idle = false,
		.collect_user = true,
		.max_sample_keys = 16384,
		.max_stacks = 8192,
		.unwinder = SYSOM_UNWINDER_HYBRID,
		.offcpu_mode = SYSOM_OFFCPU_OFF,
		.offcpu_min_ns = 1000000,
		.offcpu_budget_ns = 5000000,
		.max_offcpu_keys = 8192,
		.max_offcpu_threads = 4096,
		.offcpu_open = true,
		.offcpu_tracked_fd = -1,
	};
}

static uint32_t rate_threshold(double rate)
{
	double t = rate * 4294967296.0;

	if (t >= 4294967295.0)
		return UINT32_MAX;
	return t <= 0 ? 0 : (uint32_t)t;
}

static int open_perf_event(uint32_t hz, uint32_t cpu)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.size = sizeof(attr),
		.freq = 1,
		.sample_freq = hz,
	};
	int fd = (int)syscall(__NR_perf_event_open, &attr, -1, (int)cpu, -1, PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static void detach_cpu(struct sampler *s, uint32_t cpu)
{
	if (s->links[cpu]) {
		bpf_link__destroy(s->links[cpu]);
		s->links[cpu] = NULL;
	}
	if (s->perf_fds[cpu] >= 0) {
		close(s->perf_fds[cpu]);
		s->perf_fds[cpu] = -1;
	}
}

static int attach_cpu(struct sampler *s, uint32_t cpu)
{
	int fd = open_perf_event(s->opts.hz, cpu);

	if (fd < 0)
		return fd;
	s->links[cpu] = bpf_program__attach_perf_event(s->skel->progs.sysom_profile_tick, fd);
	if (!s->links[cpu]) {
		int err = -errno;
		close(fd);
		return err ? err : -EINVAL;
	}
	s->perf_fds[cpu] = fd;
	return 0;
}

int sampler_sync_cpus(struct sampler *s)
{
	uint64_t online[(4096 + 63) / 64];
	uint32_t nbits = s->ncpus < 4096 ? s->ncpus : 4096;
	int changed = 0, rc;

	if (s->paused)
		return 0;
	rc = host_online_cpus(NULL, online, nbits);
	if (rc < 0)
		return rc;
	for (uint32_t cpu = 0; cpu < nbits; cpu++) {
		bool is_online = online[cpu / 64] & (1ULL << (cpu % 64));
		bool attached = s->perf_fds[cpu] >= 0;

		if (is_online && !attached) {
			rc = attach_cpu(s, cpu);
			/* A CPU going offline between the read and the open is not an error. */
			if (rc < 0 && rc != -ENODEV && rc != -EINVAL)
				return rc;
			if (rc == 0)
				changed++;
		} else if (!is_online && attached) {
			detach_cpu(s, cpu);
			changed++;
		}
	}
	return changed;
}

int sampler_pause(struct sampler *s)
{
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
		detach_cpu(s, cpu);
	s->paused = true;
	return 0;
}

int sampler_resume(struct sampler *s)
{
	s->paused = false;
	int rc = sampler_sync_cpus(s);
	return rc < 0 ? rc : 0;
}

uint32_t sampler_attached_cpus(const struct sampler *s)
{
	uint32_t n = 0;

	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
		n += s->perf_fds[cpu] >= 0;
	return n;
}

static int handle_ring_event(void *ctx, void *data, size_t size)
{
	struct sampler *s = ctx;
	struct sysom_proc_event ev;

	if (size < sizeof(ev))
		return 0;
	memcpy(&ev, data, sizeof(ev));
	ev.comm[SYSOM_COMM_LEN - 1] = '\0';
	if (s->on_event)
		s->on_event(s->event_ctx, &ev);
	return 0;
}

int sampler_open(const struct sampler_options *opts, sampler_event_fn on_event, void *ctx,
		 struct sampler **out, char *err, size_t errlen)
{
	struct sampler *s;
	int rc, ncpus;

	if (opts->hz < 10 || opts->hz > 999 || !(opts->sample_rate > 0) || opts->sample_rate > 1 ||
	    opts->max_sample_keys < 64 || opts->max_stacks < 64 ||
	    opts->offcpu_mode > SYSOM_OFFCPU_ALL || opts->offcpu_min_ns < 1000 ||
	    opts->offcpu_budget_ns > 1000000000ULL || opts->max_offcpu_keys < 64 ||
	    opts->max_offcpu_threads < 64) {
		snprintf(err, errlen, "invalid sampler options (hz 10..999, rate (0,1], map sizes >= 64, "
			 "off-CPU minimum >= 1 us, unwind budget <= 1 s per s)");
		return -EINVAL;
	}
	ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0) {
		snprintf(err, errlen, "cannot determine the number of possible CPUs");
		return ncpus < 0 ? ncpus : -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = *opts;
	s->ncpus = (uint32_t)ncpus;
	s->on_event = on_event;
	s->event_ctx = ctx;
	s->perf_fds = malloc(s->ncpus * sizeof(*s->perf_fds));
	s->links = calloc(s->ncpus, sizeof(*s->links));
	s->cpu_values = calloc(s->ncpus, sizeof(*s->cpu_values));
	s->keys = calloc(DRAIN_BATCH, sizeof(*s->keys));
	s->values = calloc(DRAIN_BATCH, sizeof(*s->values));
	s->stack_keys = calloc(DRAIN_BATCH, sizeof(*s->stack_keys));
	s->stack_values = calloc(DRAIN_BATCH, sizeof(*s->stack_values));
	if (!s->perf_fds || !s->links || !s->cpu_values || !s->keys || !s->values ||
	    !s->stack_keys || !s->stack_values) {
		rc = -ENOMEM;
		goto cleanup;
	}
	s->open_keys = calloc(OFFCPU_OPEN_BATCH, sizeof(*s->open_keys));
	s->open_values = calloc(OFFCPU_OPEN_BATCH, sizeof(*s->open_values));
	if (!s->open_keys || !s->open_values) {
		rc = -ENOMEM;
		goto cleanup;
	}
	s->offcpu_keys = calloc(DRAIN_BATCH, sizeof(*s->offcpu_keys));
	s->offcpu_values = calloc(DRAIN_BATCH, sizeof(*s->offcpu_values));
	s->offcpu_cpu_values = calloc(s->ncpus, sizeof(*s->offcpu_cpu_values));
	if (!s->offcpu_keys || !s->offcpu_values || !s->offcpu_cpu_values) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
		s->perf_fds[cpu] = -1;

	s->skel = profile_bpf__open();
	if (!s->skel) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the BPF object: %s", strerror(-rc));
		goto cleanup;
	}
	s->skel->rodata->include_idle = opts->include_idle;
	s->skel->rodata->collect_user = opts->collect_user;
	s->skel->rodata->unwinder = opts->unwinder;
	s->skel->data->sample_threshold = rate_threshold(opts->sample_rate);
	s->skel->bss->sample_all = opts->sample_rate >= 1.0;
	s->skel->bss->active_buffer = 0;
	struct bpf_map *counts[] = { s->skel->maps.counts_0, s->skel->maps.counts_1 };
	struct bpf_map *stacks[] = { s->skel->maps.stacks_0, s->skel->maps.stacks_1 };
	for (int i = 0; i < SYSOM_PROFILE_BUFFERS; i++) {
		if ((rc = bpf_map__set_max_entries(counts[i], opts->max_sample_keys)) ||
		    (rc = bpf_map__set_max_entries(stacks[i], opts->max_stacks))) {
			snprintf(err, errlen, "cannot size the BPF maps: %s", strerror(-rc));
			goto cleanup;
		}
	}
	s->skel->rodata->offcpu_mode = opts->offcpu_mode;
	s->skel->data->offcpu_min_ns = opts->offcpu_min_ns;
	s->skel->data->offcpu_budget_ns = opts->offcpu_budget_ns;
	struct bpf_map *offcpu_counts[] = { s->skel->maps.offcpu_counts_0,
					    s->skel->maps.offcpu_counts_1 };
	for (int i = 0; i < SYSOM_PROFILE_BUFFERS; i++) {
		if ((rc = bpf_map__set_max_entries(offcpu_counts[i], opts->max_offcpu_keys))) {
			snprintf(err, errlen, "cannot size the BPF maps: %s", strerror(-rc));
			goto cleanup;
		}
	}
	if ((rc = bpf_map__set_max_entries(s->skel->maps.offcpu_start, opts->max_offcpu_threads))) {
		snprintf(err, errlen, "cannot size the BPF maps: %s", strerror(-rc));
		goto cleanup;
	}
	/* Blocks in progress are read from user space in JOBS mode only: in ALL mode the map
	 * holds every thread of the machine (a read of all of it at each drain). */
	s->offcpu_open_on = opts->offcpu_mode == SYSOM_OFFCPU_JOBS && opts->offcpu_open &&
			    bpf_map__value_size(s->skel->maps.offcpu_start) ==
				    sizeof(struct offcpu_open);
	if (opts->offcpu_mode == SYSOM_OFFCPU_JOBS && opts->offcpu_tracked_fd >= 0 &&
	    (rc = bpf_map__reuse_fd(s->skel->maps.offcpu_tracked, opts->offcpu_tracked_fd))) {
		snprintf(err, errlen, "cannot share the tracked-process map: %s", strerror(-rc));
		goto cleanup;
	}
	/* Off: the switch program is not loaded. Its unwind program is (unused): the program
	 * array's initial slot names it, and libbpf refuses an unloaded one there. */
	if (opts->offcpu_mode == SYSOM_OFFCPU_OFF) {
		bpf_program__set_autoload(s->skel->progs.sysom_offcpu_switch, false);
		bpf_program__set_autoload(s->skel->progs.sysom_offcpu_exit, false);
	}
	rc = profile_bpf__load(s->skel);
	if (rc) {
		rc = rc < 0 ? rc : -errno;
		snprintf(err, errlen,
			 "cannot load the BPF programs: %s (needs root or CAP_BPF+CAP_PERFMON, a kernel "
			 "with BTF; run with SYSOM_LIBBPF_DEBUG=1 for the verifier log)",
			 strerror(-rc));
		goto cleanup;
	}
	s->skel->links.sysom_process_fork = bpf_program__attach(s->skel->progs.sysom_process_fork);
	s->skel->links.sysom_process_exec = bpf_program__attach(s->skel->progs.sysom_process_exec);
	s->skel->links.sysom_process_exit = bpf_program__attach(s->skel->progs.sysom_process_exit);
	if (!s->skel->links.sysom_process_fork || !s->skel->links.sysom_process_exec ||
	    !s->skel->links.sysom_process_exit) {
		rc = -errno;
		snprintf(err, errlen, "cannot attach the fork/exec/exit tracepoints: %s", strerror(-rc));
		goto cleanup;
	}
	if (opts->offcpu_mode != SYSOM_OFFCPU_OFF &&
	    !(s->skel->links.sysom_offcpu_exit =
		      bpf_program__attach(s->skel->progs.sysom_offcpu_exit))) {
		rc = -errno;
		snprintf(err, errlen, "cannot attach the off-CPU exit tracepoint: %s", strerror(-rc));
		goto cleanup;
	}
	if (opts->offcpu_mode != SYSOM_OFFCPU_OFF && (rc = sampler_offcpu_enable(s, true))) {
		snprintf(err, errlen, "cannot attach the off-CPU sched_switch program: %s",
			 strerror(-rc));
		goto cleanup;
	}
	s->events = ring_buffer__new(bpf_map__fd(s->skel->maps.proc_events), handle_ring_event, s,
				     NULL);
	if (!s->events) {
		rc = -errno;
		snprintf(err, errlen, "cannot set up the process event ring buffer: %s", strerror(-rc));
		goto cleanup;
	}
	rc = sampler_sync_cpus(s);
	if (rc < 0) {
		snprintf(err, errlen, "cannot open cpu-clock perf events: %s (perf_event_paranoid, "
			 "CAP_PERFMON)", strerror(-rc));
		goto cleanup;
	}
	if (sampler_attached_cpus(s) == 0) {
		rc = -ENODEV;
		snprintf(err, errlen, "no online CPU could be attached");
		goto cleanup;
	}
	rc = hash_index_init(&s->stack_index, 1024);
	if (rc)
		goto cleanup;
	*out = s;
	return 0;
cleanup:
	sampler_close(s);
	return rc;
}

void sampler_close(struct sampler *s)
{
	if (!s)
		return;
	if (s->perf_fds)
		for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
			detach_cpu(s, cpu);
	ring_buffer__free(s->events);
	bpf_link__destroy(s->offcpu_link);
	profile_bpf__destroy(s->skel);
	hash_index_free(&s->stack_index);
	free(s->perf_fds);
	free(s->links);
	free(s->cpu_values);
	free(s->keys);
	free(s->values);
	free(s->stack_keys);
	free(s->stack_values);
	free(s->stacks);
	free(s->offcpu_keys);
	free(s->open_keys);
	free(s->open_values);
	free(s->offcpu_values);
	free(s->offcpu_cpu_values);
	free(s);
}

int sampler_event_fd(const struct sampler *s)
{
	return ring_buffer__epoll_fd(s->events);
}

int sampler_poll_events(struct sampler *s)
{
	return ring_buffer__consume(s->events);
}

static int read_cpu_state(struct sampler *s)
{
	__u32 zero = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.cpu_state), &zero, s->cpu_values))
		return -errno;
	return 0;
}

int sampler_counters_read(struct sampler *s, struct sampler_counters *out)
{
	struct sampler_counters c = { 0 };
	int rc = read_cpu_state(s);

	if (rc)
		return rc;
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++) {
		const struct sysom_cpu_state *v = &s->cpu_values[cpu];
		c.ticks += v->ticks;
		c.gated_out += v->gated_out;
		c.idle_skipped += v->idle_skipped;
		c.samples += v->samples;
		c.kstack_errors += v->kstack_errors;
		c.ustack_errors += v->ustack_errors;
		c.count_map_full += v->count_map_full;
		c.stack_map_full += v->stack_map_full;
		c.events_lost += v->events_lost;
		const uint64_t *from = (const uint64_t *)&v->unwind;
		uint64_t *to = (uint64_t *)&c.unwind;
		for (size_t i = 0; i < sizeof(c.unwind) / sizeof(uint64_t); i++)
			to[i] += from[i];
		from = (const uint64_t *)&v->py;
		to = (uint64_t *)&c.py;
		for (size_t i = 0; i < sizeof(c.py) / sizeof(uint64_t); i++)
			to[i] += from[i];
	}
	*out = c;
	return 0;
}

/*
 * After the buffer switch, a program that read the old index may still be running on some
 * CPU: its `inflight` value is odd. Wait until each such CPU's value changes (the program
 * finished; later ones read the new index, because the switch happened-before their locked
 * increment — see profile.bpf.c).
 */
static int wait_quiescent(struct sampler *s, uint64_t *waited_ns)
{
	uint64_t *pending = NULL;
	uint64_t start = sysom_monotonic_ns();
	int rc;

	*waited_ns = 0;
	if ((rc = read_cpu_state(s)))
		return rc;
	pending = calloc(s->ncpus, sizeof(*pending));
	if (!pending)
		return -ENOMEM;
	bool any = false;
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++) {
		pending[cpu] = s->cpu_values[cpu].inflight;
		any |= pending[cpu] & 1;
	}
	while (any) {
		struct timespec pause = { 0, 20000 };

		if (sysom_monotonic_ns() - start > QUIESCE_TIMEOUT_NS) {
			rc = -ETIMEDOUT;
			goto cleanup;
		}
		nanosleep(&pause, NULL);
		if ((rc = read_cpu_state(s)))
			goto cleanup;
		any = false;
		for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
			if ((pending[cpu] & 1) && s->cpu_values[cpu].inflight == pending[cpu])
				any = true;
	}
	*waited_ns = sysom_monotonic_ns() - start;
cleanup:
	free(pending);
	return rc;
}

/* Reads (and empties) the old stack store into s->stacks, indexed by hash. */
static int collect_stacks(struct sampler *s, int fd, struct sampler_drain_stats *stats)
{
	__u64 batch_token = 0;
	bool first = true;
	uint32_t n = 0;

	hash_index_clear(&s->stack_index);
	for (;;) {
		__u32 count = DRAIN_BATCH;
		int rc = bpf_map_lookup_and_delete_batch(fd, first ? NULL : &batch_token, &batch_token,
							 s->stack_keys, s->stack_values, &count, NULL);
		int saved = errno;
		first = false;
		if (rc && saved != ENOENT)
			return -saved;
		if (n + count > s->stacks_cap) {
			uint32_t cap = s->stacks_cap ? s->stacks_cap : 256;
			while (cap < n + count)
				cap *= 2;
			struct sysom_stack_trace *grown = realloc(s->stacks, cap * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			s->stacks = grown;
			s->stacks_cap = cap;
		}
		for (__u32 i = 0; i < count; i++) {
			s->stacks[n] = s->stack_values[i];
			if (s->stacks[n].nframes > SYSOM_PROFILE_MAX_DEPTH)
				s->stacks[n].nframes = SYSOM_PROFILE_MAX_DEPTH;
			s->stacks[n].stop_reason =
				sampler_stop_reason_to_wire(s->stacks[n].stop_reason);
			int err = hash_index_insert(&s->stack_index, s->stack_keys[i], n);
			if (err)
				return err;
			n++;
		}
		if (rc) /* ENOENT: that was the last batch */
			break;
	}
	stats->stacks = n;
	return 0;
}

static const struct sysom_stack_trace *find_stack(struct sampler *s, uint64_t hash, bool *lost,
						  struct sampler_drain_stats *stats)
{
	*lost = false;
	if (!hash)
		return NULL;
	uint32_t idx = hash_index_find(&s->stack_index, hash, NULL, NULL);
	if (idx == HASH_INDEX_NONE) {
		*lost = true;
		stats->stacks_missing++;
		return NULL;
	}
	return &s->stacks[idx];
}

/* Delivers (and empties) the off-CPU counts of buffer `old`; the stacks were collected. */
static int drain_offcpu(struct sampler *s, uint32_t old, struct sampler_drain_stats *st)
{
	int fd = bpf_map__fd(old ? s->skel->maps.offcpu_counts_1 : s->skel->maps.offcpu_counts_0);
	__u64 batch_token = 0;
	bool first = true;
	int rc = 0;

	for (;;) {
		__u32 count = DRAIN_BATCH;
		int err = bpf_map_lookup_and_delete_batch(fd, first ? NULL : &batch_token,
							  &batch_token, s->offcpu_keys,
							  s->offcpu_values, &count, NULL);
		int saved = errno;
		first = false;
		if (err && saved != ENOENT)
			return -saved;
		for (__u32 i = 0; i < count; i++) {
			struct sysom_offcpu_value *v = &s->offcpu_values[i];
			struct sampler_offcpu_entry e = {
				.key = &s->offcpu_keys[i],
				.count = v->count,
				.total_ns = v->total_ns,
				.max_ns = v->max_ns,
				.comm = v->comm,
			};
			v->comm[SYSOM_COMM_LEN - 1] = '\0';
			e.kernel = find_stack(s, e.key->kernel_stack, &e.kernel_lost, st);
			e.user = find_stack(s, e.key->user_stack, &e.user_lost, st);
			st->offcpu_entries++;
			st->offcpu_blocks += e.count;
			if (s->offcpu_fn) {
				int cb = s->offcpu_fn(s->offcpu_ctx, &e);
				if (cb < 0 && rc == 0)
					rc = cb;
			}
		}
		if (err)
			break;
	}
	return rc;
}

/* The BPF program's stack hash (stack_hash in bpf/profile.bpf.c), so that a stack of a block
 * in progress is the same stack as that of a finished block in the batch. */
static uint64_t offcpu_stack_hash(const struct sysom_stack_trace *st)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ ((uint64_t)st->side << 40) ^
		     ((uint64_t)st->stop_reason << 48) ^ st->nframes;

	for (int i = 0; i < SYSOM_PROFILE_MAX_DEPTH && i < st->nframes; i++) {
		h ^= st->ips[i];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/*
 * Blocks still in progress, blocked at least OFFCPU_OPEN_MIN_NS: each is delivered as one
 * block of its time so far, and its start moves to now, so that its switch-in adds only the
 * rest (a rest under the minimum block is then not counted). Without this a thread blocked
 * for good (stopped, a read that never returns, a deadlock) would never show where it waits.
 * The start is moved only if the thread is still in the same block (same start); a thread
 * that wakes and blocks again between the read and the write-back can lose that one new
 * block's stacks to the old ones (a window of microseconds).
 */
static int drain_offcpu_open(struct sampler *s, struct sampler_drain_stats *st)
{
	int fd = bpf_map__fd(s->skel->maps.offcpu_start);
	__u64 batch_token = 0;
	bool first = true;
	int rc = 0;

	for (;;) {
		__u32 count = OFFCPU_OPEN_BATCH;
		int err = bpf_map_lookup_batch(fd, first ? NULL : &batch_token, &batch_token,
					       s->open_keys, s->open_values, &count, NULL);
		int saved = errno;
		uint64_t now = sysom_monotonic_ns();
		first = false;
		if (err && saved != ENOENT)
			return -saved;
		for (__u32 i = 0; i < count; i++) {
			struct offcpu_open *b = &s->open_values[i];
			struct sysom_offcpu_key key;
			struct offcpu_open cur;
			uint64_t ns;
			if (!b->start_ns || now < b->start_ns + OFFCPU_OPEN_MIN_NS)
				continue;
			ns = now - b->start_ns;
			if (!b->kernel.nframes && !b->user.nframes) { /* as the switch-in does */
				b->user.nframes = 1;
				b->user.side = SYSOM_SIDE_USER;
				b->user.stop_reason = UNWIND_STOP_READ_FAULT;
				b->user.ips[0] = 0;
			}
			key = (struct sysom_offcpu_key){
				.tgid = b->tgid, .tid = s->open_keys[i], .generation = b->generation,
				.state = b->state,
				.kernel_stack = b->kernel.nframes ? offcpu_stack_hash(&b->kernel) : 0,
				.user_stack = b->user.nframes ? offcpu_stack_hash(&b->user) : 0 };
			/* Move the start first: a block that ended meanwhile is not delivered. */
			if (bpf_map_lookup_elem(fd, &s->open_keys[i], &cur) ||
			    cur.start_ns != b->start_ns)
				continue;
			cur.start_ns = now;
			if (bpf_map_update_elem(fd, &s->open_keys[i], &cur, BPF_EXIST))
				continue;
			b->comm[SYSOM_COMM_LEN - 1] = '\0';
			b->kernel.stop_reason = sampler_stop_reason_to_wire(b->kernel.stop_reason);
			b->user.stop_reason = sampler_stop_reason_to_wire(b->user.stop_reason);
			struct sampler_offcpu_entry e = {
				.key = &key, .count = 1, .total_ns = ns, .max_ns = ns, .comm = b->comm,
				.kernel = b->kernel.nframes ? &b->kernel : NULL,
				.user = b->user.nframes ? &b->user : NULL,
			};
			st->offcpu_entries++;
			st->offcpu_blocks++;
			st->offcpu_open++;
			if (s->offcpu_fn) {
				int cb = s->offcpu_fn(s->offcpu_ctx, &e);
				if (cb < 0 && rc == 0)
					rc = cb;
			}
		}
		if (err)
			break;
	}
	return rc;
}

int sampler_drain(struct sampler *s, sampler_drain_fn fn, void *ctx,
		  struct sampler_drain_stats *stats)
{
	struct sampler_drain_stats st = { 0 };
	uint32_t old = s->skel->bss->active_buffer & 1;
	int counts_fd = bpf_map__fd(old ? s->skel->maps.counts_1 : s->skel->maps.counts_0);
	int stacks_fd = bpf_map__fd(old ? s->skel->maps.stacks_1 : s->skel->maps.stacks_0);
	__u64 batch_token = 0;
	bool first = true;
	int rc;

	/* The seq_cst store is a full barrier: it is visible before we read `inflight`. */
	__atomic_store_n(&s->skel->bss->active_buffer, old ^ 1, __ATOMIC_SEQ_CST);
	rc = wait_quiescent(s, &st.quiesce_wait_ns);
	if (rc)
		goto cleanup;
	rc = collect_stacks(s, stacks_fd, &st);
	if (rc)
		goto cleanup;
	for (;;) {
		__u32 count = DRAIN_BATCH;
		int err = bpf_map_lookup_and_delete_batch(counts_fd, first ? NULL : &batch_token,
							  &batch_token, s->keys, s->values, &count,
							  NULL);
		int saved = errno;
		first = false;
		if (err && saved != ENOENT) {
			rc = -saved;
			goto cleanup;
		}
		for (__u32 i = 0; i < count; i++) {
			struct sampler_entry e = {
				.key = &s->keys[i],
				.count = s->values[i].count,
				.comm = s->values[i].comm,
			};
			s->values[i].comm[SYSOM_COMM_LEN - 1] = '\0';
			e.kernel = find_stack(s, s->keys[i].kernel_stack, &e.kernel_lost, &st);
			e.user = find_stack(s, s->keys[i].user_stack, &e.user_lost, &st);
			st.entries++;
			st.samples += e.count;
			/* A callback error loses nothing already delivered; the rest of this batch
			 * was deleted from the map, so keep delivering and report the first error. */
			int cb = fn ? fn(ctx, &e) : 0;
			if (cb < 0 && rc == 0)
				rc = cb;
		}
		if (err)
			break;
	}
	if (s->opts.offcpu_mode != SYSOM_OFFCPU_OFF) {
		int orc = drain_offcpu(s, old, &st);
		if (orc < 0 && rc == 0)
			rc = orc;
		if (s->offcpu_open_on && (orc = drain_offcpu_open(s, &st)) < 0 && rc == 0)
			rc = orc;
	}
cleanup:
	if (stats)
		*stats = st;
	return rc;
}

int sampler_set_rate(struct sampler *s, double sample_rate)
{
	if (!(sample_rate > 0) || sample_rate > 1)
		return -EINVAL;
	__atomic_store_n(&s->skel->data->sample_threshold, rate_threshold(sample_rate),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&s->skel->bss->sample_all, sample_rate >= 1.0, __ATOMIC_RELAXED);
	s->opts.sample_rate = sample_rate;
	return 0;
}

int sampler_set_hz(struct sampler *s, uint32_t hz)
{
	if (hz < 10 || hz > 999)
		return -EINVAL;
	if (hz == s->opts.hz)
		return 0;
	s->opts.hz = hz;
	if (s->paused)
		return 0;
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++)
		detach_cpu(s, cpu);
	int rc = sampler_sync_cpus(s);
	return rc < 0 ? rc : 0;
}

void sampler_unwind_maps(const struct sampler *s, struct sampler_unwind_maps *out)
{
	out->tables = bpf_map__fd(s->skel->maps.unwind_tables);
	out->procs = bpf_map__fd(s->skel->maps.unwind_procs);
	out->markers = bpf_map__fd(s->skel->maps.unwind_markers);
	out->py_procs = bpf_map__fd(s->skel->maps.py_procs);
	out->table_template_flags = BPF_F_INNER_MAP | BPF_F_MMAPABLE;
}

int sampler_exec_generation_fd(const struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.exec_generation);
}

int sampler_prog_stats(const struct sampler *s, uint64_t *run_time_ns, uint64_t *run_count)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(bpf_program__fd(s->skel->progs.sysom_profile_tick), &info, &len))
		return -errno;
	*run_time_ns = info.run_time_ns;
	*run_count = info.run_cnt;
	return 0;
}

void sampler_set_offcpu_sink(struct sampler *s, sampler_offcpu_fn fn, void *ctx)
{
	s->offcpu_fn = fn;
	s->offcpu_ctx = ctx;
}

bool sampler_offcpu_loaded(const struct sampler *s)
{
	return s->opts.offcpu_mode != SYSOM_OFFCPU_OFF;
}

int sampler_offcpu_enable(struct sampler *s, bool on)
{
	if (s->opts.offcpu_mode == SYSOM_OFFCPU_OFF)
		return -ENOTSUP;
	if (!on) {
		bpf_link__destroy(s->offcpu_link);
		s->offcpu_link = NULL;
		return 0;
	}
	if (s->offcpu_link)
		return 0;
	s->offcpu_link = bpf_program__attach_raw_tracepoint(s->skel->progs.sysom_offcpu_switch,
							    "sched_switch");
	if (!s->offcpu_link) {
		int rc = -errno;
		return rc ? rc : -EINVAL;
	}
	return 0;
}

int sampler_offcpu_track(struct sampler *s, uint32_t tgid, bool on)
{
	int fd = bpf_map__fd(s->skel->maps.offcpu_tracked);
	__u32 one = 1;

	if (on)
		return bpf_map_update_elem(fd, &tgid, &one, BPF_ANY) ? -errno : 0;
	if (bpf_map_delete_elem(fd, &tgid) && errno != ENOENT)
		return -errno;
	return 0;
}

int sampler_set_offcpu_min_ns(struct sampler *s, uint64_t min_ns)
{
	if (min_ns < 1000)
		return -EINVAL;
	__atomic_store_n(&s->skel->data->offcpu_min_ns, min_ns, __ATOMIC_RELAXED);
	s->opts.offcpu_min_ns = min_ns;
	return 0;
}

int sampler_set_offcpu_budget_ns(struct sampler *s, uint64_t budget_ns)
{
	if (budget_ns > 1000000000ULL)
		return -EINVAL;
	__atomic_store_n(&s->skel->data->offcpu_budget_ns, budget_ns, __ATOMIC_RELAXED);
	s->opts.offcpu_budget_ns = budget_ns;
	return 0;
}

int sampler_offcpu_counters(struct sampler *s, struct sysom_offcpu_cpu *out)
{
	struct sysom_offcpu_cpu sum = { 0 };
	__u32 zero = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.offcpu_cpu), &zero,
				s->offcpu_cpu_values))
		return -errno;
	for (uint32_t cpu = 0; cpu < s->ncpus; cpu++) {
		const uint64_t *from = (const uint64_t *)&s->offcpu_cpu_values[cpu];
		uint64_t *to = (uint64_t *)&sum;
		for (size_t i = 0; i < sizeof(sum) / sizeof(uint64_t); i++)
			to[i] += from[i];
	}
	*out = sum;
	return 0;
}

int sampler_offcpu_prog_stats(const struct sampler *s, uint64_t *run_time_ns, uint64_t *run_count)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);

	if (s->opts.offcpu_mode == SYSOM_OFFCPU_OFF)
		return -ENOTSUP;
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(bpf_program__fd(s->skel->progs.sysom_offcpu_switch), &info,
				   &len))
		return -errno;
	*run_time_ns = info.run_time_ns;
	*run_count = info.run_cnt;
	return 0;
}
