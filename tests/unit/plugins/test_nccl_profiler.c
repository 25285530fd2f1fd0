/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL profiler plugin driven exactly as NCCL drives it: dlopen the built
 * libnccl-profiler-sysom.so, dlsym ncclProfiler_v5 (and _v4), init per communicator, events
 * from an application thread and a proxy thread at once, nested parents, windows rolling over
 * while operations are in flight, finalize; the records it sends are read by a test-owned
 * socket standing in for the agent and checked with the agent's own decoders.
 *
 * The plugin keeps process-wide state (settings, channel, thread), so every scenario runs in a
 * fresh child process that loads the library itself.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "plugins/nccl/nccl_profiler_abi.h"
#include "plugins/nccl/profiler.h"
#include "tests/unit/plugins/record_rx.h"

#define DEFAULT_MASK (NCCL_PROF_COLL | NCCL_PROF_P2P | NCCL_PROF_PROXY_OP | \
		      NCCL_PROF_PROXY_STEP | NCCL_PROF_KERNEL_CH)
#define COMM_ID 0xc0ffee0011223344ull

static char sock_path[108];

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns)
{
	uint64_t until = mono_ns() + ns;

	while (mono_ns() < until)
		;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts))
		;
}

static void *load_plugin(void)
{
	const char *build = getenv("SYSOM_BUILD"); /* set by main, which skips without it */
	char path[4096];
	void *h;

	snprintf(path, sizeof(path), "%s/lib/libnccl-profiler-sysom.so", build);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
	return h;
}

/* Runs `fn` in a child with the plugin's environment; the test passes when it exits 0. */
static void run_child(void (*fn)(void), const char *window_events, bool agent)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		if (agent)
			setenv("SYSOM_SOCKET_PATH", sock_path, 1);
		else
			unsetenv("SYSOM_SOCKET_PATH");
		setenv("SYSOM_NCCL_WINDOW_EVENTS", window_events, 1);
		setenv("SYSOM_NCCL_WINDOW_MS", "20", 1);
		setenv("SYSOM_NCCL_LINGER_MS", "100", 1);
		fn();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("scenario child failed (status %#x)", status);
}

/* ---- event helpers (as NCCL fills descriptors) ---- */

struct drv {
	const struct nccl_profiler_v5 *p;
	void *ctx;
};

static void *coll_start(struct drv *d, uint64_t seq, const char *func, size_t count,
			const char *algo, const char *proto, uint8_t nch)
{
	struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_COLL, .rank = 1 };
	void *h = NULL;

	e.u.coll.seqNumber = seq;
	e.u.coll.func = func;
	e.u.coll.count = count;
	e.u.coll.datatype = "ncclFloat32";
	e.u.coll.nChannels = nch;
	e.u.coll.algo = algo;
	e.u.coll.proto = proto;
	CHECK(d->p->startEvent(d->ctx, &h, &e) == 0);
	return h;
}

static void *kch_start(struct drv *d, void *parent, uint8_t ch, uint64_t gpu_start)
{
	struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_KERNEL_CH, .parentObj = parent };
	void *h = NULL;

	e.u.kernelCh.channelId = ch;
	e.u.kernelCh.pTimer = gpu_start;
	CHECK(d->p->startEvent(d->ctx, &h, &e) == 0);
	return h;
}

static void kch_stop(struct drv *d, void *h, uint64_t gpu_stop)
{
	union nccl_prof_state_args a = { .kernelCh = { .pTimer = gpu_stop } };

	CHECK(d->p->recordEventState(h, NCCL_PROF_STATE_KERNEL_CH_STOP, &a) == 0);
	CHECK(d->p->stopEvent(h) == 0);
}

static void *proxy_op_start(struct drv *d, void *parent, pid_t pid, uint8_t ch, int peer,
			    int is_send)
{
	struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_PROXY_OP, .parentObj = parent };
	void *h = NULL;

	e.u.proxyOp.pid = pid;
	e.u.proxyOp.channelId = ch;
	e.u.proxyOp.peer = peer;
	e.u.proxyOp.nSteps = 2;
	e.u.proxyOp.isSend = is_send;
	CHECK(d->p->startEvent(d->ctx, &h, &e) == 0);
	return h;
}

/* One send step of `bytes` whose transfer (SendWait → stop) takes `ns`. */
static void step(struct drv *d, void *op, int n, size_t bytes, uint64_t ns)
{
	struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_PROXY_STEP, .parentObj = op };
	union nccl_prof_state_args a = { .proxyStep = { .transSize = bytes } };
	void *h = NULL;

	e.u.proxyStep.step = n;
	CHECK(d->p->startEvent(d->ctx, &h, &e) == 0);
	CHECK(d->p->recordEventState(h, NCCL_PROF_STATE_PROXY_STEP_SEND_GPU_WAIT, &a) == 0);
	CHECK(d->p->recordEventState(h, NCCL_PROF_STATE_PROXY_STEP_SEND_WAIT, &a) == 0);
	spin_ns(ns);
	CHECK(d->p->stopEvent(h) == 0);
}

static int *the_mask;

static void drv_open(struct drv *d, int lfd, struct rx *rx, uint64_t comm_id, int nranks,
		     int rank)
{
	void *lib = load_plugin();
	static int mask;

	CHECK(lib);
	d->p = dlsym(lib, "ncclProfiler_v5");
	CHECK(d->p && d->p->name && !strcmp(d->p->name, "sysom"));
	CHECK(d->p->init(&d->ctx, comm_id, &mask, "world", 1, nranks, rank, NULL) == 0);
	CHECK(d->ctx != NULL);
	CHECK(mask == DEFAULT_MASK);
	the_mask = &mask;
	(void)lfd;
	(void)rx;
}

/* ---- scenarios ---- */

/* Ten AllReduce with two channels each: kernel (GPU) time, enqueue, transfers, links; a
 * receive-side proxy operation and a ProxyCtrl event are skipped. */
static void scenario_aggregates(void)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;
	struct drv d;
	pid_t me = getpid();

	CHECK(lfd >= 0);
	rx_init(&rx);
	drv_open(&d, lfd, &rx, COMM_ID, 4, 1);
	for (int i = 0; i < 10; i++) {
		void *c = coll_start(&d, (uint64_t)i, "AllReduce", 1024, "Ring", "LL", 2);
		uint64_t g = 1000000ull * (uint64_t)(i + 1);
		CHECK(c);
		CHECK(d.p->stopEvent(c) == 0); /* enqueued */
		void *k0 = kch_start(&d, c, 0, g), *k1 = kch_start(&d, c, 1, g + 500);
		for (uint8_t ch = 0; ch < 2; ch++) {
			void *op = proxy_op_start(&d, c, me, ch, 2, 1);
			CHECK(op);
			step(&d, op, 0, 1000, 1000);
			step(&d, op, 1, 3000, 1000);
			CHECK(d.p->stopEvent(op) == 0);
			void *rop = proxy_op_start(&d, c, me, ch, 0, 0); /* receive side */
			CHECK(rop == NULL);
		}
		kch_stop(&d, k0, g + 5000);
		kch_stop(&d, k1, g + 6000);
	}
	struct nccl_prof_descr_v5 ctrl = { .type = NCCL_PROF_PROXY_CTRL };
	void *h = (void *)1;
	CHECK(d.p->startEvent(d.ctx, &h, &ctrl) == 0 && h == NULL);
	CHECK(d.p->finalize(d.ctx) == 0);
	rx_drain(lfd, &rx, 300);

	CHECK(rx.bad == 0);
	CHECK(rx.hellos >= 1 && rx.hello.component == SYSOM_COMPONENT_NCCL_PROFILER);
	CHECK(rx.hello.interface == 5 && rx.hello.activation_mask == DEFAULT_MASK);
	CHECK(rx.ncomms >= 2 && rx.comms[0].comm_id == COMM_ID && !strcmp(rx.comms[0].name, "world"));
	CHECK(rx.comms[0].rank == 1 && rx.comms[0].nranks == 4 && rx.finalized == 1);
	const struct rx_coll *c = rx_find_coll(&rx, "AllReduce", -1);
	CHECK(c && rx.ncolls == 1);
	CHECK(!strcmp(c->algo, "Ring") && !strcmp(c->proto, "LL") && !strcmp(c->datatype, "ncclFloat32"));
	CHECK(c->r.count == 10 && c->r.bytes == 10 * 4096);
	CHECK(c->r.kernel_timed == 10 && c->r.kernel_ns_total == 60000);
	CHECK(c->r.kernel_ns_min == 6000 && c->r.kernel_ns_max == 6000);
	CHECK(c->r.span_timed == 10 && c->r.span_ns_total > 0);
	CHECK(c->r.enqueue_ns_total > 0 && c->r.nchannels == 2);
	CHECK(c->r.transfers == 40 && c->r.transfer_bytes == 40 * 2000);
	CHECK(c->r.first_seq == 0 && c->r.last_seq == 9);
	const struct rx_link *l0 = rx_find_link(&rx, 2, 0), *l1 = rx_find_link(&rx, 2, 1);
	const struct rx_link *la = rx_find_link(&rx, 2, -1);
	CHECK(l0 && l1 && la && rx.nlinks == 3); /* no link to the receive side's peer 0 */
	CHECK(l0->r.transfers == 20 && la->r.transfers == 40 && la->r.bytes == 80000);
	CHECK(la->r.sx == 80000.0 && la->r.sxx == 20.0 * (1e6 + 9e6));
	CHECK(rx.stats[SYSOM_STAT_EVENTS] == 10 * (1 + 2 + 2 * 3));
	CHECK(rx.stats[SYSOM_STAT_EVENTS_DROPPED] == 0 && rx.stats[SYSOM_STAT_ORPHANS] == 0);
	CHECK(rx.stats[SYSOM_STAT_FORCED_CLOSES] == 0 && rx.stats[SYSOM_STAT_WINDOWS] >= 1);
	close(lfd);
}

/* Transfers constructed on the line time = 5000 ns + bytes / 12.5: the link fits recover the
 * latency and the bandwidth (MIN mode through the fastest transfer of each size). */
static void scenario_regression(void)
{
	static const size_t sizes[] = { 1000, 4000, 8000, 16000, 25000 };
	int lfd = rx_listen(sock_path);
	struct rx rx;
	struct drv d;

	CHECK(lfd >= 0);
	rx_init(&rx);
	drv_open(&d, lfd, &rx, COMM_ID, 4, 1);
	for (int rep = 0; rep < 6; rep++) {
		struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_P2P, .rank = 1 };
		void *p = NULL;
		e.u.p2p.func = "Send";
		e.u.p2p.datatype = "ncclInt8";
		e.u.p2p.count = 54000;
		e.u.p2p.peer = 3;
		e.u.p2p.nChannels = 1;
		CHECK(d.p->startEvent(d.ctx, &p, &e) == 0 && p);
		CHECK(d.p->stopEvent(p) == 0);
		void *op = proxy_op_start(&d, p, getpid(), 0, 3, 1);
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			step(&d, op, (int)s, sizes[s], 5000 + (uint64_t)((double)sizes[s] / 12.5));
		CHECK(d.p->stopEvent(op) == 0);
	}
	CHECK(d.p->finalize(d.ctx) == 0);
	rx_drain(lfd, &rx, 300);
	CHECK(rx.bad == 0);
	const struct rx_coll *c = rx_find_coll(&rx, "Send", 3);
	CHECK(c && c->r.count == 6 && c->r.bytes == 6 * 54000 && c->algo[0] == '\0');
	CHECK(c->r.transfers == 30 && c->r.transfer_bytes == 6 * 54000);
	const struct rx_link *l = rx_find_link(&rx, 3, -1);
	CHECK(l && l->r.transfers == 30);
	/* MIN mode: robust to a preempted spin. */
	fprintf(stderr, "MIN fit: latency %.0f ns, %.2f B/ns, R2 %.4f over %u sizes\n",
		l->r.min_latency_ns, l->r.min_bytes_per_ns, l->r.min_r2, l->r.min_points);
	CHECK(l->r.min_points == 5);
	CHECK(l->r.min_latency_ns > 4500 && l->r.min_latency_ns < 6000);
	CHECK(l->r.min_bytes_per_ns > 11 && l->r.min_bytes_per_ns < 14);
	CHECK(l->r.min_r2 > 0.98);
	/* The least-squares sums over every transfer give the same line (looser: outliers). */
	double n = (double)l->r.transfers, den = n * l->r.sxx - l->r.sx * l->r.sx;
	double slope = (n * l->r.sxy - l->r.sx * l->r.sy) / den;
	double latency = (l->r.sy - slope * l->r.sx) / n;
	fprintf(stderr, "OLS fit: latency %.0f ns, %.2f B/ns\n", latency, 1 / slope);
	/* Least squares over every transfer is at the mercy of a preempted spin (that is why the
	 * MIN mode exists; the server's exact fit from these sums is tested in test_api): here
	 * the sums must agree with the totals they summarise. */
	CHECK(l->r.sx == (double)l->r.bytes && fabs(l->r.sy - (double)l->r.time_ns_total) < 1);
	CHECK(l->r.sy >= 30 * 5000.0);
	close(lfd);
}

/* Least squares from a link's sufficient statistics, as the server computes it. */
static void ols_fit(const struct sysom_rec_link *r, double *latency, double *bytes_per_ns,
		    double *r2)
{
	double n = (double)r->transfers, den = n * r->sxx - r->sx * r->sx;
	double num = n * r->sxy - r->sx * r->sy, tot = n * r->syy - r->sy * r->sy;
	double slope = num / den;

	*latency = (r->sy - slope * r->sx) / n;
	*bytes_per_ns = 1.0 / slope;
	*r2 = num * num / (den * tot);
}

/* The same regression on constructed data, exact: a window is written by hand (the times a
 * real run would stamp) and aggregated by the plugin's own aggregation code, linked into this
 * test; its tables go through a real channel to the test's socket. Channel 0's transfers lie
 * exactly on time = 5000 ns + bytes / 12.5; channel 1 has the same fastest transfers plus
 * queued (slower) repeats, which the MIN fit ignores and plain least squares does not. */
static void scenario_regression_exact(void)
{
	static const uint64_t sizes[] = { 1000, 4000, 8000, 16000, 25000, 100000 };
	enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]), NSLOTS = 64 };
	int lfd = rx_listen(sock_path);
	struct prof_context *ctx = calloc(1, sizeof(*ctx));
	struct prof_event *slots = calloc(NSLOTS, sizeof(*slots));
	struct sysom_table *t = malloc(sizeof(*t));
	struct sysom_channel *ch = NULL;
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_NCCL_PROFILER,
					   .interface = 5, .name = "exact", .path = sock_path };
	struct prof_window *w;
	struct rx rx;
	uint32_t n = 0, tag;
	uint64_t events = 0;

	CHECK(lfd >= 0 && ctx && slots && t);
	CHECK(sysom_channel_open(&o, &ch) == 0);
	rx_init(&rx);
	ctx->comm_id = COMM_ID;
	ctx->nslots = NSLOTS;
	w = &ctx->win[0];
	w->ctx = ctx;
	w->slots = slots;
	w->opened_real = 1000;
	w->closed_real = 2000;
	atomic_store(&w->gen, 1);
	tag = win_tag(1);
	/* Slot 0: a Send to peer 3, enqueued in 700 ticks; channel 0 sends each size once,
	 * channel 1 twice, so it carries 3 x the sizes' sum (154000). */
	slots[n++] = (struct prof_event){ .type = EV_P2P, .flags = EV_STOPPED, .peer = 3,
					  .nchannels = 2, .parent = EV_NO_PARENT,
					  .start_ns = 100, .stop_ns = 800, .bytes = 3 * 154000,
					  .func = "Send", .datatype = "ncclInt8", .win = w };
	for (uint8_t c = 0; c < 2; c++) {
		uint32_t op = n;
		uint64_t clock = 1000;
		slots[n++] = (struct prof_event){ .type = EV_PROXY_OP, .flags = EV_STOPPED | EV_SEND,
						  .channel = c, .peer = 3, .parent = 0, .win = w };
		for (int rep = 0; rep < (c ? 2 : 1); rep++) {
			for (int i = 0; i < NSIZES; i++) {
				uint64_t ns = 5000 + sizes[i] * 2 / 25; /* bytes / 12.5, exact */
				if (rep)
					ns += 3000 + 1000 * (uint64_t)i; /* queued behind others */
				slots[n++] = (struct prof_event){
					.type = EV_PROXY_STEP, .flags = EV_STOPPED | EV_SEND_WAIT,
					.parent = op, .wait_ns = clock, .stop_ns = clock + ns,
					.bytes = sizes[i], .win = w };
				clock += ns;
			}
		}
		slots[op].stop_ns = clock + 50;
	}
	for (uint32_t i = 0; i < n; i++)
		atomic_store(&slots[i].tag, tag);
	CHECK(prof_window_aggregate(ctx, w, n, 1.0, ch, t, &events) == 0);
	CHECK(events == n);
	rx_drain(lfd, &rx, 100);
	CHECK(rx.bad == 0 && rx.tables == 2);

	const struct rx_coll *sc = rx_find_coll(&rx, "Send", 3);
	CHECK(sc && sc->r.count == 1 && sc->r.bytes == 3 * 154000 && sc->r.nchannels == 2);
	CHECK(sc->r.transfers == 3 * NSIZES && sc->r.transfer_bytes == 3 * 154000);
	CHECK(sc->r.enqueue_ns_total == 700 && sc->r.kernel_timed == 0);
	/* Span: the Send's start to its last ProxyOp stop. */
	CHECK(sc->r.span_timed == 1 && sc->r.span_ns_total == slots[2 + NSIZES].stop_ns - 100);

	double lat, bw, r2;
	const struct rx_link *l0 = rx_find_link(&rx, 3, 0), *l1 = rx_find_link(&rx, 3, 1);
	const struct rx_link *la = rx_find_link(&rx, 3, -1);
	CHECK(l0 && l1 && la && rx.nlinks == 3);
	CHECK(l0->r.transfers == NSIZES && l0->r.bytes == 154000);
	CHECK(l0->r.time_ns_total == NSIZES * 5000 + 154000 * 2 / 25);
	ols_fit(&l0->r, &lat, &bw, &r2);
	fprintf(stderr, "exact OLS ch0: latency %.6f ns, %.6f B/ns, R2 %.9f\n", lat, bw, r2);
	CHECK(fabs(lat - 5000) < 1e-6 && fabs(bw - 12.5) < 1e-9 && fabs(r2 - 1) < 1e-9);
	CHECK(l0->r.min_points == NSIZES && fabs(l0->r.min_latency_ns - 5000) < 1e-6);
	CHECK(fabs(l0->r.min_bytes_per_ns - 12.5) < 1e-9 && fabs(l0->r.min_r2 - 1) < 1e-9);
	/* Channel 1: the MIN fit keeps the line; least squares over every transfer does not. */
	CHECK(l1->r.transfers == 2 * NSIZES && l1->r.min_points == NSIZES);
	CHECK(fabs(l1->r.min_latency_ns - 5000) < 1e-6 && fabs(l1->r.min_bytes_per_ns - 12.5) < 1e-9);
	ols_fit(&l1->r, &lat, &bw, &r2);
	fprintf(stderr, "exact OLS ch1 (queued repeats): latency %.0f ns, %.2f B/ns, R2 %.4f\n",
		lat, bw, r2);
	CHECK(lat > 6000 && r2 < 0.999);
	/* The all-channel row holds every transfer and fits through the fastest per size. */
	CHECK(la->r.transfers == 3 * NSIZES && la->r.bytes == 3 * 154000);
	CHECK(la->r.sx == l0->r.sx + l1->r.sx && la->r.syy == l0->r.syy + l1->r.syy);
	CHECK(la->r.min_points == NSIZES && fabs(la->r.min_latency_ns - 5000) < 1e-6);
	CHECK(fabs(la->r.min_bytes_per_ns - 12.5) < 1e-9 && fabs(la->r.min_r2 - 1) < 1e-9);

	/* One size only: no MIN fit (NaN), two points needed. */
	uint32_t k = 0;
	slots[k++] = (struct prof_event){ .type = EV_P2P, .flags = EV_STOPPED, .peer = 5,
					  .parent = EV_NO_PARENT, .func = "Send", .win = w };
	slots[k++] = (struct prof_event){ .type = EV_PROXY_OP, .flags = EV_STOPPED | EV_SEND,
					  .peer = 5, .parent = 0, .win = w };
	for (int i = 0; i < 3; i++)
		slots[k++] = (struct prof_event){ .type = EV_PROXY_STEP,
						  .flags = EV_STOPPED | EV_SEND_WAIT, .parent = 1,
						  .wait_ns = 0, .stop_ns = 9000 + (uint64_t)i,
						  .bytes = 4096, .win = w };
	for (uint32_t i = 0; i < k; i++)
		atomic_store(&slots[i].tag, tag);
	int cfd = rx.cfd; /* the channel's connection, already accepted */
	rx_init(&rx);
	rx.cfd = cfd;
	CHECK(prof_window_aggregate(ctx, w, k, 1.0, ch, t, &events) == 0);
	rx_drain(lfd, &rx, 100);
	const struct rx_link *one = rx_find_link(&rx, 5, -1);
	CHECK(one && one->r.transfers == 3 && one->r.min_points == 1);
	CHECK(isnan(one->r.min_latency_ns) && isnan(one->r.min_bytes_per_ns) &&
	      isnan(one->r.min_r2));

	sysom_channel_close(ch);
	free(t);
	free(slots);
	free(ctx);
	close(cfd);
	close(lfd);
}

/* An application thread enqueues operations and stops their kernels; a proxy thread runs
 * their network steps at the same time; windows roll over (20 ms) while operations are in
 * flight. Nothing is lost or orphaned. */
#define CONC_OPS 200
static struct drv conc;
static void *conc_handles[CONC_OPS];
static _Atomic int conc_posted, conc_proxied;

static void *proxy_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < CONC_OPS; i++) {
		while (atomic_load(&conc_posted) <= i)
			;
		void *op = proxy_op_start(&conc, conc_handles[i], getpid(), (uint8_t)(i % 4), 2, 1);
		CHECK(op);
		step(&conc, op, 0, 2048, 200);
		step(&conc, op, 1, 4096, 200);
		CHECK(conc.p->stopEvent(op) == 0);
		atomic_store(&conc_proxied, i + 1);
	}
	return NULL;
}

static void scenario_concurrent(void)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;
	pthread_t proxy;

	CHECK(lfd >= 0);
	rx_init(&rx);
	drv_open(&conc, lfd, &rx, COMM_ID, 8, 1);
	CHECK(pthread_create(&proxy, NULL, proxy_thread, NULL) == 0);
	for (int i = 0; i < CONC_OPS; i++) {
		void *c = coll_start(&conc, (uint64_t)i, "AllGather", 256, "Ring", "Simple", 4);
		CHECK(c);
		CHECK(conc.p->stopEvent(c) == 0);
		void *k = kch_start(&conc, c, 0, 10000ull * (uint64_t)i);
		conc_handles[i] = c;
		atomic_store(&conc_posted, i + 1);
		while (atomic_load(&conc_proxied) <= i)
			;
		kch_stop(&conc, k, 10000ull * (uint64_t)i + 3000);
		if (i % 10 == 9)
			sleep_ms(3); /* let windows age and roll over mid-run */
		if (i % 50 == 49)
			rx_drain(lfd, &rx, 1);
	}
	CHECK(pthread_join(proxy, NULL) == 0);
	CHECK(conc.p->finalize(conc.ctx) == 0);
	rx_drain(lfd, &rx, 300);
	CHECK(rx.bad == 0);
	const struct rx_coll *c = rx_find_coll(&rx, "AllGather", -1);
	CHECK(c);
	fprintf(stderr, "count %llu kernel_timed %llu transfers %llu orphans %llu dropped %llu forced %llu\n",
		(unsigned long long)c->r.count, (unsigned long long)c->r.kernel_timed,
		(unsigned long long)c->r.transfers, (unsigned long long)rx.stats[SYSOM_STAT_ORPHANS],
		(unsigned long long)rx.stats[SYSOM_STAT_EVENTS_DROPPED],
		(unsigned long long)rx.stats[SYSOM_STAT_FORCED_CLOSES]);
	CHECK(c->r.count == CONC_OPS && c->r.kernel_timed == CONC_OPS);
	CHECK(c->r.kernel_ns_total == 3000ull * CONC_OPS);
	CHECK(c->r.transfers == 2 * CONC_OPS && c->r.transfer_bytes == 6144ull * CONC_OPS);
	CHECK(c->r.first_seq == 0 && c->r.last_seq == CONC_OPS - 1);
	fprintf(stderr, "windows %llu, tables %d\n", (unsigned long long)rx.stats[SYSOM_STAT_WINDOWS],
		rx.tables);
	CHECK(rx.stats[SYSOM_STAT_WINDOWS] >= 3); /* it rolled over */
	CHECK(rx.stats[SYSOM_STAT_ORPHANS] == 0 && rx.stats[SYSOM_STAT_EVENTS_DROPPED] == 0);
	const struct rx_link *l = rx_find_link(&rx, 2, -1);
	CHECK(l && l->r.transfers == 2 * CONC_OPS);
	for (int ch = 0; ch < 4; ch++)
		CHECK(rx_find_link(&rx, 2, ch) && rx_find_link(&rx, 2, ch)->r.transfers == CONC_OPS / 2);
	close(lfd);
}

/* An operation open across a rollover keeps its window: its late kernel lands with it. A
 * child arriving after its parent's window was processed is an orphan; a PXN proxy operation
 * (another process's rank) never touches its foreign parent pointer; an operation still open
 * at finalize is a forced close; the agent changes the activation mask at run time. */
static void scenario_inflight(void)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;
	struct drv d;

	CHECK(lfd >= 0);
	rx_init(&rx);
	drv_open(&d, lfd, &rx, COMM_ID, 4, 1);
	void *a = coll_start(&d, 7, "Broadcast", 10, "Tree", "LL128", 1);
	CHECK(a);
	sleep_ms(80); /* the window rolls over with `a` open */
	void *k = kch_start(&d, a, 0, 100);
	CHECK(k);
	kch_stop(&d, k, 900);
	CHECK(d.p->stopEvent(a) == 0);
	sleep_ms(400); /* lingered and processed */
	CHECK(kch_start(&d, a, 1, 100) == NULL); /* orphan */
	CHECK(d.p->stopEvent(a) == 0);           /* a stale handle: ignored, counted */

	/* PXN: the parent pointer is another process's; it must not be dereferenced. */
	void *pxn = proxy_op_start(&d, (void *)0x10, getpid() + 100000, 3, 0, 1);
	CHECK(pxn);
	step(&d, pxn, 0, 4096, 100);
	CHECK(d.p->stopEvent(pxn) == 0);

	/* The agent asks for collectives only. */
	rx_drain(lfd, &rx, 50);
	uint32_t m[2] = { NCCL_PROF_COLL, 0 };
	CHECK(rx_send(&rx, SYSOM_REC_MASK, m, sizeof(m)) == 0);
	for (int i = 0; i < 100 && *the_mask != NCCL_PROF_COLL; i++)
		sleep_ms(5);
	CHECK(*the_mask == NCCL_PROF_COLL);
	/* Bits the plugin does not understand are dropped. */
	m[0] = NCCL_PROF_COLL | NCCL_PROF_GROUP_API | NCCL_PROF_KERNEL_CH;
	CHECK(rx_send(&rx, SYSOM_REC_MASK, m, sizeof(m)) == 0);
	for (int i = 0; i < 100 && *the_mask != (NCCL_PROF_COLL | NCCL_PROF_KERNEL_CH); i++)
		sleep_ms(5);
	CHECK(*the_mask == (NCCL_PROF_COLL | NCCL_PROF_KERNEL_CH));
	/* A communicator created now starts with the agent's mask, not the default. */
	int late_mask = -1;
	void *late = NULL;
	CHECK(d.p->init(&late, COMM_ID + 1, &late_mask, "late", 1, 4, 1, NULL) == 0 && late);
	CHECK(late_mask == (NCCL_PROF_COLL | NCCL_PROF_KERNEL_CH));
	CHECK(d.p->finalize(late) == 0);

	void *open_at_end = coll_start(&d, 8, "Broadcast", 10, "Tree", "LL128", 1);
	CHECK(open_at_end);
	CHECK(d.p->finalize(d.ctx) == 0);
	rx_drain(lfd, &rx, 300);
	CHECK(rx.bad == 0);
	const struct rx_coll *c = rx_find_coll(&rx, "Broadcast", -1);
	CHECK(c && c->r.count == 2 && c->r.kernel_timed == 1 && c->r.kernel_ns_total == 800);
	CHECK(!strcmp(c->algo, "Tree") && !strcmp(c->proto, "LL128"));
	CHECK(c->r.first_seq == 7 && c->r.last_seq == 8);
	CHECK(rx.stats[SYSOM_STAT_ORPHANS] == 2);
	CHECK(rx.stats[SYSOM_STAT_FORCED_CLOSES] == 1);
	const struct rx_link *l = rx_find_link(&rx, 0, 3);
	CHECK(l && l->r.transfers == 1 && l->r.bytes == 4096); /* the PXN transfer */
	CHECK(rx.hello.activation_mask == DEFAULT_MASK);
	close(lfd);
}

/* fork() with the plugin running: the child (e.g. a data-loader worker that then makes its own
 * communicator) gets its own background thread and its own connection, and nothing hangs. */
static void scenario_fork(void)
{
	int lfd = rx_listen(sock_path), status;
	struct rx rx;
	struct drv d;
	pid_t pid;

	CHECK(lfd >= 0);
	rx_init(&rx);
	drv_open(&d, lfd, &rx, COMM_ID, 2, 0);
	for (int i = 0; i < 50; i++) {
		void *c = coll_start(&d, (uint64_t)i, "AllReduce", 64, "Ring", "LL", 1);
		CHECK(c && d.p->stopEvent(c) == 0);
	}
	rx_drain(lfd, &rx, 50);
	CHECK(rx.hellos == 1);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int mask = 0;
		void *ctx = NULL, *h = NULL;
		struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_COLL };

		alarm(20); /* a deadlock fails the test instead of hanging it */
		e.u.coll.func = "Broadcast";
		CHECK(d.p->init(&ctx, COMM_ID + 7, &mask, "child", 1, 1, 0, NULL) == 0 && ctx);
		CHECK(mask == DEFAULT_MASK);
		CHECK(d.p->startEvent(ctx, &h, &e) == 0 && h && d.p->stopEvent(h) == 0);
		CHECK(d.p->finalize(ctx) == 0);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	rx_drain(lfd, &rx, 200); /* the child's connection (it replaces the parent's here) */
	CHECK(rx.bad == 0 && rx.hellos == 2);
	CHECK(rx_find_coll(&rx, "Broadcast", -1) && rx_find_coll(&rx, "Broadcast", -1)->r.count == 1);
	CHECK(rx.finalized == 1 && rx.comms[rx.ncomms - 1].comm_id == COMM_ID + 7);
	CHECK(d.p->finalize(d.ctx) == 0); /* the parent goes on */
	close(lfd);
}

/* NCCL 2.27: the same plugin through ncclProfiler_v4 (8-bit type, commHash after the name). */
static void scenario_v4(void)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;
	void *lib = load_plugin(), *ctx = NULL;
	const struct nccl_profiler_v4 *p;
	int mask = 0;

	CHECK(lfd >= 0 && lib);
	rx_init(&rx);
	p = dlsym(lib, "ncclProfiler_v4");
	CHECK(p && !strcmp(p->name, "sysom"));
	CHECK(p->init(&ctx, &mask, "dp", 0x4444ull, 2, 8, 5, NULL) == 0 && ctx);
	CHECK(mask == DEFAULT_MASK);
	for (int i = 0; i < 5; i++) {
		struct nccl_prof_descr_v4 e = { .type = NCCL_PROF_COLL, .rank = 5 };
		void *h = NULL, *k = NULL;
		e.u.coll.seqNumber = (uint64_t)(100 + i);
		e.u.coll.func = "ReduceScatter";
		e.u.coll.count = 512;
		e.u.coll.datatype = "ncclBfloat16";
		e.u.coll.nChannels = 1;
		e.u.coll.algo = "Ring";
		e.u.coll.proto = "Simple";
		CHECK(p->startEvent(ctx, &h, &e) == 0 && h);
		CHECK(p->stopEvent(h) == 0);
		struct nccl_prof_descr_v4 kc = { .type = NCCL_PROF_KERNEL_CH, .parentObj = h };
		kc.u.kernelCh.pTimer = 50;
		CHECK(p->startEvent(ctx, &k, &kc) == 0 && k);
		union nccl_prof_state_args a = { .kernelCh = { .pTimer = 2050 } };
		CHECK(p->recordEventState(k, NCCL_PROF_STATE_KERNEL_CH_STOP, &a) == 0);
		CHECK(p->stopEvent(k) == 0);
		/* Its network send: ProxyOp → ProxyStep (SendWait carries the size). */
		struct nccl_prof_descr_v4 po = { .type = NCCL_PROF_PROXY_OP, .parentObj = h };
		void *op = NULL, *st = NULL;
		po.u.proxyOp.pid = getpid();
		po.u.proxyOp.channelId = 1;
		po.u.proxyOp.peer = 6;
		po.u.proxyOp.nSteps = 1;
		po.u.proxyOp.isSend = 1;
		CHECK(p->startEvent(ctx, &op, &po) == 0 && op);
		struct nccl_prof_descr_v4 ps = { .type = NCCL_PROF_PROXY_STEP, .parentObj = op };
		CHECK(p->startEvent(ctx, &st, &ps) == 0 && st);
		union nccl_prof_state_args sa = { .proxyStep = { .transSize = 1024 } };
		CHECK(p->recordEventState(st, NCCL_PROF_STATE_PROXY_STEP_SEND_WAIT, &sa) == 0);
		CHECK(p->stopEvent(st) == 0);
		CHECK(p->stopEvent(op) == 0);
		po.u.proxyOp.isSend = 0; /* the receive side is not recorded */
		CHECK(p->startEvent(ctx, &op, &po) == 0 && op == NULL);
	}
	CHECK(p->finalize(ctx) == 0);
	rx_drain(lfd, &rx, 300);
	CHECK(rx.bad == 0 && rx.hello.interface == 4);
	CHECK(rx.ncomms >= 1 && rx.comms[0].comm_id == 0x4444 && rx.comms[0].rank == 5 &&
	      rx.comms[0].nnodes == 2 && !strcmp(rx.comms[0].name, "dp"));
	const struct rx_coll *c = rx_find_coll(&rx, "ReduceScatter", -1);
	CHECK(c && c->r.count == 5 && c->r.bytes == 5 * 1024 && c->r.kernel_ns_total == 5 * 2000);
	CHECK(c->r.first_seq == 100 && c->r.last_seq == 104 && !strcmp(c->datatype, "ncclBfloat16"));
	CHECK(c->r.transfers == 5 && c->r.transfer_bytes == 5 * 1024 && c->r.span_timed == 5);
	const struct rx_link *l = rx_find_link(&rx, 6, 1), *la = rx_find_link(&rx, 6, -1);
	CHECK(l && la && l->r.transfers == 5 && la->r.bytes == 5 * 1024 && rx.nlinks == 2);
	CHECK(rx.finalized == 1 && rx.stats[SYSOM_STAT_EVENTS] == 5 * 4);
	CHECK(rx.stats[SYSOM_STAT_ORPHANS] == 0 && rx.stats[SYSOM_STAT_EVENTS_DROPPED] == 0);
	close(lfd);
}

/* No agent configured: init succeeds, the mask is empty (NCCL then makes no events), every
 * call is a no-op. An agent path with nobody listening: events are processed, records are
 * dropped and counted, nothing blocks. */
static void scenario_no_agent(void)
{
	void *lib = load_plugin(), *ctx = (void *)1, *h = (void *)1;
	const struct nccl_profiler_v5 *p;
	int mask = -1;

	CHECK(lib);
	p = dlsym(lib, "ncclProfiler_v5");
	CHECK(p->init(&ctx, 1, &mask, NULL, 1, 1, 0, NULL) == 0);
	CHECK(ctx == NULL && mask == 0);
	struct nccl_prof_descr_v5 e = { .type = NCCL_PROF_COLL };
	CHECK(p->startEvent(ctx, &h, &e) == 0 && h == NULL);
	CHECK(p->stopEvent(NULL) == 0 && p->recordEventState(NULL, 9, NULL) == 0);
	CHECK(p->finalize(ctx) == 0);
}

static void scenario_agent_absent(void)
{
	struct drv d;
	uint64_t t0 = mono_ns();

	unlink(sock_path); /* configured, but nobody listens */
	drv_open(&d, -1, NULL, COMM_ID, 2, 0);
	for (int i = 0; i < 1000; i++) {
		void *c = coll_start(&d, (uint64_t)i, "AllReduce", 1, "Ring", "LL", 1);
		CHECK(d.p->stopEvent(c) == 0);
	}
	sleep_ms(60);
	CHECK(d.p->finalize(d.ctx) == 0);
	CHECK(mono_ns() - t0 < 5000000000ull);
}

/* What NCCL's logger received. */
static struct {
	int warns, infos, other_flags;
	char warn[512], info[512];
} logged;

static void capture_logger(int level, unsigned long flags, const char *file, int line,
			   const char *fmt, ...)
{
	char text[512];
	va_list ap;

	(void)file;
	(void)line;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (flags != NCCL_LOG_SUBSYS_PROFILE)
		logged.other_flags++;
	if (level == NCCL_LOG_LEVEL_WARN) {
		logged.warns++;
		snprintf(logged.warn, sizeof(logged.warn), "%s", text);
	} else if (level == NCCL_LOG_LEVEL_INFO) {
		logged.infos++;
		snprintf(logged.info, sizeof(logged.info), "%s", text);
	}
}

/* Runs init (v5) with `logfn` and stderr captured; returns the bytes written to stderr. */
static long init_capturing_stderr(nccl_debug_logger_t logfn)
{
	void *lib = load_plugin(), *ctx = (void *)1;
	const struct nccl_profiler_v5 *p;
	char path[] = "/tmp/sysom-nccl-stderr-XXXXXX";
	int mask = -1, fd = mkstemp(path), saved = dup(2);
	long len;

	CHECK(lib && fd >= 0 && saved >= 0);
	unlink(path);
	p = dlsym(lib, "ncclProfiler_v5");
	CHECK(dup2(fd, 2) == 2);
	CHECK(p->init(&ctx, 1, &mask, NULL, 1, 1, 0, logfn) == 0);
	CHECK(dup2(saved, 2) == 2);
	CHECK(ctx == NULL && mask == 0);
	CHECK(p->finalize(ctx) == 0);
	len = lseek(fd, 0, SEEK_END);
	close(fd);
	close(saved);
	return len;
}

/* A bad setting is a warning through the logger NCCL gave init (subsystem PROFILE), and
 * whether events flow is an INFO line; nothing on stderr. */
static void scenario_logger(void)
{
	CHECK(init_capturing_stderr(capture_logger) == 0);
	CHECK(logged.warns == 1 && logged.other_flags == 0);
	CHECK(strstr(logged.warn, "sysom NCCL profiler: ignoring SYSOM_NCCL_WINDOW_EVENTS=bogus"));
	CHECK(logged.infos == 1 && strstr(logged.info, "no sysom agent"));
}

/* Without a logger the warning goes to stderr, as before. */
static void scenario_no_logger(void)
{
	CHECK(init_capturing_stderr(NULL) > 0);
	CHECK(logged.warns == 0 && logged.infos == 0);
}

static void test_logger(void **state)
{
	(void)state;
	run_child(scenario_logger, "bogus", false);
	run_child(scenario_no_logger, "bogus", false);
}

static void test_aggregates(void **state)
{
	(void)state;
	run_child(scenario_aggregates, "4096", true);
}

static void test_regression(void **state)
{
	(void)state;
	run_child(scenario_regression, "4096", true);
}

static void test_regression_exact(void **state)
{
	(void)state;
	run_child(scenario_regression_exact, "4096", true);
}

static void test_concurrent_threads_and_rollover(void **state)
{
	(void)state;
	run_child(scenario_concurrent, "1024", true);
}

static void test_inflight_orphans_pxn_mask(void **state)
{
	(void)state;
	run_child(scenario_inflight, "256", true);
}

static void test_fork(void **state)
{
	(void)state;
	run_child(scenario_fork, "256", true);
}

static void test_v4(void **state)
{
	(void)state;
	run_child(scenario_v4, "256", true);
}

static void test_no_agent(void **state)
{
	(void)state;
	run_child(scenario_no_agent, "256", false);
	run_child(scenario_agent_absent, "256", true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_aggregates),
		cmocka_unit_test(test_regression),
		cmocka_unit_test(test_regression_exact),
		cmocka_unit_test(test_concurrent_threads_and_rollover),
		cmocka_unit_test(test_inflight_orphans_pxn_mask),
		cmocka_unit_test(test_fork),
		cmocka_unit_test(test_v4),
		cmocka_unit_test(test_no_agent),
		cmocka_unit_test(test_logger),
	};
	char dir[] = "/tmp/sysom-nccl-prof-XXXXXX";
	int rc;

	if (!getenv("SYSOM_BUILD")) {
		/* The plugin is loaded as NCCL loads it, from the build directory. */
		printf("1..0 # SKIP SYSOM_BUILD is not set: run through tests/run-all.sh BUILD\n");
		return 0;
	}

	if (!mkdtemp(dir))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(sock_path);
	rmdir(dir);
	return rc;
}
