// SPDX-License-Identifier: Apache-2.0
// Size and time of the profile exports against folded: GET /api/v1/flamegraph with format
// folded, json, pprof and speedscope over one synthetic CPU profile of N distinct stacks
// (depth 24, a binary tree of calls over three ELF objects, so stacks share their root side
// as real ones do), served by the real handler over a real store (the unit-test harness:
// SQLite in a temp dir, ingest of one batch). Every answer is checked: the pprof total
// (gunzip + protobuf-c decode) and the speedscope endValue must equal the folded total.
//
// Usage: export_bench [--stacks N,N,...] [--rounds R]
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "server/query/profile.pb-c.h"
#include "tests/unit/server/harness.h"

#define DEPTH 24

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One batch with `n` distinct user stacks of DEPTH frames, one sample row each. */
static int batch_build(struct sysom_batch *b, uint32_t n, uint64_t *total)
{
	static const uint8_t ids[3][20] = { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } };
	static const char *const paths[3] = { "/usr/bin/python3.11",
					      "/opt/torch/lib/libtorch_cpu.so",
					      "/opt/trainer/libtrainer.so" };
	uint32_t objs[3], proc, levels = 0, comm;
	struct sysom_process p = { .tgid = 4242, .generation = 1, .start_time_ns = 1, .ppid = 1 };
	int rc;

	while ((1u << levels) < n)
		levels++;
	if ((rc = sysom_batch_init(b)))
		return rc;
	memset(b->node_id, 1, sizeof(b->node_id));
	b->agent_epoch = 1;
	b->sequence = 1;
	b->window_start_ns = HARNESS_T0;
	b->window_end_ns = HARNESS_T0 + 30ULL * 1000000000ULL;
	if ((rc = sysom_batch_intern_cstring(b, "node-1", &b->node.hostname)) ||
	    (rc = sysom_batch_intern_cstring(b, "6.1.0", &b->node.kernel_release)) ||
	    (rc = sysom_batch_intern_cstring(b, "x86_64", &b->node.machine)) ||
	    (rc = sysom_batch_intern_cstring(b, "bench", &b->node.agent_version)))
		return rc;
	b->node.sample_hz = 99;
	b->node.sample_rate_ppm = 100000;
	b->node.drain_interval_ms = 5000;
	b->node.batch_interval_ms = 30000;
	b->node.online_cpus = 4;
	for (int i = 0; i < 3; i++)
		if ((rc = sysom_batch_add_object(b, SYSOM_OBJECT_ELF, ids[i], 20, paths[i], &objs[i])))
			return rc;
	if ((rc = sysom_batch_intern_cstring(b, "python3", &p.comm)) ||
	    (rc = sysom_batch_intern_cstring(b, "/usr/bin/python3.11", &p.exe)) ||
	    (rc = sysom_batch_intern_cstring(b, "python3 train.py", &p.cmdline)) ||
	    (rc = sysom_batch_add_process(b, &p, &proc)) ||
	    (rc = sysom_batch_intern_cstring(b, "pt_main_thread", &comm)))
		return rc;
	*total = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct sysom_frame f[DEPTH];
		uint32_t stack;

		for (uint32_t j = 0; j < DEPTH; j++) {
			/* Root first: the tree node at depth j identifies i's first j bits; below
			 * the tree, a few shared frames. Stored leaf first. */
			uint64_t node = j < levels ? i >> (levels - j) : (i * 7u + j) & 255u;
			f[DEPTH - 1 - j] = (struct sysom_frame){ objs[j % 3],
								 0x100000 + ((uint64_t)j << 20) + node * 16 };
		}
		if ((rc = sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, f, DEPTH,
						&stack)))
			return rc;
		struct sysom_sample s = { .process = proc, .tid = 4243, .thread_comm = comm,
					  .time_offset_ms = 1000, .kernel_stack = SYSOM_WIRE_NONE,
					  .user_stack = stack,
					  .count = 1 + ((i * 2654435761u) >> 27) % 50 };
		if ((rc = sysom_batch_add_sample(b, &s)))
			return rc;
		*total += s.count;
	}
	return sysom_batch_add_counter(b, SYSOM_COUNTER_SAMPLES, *total);
}

static int64_t pprof_total(const uint8_t *gz, size_t len)
{
	size_t cap = len * 8 + 4096;
	uint8_t *raw = malloc(cap);
	z_stream z = { 0 };
	int64_t total = -1;

	if (!raw || inflateInit2(&z, 15 + 16) != Z_OK)
		goto cleanup;
	z.next_in = (Bytef *)gz;
	z.avail_in = (uInt)len;
	for (;;) {
		z.next_out = raw + z.total_out;
		z.avail_out = (uInt)(cap - z.total_out);
		int zrc = inflate(&z, Z_NO_FLUSH);
		if (zrc == Z_STREAM_END)
			break;
		if (zrc != Z_OK && zrc != Z_BUF_ERROR)
			goto cleanup;
		uint8_t *bigger = realloc(raw, cap * 2);
		if (!bigger)
			goto cleanup;
		raw = bigger;
		cap *= 2;
	}
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, z.total_out, raw);
	if (p) {
		total = 0;
		for (size_t i = 0; i < p->n_sample; i++)
			total += p->sample[i]->value[0];
		perftools__profiles__profile__free_unpacked(p, NULL);
	}
cleanup:
	inflateEnd(&z);
	free(raw);
	return total;
}

/* folded total: the sum of each line's last field */
static uint64_t folded_total(const uint8_t *text, size_t len)
{
	uint64_t total = 0, v = 0;

	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ')
			v = 0;
		else if (text[i] >= '0' && text[i] <= '9')
			v = v * 10 + (uint64_t)(text[i] - '0');
		else if (text[i] == '\n')
			total += v, v = 0;
		else
			v = 0;
	}
	return total;
}

int main(int argc, char **argv)
{
	char list[256] = "1000,10000,100000";
	static const char *const formats[] = { "folded", "json", "pprof", "speedscope" };
	int rounds = 3, failed = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--stacks") == 0)
			snprintf(list, sizeof(list), "%s", argv[i + 1]);
		else if (strcmp(argv[i], "--rounds") == 0)
			rounds = atoi(argv[i + 1]);
	}
	printf("%-8s %-10s %12s %8s %10s %10s\n", "stacks", "format", "bytes", "x folded",
	       "median ms", "check");
	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint32_t n = (uint32_t)strtoul(tok, NULL, 10);
		struct harness *h = harness_new(HARNESS_TOKEN, NULL);
		struct sysom_batch b;
		uint64_t total, folded_bytes = 0, want = 0;
		char *body = NULL;

		if (!h || batch_build(&b, n, &total) || harness_post_batch(h, &b, &body) != 200) {
			fprintf(stderr, "export_bench: cannot store %u stacks: %s\n", n, body ? body : "");
			return 1;
		}
		free(body);
		sysom_batch_free(&b);
		for (size_t fi = 0; fi < sizeof(formats) / sizeof(formats[0]); fi++) {
			char query[128];
			double ms[16];
			uint8_t *data = NULL;
			size_t len = 0;
			bool ok = false;

			snprintf(query, sizeof(query), "format=%s&limit=100000", formats[fi]);
			for (int r = 0; r < rounds && r < 16; r++) {
				struct test_request t;
				struct http_response resp;

				request_init(&t, "GET", "/api/v1/flamegraph", query);
				request_token(&t, HARNESS_TOKEN);
				response_init(&resp);
				double t0 = now_s();
				api_flamegraph_get(h->api, &t.req, &resp);
				ms[r] = (now_s() - t0) * 1000;
				free(data);
				data = byte_buf_steal(&resp.body, &len);
				if (resp.status != 200) {
					fprintf(stderr, "export_bench: %s: status %d\n", query, resp.status);
					return 1;
				}
			}
			for (int x = 1; x < rounds; x++) /* insertion sort for the median */
				for (int y = x; y > 0 && ms[y] < ms[y - 1]; y--) {
					double tmp = ms[y];
					ms[y] = ms[y - 1];
					ms[y - 1] = tmp;
				}
			if (fi == 0) {
				folded_bytes = len;
				want = folded_total(data, len);
				ok = want == total;
			} else if (fi == 1) {
				ok = strstr((char *)data, "\"truncated\":false") != NULL;
			} else if (fi == 2) {
				ok = pprof_total(data, len) == (int64_t)want;
			} else {
				char end[64];
				snprintf(end, sizeof(end), "\"endValue\":%" PRIu64 ",", want);
				ok = memmem(data, len, end, strlen(end)) != NULL;
			}
			failed += !ok;
			printf("%-8u %-10s %12zu %8.2f %10.1f %10s\n", n, formats[fi], len,
			       folded_bytes ? (double)len / (double)folded_bytes : 0, ms[rounds / 2],
			       ok ? "ok" : "WRONG");
			free(data);
		}
		harness_free(h);
	}
	return failed ? 1 : 0;
}
