/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libsysom-cupti.so: GPU kernel execution times from CUPTI's activity API, per window, sent
 * to the agent (docs/cupti-library.md). The CUDA driver loads it through
 * CUDA_INJECTION64_PATH and calls InitializeInjection at cuInit.
 *
 * CUPTI is bound with dlopen, not linked: the process's own CUPTI (PyTorch ships one) is the
 * one already loaded, one binary serves CUDA 12 and 13, and a machine without CUPTI simply has
 * no GPU kernel timing. If another tool already subscribed to CUPTI (Nsight Systems, Kineto),
 * this library steps aside and says so once. Kernel records arrive in CUPTI's buffer-completed
 * callback (CUPTI's thread), are folded into a bounded table per window, and a background
 * thread flushes CUPTI and sends the window's GPU_KERNEL table and counters every
 * SYSOM_CUPTI_WINDOW_MS. At exit the last window is flushed and sent.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>
#include <cupti_activity_deprecated.h>

#include "client/sysom_channel.h"
#include "plugins/cupti/kernel_table.h"

#define EXPORT __attribute__((visibility("default")))
#define COMPONENT_NAME "libsysom-cupti 0.6"
#define BUFFER_SIZE (1u << 20)
#define BUFFER_ALIGN 8
#define MAX_BUFFERS 16            /* outstanding activity buffers; more: CUPTI drops, counted */
#define DEFAULT_WINDOW_MS 1000

/* Kernel records are read through the fields every version since Kernel4 keeps in place. */
#define SAME_OFFSET(f) \
	_Static_assert(offsetof(CUpti_ActivityKernel10, f) == offsetof(CUpti_ActivityKernel4, f), \
		       "kernel record field " #f " moved")
SAME_OFFSET(start);
SAME_OFFSET(end);
SAME_OFFSET(deviceId);
SAME_OFFSET(streamId);
SAME_OFFSET(name);
SAME_OFFSET(correlationId);

/* The CUPTI functions used, bound at injection time. */
static struct {
	void *lib;
	__typeof__(cuptiSubscribe) *subscribe;
	__typeof__(cuptiUnsubscribe) *unsubscribe;
	__typeof__(cuptiActivityRegisterCallbacks) *register_callbacks;
	__typeof__(cuptiActivityEnable) *enable;
	__typeof__(cuptiActivityDisable) *disable;
	__typeof__(cuptiActivityFlushAll) *flush_all;
	__typeof__(cuptiActivityGetNextRecord) *next_record;
	__typeof__(cuptiActivityGetNumDroppedRecords) *num_dropped;
	__typeof__(cuptiGetResultString) *result_string;
	__typeof__(cuptiGetVersion) *get_version; /* optional */
} cu;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* table, window, channel sends */
static struct kernel_table *table;
static uint64_t window_start_real;
static struct sysom_channel *channel;
static struct sysom_table *records;
static CUpti_SubscriberHandle subscriber;
static bool active;                  /* kernel activity enabled by us */
static _Atomic int buffers_out;
static _Atomic uint64_t cupti_dropped; /* records CUPTI dropped, or buffers refused */
static uint64_t folded_total, dropped_total, windows_total;
static pthread_t thread;
static bool thread_running;
static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thread_wake = PTHREAD_COND_INITIALIZER;
static bool thread_stop;
static uint64_t window_ns;
static pid_t owner_pid;

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *result_text(CUptiResult r)
{
	const char *s = NULL;

	if (cu.result_string && cu.result_string(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

/* ---- CUPTI callbacks (CUPTI's threads) ----------------------------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	void *p = NULL;

	*buffer = NULL;
	*size = 0;
	*max_records = 0;
	if (atomic_fetch_add(&buffers_out, 1) >= MAX_BUFFERS ||
	    posix_memalign(&p, BUFFER_ALIGN, BUFFER_SIZE)) {
		/* No buffer: CUPTI drops the records it cannot store and counts them. */
		atomic_fetch_sub(&buffers_out, 1);
		return;
	}
	*buffer = p;
	*size = BUFFER_SIZE;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				      size_t valid)
{
	CUpti_Activity *rec = NULL;
	size_t dropped = 0;

	(void)size;
	pthread_mutex_lock(&lock);
	while (valid && cu.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		(void)kernel_table_add(table, k->name, k->deviceId, k->streamId, k->start, k->end);
	}
	pthread_mutex_unlock(&lock);
	if (cu.num_dropped && cu.num_dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		atomic_fetch_add(&cupti_dropped, dropped);
	free(buffer);
	atomic_fetch_sub(&buffers_out, 1);
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
				 CUpti_CallbackId cbid, const void *data)
{
	(void)userdata;
	(void)domain;
	(void)cbid;
	(void)data;
}

/* ---- windows ------------------------------------------------------------------------------ */

struct emit_ctx {
	struct sysom_table *t;
};

static void emit_kernel(void *arg, const struct sysom_rec_kernel *e, const char *name)
{
	static const uint32_t name_field[] = { offsetof(struct sysom_rec_kernel, name) };
	struct emit_ctx *c = arg;
	const char *strings[] = { name };

	(void)sysom_table_add(c->t, channel, e, name_field, strings, 1);
}

static void send_stats(void)
{
	struct sysom_channel_stats cs;
	struct sysom_rec_stat st[5];

	sysom_channel_stats(channel, &cs);
	st[0] = (struct sysom_rec_stat){ .id = SYSOM_STAT_CUPTI_RECORDS, .value = folded_total };
	st[1] = (struct sysom_rec_stat){ .id = SYSOM_STAT_CUPTI_DROPPED, .value = dropped_total };
	st[2] = (struct sysom_rec_stat){ .id = SYSOM_STAT_WINDOWS, .value = windows_total };
	st[3] = (struct sysom_rec_stat){ .id = SYSOM_STAT_RECORDS_SENT, .value = cs.records_sent };
	st[4] = (struct sysom_rec_stat){ .id = SYSOM_STAT_RECORDS_DROPPED,
					 .value = cs.records_dropped };
	(void)sysom_channel_send(channel, SYSOM_REC_STATS, st, sizeof(st));
}

/* Flushes CUPTI's buffers into the table, then sends and empties the window. */
static void window_close(void)
{
	struct emit_ctx c = { records };
	uint64_t now;

	if (active)
		cu.flush_all(0);
	pthread_mutex_lock(&lock);
	now = realtime_ns();
	folded_total += table->folded;
	dropped_total += table->dropped + atomic_exchange(&cupti_dropped, 0);
	if (table->nkeys) {
		sysom_table_begin(records, SYSOM_REC_GPU_KERNEL, sizeof(struct sysom_rec_kernel), 0,
				  window_start_real, now);
		kernel_table_foreach(table, emit_kernel, &c);
		(void)sysom_table_flush(records, channel);
	}
	windows_total++;
	kernel_table_reset(table);
	window_start_real = now;
	send_stats();
	sysom_channel_poll(channel);
	pthread_mutex_unlock(&lock);
}

static void *thread_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&thread_lock);
	while (!thread_stop) {
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += (time_t)(window_ns / 1000000000ull);
		until.tv_nsec += (long)(window_ns % 1000000000ull);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&thread_wake, &thread_lock, &until);
		if (thread_stop)
			break;
		pthread_mutex_unlock(&thread_lock);
		window_close();
		pthread_mutex_lock(&thread_lock);
	}
	pthread_mutex_unlock(&thread_lock);
	return NULL;
}

static void thread_halt(void)
{
	pthread_mutex_lock(&thread_lock);
	thread_stop = true;
	pthread_cond_signal(&thread_wake);
	pthread_mutex_unlock(&thread_lock);
	if (thread_running)
		pthread_join(thread, NULL);
	thread_running = false;
}

/* At exit: the last window is flushed and sent (only in the process that injected us). */
static void at_exit(void)
{
	if (!active || getpid() != owner_pid)
		return;
	thread_halt();
	window_close();
	if (cu.disable)
		cu.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	active = false;
}

/* A forked child keeps the parent's CUPTI state but not its thread: it stays silent. */
static void after_fork_child(void)
{
	thread_running = false;
	active = false;
}

/* ---- injection ---------------------------------------------------------------------------- */

/* The CUDA major version a CUPTI API version belongs to (cupti_version.h): from CUDA 13 on the
 * version reads xxyyzz; before, it counted up (12: CUDA 10.x, 13-18: 11.x, 19-28: 12.x). */
static int cupti_cuda_major(uint32_t v)
{
	if (v >= 10000)
		return (int)(v / 10000);
	if (v >= 19)
		return 12;
	if (v >= 13)
		return 11;
	return v == 12 ? 10 : 0;
}

/* The CUDA major version this process runs: its CUDA runtime's if one is loaded, else 0. */
static int runtime_cuda_major(void)
{
	int (*get)(int *) = NULL;
	int v = 0;

	*(void **)&get = dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion");
	return get && get(&v) == 0 && v > 0 ? v / 1000 : 0;
}

/* The CUDA major version the driver supports, or 0 when unknown. */
static int driver_cuda_major(void)
{
	int (*get)(int *) = NULL;
	int v = 0;

	*(void **)&get = dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
	return get && get(&v) == 0 && v > 0 ? v / 1000 : 0;
}

/* The oldest CUPTI this library reads: kernel records since Kernel4 and the activity API of
 * CUDA 12 (the records it folds keep their offsets, asserted above). */
#define OLDEST_CUDA_MAJOR 12

/* Whether the CUPTI at `h` fits this process; on refusal says why (once per candidate). A CUPTI
 * of another CUDA than the process's runtime, or newer than its driver, crashes inside CUPTI
 * (seen on a real GPU: CUPTI of CUDA 10.2 in a CUDA 13 PyTorch process, a segfault). */
static bool cupti_fits(void *h, const char *path, char *why, size_t len)
{
	CUptiResult (*get_version)(uint32_t *) = NULL;
	uint32_t version = 0;
	int major, runtime = runtime_cuda_major(), driver = driver_cuda_major();

	*(void **)&get_version = dlsym(h, "cuptiGetVersion");
	if (!get_version || get_version(&version) != CUPTI_SUCCESS) {
		snprintf(why, len, "%s does not say its version", path);
		return false;
	}
	major = cupti_cuda_major(version);
	if (major < OLDEST_CUDA_MAJOR) {
		snprintf(why, len, "%s is CUPTI API %u (CUDA %d), older than this library reads "
			 "(CUDA %d)", path, version, major, OLDEST_CUDA_MAJOR);
		return false;
	}
	if (runtime && major != runtime) {
		snprintf(why, len, "%s is CUPTI API %u (CUDA %d), the process runs CUDA %d", path,
			 version, major, runtime);
		return false;
	}
	if (driver && major > driver) {
		snprintf(why, len, "%s is CUPTI API %u (CUDA %d), newer than the driver (CUDA %d)",
			 path, version, major, driver);
		return false;
	}
	return true;
}

/* Where to look for CUPTI: a CUPTI the process has loaded already (PyTorch's own), then
 * beside its CUDA runtime (pip wheels: nvidia/cu13/lib, nvidia/cuda_runtime/lib beside
 * nvidia/cuda_cupti/lib; toolkits: lib64 beside extras/CUPTI/lib64). */
struct cupti_search {
	char loaded[PATH_MAX];
	char runtime_dir[PATH_MAX];
	int runtime_major; /* from the runtime's file name libcudart.so.N, 0 if unknown */
};

static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct cupti_search *s = arg;
	const char *name = info->dlpi_name, *base;

	(void)size;
	if (!name || !*name || !(base = strrchr(name, '/')))
		return 0;
	base++;
	if (!s->loaded[0] && !strncmp(base, "libcupti.so", 11))
		snprintf(s->loaded, sizeof(s->loaded), "%s", name);
	if (!s->runtime_dir[0] && !strncmp(base, "libcudart.so", 12)) {
		snprintf(s->runtime_dir, sizeof(s->runtime_dir), "%.*s", (int)(base - 1 - name),
			 name);
		if (base[12] == '.')
			s->runtime_major = atoi(base + 13);
	}
	return 0;
}

/* Tries `path`: loads it and keeps it if it fits. */
static void *try_cupti(const char *path, bool *refused)
{
	char why[PATH_MAX + 160];
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h)
		return NULL;
	if (cupti_fits(h, path, why, sizeof(why)))
		return h;
	fprintf(stderr, "sysom-cupti: not using %s\n", why);
	*refused = true;
	dlclose(h);
	return NULL;
}

static void *open_cupti(bool *refused)
{
	static const char *const names[] = { "libcupti.so", "libcupti.so.13", "libcupti.so.12",
					     "/usr/local/cuda/lib64/libcupti.so",
					     "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so" };
	/* Beside the runtime's directory: these, then each with ".N" (N its CUDA major) added. */
	static const char *const beside[] = { "libcupti.so", "../../cuda_cupti/lib/libcupti.so",
					      "../extras/CUPTI/lib64/libcupti.so" };
	const char *override = getenv("SYSOM_CUPTI_LIBRARY");
	struct cupti_search s = { 0 };
	char path[PATH_MAX + 64];
	void *h;

	*refused = false;
	if (override && *override)
		return try_cupti(override, refused);
	dl_iterate_phdr(find_loaded, &s);
	if (s.loaded[0] && (h = try_cupti(s.loaded, refused)))
		return h;
	if (s.runtime_dir[0]) {
		int major = s.runtime_major ? s.runtime_major : runtime_cuda_major();
		for (size_t i = 0; i < 2 * sizeof(beside) / sizeof(beside[0]); i++) {
			const char *rel = beside[i / 2];
			if (i % 2 == 0 && major > 0)
				snprintf(path, sizeof(path), "%s/%s.%d", s.runtime_dir, rel, major);
			else if (i % 2 == 1)
				snprintf(path, sizeof(path), "%s/%s", s.runtime_dir, rel);
			else
				continue;
			if ((h = try_cupti(path, refused)))
				return h;
		}
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if ((h = try_cupti(names[i], refused)))
			return h;
	return NULL;
}

static bool bind_cupti(void)
{
#define BIND(field, sym)                                                       \
	do {                                                                   \
		*(void **)&cu.field = dlsym(cu.lib, #sym);                     \
		if (!cu.field) {                                               \
			fprintf(stderr, "sysom-cupti: CUPTI lacks " #sym       \
					"; no GPU kernel timing\n");            \
			return false;                                          \
		}                                                              \
	} while (0)
	BIND(subscribe, cuptiSubscribe);
	BIND(unsubscribe, cuptiUnsubscribe);
	BIND(register_callbacks, cuptiActivityRegisterCallbacks);
	BIND(enable, cuptiActivityEnable);
	BIND(disable, cuptiActivityDisable);
	BIND(flush_all, cuptiActivityFlushAll);
	BIND(next_record, cuptiActivityGetNextRecord);
	BIND(num_dropped, cuptiActivityGetNumDroppedRecords);
	BIND(result_string, cuptiGetResultString);
#undef BIND
	*(void **)&cu.get_version = dlsym(cu.lib, "cuptiGetVersion");
	return true;
}

static void inject(void)
{
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_CUPTI,
					   .name = COMPONENT_NAME };
	uint32_t version = 0;
	char name[SYSOM_REC_NAME_MAX + 1];
	CUptiResult r;

	/* No agent configured: enable nothing, cost nothing. */
	const char *sock = getenv("SYSOM_SOCKET_PATH");
	if (!sock || !*sock)
		return;
	window_ns = 1000000ull * (uint64_t)DEFAULT_WINDOW_MS;
	const char *w = getenv("SYSOM_CUPTI_WINDOW_MS");
	if (w && *w) {
		char *end;
		unsigned long v = strtoul(w, &end, 10);
		if (!*end && v >= 10 && v <= 600000)
			window_ns = 1000000ull * v;
	}
	bool refused;
	cu.lib = open_cupti(&refused);
	if (!cu.lib) {
		fprintf(stderr, "sysom-cupti: no %sCUPTI library found (set SYSOM_CUPTI_LIBRARY); "
				"no GPU kernel timing\n", refused ? "fitting " : "");
		goto fail;
	}
	if (!bind_cupti())
		goto fail;
	/* HELLO says which CUPTI: its API version in the name, its CUDA major as interface. */
	if (cu.get_version && cu.get_version(&version) == CUPTI_SUCCESS) {
		snprintf(name, sizeof(name), "%s (CUPTI API %u)", COMPONENT_NAME, version);
		o.name = name;
		o.interface = (uint16_t)cupti_cuda_major(version);
	}
	if (sysom_channel_open(&o, &channel)) {
		channel = NULL;
		goto fail;
	}
	r = cu.subscribe(&subscriber, (CUpti_CallbackFunc)on_callback, NULL);
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		fprintf(stderr, "sysom-cupti: another CUPTI subscriber is active (Nsight Systems, "
				"Kineto?); stepping aside: no GPU kernel timing from this process\n");
		goto fail;
	}
	if (r != CUPTI_SUCCESS) {
		fprintf(stderr, "sysom-cupti: cuptiSubscribe: %s; no GPU kernel timing\n",
			result_text(r));
		goto fail;
	}
	table = malloc(sizeof(*table));
	records = malloc(sizeof(*records));
	if (!table || !records)
		goto fail_unsubscribe;
	kernel_table_reset(table);
	window_start_real = realtime_ns();
	if ((r = cu.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS ||
	    (r = cu.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
		fprintf(stderr, "sysom-cupti: enabling kernel activity: %s; no GPU kernel timing\n",
			result_text(r));
		goto fail_unsubscribe;
	}
	active = true;
	owner_pid = getpid();
	if (pthread_create(&thread, NULL, thread_main, NULL) == 0)
		thread_running = true;
	pthread_atfork(NULL, NULL, after_fork_child);
	atexit(at_exit);
	return;
fail_unsubscribe:
	cu.unsubscribe(subscriber);
fail:
	free(table);
	free(records);
	table = NULL;
	records = NULL;
	sysom_channel_close(channel);
	channel = NULL;
}

EXPORT int InitializeInjection(void);

EXPORT int InitializeInjection(void)
{
	pthread_once(&init_once, inject);
	return 1; /* the driver expects non-zero for success; failures above are not fatal */
}
