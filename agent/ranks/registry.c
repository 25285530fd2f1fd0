/* SPDX-License-Identifier: Apache-2.0 */
/* Registration socket: ranks tell the agent their job identity (docs/registration-protocol.md). */
#include "agent/ranks/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/report.h"
#include "include/sysom/records.h"

#define MESSAGES_PER_WAKEUP 32 /* records read from one connection per poll callback */
#define ACCEPTS_PER_WAKEUP 64  /* connections accepted per poll callback */
#define WARN_INTERVAL_MS 10000 /* at most one warning line this often */

/* ---------------------------------------------------------------------------------------- */
/* Decoding (pure) */

int registry_decode_header(const void *msg, size_t len, struct sysom_frame_header *out)
{
	struct sysom_frame_header h;

	if (!msg || len < REGISTRY_HEADER_SIZE)
		return -SYSOM_ECORRUPT;
	if (len > REGISTRY_MAX_MESSAGE)
		return -SYSOM_ELIMIT;
	sysom_frame_get_header(msg, &h);
	if (h.magic != REGISTRY_MAGIC)
		return -SYSOM_ECORRUPT;
	if (h.version != REGISTRY_VERSION)
		return -SYSOM_EVERSION;
	if (h.length != len - REGISTRY_HEADER_SIZE || h.reserved != 0)
		return -SYSOM_ECORRUPT;
	*out = h;
	return 0;
}

int registry_encode_header(uint8_t out[REGISTRY_HEADER_SIZE], uint16_t type, size_t payload_len)
{
	if (payload_len > REGISTRY_MAX_MESSAGE - REGISTRY_HEADER_SIZE)
		return -SYSOM_ELIMIT;
	sysom_frame_put_header(out, type, (uint32_t)payload_len);
	return 0;
}

/* Plain decimal (1..10 digits) in [0, max]; -1 otherwise. */
static int64_t parse_decimal(const char *p, size_t len, int64_t max)
{
	int64_t n = 0;

	if (len == 0 || len > 10)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		n = n * 10 + (p[i] - '0');
	}
	return n <= max ? n : -1;
}

enum reg_key { KEY_JOB, KEY_RANK, KEY_LOCAL_RANK, KEY_WORLD, KEY_LOCAL_WORLD, KEY_GROUP_RANK,
	       KEY_GROUPS, KEY_PID, KEY_COUNT };

static const char *const key_names[KEY_COUNT] = {
	[KEY_JOB] = SYSOM_REGISTER_KEY_JOB,
	[KEY_RANK] = SYSOM_REGISTER_KEY_RANK,
	[KEY_LOCAL_RANK] = SYSOM_REGISTER_KEY_LOCAL_RANK,
	[KEY_WORLD] = SYSOM_REGISTER_KEY_WORLD_SIZE,
	[KEY_LOCAL_WORLD] = SYSOM_REGISTER_KEY_LOCAL_WORLD_SIZE,
	[KEY_GROUP_RANK] = SYSOM_REGISTER_KEY_GROUP_RANK,
	[KEY_GROUPS] = SYSOM_REGISTER_KEY_GROUPS,
	[KEY_PID] = SYSOM_REGISTER_KEY_PID,
};

static int find_key(const char *p, size_t len)
{
	for (int k = 0; k < KEY_COUNT; k++)
		if (strlen(key_names[k]) == len && memcmp(key_names[k], p, len) == 0)
			return k;
	return -1;
}

int registry_decode_register(const void *msg, size_t len, struct job_identity *out, char *groups,
			     size_t groups_len, int32_t *claimed_pid)
{
	struct sysom_frame_header h;
	struct job_identity id = {
		.rank = -1, .world_size = -1, .local_rank = -1, .local_world_size = -1,
		.group_rank = -1, .master_port = -1, .job_id_source = "registration",
	};
	char group_text[REGISTRY_GROUPS_MAX] = "";
	int64_t numbers[KEY_COUNT];
	bool seen[KEY_COUNT] = { false };
	const char *payload;
	size_t pos = 0;
	int rc;

	rc = registry_decode_header(msg, len, &h);
	if (rc)
		return rc;
	if (h.type != REGISTRY_MSG_REGISTER)
		return -EINVAL;
	payload = (const char *)msg + REGISTRY_HEADER_SIZE;
	for (int k = 0; k < KEY_COUNT; k++)
		numbers[k] = -1;

	while (pos < h.length) {
		const char *entry = payload + pos;
		const char *nul = memchr(entry, '\0', h.length - pos);
		size_t entry_len = nul ? (size_t)(nul - entry) : h.length - pos;
		const char *eq = memchr(entry, '=', entry_len);
		const char *value;
		size_t value_len;
		int key;

		pos += entry_len + 1;
		if (!eq)
			return -EINVAL;
		key = find_key(entry, (size_t)(eq - entry));
		if (key < 0)
			continue; /* unknown keys: forward compatibility */
		if (seen[key])
			return -EINVAL;
		seen[key] = true;
		value = eq + 1;
		value_len = entry_len - (size_t)(eq - entry) - 1;
		switch (key) {
		case KEY_JOB:
			if (value_len > REGISTRY_JOB_MAX)
				return -EMSGSIZE;
			sysom_text_sanitize(id.job_id, sizeof(id.job_id), value, value_len);
			break;
		case KEY_GROUPS:
			if (value_len > REGISTRY_GROUPS_MAX - 1)
				return -EMSGSIZE;
			sysom_text_sanitize(group_text, sizeof(group_text), value, value_len);
			break;
		case KEY_PID:
			numbers[key] = parse_decimal(value, value_len, INT32_MAX);
			if (numbers[key] <= 0)
				return -EINVAL;
			break;
		case KEY_WORLD:
		case KEY_LOCAL_WORLD:
			numbers[key] = parse_decimal(value, value_len, JOBENV_MAX_RANKS);
			if (numbers[key] <= 0)
				return -EINVAL;
			break;
		default: /* ranks */
			numbers[key] = parse_decimal(value, value_len, JOBENV_MAX_RANKS - 1);
			if (numbers[key] < 0)
				return -EINVAL;
			break;
		}
	}

	id.rank = (int32_t)numbers[KEY_RANK];
	id.world_size = (int32_t)numbers[KEY_WORLD];
	id.local_rank = (int32_t)numbers[KEY_LOCAL_RANK];
	id.local_world_size = (int32_t)numbers[KEY_LOCAL_WORLD];
	id.group_rank = (int32_t)numbers[KEY_GROUP_RANK];
	if (id.rank >= 0 && id.world_size > 0 && id.rank >= id.world_size)
		return -EINVAL;
	if (id.local_rank >= 0 && id.local_world_size > 0 && id.local_rank >= id.local_world_size)
		return -EINVAL;
	id.has_rank = id.rank >= 0 && id.world_size > 0;

	*out = id;
	if (groups_len)
		snprintf(groups, groups_len, "%s", group_text);
	*claimed_pid = (int32_t)numbers[KEY_PID];
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The socket */

struct conn {
	uv_poll_t poll;            /* data: this connection */
	struct registry *r;
	int fd;
	uint32_t tgid;             /* SO_PEERCRED pid (the connecting process's tgid); 0: unknown */
	uint32_t slot;             /* index in r->conns */
	bool registered;           /* holds tgid's current identity */
	bool closing;
	uint16_t component;        /* from HELLO (enum sysom_component), 0 before it */
	void *state;               /* the on_record consumer's, freed through on_conn_close */
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
};

struct registry {
	uv_loop_t *loop;
	uv_poll_t listen_poll;     /* data: this registry */
	int listen_fd;
	char *path;
	dev_t sock_dev;            /* the socket file we bound, to remove only our own */
	ino_t sock_ino;
	uint32_t max_clients;
	void (*on_register)(void *ctx, uint32_t tgid, const struct job_identity *id,
			    const char *groups);
	void (*on_disconnect)(void *ctx, uint32_t tgid);
	int (*on_record)(void *ctx, uint32_t tgid, void **state, uint16_t type,
			 const uint8_t *payload, size_t len);
	void (*on_conn_close)(void *ctx, uint32_t tgid, void *state);
	void *ctx;
	struct sysom_reporter report;
	uint32_t profiler_mask;    /* sent to NCCL profilers after their HELLO; 0: none */
	struct conn **conns;       /* open connections, [0, nconns) */
	uint32_t nconns;
	uint32_t handles;          /* libuv handles not yet closed (listener + connections) */
	bool closing;
	struct registry_stats stats;
	uint64_t warn_last_ms;     /* rate limit of warn_limited() */
	uint64_t warn_suppressed;
	bool warned;
	uint8_t buf[REGISTRY_MAX_MESSAGE]; /* one received record */
};

static void warn_limited(struct registry *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A warning line at most every WARN_INTERVAL_MS, saying how many were suppressed since. */
static void warn_limited(struct registry *r, const char *fmt, ...)
{
	uint64_t now = uv_now(r->loop);
	char line[256];
	va_list ap;

	if (r->warned && now - r->warn_last_ms < WARN_INTERVAL_MS) {
		r->warn_suppressed++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (r->warn_suppressed)
		sysom_report(&r->report, SYSOM_REPORT_WARN,
			     "registry: %s (%llu similar messages suppressed)", line,
			     (unsigned long long)r->warn_suppressed);
	else
		sysom_report(&r->report, SYSOM_REPORT_WARN, "registry: %s", line);
	r->warned = true;
	r->warn_last_ms = now;
	r->warn_suppressed = 0;
}

static void registry_free(struct registry *r)
{
	free(r->conns);
	free(r->path);
	free(r);
}

static void handle_closed(struct registry *r)
{
	r->handles--;
	if (r->closing && r->handles == 0)
		registry_free(r);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct registry *r = c->r;

	close(c->fd);
	free(c);
	handle_closed(r);
}

static void on_listen_closed(uv_handle_t *h)
{
	struct registry *r = h->data;

	close(r->listen_fd);
	handle_closed(r);
}

/* Forgets the connection (and its identity), then closes its handle. */
static void conn_close(struct conn *c, bool notify)
{
	struct registry *r = c->r;

	if (c->closing)
		return;
	c->closing = true;
	r->conns[c->slot] = r->conns[--r->nconns];
	r->conns[c->slot]->slot = c->slot;
	r->stats.clients = r->nconns;
	if (notify && c->registered && r->on_disconnect)
		r->on_disconnect(r->ctx, c->tgid);
	c->registered = false;
	if (c->state && r->on_conn_close)
		r->on_conn_close(r->ctx, c->tgid, c->state);
	c->state = NULL;
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, on_conn_closed);
}

static void send_ack(struct conn *c, int32_t status)
{
	uint8_t msg[REGISTRY_HEADER_SIZE + 4];

	registry_encode_header(msg, REGISTRY_MSG_ACK, 4);
	store_le32(msg + REGISTRY_HEADER_SIZE, (uint32_t)status);
	/* Never blocks the loop: a peer that does not read its ACKs loses them. */
	(void)send(c->fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void handle_register(struct conn *c, size_t len)
{
	struct registry *r = c->r;
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	int32_t claimed;
	int rc;

	rc = registry_decode_register(r->buf, len, &id, groups, sizeof(groups), &claimed);
	if (rc) {
		r->stats.rejected_bad_message++;
		warn_limited(r, "registration from pid %u rejected: %s", c->tgid, sysom_strerror(rc));
		send_ack(c, rc);
		return;
	}
	if (c->tgid == 0 || (claimed >= 0 && (uint32_t)claimed != c->tgid)) {
		r->stats.rejected_pid_mismatch++;
		warn_limited(r, "registration from pid %u for pid %d rejected: a process registers "
			     "only itself", c->tgid, (int)claimed);
		send_ack(c, -EPERM);
		return;
	}
	/* One identity per process: a newer connection's registration takes it over. */
	for (uint32_t i = 0; i < r->nconns; i++)
		if (r->conns[i] != c && r->conns[i]->tgid == c->tgid)
			r->conns[i]->registered = false;
	c->id = id;
	memcpy(c->groups, groups, sizeof(c->groups));
	c->registered = true;
	r->stats.registrations++;
	if (r->on_register)
		r->on_register(r->ctx, c->tgid, &c->id, c->groups);
	send_ack(c, 0);
}

static void send_mask(struct conn *c, uint32_t mask)
{
	uint8_t msg[REGISTRY_HEADER_SIZE + sizeof(struct sysom_rec_mask)] = { 0 };

	registry_encode_header(msg, SYSOM_REC_MASK, sizeof(struct sysom_rec_mask));
	store_le32(msg + REGISTRY_HEADER_SIZE, mask);
	(void)send(c->fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* A telemetry record from an in-process component: HELLO names the component (and gets the
 * profiler its mask), everything goes to the consumer, which validates the payload. A bad
 * payload is counted but keeps the connection: the framing is intact. */
static void handle_telemetry(struct conn *c, const struct sysom_frame_header *h)
{
	struct registry *r = c->r;
	const uint8_t *payload = r->buf + REGISTRY_HEADER_SIZE;
	int rc;

	if (c->tgid == 0) {
		r->stats.rejected_records++;
		warn_limited(r, "telemetry from a process outside the agent's pid namespace ignored");
		return;
	}
	if (h->type == SYSOM_REC_HELLO) {
		if (h->length < sizeof(struct sysom_rec_hello)) {
			r->stats.rejected_records++;
			warn_limited(r, "short HELLO from pid %u", c->tgid);
			return;
		}
		c->component = load_le16(payload);
		if (c->component == SYSOM_COMPONENT_NCCL_PROFILER && r->profiler_mask)
			send_mask(c, r->profiler_mask);
	}
	if (!r->on_record) {
		r->stats.unknown_types++;
		return;
	}
	rc = r->on_record(r->ctx, c->tgid, &c->state, h->type, payload, h->length);
	if (rc == -ENOSYS) {
		r->stats.unknown_types++;
	} else if (rc) {
		r->stats.rejected_records++;
		warn_limited(r, "record of type %u (%u bytes) from pid %u rejected: %s",
			     (unsigned)h->type, (unsigned)h->length, c->tgid, sysom_strerror(rc));
	} else {
		r->stats.records++;
	}
}

/* Handles one record; false when the connection must be closed. */
static bool handle_message(struct conn *c, size_t len)
{
	struct registry *r = c->r;
	struct sysom_frame_header h;
	int rc;

	rc = registry_decode_header(r->buf, len, &h);
	if (rc) {
		r->stats.rejected_bad_message++;
		warn_limited(r, "bad message (%zu bytes) from pid %u: %s; closing the connection",
			     len, c->tgid, sysom_strerror(rc));
		return false;
	}
	if (h.type == REGISTRY_MSG_REGISTER)
		handle_register(c, len);
	else if (h.type >= SYSOM_REC_HELLO && h.type != SYSOM_REC_MASK)
		handle_telemetry(c, &h);
	else
		r->stats.unknown_types++; /* a later record type, or one the agent only sends */
	return true;
}

static void on_conn_event(uv_poll_t *p, int status, int events)
{
	struct conn *c = p->data;
	struct registry *r = c->r;

	(void)events;
	if (status < 0) {
		conn_close(c, true);
		return;
	}
	for (int i = 0; i < MESSAGES_PER_WAKEUP && !c->closing; i++) {
		struct iovec iov = { .iov_base = r->buf, .iov_len = sizeof(r->buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_close(c, true);
			return;
		}
		if (n == 0) { /* end of stream (a zero-length record reads the same) */
			conn_close(c, true);
			return;
		}
		if (mh.msg_flags & MSG_TRUNC) {
			r->stats.rejected_bad_message++;
			warn_limited(r, "message over %u bytes from pid %u; closing the connection",
				     REGISTRY_MAX_MESSAGE, c->tgid);
			conn_close(c, true);
			return;
		}
		if (!handle_message(c, (size_t)n)) {
			conn_close(c, true);
			return;
		}
	}
	/* A hang-up (UV_DISCONNECT) is seen as end of stream once the records before it are
	 * read: level-triggered polling calls again while any are left. */
}

static void accept_one(struct registry *r, int fd)
{
	struct ucred cred;
	socklen_t cred_len = sizeof(cred);
	struct conn *c;

	if (r->nconns >= r->max_clients) {
		r->stats.rejected_too_many_clients++;
		warn_limited(r, "connection refused: %u clients already connected", r->nconns);
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		warn_limited(r, "connection refused: out of memory");
		close(fd);
		return;
	}
	c->r = r;
	c->fd = fd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 && cred.pid > 0)
		c->tgid = (uint32_t)cred.pid; /* 0: the peer is outside our pid namespace */
	if (uv_poll_init(r->loop, &c->poll, fd) != 0) {
		close(fd);
		free(c);
		return;
	}
	c->poll.data = c;
	c->slot = r->nconns;
	r->conns[r->nconns++] = c;
	r->handles++;
	r->stats.connections++;
	r->stats.clients = r->nconns;
	if (uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_conn_event) != 0) {
		conn_close(c, false);
		return;
	}
	/* A client sends its registration right after connecting: answer it in this turn of the
	 * loop rather than the next (it waits for the ACK). */
	on_conn_event(&c->poll, 0, UV_READABLE);
}

static void on_listen_event(uv_poll_t *p, int status, int events)
{
	struct registry *r = p->data;

	(void)events;
	if (status < 0) {
		warn_limited(r, "listening socket: %s", uv_strerror(status));
		return;
	}
	for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
		int fd = accept4(r->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				warn_limited(r, "accept: %s", strerror(errno));
			break;
		}
		accept_one(r, fd);
	}
}

/* A socket file someone still accepts connections on (another agent). */
static bool socket_alive(const struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	bool alive;

	if (fd < 0)
		return false;
	alive = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0 || errno == EAGAIN;
	close(fd);
	return alive;
}

/* Creates the parent directory of `path` (0755) when it is missing. 0 or -errno. */
static int make_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0755) == 0)
		return chmod(dir, 0755) == 0 ? 0 : -errno; /* regardless of the umask */
	return errno == EEXIST ? 0 : -errno;
}

/* A listening socket at `path` into `*fd_out`. 0 or -errno with `err` set. */
static int listen_at(const char *path, struct registry *r, int *fd_out, char *err, size_t errlen)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	int fd = -1, rc;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		rc = -ENAMETOOLONG;
		sysom_errorf(err, errlen, "socket path %s is too long", path);
		goto cleanup;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	rc = make_parent(path);
	if (rc) {
		sysom_errorf(err, errlen, "cannot create the directory of %s: %s", path, strerror(-rc));
		goto cleanup;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			rc = -ENOTSOCK;
			sysom_errorf(err, errlen, "%s exists and is not a socket; not replacing it", path);
			goto cleanup;
		}
		if (socket_alive(&addr)) {
			rc = -EADDRINUSE;
			sysom_errorf(err, errlen, "%s: another process listens on it", path);
			goto cleanup;
		}
		if (unlink(path) != 0 && errno != ENOENT) {
			rc = -errno;
			sysom_errorf(err, errlen, "cannot remove stale socket %s: %s", path,
				     strerror(errno));
			goto cleanup;
		}
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "socket: %s", strerror(errno));
		goto cleanup;
	}
	if (bind(fd, (const struct sockaddr *)&addr, sizeof(addr)) != 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "bind %s: %s", path, strerror(errno));
		goto cleanup;
	}
	/* Unprivileged ranks connect; what they may say is checked per message. */
	if (chmod(path, 0666) != 0 || lstat(path, &st) != 0 || listen(fd, SOMAXCONN) != 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "cannot set up %s: %s", path, strerror(errno));
		unlink(path);
		goto cleanup;
	}
	r->sock_dev = st.st_dev;
	r->sock_ino = st.st_ino;
	*fd_out = fd;
	fd = -1;
	rc = 0;
cleanup:
	if (fd >= 0)
		close(fd);
	return rc;
}

int registry_open(uv_loop_t *loop, const struct registry_options *o, struct registry **out,
		  char *err, size_t errlen)
{
	struct registry *r = NULL;
	int fd = -1, rc;

	if (!loop || !o || !o->path || !o->path[0] || !out ||
	    o->max_clients > REGISTRY_MAX_CLIENTS_LIMIT) {
		rc = -EINVAL;
		sysom_errorf(err, errlen, "registry: bad options");
		goto cleanup;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		rc = -ENOMEM;
		sysom_errorf(err, errlen, "registry: out of memory");
		goto cleanup;
	}
	r->loop = loop;
	r->max_clients = o->max_clients ? o->max_clients : REGISTRY_DEFAULT_MAX_CLIENTS;
	r->on_register = o->on_register;
	r->report = o->report;
	r->on_disconnect = o->on_disconnect;
	r->on_record = o->on_record;
	r->on_conn_close = o->on_conn_close;
	r->profiler_mask = o->profiler_mask;
	r->ctx = o->ctx;
	r->path = strdup(o->path);
	r->conns = calloc(r->max_clients, sizeof(*r->conns));
	if (!r->path || !r->conns) {
		rc = -ENOMEM;
		sysom_errorf(err, errlen, "registry: out of memory");
		goto cleanup;
	}
	rc = listen_at(o->path, r, &fd, err, errlen);
	if (rc)
		goto cleanup;
	rc = uv_poll_init(loop, &r->listen_poll, fd);
	if (rc) {
		sysom_errorf(err, errlen, "registry: poll %s: %s", o->path, uv_strerror(rc));
		rc = -EIO;
		unlink(o->path);
		goto cleanup;
	}
	r->listen_fd = fd;
	fd = -1;
	r->listen_poll.data = r;
	r->handles = 1;
	rc = uv_poll_start(&r->listen_poll, UV_READABLE, on_listen_event);
	if (rc) {
		sysom_errorf(err, errlen, "registry: poll %s: %s", o->path, uv_strerror(rc));
		registry_close(r); /* frees in the close callback when the loop runs */
		r = NULL;
		rc = -EIO;
		goto cleanup;
	}
	*out = r;
	r = NULL;
	rc = 0;
cleanup:
	if (fd >= 0)
		close(fd);
	if (r)
		registry_free(r);
	return rc;
}

void registry_close(struct registry *r)
{
	struct stat st;

	if (!r || r->closing)
		return;
	r->closing = true;
	while (r->nconns)
		conn_close(r->conns[r->nconns - 1], false);
	if (lstat(r->path, &st) == 0 && st.st_dev == r->sock_dev && st.st_ino == r->sock_ino)
		unlink(r->path);
	uv_poll_stop(&r->listen_poll);
	uv_close((uv_handle_t *)&r->listen_poll, on_listen_closed);
}

int registry_lookup(const struct registry *r, uint32_t tgid, struct job_identity *out,
		    char *groups, size_t groups_len)
{
	for (uint32_t i = 0; i < r->nconns; i++) {
		const struct conn *c = r->conns[i];

		if (c->tgid == tgid && c->registered) {
			*out = c->id;
			if (groups_len)
				snprintf(groups, groups_len, "%s", c->groups);
			return 0;
		}
	}
	return -ENOENT;
}

void registry_set_profiler_mask(struct registry *r, uint32_t mask)
{
	r->profiler_mask = mask;
	for (uint32_t i = 0; i < r->nconns; i++)
		if (r->conns[i]->component == SYSOM_COMPONENT_NCCL_PROFILER)
			send_mask(r->conns[i], mask);
}

void registry_stats_read(const struct registry *r, struct registry_stats *out)
{
	*out = r->stats;
}
