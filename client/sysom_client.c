/* SPDX-License-Identifier: Apache-2.0 */
/* libsysom-client: a rank registers its job identity with the local agent (libc only). */
#include "client/sysom_client.h"
#include "include/sysom/frame.h"
#include "include/sysom/jobenv_vars.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PUBLIC __attribute__((visibility("default")))

/* The framing, REGISTER keys and limits are include/sysom/frame.h's (shared with the agent);
 * the public header repeats the limits so that it stands alone. */
_Static_assert(SYSOM_CLIENT_JOB_MAX == SYSOM_REGISTER_JOB_MAX, "the agent's job id limit");
_Static_assert(SYSOM_CLIENT_GROUPS_MAX == SYSOM_REGISTER_GROUPS_MAX, "the agent's groups limit");

#define ACK_TIMEOUT_NS (100 * 1000000LL)
#define PAYLOAD_MAX 1024       /* the largest REGISTER this library sends is under 600 bytes */
#define ERRNO_MAX 4095         /* ACK statuses are 0 or -1..-4095 */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Guarded by `lock`: the connection, the process that opened it and the path it went to. */
static int conn_fd = -1;
static pid_t conn_pid;
static char conn_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* fork() waits for a registration in progress, so the child never inherits a held lock. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void atfork_release(void)
{
	pthread_mutex_unlock(&lock);
}

static void install_atfork(void)
{
	pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Appends "key=value\0" to the message; false when it does not fit. */
static bool append(uint8_t *msg, size_t *len, const char *key, const char *value)
{
	int n = snprintf((char *)msg + *len, SYSOM_FRAME_HEADER_SIZE + PAYLOAD_MAX - *len, "%s=%s",
			 key, value);

	if (n < 0 || (size_t)n + 1 > SYSOM_FRAME_HEADER_SIZE + PAYLOAD_MAX - *len)
		return false;
	*len += (size_t)n + 1;
	return true;
}

static bool append_int(uint8_t *msg, size_t *len, const char *key, int value)
{
	char text[16];

	if (value < 0)
		return true; /* unknown */
	snprintf(text, sizeof(text), "%d", value);
	return append(msg, len, key, text);
}

/* The REGISTER record for `r` into `msg` (SYSOM_FRAME_HEADER_SIZE + PAYLOAD_MAX bytes). */
static int encode_register(const struct sysom_registration *r, uint8_t *msg, size_t *out_len)
{
	const int numbers[] = { r->rank, r->local_rank, r->world_size, r->local_world_size,
				r->group_rank };
	size_t len = SYSOM_FRAME_HEADER_SIZE;
	bool ok = true;

	for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++)
		if (numbers[i] < -1)
			return -EINVAL;
	if ((r->job && strlen(r->job) > SYSOM_CLIENT_JOB_MAX) ||
	    (r->groups && strlen(r->groups) > SYSOM_CLIENT_GROUPS_MAX))
		return -EMSGSIZE;
	if (r->job && r->job[0])
		ok = ok && append(msg, &len, SYSOM_REGISTER_KEY_JOB, r->job);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_RANK, r->rank);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_LOCAL_RANK, r->local_rank);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_WORLD_SIZE, r->world_size);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_LOCAL_WORLD_SIZE, r->local_world_size);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_GROUP_RANK, r->group_rank);
	if (r->groups && r->groups[0])
		ok = ok && append(msg, &len, SYSOM_REGISTER_KEY_GROUPS, r->groups);
	ok = ok && append_int(msg, &len, SYSOM_REGISTER_KEY_PID, (int)getpid());
	if (!ok)
		return -EMSGSIZE;
	sysom_frame_put_header(msg, SYSOM_FRAME_REGISTER, (uint32_t)(len - SYSOM_FRAME_HEADER_SIZE));
	*out_len = len;
	return 0;
}

/* Waits until `fd` has one of `events` or the deadline passes (-ETIMEDOUT). */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ns();
		struct pollfd pfd = { .fd = fd, .events = events };
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)((left + 999999) / 1000000));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static void drop_connection(void)
{
	if (conn_fd >= 0)
		close(conn_fd);
	conn_fd = -1;
}

/* Connects to `path` without blocking past the deadline; sets conn_fd. */
static int open_connection(const char *path, int64_t deadline)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t path_len = strlen(path);
	int fd = -1, rc, soerr = 0;
	socklen_t soerr_len = sizeof(soerr);

	if (path_len >= sizeof(addr.sun_path)) {
		rc = -ENAMETOOLONG;
		goto cleanup;
	}
	memcpy(addr.sun_path, path, path_len + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		goto cleanup;
	}
	if (connect(fd, (const struct sockaddr *)&addr, sizeof(addr)) != 0) {
		/* Unix sockets answer at once (EAGAIN: the agent's backlog is full); be safe. */
		if (errno != EINPROGRESS) {
			rc = -errno;
			goto cleanup;
		}
		rc = wait_fd(fd, POLLOUT, deadline);
		if (rc)
			goto cleanup;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) != 0 || soerr) {
			rc = soerr ? -soerr : -errno;
			goto cleanup;
		}
	}
	conn_fd = fd;
	conn_pid = getpid();
	memcpy(conn_path, path, path_len + 1);
	fd = -1;
	rc = 0;
cleanup:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Discards records the agent sent earlier (an ACK that came after its caller gave up). */
static int drain_stale(void)
{
	uint8_t buf[256];

	for (;;) {
		ssize_t n = recv(conn_fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0)
			continue;
		if (n == 0)
			return -ECONNRESET; /* the agent closed the connection (e.g. it restarted) */
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	}
}

/* The agent's ACK status, skipping other records; -ETIMEDOUT at the deadline. */
static int wait_ack(int64_t deadline)
{
	uint8_t buf[256];

	for (;;) {
		ssize_t n;
		int rc = wait_fd(conn_fd, POLLIN, deadline);

		if (rc)
			return rc;
		n = recv(conn_fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return -errno;
		}
		if ((size_t)n == SYSOM_FRAME_HEADER_SIZE + 4) {
			struct sysom_frame_header h;

			sysom_frame_get_header(buf, &h);
			if (h.magic == SYSOM_FRAME_MAGIC && h.version == SYSOM_FRAME_VERSION &&
			    h.type == SYSOM_FRAME_ACK && h.length == 4) {
				int32_t status = (int32_t)sysom_frame_get_le32(buf + SYSOM_FRAME_HEADER_SIZE);
				return status <= 0 && status >= -ERRNO_MAX ? status : -EPROTO;
			}
		}
		/* another record type: not for us */
	}
}

PUBLIC int sysom_client_register(const struct sysom_registration *r)
{
	int64_t deadline = now_ns() + ACK_TIMEOUT_NS;
	uint8_t msg[SYSOM_FRAME_HEADER_SIZE + PAYLOAD_MAX];
	const char *path;
	size_t len = 0;
	int rc;

	if (!r)
		return -EINVAL;
	path = getenv(SYSOM_CLIENT_SOCKET_ENV);
	if (!path || !path[0])
		return -ENOENT;
	if (strlen(path) >= sizeof(conn_path))
		return -ENAMETOOLONG;
	rc = encode_register(r, msg, &len);
	if (rc)
		return rc;

	pthread_once(&atfork_once, install_atfork);
	pthread_mutex_lock(&lock);
	/* After fork() the agent attributes the inherited connection to the parent. */
	if (conn_fd >= 0 && (conn_pid != getpid() || strcmp(conn_path, path) != 0))
		drop_connection();
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = conn_fd >= 0;

		if (!reused) {
			rc = open_connection(path, deadline);
			if (rc)
				break;
		}
		rc = drain_stale();
		if (rc == 0 && send(conn_fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			rc = -errno;
		if (rc == -ECONNRESET || rc == -EPIPE || rc == -ENOTCONN) {
			drop_connection();
			if (reused)
				continue; /* the agent went away since: connect again, once */
			break;
		}
		if (rc)
			break;
		rc = wait_ack(deadline);
		if (rc == -ECONNRESET)
			drop_connection();
		break;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Plain decimal within [0, INT_MAX] from the first variable for `field` present
 * (sysom_jobenv_vars); else -1. */
static int env_number(enum sysom_jobenv_field field)
{
	for (const char *const *name = sysom_jobenv_vars[field]; *name; name++) {
		const char *v = getenv(*name);
		long long x = 0;

		if (!v)
			continue;
		if (!v[0] || strlen(v) > 10)
			return -1;
		for (const char *p = v; *p; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			x = x * 10 + (*p - '0');
		}
		return x <= INT_MAX ? (int)x : -1;
	}
	return -1;
}

PUBLIC int sysom_client_register_from_env(void)
{
	/* The same variables, in the same order, as the agent reads from /proc
	 * (include/sysom/jobenv_vars.h). */
	struct sysom_registration r = {
		.rank = env_number(SYSOM_JOBENV_RANK),
		.world_size = env_number(SYSOM_JOBENV_WORLD_SIZE),
		.local_rank = env_number(SYSOM_JOBENV_LOCAL_RANK),
		.local_world_size = env_number(SYSOM_JOBENV_LOCAL_WORLD_SIZE),
		.group_rank = env_number(SYSOM_JOBENV_GROUP_RANK),
	};
	const char *run_id = getenv(SYSOM_JOBENV_RUN_ID);
	const char *slurm_job = getenv(SYSOM_JOBENV_SLURM_JOB_ID);
	const char *slurm_step = getenv(SYSOM_JOBENV_SLURM_STEP_ID);
	char job[2 * (SYSOM_CLIENT_JOB_MAX + 1)] = "";

	if (run_id && run_id[0])
		snprintf(job, sizeof(job), "%.127s", run_id);
	else if (slurm_job && slurm_job[0] && slurm_step && slurm_step[0])
		snprintf(job, sizeof(job), "%.127s.%.127s", slurm_job, slurm_step);
	else if (slurm_job && slurm_job[0])
		snprintf(job, sizeof(job), "%.127s", slurm_job);
	/* Truncated to fit, as the agent truncates job ids it reads from the environment. */
	job[SYSOM_CLIENT_JOB_MAX] = '\0';
	r.job = job;
	return sysom_client_register(&r);
}

PUBLIC void sysom_client_close(void)
{
	pthread_mutex_lock(&lock);
	drop_connection();
	pthread_mutex_unlock(&lock);
}
