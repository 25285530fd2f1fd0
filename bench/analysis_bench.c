// SPDX-License-Identifier: Apache-2.0
// Cost of the server's straggler analysis for large jobs: time and memory of one evaluation
// for synthetic communicators of 1,000, 10,000 and 100,000 ranks (W = 100 instances).
//
//   core   straggler_group_add x W, then straggler_group_analyse (server/analysis/straggler.c):
//          what one evaluation computes once the instances are in memory.
//   live   the monitor's incremental path: every batch's calls folded into memory as it
//          arrives (server/analysis/live.c), then one evaluation over the latest W instances in memory
//          (diagnosis_stragglers_from + live_source).
//   store  the fallback (and the API's) read path: W instances x N ranks of NCCL calls in the
//          SQLite store, read back (latest W), matched into instances and analysed
//          (diagnosis_stragglers, the layered diagnosis of the straggler included). With
//          --clickhouse http://HOST:PORT/ the same again from a ClickHouse store (a fresh
//          database per size, analysis_bench_<ranks>_<pid>), side by side.
//
// Every run checks the answer (exactly the planted straggler) so a fast wrong result cannot
// pass. Usage: analysis_bench [--ranks N,N,...] [--store-ranks N,N,...] [--rounds R]
//                             [--clickhouse URL]
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/wire/wire.h"
#include "server/analysis/straggler.h"
#include "server/analysis/diagnosis.h"
#include "server/analysis/live.h"
#include "server/store/store.h"

#define WINDOW 100
#define STRAGGLER_RANK 7
#define LATE_NS 5000000 /* the planted straggler enters 5 ms late */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* Deterministic jitter: every rank enters within 200 µs of the instance start. */
static uint64_t jitter(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return (*state >> 33) % 200000;
}

/* Peak resident set size so far, bytes. */
static size_t peak_rss(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (size_t)ru.ru_maxrss * 1024;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int bench_core(int32_t n, int rounds)
{
	double *times = calloc((size_t)rounds, sizeof(*times)), add_s = 0;
	int64_t *entry = calloc((size_t)n, sizeof(*entry));
	struct straggler_rank *out = calloc((size_t)n, sizeof(*out));
	struct straggler_params p;
	size_t mem = 0;
	uint64_t rng = 42;
	int rc = 0;

	if (!times || !entry || !out)
		return -ENOMEM;
	straggler_params_default(&p);
	for (int r = 0; r < rounds && !rc; r++) {
		struct straggler_group *g = NULL;
		size_t before = heap_bytes();
		if ((rc = straggler_group_new(n, WINDOW, &g))) {
			fprintf(stderr, "core %d ranks: %s\n", n, strerror(-rc));
			break;
		}
		mem = heap_bytes() - before;
		double t0 = now_s();
		for (int i = 0; i < WINDOW; i++) {
			for (int32_t k = 0; k < n; k++)
				entry[k] = (int64_t)i * 100000000 + (int64_t)jitter(&rng) +
					   (k == STRAGGLER_RANK ? LATE_NS : 0);
			straggler_group_add(g, entry);
		}
		double t1 = now_s();
		int found = straggler_group_analyse(g, &p, out);
		times[r] = now_s() - t1;
		add_s = t1 - t0;
		if (found != 1 || !out[STRAGGLER_RANK].straggler) {
			fprintf(stderr, "core %d ranks: %d stragglers found, rank %d %s\n", n, found,
				STRAGGLER_RANK, out[STRAGGLER_RANK].straggler ? "among them" : "missed");
			rc = -EPROTO;
		}
		straggler_group_free(g);
	}
	if (!rc) {
		qsort(times, (size_t)rounds, sizeof(*times), cmp_double);
		printf("| core | %" PRId32 " | %.3f ms | %.1f ns | %.1f MiB |\n", n,
		       times[rounds / 2] * 1e3, add_s / WINDOW / n * 1e9, (double)mem / (1 << 20));
	}
	free(times);
	free(entry);
	free(out);
	return rc;
}

/* No profiles in this store: the CPU layer gets empty text. */
static int no_folded(void *arg, const struct store_sample_filter *f, uint32_t limit,
		     struct byte_buf *out)
{
	(void)arg, (void)f, (void)limit, (void)out;
	return 0;
}

/* Ranks in batches of 8 per node, the way agents send them; each batch goes to `sink`. */
static int batches_make(int32_t n, int64_t t0_ns, int (*sink)(void *arg, struct sysom_batch *b),
			void *arg)
{
	uint64_t rng = 7;
	int rc = 0;

	for (int32_t base = 0; base < n && !rc; base += 8) {
		struct sysom_batch b;
		uint32_t job, src, empty;
		if ((rc = sysom_batch_init(&b)))
			return rc;
		b.node_id[0] = (uint8_t)(base / 8);
		b.node_id[1] = (uint8_t)(base / 8 >> 8);
		b.node_id[2] = (uint8_t)(base / 8 >> 16);
		b.node_id[3] = 1;
		b.agent_epoch = 1;
		b.sequence = 1;
		b.window_start_ns = (uint64_t)t0_ns;
		b.window_end_ns = (uint64_t)t0_ns + WINDOW * 100000000ull;
		b.node.kernel_object = SYSOM_WIRE_NONE;
		if ((rc = sysom_batch_intern_cstring(&b, "bench-job", &job)) ||
		    (rc = sysom_batch_intern_cstring(&b, "TORCHELASTIC_RUN_ID", &src)) ||
		    (rc = sysom_batch_intern_cstring(&b, "", &empty)))
			goto next;
		for (int32_t k = base; k < base + 8 && k < n && !rc; k++) {
			struct sysom_process p = { .tgid = (uint32_t)(1000 + k), .start_time_ns = 1,
						   .comm = empty, .exe = empty, .cmdline = empty };
			uint32_t pi;
			if ((rc = sysom_batch_add_process(&b, &p, &pi)))
				break;
			struct sysom_job_rank jr = { .process = pi, .job = job, .rank = k,
						     .world_size = n, .local_rank = k % 8,
						     .local_world_size = 8, .group_rank = k / 8,
						     .source = SYSOM_JOB_FROM_ENVIRONMENT,
						     .job_id_source = src, .master = empty,
						     .groups = empty };
			struct sysom_communicator cm = { .process = pi, .rank = k, .key = 0xabc,
							 .nranks = n, .split_color = -1,
							 .split_key = -1,
							 .key_source = SYSOM_COMM_KEY_UNIQUE_ID,
							 .created_ns = (uint64_t)t0_ns, .handle = 1 };
			if ((rc = sysom_batch_set_job_rank(&b, &jr)) ||
			    (rc = sysom_batch_set_communicator(&b, &cm)))
				break;
			for (int i = 0; i < WINDOW && !rc; i++) {
				uint64_t e = (uint64_t)t0_ns + (uint64_t)i * 100000000ull + jitter(&rng) +
					     (k == STRAGGLER_RANK ? LATE_NS : 0);
				struct sysom_nccl_call c = {
					.process = pi, .tid = p.tgid, .comm_key = 0xabc, .seq = (uint64_t)i,
					.entry_ns = e, .exit_ns = e + 1000000, .count = 1, .bytes = 4,
					.op = SYSOM_NCCL_ALL_REDUCE, .datatype = 7, .redop = 0,
					.peer = -1, .result = 0, .rank = k,
				};
				rc = sysom_batch_add_nccl_call(&b, &c);
			}
		}
		if (!rc)
			rc = sink(arg, &b);
next:
		sysom_batch_free(&b);
	}
	return rc;
}

static int to_store(void *arg, struct sysom_batch *b)
{
	struct store_put_result res;

	return store_batch_put(arg, b, 0, (int64_t)b->window_end_ns, &res);
}

static int store_fill(struct store *s, int32_t n, int64_t t0_ns)
{
	return batches_make(n, t0_ns, to_store, s);
}

static uint32_t window_of(void *arg, const char *job)
{
	(void)arg, (void)job;
	return WINDOW;
}

struct live_sink {
	struct live *l;
	struct live_add_stats st;
	double seconds;
};

static int to_live(void *arg, struct sysom_batch *b)
{
	struct live_sink *k = arg;
	double t = now_s();
	int rc = live_batch_add(k->l, b, window_of, NULL, &k->st);

	k->seconds += now_s() - t;
	return rc;
}

/* The monitor's incremental path: batches folded into memory as they arrive, then one
 * evaluation over the in-memory instances. */
static int bench_live(int32_t n, int rounds)
{
	char dir[] = "/tmp/sysom-analysis-bench.XXXXXX", err[256], cmd[128];
	struct store *s = NULL;
	struct live_sink k = { 0 };
	double *times = calloc((size_t)rounds, sizeof(*times));
	int64_t t0_ns = 1700000000000000000ll;
	int rc;

	if (!times || (rc = live_new(0, &k.l))) {
		free(times);
		return -ENOMEM;
	}
	/* The monitor always has its store (the straggler's pod and pipeline read it): an empty
	 * one here, so what is timed is the in-memory path. */
	if (!mkdtemp(dir)) {
		rc = -errno;
		dir[0] = 0;
		goto cleanup;
	}
	if ((rc = store_sqlite_open(dir, &(struct store_sqlite_options){ 0 }, &s, err,
				    sizeof(err)))) {
		fprintf(stderr, "%s\n", err);
		goto cleanup;
	}
	size_t before = heap_bytes();
	if ((rc = batches_make(n, t0_ns, to_live, &k)))
		goto cleanup;
	size_t mem = heap_bytes() - before;
	struct diagnosis_ctx ctx = { .store = s, .folded = no_folded };
	struct diagnosis_params p;
	struct diagnosis_scope scope = { .job = "bench-job", .from_ms = t0_ns / 1000000 - 1000,
					 .to_ms = t0_ns / 1000000 + WINDOW * 100 + 1000 };
	diagnosis_params_default(&p);
	p.diagnose = false; /* no store here: the straggler's layers read the store */
	for (int r = 0; r < rounds && !rc; r++) {
		json_t *doc = NULL;
		double t = now_s();
		rc = diagnosis_stragglers_from(&ctx, &scope, &p, live_source, k.l, &doc);
		times[r] = now_s() - t;
		json_t *list = json_object_get(doc, "stragglers");
		if (!rc && (json_array_size(list) != 1 ||
			    json_integer_value(json_object_get(json_array_get(list, 0), "rank")) !=
				    STRAGGLER_RANK)) {
			fprintf(stderr, "live %d ranks: %zu stragglers\n", n, json_array_size(list));
			rc = -EPROTO;
		}
		json_decref(doc);
	}
	if (!rc) {
		qsort(times, (size_t)rounds, sizeof(*times), cmp_double);
		printf("| live | %" PRId32 " | %.1f ms | %.0f ns per call folded in | %.1f MiB |\n", n,
		       times[rounds / 2] * 1e3, k.seconds / (double)k.st.calls * 1e9,
		       (double)mem / (1 << 20));
	}
cleanup:
	live_free(k.l);
	store_close(s);
	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	free(times);
	return rc;
}

/* The store path on SQLite (clickhouse NULL) or on the ClickHouse at `clickhouse`. */
static int bench_store(int32_t n, int rounds, const char *clickhouse)
{
	char dir[] = "/tmp/sysom-analysis-bench.XXXXXX", err[256], cmd[128];
	struct store_sqlite_options so = { 0 };
	struct store *s = NULL;
	double *times = calloc((size_t)rounds, sizeof(*times)), fill_s;
	int64_t t0_ns = 1700000000000000000ll;
	size_t mem = 0;
	int rc;

	if (!times || !mkdtemp(dir))
		return -errno;
	if (clickhouse) {
		char url[512];

		snprintf(url, sizeof(url), "%s?database=analysis_bench_%" PRId32 "_%d", clickhouse, n,
			 (int)getpid());
		rc = store_clickhouse_open(&(struct store_clickhouse_options){ .url = url,
									.timeout_ms = 60000 },
					   &s, err, sizeof(err));
	} else {
		rc = store_sqlite_open(dir, &so, &s, err, sizeof(err));
	}
	if (rc) {
		fprintf(stderr, "%s\n", err);
		goto cleanup;
	}
	double f0 = now_s();
	if ((rc = store_fill(s, n, t0_ns)))
		goto cleanup;
	fill_s = now_s() - f0;
	struct diagnosis_ctx ctx = { .store = s, .folded = no_folded };
	struct diagnosis_params p;
	struct diagnosis_scope scope = { .job = "bench-job", .from_ms = t0_ns / 1000000 - 1000,
					 .to_ms = t0_ns / 1000000 + WINDOW * 100 + 1000 };
	diagnosis_params_default(&p);
	size_t before = peak_rss();
	for (int r = 0; r < rounds && !rc; r++) {
		json_t *doc = NULL;
		double t = now_s();
		rc = diagnosis_stragglers(&ctx, &scope, &p, &doc);
		times[r] = now_s() - t;
		mem = peak_rss() > before ? peak_rss() - before : 0;
		json_t *list = json_object_get(doc, "stragglers");
		if (!rc && (json_array_size(list) != 1 ||
			    json_integer_value(json_object_get(json_array_get(list, 0), "rank")) !=
				    STRAGGLER_RANK)) {
			fprintf(stderr, "store %d ranks: %zu stragglers\n", n, json_array_size(list));
			rc = -EPROTO;
		}
		json_decref(doc);
	}
	if (!rc) {
		qsort(times, (size_t)rounds, sizeof(*times), cmp_double);
		printf("| store (%s) | %" PRId32 " | %.1f ms | (fill %.1f s, %" PRId64 " calls) | +%.1f MiB peak RSS |\n",
		       clickhouse ? "ClickHouse" : "SQLite", n, times[rounds / 2] * 1e3, fill_s,
		       (int64_t)n * WINDOW, (double)mem / (1 << 20));
	}
cleanup:
	store_close(s);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	free(times);
	return rc;
}

static int parse_list(const char *text, int32_t *out, int max)
{
	int n = 0;
	char *end;

	while (*text && n < max) {
		long v = strtol(text, &end, 10);
		if (end == text || v < 2 || v > STRAGGLER_MAX_RANKS * 2)
			return -1;
		out[n++] = (int32_t)v;
		text = *end == ',' ? end + 1 : end;
	}
	return n;
}

int main(int argc, char **argv)
{
	int32_t core[8] = { 1000, 10000, 100000 }, store[8] = { 1000, 10000 };
	int ncore = 3, nstore = 2, rounds = 5;
	const char *clickhouse = NULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ranks"))
			ncore = parse_list(argv[i + 1], core, 8);
		else if (!strcmp(argv[i], "--store-ranks"))
			nstore = parse_list(argv[i + 1], store, 8);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--clickhouse"))
			clickhouse = argv[i + 1];
		else
			ncore = -1;
	}
	if (ncore < 0 || nstore < 0 || rounds < 1) {
		fprintf(stderr, "usage: analysis_bench [--ranks N,...] [--store-ranks N,...] [--rounds R]"
				" [--clickhouse http://HOST:PORT/]\n");
		return 2;
	}
	printf("| path | ranks | evaluation (median of %d) | per add / fill | memory |\n", rounds);
	printf("|---|---|---|---|---|\n");
	for (int i = 0; i < ncore; i++)
		if (bench_core(core[i], rounds))
			return 1;
	for (int i = 0; i < ncore; i++)
		if (bench_live(core[i], rounds))
			return 1;
	for (int i = 0; i < nstore; i++) {
		if (bench_store(store[i], rounds > 3 ? 3 : rounds, NULL))
			return 1;
		if (clickhouse && bench_store(store[i], rounds > 3 ? 3 : rounds, clickhouse))
			return 1;
	}
	return 0;
}
