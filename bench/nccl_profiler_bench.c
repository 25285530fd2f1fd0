/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of libnccl-profiler-sysom.so on NCCL's threads, and what the component channel carries.
 *
 * 1. ns per hot-path event: a ProxyStep (startEvent, SendGPUWait and SendWait states,
 *    stopEvent: what NCCL's proxy thread does per network step) and a KernelCh (start,
 *    KernelChStop, stop), through the built plugin with an agent socket drained by a thread,
 *    side by side with a baseline plugin whose calls do nothing (the indirect calls alone).
 *    Median of rounds of 4096 events; windows sized so nothing is dropped (drops reported).
 * 2. records/s through the channel (sysom_channel_send of 4 KiB table records to a draining
 *    reader), and the cost of a send when the agent is absent (dropped at once).
 * 3. No agent configured: init leaves NCCL an empty activation mask, so NCCL makes no events;
 *    the cost of calls made anyway with the NULL context is reported.
 *
 * Each hot-path measurement runs in a fresh child process (the plugin's state is process-wide),
 * once with the agent draining and once with the agent configured but not listening.
 *
 * usage: SYSOM_BUILD=build nccl_profiler_bench [--rounds R] | nccl_profiler_bench PLUGIN.so
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "client/sysom_channel.h"
#include "plugins/nccl/nccl_profiler_abi.h"

#define BATCH 4096

/* ---- a draining "agent" ---- */

static int listen_fd = -1;
static _Atomic bool drain_stop;
static _Atomic uint64_t drained;

static void *drain_main(void *arg)
{
	static uint8_t buf[1 << 17];
	int fds[64], n = 0;

	(void)arg;
	while (!atomic_load(&drain_stop)) {
		struct pollfd p[65];
		p[0] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
		for (int i = 0; i < n; i++)
			p[i + 1] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (poll(p, (nfds_t)n + 1, 20) <= 0)
			continue;
		if ((p[0].revents & POLLIN) && n < 64) {
			int fd = accept(listen_fd, NULL, NULL);
			if (fd >= 0)
				fds[n++] = fd;
		}
		for (int i = 0; i < n; i++)
			while ((p[i + 1].revents & POLLIN) && recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT) > 0)
				atomic_fetch_add(&drained, 1);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return NULL;
}

static int agent_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	listen_fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(listen_fd, 16))
		return -errno;
	return 0;
}

/* ---- the baseline: a plugin whose calls do nothing ---- */

static int nop_handle;

static nccl_result_t nop_start(void *ctx, void **h, struct nccl_prof_descr_v5 *d)
{
	(void)ctx;
	(void)d;
	*h = &nop_handle;
	return 0;
}

static nccl_result_t nop_stop(void *h)
{
	(void)h;
	return 0;
}

static nccl_result_t nop_record(void *h, int s, union nccl_prof_state_args *a)
{
	(void)h;
	(void)s;
	(void)a;
	return 0;
}

static const struct nccl_profiler_v5 nop_plugin = {
	.name = "nop", .startEvent = nop_start, .stopEvent = nop_stop,
	.recordEventState = nop_record,
};

/* The calls NCCL makes, through function pointers the compiler cannot see through. */
static const struct nccl_profiler_v5 *volatile plugin_ptr;

/* One round: BATCH ProxySteps under one ProxyOp under one Coll; ns per step event. */
static double round_steps(void *ctx)
{
	const struct nccl_profiler_v5 *p = plugin_ptr;
	struct nccl_prof_descr_v5 c = { .type = NCCL_PROF_COLL }, o = { .type = NCCL_PROF_PROXY_OP };
	struct nccl_prof_descr_v5 s = { .type = NCCL_PROF_PROXY_STEP };
	union nccl_prof_state_args a = { .proxyStep = { .transSize = 65536 } };
	void *ch = NULL, *oh = NULL;
	uint64_t t0;

	c.u.coll.func = "AllReduce";
	c.u.coll.datatype = "ncclFloat32";
	c.u.coll.algo = "Ring";
	c.u.coll.proto = "Simple";
	c.u.coll.count = 1 << 20;
	p->startEvent(ctx, &ch, &c);
	p->stopEvent(ch);
	o.parentObj = ch;
	o.u.proxyOp.pid = getpid();
	o.u.proxyOp.peer = 1;
	o.u.proxyOp.isSend = 1;
	p->startEvent(ctx, &oh, &o);
	s.parentObj = oh;
	t0 = bench_now_ns();
	for (int i = 0; i < BATCH; i++) {
		void *h = NULL;
		s.u.proxyStep.step = i;
		p->startEvent(ctx, &h, &s);
		p->recordEventState(h, NCCL_PROF_STATE_PROXY_STEP_SEND_GPU_WAIT, &a);
		p->recordEventState(h, NCCL_PROF_STATE_PROXY_STEP_SEND_WAIT, &a);
		p->stopEvent(h);
	}
	double ns = (double)(bench_now_ns() - t0) / BATCH;
	p->stopEvent(oh);
	return ns;
}

/* One round: BATCH KernelCh events under one Coll. */
static double round_kernel_ch(void *ctx)
{
	const struct nccl_profiler_v5 *p = plugin_ptr;
	struct nccl_prof_descr_v5 c = { .type = NCCL_PROF_COLL }, k = { .type = NCCL_PROF_KERNEL_CH };
	union nccl_prof_state_args a = { .kernelCh = { .pTimer = 1000 } };
	void *ch = NULL;
	uint64_t t0;

	c.u.coll.func = "AllGather";
	c.u.coll.datatype = "ncclBfloat16";
	p->startEvent(ctx, &ch, &c);
	p->stopEvent(ch);
	k.parentObj = ch;
	t0 = bench_now_ns();
	for (int i = 0; i < BATCH; i++) {
		void *h = NULL;
		k.u.kernelCh.channelId = (uint8_t)i;
		k.u.kernelCh.pTimer = (uint64_t)i;
		p->startEvent(ctx, &h, &k);
		p->recordEventState(h, NCCL_PROF_STATE_KERNEL_CH_STOP, &a);
		p->stopEvent(h);
	}
	return (double)(bench_now_ns() - t0) / BATCH;
}

static void pause_ms(int ms)
{
	struct timespec ts = { 0, (long)ms * 1000000L };

	nanosleep(&ts, NULL);
}

/* Hot-path medians of one plugin instance: [0] ProxyStep baseline, [1] ProxyStep plugin,
 * [2] KernelCh baseline, [3] KernelCh plugin. */
struct hot {
	double v[4];
};

/* Loads the plugin in a fresh child process (its state is process-wide: one channel, one
 * thread) with the agent socket `sock`, and measures the hot path there. */
static int measure_hot(const char *lib_path, const char *sock, int rounds, struct hot *out)
{
	int fds[2], status;
	pid_t pid;

	if (pipe(fds))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		const struct nccl_profiler_v5 *plugin;
		void *lib, *ctx = NULL;
		int mask = 0;
		struct hot h;
		double *v[4];

		close(fds[0]);
		setenv("SYSOM_SOCKET_PATH", sock, 1);
		lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
		if (!lib || !(plugin = dlsym(lib, "ncclProfiler_v5"))) {
			fprintf(stderr, "%s: %s\n", lib_path, dlerror());
			_exit(1);
		}
		if (plugin->init(&ctx, 0xbe4c4ull, &mask, "bench", 1, 2, 0, NULL) || !ctx) {
			fprintf(stderr, "plugin init failed\n");
			_exit(1);
		}
		for (int i = 0; i < 4; i++)
			if (!(v[i] = calloc((size_t)rounds, sizeof(double))))
				_exit(1);
		for (int r = 0; r < rounds; r++) {
			plugin_ptr = &nop_plugin;
			v[0][r] = round_steps(NULL);
			v[2][r] = round_kernel_ch(NULL);
			plugin_ptr = plugin;
			v[1][r] = round_steps(ctx);
			v[3][r] = round_kernel_ch(ctx);
			pause_ms(15); /* the window rolls over and is aggregated between rounds */
		}
		for (int i = 0; i < 4; i++)
			h.v[i] = bench_median(v[i], rounds);
		plugin->finalize(ctx);
		if (write(fds[1], &h, sizeof(h)) != (ssize_t)sizeof(h))
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	ssize_t got = read(fds[0], out, sizeof(*out));
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) ||
	    got != (ssize_t)sizeof(*out))
		return -EIO;
	return 0;
}

int main(int argc, char **argv)
{
	const char *build = getenv("SYSOM_BUILD");
	char lib_path[4096], sock[108], nosock[108];
	int rounds = 15;
	pthread_t drainer;
	struct hot with_agent, absent;

	for (int i = 1; i + 1 < argc; i += 2)
		if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	if (rounds < 3 || rounds > 1000)
		rounds = 15;
	if (argc == 2 && strcmp(argv[1], "--rounds"))
		snprintf(lib_path, sizeof(lib_path), "%s", argv[1]); /* the .so itself */
	else
		snprintf(lib_path, sizeof(lib_path), "%s/lib/libnccl-profiler-sysom.so",
			 build ? build : "build");
	snprintf(sock, sizeof(sock), "/tmp/sysom-bench-nccl-%d.sock", (int)getpid());
	snprintf(nosock, sizeof(nosock), "/tmp/sysom-bench-nccl-%d.absent", (int)getpid());
	unlink(nosock);
	if (agent_listen(sock)) {
		perror("agent socket");
		return 1;
	}
	setenv("SYSOM_SOCKET_PATH", sock, 1);
	/* Room for a round's events in one window (the background thread rotates every 10 ms at
	 * most): drops would flatter the hot path. */
	setenv("SYSOM_NCCL_WINDOW_EVENTS", "65536", 1);
	setenv("SYSOM_NCCL_LINGER_MS", "0", 1);
	pthread_create(&drainer, NULL, drain_main, NULL);
	/* With an agent draining; then configured but absent (events are still recorded and
	 * aggregated, records dropped and counted: the cost must not depend on the agent). */
	if (measure_hot(lib_path, sock, rounds, &with_agent) ||
	    measure_hot(lib_path, nosock, rounds, &absent)) {
		fprintf(stderr, "hot-path measurement failed\n");
		return 1;
	}
	double bs = with_agent.v[0], ps = with_agent.v[1], bk = with_agent.v[2], pk = with_agent.v[3];
	void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
	const struct nccl_profiler_v5 *plugin = lib ? dlsym(lib, "ncclProfiler_v5") : NULL;
	if (!plugin) {
		fprintf(stderr, "%s: %s\n", lib_path, dlerror());
		return 1;
	}

	/* Channel throughput: 4 KiB records to the draining reader. */
	struct sysom_channel *c = NULL;
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_SIMULATED, .name = "bench" };
	static uint8_t payload[4096];
	struct sysom_channel_stats st;
	uint64_t t0, n = 0;

	sysom_channel_open(&o, &c);
	sysom_channel_send(c, SYSOM_REC_STATS, payload, 16); /* connect */
	pause_ms(20);
	t0 = bench_now_ns();
	while (bench_now_ns() - t0 < 1000000000ull) {
		if (sysom_channel_send(c, SYSOM_REC_STATS, payload, sizeof(payload)) == 0)
			n++;
	}
	double secs = (double)(bench_now_ns() - t0) / 1e9;
	sysom_channel_stats(c, &st);
	sysom_channel_close(c);

	/* An agent that is configured but absent: a send is dropped at once. */
	atomic_store(&drain_stop, true);
	pthread_join(drainer, NULL);
	close(listen_fd);
	unlink(sock);
	struct sysom_channel *gone = NULL;
	sysom_channel_open(&o, &gone);
	t0 = bench_now_ns();
	for (int i = 0; i < 100000; i++)
		sysom_channel_send(gone, SYSOM_REC_STATS, payload, 64);
	double absent_ns = (double)(bench_now_ns() - t0) / 100000;
	sysom_channel_close(gone);

	/* No agent configured: what NCCL would pay if it called with the NULL context. */
	double null_ns;
	{
		const struct nccl_profiler_v5 *p = plugin;
		struct nccl_prof_descr_v5 d = { .type = NCCL_PROF_PROXY_STEP };
		t0 = bench_now_ns();
		for (int i = 0; i < 1000000; i++) {
			void *h = NULL;
			p->startEvent(NULL, &h, &d);
			p->stopEvent(h);
		}
		null_ns = (double)(bench_now_ns() - t0) / 1000000;
	}

	printf("| measurement | baseline (no-op plugin) | libnccl-profiler-sysom | ratio |\n");
	printf("|---|---:|---:|---:|\n");
	printf("| ProxyStep event: start + 2 states + stop, ns (median of %d x %d) | %.1f | %.1f | %.1fx |\n",
	       rounds, BATCH, bs, ps, ps / bs);
	printf("| KernelCh event: start + KernelChStop + stop, ns | %.1f | %.1f | %.1fx |\n", bk, pk,
	       pk / bk);
	printf("| ProxyStep event, agent configured but not listening, ns | %.1f | %.1f | %.1fx |\n",
	       absent.v[0], absent.v[1], absent.v[1] / absent.v[0]);
	printf("| KernelCh event, agent configured but not listening, ns | %.1f | %.1f | %.1fx |\n",
	       absent.v[2], absent.v[3], absent.v[3] / absent.v[2]);
	printf("\n| channel | value |\n|---|---:|\n");
	printf("| 4 KiB records/s to a draining reader | %.0f (%.0f MiB/s; %llu dropped: reader behind) |\n",
	       (double)n / secs, (double)n * 4096 / secs / 1048576.0,
	       (unsigned long long)st.records_dropped);
	printf("| send with the agent absent, ns (dropped, counted) | %.1f |\n", absent_ns);
	printf("| event call with no agent configured (NULL context; NCCL gets mask 0 and makes none), ns | %.1f |\n",
	       null_ns);
	dlclose(lib);
	return 0;
}
