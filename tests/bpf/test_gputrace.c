/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Real-kernel tests of the NCCL / CUDA uprobes (agent/gpu/gputrace.c + agent/gpu/nccltrack.c): the
 * simulated 8-rank job's calls, communicators and launches; library discovery in running
 * processes; the real libnccl.so.2 attached and called.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpu/gputrace.h"
#include "agent/gpu/nccltrack.h"
#include "common/wire/wire.h"
#include "tests/support/file_truncator.h"
#include "tests/support/unwind_session.h"
#include "tests/support/workload.h"

#define REAL_NCCL "/usr/local/cuda/lib/libnccl.so.2"
#define MAX_CALLS 8192
#define RANKS 8
#define ITERATIONS 12

struct collected {
	struct nccltrack *nt;
	struct nccltrack_call calls[MAX_CALLS];
	uint32_t ncalls;
	uint32_t corrupt;
	uint32_t dl_events;
};

struct comm_seen {
	uint32_t tgid;
	struct sysom_communicator c;
};

struct launch_seen {
	uint32_t tgid;
	uint64_t function;
	uint64_t count;
	uint16_t nframes;
	char name[64];
};

static struct collected col;

static void on_event(void *ctx, const void *data, size_t len)
{
	struct collected *c = ctx;
	struct nccltrack_call out;
	int rc;

	if (len >= sizeof(struct gt_dl_event) && *(const uint32_t *)data == GT_EVENT_DL_LOAD) {
		c->dl_events++;
		return; /* acted on by the tracer already */
	}
	rc = nccltrack_event(c->nt, data, len, 0, &out);

	if (rc < 0 && rc != -ENOSPC)
		c->corrupt++;
	if (rc == 1 && c->ncalls < MAX_CALLS)
		c->calls[c->ncalls++] = out;
}

static struct gputrace *open_tracer_loader(enum gputrace_loader_mode mode)
{
	struct gputrace_options o;
	struct nccltrack_options no;
	struct gputrace *g = NULL;
	char err[256] = "";

	memset(&col, 0, sizeof(col));
	nccltrack_options_default(&no);
	assert_int_equal(nccltrack_new(&no, &col.nt), 0);
	gputrace_options_default(&o);
	o.on_event = on_event;
	o.ctx = &col;
	o.loader = mode;
	if (gputrace_open(&o, &g, err, sizeof(err)) != 0)
		fail_msg("gputrace_open: %s", err);
	return g;
}

static struct gputrace *open_tracer(void)
{
	return open_tracer_loader(GPUTRACE_LOADER_NOTIFY);
}

static void close_tracer(struct gputrace *g)
{
	gputrace_close(g);
	nccltrack_free(col.nt);
	col.nt = NULL;
}

static const char *simjob_path(const char *name)
{
	static char path[2][512];
	static int which;
	const char *build = getenv("SYSOM_BUILD");

	which ^= 1;
	snprintf(path[which], sizeof(path[which]), "%s/tests/fixtures/simjob/%s",
		 build ? build : "build", name);
	return path[which];
}

/* Runs simjob with `args` (a NULL-terminated list after argv[0]) in the background. */
static pid_t simjob_start(const char *const *args)
{
	const char *argv[16] = { simjob_path("simjob") };
	pid_t pid;
	int i;

	for (i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	assert_true(pid > 0);
	return pid;
}

static int simjob_wait(pid_t pid)
{
	int status = 0;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void consume_all(struct gputrace *g)
{
	while (gputrace_consume(g) > 0)
		;
}

static void collect_comm(void *ctx, uint32_t tgid, uint32_t generation,
			 const struct sysom_communicator *c)
{
	struct comm_seen *list = ctx;

	(void)generation;
	for (int i = 0; i < 64; i++) {
		if (list[i].tgid == 0) {
			list[i].tgid = tgid;
			list[i].c = *c;
			return;
		}
	}
}

struct launch_ctx {
	struct launch_seen seen[64];
	int n;
};

static void collect_launch(void *ctx, const struct gt_launch_key *k, const struct gt_launch_value *v)
{
	struct launch_ctx *lc = ctx;
	const char *name = nccltrack_kernel_name(col.nt, k->tgid, k->function);

	if (lc->n >= 64)
		return;
	lc->seen[lc->n] = (struct launch_seen){ .tgid = k->tgid, .function = k->function,
						.count = v->count, .nframes = k->nframes };
	snprintf(lc->seen[lc->n].name, sizeof(lc->seen[lc->n].name), "%s", name ? name : "");
	lc->n++;
}

static int skip_without_simjob(void)
{
	if (access(simjob_path("simjob"), X_OK) != 0) {
		print_message("simjob not built (needs nccl.h and cuda.h)\n");
		return 1;
	}
	return 0;
}

/* The 8-rank job with the libraries attached before it starts: every call, with ranks and
 * communicators matched across processes. */
static void test_simjob_calls_and_communicators(void **state)
{
	static const char *const args[] = { "--ranks", "8", "--iterations", "12", "--cpu-us",
					    "300", "--kernel-us", "600", NULL };
	struct comm_seen comms[64] = { 0 };
	struct launch_ctx lc = { .n = 0 };
	uint32_t tgids[RANKS] = { 0 };
	int32_t rank_of[RANKS];
	uint64_t world = 0;
	struct gputrace_stats st;
	struct gputrace *g;

	(void)state;
	if (skip_without_simjob())
		skip();
	g = open_tracer();
	assert_int_equal(gputrace_attach_path(g, simjob_path("libnccl.so.2")), 1);
	assert_int_equal(gputrace_attach_path(g, simjob_path("libcuda.so.1")), 1);
	assert_int_equal(gputrace_attach_path(g, simjob_path("libcuda.so.1")), 0);
	assert_int_equal(simjob_wait(simjob_start(args)), 0);
	consume_all(g);
	gputrace_stats_read(g, &st);
	assert_int_equal(st.bpf.events_lost, 0);
	assert_int_equal(st.bpf.unmatched, 0);
	assert_int_equal(col.corrupt, 0);

	/* Communicator init: 8 processes, ranks 0..7 of 8, one key. */
	int inits = 0;
	for (uint32_t i = 0; i < col.ncalls; i++) {
		const struct nccltrack_call *c = &col.calls[i];
		if (c->call.op != SYSOM_NCCL_COMM_INIT_RANK)
			continue;
		assert_int_equal(c->call.result, 0);
		assert_in_range(c->call.rank, 0, RANKS - 1);
		assert_int_equal(tgids[c->call.rank], 0);
		tgids[c->call.rank] = c->tgid;
		rank_of[c->call.rank] = c->call.rank;
		if (!world)
			world = c->call.comm_key;
		assert_int_equal(c->call.comm_key, world);
		assert_true(c->call.exit_ns >= c->call.entry_ns);
		inits++;
	}
	assert_int_equal(inits, RANKS);
	assert_true(world != 0);

	/* AllReduce: every rank, seq 0..11 on the world communicator, with its rank. */
	for (int r = 0; r < RANKS; r++) {
		uint64_t seen_seq = 0;
		int n = 0;
		for (uint32_t i = 0; i < col.ncalls; i++) {
			const struct nccltrack_call *c = &col.calls[i];
			if (c->tgid != tgids[r] || c->call.op != SYSOM_NCCL_ALL_REDUCE)
				continue;
			assert_int_equal(c->call.comm_key, world);
			assert_int_equal(c->call.rank, rank_of[r]);
			assert_int_equal(c->call.count, 2);
			assert_int_equal(c->call.datatype, 7 /* ncclFloat32 */);
			assert_int_equal(c->call.bytes, 8);
			assert_int_equal(c->call.redop, 0 /* ncclSum */);
			assert_int_equal(c->call.result, 0);
			assert_true(c->call.stream != 0);
			assert_false(seen_seq & (1ull << c->call.seq));
			seen_seq |= 1ull << c->call.seq;
			n++;
		}
		assert_int_equal(n, ITERATIONS);
		assert_int_equal(seen_seq, (1ull << ITERATIONS) - 1);
	}

	/* CommSplit(rank % 2, key = rank): two children of 4 ranks, keys equal within a color. */
	nccltrack_for_each_comm(col.nt, collect_comm, comms);
	uint64_t child_key[2] = { 0, 0 };
	int members[2] = { 0, 0 };
	for (int i = 0; i < 64 && comms[i].tgid; i++) {
		const struct sysom_communicator *c = &comms[i].c;
		if (c->key_source == SYSOM_COMM_KEY_UNIQUE_ID) {
			assert_int_equal(c->key, world);
			assert_int_equal(c->nranks, RANKS);
			continue;
		}
		assert_int_equal(c->key_source, SYSOM_COMM_KEY_SPLIT);
		assert_int_equal(c->parent_key, world);
		assert_int_equal(c->split_ordinal, 1);
		assert_in_range(c->split_color, 0, 1);
		if (!child_key[c->split_color])
			child_key[c->split_color] = c->key;
		assert_int_equal(c->key, child_key[c->split_color]);
		members[c->split_color]++;
	}
	assert_int_equal(members[0], RANKS / 2);
	assert_int_equal(members[1], RANKS / 2);
	assert_true(child_key[0] != child_key[1] && child_key[0] != world);

	/* AllGather every 4th iteration on the child communicator: 3 per rank, seq 0..2. */
	int gathers = 0;
	for (uint32_t i = 0; i < col.ncalls; i++) {
		const struct nccltrack_call *c = &col.calls[i];
		if (c->call.op != SYSOM_NCCL_ALL_GATHER)
			continue;
		assert_true(c->call.comm_key == child_key[0] || c->call.comm_key == child_key[1]);
		assert_in_range(c->call.seq, 0, 2);
		gathers++;
	}
	assert_int_equal(gathers, RANKS * 3);

	/* Launches: two kernels per rank, 12 each, named through cuModuleGetFunction. */
	gputrace_drain_launches(g, collect_launch, &lc);
	uint64_t fwd = 0, bwd = 0;
	for (int i = 0; i < lc.n; i++) {
		if (strcmp(lc.seen[i].name, "sim_gemm_fwd") == 0)
			fwd += lc.seen[i].count;
		else if (strcmp(lc.seen[i].name, "sim_gemm_bwd") == 0)
			bwd += lc.seen[i].count;
		else
			fail_msg("launch of an unnamed function 0x%llx",
				 (unsigned long long)lc.seen[i].function);
		assert_true(lc.seen[i].nframes >= 2);
	}
	assert_int_equal(fwd, RANKS * ITERATIONS);
	assert_int_equal(bwd, RANKS * ITERATIONS);
	lc.n = 0;
	gputrace_drain_launches(g, collect_launch, &lc);
	assert_int_equal(lc.n, 0); /* drained means removed */
	close_tracer(g);
}

/* A job already running: scanning its processes finds and attaches the libraries, later calls
 * are traced; once the job is gone the files are detached after the grace period. */
static void test_discovery_in_running_processes(void **state)
{
	static const char *const args[] = { "--ranks", "4", "--seconds", "3", "--cpu-us", "300",
					    "--kernel-us", "600", NULL };
	struct gputrace_stats st;
	struct gputrace *g;
	pid_t job;
	int found = 0;

	(void)state;
	if (skip_without_simjob())
		skip();
	g = open_tracer();
	job = simjob_start(args);
	for (int tries = 0; tries < 40 && found < 2; tries++) {
		usleep(50 * 1000);
		int n = gputrace_scan_all(g);
		if (n > 0)
			found += n;
	}
	assert_int_equal(found, 2); /* libnccl.so.2 and libcuda.so.1, once each */
	gputrace_stats_read(g, &st);
	assert_int_equal(st.libraries, 2);
	assert_true(st.processes >= 8); /* 4 ranks map both files */
	assert_int_equal(simjob_wait(job), 0);
	consume_all(g);
	uint32_t allreduce = 0;
	for (uint32_t i = 0; i < col.ncalls; i++)
		allreduce += col.calls[i].call.op == SYSOM_NCCL_ALL_REDUCE &&
			     col.calls[i].call.comm_key != 0;
	assert_true(allreduce > 4);

	/* Exited users are noticed by the sweep; probes go after the grace period. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	gputrace_sweep(g, now);
	gputrace_stats_read(g, &st);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.libraries, 2);
	gputrace_sweep(g, now + 61ull * 1000000000ull);
	gputrace_stats_read(g, &st);
	assert_int_equal(st.libraries, 0);
	assert_int_equal(st.probes, 0);
	close_tracer(g);
}

static int drain_discard(void *ctx, const struct sampler_entry *e)
{
	(void)ctx;
	(void)e;
	return 0;
}

struct hybrid_launches {
	uint64_t launches, deep;
};

static void count_launch(void *ctx, const struct gt_launch_key *k, const struct gt_launch_value *v)
{
	struct hybrid_launches *h = ctx;

	h->launches += v->count;
	if (k->nframes >= 5) /* launch, rank_main, main, libc start, _start */
		h->deep += v->count;
}

/* A hybrid unwind session (sampler and process tracker) and a tracer sharing its unwinder
 * maps, so that launch stacks are unwound as CPU samples are; events go to `col`. */
static struct gputrace *open_tracer_hybrid(struct unwind_session *us)
{
	struct sampler_unwind_maps maps;
	struct gputrace_options o;
	struct nccltrack_options no;
	struct gputrace *g;
	char err[256] = "";

	if (unwind_session_open(us, SYSOM_UNWINDER_HYBRID, 199, 1.0, err, sizeof(err)))
		fail_msg("unwind_session_open: %s", err);
	sampler_unwind_maps(us->sampler, &maps);
	memset(&col, 0, sizeof(col));
	nccltrack_options_default(&no);
	assert_int_equal(nccltrack_new(&no, &col.nt), 0);
	gputrace_options_default(&o);
	o.on_event = on_event;
	o.ctx = &col;
	o.exec_generation_fd = sampler_exec_generation_fd(us->sampler);
	o.unwind_tables_fd = maps.tables;
	o.unwind_procs_fd = maps.procs;
	o.unwind_markers_fd = maps.markers;
	if (gputrace_open(&o, &g, err, sizeof(err)))
		fail_msg("gputrace_open: %s", err);
	return g;
}

/* With the sampler's unwinder maps shared, launch stacks are unwound like CPU samples: the
 * ranks are published (they are sampled) and their launch stacks reach the outermost frame. */
static void test_launch_stacks_hybrid(void **state)
{
	static const char *const args[] = { "--ranks", "2", "--seconds", "4", "--cpu-us", "3000",
					    "--kernel-us", "1000", NULL };
	struct unwind_session us;
	struct gputrace_stats st;
	struct hybrid_launches h = { 0 };
	struct gputrace *g;
	pid_t job;

	(void)state;
	if (skip_without_simjob())
		skip();
	g = open_tracer_hybrid(&us);
	assert_int_equal(gputrace_attach_path(g, simjob_path("libcuda.so.1")), 1);
	job = simjob_start(args);
	/* Drain as the agent does: the ranks get sampled, read and published; the first second
	 * (publication and table builds, FP or truncated stacks, counted) is not scored. */
	struct gputrace_stats st0;
	for (int i = 0; i < 45; i++) {
		usleep(100 * 1000);
		unwind_session_drain(&us, drain_discard, NULL);
		unwinder_work(us.unwinder, UINT64_MAX);
		gputrace_drain_launches(g, count_launch, &h);
		if (i == 12) {
			gputrace_stats_read(g, &st0);
			memset(&h, 0, sizeof(h));
		}
	}
	assert_int_equal(simjob_wait(job), 0);
	gputrace_drain_launches(g, count_launch, &h);
	gputrace_stats_read(g, &st);
	st.bpf.launch_stacks_hybrid -= st0.bpf.launch_stacks_hybrid;
	st.bpf.unwind.fallback_no_proc -= st0.bpf.unwind.fallback_no_proc;
	for (int r = 0; r < UNWIND_STOP_REASONS; r++)
		st.bpf.unwind.stops[r] -= st0.bpf.unwind.stops[r];
	print_message("launches %llu (%llu with >= 5 frames), hybrid stacks %llu, complete %llu, "
		      "not published %llu\n", (unsigned long long)h.launches,
		      (unsigned long long)h.deep, (unsigned long long)st.bpf.launch_stacks_hybrid,
		      (unsigned long long)st.bpf.unwind.stops[UNWIND_STOP_COMPLETE],
		      (unsigned long long)st.bpf.unwind.fallback_no_proc);
	for (int r = 0; r < UNWIND_STOP_REASONS; r++)
		if (st.bpf.unwind.stops[r])
			print_message("  stop reason %d: %llu\n", r,
				      (unsigned long long)st.bpf.unwind.stops[r]);
	assert_true(st.hybrid_launch_stacks);
	assert_true(h.launches > 100);
	/* Once published, every launch is unwound by the hybrid unwinder to the outermost
	 * frame. */
	assert_true(st.bpf.launch_stacks_hybrid >= h.launches * 95 / 100);
	assert_true(st.bpf.unwind.stops[UNWIND_STOP_COMPLETE] >= st.bpf.launch_stacks_hybrid * 95 / 100);
	assert_true(h.deep >= h.launches * 95 / 100);
	gputrace_close(g);
	nccltrack_free(col.nt);
	col.nt = NULL;
	unwind_session_close(&us);
}

typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);

struct own_launches {
	uint32_t tgid;
	uint64_t launches, past_entry; /* ... whose stack goes on past the probed function */
};

static void count_own_launch(void *ctx, const struct gt_launch_key *k,
			     const struct gt_launch_value *v)
{
	struct own_launches *h = ctx;

	if (k->tgid != h->tgid)
		return;
	h->launches += v->count;
	if (k->nframes >= 3) /* cuLaunchKernel, this test, cmocka's runner (and on) */
		h->past_entry += v->count;
}

/* A process that dlopen'ed libcuda after the agent last read its mappings launches at once:
 * the unwinder's view of it has no libcuda mapping yet (the loader's notification rescans it,
 * but not before its first launches), and the probed cuLaunchKernel frame must not end the
 * stack there: at a function's first instruction the return address is at [sp], whatever
 * the tables and mappings say. */
static void test_launch_stack_from_unpublished_library(void **state)
{
	struct unwind_session us;
	struct own_launches h = { .tgid = (uint32_t)getpid() };
	struct gputrace *g;
	cu_launch_fn launch;
	void *lib;

	(void)state;
	if (skip_without_simjob())
		skip();
	g = open_tracer_hybrid(&us);
	/* This process, published with the tables of what it maps now; no events are polled
	 * from here on, so nothing rescans it once it maps libcuda. */
	assert_non_null(proctrack_get(us.pt, h.tgid, 0));
	unwinder_work(us.unwinder, UINT64_MAX);
	lib = dlopen(simjob_path("libcuda.so.1"), RTLD_NOW | RTLD_LOCAL);
	assert_non_null(lib);
	launch = (cu_launch_fn)(uintptr_t)dlsym(lib, "cuLaunchKernel");
	assert_non_null(launch);
	assert_int_equal(gputrace_attach_path(g, simjob_path("libcuda.so.1")), 1);
	for (int i = 0; i < 50; i++) /* an empty grid: refused at once, probed all the same */
		assert_int_not_equal(launch(NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL), 0);
	gputrace_drain_launches(g, count_own_launch, &h);
	print_message("# launches %llu, %llu of them unwound past cuLaunchKernel\n",
		      (unsigned long long)h.launches, (unsigned long long)h.past_entry);
	assert_int_equal(h.launches, 50);
	assert_int_equal(h.past_entry, h.launches);
	gputrace_close(g);
	dlclose(lib);
	nccltrack_free(col.nt);
	col.nt = NULL;
	unwind_session_close(&us);
}

typedef int (*allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*destroy_fn)(void *);

/* The real NCCL 2.28.9 here: every entry point found, communicator fields known, and a call
 * from this very process observed with its arguments and result. */
static void test_real_libnccl(void **state)
{
	struct gputrace_library_info info;
	struct gputrace *g;
	void *lib;

	(void)state;
	if (access(REAL_NCCL, R_OK) != 0) {
		print_message("%s missing\n", REAL_NCCL);
		skip();
	}
	g = open_tracer();
	assert_int_equal(gputrace_attach_path(g, REAL_NCCL), 1);
	assert_int_equal(gputrace_library(g, 0, &info), 0);
	assert_int_equal(info.kind, 1);
	assert_true(info.probes >= 2 * 20); /* 20 NCCL functions, entry + return */
	assert_true(info.comm_layout);
	assert_string_equal(info.version, "2.28.9");

	lib = dlopen(REAL_NCCL, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(lib);
	allreduce_fn all_reduce = (allreduce_fn)dlsym(lib, "ncclAllReduce");
	destroy_fn destroy = (destroy_fn)dlsym(lib, "ncclCommDestroy");
	assert_non_null(all_reduce);
	assert_non_null(destroy);
	int rc = all_reduce(NULL, NULL, 5, 7, 0, NULL, NULL); /* no communicator: invalid argument */
	assert_int_not_equal(rc, 0);
	assert_int_equal(destroy(NULL), 0);
	consume_all(g);

	int seen = 0;
	for (uint32_t i = 0; i < col.ncalls; i++) {
		const struct nccltrack_call *c = &col.calls[i];
		if (c->tgid != (uint32_t)getpid())
			continue;
		if (c->call.op == SYSOM_NCCL_ALL_REDUCE) {
			assert_int_equal(c->call.count, 5);
			assert_int_equal(c->call.datatype, 7);
			assert_int_equal(c->call.result, rc);
			assert_int_equal(c->call.comm_key, 0);
			assert_int_equal(c->call.tid, (uint32_t)gettid());
			seen |= 1;
		} else if (c->call.op == SYSOM_NCCL_COMM_DESTROY) {
			seen |= 2;
		}
	}
	assert_int_equal(seen, 3);
	dlclose(lib);
	close_tracer(g);
}

/* NCCL library files truncated and restored by another thread while the tracer reads their
 * symbols and layout and attaches: the tracer survives (no SIGBUS: pread, not mmap), counts the
 * files it could not read, and traces the ones it read whole. */
static void test_library_truncated_while_attached(void **state)
{
	char dir[] = "/tmp/sysom-gputrace-trunc-XXXXXX", path[128];
	struct gputrace *g;
	struct gputrace_stats st;
	int attached = 0, files = 0;

	(void)state;
	if (skip_without_simjob())
		skip();
	assert_non_null(mkdtemp(dir));
	g = open_tracer();
	/* A new file (inode) each round: the tracer reads a file once. */
	for (int i = 0; i < 48; i++) {
		struct file_truncator *tr;
		snprintf(path, sizeof(path), "%s/libnccl.so.2.%d", dir, i);
		assert_int_equal(file_truncator_start(simjob_path("libnccl.so.2"), path, &tr), 0);
		usleep((useconds_t)(i % 8) * 100); /* met at varying points of the cycle */
		int rc = gputrace_attach_path(g, path);
		assert_true(file_truncator_stop(tr) > 0);
		assert_true(rc == 1 || rc < 0);
		attached += rc == 1;
		files++;
	}
	gputrace_stats_read(g, &st);
	print_message("# %d library files attached while truncated: %llu could not be read, "
		      "%u have probes\n", files, (unsigned long long)st.read_errors, st.libraries);
	assert_true(st.read_errors > 0);
	assert_true(st.read_errors <= (uint64_t)attached * 2); /* symbols, layout: once each */
	close_tracer(g);
	for (int i = 0; i < files; i++) {
		snprintf(path, sizeof(path), "%s/libnccl.so.2.%d", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

/* A job whose libraries nobody traced yet, started while the tracer runs: ld.so's
 * notification makes the tracer attach when the ranks map NCCL/CUDA. With hold, every call
 * of every rank is seen, communicator init included; with notify, the ones made before the
 * attachment completed are missed (counted and printed, not asserted: a race). */
struct loader_run {
	int inits, all_reduces, held;
	uint64_t dl_events, attach_ns_max;
};

static void run_loader_job(enum gputrace_loader_mode mode, struct loader_run *out)
{
	static const char *const args[] = { "--ranks", "4", "--iterations", "12", "--cpu-us",
					    "300", "--kernel-us", "600", NULL };
	struct gputrace_stats st;
	struct gputrace *g = open_tracer_loader(mode);
	pid_t job;
	int status = -1;

	gputrace_stats_read(g, &st);
	assert_true(st.loaders >= 1); /* this machine's ld.so */
	job = simjob_start(args);
	for (int tries = 0; tries < 30000; tries++) {
		gputrace_consume(g);
		pid_t w = waitpid(job, &status, WNOHANG);
		if (w == job)
			break;
		usleep(1000);
	}
	consume_all(g);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	gputrace_stats_read(g, &st);
	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < col.ncalls; i++) {
		out->inits += col.calls[i].call.op == SYSOM_NCCL_COMM_INIT_RANK;
		out->all_reduces += col.calls[i].call.op == SYSOM_NCCL_ALL_REDUCE;
	}
	out->held = (int)st.dl_resumed;
	out->dl_events = st.dl_events;
	out->attach_ns_max = st.dl_attach_ns_max;
	assert_int_equal(col.corrupt, 0);
	assert_true(st.dl_events >= 5); /* the launcher and 4 ranks mapped NCCL and CUDA */
	assert_int_equal(st.bpf.dl_loads, st.dl_events);
	assert_true(col.dl_events == st.dl_events);
	close_tracer(g);
}

static void test_loader_notification(void **state)
{
	struct loader_run hold, notify;

	(void)state;
	if (skip_without_simjob())
		skip();
	run_loader_job(GPUTRACE_LOADER_HOLD, &hold);
	print_message("# hold: %d/4 inits, %d/48 all-reduces, %d processes held, attach max "
		      "%.3f ms\n", hold.inits, hold.all_reduces, hold.held,
		      (double)hold.attach_ns_max / 1e6);
	assert_int_equal(hold.inits, 4);
	assert_int_equal(hold.all_reduces, 4 * 12);
	assert_int_equal((uint64_t)hold.held, hold.dl_events);
	run_loader_job(GPUTRACE_LOADER_NOTIFY, &notify);
	print_message("# notify: %d/4 inits, %d/48 all-reduces, attach max %.3f ms\n",
		      notify.inits, notify.all_reduces, (double)notify.attach_ns_max / 1e6);
	assert_int_equal(notify.held, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_simjob_calls_and_communicators),
		cmocka_unit_test(test_discovery_in_running_processes),
		cmocka_unit_test(test_real_libnccl),
		cmocka_unit_test(test_launch_stacks_hybrid),
		cmocka_unit_test(test_launch_stack_from_unpublished_library),
		cmocka_unit_test(test_library_truncated_while_attached),
		cmocka_unit_test(test_loader_notification),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "test_gputrace: needs root (BPF uprobes)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
