/* SPDX-License-Identifier: Apache-2.0 */
/* The telemetry channel of in-process components to the agent (libc only, never blocks). */
#include "client/sysom_channel.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "include/sysom/frame.h"

#define RETRY_INTERVAL_NS 1000000000LL /* one connect() attempt per second at most */
#define SEND_BUFFER_BYTES (1 << 20)    /* room for a few windows of tables */
#define STRING_CUT 1023                /* bytes of one table string */

struct sysom_channel {
	pthread_mutex_t lock;
	int fd;            /* -1 while not connected */
	pid_t pid;         /* the process that made fd (a forked child reconnects) */
	int64_t next_try;  /* CLOCK_MONOTONIC ns of the next connect() attempt */
	struct sockaddr_un addr;
	uint16_t component, interface;
	uint32_t mask;
	char name[SYSOM_REC_NAME_MAX + 1];
	void (*on_mask)(void *ctx, uint32_t mask);
	void *ctx;
	struct sysom_channel_stats stats;
};

static int64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int sysom_channel_open(const struct sysom_channel_options *o, struct sysom_channel **out)
{
	const char *path = o->path ? o->path : getenv("SYSOM_SOCKET_PATH");
	struct sysom_channel *c;
	size_t len;

	*out = NULL;
	if (!path || !*path)
		return -ENOENT;
	len = strlen(path);
	if (len >= sizeof(c->addr.sun_path))
		return -ENAMETOOLONG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->fd = -1;
	c->addr.sun_family = AF_UNIX;
	memcpy(c->addr.sun_path, path, len + 1);
	c->component = o->component;
	c->interface = o->interface;
	c->mask = o->activation_mask;
	if (o->name)
		strncpy(c->name, o->name, SYSOM_REC_NAME_MAX);
	c->on_mask = o->on_mask;
	c->ctx = o->ctx;
	*out = c;
	return 0;
}

static void disconnect(struct sysom_channel *c)
{
	/* After fork() the descriptor is the parent's connection: close only our copy. */
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

void sysom_channel_close(struct sysom_channel *c)
{
	if (!c)
		return;
	disconnect(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Sends one framed record on the connected socket; caller holds the lock. */
static int send_locked(struct sysom_channel *c, uint16_t type, const void *payload, size_t len)
{
	uint8_t header[SYSOM_FRAME_HEADER_SIZE];
	struct iovec iov[2] = { { header, sizeof(header) }, { (void *)payload, len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	sysom_frame_put_header(header, type, (uint32_t)len);
	do
		n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int err = errno == EWOULDBLOCK ? -EAGAIN : -errno;

		if (err != -EAGAIN && err != -ENOBUFS)
			disconnect(c); /* EPIPE, ECONNRESET: the agent went away; retry later */
		return err;
	}
	c->stats.records_sent++;
	c->stats.bytes_sent += (uint64_t)n;
	return 0;
}

/* Makes sure the channel is connected (at most one attempt per RETRY_INTERVAL_NS); sends
 * HELLO on a new connection. Caller holds the lock. */
static int connect_locked(struct sysom_channel *c)
{
	struct {
		struct sysom_rec_hello hello;
		char name[SYSOM_REC_NAME_MAX + 1];
	} h;
	int64_t now;
	int fd, rc;
	int sndbuf = SEND_BUFFER_BYTES;

	if (c->fd >= 0 && c->pid == getpid())
		return 0;
	if (c->fd >= 0) { /* inherited across fork(): the parent keeps its connection */
		close(c->fd);
		c->fd = -1;
		c->next_try = 0;
	}
	now = monotonic_ns();
	if (now < c->next_try)
		return -ENOTCONN;
	c->next_try = now + RETRY_INTERVAL_NS;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Unix sockets connect at once or fail (EAGAIN: the agent's backlog is full). */
	if (connect(fd, (const struct sockaddr *)&c->addr, sizeof(c->addr)) != 0) {
		rc = errno == EAGAIN || errno == EINPROGRESS ? -ENOTCONN : -errno;
		close(fd);
		return rc;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->fd = fd;
	c->pid = getpid();
	memset(&h, 0, sizeof(h));
	h.hello.component = c->component;
	h.hello.interface = c->interface;
	h.hello.activation_mask = c->mask;
	memcpy(h.name, c->name, strlen(c->name));
	rc = send_locked(c, SYSOM_REC_HELLO, &h, sizeof(h.hello) + strlen(c->name));
	if (rc) {
		disconnect(c);
		return rc;
	}
	c->stats.connects++;
	return 0;
}

int sysom_channel_send(struct sysom_channel *c, uint16_t type, const void *payload, size_t len)
{
	int rc;

	if (len > SYSOM_CHANNEL_MAX_RECORD - SYSOM_FRAME_HEADER_SIZE)
		return -EMSGSIZE;
	pthread_mutex_lock(&c->lock);
	rc = connect_locked(c);
	if (!rc)
		rc = send_locked(c, type, payload, len);
	if (rc)
		c->stats.records_dropped++;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void sysom_channel_poll(struct sysom_channel *c)
{
	uint32_t masks[16];
	unsigned nmasks = 0;

	pthread_mutex_lock(&c->lock);
	if (connect_locked(c) == 0) {
		for (;;) {
			uint8_t buf[256];
			ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);

			if (n == 0) {
				disconnect(c); /* the agent closed the connection */
				break;
			}
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno != EAGAIN && errno != EWOULDBLOCK)
					disconnect(c);
				break;
			}
			/* Only well-formed MASK records count; anything else is skipped. */
			if ((size_t)n == SYSOM_FRAME_HEADER_SIZE + sizeof(struct sysom_rec_mask)) {
				struct sysom_frame_header h;

				sysom_frame_get_header(buf, &h);
				if (h.magic == SYSOM_FRAME_MAGIC && h.version == SYSOM_FRAME_VERSION &&
				    h.type == SYSOM_REC_MASK &&
				    h.length == sizeof(struct sysom_rec_mask) &&
				    nmasks < sizeof(masks) / sizeof(masks[0]))
					masks[nmasks++] =
						sysom_frame_get_le32(buf + SYSOM_FRAME_HEADER_SIZE);
			}
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nmasks; i++)
		if (c->on_mask)
			c->on_mask(c->ctx, masks[i]);
}

void sysom_channel_set_mask(struct sysom_channel *c, uint32_t mask)
{
	pthread_mutex_lock(&c->lock);
	c->mask = mask;
	pthread_mutex_unlock(&c->lock);
}

void sysom_channel_stats(struct sysom_channel *c, struct sysom_channel_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	pthread_mutex_unlock(&c->lock);
}

void sysom_table_begin(struct sysom_table *t, uint16_t type, uint16_t entry_size,
		       uint64_t comm_id, uint64_t window_start_ns, uint64_t window_end_ns)
{
	memset(&t->head, 0, sizeof(t->head));
	t->head.entry_size = entry_size;
	t->head.comm_id = comm_id;
	t->head.window_start_ns = window_start_ns;
	t->head.window_end_ns = window_end_ns;
	t->type = type;
	t->records_sent = t->records_dropped = 0;
	t->entries_len = 0;
	t->strings[0] = '\0'; /* offset 0 is "" */
	t->strings_len = 1;
}

static size_t record_size(const struct sysom_table *t, size_t extra)
{
	return SYSOM_FRAME_HEADER_SIZE + sizeof(t->head) + t->entries_len + t->strings_len + extra;
}

int sysom_table_flush(struct sysom_table *t, struct sysom_channel *c)
{
	static const size_t head = sizeof(struct sysom_rec_table);
	uint8_t *payload;
	size_t len;
	int rc;

	if (!t->entries_len)
		return 0;
	len = head + t->entries_len + t->strings_len;
	/* The payload is assembled in place: the header before the entries would need a copy of
	 * up to 64 KiB anyway, so build it in one heap buffer (not on a hot path). */
	payload = malloc(len);
	if (!payload) {
		rc = -ENOMEM;
		t->records_dropped++;
		goto cleanup;
	}
	t->head.entry_count = (uint16_t)(t->entries_len / t->head.entry_size);
	t->head.strings_size = t->strings_len;
	memcpy(payload, &t->head, head);
	memcpy(payload + head, t->entries, t->entries_len);
	memcpy(payload + head + t->entries_len, t->strings, t->strings_len);
	rc = sysom_channel_send(c, t->type, payload, len);
	if (rc)
		t->records_dropped++;
	else
		t->records_sent++;
cleanup:
	free(payload);
	t->entries_len = 0;
	t->strings[0] = '\0';
	t->strings_len = 1;
	return rc;
}

/* Offset of `s` among the table's strings, adding it; 0 for NULL or "". Strings already
 * present are found by a scan (tables hold a few hundred short names at most). Returns
 * UINT32_MAX when it does not fit. */
static uint32_t intern(struct sysom_table *t, const char *s, size_t room)
{
	size_t len;
	uint32_t off = 1;

	if (!s || !*s)
		return 0;
	len = strnlen(s, STRING_CUT);
	while (off < t->strings_len) {
		size_t have = strlen(t->strings + off);

		if (have == len && memcmp(t->strings + off, s, len) == 0)
			return off;
		off += (uint32_t)have + 1;
	}
	if (len + 1 > room)
		return UINT32_MAX;
	off = t->strings_len;
	memcpy(t->strings + off, s, len);
	t->strings[off + len] = '\0';
	t->strings_len += (uint32_t)len + 1;
	return off;
}

static size_t strings_needed(const char *const *strings, unsigned nstrings)
{
	size_t need = 0;

	for (unsigned i = 0; i < nstrings; i++)
		if (strings[i] && *strings[i])
			need += strnlen(strings[i], STRING_CUT) + 1;
	return need;
}

int sysom_table_add(struct sysom_table *t, struct sysom_channel *c, const void *entry,
		    const uint32_t *string_fields, const char *const *strings, unsigned nstrings)
{
	size_t need = strings_needed(strings, nstrings);
	uint8_t *copy;

	for (unsigned i = 0; i < nstrings; i++)
		if (string_fields[i] + sizeof(uint32_t) > t->head.entry_size)
			return -EINVAL;
	if (record_size(t, 0) - t->entries_len - t->strings_len + t->head.entry_size + 1 + need >
	    SYSOM_CHANNEL_MAX_RECORD)
		return -EMSGSIZE; /* would not fit even in an empty record */
	/* Entry count is a u16; the worst-case string need decides whether to start afresh. */
	if (record_size(t, t->head.entry_size + need) > SYSOM_CHANNEL_MAX_RECORD ||
	    t->entries_len / t->head.entry_size >= UINT16_MAX)
		(void)sysom_table_flush(t, c);
	copy = t->entries + t->entries_len;
	memcpy(copy, entry, t->head.entry_size);
	for (unsigned i = 0; i < nstrings; i++) {
		uint32_t off = intern(t, strings[i], sizeof(t->strings) - t->strings_len);

		memcpy(copy + string_fields[i], &off, sizeof(off));
	}
	t->entries_len += t->head.entry_size;
	return 0;
}
