/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of the NCCL / CUDA uprobes on the calling thread, and the event rate the pipeline
 * sustains. The simulated job's libnccl.so.2 / libcuda.so.1 are loaded into this process;
 * each round times the same calls untraced (baseline) and traced (entry + return probes for
 * NCCL, entry probe + in-kernel aggregation for launches), side by side.
 * usage: SYSOM_BUILD=build gputrace_bench [--calls N] [--rounds R] [--seconds S]
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "agent/gpu/gputrace.h"
#include "agent/gpu/nccltrack.h"

typedef int (*group_fn)(void);
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_ctx_create_fn)(void **, unsigned, int);
typedef int (*cu_module_load_fn)(void **, const void *);
typedef int (*cu_get_function_fn)(void **, void *, const char *);
typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);

struct libs {
	group_fn group_start, group_end;
	cu_launch_fn launch;
	void *function;
	char nccl_path[512], cuda_path[512];
};

static void *must_sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "gputrace_bench: %s missing: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

static int load_libs(struct libs *l)
{
	const char *build = getenv("SYSOM_BUILD");
	void *nccl, *cuda, *ctx = NULL, *mod = NULL;
	int dev;

	snprintf(l->nccl_path, sizeof(l->nccl_path), "%s/tests/fixtures/simjob/libnccl.so.2",
		 build ? build : "build");
	snprintf(l->cuda_path, sizeof(l->cuda_path), "%s/tests/fixtures/simjob/libcuda.so.1",
		 build ? build : "build");
	cuda = dlopen(l->cuda_path, RTLD_NOW | RTLD_LOCAL);
	nccl = dlopen(l->nccl_path, RTLD_NOW | RTLD_LOCAL);
	if (!cuda || !nccl) {
		fprintf(stderr, "gputrace_bench: cannot load the simulated libraries: %s\n", dlerror());
		return -1;
	}
	l->group_start = (group_fn)must_sym(nccl, "ncclGroupStart");
	l->group_end = (group_fn)must_sym(nccl, "ncclGroupEnd");
	l->launch = (cu_launch_fn)must_sym(cuda, "cuLaunchKernel");
	if (((cu_init_fn)must_sym(cuda, "cuInit"))(0) ||
	    ((cu_device_get_fn)must_sym(cuda, "cuDeviceGet"))(&dev, 0) ||
	    ((cu_ctx_create_fn)must_sym(cuda, "cuCtxCreate_v2"))(&ctx, 0, dev) ||
	    ((cu_module_load_fn)must_sym(cuda, "cuModuleLoadData"))(&mod, "sim") ||
	    ((cu_get_function_fn)must_sym(cuda, "cuModuleGetFunction"))(&l->function, mod,
									 "sim_bench_kernel")) {
		fprintf(stderr, "gputrace_bench: the simulated CUDA setup failed\n");
		return -1;
	}
	return 0;
}

/* ns per NCCL call (GroupStart + GroupEnd pairs, two traced calls each). */
static double time_nccl(const struct libs *l, long calls)
{
	uint64_t t0 = bench_now_ns();

	for (long i = 0; i < calls / 2; i++) {
		l->group_start();
		l->group_end();
	}
	return (double)(bench_now_ns() - t0) / (double)(calls / 2 * 2);
}

static double time_launch(const struct libs *l, long calls)
{
	uint64_t t0 = bench_now_ns();

	for (long i = 0; i < calls; i++)
		l->launch(l->function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	return (double)(bench_now_ns() - t0) / (double)calls;
}

struct phdr_query {
	uintptr_t addr;
	uint64_t offset;
	bool found;
};

static int phdr_visit(struct dl_phdr_info *info, size_t size, void *p)
{
	struct phdr_query *q = p;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && q->addr >= start && q->addr < start + ph->p_memsz) {
			q->offset = q->addr - start + ph->p_offset;
			q->found = true;
			return 1;
		}
	}
	return 0;
}

static int write_file(const char *path, const char *text, bool append)
{
	int fd = open(path, O_WRONLY | (append ? O_APPEND : O_TRUNC));
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/*
 * The floor: the same call with a bare kernel uprobe (tracefs uprobe_events, no BPF, event
 * recording off), i.e. what the trap itself costs on this machine. < 0 when tracefs is not
 * available.
 */
static double time_bare_uprobe(const struct libs *l, long calls, bool launch)
{
	const char *root = "/sys/kernel/tracing";
	struct phdr_query q = { .addr = launch ? (uintptr_t)l->launch : (uintptr_t)l->group_start };
	char def[1024], path[256];
	double ns = -1;
	struct stat st;

	if (stat("/sys/kernel/tracing/uprobe_events", &st) &&
	    mount("nodev", root, "tracefs", 0, NULL))
		return -1;
	dl_iterate_phdr(phdr_visit, &q);
	if (!q.found)
		return -1;
	snprintf(def, sizeof(def), "p:sysom_bench/floor %s:0x%llx\n",
		 launch ? l->cuda_path : l->nccl_path,
		 (unsigned long long)q.offset);
	snprintf(path, sizeof(path), "%s/uprobe_events", root);
	if (write_file(path, def, true))
		return -1;
	snprintf(path, sizeof(path), "%s/events/sysom_bench/floor/enable", root);
	char on[8] = "1";
	write_file("/sys/kernel/tracing/tracing_on", "0", false);
	if (write_file(path, on, false) == 0) {
		if (launch) {
			ns = time_launch(l, calls);
		} else {
			time_nccl(l, calls / 10);
			ns = time_nccl(l, calls);
		}
		write_file(path, "0", false);
	}
	write_file("/sys/kernel/tracing/tracing_on", "1", false);
	snprintf(path, sizeof(path), "%s/uprobe_events", root);
	write_file(path, "-:sysom_bench/floor\n", true);
	return ns;
}

struct sink {
	struct nccltrack *nt;
	uint64_t events;
};

static void on_event(void *ctx, const void *data, size_t len)
{
	struct sink *s = ctx;
	struct nccltrack_call out;

	if (nccltrack_event(s->nt, data, len, 0, &out) == 1)
		s->events++;
}

static void on_launch(void *ctx, const struct gt_launch_key *k, const struct gt_launch_value *v)
{
	(void)ctx;
	(void)k;
	(void)v;
}

static struct gputrace *attach(const struct libs *l, struct sink *s, uint32_t ring_bytes)
{
	struct gputrace_options o;
	struct gputrace *g;
	char err[256];

	gputrace_options_default(&o);
	o.on_event = on_event;
	o.ctx = s;
	if (ring_bytes)
		o.ring_bytes = ring_bytes;
	if (gputrace_open(&o, &g, err, sizeof(err))) {
		fprintf(stderr, "gputrace_bench: %s\n", err);
		exit(1);
	}
	if (gputrace_attach_path(g, l->nccl_path) != 1 || gputrace_attach_path(g, l->cuda_path) != 1) {
		fprintf(stderr, "gputrace_bench: cannot attach the probes\n");
		exit(1);
	}
	return g;
}

struct load_arg {
	const struct libs *l;
	atomic_bool *stop;
	uint64_t calls;
};

static void *load_thread(void *p)
{
	struct load_arg *a = p;

	while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
		for (int i = 0; i < 256; i++) {
			a->l->group_start();
			a->l->group_end();
		}
		a->calls += 512;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long calls = 200000;
	int rounds = 7;
	double seconds = 3;
	struct nccltrack_options no;
	struct libs l;
	struct sink s = { 0 };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--calls") && i + 1 < argc)
			calls = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else {
			fprintf(stderr, "usage: gputrace_bench [--calls N] [--rounds R] [--seconds S]\n");
			return 2;
		}
	}
	if (calls < 1000 || rounds < 1 || rounds > 99 || seconds <= 0)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "gputrace_bench: needs root (uprobes)\n");
		return 1;
	}
	if (load_libs(&l))
		return 1;
	nccltrack_options_default(&no);
	if (nccltrack_new(&no, &s.nt))
		return 1;

	double nb[99], nt[99], lb[99], lt[99], nd[99], ld[99], fl[99], fll[99];
	int nfloor = 0, nlfloor = 0;
	for (int r = 0; r < rounds; r++) {
		time_nccl(&l, calls / 10); /* warm */
		nb[r] = time_nccl(&l, calls);
		double f = time_bare_uprobe(&l, calls, false);
		if (f >= 0)
			fl[nfloor++] = f;
		lb[r] = time_launch(&l, calls);
		f = time_bare_uprobe(&l, calls, true);
		if (f >= 0)
			fll[nlfloor++] = f;
		lb[r] = time_launch(&l, calls);
		struct gputrace *g = attach(&l, &s, 64u << 20);
		time_nccl(&l, calls / 10);
		nt[r] = time_nccl(&l, calls);
		lt[r] = time_launch(&l, calls);
		while (gputrace_consume(g) > 0)
			;
		gputrace_drain_launches(g, on_launch, NULL);
		gputrace_close(g);
		nd[r] = nt[r] - nb[r];
		ld[r] = lt[r] - lb[r];
	}
	double mnb = bench_median(nb, rounds), mnt = bench_median(nt, rounds);
	double mlb = bench_median(lb, rounds), mlt = bench_median(lt, rounds);
	printf("| call (median of %d rounds, %ld calls each) | untraced ns | traced ns | added ns | "
	       "ratio |\n|---|---:|---:|---:|---:|\n", rounds, calls);
	if (nfloor) {
		double f = bench_median(fl, nfloor);
		printf("| NCCL API call, bare kernel uprobe on entry (tracefs, no BPF): the trap alone "
		       "| %.0f | %.0f | %.0f | %.1fx |\n", mnb, f, f - mnb, f / mnb);
	}
	printf("| NCCL API call (GroupStart/GroupEnd; entry + return probe, 1 event) | %.0f | %.0f | "
	       "%.0f | %.1fx |\n", mnb, mnt, bench_median(nd, rounds), mnt / mnb);
	if (nlfloor) {
		double f = bench_median(fll, nlfloor);
		printf("| cuLaunchKernel, bare kernel uprobe (tracefs, no BPF): the trap alone | %.0f | "
		       "%.0f | %.0f | %.1fx |\n", mlb, f, f - mlb, f / mlb);
	}
	printf("| cuLaunchKernel (entry probe, user stack, in-kernel count) | %.0f | %.0f | %.0f | "
	       "%.1fx |\n", mlb, mlt, bench_median(ld, rounds), mlt / mlb);

	/* Throughput: every CPU calls NCCL in a loop while this thread consumes the ring as the
	 * agent does (epoll-driven, here polled every millisecond). */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu > 1 ? (int)ncpu - 1 : 1;
	struct gputrace_stats st;
	struct gputrace *g = attach(&l, &s, 4u << 20);
	pthread_t tid[64];
	struct load_arg args[64];
	atomic_bool stop = false;
	uint64_t t0 = bench_now_ns(), produced = 0;

	if (threads > 64)
		threads = 64;
	s.events = 0;
	for (int i = 0; i < threads; i++) {
		args[i] = (struct load_arg){ &l, &stop, 0 };
		pthread_create(&tid[i], NULL, load_thread, &args[i]);
	}
	while (bench_now_ns() - t0 < (uint64_t)(seconds * 1e9)) {
		gputrace_consume(g);
		usleep(1000);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		produced += args[i].calls;
	}
	while (gputrace_consume(g) > 0)
		;
	double elapsed = (double)(bench_now_ns() - t0) / 1e9;
	gputrace_stats_read(g, &st);
	printf("\n| load | threads | NCCL calls/s | events delivered/s | lost | ring |\n"
	       "|---|---:|---:|---:|---:|---:|\n");
	printf("| back-to-back calls for %.0f s | %d | %.0f | %.0f | %llu (%.2f%%) | 4 MiB |\n",
	       seconds, threads, (double)produced / elapsed, (double)s.events / elapsed,
	       (unsigned long long)st.bpf.events_lost,
	       produced ? 100.0 * (double)st.bpf.events_lost / (double)produced : 0.0);
	gputrace_close(g);
	nccltrack_free(s.nt);
	return 0;
}
