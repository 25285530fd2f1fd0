/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test side of the component channel (header-only): a SOCK_SEQPACKET listening socket standing
 * in for the agent, and a receiver that validates every record with the agent's own decoders
 * (agent/ranks/channel.c) and merges the tables per key the way the agent's batches do.
 */
#ifndef SYSOM_TESTS_UNIT_PLUGINS_RECORD_RX_H
#define SYSOM_TESTS_UNIT_PLUGINS_RECORD_RX_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/ranks/channel.h"
#include "include/sysom/frame.h"
#include "include/sysom/records.h"

#define RX_MAX 256

/* Failures inside a scenario's child process: print and exit non-zero (cmocka runs in the
 * parent, which checks the exit status). */
#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			_exit(1);                                                            \
		}                                                                            \
	} while (0)

struct rx_coll {
	uint64_t comm_id;
	char func[64], algo[32], proto[32], datatype[32];
	struct sysom_rec_coll r;
};

struct rx_link {
	uint64_t comm_id;
	struct sysom_rec_link r;
};

struct rx_kernel {
	char name[1024];
	struct sysom_rec_kernel r;
};

struct rx {
	int cfd;                 /* the accepted connection, -1 none yet */
	int hellos;
	struct channel_hello hello;
	int ncomms, finalized;
	struct channel_comm comms[RX_MAX];
	int ncolls, nlinks, nkernels;
	struct rx_coll colls[RX_MAX];
	struct rx_link links[RX_MAX];
	struct rx_kernel kernels[RX_MAX];
	int tables;              /* table records received */
	uint64_t stats[CHANNEL_STAT_MAX + 1];
	int stats_records;
	int bad;                 /* records the agent's decoders refused */
};

static inline int rx_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static inline void rx_init(struct rx *rx)
{
	memset(rx, 0, sizeof(*rx));
	rx->cfd = -1;
}

static inline void rx_copy(char *out, size_t len, const char *s)
{
	snprintf(out, len, "%s", s);
}

static inline void rx_coll_merge(struct rx *rx, const struct channel_table *t, uint32_t i)
{
	struct sysom_rec_coll e;
	struct rx_coll *c = NULL;

	channel_table_coll(t, i, &e);
	for (int k = 0; k < rx->ncolls && !c; k++) {
		struct rx_coll *o = &rx->colls[k];
		if (o->comm_id == t->comm_id && o->r.peer == e.peer &&
		    !strcmp(o->func, channel_table_string(t, e.func)) &&
		    !strcmp(o->algo, channel_table_string(t, e.algo)) &&
		    !strcmp(o->proto, channel_table_string(t, e.proto)) &&
		    !strcmp(o->datatype, channel_table_string(t, e.datatype)))
			c = o;
	}
	if (!c) {
		if (rx->ncolls == RX_MAX)
			return;
		c = &rx->colls[rx->ncolls++];
		c->comm_id = t->comm_id;
		rx_copy(c->func, sizeof(c->func), channel_table_string(t, e.func));
		rx_copy(c->algo, sizeof(c->algo), channel_table_string(t, e.algo));
		rx_copy(c->proto, sizeof(c->proto), channel_table_string(t, e.proto));
		rx_copy(c->datatype, sizeof(c->datatype), channel_table_string(t, e.datatype));
		c->r = e;
		return;
	}
	if (e.kernel_timed) {
		if (!c->r.kernel_timed || e.kernel_ns_min < c->r.kernel_ns_min)
			c->r.kernel_ns_min = e.kernel_ns_min;
		if (e.kernel_ns_max > c->r.kernel_ns_max)
			c->r.kernel_ns_max = e.kernel_ns_max;
	}
	if (e.first_seq < c->r.first_seq)
		c->r.first_seq = e.first_seq;
	if (e.last_seq > c->r.last_seq)
		c->r.last_seq = e.last_seq;
	if (e.nchannels > c->r.nchannels)
		c->r.nchannels = e.nchannels;
	c->r.count += e.count;
	c->r.bytes += e.bytes;
	c->r.kernel_timed += e.kernel_timed;
	c->r.kernel_ns_total += e.kernel_ns_total;
	c->r.span_timed += e.span_timed;
	c->r.span_ns_total += e.span_ns_total;
	c->r.enqueue_ns_total += e.enqueue_ns_total;
	c->r.transfers += e.transfers;
	c->r.transfer_bytes += e.transfer_bytes;
}

static inline void rx_link_merge(struct rx *rx, const struct channel_table *t, uint32_t i)
{
	struct sysom_rec_link e;
	struct rx_link *l = NULL;

	channel_table_link(t, i, &e);
	for (int k = 0; k < rx->nlinks && !l; k++)
		if (rx->links[k].comm_id == t->comm_id && rx->links[k].r.peer == e.peer &&
		    rx->links[k].r.channel == e.channel)
			l = &rx->links[k];
	if (!l) {
		if (rx->nlinks == RX_MAX)
			return;
		l = &rx->links[rx->nlinks++];
		l->comm_id = t->comm_id;
		l->r = e;
		return;
	}
	l->r.transfers += e.transfers;
	l->r.bytes += e.bytes;
	l->r.time_ns_total += e.time_ns_total;
	l->r.sx += e.sx;
	l->r.sy += e.sy;
	l->r.sxx += e.sxx;
	l->r.sxy += e.sxy;
	l->r.syy += e.syy;
	if (e.min_points > l->r.min_points) {
		l->r.min_latency_ns = e.min_latency_ns;
		l->r.min_bytes_per_ns = e.min_bytes_per_ns;
		l->r.min_r2 = e.min_r2;
		l->r.min_points = e.min_points;
	}
}

static inline void rx_kernel_merge(struct rx *rx, const struct channel_table *t, uint32_t i)
{
	struct sysom_rec_kernel e;
	struct rx_kernel *k = NULL;

	channel_table_kernel(t, i, &e);
	for (int n = 0; n < rx->nkernels && !k; n++)
		if (!strcmp(rx->kernels[n].name, channel_table_string(t, e.name)) &&
		    rx->kernels[n].r.device == e.device && rx->kernels[n].r.stream == e.stream)
			k = &rx->kernels[n];
	if (!k) {
		if (rx->nkernels == RX_MAX)
			return;
		k = &rx->kernels[rx->nkernels++];
		rx_copy(k->name, sizeof(k->name), channel_table_string(t, e.name));
		k->r = e;
		return;
	}
	k->r.count += e.count;
	k->r.total_ns += e.total_ns;
	if (e.min_ns < k->r.min_ns)
		k->r.min_ns = e.min_ns;
	if (e.max_ns > k->r.max_ns)
		k->r.max_ns = e.max_ns;
	for (int b = 0; b < SYSOM_REC_HIST_BUCKETS; b++)
		k->r.hist[b] += e.hist[b];
}

/* One record from the component. */
static inline void rx_record(struct rx *rx, const uint8_t *buf, size_t n)
{
	uint16_t type;
	uint32_t len;
	struct channel_table t;

	if (n < SYSOM_FRAME_HEADER_SIZE || sysom_frame_get_le32(buf) != SYSOM_FRAME_MAGIC) {
		rx->bad++;
		return;
	}
	type = (uint16_t)(buf[6] | buf[7] << 8);
	len = sysom_frame_get_le32(buf + 8);
	if (len != n - SYSOM_FRAME_HEADER_SIZE) {
		rx->bad++;
		return;
	}
	buf += SYSOM_FRAME_HEADER_SIZE;
	switch (type) {
	case SYSOM_REC_HELLO:
		if (channel_decode_hello(buf, len, &rx->hello))
			rx->bad++;
		else
			rx->hellos++;
		break;
	case SYSOM_REC_NCCL_COMM: {
		struct channel_comm c;
		if (channel_decode_comm(buf, len, &c)) {
			rx->bad++;
		} else {
			if (c.flags & SYSOM_REC_COMM_FINALIZED)
				rx->finalized++;
			if (rx->ncomms < RX_MAX)
				rx->comms[rx->ncomms++] = c;
		}
		break;
	}
	case SYSOM_REC_NCCL_COLL:
	case SYSOM_REC_NCCL_LINK:
	case SYSOM_REC_GPU_KERNEL:
		if (channel_decode_table(buf, len, type, &t)) {
			rx->bad++;
			break;
		}
		rx->tables++;
		for (uint32_t i = 0; i < t.entry_count; i++) {
			if (type == SYSOM_REC_NCCL_COLL)
				rx_coll_merge(rx, &t, i);
			else if (type == SYSOM_REC_NCCL_LINK)
				rx_link_merge(rx, &t, i);
			else
				rx_kernel_merge(rx, &t, i);
		}
		break;
	case SYSOM_REC_STATS: {
		uint64_t v[CHANNEL_STAT_MAX + 1];
		bool present[CHANNEL_STAT_MAX + 1];
		if (channel_decode_stats(buf, len, v, present)) {
			rx->bad++;
			break;
		}
		rx->stats_records++;
		for (int i = 1; i <= CHANNEL_STAT_MAX; i++)
			if (present[i])
				rx->stats[i] = v[i]; /* cumulative: the last wins */
		break;
	}
	default:
		rx->bad++;
	}
}

/* Accepts the component's connection if needed and reads records until none arrived for
 * `quiet_ms`. Returns the number of records read. */
static inline int rx_drain(int lfd, struct rx *rx, int quiet_ms)
{
	static uint8_t buf[1 << 17];
	int n = 0;

	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN },
				       { .fd = rx->cfd, .events = POLLIN } };
		if (poll(p, rx->cfd >= 0 ? 2 : 1, quiet_ms) <= 0)
			return n;
		if (p[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0) {
				if (rx->cfd >= 0)
					close(rx->cfd); /* a reconnect replaces the old one */
				rx->cfd = fd;
			}
			continue;
		}
		if (rx->cfd >= 0 && (p[1].revents & (POLLIN | POLLHUP))) {
			ssize_t got = recv(rx->cfd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got <= 0) {
				if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
					close(rx->cfd);
					rx->cfd = -1;
				}
				continue;
			}
			rx_record(rx, buf, (size_t)got);
			n++;
		}
	}
}

/* Sends one record to the component (as the agent does for MASK). */
static inline int rx_send(struct rx *rx, uint16_t type, const void *payload, uint32_t len)
{
	uint8_t buf[256];

	if (rx->cfd < 0 || len > sizeof(buf) - SYSOM_FRAME_HEADER_SIZE)
		return -1;
	sysom_frame_put_header(buf, type, len);
	memcpy(buf + SYSOM_FRAME_HEADER_SIZE, payload, len);
	return send(rx->cfd, buf, SYSOM_FRAME_HEADER_SIZE + len, MSG_NOSIGNAL) ==
			       (ssize_t)(SYSOM_FRAME_HEADER_SIZE + len)
		       ? 0
		       : -1;
}

static inline const struct rx_coll *rx_find_coll(const struct rx *rx, const char *func, int peer)
{
	for (int i = 0; i < rx->ncolls; i++)
		if (!strcmp(rx->colls[i].func, func) && rx->colls[i].r.peer == peer)
			return &rx->colls[i];
	return NULL;
}

static inline const struct rx_link *rx_find_link(const struct rx *rx, int peer, int channel)
{
	for (int i = 0; i < rx->nlinks; i++)
		if (rx->links[i].r.peer == peer && rx->links[i].r.channel == channel)
			return &rx->links[i];
	return NULL;
}

#endif
