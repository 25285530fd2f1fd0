/* SPDX-License-Identifier: Apache-2.0 */
/* Test tool (built by the Makefile): fires concurrent zstd bombs and legitimate batches at a
 * running server and records its peak memory (VmHWM) and every answer. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "common/bytes.h"
#include "common/compress.h"
#include "common/wire/wire.h"
#include "common/wire/wire_layout.h"

/*
 * usage: bombload --port P --pid SERVER_PID [--token T] [--bombs N] [--bomb-size BYTES]
 *                 [--bomb-kind declared|streamed|stacks|mixed] [--legit M] [--retries R]
 *                 [--seq S]
 *
 * Bombs: `declared` is BYTES of zeros in a frame that declares its size; `streamed` the same
 * without the size (a streaming compressor's frame); `stacks` a batch of BYTES whose STACKS
 * section is valid to its end (the decoder fills every frame) followed by a sample that names
 * a missing process, so it is refused after being fully decoded; `mixed` cycles through the
 * three. Legitimate batches (one per sender, 40 samples each, sequence S: default the time, so
 * every run sends new ones) are sent at the same moment;
 * on 503 a sender waits Retry-After and tries again, up to R times (default 60).
 *
 * Prints "key value" lines: the server's VmRSS before (baseline_rss_kib), its VmHWM after
 * (peak_hwm_kib; clear_refs resets it first), the largest VmRSS sampled every 5 ms, the bombs'
 * answers (bomb_status_CODE), what the legitimate senders got (legit_stored, legit_503s,
 * legit_failed, legit_samples_stored) and the slowest legitimate delivery.
 */

#define LEGIT_SAMPLES 40
#define MAX_THREADS 256

static struct {
	uint16_t port;
	int pid;
	const char *token;
	int bombs, legit, retries;
	uint64_t bomb_size, seq;
	const char *bomb_kind;
} cfg = { .token = "e2e-secret-token", .bombs = 6, .legit = 4, .retries = 60,
	  .bomb_size = 128u << 20, .bomb_kind = "mixed" };

static pthread_barrier_t start_line;

/* ---- HTTP over a plain socket ---- */

struct answer {
	int status;
	int retry_after; /* seconds, -1 when absent */
	char body[256];
};

static int http_post(const char *key, const struct byte_buf *body, struct answer *a)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(cfg.port) };
	char head[512], resp[4096];
	size_t got = 0;
	int fd, n;

	a->status = 0;
	a->retry_after = -1;
	a->body[0] = '\0';
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		return -ECONNREFUSED;
	}
	n = snprintf(head, sizeof(head),
		     "POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		     "Authorization: Bearer %s\r\nContent-Type: application/vnd.sysom.batch\r\n"
		     "Content-Encoding: zstd\r\nIdempotency-Key: %s\r\nContent-Length: %zu\r\n"
		     "Connection: close\r\n\r\n",
		     cfg.token, key, body->len);
	if (write(fd, head, (size_t)n) != n) {
		close(fd);
		return -EIO;
	}
	for (size_t done = 0; done < body->len;) {
		ssize_t w = write(fd, body->data + done, body->len - done);
		if (w <= 0) {
			close(fd);
			return -EIO;
		}
		done += (size_t)w;
	}
	for (;;) {
		ssize_t r = read(fd, resp + got, sizeof(resp) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(resp) - 1)
			break;
	}
	close(fd);
	resp[got] = '\0';
	if (sscanf(resp, "HTTP/1.1 %d", &a->status) != 1)
		return -EPROTO;
	for (char *line = strstr(resp, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
		if (strncasecmp(line + 2, "retry-after:", 12) == 0)
			a->retry_after = atoi(line + 14);
		if (line[2] == '\r')
			break;
	}
	char *b = strstr(resp, "\r\n\r\n");
	if (b)
		snprintf(a->body, sizeof(a->body), "%s", b + 4);
	return 0;
}

/* ---- payloads ---- */

static void key_of(const uint8_t node[SYSOM_NODE_ID_SIZE], uint64_t epoch, uint64_t seq,
		   char *out, size_t outlen)
{
	int n = 0;

	for (int i = 0; i < SYSOM_NODE_ID_SIZE; i++)
		n += snprintf(out + n, outlen - (size_t)n, "%02x", node[i]);
	snprintf(out + n, outlen - (size_t)n, ":%016" PRIx64 ":%" PRIu64, epoch, seq);
}

/* zstd of `len` bytes, declaring the size or not (streamed, window 2^20). */
static int compress(const void *data, size_t len, bool declared, struct byte_buf *out)
{
	if (declared)
		return sysom_zstd_compress(data, len, 1, out);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = ZSTD_compressBound(len) + 64;
	uint8_t *dst = byte_buf_reserve(out, cap);
	ZSTD_inBuffer in = { data, len / 2, 0 };
	ZSTD_outBuffer ob = { dst, cap, 0 };
	int rc = 0;

	if (!c || !dst) {
		ZSTD_freeCCtx(c);
		return -ENOMEM;
	}
	ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1);
	ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 20);
	ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
	/* Two calls: the frame header is written before the whole size is known. */
	if (ZSTD_isError(ZSTD_compressStream2(c, &ob, &in, ZSTD_e_continue)))
		rc = -EIO;
	in.size = len;
	if (!rc && ZSTD_compressStream2(c, &ob, &in, ZSTD_e_end) != 0)
		rc = -EIO;
	out->len += ob.pos;
	ZSTD_freeCCtx(c);
	return rc;
}

/* A batch of about `size` bytes: STRINGS, NODE, one object, user stacks of STACK_DEPTH frames
 * filling the rest, and one sample naming a process that does not exist. */
#define STACK_DEPTH 16
static int stacks_batch(uint64_t size, uint64_t seq, struct byte_buf *out)
{
	const uint32_t nsec = 5, table = SYSOM_WIRE_HEADER_SIZE + nsec * SYSOM_WIRE_SECTION_ENTRY_SIZE;
	const uint32_t strings = 4, node = SYSOM_NODE_RECORD_SIZE, objects = SYSOM_OBJECT_RECORD_SIZE;
	const uint32_t samples = SYSOM_SAMPLE_RECORD_SIZE;
	const uint32_t fixed = table + strings + node + objects + samples;
	const uint32_t per_stack = SYSOM_STACK_HEADER_SIZE + STACK_DEPTH * SYSOM_FRAME_RECORD_SIZE;
	uint32_t nstacks = size > fixed ? (uint32_t)((size - fixed) / per_stack) : 1;
	uint32_t off[5], len[5] = { strings, node, objects, nstacks * per_stack, samples };
	uint16_t type[5] = { SYSOM_SECTION_STRINGS, SYSOM_SECTION_NODE, SYSOM_SECTION_OBJECTS,
			     SYSOM_SECTION_STACKS, SYSOM_SECTION_SAMPLES };
	uint32_t count[5] = { 1, 1, 1, nstacks, 1 };
	uint8_t *p;

	if (nstacks > sysom_wire_default_limits.max_stacks)
		nstacks = count[3] = sysom_wire_default_limits.max_stacks, len[3] = nstacks * per_stack;
	uint64_t total = fixed + (uint64_t)len[3];
	if (!(p = byte_buf_reserve(out, total)))
		return -ENOMEM;
	memset(p, 0, total);
	memcpy(p + WIRE_HDR_MAGIC, SYSOM_WIRE_MAGIC, 4);
	store_le16(p + WIRE_HDR_MAJOR, SYSOM_WIRE_MAJOR);
	store_le16(p + WIRE_HDR_MINOR, SYSOM_WIRE_MINOR);
	store_le16(p + WIRE_HDR_HEADER_SIZE, SYSOM_WIRE_HEADER_SIZE);
	store_le16(p + WIRE_HDR_SECTION_COUNT, nsec);
	memset(p + WIRE_HDR_NODE_ID, 0xb0, SYSOM_NODE_ID_SIZE);
	store_le64(p + WIRE_HDR_AGENT_EPOCH, 1);
	store_le64(p + WIRE_HDR_SEQUENCE, seq);
	store_le64(p + WIRE_HDR_WINDOW_START, 1700000000000000000ULL);
	store_le64(p + WIRE_HDR_WINDOW_END, 1700000030000000000ULL);
	off[0] = table;
	for (int i = 1; i < 5; i++)
		off[i] = off[i - 1] + len[i - 1];
	for (uint32_t i = 0; i < nsec; i++) {
		uint8_t *e = p + SYSOM_WIRE_HEADER_SIZE + i * SYSOM_WIRE_SECTION_ENTRY_SIZE;
		store_le16(e + WIRE_SEC_TYPE, type[i]);
		store_le32(e + WIRE_SEC_COUNT, count[i]);
		store_le32(e + WIRE_SEC_OFFSET, off[i]);
		store_le32(e + WIRE_SEC_SIZE, len[i]);
	}
	store_le32(p + off[1] + WIRE_NODE_KERNEL_OBJECT, SYSOM_WIRE_NONE);
	p[off[2] + WIRE_OBJECT_KIND] = SYSOM_OBJECT_ELF;
	p[off[2] + WIRE_OBJECT_BUILD_ID_LEN] = 20;
	memset(p + off[2] + WIRE_OBJECT_BUILD_ID, 0xb1, 20);
	for (uint32_t i = 0; i < nstacks; i++) {
		uint8_t *s = p + off[3] + (size_t)i * per_stack;
		store_le16(s + WIRE_STACK_NFRAMES, STACK_DEPTH);
		s[WIRE_STACK_KIND] = SYSOM_STACK_USER;
		for (uint32_t j = 0; j < STACK_DEPTH; j++)
			store_le64(s + SYSOM_STACK_HEADER_SIZE + j * SYSOM_FRAME_RECORD_SIZE +
					   WIRE_FRAME_OFFSET,
				   0x1000 + 16 * j);
	}
	uint8_t *sample = p + off[4];
	store_le32(sample + WIRE_SAMPLE_KERNEL_STACK, SYSOM_WIRE_NONE);
	store_le32(sample + WIRE_SAMPLE_USER_STACK, 0); /* its process 0 does not exist */
	store_le64(sample + WIRE_SAMPLE_COUNT, 1);
	out->len += total;
	return 0;
}

/* A small ordinary batch from node 0x70+i: two processes, stacks, LEGIT_SAMPLES samples. */
static int legit_batch(int i, uint64_t seq, struct byte_buf *out, char *key, size_t keylen)
{
	struct sysom_batch b;
	struct byte_buf raw = { 0 };
	struct timespec now;
	uint32_t obj, proc, stack, comm;
	int rc;

	clock_gettime(CLOCK_REALTIME, &now);
	rc = sysom_batch_init(&b);
	memset(b.node_id, 0x70 + i, sizeof(b.node_id));
	b.agent_epoch = 7;
	b.sequence = seq;
	b.window_start_ns = (uint64_t)now.tv_sec * 1000000000ULL - 30000000000ULL;
	b.window_end_ns = b.window_start_ns + 30000000000ULL;
	rc = rc ?: sysom_batch_intern_cstring(&b, "legit-node", &b.node.hostname);
	b.node.kernel_object = SYSOM_WIRE_NONE;
	b.node.sample_hz = 99;
	uint8_t id[20];
	memset(id, 0xc0 + i, sizeof(id));
	rc = rc ?: sysom_batch_add_object(&b, SYSOM_OBJECT_ELF, id, 20, "/usr/bin/trainer", &obj);
	rc = rc ?: sysom_batch_intern_cstring(&b, "trainer", &comm);
	for (int p = 0; !rc && p < 2; p++) {
		struct sysom_process pr = { .tgid = 100 + (uint32_t)p, .start_time_ns = 1, .ppid = 1,
					    .comm = comm, .exe = comm, .cmdline = comm };
		rc = sysom_batch_add_process(&b, &pr, &proc);
		for (int s = 0; !rc && s < LEGIT_SAMPLES / 2; s++) {
			struct sysom_frame f[3] = { { obj, 0x1000 + (uint64_t)s * 16 },
						    { obj, 0x2000 }, { obj, 0x3000 } };
			rc = sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, f, 3, &stack);
			struct sysom_sample smp = { .process = proc, .tid = 100 + (uint32_t)p,
						    .kernel_stack = SYSOM_WIRE_NONE,
						    .user_stack = stack, .thread_comm = comm, .count = 1 };
			rc = rc ?: sysom_batch_add_sample(&b, &smp);
		}
	}
	rc = rc ?: sysom_batch_encode(&b, &raw);
	rc = rc ?: sysom_zstd_compress(raw.data, raw.len, 3, out);
	key_of(b.node_id, b.agent_epoch, b.sequence, key, keylen);
	sysom_batch_free(&b);
	byte_buf_free(&raw);
	return rc;
}

/* ---- senders ---- */

struct sender {
	pthread_t thread;
	int index;
	bool legit;
	struct byte_buf body;
	char key[96];
	/* results */
	int status, refusals_503, attempts;
	bool stored;
	double seconds;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	struct answer a;
	double t0;

	pthread_barrier_wait(&start_line);
	t0 = now_s();
	for (s->attempts = 1;; s->attempts++) {
		if (http_post(s->key, &s->body, &a)) {
			s->status = 0;
			break;
		}
		s->status = a.status;
		if (!s->legit || a.status != 503 || s->attempts > cfg.retries)
			break;
		s->refusals_503++;
		struct timespec wait = { .tv_sec = a.retry_after > 0 ? a.retry_after : 1 };
		nanosleep(&wait, NULL);
	}
	s->seconds = now_s() - t0;
	s->stored = a.status == 200 && strstr(a.body, "\"stored\"");
	return NULL;
}

/* ---- the server's memory ---- */

static long status_kib(const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", cfg.pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':')
			v = strtol(line + flen + 1, NULL, 10);
	fclose(f);
	return v;
}

static volatile bool sampling = true;
static long sampled_peak;

static void *sampler_main(void *arg)
{
	(void)arg;
	while (sampling) {
		long rss = status_kib("VmRSS");
		if (rss > sampled_peak)
			sampled_peak = rss;
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int usage(void)
{
	fprintf(stderr, "usage: bombload --port P --pid SERVER_PID [--token T] [--bombs N]"
			" [--bomb-size BYTES] [--bomb-kind declared|streamed|stacks|mixed]"
			" [--legit M] [--retries R] [--seq S]\n");
	return 2;
}

int main(int argc, char **argv)
{
	static struct sender senders[MAX_THREADS];
	static const char *const kinds[] = { "declared", "streamed", "stacks" };
	pthread_t sampler;
	int total, statuses[600] = { 0 };
	char path[64];

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *o = argv[i], *v = argv[i + 1];
		if (!strcmp(o, "--port"))
			cfg.port = (uint16_t)atoi(v);
		else if (!strcmp(o, "--pid"))
			cfg.pid = atoi(v);
		else if (!strcmp(o, "--token"))
			cfg.token = v;
		else if (!strcmp(o, "--bombs"))
			cfg.bombs = atoi(v);
		else if (!strcmp(o, "--bomb-size"))
			cfg.bomb_size = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--bomb-kind"))
			cfg.bomb_kind = v;
		else if (!strcmp(o, "--legit"))
			cfg.legit = atoi(v);
		else if (!strcmp(o, "--retries"))
			cfg.retries = atoi(v);
		else if (!strcmp(o, "--seq"))
			cfg.seq = strtoull(v, NULL, 10);
		else
			return usage();
	}
	total = cfg.bombs + cfg.legit;
	if (!cfg.seq)
		cfg.seq = (uint64_t)time(NULL);
	if (!cfg.port || cfg.pid <= 0 || cfg.bombs < 0 || cfg.legit < 0 || total > MAX_THREADS ||
	    total == 0 || !cfg.bomb_size)
		return usage();
	uint8_t *zeros = calloc(1, cfg.bomb_size);
	if (!zeros)
		return 1;
	for (int i = 0; i < total; i++) {
		struct sender *s = &senders[i];
		int rc;
		s->index = i;
		s->legit = i >= cfg.bombs;
		if (s->legit) {
			rc = legit_batch(i - cfg.bombs, cfg.seq, &s->body, s->key, sizeof(s->key));
		} else {
			const char *kind = strcmp(cfg.bomb_kind, "mixed") ? cfg.bomb_kind : kinds[i % 3];
			uint8_t node[SYSOM_NODE_ID_SIZE];
			memset(node, 0xb0, sizeof(node));
			key_of(node, cfg.seq, 1000 + (uint64_t)i, s->key, sizeof(s->key));
			if (!strcmp(kind, "declared") || !strcmp(kind, "streamed")) {
				rc = compress(zeros, cfg.bomb_size, !strcmp(kind, "declared"), &s->body);
			} else if (!strcmp(kind, "stacks")) {
				struct byte_buf raw = { 0 };
				rc = stacks_batch(cfg.bomb_size, 1000 + (uint64_t)i, &raw);
				rc = rc ?: sysom_zstd_compress(raw.data, raw.len, 3, &s->body);
				byte_buf_free(&raw);
			} else {
				return usage();
			}
		}
		if (rc || byte_buf_error(&s->body)) {
			fprintf(stderr, "bombload: cannot build payload %d (%d)\n", i, rc);
			return 1;
		}
	}
	free(zeros);
	pthread_barrier_init(&start_line, NULL, (unsigned)total + 1);
	for (int i = 0; i < total; i++)
		pthread_create(&senders[i].thread, NULL, sender_main, &senders[i]);
	long baseline = status_kib("VmRSS");
	snprintf(path, sizeof(path), "/proc/%d/clear_refs", cfg.pid);
	int fd = open(path, O_WRONLY);
	bool reset = fd >= 0 && write(fd, "5", 1) == 1; /* resets VmHWM to VmRSS */
	if (fd >= 0)
		close(fd);
	sampled_peak = baseline;
	pthread_create(&sampler, NULL, sampler_main, NULL);
	double t0 = now_s();
	pthread_barrier_wait(&start_line);
	for (int i = 0; i < total; i++)
		pthread_join(senders[i].thread, NULL);
	double elapsed = now_s() - t0;
	sampling = false;
	pthread_join(sampler, NULL);
	long hwm = status_kib("VmHWM");

	int legit_stored = 0, legit_503s = 0, legit_failed = 0;
	double slowest = 0;
	for (int i = 0; i < total; i++) {
		struct sender *s = &senders[i];
		if (!s->legit) {
			statuses[s->status >= 0 && s->status < 600 ? s->status : 0]++;
			continue;
		}
		legit_stored += s->stored;
		legit_failed += !s->stored;
		legit_503s += s->refusals_503;
		slowest = s->seconds > slowest ? s->seconds : slowest;
		if (!s->stored)
			fprintf(stderr, "bombload: legitimate batch %s: HTTP %d after %d attempts\n",
				s->key, s->status, s->attempts);
	}
	printf("baseline_rss_kib %ld\n", baseline);
	printf("hwm_reset %d\n", reset);
	printf("peak_hwm_kib %ld\n", hwm);
	printf("peak_sampled_kib %ld\n", sampled_peak);
	printf("bombs %d\n", cfg.bombs);
	for (int c = 0; c < 600; c++)
		if (statuses[c])
			printf("bomb_status_%d %d\n", c, statuses[c]);
	printf("legit %d\n", cfg.legit);
	printf("legit_stored %d\n", legit_stored);
	printf("legit_failed %d\n", legit_failed);
	printf("legit_503s %d\n", legit_503s);
	printf("legit_samples_stored %d\n", legit_stored * LEGIT_SAMPLES);
	printf("legit_slowest_s %.2f\n", slowest);
	printf("elapsed_s %.2f\n", elapsed);
	for (int i = 0; i < total; i++)
		byte_buf_free(&senders[i].body);
	return 0;
}
