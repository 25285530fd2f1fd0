/* SPDX-License-Identifier: Apache-2.0 */
/* Upstream debuginfod fetcher: a bounded queue, fetch threads with one libdebuginfod client
 * each, a lossy negative cache, and installation into the symbol repository. */
#include "server/symbols/upstream.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <elfutils/debuginfod.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hash.h"
#include "symrepo/repo.h"

#define MAX_THREADS 16
#define PROBES 8 /* slots looked at per Build ID in the state table */
#define COPY_CHUNK (1u << 20)

enum slot_state {
	SLOT_EMPTY,
	SLOT_QUEUED,   /* in the queue */
	SLOT_FETCHING, /* a thread works on it */
	SLOT_NEGATIVE, /* upstream lacked it (or failed) until `expires` */
};

/* What the fetcher remembers about a Build ID. Lossy: a full probe range overwrites. */
struct slot {
	uint8_t state;
	uint8_t len;
	uint8_t bytes[SYSOM_BUILD_ID_MAX];
	int64_t expires; /* SLOT_NEGATIVE: monotonic seconds */
};

struct upstream {
	struct symrepo *repo;
	struct upstream_hooks hooks;
	struct upstream_options opts;
	pthread_mutex_t lock;
	pthread_cond_t work_cv; /* queue not empty, or stopping */
	pthread_cond_t idle_cv; /* queue empty and nothing fetching */
	struct sysom_build_id *queue; /* ring of queue_max */
	uint32_t head, count;
	uint32_t fetching;
	struct slot *slots;           /* negative_slots (power of two) */
	uint32_t slot_mask;
	bool stopping;
	pthread_t threads[MAX_THREADS];
	uint32_t nthreads;
	struct upstream_stats stats;
};

static bool slot_is(const struct slot *s, const struct sysom_build_id *id)
{
	return s->state != SLOT_EMPTY && s->len == id->len && memcmp(s->bytes, id->bytes, id->len) == 0;
}

/* The slot of `id`, or NULL; with `create`, a slot for it (reusing a free, expired or, when
 * all probed slots are busy, the first one). Under the lock. */
static struct slot *slot_find(struct upstream *u, const struct sysom_build_id *id, bool create)
{
	uint64_t h = sysom_hash64(id->bytes, id->len, 0);
	struct slot *free_slot = NULL;
	int64_t now = sysom_monotonic_s();

	for (uint32_t i = 0; i < PROBES; i++) {
		struct slot *s = &u->slots[(h + i) & u->slot_mask];
		if (slot_is(s, id))
			return s;
		bool reusable = s->state == SLOT_EMPTY ||
				(s->state == SLOT_NEGATIVE && s->expires <= now);
		if (reusable && !free_slot)
			free_slot = s;
	}
	if (!create)
		return NULL;
	if (!free_slot)
		free_slot = &u->slots[h & u->slot_mask];
	free_slot->state = SLOT_EMPTY;
	free_slot->len = id->len;
	memcpy(free_slot->bytes, id->bytes, id->len);
	return free_slot;
}

void upstream_request(struct upstream *u, const struct sysom_build_id *id)
{
	struct slot *s;

	if (!u || id->kind != SYSOM_OBJECT_ELF || id->len == 0 || id->len > SYSOM_BUILD_ID_MAX)
		return;
	pthread_mutex_lock(&u->lock);
	if (u->stopping)
		goto cleanup;
	s = slot_find(u, id, false);
	if (s && (s->state == SLOT_QUEUED || s->state == SLOT_FETCHING ||
		  (s->state == SLOT_NEGATIVE && s->expires > sysom_monotonic_s())))
		goto cleanup;
	if (u->count >= u->opts.queue_max) {
		u->stats.dropped++;
		goto cleanup;
	}
	s = slot_find(u, id, true);
	s->state = SLOT_QUEUED;
	u->queue[(u->head + u->count) % u->opts.queue_max] = *id;
	u->count++;
	u->stats.requested++;
	pthread_cond_signal(&u->work_cv);
cleanup:
	pthread_mutex_unlock(&u->lock);
}

/* Aborts a transfer once the fetcher stops (libdebuginfod calls this while downloading). */
static int progress(debuginfod_client *client, long a, long b)
{
	struct upstream *u = debuginfod_get_user_data(client);
	bool stop;

	(void)a;
	(void)b;
	pthread_mutex_lock(&u->lock);
	stop = u->stopping;
	pthread_mutex_unlock(&u->lock);
	return stop;
}

/* Copies `fd` into a new file `path` (bounded memory). 0 or -errno. */
static int copy_fd(int fd, const char *path)
{
	uint8_t *buf = malloc(COPY_CHUNK);
	int out = -1, rc = 0;
	off_t at = 0;

	if (!buf)
		return -ENOMEM;
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (out < 0) {
		rc = -errno;
		goto cleanup;
	}
	for (;;) {
		ssize_t n = pread(fd, buf, COPY_CHUNK, at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		if ((rc = sysom_write_full(out, buf, (size_t)n)))
			goto cleanup;
		at += n;
	}
cleanup:
	if (out >= 0 && close(out) && !rc)
		rc = -errno;
	if (rc && out >= 0)
		unlink(path);
	free(buf);
	return rc;
}

/*
 * Fetches one kind from upstream and installs it. Returns 1 when installed (or present), 0
 * when upstream lacks it, or a negative error with `msg`.
 */
static int fetch_one(struct upstream *u, debuginfod_client *client,
		     const struct sysom_build_id *id, enum symrepo_kind kind, char *msg,
		     size_t msglen)
{
	char tmp[PATH_MAX], err[256] = "";
	char *path = NULL;
	int fd, rc;

	if (symrepo_has(u->repo, id, kind))
		return 1;
	fd = kind == SYMREPO_EXECUTABLE
		     ? debuginfod_find_executable(client, id->bytes, id->len, &path)
		     : debuginfod_find_debuginfo(client, id->bytes, id->len, &path);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0) {
		snprintf(msg, msglen, "debuginfod: %s", sysom_strerror(fd));
		return fd;
	}
	if ((rc = symrepo_tmp_path(u->repo, tmp, sizeof(tmp)))) {
		snprintf(msg, msglen, "no temporary path in the repository: %s", sysom_strerror(rc));
		goto cleanup;
	}
	/* Move the file out of libdebuginfod's cache (no second copy); copy across filesystems. */
	if (rename(path, tmp) != 0) {
		if ((rc = copy_fd(fd, tmp))) {
			snprintf(msg, msglen, "cannot copy %s: %s", path, sysom_strerror(rc));
			goto cleanup;
		}
		unlink(path);
	}
	rc = symrepo_install(u->repo, id, kind, tmp, err, sizeof(err));
	if (rc == -EEXIST)
		rc = 0;
	if (rc) {
		snprintf(msg, msglen, "install: %s", err[0] ? err : sysom_strerror(rc));
		goto cleanup;
	}
	if (u->hooks.installed)
		u->hooks.installed(u->hooks.ctx, id);
	rc = 1;
cleanup:
	close(fd);
	free(path);
	return rc;
}

static void fetch(struct upstream *u, debuginfod_client *client, const struct sysom_build_id *id)
{
	struct upstream_result res = { 0 };
	char msg[256] = "";
	int exe, dbg, installed = 0;

	exe = fetch_one(u, client, id, SYMREPO_EXECUTABLE, res.message, sizeof(res.message));
	dbg = fetch_one(u, client, id, SYMREPO_DEBUGINFO, msg, sizeof(msg));
	res.executable = exe == 1;
	res.debuginfo = dbg == 1;
	installed = res.executable + res.debuginfo;
	if (exe < 0)
		res.error = exe;
	else if (dbg < 0) {
		res.error = dbg;
		snprintf(res.message, sizeof(res.message), "%s", msg);
	} else if (!installed) {
		res.error = -ENOENT;
		snprintf(res.message, sizeof(res.message), "no upstream server has it");
	}
	pthread_mutex_lock(&u->lock);
	struct slot *s = slot_find(u, id, true);
	if (installed) {
		s->state = SLOT_EMPTY;
	} else {
		s->state = SLOT_NEGATIVE;
		s->expires = sysom_monotonic_s() + u->opts.negative_ttl_s;
	}
	u->stats.fetched += (uint64_t)((exe == 1) + (dbg == 1));
	if (res.error == -ENOENT)
		u->stats.not_found++;
	else if (res.error)
		u->stats.failed++;
	pthread_mutex_unlock(&u->lock);
	if (u->hooks.done)
		u->hooks.done(u->hooks.ctx, id, &res);
}

static void *worker(void *arg)
{
	struct upstream *u = arg;
	debuginfod_client *client = debuginfod_begin();

	if (client) {
		debuginfod_set_user_data(client, u);
		debuginfod_set_progressfn(client, progress);
	}
	pthread_mutex_lock(&u->lock);
	for (;;) {
		while (!u->stopping && u->count == 0)
			pthread_cond_wait(&u->work_cv, &u->lock);
		if (u->stopping)
			break;
		struct sysom_build_id id = u->queue[u->head];
		u->head = (u->head + 1) % u->opts.queue_max;
		u->count--;
		struct slot *s = slot_find(u, &id, true);
		s->state = SLOT_FETCHING;
		u->fetching++;
		pthread_mutex_unlock(&u->lock);
		if (client) {
			fetch(u, client, &id);
		} else if (u->hooks.done) {
			struct upstream_result res = { .error = -ENOMEM };
			snprintf(res.message, sizeof(res.message), "debuginfod_begin failed");
			u->hooks.done(u->hooks.ctx, &id, &res);
		}
		pthread_mutex_lock(&u->lock);
		u->fetching--;
		if (!client) {
			slot_find(u, &id, true)->state = SLOT_EMPTY;
			u->stats.failed++;
		}
		if (u->count == 0 && u->fetching == 0)
			pthread_cond_broadcast(&u->idle_cv);
	}
	pthread_mutex_unlock(&u->lock);
	if (client)
		debuginfod_end(client);
	return NULL;
}

int upstream_wait_idle(struct upstream *u, uint32_t timeout_ms)
{
	struct timespec deadline;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&u->lock);
	while ((u->count || u->fetching) && rc == 0)
		rc = pthread_cond_timedwait(&u->idle_cv, &u->lock, &deadline);
	rc = u->count || u->fetching ? -ETIMEDOUT : 0;
	pthread_mutex_unlock(&u->lock);
	return rc;
}

void upstream_stats_get(struct upstream *u, struct upstream_stats *out)
{
	pthread_mutex_lock(&u->lock);
	*out = u->stats;
	out->queued = u->count;
	pthread_mutex_unlock(&u->lock);
}

static int env_set(const char *name, const char *value, char *err, size_t errlen)
{
	if (setenv(name, value, 1) == 0)
		return 0;
	snprintf(err, errlen, "cannot set %s: %s", name, strerror(errno));
	return -errno;
}

int upstream_new(struct symrepo *repo, const struct upstream_options *opts,
		 const struct upstream_hooks *hooks, struct upstream **out, char *err,
		 size_t errlen)
{
	struct upstream *u = NULL;
	char size[32];
	int rc = 0;

	if (!repo || !opts || !opts->urls || !*opts->urls || !opts->cache_dir) {
		snprintf(err, errlen, "upstream: URLs and a cache directory are required");
		return -EINVAL;
	}
	if (mkdir(opts->cache_dir, 0750) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create %s: %s", opts->cache_dir, strerror(errno));
		return rc;
	}
	snprintf(size, sizeof(size), "%" PRIu64, opts->max_file_size);
	if ((rc = env_set(DEBUGINFOD_URLS_ENV_VAR, opts->urls, err, errlen)) ||
	    (rc = env_set(DEBUGINFOD_CACHE_PATH_ENV_VAR, opts->cache_dir, err, errlen)) ||
	    (opts->max_file_size && (rc = env_set(DEBUGINFOD_MAXSIZE_ENV_VAR, size, err, errlen))))
		return rc;
	u = calloc(1, sizeof(*u));
	if (!u)
		goto nomem;
	u->repo = repo;
	if (hooks)
		u->hooks = *hooks;
	u->opts = *opts;
	if (!u->opts.queue_max)
		u->opts.queue_max = UPSTREAM_DEFAULT_QUEUE;
	if (!u->opts.threads)
		u->opts.threads = UPSTREAM_DEFAULT_THREADS;
	if (u->opts.threads > MAX_THREADS)
		u->opts.threads = MAX_THREADS;
	if (!u->opts.negative_ttl_s)
		u->opts.negative_ttl_s = UPSTREAM_DEFAULT_NEGATIVE_TTL_S;
	uint32_t slots = PROBES;
	while (slots < (u->opts.negative_slots ? u->opts.negative_slots
					       : UPSTREAM_DEFAULT_NEGATIVE_SLOTS) &&
	       slots < (1u << 24))
		slots *= 2;
	u->slot_mask = slots - 1;
	u->queue = calloc(u->opts.queue_max, sizeof(*u->queue));
	u->slots = calloc(slots, sizeof(*u->slots));
	if (!u->queue || !u->slots)
		goto nomem;
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->work_cv, NULL);
	pthread_cond_init(&u->idle_cv, NULL);
	for (uint32_t i = 0; i < u->opts.threads; i++) {
		if ((rc = -pthread_create(&u->threads[i], NULL, worker, u))) {
			snprintf(err, errlen, "cannot start a fetch thread: %s", strerror(-rc));
			upstream_free(u);
			return rc;
		}
		u->nthreads++;
	}
	*out = u;
	return 0;
nomem:
	if (u) {
		free(u->queue);
		free(u->slots);
		free(u);
	}
	snprintf(err, errlen, "upstream: out of memory");
	return -ENOMEM;
}

void upstream_free(struct upstream *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	u->stopping = true;
	pthread_cond_broadcast(&u->work_cv);
	pthread_mutex_unlock(&u->lock);
	for (uint32_t i = 0; i < u->nthreads; i++)
		pthread_join(u->threads[i], NULL);
	pthread_cond_destroy(&u->work_cv);
	pthread_cond_destroy(&u->idle_cv);
	pthread_mutex_destroy(&u->lock);
	free(u->queue);
	free(u->slots);
	free(u);
}
