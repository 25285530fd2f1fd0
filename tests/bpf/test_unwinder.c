/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Real-kernel tests of the hybrid unwinder on code without frame pointers: full chains through
 * libc, a library dlopen'ed after sampling started, JIT-like anonymous code, deleted files,
 * tables shared between processes and dropped after them, stop reasons counted.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/node/host.h"
#include "agent/node/proctrack.h"
#include "common/clock.h"
#include "common/elf_buildid.h"
#include "tests/support/batch_fixture.h"
#include "tests/support/file_truncator.h"
#include "tests/support/unwind_session.h"

#define DRAIN_PERIOD_US 250000

/* What one session saw of one workload. */
struct observed {
	const struct nofp_workload *n;
	const struct symtab *t;
	struct chain_accuracy acc;
	uint64_t first_full_ns; /* monotonic time of the first drain with a full chain, 0: none */
	uint64_t drain_ns;      /* time of the drain in progress */
};

static int collect(void *ctx, const struct sampler_entry *e)
{
	struct observed *o = ctx;
	uint64_t before = o->acc.full_chain;

	if (e->key->tgid != (uint32_t)o->n->w.pid || !e->user)
		return 0;
	chain_accuracy_add(&o->acc, o->n, o->t, e->user, e->count);
	if (o->acc.full_chain > before && !o->first_full_ns)
		o->first_full_ns = o->drain_ns;
	return 0;
}

/*
 * Samples for `seconds` with each session, handling process events every 10 ms (the agent
 * does as soon as they arrive) and draining every DRAIN_PERIOD_US.
 */
static void run_sessions(struct unwind_session *const *sessions, struct observed *const *obs,
			 int count, double seconds)
{
	uint64_t end = sysom_monotonic_ns() + (uint64_t)(seconds * 1e9);

	while (sysom_monotonic_ns() < end) {
		for (int slice = 0; slice < DRAIN_PERIOD_US / 10000; slice++) {
			usleep(10000);
			for (int i = 0; i < count; i++)
				unwind_session_poll(sessions[i]);
		}
		for (int i = 0; i < count; i++) {
			obs[i]->drain_ns = sysom_monotonic_ns();
			assert_int_equal(unwind_session_drain(sessions[i], collect, obs[i]), 0);
		}
	}
}

/* Samples workload `n` alone for `seconds` with `s`, until it exits, scored into `o`. */
static void sample_workload(struct unwind_session *s, struct nofp_workload *n,
			    struct observed *o, double seconds)
{
	struct unwind_session *ss[] = { s };
	struct observed *os[] = { o };

	run_sessions(ss, os, 1, seconds);
	workload_wait(&n->w);
	unwind_session_drain(s, collect, o);
}

static int ignore_entry(void *ctx, const struct sampler_entry *e)
{
	(void)ctx;
	(void)e;
	return 0;
}

static void open_session(struct unwind_session *s, enum sysom_unwinder mode)
{
	char err[256] = "";
	int rc = unwind_session_open(s, mode, 99, 1.0, err, sizeof(err));

	if (rc)
		print_error("unwind_session_open: %s\n", err);
	assert_int_equal(rc, 0);
	/* Publish what already runs (this test process, the rest of the machine) now: the
	 * agent compiles tables on its loop, so a big process first sampled at the same time as
	 * the workload would delay the workload's publication (its samples then take frame
	 * pointers). The test process predates the sampler: generation 0. */
	proctrack_on_new(s->pt, (uint32_t)getpid(), 0);
	uint64_t end = sysom_monotonic_ns() + 500000000ULL;
	while (sysom_monotonic_ns() < end) {
		usleep(10000);
		unwind_session_poll(s);
	}
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_accuracy(const char *what, const struct chain_accuracy *a)
{
	print_message("# %s: %llu leaf samples, stack accuracy %.1f%%, frame accuracy %.1f%%; "
		      "stops:", what, (unsigned long long)a->samples,
		      100 * ratio(a->full_chain, a->samples),
		      100 * ratio(a->frames_found, a->frames_expected));
	for (int i = 0; i < 32; i++)
		if (a->stop[i])
			print_message(" %s %llu", i ? sysom_stop_reason_name((uint8_t)i) : "complete",
				      (unsigned long long)a->stop[i]);
	print_message("\n");
}

static void fixture_build_id(const char *name, struct sysom_build_id *id)
{
	int fd = open(fixture_path(name), O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(sysom_elf_build_id(fd, id), 0);
	close(fd);
}

static void library_build_id(struct sysom_build_id *id)
{
	fixture_build_id("libsysom_nofp.so", id);
}

/* Polls `s` (and `also`) until the tables of the workload's executable and library are
 * loaded in `s`; seconds it took. */
static double wait_workload_tables(struct unwind_session *s, struct unwind_session *also)
{
	struct sysom_build_id exe, lib;
	struct unwinder_file_info ie, il;
	uint64_t start = sysom_monotonic_ns(), end = start + 3000000000ULL;

	fixture_build_id("nofp_workload", &exe);
	library_build_id(&lib);
	while (sysom_monotonic_ns() < end &&
	       !(unwinder_file_info(s->unwinder, &exe, &ie) == 0 && ie.file_id &&
		 unwinder_file_info(s->unwinder, &lib, &il) == 0 && il.file_id)) {
		usleep(10000);
		unwind_session_poll(s);
		if (also)
			unwind_session_poll(also);
	}
	assert_int_equal(unwinder_file_info(s->unwinder, &exe, &ie), 0);
	assert_int_equal(unwinder_file_info(s->unwinder, &lib, &il), 0);
	assert_true(ie.file_id != 0 && il.file_id != 0);
	return (sysom_monotonic_ns() - start) / 1e9;
}

/* The linked workload, sampled by a frame-pointer session and a hybrid one at once. */
static void test_nofp_chain_hybrid_vs_fp(void **state)
{
	struct unwind_session fp, hybrid;
	struct nofp_workload n;
	struct symtab t = { 0 };
	struct sampler_counters c;
	struct unwinder_stats us;
	(void)state;

	open_session(&fp, SYSOM_UNWINDER_FP);
	open_session(&hybrid, SYSOM_UNWINDER_HYBRID);
	assert_int_equal(nofp_workload_start(&n, 4.0, NULL), 0);
	assert_string_equal(n.chain[0], "nofp_leaf_spin");
	assert_string_equal(n.chain[n.chain_len - 1], "main");
	assert_true(n.chain_len >= 10);
	assert_int_equal(symtab_load_process(&t, n.w.pid), 0);
	/* Accuracy once the workload's tables are in: the samples before that are frame-pointer
	 * fallbacks, a start-up transient bounded here and timed by test_dlopen_found. */
	double ready = wait_workload_tables(&hybrid, &fp);
	print_message("# the workload's tables loaded %.2f s after it started\n", ready);
	assert_true(ready < 1.5);
	unwind_session_drain(&fp, ignore_entry, NULL);
	unwind_session_drain(&hybrid, ignore_entry, NULL);

	struct observed ofp = { .n = &n, .t = &t }, ohy = { .n = &n, .t = &t, .acc.label = "hybrid" };
	struct unwind_session *ss[] = { &fp, &hybrid };
	struct observed *os[] = { &ofp, &ohy };
	run_sessions(ss, os, 2, 3.0);
	workload_wait(&n.w);
	for (int i = 0; i < 2; i++)
		unwind_session_drain(ss[i], collect, os[i]);

	print_accuracy("frame pointers", &ofp.acc);
	print_accuracy("hybrid", &ohy.acc);
	assert_int_equal(sampler_counters_read(hybrid.sampler, &c), 0);
	unwinder_stats_read(hybrid.unwinder, &us);
	print_message("# hybrid: %llu frames (%llu CFI, %llu FP, %llu from cached markers), "
		      "%llu markers set; %u tables, %llu rows, built in %.1f ms; %llu unwinds, "
		      "%llu by frame pointers before publication, %llu tail-call failures\n",
		      (unsigned long long)c.unwind.frames, (unsigned long long)c.unwind.frames_dwarf,
		      (unsigned long long)c.unwind.frames_fp,
		      (unsigned long long)c.unwind.frames_cached,
		      (unsigned long long)c.unwind.markers_set, us.tables,
		      (unsigned long long)us.rows, us.build_ns / 1e6,
		      (unsigned long long)c.unwind.unwinds,
		      (unsigned long long)c.unwind.fallback_no_proc,
		      (unsigned long long)c.unwind.stops[UNWIND_STOP_TAIL_CALLS]);

	/* ~99 Hz over ~3.5 s of one busy thread, nearly all of it in the leaf. */
	assert_true(ohy.acc.samples >= 100);
	assert_true(ratio(ohy.acc.full_chain, ohy.acc.samples) >= 0.97);
	assert_true(ratio(ohy.acc.frames_found, ohy.acc.frames_expected) >= 0.99);
	/* Frame pointers cannot unwind this code: the comparison is the point of the test. */
	assert_true(ratio(ofp.acc.full_chain, ofp.acc.samples) < 0.5);
	/* Markers converge: after the first few samples nearly every frame is a cache hit. */
	assert_true(c.unwind.frames > 0);
	assert_true(ratio(c.unwind.frames_cached, c.unwind.frames) >= 0.9);
	assert_true(c.unwind.markers_set > 0);
	/* Full chains end at the outermost frame (_start's undefined return address). */
	assert_true(ratio(ohy.acc.stop[SYSOM_STOP_COMPLETE], ohy.acc.samples) >= 0.97);

	symtab_free(&t);
	unwind_session_close(&hybrid);
	unwind_session_close(&fp);
}

/* A library dlopen'ed after the sampler started gets full stacks within 5 s. */
static void test_dlopen_found(void **state)
{
	static const char *const args[] = { "--mode", "dlopen", "--dlopen-delay", "1.5", NULL };
	struct unwind_session s;
	struct nofp_workload n;
	struct symtab t = { 0 };
	char line[PATH_MAX + 16];
	(void)state;

	open_session(&s, SYSOM_UNWINDER_HYBRID);
	assert_int_equal(nofp_workload_start(&n, 6.0, args), 0);
	assert_string_equal(n.chain[0], "late_nofp_leaf_spin");
	struct observed o = { .n = &n, .t = &t, .acc.label = "hybrid" };
	struct unwind_session *ss[] = { &s };
	struct observed *os[] = { &o };
	/* Sample the executable-only phase, so the process is published before the dlopen. */
	run_sessions(ss, os, 1, 1.0);
	assert_int_equal(nofp_workload_expect(&n, "loaded ", line, sizeof(line), 5000), 0);
	uint64_t loaded_ns = sysom_monotonic_ns();
	assert_int_equal(symtab_load_process(&t, n.w.pid), 0);
	run_sessions(ss, os, 1, 4.0);
	workload_wait(&n.w);
	unwind_session_drain(&s, collect, &o);

	print_accuracy("dlopen (from load)", &o.acc);
	print_message("# first full chain %.2f s after the dlopen; %llu unmapped reports\n",
		      o.first_full_ns ? (o.first_full_ns - loaded_ns) / 1e9 : -1.0,
		      (unsigned long long)s.unmapped_events);
	assert_true(s.unmapped_events >= 1); /* BPF reported the unknown code */
	assert_true(o.first_full_ns != 0);
	assert_true(o.first_full_ns - loaded_ns < 5000000000ULL);
	assert_true(o.acc.samples >= 100);
	assert_true(ratio(o.acc.full_chain, o.acc.samples) >= 0.9);

	struct sampler_counters c;
	assert_int_equal(sampler_counters_read(s.sampler, &c), 0);
	print_message("# stops: no mapping %llu, fp invalid %llu, depth %llu\n",
		      (unsigned long long)c.unwind.stops[UNWIND_STOP_NO_MAPPING],
		      (unsigned long long)c.unwind.stops[UNWIND_STOP_FP_INVALID],
		      (unsigned long long)c.unwind.stops[UNWIND_STOP_DEPTH]);
	symtab_free(&t);
	unwind_session_close(&s);
}

/* Anonymous executable code (a JIT trampoline keeping a standard frame) is stepped through
 * by validated frame pointers: the chain continues below it, no garbage frames. */
static void test_jit_region(void **state)
{
	static const char *const args[] = { "--mode", "jit", NULL };
	struct unwind_session s;
	struct nofp_workload n;
	struct symtab t = { 0 };
	char line[256];
	(void)state;

	open_session(&s, SYSOM_UNWINDER_HYBRID);
	assert_int_equal(nofp_workload_start(&n, 4.0, args), 0);
	assert_int_equal(nofp_workload_expect(&n, "jit ", line, sizeof(line), 5000), 0);
	bool has_jit = false;
	for (int i = 0; i < n.chain_len; i++)
		has_jit |= strcmp(n.chain[i], "[jit]") == 0;
	assert_true(has_jit);
	assert_int_equal(symtab_load_process(&t, n.w.pid), 0);
	struct observed o = { .n = &n, .t = &t, .acc.label = "hybrid" };
	sample_workload(&s, &n, &o, 3.5);

	print_accuracy("jit", &o.acc);
	assert_true(o.acc.samples >= 100);
	assert_true(ratio(o.acc.full_chain, o.acc.samples) >= 0.97);
	assert_true(ratio(o.acc.stop[SYSOM_STOP_COMPLETE], o.acc.samples) >= 0.97);
	symtab_free(&t);
	unwind_session_close(&s);
}

/* A signal handler's stack continues through the kernel's signal frame into the interrupted
 * code (the rt_sigframe at __restore_rt's stack pointer holds its registers). */
static void test_signal_frame(void **state)
{
	static const char *const args[] = { "--mode", "signal", NULL };
	struct unwind_session s;
	struct nofp_workload n;
	struct symtab t = { 0 };
	(void)state;

	open_session(&s, SYSOM_UNWINDER_HYBRID);
	assert_int_equal(nofp_workload_start(&n, 4.0, args), 0);
	assert_string_equal(n.chain[4], "nofp_signal_handler");
	assert_int_equal(symtab_load_process(&t, n.w.pid), 0);
	struct observed o = { .n = &n, .t = &t, .acc.label = "hybrid" };
	sample_workload(&s, &n, &o, 3.5);

	print_accuracy("signal", &o.acc);
	assert_true(o.acc.samples >= 100);
	assert_true(ratio(o.acc.full_chain, o.acc.samples) >= 0.97);
	symtab_free(&t);
	unwind_session_close(&s);
}

static void copy_file(const char *from, const char *to)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	assert_int_equal(system(cmd), 0);
}

/* The executable and library are deleted while running: tables come from the mapped files. */
static void test_deleted_files(void **state)
{
	char dir[] = "/tmp/sysom-unwind-XXXXXX", fixtures[256], path[PATH_MAX];
	const char *old_build = getenv("SYSOM_BUILD");
	char saved_build[PATH_MAX];
	struct unwind_session s;
	struct nofp_workload n;
	struct symtab t = { 0 };
	(void)state;

	snprintf(saved_build, sizeof(saved_build), "%s", old_build ? old_build : "build");
	assert_non_null(mkdtemp(dir));
	snprintf(fixtures, sizeof(fixtures), "%s/tests/fixtures", dir);
	snprintf(path, sizeof(path), "mkdir -p '%s'", fixtures);
	assert_int_equal(system(path), 0);
	const char *const files[] = { "nofp_workload", "libsysom_nofp.so" };
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", fixtures, files[i]);
		copy_file(fixture_path(files[i]), path);
	}
	open_session(&s, SYSOM_UNWINDER_HYBRID);
	setenv("SYSOM_BUILD", dir, 1);
	int rc = nofp_workload_start(&n, 4.0, NULL);
	setenv("SYSOM_BUILD", saved_build, 1);
	assert_int_equal(rc, 0);
	assert_int_equal(symtab_load_process(&t, n.w.pid), 0);
	fixture_tmpdir_remove(dir); /* the running process keeps the deleted inodes mapped */

	/* Events queued since the start are handled only now: the workload's mappings are read
	 * and its tables compiled after its files were deleted. */
	struct observed o = { .n = &n, .t = &t, .acc.label = "hybrid" };
	sample_workload(&s, &n, &o, 3.0);

	print_accuracy("deleted files", &o.acc);
	assert_true(o.acc.samples >= 100);
	assert_true(ratio(o.acc.full_chain, o.acc.samples) >= 0.97);
	symtab_free(&t);
	unwind_session_close(&s);
}

/* Two processes share one table per file; tables outlive their last user by the grace
 * period, then are dropped. */
static void test_tables_shared_and_dropped(void **state)
{
	struct unwind_session s;
	struct nofp_workload a, b;
	struct sysom_build_id lib;
	struct unwinder_file_info one, two, gone;
	struct unwinder_stats before, after;
	(void)state;

	library_build_id(&lib);
	open_session(&s, SYSOM_UNWINDER_HYBRID);
	assert_int_equal(nofp_workload_start(&a, 2.5, NULL), 0);
	usleep(500000);
	unwind_session_drain(&s, ignore_entry, NULL);
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &one), 0);
	assert_int_equal(nofp_workload_start(&b, 1.5, NULL), 0);
	usleep(500000);
	unwind_session_drain(&s, ignore_entry, NULL);
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &two), 0);
	print_message("# libsysom_nofp.so: table %u (%u rows), mapped by %u then %u processes\n",
		      one.file_id, one.nrows, one.refs, two.refs);
	assert_true(one.file_id != 0 && one.nrows > 0);
	assert_int_equal(one.refs, 1);
	/* The second process reuses the table compiled for the first. */
	assert_int_equal(two.file_id, one.file_id);
	assert_int_equal(two.refs, 2);

	workload_wait(&a.w);
	workload_wait(&b.w);
	/* Exit events, then a drain at least PROCTRACK_EXIT_KEEP_NS later (late records may
	 * still name the processes until then) forgets them. */
	uint64_t exited_ns = sysom_monotonic_ns();
	do {
		unwind_session_drain(&s, ignore_entry, NULL);
		assert_int_equal(unwinder_file_info(s.unwinder, &lib, &gone), 0);
		if (gone.refs == 0)
			break;
		usleep(250000);
	} while (sysom_monotonic_ns() - exited_ns < PROCTRACK_EXIT_KEEP_NS + 3000000000ull);
	print_message("# processes forgotten %.1f s after their exit\n",
		      (sysom_monotonic_ns() - exited_ns) / 1e9);
	assert_int_equal(gone.refs, 0);
	assert_true(sysom_monotonic_ns() - exited_ns >= PROCTRACK_EXIT_KEEP_NS - 1000000000ull);
	/* Within the grace period the table stays (a restarting process finds it)... */
	unwinder_stats_read(s.unwinder, &before);
	unwinder_sweep(s.unwinder, sysom_monotonic_ns());
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &gone), 0);
	/* ... after it, it is dropped from BPF. */
	unwinder_sweep(s.unwinder, sysom_monotonic_ns() + 61ULL * 1000000000ULL);
	unwinder_stats_read(s.unwinder, &after);
	print_message("# tables %u → %u after the grace period (%llu dropped)\n", before.tables,
		      after.tables, (unsigned long long)after.tables_dropped);
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &gone), -ENOENT);
	assert_true(after.tables_dropped >= 2); /* the executable and the library */
	assert_true(after.tables < before.tables);
	unwind_session_close(&s);
}

/* Samples of the frame-pointer chain_workload whose user stack holds its whole chain. */
struct fp_chain_tally {
	pid_t pid;
	const struct symtab *t;
	uint64_t samples, with_chain, fallback_stacks;
};

static int tally_fp_chain(void *ctx, const struct sampler_entry *e)
{
	static const char *const chain[] = { "chain_level_6", "chain_level_5", "chain_level_4",
					     "chain_level_3", "chain_level_2", "chain_level_1",
					     "run_worker" };
	struct fp_chain_tally *c = ctx;
	size_t next = 0;

	if (e->key->tgid != (uint32_t)c->pid || !e->user || !e->user->nframes)
		return 0;
	c->samples += e->count;
	for (uint16_t i = 0; i < e->user->nframes && next < 7; i++) {
		const char *name = symtab_name_at(c->t, i ? e->user->ips[i] - 1 : e->user->ips[i]);
		if (name && strcmp(name, chain[next]) == 0)
			next++;
	}
	if (next == 7)
		c->with_chain += e->count;
	return 0;
}

/* Publishing never waits for table builds: a new process is published at once with its new
 * files queued, and unwinder_work compiles them a slice at a time (at least one per call). */
static void test_table_builds_deferred(void **state)
{
	struct unwind_session s;
	struct nofp_workload n;
	struct sysom_build_id lib;
	struct unwinder_file_info info;
	struct unwinder_stats st;
	(void)state;

	library_build_id(&lib);
	open_session(&s, SYSOM_UNWINDER_HYBRID);
	/* Each test opens its own session: nothing of the workload is known to it yet. */
	assert_int_equal(nofp_workload_start(&n, 2.0, NULL), 0);
	uint64_t end = sysom_monotonic_ns() + 300000000ULL;
	while (sysom_monotonic_ns() < end && unwinder_file_info(s.unwinder, &lib, &info) != 0) {
		usleep(10000);
		sampler_poll_events(s.sampler); /* events only: no build slice */
	}
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &info), 0);
	assert_true(info.pending);
	assert_int_equal(info.file_id, 0);
	unwinder_stats_read(s.unwinder, &st);
	uint32_t pending = st.pending, calls = 0;
	uint64_t builds = st.builds;
	assert_true(pending >= 2); /* the executable and the library at least */
	/* One file per zero-budget call: the library's turn comes within the files queued before
	 * it (other processes sampled meanwhile may queue more, or vanish before their turn). */
	while (unwinder_file_info(s.unwinder, &lib, &info) == 0 && info.pending) {
		assert_true(calls < pending + 16);
		unwinder_work(s.unwinder, 0);
		unwinder_stats_read(s.unwinder, &st);
		assert_true(st.builds <= builds + 1);
		builds = st.builds;
		calls++;
	}
	assert_true(calls >= 1);
	assert_int_equal(unwinder_file_info(s.unwinder, &lib, &info), 0);
	print_message("# the library's table compiled after %u zero-budget calls (%u files were "
		      "queued): %u rows\n", calls, pending, info.nrows);
	assert_false(info.pending);
	assert_true(info.file_id != 0);
	workload_wait(&n.w);
	unwind_session_close(&s);
}

/* A binary with frame pointers but no .eh_frame at all still unwinds (validated frame
 * pointers, no table). */
static void test_frame_pointers_without_eh_frame(void **state)
{
	char dir[] = "/tmp/sysom-noeh-XXXXXX", fixtures[256], cmd[2 * PATH_MAX + 128];
	const char *old_build = getenv("SYSOM_BUILD");
	char saved_build[PATH_MAX];
	struct unwind_session s;
	struct workload w;
	struct symtab t = { 0 };
	struct sampler_counters c;
	(void)state;

	snprintf(saved_build, sizeof(saved_build), "%s", old_build ? old_build : "build");
	assert_non_null(mkdtemp(dir));
	snprintf(fixtures, sizeof(fixtures), "%s/tests/fixtures", dir);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && objcopy --remove-section .eh_frame "
		 "--remove-section .eh_frame_hdr '%s' '%s/chain_workload'", fixtures,
		 fixture_path("chain_workload"), fixtures);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "readelf -S '%s/chain_workload' | grep -q eh_frame", fixtures);
	assert_int_not_equal(system(cmd), 0); /* really gone */

	open_session(&s, SYSOM_UNWINDER_HYBRID);
	setenv("SYSOM_BUILD", dir, 1);
	int rc = workload_start(&w, 3.0, NULL);
	setenv("SYSOM_BUILD", saved_build, 1);
	assert_int_equal(rc, 0);
	assert_int_equal(symtab_load_process(&t, w.pid), 0);
	struct fp_chain_tally tally = { .pid = w.pid, .t = &t };
	uint64_t end = sysom_monotonic_ns() + 2500000000ULL;
	while (sysom_monotonic_ns() < end) {
		for (int i = 0; i < 25; i++) {
			usleep(10000);
			unwind_session_poll(&s);
		}
		unwind_session_drain(&s, tally_fp_chain, &tally);
	}
	workload_wait(&w);
	unwind_session_drain(&s, tally_fp_chain, &tally);
	assert_int_equal(sampler_counters_read(s.sampler, &c), 0);
	print_message("# no .eh_frame: %llu samples, %llu with the whole chain; %llu frames by "
		      "frame pointer\n", (unsigned long long)tally.samples,
		      (unsigned long long)tally.with_chain, (unsigned long long)c.unwind.frames_fp);
	assert_true(tally.samples >= 100);
	assert_true(ratio(tally.with_chain, tally.samples) >= 0.97);
	assert_true(c.unwind.frames_fp > 0);
	symtab_free(&t);
	fixture_tmpdir_remove(dir);
	unwind_session_close(&s);
}

/* The fixture is what the tests claim: chain functions use RBP as a general register. */
static void test_fixture_uses_rbp_as_register(void **state)
{
	char cmd[PATH_MAX + 64];
	const char *build = getenv("SYSOM_BUILD");
	(void)state;

	snprintf(cmd, sizeof(cmd), "tests/fixtures/nofp/check_rbp.sh '%s' >/dev/null",
		 build ? build : "build");
	assert_int_equal(system(cmd), 0);
}

/* Gives the ELF file at `path` a Build ID of its own (new to the unwinder): `salt` xored in. */
static void fresh_build_id(const char *path, uint32_t salt, struct sysom_build_id *out)
{
	struct sysom_build_id id;
	struct stat st;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	uint8_t *buf, *at;

	assert_true(fd >= 0 && fstat(fd, &st) == 0);
	assert_int_equal(sysom_elf_build_id(fd, &id), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	at = memmem(buf, (size_t)st.st_size, id.bytes, id.len);
	assert_non_null(at);
	for (int k = 0; k < 4; k++)
		id.bytes[k] ^= (uint8_t)(salt >> (8 * k)) ^ 0x5a;
	assert_int_equal(pwrite(fd, id.bytes, id.len, at - buf), id.len);
	assert_int_equal(sysom_elf_build_id(fd, out), 0);
	assert_memory_equal(out->bytes, id.bytes, id.len);
	free(buf);
	close(fd);
}

/* A process maps a library (a fresh Build ID each round) that another thread truncates and
 * restores in a loop while the unwinder compiles its table from it: the unwinder survives (no
 * SIGBUS: pread, not mmap), and each file ends with a table or counted as a failed build. */
static void test_library_truncated_while_built(void **state)
{
	char dir[] = "/tmp/sysom-unwind-trunc-XXXXXX", src[128], lib[128];
	struct unwind_session s;
	struct unwinder_stats before, after;
	unsigned seen = 0, built = 0, failed = 0;
	(void)state;

	assert_non_null(mkdtemp(dir));
	open_session(&s, SYSOM_UNWINDER_HYBRID);
	unwinder_stats_read(s.unwinder, &before);
	for (uint32_t i = 0; i < 12; i++) {
		struct sysom_build_id id;
		struct unwinder_file_info info;
		struct file_truncator *tr;
		struct stat st;

		snprintf(src, sizeof(src), "%s/src%u.so", dir, i);
		snprintf(lib, sizeof(lib), "%s/libtrunc%u.so", dir, i);
		copy_file(fixture_path("libsysom_nofp.so"), src);
		fresh_build_id(src, i + 1, &id);
		assert_int_equal(stat(src, &st), 0);
		assert_int_equal(file_truncator_start(src, lib, &tr), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			/* Maps it executable and never touches it (so the truncation cannot fault
			 * here), spinning in the test's own code so that it is sampled. */
			int fd = open(lib, O_RDONLY);
			if (fd < 0 || mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE,
					   fd, 0) == MAP_FAILED)
				_exit(1);
			uint64_t end = sysom_monotonic_ns() + 600000000ULL;
			while (sysom_monotonic_ns() < end)
				;
			_exit(0);
		}
		for (uint64_t end = sysom_monotonic_ns() + 600000000ULL; sysom_monotonic_ns() < end;) {
			usleep(20000);
			unwind_session_drain(&s, ignore_entry, NULL);
		}
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_true(file_truncator_stop(tr) > 0);
		/* Builds left pending are done now (the file is whole again: they may succeed). */
		if (unwinder_file_info(s.unwinder, &id, &info) == 0 && info.pending)
			continue;
		if (unwinder_file_info(s.unwinder, &id, &info) != 0)
			continue; /* not identified while truncated: never reached the unwinder */
		seen++;
		if (info.file_id)
			built++;
		else
			failed++;
	}
	unwinder_stats_read(s.unwinder, &after);
	print_message("# %u truncated libraries reached the unwinder: %u tables, %u without "
		      "(build failures %llu, no CFI %llu, over budget %llu)\n", seen, built, failed,
		      (unsigned long long)(after.build_failures - before.build_failures),
		      (unsigned long long)(after.no_cfi - before.no_cfi),
		      (unsigned long long)(after.over_budget - before.over_budget));
	assert_true(seen > 0);
	/* A file without a table failed a build (counted) or had no CFI / no room. */
	assert_true(after.build_failures - before.build_failures + after.no_cfi - before.no_cfi +
		    after.over_budget - before.over_budget >= failed);
	unwind_session_close(&s);
	snprintf(src, sizeof(src), "rm -rf '%s'", dir);
	assert_int_equal(system(src), 0);
}

/* A table that finds no room is not given up: once the budget is raised (SIGHUP) it is built
 * again and loaded while the process still maps the file. */
static void test_no_room_then_raised(void **state)
{
	struct unwind_session s;
	struct nofp_workload a;
	struct sysom_build_id lib;
	struct unwinder_file_info info = { 0 };
	struct unwinder_stats st;
	uint64_t end;
	(void)state;

	library_build_id(&lib);
	unwind_session_max_rows = 1; /* no table fits */
	open_session(&s, SYSOM_UNWINDER_HYBRID);
	unwind_session_max_rows = 0;
	assert_int_equal(nofp_workload_start(&a, 3.0, NULL), 0);
	end = sysom_monotonic_ns() + 2000000000ULL;
	do {
		usleep(100000);
		unwind_session_drain(&s, ignore_entry, NULL);
	} while (sysom_monotonic_ns() < end &&
		 (unwinder_file_info(s.unwinder, &lib, &info) || info.pending));
	unwinder_stats_read(s.unwinder, &st);
	print_message("# budget 1 row: library table %u, %llu tables over budget\n", info.file_id,
		      (unsigned long long)st.over_budget);
	assert_false(info.pending);
	assert_int_equal(info.file_id, 0);
	assert_true(st.over_budget >= 1);
	assert_int_equal(st.rows, 0);

	struct unwinder_options defaults;
	unwinder_options_default(&defaults);
	unwinder_set_max_rows(s.unwinder, defaults.max_rows);
	end = sysom_monotonic_ns() + 2000000000ULL;
	do {
		usleep(100000);
		unwind_session_drain(&s, ignore_entry, NULL);
	} while (sysom_monotonic_ns() < end &&
		 (unwinder_file_info(s.unwinder, &lib, &info) || !info.file_id));
	unwinder_stats_read(s.unwinder, &st);
	print_message("# budget raised: library table %u (%u rows), %llu retried\n", info.file_id,
		      info.nrows, (unsigned long long)st.no_room_retries);
	assert_true(info.file_id != 0 && info.nrows > 0);
	assert_true(st.no_room_retries >= 1);
	workload_wait(&a.w);
	unwind_session_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixture_uses_rbp_as_register),
		cmocka_unit_test(test_no_room_then_raised),
		cmocka_unit_test(test_nofp_chain_hybrid_vs_fp),
		cmocka_unit_test(test_dlopen_found),
		cmocka_unit_test(test_jit_region),
		cmocka_unit_test(test_signal_frame),
		cmocka_unit_test(test_deleted_files),
		cmocka_unit_test(test_tables_shared_and_dropped),
		cmocka_unit_test(test_frame_pointers_without_eh_frame),
		cmocka_unit_test(test_table_builds_deferred),
		cmocka_unit_test(test_library_truncated_while_built),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
