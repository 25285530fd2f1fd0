/* SPDX-License-Identifier: Apache-2.0 */
/*
 * OS signals: loads bpf/ossignals.bpf.c, keeps the tracked-process set, and turns the kernel's
 * cumulative counts into per-window rows.
 *
 * Why cumulative counts and differences (and not read-and-reset): a BPF program updates a
 * value in place through the pointer its lookup returned, without a lock. Zeroing or deleting
 * a value from user space while a program holds that pointer loses the program's increment
 * (or, for a deleted hash element that is reused at once, puts it into another key). So BPF
 * only ever adds, and each collect subtracts what the previous collect read: an increment
 * that lands after a read is simply in the next window's difference, never lost and never
 * counted twice. Two things need more than that:
 *   - Time is charged when a task is switched out, so a thread that runs for a whole window
 *     without switching (a busy-polling NCCL proxy alone on its CPU) would show nothing, then
 *     everything at once. Before reading, the agent runs a small program (os_flush) on every
 *     CPU through BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU (an IPI): it charges the running
 *     task up to now. The scheduler cannot run on that CPU meanwhile, so nothing is charged
 *     twice.
 *   - The CPUs a thread ran on form a set, not a sum. BPF keeps two masks per thread, one per
 *     window parity, and clears a slot lazily when it first writes it for a new window number;
 *     the agent advances the window number before the flush (which marks the running threads
 *     in the new window), then reads the closed window's slot.
 * Thread entries are deleted by the agent only, one collect after the thread exited (or its
 * process stopped being tracked): the last read is complete by then and no program touches
 * the entry any more. A torn read (a value copied while a program on another CPU updates it)
 * can show one field ahead of another; the rules the wire checks (a histogram never holds
 * more waits than counted, time never without a count) are kept by holding back the part that
 * is ahead until the next window.
 */
#include "agent/os/ossignals.h"
#include "agent/node/procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "agent/node/host.h"
#include "agent/ranks/jobenv.h"
#include "bpf/ossignals.h"
#include "common/clock.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/report.h"
#include "ossignals.skel.h"

/* bpf/ossignals.h keeps BPF-side copies of these wire constants (common/wire/wire.h). */
_Static_assert(OS_SOFTIRQS == SYSOM_SOFTIRQ_COUNT, "softirq vectors: BPF and wire");
_Static_assert(OS_CPU_MASK_WORDS == SYSOM_CPU_MASK_WORDS, "CPU mask words: BPF and wire");

#define MAX_PENDING 4096          /* processes waiting for their environment to be read */
#define MAX_DECIDED 65536         /* incarnations whose job identity was looked at */
#define MAX_IRQ_NAME 128          /* bytes of a handler name kept */
#define MAX_IRQ_NUMBER 65536      /* IRQs above this are counted but not named */
#define IRQ_NAME_TTL_NS (60ull * 1000000000ull) /* names are re-read after a minute */
#define IDLE_CHECK_WINDOWS 12     /* an unchanged thread is checked for existence this often */

/* Track sources (values of the tracked table). */
#define SRC_ENV 0x1     /* its environment names a training job */
#define SRC_EXPLICIT 0x2 /* ossignals_track (registration, tests) */

/* Open addressing from a non-zero u32 key to a u32 value, linear probing with backward-shift
 * deletion (no tombstones, so a busy process table never degrades). */
struct u32_map {
	uint32_t *keys; /* 0: empty */
	uint32_t *vals;
	uint32_t cap;   /* power of two */
	uint32_t count;
	uint32_t max;   /* entries allowed */
};

static uint32_t u32_slot(const struct u32_map *m, uint32_t key)
{
	return (uint32_t)sysom_hash_mix(0x05150515, key) & (m->cap - 1);
}

static uint32_t *u32_map_find(const struct u32_map *m, uint32_t key)
{
	if (!m->cap || !key)
		return NULL;
	for (uint32_t i = u32_slot(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key)
			return &m->vals[i];
		if (m->keys[i] == 0)
			return NULL;
	}
}

static int u32_map_grow(struct u32_map *m)
{
	uint32_t cap = m->cap ? m->cap * 2 : 64;
	uint32_t *keys = calloc(cap, sizeof(*keys)), *vals = calloc(cap, sizeof(*vals));

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		uint32_t j = (uint32_t)sysom_hash_mix(0x05150515, m->keys[i]) & (cap - 1);
		while (keys[j])
			j = (j + 1) & (cap - 1);
		keys[j] = m->keys[i];
		vals[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

static int u32_map_put(struct u32_map *m, uint32_t key, uint32_t val)
{
	uint32_t *v = u32_map_find(m, key);
	int rc;

	if (!key)
		return -EINVAL;
	if (v) {
		*v = val;
		return 0;
	}
	if (m->count >= m->max)
		return -ENOSPC;
	if ((m->count + 1) * 4 > m->cap * 3 && (rc = u32_map_grow(m)))
		return rc;
	uint32_t i = u32_slot(m, key);
	while (m->keys[i])
		i = (i + 1) & (m->cap - 1);
	m->keys[i] = key;
	m->vals[i] = val;
	m->count++;
	return 0;
}

static void u32_map_del(struct u32_map *m, uint32_t key)
{
	uint32_t i, j;

	if (!m->cap || !key)
		return;
	for (i = u32_slot(m, key); m->keys[i] != key; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == 0)
			return;
	/* Backward shift: move later entries of the run into the hole when their home allows. */
	for (j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
		uint32_t home = u32_slot(m, m->keys[j]);
		bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
		if (movable) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			i = j;
		}
	}
	m->keys[i] = 0;
	m->vals[i] = 0;
	m->count--;
}

static void u32_map_free(struct u32_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* What the previous collect accounted for, per thread / per (CPU, IRQ). */
struct thread_rec {
	struct os_thread_key key;
	struct os_thread prev;
	bool retiring;     /* exited or untracked at the previous collect: removed at this one */
	uint16_t idle;     /* collects in a row without a change */
};

struct irq_rec {
	struct os_irq_key key;
	struct os_irq_value prev;
};

struct irq_name {
	char *name;
	uint64_t read_ns;
};

struct prog_entry {
	struct bpf_program *prog;
	const char *tracepoint; /* "group:name" */
	struct bpf_link *link;
};

#define NPROGS 8

struct ossignals {
	struct ossignals_options opts;
	struct ossignals_bpf *skel;
	struct prog_entry progs[NPROGS];
	uint32_t attached, attach_errors;
	char failed[256];
	int ncpus;                  /* possible CPUs */
	struct os_cpu *cpu_now, *cpu_prev;
	int32_t *node;              /* per possible CPU, -1 unknown */
	uint32_t numa_nodes;
	uint32_t window;            /* the window being collected into */
	uint64_t last_collect_ns;

	/* Threads: the previous collect's view (rebuilt at each collect) and read buffers. */
	struct thread_rec *recs, *recs_next;
	uint32_t nrecs;
	struct hash_index rec_index, rec_index_next;
	struct os_thread_key *tkeys;
	struct os_thread *tvals;
	uint32_t max_threads;
	uint32_t last_thread_count;

	struct irq_rec *irq_recs, *irq_recs_next;
	uint32_t nirq_recs;
	struct hash_index irq_index, irq_index_next;
	struct os_irq_key *ikeys;
	struct os_irq_value *ivals;
	struct irq_name *irq_names;  /* indexed by IRQ number, grown on demand */
	uint32_t irq_names_cap;

	struct u32_map tracked;      /* tgid → SRC_* (mirror of the BPF map) */
	struct u32_map decided;      /* tgid → generation whose environment was read (or queued) */
	uint32_t pending[MAX_PENDING];
	uint32_t npending;
	uint32_t sweep_slot;         /* where the sweep of `decided` goes on */
	uint32_t epoch;
};

void ossignals_options_default(struct ossignals_options *o)
{
	*o = (struct ossignals_options){
		.proc_root = "/proc",
		.sys_root = "/sys",
		.track_all = false,
		.max_threads = OS_MAX_THREADS,
	};
}

/* ---- NUMA topology ------------------------------------------------------------------------- */

/* Parses a cpulist ("0-3,8,10-11") and sets node[cpu] for the CPUs below `ncpus`. */
static void apply_cpulist(const char *list, int32_t node_id, int32_t *node, int ncpus)
{
	const char *p = list;

	while (*p) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b;

		if (end == p)
			return;
		b = a;
		p = end;
		if (*p == '-') {
			b = strtoul(p + 1, &end, 10);
			if (end == p + 1 || b < a)
				return;
			p = end;
		}
		for (unsigned long c = a; c <= b && c < (unsigned long)ncpus; c++)
			node[c] = node_id;
		if (*p != ',')
			return;
		p++;
	}
}

static uint32_t read_numa(const char *sys_root, int32_t *node, int ncpus)
{
	char pattern[512];
	glob_t g;
	uint32_t nodes = 0;

	for (int c = 0; c < ncpus; c++)
		node[c] = -1;
	snprintf(pattern, sizeof(pattern), "%s/devices/system/node/node[0-9]*/cpulist", sys_root);
	if (glob(pattern, 0, NULL, &g) != 0)
		return 0;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		const char *name = strstr(g.gl_pathv[i], "/node/node");
		char text[4096];
		long id;

		if (!name)
			continue;
		id = strtol(name + strlen("/node/node"), NULL, 10);
		if (id < 0 || id > 65535 || host_read_text(g.gl_pathv[i], text, sizeof(text)) < 0)
			continue;
		text[strcspn(text, "\n")] = '\0';
		apply_cpulist(text, (int32_t)id, node, ncpus);
		nodes++;
	}
	globfree(&g);
	return nodes;
}

int32_t ossignals_cpu_node(const struct ossignals *os, uint32_t cpu)
{
	return cpu < (uint32_t)os->ncpus ? os->node[cpu] : -1;
}

/* ---- IRQ names ------------------------------------------------------------------------------ */

const char *ossignals_irq_name(struct ossignals *os, uint32_t irq)
{
	uint64_t now = sysom_monotonic_ns();
	char path[512], raw[512];
	struct irq_name *n;

	if (irq >= MAX_IRQ_NUMBER)
		return "";
	if (irq >= os->irq_names_cap) {
		uint32_t cap = os->irq_names_cap ? os->irq_names_cap : 256;
		while (cap <= irq)
			cap *= 2;
		struct irq_name *grown = realloc(os->irq_names, cap * sizeof(*grown));
		if (!grown)
			return "";
		memset(grown + os->irq_names_cap, 0, (cap - os->irq_names_cap) * sizeof(*grown));
		os->irq_names = grown;
		os->irq_names_cap = cap;
	}
	n = &os->irq_names[irq];
	if (n->name && now - n->read_ns < IRQ_NAME_TTL_NS)
		return n->name;
	/* Drivers may be reloaded and their vectors renamed: re-read now and then. */
	snprintf(path, sizeof(path), "%s/kernel/irq/%u/actions", os->opts.sys_root, irq);
	int len = host_read_text(path, raw, sizeof(raw));
	char *name = malloc(MAX_IRQ_NAME);
	if (!name)
		return n->name ? n->name : "";
	if (len < 0)
		len = 0;
	while (len > 0 && (raw[len - 1] == '\n' || raw[len - 1] == ' '))
		len--;
	sysom_text_sanitize(name, MAX_IRQ_NAME, raw, (size_t)len);
	free(n->name);
	n->name = name;
	n->read_ns = now;
	return name;
}

/* ---- open / close ---------------------------------------------------------------------------- */

static void add_failed(struct ossignals *os, const char *tp)
{
	size_t len = strlen(os->failed);

	snprintf(os->failed + len, sizeof(os->failed) - len, "%s%s", len ? "," : "", tp);
}

/*
 * A BTF tracepoint program names its tracepoint at load time, and one missing tracepoint (e.g.
 * mm_migrate_pages without CONFIG_MIGRATION) would fail the whole object: leave such programs
 * out of the load, and count and report them like a failed attach.
 */
static void skip_missing_tracepoints(struct ossignals *os)
{
	struct btf *vmlinux = btf__load_vmlinux_btf();

	if (!vmlinux)
		return; /* the load reports it */
	for (int i = 0; i < NPROGS; i++) {
		struct prog_entry *p = &os->progs[i];
		const char *name = strchr(p->tracepoint, ':');
		char type[128];

		snprintf(type, sizeof(type), "btf_trace_%s", name ? name + 1 : p->tracepoint);
		if (btf__find_by_name_kind(vmlinux, type, BTF_KIND_TYPEDEF) >= 0)
			continue;
		bpf_program__set_autoload(p->prog, false);
		os->attach_errors++;
		add_failed(os, p->tracepoint);
		sysom_report(&os->opts.report, SYSOM_REPORT_WARN,
			     "os-signals: this kernel has no %s tracepoint (its signals are missing)",
			     p->tracepoint);
	}
	btf__free(vmlinux);
}

static int flush_cpus(struct ossignals *os)
{
	int fd = bpf_program__fd(os->skel->progs.os_flush);
	int ran = 0;

	for (int c = 0; c < os->ncpus; c++) {
		LIBBPF_OPTS(bpf_test_run_opts, o, .flags = BPF_F_TEST_RUN_ON_CPU, .cpu = (__u32)c);
		if (bpf_prog_test_run_opts(fd, &o) == 0)
			ran++; /* an offline CPU refuses (-ENXIO): nothing runs there to charge */
	}
	return ran ? 0 : -EIO;
}

static int read_cpus(struct ossignals *os, struct os_cpu *into)
{
	uint32_t zero = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(os->skel->maps.cpus), &zero, into))
		return -errno;
	return 0;
}

int ossignals_open(const struct ossignals_options *o, struct ossignals **out, char *err,
		   size_t errlen)
{
	struct ossignals *os = calloc(1, sizeof(*os));
	int rc;

	if (!os)
		return -ENOMEM;
	os->opts = *o;
	if (!os->opts.proc_root)
		os->opts.proc_root = "/proc";
	if (!os->opts.sys_root)
		os->opts.sys_root = "/sys";
	os->max_threads = o->max_threads ? o->max_threads : OS_MAX_THREADS;
	os->tracked.max = OS_MAX_TRACKED;
	os->decided.max = MAX_DECIDED;
	os->epoch = 1;
	os->ncpus = libbpf_num_possible_cpus();
	if (os->ncpus <= 0) {
		rc = os->ncpus < 0 ? os->ncpus : -EINVAL;
		snprintf(err, errlen, "cannot count the possible CPUs: %s", sysom_strerror(rc));
		goto cleanup;
	}
	os->cpu_now = calloc((size_t)os->ncpus, sizeof(*os->cpu_now));
	os->cpu_prev = calloc((size_t)os->ncpus, sizeof(*os->cpu_prev));
	os->node = calloc((size_t)os->ncpus, sizeof(*os->node));
	os->tkeys = calloc(os->max_threads, sizeof(*os->tkeys));
	os->tvals = calloc(os->max_threads, sizeof(*os->tvals));
	os->recs = calloc(os->max_threads, sizeof(*os->recs));
	os->recs_next = calloc(os->max_threads, sizeof(*os->recs_next));
	os->ikeys = calloc(OS_MAX_IRQ_KEYS, sizeof(*os->ikeys));
	os->ivals = calloc(OS_MAX_IRQ_KEYS, sizeof(*os->ivals));
	os->irq_recs = calloc(OS_MAX_IRQ_KEYS, sizeof(*os->irq_recs));
	os->irq_recs_next = calloc(OS_MAX_IRQ_KEYS, sizeof(*os->irq_recs_next));
	if (!os->cpu_now || !os->cpu_prev || !os->node || !os->tkeys || !os->tvals || !os->recs ||
	    !os->recs_next || !os->ikeys || !os->ivals || !os->irq_recs || !os->irq_recs_next ||
	    hash_index_init(&os->rec_index, 256) || hash_index_init(&os->rec_index_next, 256) ||
	    hash_index_init(&os->irq_index, 256) || hash_index_init(&os->irq_index_next, 256)) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto cleanup;
	}
	os->numa_nodes = read_numa(os->opts.sys_root, os->node, os->ncpus);

	os->skel = ossignals_bpf__open();
	if (!os->skel) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the OS signals BPF object: %s", sysom_strerror(rc));
		goto cleanup;
	}
	os->skel->rodata->track_all = o->track_all;
	if ((rc = bpf_map__set_max_entries(os->skel->maps.threads, os->max_threads))) {
		snprintf(err, errlen, "thread map size %u: %s", os->max_threads, sysom_strerror(rc));
		goto cleanup;
	}
	struct ossignals_bpf *k = os->skel;
	const struct prog_entry progs[NPROGS] = {
		{ k->progs.os_sched_switch, "sched:sched_switch", NULL },
		{ k->progs.os_sched_migrate, "sched:sched_migrate_task", NULL },
		{ k->progs.os_process_exit, "sched:sched_process_exit", NULL },
		{ k->progs.os_irq_entry, "irq:irq_handler_entry", NULL },
		{ k->progs.os_irq_exit, "irq:irq_handler_exit", NULL },
		{ k->progs.os_softirq_entry, "irq:softirq_entry", NULL },
		{ k->progs.os_softirq_exit, "irq:softirq_exit", NULL },
		{ k->progs.os_mm_migrate_pages, "migrate:mm_migrate_pages", NULL },
	};
	memcpy(os->progs, progs, sizeof(progs));
	skip_missing_tracepoints(os);
	/* Only the flush program is run by hand; the others attach one by one below. */
	if ((rc = ossignals_bpf__load(os->skel))) {
		snprintf(err, errlen, "cannot load the OS signals BPF programs: %s",
			 sysom_strerror(rc));
		goto cleanup;
	}
	for (int c = 0; c < os->ncpus && c < OS_MAX_CPUS; c++) {
		uint32_t key = (uint32_t)c;
		bpf_map_update_elem(bpf_map__fd(os->skel->maps.cpu_node), &key, &os->node[c], BPF_ANY);
	}

	for (int i = 0; i < NPROGS; i++) {
		struct prog_entry *p = &os->progs[i];

		if (!bpf_program__autoload(p->prog))
			continue; /* counted by skip_missing_tracepoints */
		p->link = bpf_program__attach(p->prog);
		if (!p->link) {
			rc = -errno;
			os->attach_errors++;
			add_failed(os, p->tracepoint);
			sysom_report(&os->opts.report, SYSOM_REPORT_WARN,
				     "os-signals: cannot attach %s: %s (its signals are missing)",
				     p->tracepoint, sysom_strerror(rc));
			continue;
		}
		os->attached++;
	}
	if (os->attached == 0) {
		rc = -ENOENT;
		snprintf(err, errlen, "no OS signal tracepoint could be attached (%s)", os->failed);
		goto cleanup;
	}
	/* The baseline: what the kernel counted so far belongs to no window. */
	if ((rc = flush_cpus(os)) || (rc = read_cpus(os, os->cpu_prev))) {
		snprintf(err, errlen, "cannot read the per-CPU counters: %s", sysom_strerror(rc));
		goto cleanup;
	}
	os->last_collect_ns = sysom_monotonic_ns();
	*out = os;
	return 0;
cleanup:
	ossignals_close(os);
	return rc;
}

void ossignals_close(struct ossignals *os)
{
	if (!os)
		return;
	for (int i = 0; i < NPROGS; i++)
		bpf_link__destroy(os->progs[i].link);
	ossignals_bpf__destroy(os->skel);
	for (uint32_t i = 0; i < os->irq_names_cap; i++)
		free(os->irq_names[i].name);
	free(os->irq_names);
	free(os->cpu_now);
	free(os->cpu_prev);
	free(os->node);
	free(os->tkeys);
	free(os->tvals);
	free(os->recs);
	free(os->recs_next);
	free(os->ikeys);
	free(os->ivals);
	free(os->irq_recs);
	free(os->irq_recs_next);
	hash_index_free(&os->rec_index);
	hash_index_free(&os->rec_index_next);
	hash_index_free(&os->irq_index);
	hash_index_free(&os->irq_index_next);
	u32_map_free(&os->tracked);
	u32_map_free(&os->decided);
	free(os);
}

/* ---- tracked processes ------------------------------------------------------------------------ */

/* Tells the programs the tracked set changed (they cache the answer per task and epoch). */
static void bump_epoch(struct ossignals *os)
{
	os->epoch++;
	if (os->epoch == 0)
		os->epoch = 1; /* 0 means "never decided" in the task storage */
	__atomic_store_n(&os->skel->data->track_epoch, os->epoch, __ATOMIC_SEQ_CST);
}

static int track_source(struct ossignals *os, uint32_t tgid, uint32_t source)
{
	uint32_t *v = u32_map_find(&os->tracked, tgid);
	uint32_t one = 1;
	int rc;

	if (!tgid)
		return -EINVAL;
	if (v) {
		*v |= source;
		/* The BPF entry may be gone (the group exited and the pid came back). */
		if (bpf_map_update_elem(bpf_map__fd(os->skel->maps.tracked), &tgid, &one, BPF_ANY))
			return -errno;
		return 0;
	}
	if ((rc = u32_map_put(&os->tracked, tgid, source)))
		return rc;
	if (bpf_map_update_elem(bpf_map__fd(os->skel->maps.tracked), &tgid, &one, BPF_ANY)) {
		rc = -errno;
		u32_map_del(&os->tracked, tgid);
		return rc == -E2BIG ? -ENOSPC : rc;
	}
	bump_epoch(os);
	return 0;
}

int ossignals_track(struct ossignals *os, uint32_t tgid)
{
	return track_source(os, tgid, SRC_EXPLICIT);
}

static void untrack_source(struct ossignals *os, uint32_t tgid, uint32_t source)
{
	uint32_t *v = u32_map_find(&os->tracked, tgid);

	if (!v)
		return;
	*v &= ~source;
	if (*v)
		return;
	u32_map_del(&os->tracked, tgid);
	bpf_map_delete_elem(bpf_map__fd(os->skel->maps.tracked), &tgid);
	bump_epoch(os);
}

void ossignals_untrack(struct ossignals *os, uint32_t tgid)
{
	untrack_source(os, tgid, SRC_ENV | SRC_EXPLICIT);
}

bool ossignals_is_tracked(const struct ossignals *os, uint32_t tgid)
{
	return os->opts.track_all || u32_map_find(&os->tracked, tgid) != NULL;
}

int ossignals_tracked_fd(const struct ossignals *os)
{
	return os->opts.track_all ? -1 : bpf_map__fd(os->skel->maps.tracked);
}

void ossignals_offer(struct ossignals *os, uint32_t tgid, uint32_t generation)
{
	uint32_t *g;

	if (os->opts.track_all || !tgid)
		return;
	g = u32_map_find(&os->decided, tgid);
	if (g && *g == generation)
		return; /* read already (or queued) for this incarnation */
	if (os->npending >= MAX_PENDING || u32_map_put(&os->decided, tgid, generation))
		return; /* offered again at its next scan */
	os->pending[os->npending++] = tgid;
}

void ossignals_forget(struct ossignals *os, uint32_t tgid, uint32_t generation)
{
	uint32_t *g = u32_map_find(&os->decided, tgid);

	if (g && *g != generation)
		return; /* a newer incarnation (exec) decides now */
	u32_map_del(&os->decided, tgid);
	ossignals_untrack(os, tgid);
}

struct offer_all {
	struct ossignals *os;
	int offered;
};

static void offer_one(void *arg, uint32_t pid)
{
	struct offer_all *o = arg;
	uint32_t before = o->os->npending;

	ossignals_offer(o->os, pid, 0);
	o->offered += o->os->npending > before;
}

int ossignals_offer_all(struct ossignals *os)
{
	struct offer_all o = { os, 0 };
	int rc = procmaps_each_pid(os->opts.proc_root, offer_one, &o);

	return rc ? rc : o.offered;
}

/* Forgets decisions about processes that are gone (the tracker may never have seen them: the
 * start-up scan offers every process), `budget` table slots at a time. */
static void sweep_decided(struct ossignals *os, uint32_t budget)
{
	char dir[96];

	while (budget-- && os->decided.cap) {
		uint32_t i = os->sweep_slot++ & (os->decided.cap - 1);
		uint32_t tgid = os->decided.keys[i];

		if (!tgid)
			continue;
		snprintf(dir, sizeof(dir), "%s/%u", os->opts.proc_root, tgid);
		if (access(dir, F_OK) != 0 && errno == ENOENT) {
			u32_map_del(&os->decided, tgid);
			ossignals_untrack(os, tgid);
			os->sweep_slot--; /* a later entry may have moved into this slot */
		}
	}
}

int ossignals_refresh(struct ossignals *os, uint32_t budget)
{
	int added = 0;

	sweep_decided(os, budget);
	while (os->npending && budget--) {
		uint32_t tgid = os->pending[--os->npending];
		struct job_identity id;
		int rc = jobenv_read(os->opts.proc_root, tgid, &id);

		if (rc == -ESRCH) {
			u32_map_del(&os->decided, tgid);
			continue;
		}
		if (rc == 0 && (id.has_rank || id.job_id[0])) {
			bool before = u32_map_find(&os->tracked, tgid) != NULL;
			rc = track_source(os, tgid, SRC_ENV);
			if (rc)
				sysom_report(&os->opts.report, SYSOM_REPORT_DEBUG,
					     "os-signals: pid %u not tracked: %s", tgid,
					     sysom_strerror(rc));
			else if (!before)
				added++;
		} else {
			untrack_source(os, tgid, SRC_ENV); /* exec'd into something else */
		}
	}
	return added;
}

/* Drops tgids whose BPF entry the programs removed (the whole group exited). */
static void reconcile_tracked(struct ossignals *os)
{
	int fd = bpf_map__fd(os->skel->maps.tracked);

	for (uint32_t i = 0; i < os->tracked.cap;) {
		uint32_t tgid = os->tracked.keys[i], one;

		if (tgid && bpf_map_lookup_elem(fd, &tgid, &one) != 0 && errno == ENOENT) {
			u32_map_del(&os->tracked, tgid); /* shifts a later entry into slot i */
			continue;
		}
		i++;
	}
}

/* ---- collect ----------------------------------------------------------------------------------- */

/* The increment of a cumulative counter since `*prev`, which it advances. */
static uint64_t take(__u64 now, __u64 *prev)
{
	__u64 d;

	if (now <= *prev)
		return 0; /* a torn read behind the last one: nothing new yet */
	d = now - *prev;
	*prev = now;
	return d;
}

/* Reads a whole hash map (batched; one by one where batches are not supported). Returns the
 * number of entries read (at most `max`) or -errno. Entries inserted meanwhile may be missed:
 * their counts are cumulative, so the next collect has them. */
static int read_map(int fd, void *keys, void *vals, size_t ksz, size_t vsz, uint32_t max)
{
	LIBBPF_OPTS(bpf_map_batch_opts, bo);
	uint8_t token[16], next[16];
	bool first = true;
	uint32_t total = 0;

	while (total < max) {
		uint32_t count = max - total;
		int rc = bpf_map_lookup_batch(fd, first ? NULL : token, next,
					      (uint8_t *)keys + (size_t)total * ksz,
					      (uint8_t *)vals + (size_t)total * vsz, &count, &bo);
		if (rc && errno != ENOENT) {
			if (total == 0 && first && (errno == EINVAL || errno == ENOTSUP))
				goto one_by_one;
			return -errno;
		}
		total += count;
		if (rc)
			return (int)total; /* ENOENT: the whole map was read */
		memcpy(token, next, sizeof(token));
		first = false;
	}
	return (int)total;
one_by_one:
	total = 0;
	while (total < max && bpf_map_get_next_key(fd, total ? (uint8_t *)keys + (total - 1) * ksz : NULL,
						   (uint8_t *)keys + (size_t)total * ksz) == 0) {
		if (bpf_map_lookup_elem(fd, (uint8_t *)keys + (size_t)total * ksz,
					(uint8_t *)vals + (size_t)total * vsz) == 0)
			total++;
	}
	return (int)total;
}

/* The window's length: the longest span between two flushes on one CPU. Everything a CPU
 * charges lies between its own flushes, so no CPU is busy longer than the window; the agent's
 * clock around the flush loop (`wall_ns`) is only the fallback, since a thread preempted between
 * a CPU's flush and that clock read would make the window shorter than what was charged. */
static uint64_t window_span(const struct ossignals *os, uint64_t wall_ns)
{
	uint64_t span = 0;

	for (int c = 0; c < os->ncpus; c++) {
		const struct os_cpu *now = &os->cpu_now[c], *prev = &os->cpu_prev[c];
		if (prev->flush_ns && now->flush_ns > prev->flush_ns &&
		    now->flush_ns - prev->flush_ns > span)
			span = now->flush_ns - prev->flush_ns;
	}
	return span ? span : wall_ns;
}

static void collect_cpus(struct ossignals *os, const struct ossignals_visitor *v,
			 struct ossignals_window *w)
{
	for (int c = 0; c < os->ncpus; c++) {
		const struct os_cpu *now = &os->cpu_now[c];
		struct os_cpu *prev = &os->cpu_prev[c];
		struct sysom_os_cpu row = { .cpu = (uint32_t)c, .numa_node = os->node[c] };
		bool any;

		prev->flush_ns = now->flush_ns;
		w->threads_lost += take(now->threads_lost, &prev->threads_lost);
		w->irqs_lost += take(now->irqs_lost, &prev->irqs_lost);
		row.busy_ns = take(now->busy_ns, &prev->busy_ns);
		row.hardirq_count = take(now->hardirq_count, &prev->hardirq_count);
		/* Time without its count (a torn read) waits for the count. */
		row.hardirq_ns = row.hardirq_count ? take(now->hardirq_ns, &prev->hardirq_ns) : 0;
		any = row.busy_ns || row.hardirq_count;
		for (int s = 0; s < OS_SOFTIRQS; s++) {
			row.softirq_count[s] = take(now->softirq_count[s], &prev->softirq_count[s]);
			row.softirq_ns[s] = row.softirq_count[s]
						    ? take(now->softirq_ns[s], &prev->softirq_ns[s])
						    : 0;
			any |= row.softirq_count[s] != 0;
		}
		row.context_switches = take(now->context_switches, &prev->context_switches);
		row.runq_wait_ns = take(now->runq_wait_ns, &prev->runq_wait_ns);
		any |= row.context_switches || row.runq_wait_ns;
		if (!any)
			continue; /* offline, or nothing happened */
		w->cpus++;
		if (v && v->cpu)
			v->cpu(v->ctx, &row);
	}
}

struct irq_find {
	const struct irq_rec *recs;
	const struct os_irq_key *key;
};

static bool irq_eq(const void *ctx, uint32_t i)
{
	const struct irq_find *f = ctx;

	return f->recs[i].key.cpu == f->key->cpu && f->recs[i].key.irq == f->key->irq;
}

static uint64_t irq_hash(const struct os_irq_key *k)
{
	return sysom_hash_mix(k->cpu, k->irq);
}

static int collect_irqs(struct ossignals *os, const struct ossignals_visitor *v,
			struct ossignals_window *w)
{
	int n = read_map(bpf_map__fd(os->skel->maps.irqs), os->ikeys, os->ivals,
			 sizeof(*os->ikeys), sizeof(*os->ivals), OS_MAX_IRQ_KEYS);
	uint32_t next = 0;
	int rc;

	if (n < 0)
		return n;
	hash_index_clear(&os->irq_index_next);
	for (int i = 0; i < n; i++) {
		const struct os_irq_key *key = &os->ikeys[i];
		const struct os_irq_value *now = &os->ivals[i];
		struct irq_find f = { os->irq_recs, key };
		uint32_t old = hash_index_find(&os->irq_index, irq_hash(key), irq_eq, &f);
		struct irq_rec *r = &os->irq_recs_next[next];

		r->key = *key;
		r->prev = old != HASH_INDEX_NONE ? os->irq_recs[old].prev : (struct os_irq_value){ 0 };
		struct sysom_os_irq row = { .cpu = key->cpu, .irq = key->irq };
		row.count = take(now->count, &r->prev.count);
		row.ns = row.count ? take(now->ns, &r->prev.ns) : 0;
		if ((rc = hash_index_insert(&os->irq_index_next, irq_hash(key), next)))
			return rc;
		next++;
		if (!row.count)
			continue;
		w->irqs++;
		if (v && v->irq)
			v->irq(v->ctx, &row, ossignals_irq_name(os, key->irq));
	}
	/* Swap: the table read now is the baseline of the next collect. */
	struct irq_rec *t = os->irq_recs;
	os->irq_recs = os->irq_recs_next;
	os->irq_recs_next = t;
	struct hash_index hi = os->irq_index;
	os->irq_index = os->irq_index_next;
	os->irq_index_next = hi;
	os->nirq_recs = next;
	return 0;
}

struct thread_find {
	const struct thread_rec *recs;
	const struct os_thread_key *key;
};

static bool thread_eq(const void *ctx, uint32_t i)
{
	const struct thread_find *f = ctx;

	return f->recs[i].key.tid == f->key->tid && f->recs[i].key.start_ns == f->key->start_ns;
}

static uint64_t thread_hash(const struct os_thread_key *k)
{
	return sysom_hash_mix(k->tid, k->start_ns);
}

/* The window's increments of one thread; `prev` advances. Returns true when anything moved. */
static bool thread_delta(const struct os_thread *now, struct os_thread *prev, uint32_t window,
			 struct sysom_os_thread *row)
{
	uint64_t in_hist = 0;
	uint32_t slot = window & 1;
	bool any;

	row->oncpu_ns = take(now->oncpu_ns, &prev->oncpu_ns);
	row->runq_wait_ns = take(now->runq_wait_ns, &prev->runq_wait_ns);
	for (int b = 0; b < OS_HIST_BUCKETS; b++) {
		/* 32-bit buckets: the difference modulo 2^32 is right across a wrap. */
		row->runq_hist[b] = now->runq_hist[b] - prev->runq_hist[b];
		in_hist += row->runq_hist[b];
	}
	memcpy(prev->runq_hist, now->runq_hist, sizeof(prev->runq_hist));
	/* Every measured wait lands in exactly one bucket, so the buckets are the count (BPF's
	 * own count may be a step ahead or behind them in a torn read). */
	row->runq_waits = in_hist;
	prev->runq_waits += in_hist;
	row->voluntary_switches = take(now->voluntary_switches, &prev->voluntary_switches);
	row->involuntary_switches = take(now->involuntary_switches, &prev->involuntary_switches);
	row->migrations = take(now->migrations, &prev->migrations);
	row->numa_migrations = take(now->numa_migrations, &prev->numa_migrations);
	row->pages_migrated = take(now->pages_migrated, &prev->pages_migrated);
	row->hardirq_ns = take(now->hardirq_ns, &prev->hardirq_ns);
	row->softirq_ns = take(now->softirq_ns, &prev->softirq_ns);
	any = row->oncpu_ns || row->runq_wait_ns || row->runq_waits || row->voluntary_switches ||
	      row->involuntary_switches || row->migrations || row->pages_migrated ||
	      row->hardirq_ns || row->softirq_ns;
	if (now->mask_window[slot] == window)
		memcpy(row->cpus, now->cpus[slot], sizeof(row->cpus));
	bool empty = true;
	for (int i = 0; i < SYSOM_CPU_MASK_WORDS; i++)
		empty &= row->cpus[i] == 0;
	/* It ran, but its mask is of another window (a read racing with its switch-in): the CPU
	 * it last ran on is right. CPUs past the mask stay unrecorded. */
	if (empty && (row->oncpu_ns || row->voluntary_switches || row->involuntary_switches) &&
	    now->last_cpu < 64 * SYSOM_CPU_MASK_WORDS)
		row->cpus[now->last_cpu / 64] |= 1ull << (now->last_cpu % 64);
	return any;
}

/* Whether /proc still has the thread (for entries whose exit went unseen). */
static bool thread_exists(const struct ossignals *os, uint32_t tgid, uint32_t tid)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%u/task/%u", os->opts.proc_root, tgid, tid);
	return access(path, F_OK) == 0;
}

static int collect_threads(struct ossignals *os, uint32_t window,
			   const struct ossignals_visitor *v, struct ossignals_window *w)
{
	int fd = bpf_map__fd(os->skel->maps.threads);
	int n = read_map(fd, os->tkeys, os->tvals, sizeof(*os->tkeys), sizeof(*os->tvals),
			 os->max_threads);
	uint32_t next = 0;
	int rc;

	if (n < 0)
		return n;
	os->last_thread_count = (uint32_t)n;
	hash_index_clear(&os->rec_index_next);
	for (int i = 0; i < n; i++) {
		const struct os_thread_key *key = &os->tkeys[i];
		const struct os_thread *now = &os->tvals[i];
		struct thread_find f = { os->recs, key };
		uint32_t old = hash_index_find(&os->rec_index, thread_hash(key), thread_eq, &f);
		struct thread_rec *r = &os->recs_next[next];
		struct sysom_os_thread row = { .tid = key->tid };
		bool any, retire;

		r->key = *key;
		if (old != HASH_INDEX_NONE) {
			r->prev = os->recs[old].prev;
			r->retiring = os->recs[old].retiring;
			r->idle = os->recs[old].idle;
		} else {
			memset(&r->prev, 0, sizeof(r->prev));
			r->retiring = false;
			r->idle = 0;
		}
		any = thread_delta(now, &r->prev, window, &row);
		if (any) {
			char comm[OS_COMM_LEN + 1];
			char path[128];

			memcpy(comm, now->comm, OS_COMM_LEN);
			comm[OS_COMM_LEN] = '\0';
			if (!comm[0]) {
				/* Never switched out since it was first seen: ask /proc. */
				snprintf(path, sizeof(path), "%s/%u/task/%u/comm", os->opts.proc_root,
					 now->tgid, key->tid);
				if (host_read_text(path, comm, sizeof(comm)) > 0)
					comm[strcspn(comm, "\n")] = '\0';
			}
			w->threads++;
			if (v && v->thread)
				v->thread(v->ctx, now->tgid, &row, comm);
		}
		r->idle = any ? 0 : (uint16_t)(r->idle + 1);
		retire = (now->flags & OS_THREAD_EXITED) ||
			 !ossignals_is_tracked(os, now->tgid) ||
			 (r->idle >= IDLE_CHECK_WINDOWS && r->idle % IDLE_CHECK_WINDOWS == 0 &&
			  !thread_exists(os, now->tgid, key->tid));
		if (retire && r->retiring) {
			/* Read for the last time above: nothing updates it any more. */
			bpf_map_delete_elem(fd, key);
			w->threads_removed++;
			continue;
		}
		r->retiring = retire;
		if ((rc = hash_index_insert(&os->rec_index_next, thread_hash(key), next)))
			return rc;
		next++;
	}
	struct thread_rec *t = os->recs;
	os->recs = os->recs_next;
	os->recs_next = t;
	struct hash_index hi = os->rec_index;
	os->rec_index = os->rec_index_next;
	os->rec_index_next = hi;
	os->nrecs = next;
	return 0;
}

int ossignals_collect(struct ossignals *os, const struct ossignals_visitor *v,
		      struct ossignals_window *out)
{
	struct ossignals_window w = { 0 };
	uint32_t closing = os->window;
	uint64_t now;
	int rc;

	/* Programs mark CPUs into the next window from here on; the flush marks the threads
	 * running now into it and charges their time up to now. */
	os->window++;
	__atomic_store_n(&os->skel->bss->window, os->window, __ATOMIC_SEQ_CST);
	if ((rc = flush_cpus(os)))
		return rc;
	now = sysom_monotonic_ns();
	if (!os->opts.track_all)
		reconcile_tracked(os);
	if ((rc = read_cpus(os, os->cpu_now)))
		return rc;
	w.duration_ns = window_span(os, now - os->last_collect_ns);
	os->last_collect_ns = now;
	collect_cpus(os, v, &w);
	if ((rc = collect_irqs(os, v, &w)) || (rc = collect_threads(os, closing, v, &w)))
		return rc;
	if (out)
		*out = w;
	return 0;
}

void ossignals_stats_read(const struct ossignals *os, struct ossignals_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->programs = NPROGS;
	out->attached = os->attached;
	out->attach_errors = os->attach_errors;
	snprintf(out->failed, sizeof(out->failed), "%s", os->failed);
	out->tracked = os->tracked.count;
	out->threads = os->last_thread_count;
	out->numa_nodes = os->numa_nodes;
	out->track_all = os->opts.track_all;
}

int ossignals_program(const struct ossignals *os, uint32_t i, struct ossignals_program *out)
{
	struct bpf_prog_info info;
	uint32_t len = sizeof(info);

	if (i >= NPROGS)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	memset(&info, 0, sizeof(info));
	out->tracepoint = os->progs[i].tracepoint;
	out->attached = os->progs[i].link != NULL;
	if (bpf_obj_get_info_by_fd(bpf_program__fd(os->progs[i].prog), &info, &len) == 0) {
		out->runs = info.run_cnt;
		out->run_ns = info.run_time_ns;
	}
	return 0;
}
