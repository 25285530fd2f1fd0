/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test tool for the e2e tests (built by the Makefile): holds many idle and slowloris
 * connections open against an HTTP server, reconnecting whenever the server closes one (as an
 * attacker would), from source addresses spread over 127.0.0.x, and reports what it saw.
 *
 *   connflood --port P [--host 127.0.0.1] [--idle N] [--slow N] [--source-base 127.0.0.2]
 *             [--sources K] [--duration S] [--rate R] [--slow-interval-ms MS] [--path P]
 *
 * Idle connections never send a byte. Slow ones send a request line and one header at once,
 * then one more header line every --slow-interval-ms, never ending the head. Connection i
 * binds source address base + (i mod K). New connections (first ones and reconnections) are
 * paced to at most R per second. After S seconds (or at SIGTERM/SIGINT) it prints one
 * "key value" line per counter and exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

enum kind { KIND_IDLE, KIND_SLOW };
enum state { ST_DOWN, ST_CONNECTING, ST_OPEN };

struct flood_conn {
	int fd;
	enum kind kind;
	enum state state;
	uint32_t source;          /* host-order IPv4 source address */
	uint64_t opened_ms;       /* when the connection was established */
	uint64_t next_send_ms;    /* slow: when the next header line goes */
	uint32_t lines;           /* slow: header lines sent */
	bool got_status;          /* a status line was seen on this connection */
	char status[16];          /* the first bytes received ("HTTP/1.1 503") */
	size_t status_len;
};

struct counters {
	uint64_t connects;           /* connect() calls */
	uint64_t connected;          /* connections established */
	uint64_t connect_errors;     /* connect() or its completion failed */
	uint64_t closed_by_server;   /* EOF or reset from the server */
	uint64_t status_503, status_408, status_other;
	uint64_t held_ms_total;      /* summed lifetime of connections the server closed */
	uint64_t slow_lines;         /* header lines sent by slow connections */
	uint64_t open_now, open_max; /* established and not closed */
};

struct flood {
	struct sockaddr_in server;
	struct flood_conn *conns;
	size_t nconns;
	int epfd;
	uint32_t source_base;
	uint32_t sources;
	uint32_t rate;
	uint32_t slow_interval_ms;
	const char *path;
	double tokens;              /* new connections allowed now (token bucket) */
	uint64_t last_refill_ms;
	size_t next_down;           /* where the search for a closed connection resumes */
	struct counters n;
};

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static uint64_t now_ms(void)
{
	return sysom_monotonic_ns() / SYSOM_NS_PER_MS;
}

static void conn_down(struct flood *fl, struct flood_conn *c, bool by_server)
{
	if (c->fd >= 0) {
		epoll_ctl(fl->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	if (c->state == ST_OPEN) {
		fl->n.open_now--;
		if (by_server) {
			fl->n.closed_by_server++;
			fl->n.held_ms_total += now_ms() - c->opened_ms;
		}
	}
	c->fd = -1;
	c->state = ST_DOWN;
}

/* Starts a non-blocking connect from the connection's source address. */
static void conn_start(struct flood *fl, struct flood_conn *c)
{
	struct sockaddr_in from = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(c->source) };
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN | EPOLLRDHUP };
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	c->got_status = false;
	c->status_len = 0;
	c->lines = 0;
	fl->n.connects++;
	if (c->fd < 0) {
		fl->n.connect_errors++;
		return;
	}
	/* The port is picked at connect(), per destination: many sources, no port shortage. */
	setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (bind(c->fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    (connect(c->fd, (struct sockaddr *)&fl->server, sizeof(fl->server)) < 0 &&
	     errno != EINPROGRESS)) {
		fl->n.connect_errors++;
		close(c->fd);
		c->fd = -1;
		return;
	}
	ev.data.ptr = c;
	if (epoll_ctl(fl->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
		fl->n.connect_errors++;
		close(c->fd);
		c->fd = -1;
		return;
	}
	c->state = ST_CONNECTING;
}

static void send_text(struct flood *fl, struct flood_conn *c, const char *text)
{
	ssize_t n = send(c->fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		conn_down(fl, c, true);
}

static void conn_established(struct flood *fl, struct flood_conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
	char head[256];

	c->state = ST_OPEN;
	c->opened_ms = now_ms();
	fl->n.connected++;
	if (++fl->n.open_now > fl->n.open_max)
		fl->n.open_max = fl->n.open_now;
	epoll_ctl(fl->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	if (c->kind == KIND_SLOW) {
		snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: flood\r\n", fl->path);
		send_text(fl, c, head);
		c->next_send_ms = c->opened_ms + fl->slow_interval_ms;
	}
}

static void conn_event(struct flood *fl, struct flood_conn *c, uint32_t events)
{
	char buf[4096];
	ssize_t n;

	if (c->state == ST_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
			fl->n.connect_errors++;
			conn_down(fl, c, false);
			return;
		}
		if (!(events & EPOLLOUT) && !(events & EPOLLIN))
			return;
		conn_established(fl, c);
		if (c->state != ST_OPEN || !(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)))
			return;
	}
	for (;;) {
		n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			size_t take = (size_t)n;
			if (take > sizeof(c->status) - 1 - c->status_len)
				take = sizeof(c->status) - 1 - c->status_len;
			memcpy(c->status + c->status_len, buf, take);
			c->status_len += take;
			c->status[c->status_len] = '\0';
			if (!c->got_status && c->status_len >= 12) {
				c->got_status = true;
				if (strncmp(c->status + 9, "503", 3) == 0)
					fl->n.status_503++;
				else if (strncmp(c->status + 9, "408", 3) == 0)
					fl->n.status_408++;
				else
					fl->n.status_other++;
			}
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    !(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
			return;
		conn_down(fl, c, true);
		return;
	}
}

/* Reconnects closed connections as the rate allows; sends the slow ones' next lines. */
static void flood_tick(struct flood *fl)
{
	uint64_t now = now_ms();

	fl->tokens += (double)(now - fl->last_refill_ms) * fl->rate / 1000.0;
	if (fl->tokens > fl->rate / 10.0 + 1)
		fl->tokens = fl->rate / 10.0 + 1; /* bursts of at most 100 ms worth */
	fl->last_refill_ms = now;
	for (size_t seen = 0; seen < fl->nconns && fl->tokens >= 1; seen++) {
		struct flood_conn *c = &fl->conns[fl->next_down];
		fl->next_down = (fl->next_down + 1) % fl->nconns;
		if (c->state != ST_DOWN)
			continue;
		fl->tokens -= 1;
		conn_start(fl, c);
	}
	for (size_t i = 0; i < fl->nconns; i++) {
		struct flood_conn *c = &fl->conns[i];
		char line[64];
		if (c->kind != KIND_SLOW || c->state != ST_OPEN || now < c->next_send_ms)
			continue;
		snprintf(line, sizeof(line), "X-Slow-%u: %u\r\n", c->lines, c->lines);
		c->lines++;
		fl->n.slow_lines++;
		c->next_send_ms = now + fl->slow_interval_ms;
		send_text(fl, c, line);
	}
}

static void nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int usage(void)
{
	fprintf(stderr, "usage: connflood --port P [--host 127.0.0.1] [--idle N] [--slow N]"
			" [--source-base 127.0.0.2] [--sources K] [--duration S] [--rate R]"
			" [--slow-interval-ms MS] [--path /api/v1/ingest]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct flood fl = { .rate = 1000, .slow_interval_ms = 2000, .sources = 1,
			    .path = "/api/v1/ingest" };
	const char *host = "127.0.0.1", *base = "127.0.0.2";
	unsigned long idle = 0, slow = 0, port = 0;
	double duration = 10;
	struct in_addr a;
	struct epoll_event events[256];

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!val)
			return usage();
		i++;
		if (strcmp(opt, "--port") == 0)
			port = strtoul(val, NULL, 10);
		else if (strcmp(opt, "--host") == 0)
			host = val;
		else if (strcmp(opt, "--idle") == 0)
			idle = strtoul(val, NULL, 10);
		else if (strcmp(opt, "--slow") == 0)
			slow = strtoul(val, NULL, 10);
		else if (strcmp(opt, "--source-base") == 0)
			base = val;
		else if (strcmp(opt, "--sources") == 0)
			fl.sources = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--duration") == 0)
			duration = strtod(val, NULL);
		else if (strcmp(opt, "--rate") == 0)
			fl.rate = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--slow-interval-ms") == 0)
			fl.slow_interval_ms = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--path") == 0)
			fl.path = val;
		else
			return usage();
	}
	if (!port || port > 65535 || !fl.sources || !fl.rate || idle + slow == 0 ||
	    idle + slow > 100000 || duration <= 0)
		return usage();
	fl.server.sin_family = AF_INET;
	fl.server.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &fl.server.sin_addr) != 1 || inet_pton(AF_INET, base, &a) != 1)
		return usage();
	fl.source_base = ntohl(a.s_addr);
	nofile_raise();
	fl.nconns = idle + slow;
	fl.conns = calloc(fl.nconns, sizeof(*fl.conns));
	fl.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!fl.conns || fl.epfd < 0) {
		perror("connflood");
		return 1;
	}
	for (size_t i = 0; i < fl.nconns; i++) {
		fl.conns[i].fd = -1;
		fl.conns[i].kind = i < idle ? KIND_IDLE : KIND_SLOW;
		fl.conns[i].source = fl.source_base + (uint32_t)(i % fl.sources);
	}
	uint64_t end = now_ms() + (uint64_t)(duration * 1000);
	fl.last_refill_ms = now_ms();
	fl.tokens = 1;
	signal(SIGTERM, on_stop_signal);
	signal(SIGINT, on_stop_signal);
	while (!stop_requested && now_ms() < end) {
		int n = epoll_wait(fl.epfd, events, 256, 10);
		for (int i = 0; i < n; i++) {
			struct flood_conn *c = events[i].data.ptr;
			if (c->fd >= 0)
				conn_event(&fl, c, events[i].events);
		}
		flood_tick(&fl);
	}
	printf("connects %" PRIu64 "\n", fl.n.connects);
	printf("connected %" PRIu64 "\n", fl.n.connected);
	printf("connect_errors %" PRIu64 "\n", fl.n.connect_errors);
	printf("closed_by_server %" PRIu64 "\n", fl.n.closed_by_server);
	printf("status_503 %" PRIu64 "\n", fl.n.status_503);
	printf("status_408 %" PRIu64 "\n", fl.n.status_408);
	printf("status_other %" PRIu64 "\n", fl.n.status_other);
	printf("slow_lines %" PRIu64 "\n", fl.n.slow_lines);
	printf("open_at_end %" PRIu64 "\n", fl.n.open_now);
	printf("open_max %" PRIu64 "\n", fl.n.open_max);
	printf("mean_held_ms %" PRIu64 "\n",
	       fl.n.closed_by_server ? fl.n.held_ms_total / fl.n.closed_by_server : 0);
	for (size_t i = 0; i < fl.nconns; i++)
		if (fl.conns[i].fd >= 0)
			close(fl.conns[i].fd);
	close(fl.epfd);
	free(fl.conns);
	return 0;
}
