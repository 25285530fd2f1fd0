/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libnccl-profiler-sysom.so: the NCCL profiler plugin (docs/nccl-profiler.md). Exports
 * ncclProfiler_v5 (NCCL 2.28) and ncclProfiler_v4 (NCCL 2.27); NCCL picks the newest it knows.
 *
 * NCCL's threads (application, proxy, network) call startEvent / stopEvent /
 * recordEventState: each claims or updates a pre-allocated slot with one atomic operation on
 * its window's word and plain writes, never a lock or an allocation (profiler.h). One
 * background thread per process closes windows, aggregates them (aggregate.c) and sends the
 * tables to the agent over the registration socket; it also applies the activation mask the
 * agent asks for. With no agent socket configured the plugin sets an empty activation mask:
 * NCCL then produces no events at all.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plugins/nccl/nccl_profiler_abi.h"
#include "plugins/nccl/profiler.h"

#define EXPORT __attribute__((visibility("default")))
#define PLUGIN_NAME "sysom"
#define COMPONENT_NAME "libnccl-profiler-sysom 0.6"
#define TICK_NS 10000000ull      /* background thread period: 10 ms */
#define STATS_EVERY_NS 1000000000ull

/* The events this plugin understands; the mask NCCL gets is a subset. */
#define SUPPORTED_MASK (NCCL_PROF_COLL | NCCL_PROF_P2P | NCCL_PROF_PROXY_OP | \
			NCCL_PROF_PROXY_STEP | NCCL_PROF_KERNEL_CH)
#define DEFAULT_MASK SUPPORTED_MASK

/* ---- process-wide state ------------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* contexts, channel, thread */
static struct prof_context *contexts;
static struct prof_settings settings;
static bool settings_read;
static struct sysom_channel *channel; /* NULL: no agent configured */
static bool channel_tried;
static pthread_t thread;
static bool thread_running, thread_stop;
static pthread_cond_t thread_wake = PTHREAD_COND_INITIALIZER;
static int *mask_word;                /* the int NCCL gave init (one per process) */
static int mask_now;                  /* the mask in force: settings', then the agent's */
static bool atfork_registered;
static struct prof_counters counters;
static struct sysom_table *scratch;  /* background thread's table builder */
static pid_t owner_pid;              /* the process the thread belongs to (fork) */

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
	return now_ns(CLOCK_MONOTONIC);
}

/*
 * The hot path's clock. Only durations are taken from it, so on x86-64 with an invariant TSC
 * (constant_tsc and nonstop_tsc) it is the TSC, read in a few ns, instead of clock_gettime
 * (26 ns under KVM); ns_per_tick is calibrated at the first init and refined by the
 * background thread against CLOCK_MONOTONIC. Elsewhere ticks are ns.
 */
static bool use_tsc;
static double ns_per_tick = 1.0;     /* under the plugin lock */
static uint64_t calib_tick, calib_ns; /* the calibration baseline */

static inline uint64_t prof_ticks(void)
{
#if defined(__x86_64__)
	if (use_tsc)
		return __builtin_ia32_rdtsc();
#endif
	return mono_ns();
}

static void clock_setup(void)
{
#if defined(__x86_64__)
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	bool constant = false, nonstop = false;

	if (f) {
		while (fgets(line, sizeof(line), f) && strncmp(line, "flags", 5) != 0)
			;
		constant = strstr(line, " constant_tsc") != NULL;
		nonstop = strstr(line, " nonstop_tsc") != NULL;
		fclose(f);
	}
	if (!constant || !nonstop || getenv("SYSOM_NCCL_NO_TSC"))
		return;
	calib_ns = mono_ns();
	calib_tick = __builtin_ia32_rdtsc();
	uint64_t ns, tick;
	do {
		ns = mono_ns();
		tick = __builtin_ia32_rdtsc();
	} while (ns - calib_ns < 2000000); /* 2 ms, once per process */
	if (tick <= calib_tick)
		return;
	ns_per_tick = (double)(ns - calib_ns) / (double)(tick - calib_tick);
	use_tsc = true;
#endif
}

/* Refines ns_per_tick over the whole time since calibration (plugin lock held). */
static void clock_refine(void)
{
#if defined(__x86_64__)
	if (!use_tsc)
		return;
	uint64_t ns = mono_ns(), tick = __builtin_ia32_rdtsc();
	if (ns - calib_ns >= 1000000000ull && tick > calib_tick)
		ns_per_tick = (double)(ns - calib_ns) / (double)(tick - calib_tick);
#endif
}

/* NCCL's logger, from the first init that gave one (NULL: stderr). Written under `lock`. */
static nccl_debug_logger_t logger;

static void plugin_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One message through NCCL's logger (shown per NCCL_DEBUG / NCCL_DEBUG_SUBSYS=PROFILE), or on
 * stderr when NCCL gave none; stderr only for warnings, as before there was a logger. */
static void plugin_log(int level, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (logger)
		logger(level, NCCL_LOG_SUBSYS_PROFILE, __FILE__, __LINE__, "sysom NCCL profiler: %s",
		       text);
	else if (level <= NCCL_LOG_LEVEL_WARN)
		fprintf(stderr, "sysom NCCL profiler: %s\n", text);
}

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v < lo || v > hi) {
		plugin_log(NCCL_LOG_LEVEL_WARN, "ignoring %s=%s (want %llu..%llu)", name, s,
			   (unsigned long long)lo, (unsigned long long)hi);
		return dflt;
	}
	return v;
}

static void settings_load(void)
{
	if (settings_read)
		return;
	settings.slots = (uint32_t)env_u64("SYSOM_NCCL_WINDOW_EVENTS", PROF_DEFAULT_SLOTS, 16,
					   PROF_MAX_SLOTS);
	settings.window_ns = env_u64("SYSOM_NCCL_WINDOW_MS", PROF_DEFAULT_WINDOW_MS, 10, 600000) *
			     1000000ull;
	settings.linger_ns = env_u64("SYSOM_NCCL_LINGER_MS", PROF_DEFAULT_LINGER_MS, 0, 600000) *
			     1000000ull;
	settings.max_open_ns = env_u64("SYSOM_NCCL_MAX_OPEN_MS", PROF_MAX_OPEN_MS, 1, 3600000) *
			       1000000ull;
	settings.mask = (int)(env_u64("SYSOM_NCCL_MASK", DEFAULT_MASK, 0, 0xffff) & SUPPORTED_MASK);
	mask_now = settings.mask;
	clock_setup();
	settings_read = true;
}

/* ---- handles -------------------------------------------------------------------------------- */

/* A handle is the slot's address with the window generation (+1, 16 bits) on top: user-space
 * addresses fit in 48 bits on x86-64 and aarch64. */
static void *handle_of(struct prof_event *e, uint32_t tag)
{
	return (void *)((uintptr_t)e | (uintptr_t)tag << 48);
}

/* The live slot of a handle, or NULL when its window has been recycled since (orphan). */
static struct prof_event *slot_of(void *h)
{
	uintptr_t v = (uintptr_t)h;
	struct prof_event *e = (struct prof_event *)(v & (((uintptr_t)1 << 48) - 1));
	uint32_t tag = (uint32_t)(v >> 48);

	if (!e || !tag || atomic_load_explicit(&e->tag, memory_order_acquire) != tag ||
	    win_tag(atomic_load_explicit(&e->win->gen, memory_order_acquire)) != tag)
		return NULL;
	return e;
}

/* The parent's slot when `parent` is a handle of this communicator, in a window that still
 * accepts events; NULL otherwise. Never dereferences a pointer outside the context's arena. */
static struct prof_event *parent_of(struct prof_context *ctx, void *parent)
{
	uintptr_t v = (uintptr_t)parent, addr = v & (((uintptr_t)1 << 48) - 1);
	uintptr_t lo = (uintptr_t)ctx->arena;
	uintptr_t hi = lo + (uintptr_t)PROF_WINDOWS * ctx->nslots * sizeof(struct prof_event);

	if (!parent || addr < lo || addr >= hi || (addr - lo) % sizeof(struct prof_event))
		return NULL;
	return slot_of(parent);
}

static size_t dtype_size(const char *name)
{
	static const struct {
		const char *name;
		size_t size;
	} types[] = {
		{ "ncclInt8", 1 }, { "ncclUint8", 1 }, { "ncclFloat8e4m3", 1 }, { "ncclFloat8e5m2", 1 },
		{ "ncclFloat16", 2 }, { "ncclBfloat16", 2 }, { "ncclInt32", 4 }, { "ncclUint32", 4 },
		{ "ncclFloat32", 4 }, { "ncclInt64", 8 }, { "ncclUint64", 8 }, { "ncclFloat64", 8 },
	};

	if (!name)
		return 1;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(name, types[i].name) == 0)
			return types[i].size;
	return 1;
}

/* ---- the hot path ------------------------------------------------------------------------- */

/* Claims a slot in window `w` (one atomic). NULL when the window is full or no longer takes
 * events; the event is then dropped (counted by the caller). */
static struct prof_event *claim(struct prof_window *w, uint32_t nslots, uint32_t *tag)
{
	uint64_t old = atomic_fetch_add_explicit(&w->word, WIN_OPEN_ONE | 1, memory_order_acq_rel);
	unsigned state = win_word_state(old);

	if ((state != WIN_FILLING && state != WIN_CLOSING) || win_word_slot(old) >= nslots) {
		/* Give the open count back while the window still counts it (a READY or
		 * PROCESSING window's word is rewritten whole before it is used again). */
		if (state == WIN_FILLING || state == WIN_CLOSING)
			atomic_fetch_sub_explicit(&w->word, WIN_OPEN_ONE, memory_order_acq_rel);
		return NULL;
	}
	*tag = win_tag(atomic_load_explicit(&w->gen, memory_order_acquire));
	return &w->slots[win_word_slot(old)];
}

/* The event is over: its window counts one open event less. Only a window that still takes
 * events and counts this one is touched (a forced close may have processed it already). */
static bool event_close(struct prof_event *e)
{
	struct prof_window *w = e->win;
	uint64_t word = atomic_load_explicit(&w->word, memory_order_acquire);

	atomic_fetch_or_explicit(&e->flags, EV_STOPPED, memory_order_release);
	do {
		unsigned state = win_word_state(word);
		if ((state != WIN_FILLING && state != WIN_CLOSING) || win_word_open(word) == 0)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&w->word, &word, word - WIN_OPEN_ONE,
						      memory_order_acq_rel,
						      memory_order_acquire));
	return true;
}

static nccl_result_t start_event(struct prof_context *ctx, void **handle, uint64_t type,
				 void *parent_obj, const union nccl_prof_event_union *u)
{
	struct prof_event *parent = NULL, *e;
	struct prof_window *w;
	uint8_t ev_type, flags = 0;
	uint32_t tag;

	*handle = NULL;
	if (!ctx)
		return 0;
	switch (type) {
	case NCCL_PROF_COLL:
		ev_type = EV_COLL;
		break;
	case NCCL_PROF_P2P:
		ev_type = EV_P2P;
		break;
	case NCCL_PROF_PROXY_OP:
		/* Receive side: the sender measures the transfer. */
		if (!u->proxyOp.isSend)
			return 0;
		ev_type = EV_PROXY_OP;
		flags = EV_SEND;
		/* PXN: another process's rank's operation run by this process's proxy; its parent
		 * pointer belongs to that process's address space. */
		if (u->proxyOp.pid != owner_pid) {
			flags |= EV_PXN;
			atomic_fetch_add_explicit(&counters.pxn, 1, memory_order_relaxed);
			parent_obj = NULL;
		}
		break;
	case NCCL_PROF_PROXY_STEP:
		ev_type = EV_PROXY_STEP;
		break;
	case NCCL_PROF_KERNEL_CH:
		ev_type = EV_KERNEL_CH;
		break;
	default:
		return 0; /* Group, ProxyCtrl, API events: not recorded */
	}
	/* Children join their parent's window, so a window holds whole operations. */
	if (ev_type != EV_COLL && ev_type != EV_P2P && parent_obj) {
		parent = parent_of(ctx, parent_obj);
		if (!parent) {
			atomic_fetch_add_explicit(&counters.orphans, 1, memory_order_relaxed);
			return 0;
		}
		w = parent->win;
	} else if (ev_type == EV_PROXY_STEP || ev_type == EV_KERNEL_CH) {
		return 0; /* must have a parent */
	} else {
		w = &ctx->win[atomic_load_explicit(&ctx->current, memory_order_acquire)];
	}
	e = claim(w, ctx->nslots, &tag);
	if (!e) {
		atomic_fetch_add_explicit(parent ? &counters.orphans : &counters.dropped, 1,
					  memory_order_relaxed);
		return 0;
	}
	e->type = ev_type;
	atomic_store_explicit(&e->flags, flags, memory_order_relaxed);
	e->parent = parent ? (uint32_t)(parent - w->slots) : EV_NO_PARENT;
	/* Only operations need their start (enqueue time, span); children need none. */
	e->start_ns = ev_type == EV_COLL || ev_type == EV_P2P ? prof_ticks() : 0;
	e->stop_ns = e->gpu_start = e->gpu_stop = e->wait_ns = e->bytes = e->seq = 0;
	e->channel = 0;
	e->nchannels = 0;
	e->peer = -1;
	e->func = e->algo = e->proto = e->datatype = NULL;
	switch (ev_type) {
	case EV_COLL:
		e->seq = u->coll.seqNumber;
		e->func = u->coll.func;
		e->algo = u->coll.algo;
		e->proto = u->coll.proto;
		e->datatype = u->coll.datatype;
		e->bytes = (uint64_t)u->coll.count * dtype_size(u->coll.datatype);
		e->nchannels = u->coll.nChannels;
		break;
	case EV_P2P:
		e->func = u->p2p.func;
		e->datatype = u->p2p.datatype;
		e->bytes = (uint64_t)u->p2p.count * dtype_size(u->p2p.datatype);
		e->peer = u->p2p.peer;
		e->nchannels = u->p2p.nChannels;
		break;
	case EV_PROXY_OP:
		e->peer = u->proxyOp.peer;
		e->channel = u->proxyOp.channelId;
		break;
	case EV_KERNEL_CH:
		e->channel = u->kernelCh.channelId;
		e->gpu_start = u->kernelCh.pTimer;
		break;
	default:
		break;
	}
	atomic_store_explicit(&e->tag, tag, memory_order_release);
	*handle = handle_of(e, tag); /* events are counted when their window is processed */
	return 0;
}

static nccl_result_t prof_stop_event(void *handle)
{
	struct prof_event *e;

	if (!handle)
		return 0;
	if (!(e = slot_of(handle))) {
		atomic_fetch_add_explicit(&counters.orphans, 1, memory_order_relaxed);
		return 0;
	}
	if (atomic_load_explicit(&e->flags, memory_order_relaxed) & EV_STOPPED) {
		/* Stopped twice (a stale handle of a processed window): counted, ignored. */
		atomic_fetch_add_explicit(&counters.orphans, 1, memory_order_relaxed);
		return 0;
	}
	/* A kernel's times are the GPU's; everything else needs its CPU stop. */
	e->stop_ns = e->type == EV_KERNEL_CH ? 0 : prof_ticks();
	if (!event_close(e))
		atomic_fetch_add_explicit(&counters.orphans, 1, memory_order_relaxed);
	return 0;
}

static nccl_result_t prof_record_state(void *handle, int state, union nccl_prof_state_args *args)
{
	struct prof_event *e;

	if (!handle)
		return 0;
	if (!(e = slot_of(handle))) {
		atomic_fetch_add_explicit(&counters.orphans, 1, memory_order_relaxed);
		return 0;
	}
	if (e->type == EV_PROXY_STEP && state == NCCL_PROF_STATE_PROXY_STEP_SEND_WAIT) {
		e->wait_ns = prof_ticks();
		e->bytes = args ? args->proxyStep.transSize : 0;
		atomic_fetch_or_explicit(&e->flags, EV_SEND_WAIT, memory_order_release);
	} else if (e->type == EV_KERNEL_CH && state == NCCL_PROF_STATE_KERNEL_CH_STOP && args) {
		e->gpu_stop = args->kernelCh.pTimer;
		atomic_fetch_or_explicit(&e->flags, EV_KERNEL_STOP, memory_order_release);
	}
	return 0;
}

static nccl_result_t start_v5(void *context, void **handle, struct nccl_prof_descr_v5 *d)
{
	if (!handle)
		return 0;
	if (!d) {
		*handle = NULL;
		return 0;
	}
	return start_event(context, handle, d->type, d->parentObj, &d->u);
}

static nccl_result_t start_v4(void *context, void **handle, struct nccl_prof_descr_v4 *d)
{
	if (!handle)
		return 0;
	if (!d) {
		*handle = NULL;
		return 0;
	}
	return start_event(context, handle, d->type, d->parentObj, &d->u);
}

/* ---- the background thread ---------------------------------------------------------------- */

static void send_comm(struct prof_context *ctx, uint32_t flags)
{
	struct {
		struct sysom_rec_comm c;
		char name[SYSOM_REC_NAME_MAX];
	} rec = { .c = { .comm_id = ctx->comm_id, .rank = ctx->rank, .nranks = ctx->nranks,
			 .nnodes = ctx->nnodes, .flags = flags } };
	size_t n = strnlen(ctx->name, SYSOM_REC_NAME_MAX);

	memcpy(rec.name, ctx->name, n);
	if (sysom_channel_send(channel, SYSOM_REC_NCCL_COMM, &rec, sizeof(rec.c) + n) == 0)
		ctx->announced = true;
}

static void send_stats(void)
{
	struct sysom_channel_stats cs;
	struct sysom_rec_stat st[8];
	int n = 0;

	sysom_channel_stats(channel, &cs);
#define STAT(id_, v_) st[n++] = (struct sysom_rec_stat){ .id = (id_), .value = (v_) }
	STAT(SYSOM_STAT_EVENTS, atomic_load(&counters.events));
	STAT(SYSOM_STAT_EVENTS_DROPPED, atomic_load(&counters.dropped));
	STAT(SYSOM_STAT_ORPHANS, atomic_load(&counters.orphans));
	STAT(SYSOM_STAT_FORCED_CLOSES, atomic_load(&counters.forced));
	STAT(SYSOM_STAT_WINDOWS, atomic_load(&counters.windows));
	STAT(SYSOM_STAT_RECORDS_SENT, cs.records_sent);
	STAT(SYSOM_STAT_RECORDS_DROPPED, cs.records_dropped);
#undef STAT
	(void)sysom_channel_send(channel, SYSOM_REC_STATS, st, (size_t)n * sizeof(st[0]));
}

/* Makes the next window current if it is free; the old one starts closing. */
static void rotate(struct prof_context *ctx, uint64_t now)
{
	uint32_t cur = atomic_load(&ctx->current), next = (cur + 1) % PROF_WINDOWS;
	struct prof_window *w = &ctx->win[cur], *n = &ctx->win[next];

	if (win_word_state(atomic_load(&n->word)) != WIN_READY)
		return; /* every window busy: the current one fills up and drops, counted */
	atomic_fetch_add(&n->gen, 1);
	n->opened_ns = now;
	n->opened_real = now_ns(CLOCK_REALTIME);
	atomic_store_explicit(&n->word, (uint64_t)WIN_FILLING << WIN_STATE_SHIFT,
			      memory_order_release);
	atomic_store_explicit(&ctx->current, next, memory_order_release);
	w->closed_ns = now;
	w->closed_real = now_ns(CLOCK_REALTIME);
	atomic_fetch_add_explicit(&w->word, (uint64_t)(WIN_CLOSING - WIN_FILLING) << WIN_STATE_SHIFT,
				  memory_order_acq_rel);
}

/* CLOSING → PROCESSING when nothing in it is open and it has lingered, or it is overdue. */
static bool try_begin_processing(struct prof_window *w, uint64_t now, bool force_all)
{
	uint64_t word = atomic_load(&w->word);

	for (;;) {
		uint32_t open = win_word_open(word);
		bool overdue = force_all || now - w->closed_ns >= settings.max_open_ns;

		if (win_word_state(word) != WIN_CLOSING)
			return false;
		if (!overdue && (open || now - w->closed_ns < settings.linger_ns))
			return false;
		uint64_t next = (word & ~(0xffull << WIN_STATE_SHIFT)) |
				(uint64_t)WIN_PROCESSING << WIN_STATE_SHIFT;
		if (atomic_compare_exchange_weak(&w->word, &word, next)) {
			if (open)
				atomic_fetch_add_explicit(&counters.forced, 1, memory_order_relaxed);
			return true;
		}
	}
}

static void process(struct prof_context *ctx, struct prof_window *w)
{
	uint32_t used = win_word_slot(atomic_load(&w->word));

	if (used > ctx->nslots)
		used = ctx->nslots;
	if (channel && !ctx->announced)
		send_comm(ctx, 0);
	if (used) {
		uint64_t events = 0;
		(void)prof_window_aggregate(ctx, w, used, ns_per_tick, channel, scratch, &events);
		atomic_fetch_add_explicit(&counters.events, events, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&counters.windows, 1, memory_order_relaxed);
	atomic_store_explicit(&w->word, (uint64_t)WIN_READY << WIN_STATE_SHIFT,
			      memory_order_release);
}

/* One pass over a context (plugin lock held). `final` (finalize): the current window closes
 * too and every window is processed now, open events or not. */
static void context_tick(struct prof_context *ctx, uint64_t now, bool final)
{
	struct prof_window *cur = &ctx->win[atomic_load(&ctx->current)];
	uint64_t word = atomic_load(&cur->word);
	uint32_t used = win_word_slot(word);

	if (final) {
		cur->closed_ns = now;
		cur->closed_real = now_ns(CLOCK_REALTIME);
		atomic_fetch_add(&cur->word, (uint64_t)(WIN_CLOSING - WIN_FILLING) << WIN_STATE_SHIFT);
	} else if (used >= ctx->nslots / 4 * 3 ||
		   (used && now - cur->opened_ns >= settings.window_ns)) {
		rotate(ctx, now);
	}
	for (int i = 0; i < PROF_WINDOWS; i++)
		if (try_begin_processing(&ctx->win[i], now, final))
			process(ctx, &ctx->win[i]);
}

/* From sysom_channel_poll on the background thread, under the plugin lock. */
static void on_mask(void *arg, uint32_t mask)
{
	(void)arg;
	mask &= SUPPORTED_MASK;
	mask_now = (int)mask; /* communicators created later start with it too */
	if (mask_word)
		__atomic_store_n(mask_word, (int)mask, __ATOMIC_RELAXED);
	sysom_channel_set_mask(channel, mask);
}

static void *thread_main(void *arg)
{
	uint64_t last_stats = 0;

	(void)arg;
	pthread_mutex_lock(&lock);
	while (!thread_stop) {
		uint64_t now = mono_ns();
		struct timespec until;

		clock_refine();
		for (struct prof_context *c = contexts; c; c = c->next)
			context_tick(c, now, false);
		if (channel) {
			sysom_channel_poll(channel);
			if (now - last_stats >= STATS_EVERY_NS) {
				send_stats();
				last_stats = now;
			}
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)TICK_NS;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&thread_wake, &lock, &until);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* A child of fork() has none of the parent's threads: start afresh on its next init. */
static void after_fork_child(void)
{
	pthread_mutex_init(&lock, NULL);
	pthread_cond_init(&thread_wake, NULL);
	thread_running = false;
	thread_stop = false;
	contexts = NULL; /* the parent's communicators are not this process's */
	owner_pid = getpid();
	/* The channel's own lock may have been held by the parent's background thread at the
	 * fork: never use it here. Closing drops only the child's copy of the parent's
	 * connection; the child's next init opens its own (and says HELLO as itself). */
	sysom_channel_close(channel);
	channel = NULL;
	channel_tried = false;
}

/* ---- init / finalize ------------------------------------------------------------------------ */

static void context_free(struct prof_context *ctx)
{
	if (!ctx)
		return;
	free(ctx->arena);
	free(ctx);
}

static int context_new(uint64_t comm_id, const char *name, int nnodes, int nranks, int rank,
		       struct prof_context **out)
{
	struct prof_context *ctx = calloc(1, sizeof(*ctx));
	int rc = -ENOMEM;

	if (!ctx)
		goto cleanup;
	ctx->comm_id = comm_id ? comm_id : 1;
	snprintf(ctx->name, sizeof(ctx->name), "%s", name ? name : "");
	ctx->nnodes = nnodes > 0 ? nnodes : 1;
	ctx->nranks = nranks > 0 ? nranks : 1;
	ctx->rank = rank >= 0 && rank < ctx->nranks ? rank : 0;
	if (ctx->nnodes > ctx->nranks)
		ctx->nnodes = ctx->nranks;
	ctx->nslots = settings.slots;
	ctx->arena = calloc((size_t)PROF_WINDOWS * ctx->nslots, sizeof(*ctx->arena));
	if (!ctx->arena)
		goto cleanup;
	for (uint32_t i = 0; i < PROF_WINDOWS; i++) {
		struct prof_window *w = &ctx->win[i];

		w->index = i;
		w->ctx = ctx;
		w->slots = ctx->arena + (size_t)i * ctx->nslots;
		for (uint32_t s = 0; s < ctx->nslots; s++)
			w->slots[s].win = w;
		atomic_init(&w->word, (uint64_t)WIN_READY << WIN_STATE_SHIFT);
	}
	/* Window 0 is current from the start. */
	atomic_store(&ctx->win[0].gen, 1);
	ctx->win[0].opened_ns = mono_ns();
	ctx->win[0].opened_real = now_ns(CLOCK_REALTIME);
	atomic_init(&ctx->win[0].word, (uint64_t)WIN_FILLING << WIN_STATE_SHIFT);
	atomic_init(&ctx->current, 0);
	*out = ctx;
	ctx = NULL;
	rc = 0;
cleanup:
	context_free(ctx);
	return rc;
}

static void channel_setup(int version)
{
	struct sysom_channel_options o = {
		.component = SYSOM_COMPONENT_NCCL_PROFILER,
		.interface = (uint16_t)version,
		.name = COMPONENT_NAME,
		.activation_mask = (uint32_t)settings.mask,
		.on_mask = on_mask,
	};

	if (channel_tried)
		return;
	channel_tried = true;
	if (sysom_channel_open(&o, &channel))
		channel = NULL;

	if (channel && !scratch && !(scratch = malloc(sizeof(*scratch)))) {
		sysom_channel_close(channel);
		channel = NULL;
	}
	plugin_log(NCCL_LOG_LEVEL_INFO, "%s",
		   channel ? "reporting to the sysom agent" : "no sysom agent: no events");
	owner_pid = getpid();
	if (!atfork_registered) {
		atfork_registered = true;
		pthread_atfork(NULL, NULL, after_fork_child);
	}
}

static nccl_result_t init_common(void **context, uint64_t comm_id, int *mask,
				 const char *name, int nnodes, int nranks, int rank, int version,
				 nccl_debug_logger_t logfn)
{
	struct prof_context *ctx = NULL;
	int rc;

	if (!context)
		return 0;
	*context = NULL;
	pthread_mutex_lock(&lock);
	if (!logger && logfn)
		logger = logfn;
	settings_load();
	channel_setup(version);
	if (mask) {
		mask_word = mask;
		/* No agent configured: no events at all, so NCCL pays nothing. */
		__atomic_store_n(mask, channel ? mask_now : 0, __ATOMIC_RELAXED);
	}
	if (!channel) {
		pthread_mutex_unlock(&lock);
		return 0; /* a NULL context: every event call returns at once */
	}
	if ((rc = context_new(comm_id, name, nnodes, nranks, rank, &ctx)))
		goto cleanup;
	if (!thread_running) {
		thread_stop = false;
		if (pthread_create(&thread, NULL, thread_main, NULL)) {
			rc = -EAGAIN;
			goto cleanup;
		}
		thread_running = true;
	}
	ctx->next = contexts;
	contexts = ctx;
	*context = ctx;
	ctx = NULL;
	rc = 0;
cleanup:
	pthread_mutex_unlock(&lock);
	context_free(ctx);
	/* Only a failed allocation fails init: NCCL then runs without this plugin. */
	return rc ? 1 /* ncclSystemError-class failure */ : 0;
}

static nccl_result_t init_v5(void **context, uint64_t comm_id, int *mask, const char *name,
			     int nnodes, int nranks, int rank, nccl_debug_logger_t logfn)
{
	return init_common(context, comm_id, mask, name, nnodes, nranks, rank, 5, logfn);
}

static nccl_result_t init_v4(void **context, int *mask, const char *name, uint64_t comm_hash,
			     int nnodes, int nranks, int rank, nccl_debug_logger_t logfn)
{
	return init_common(context, comm_hash, mask, name, nnodes, nranks, rank, 4, logfn);
}

static nccl_result_t prof_finalize(void *context)
{
	struct prof_context *ctx = context, **p;
	bool last;
	pthread_t t = 0;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&lock);
	for (p = &contexts; *p && *p != ctx; p = &(*p)->next)
		;
	if (*p)
		*p = ctx->next;
	/* Everything still buffered is processed now (open events are counted as forced). */
	context_tick(ctx, mono_ns(), true);
	if (channel) {
		send_comm(ctx, SYSOM_REC_COMM_FINALIZED);
		send_stats();
	}
	last = contexts == NULL && thread_running;
	if (last) {
		thread_stop = true;
		pthread_cond_signal(&thread_wake);
		t = thread;
		thread_running = false;
	}
	pthread_mutex_unlock(&lock);
	if (last)
		pthread_join(t, NULL);
	context_free(ctx);
	return 0;
}

EXPORT const struct nccl_profiler_v5 ncclProfiler_v5 = {
	.name = PLUGIN_NAME,
	.init = init_v5,
	.startEvent = start_v5,
	.stopEvent = prof_stop_event,
	.recordEventState = prof_record_state,
	.finalize = prof_finalize,
};

EXPORT const struct nccl_profiler_v4 ncclProfiler_v4 = {
	.name = PLUGIN_NAME,
	.init = init_v4,
	.startEvent = start_v4,
	.stopEvent = prof_stop_event,
	.recordEventState = prof_record_state,
	.finalize = prof_finalize,
};
