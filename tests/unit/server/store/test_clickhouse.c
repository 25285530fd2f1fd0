/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse store against a private clickhouse-server (tests/tools/clickhouse-private.sh):
 * the same batches into SQLite and ClickHouse give the same answers; duplicates, conflicts,
 * rows of a write cut short, kernel symbols, schema versions, ClickHouse down or slow.
 * Skipped when clickhouse-server is not installed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "server/store/store.h"
#include "tests/support/batch_fixture.h"
#include "tests/unit/server/job_fixture.h"

#define T0 1700000000000000000ULL
#define FIXTURE_HASH 0x5eed5eed5eed5eedULL
/* The schema version this build migrates to (clickhouse_internal.h's CH_SCHEMA_VERSION). */
#define CH_SCHEMA_NEWEST 17

static char ch_dir[128];  /* the private server's files */
static char ch_url[128];  /* http://127.0.0.1:PORT/ */
static bool ch_up;
static unsigned db_seq;

static int ch_script(const char *verb, char *out, size_t outlen)
{
	const char *root = getenv("SYSOM_ROOT");
	char cmd[512];
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "%s/tests/tools/clickhouse-private.sh %s %s",
		 root ? root : ".", verb, ch_dir);
	if (!(p = popen(cmd, "r")))
		return -errno;
	if (out && !fgets(out, (int)outlen, p))
		out[0] = '\0';
	status = pclose(p);
	if (out)
		out[strcspn(out, "\n")] = '\0';
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int group_setup(void **state)
{
	(void)state;
	if (access("/usr/sbin/clickhouse-server", X_OK) != 0)
		return 0;
	assert_int_equal(fixture_tmpdir_make(ch_dir, sizeof(ch_dir)), 0);
	ch_up = ch_script("start", ch_url, sizeof(ch_url)) == 0 && ch_url[0];
	return ch_up ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	if (ch_dir[0]) {
		ch_script("stop", NULL, 0);
		fixture_tmpdir_remove(ch_dir);
	}
	return 0;
}

struct ctx {
	char dir[128];
	char url[256];
	char db[32];
	struct store *sq, *ch;
};

/* A fresh database per test: tests do not see each other's rows. */
static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	char err[256];

	assert_non_null(c);
	*state = c;
	if (!ch_up)
		return 0;
	snprintf(c->db, sizeof(c->db), "t%u_%d", ++db_seq, (int)getpid());
	snprintf(c->url, sizeof(c->url), "%s?database=%s", ch_url, c->db);
	assert_int_equal(fixture_tmpdir_make(c->dir, sizeof(c->dir)), 0);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->sq, err, sizeof(err)), 0);
	struct store_clickhouse_options o = { .url = c->url };
	int rc = store_clickhouse_open(&o, &c->ch, err, sizeof(err));
	if (rc)
		fail_msg("store_clickhouse_open: %d %s", rc, err);
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	store_close(c->sq);
	store_close(c->ch);
	if (c->dir[0])
		fixture_tmpdir_remove(c->dir);
	free(c);
	return 0;
}

#define REQUIRE_CH()                                                         \
	do {                                                                  \
		if (!ch_up)                                                   \
			skip();                                               \
	} while (0)

/* Runs SQL on the private server directly (what another client would do). */
static void ch_sql(const char *db, const char *sql)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "curl -sSf '%s?database=%s' --data-binary \"%s\" >/dev/null",
		 ch_url, db, sql);
	assert_int_equal(system(cmd), 0);
}

/* Makes the database say it has applied migrations 1..version only (the ones after it run at
 * the next open). Rewritten, not an ALTER ... DELETE: that is an asynchronous mutation. */
static void migrations_rewind(const char *db, unsigned version)
{
	char sql[128];

	ch_sql(db, "DROP TABLE schema_migrations");
	ch_sql(db, "CREATE TABLE schema_migrations (version UInt32, applied_ns Int64)"
		   " ENGINE = MergeTree ORDER BY version");
	snprintf(sql, sizeof(sql), "INSERT INTO schema_migrations SELECT number + 1, 0"
		 " FROM numbers(%u)", version);
	ch_sql(db, sql);
}

static void put(struct store *s, const struct fixture_spec *spec, uint64_t hash,
		struct store_put_result *res)
{
	struct sysom_batch b;
	struct store_put_result r;

	assert_int_equal(fixture_batch_build(&b, spec), 0);
	int rc = store_batch_put(s, &b, hash, (int64_t)T0 + 31000000000LL + (int64_t)spec->sequence, &r);
	if (rc)
		fail_msg("store_batch_put: %d (%s)", rc, sysom_strerror(rc));
	if (res)
		*res = r;
	sysom_batch_free(&b);
}

static void put_both(struct ctx *c, const struct fixture_spec *spec)
{
	struct store_put_result a, b;

	put(c->sq, spec, FIXTURE_HASH, &a);
	put(c->ch, spec, FIXTURE_HASH, &b);
	assert_int_equal(a.duplicate, b.duplicate);
	assert_int_equal(a.samples, b.samples);
	assert_int_equal(a.sample_rows, b.sample_rows);
	assert_int_equal(a.new_stacks, b.new_stacks);
	assert_int_equal(a.processes, b.processes);
}

/* ---- answers as text, with stacks resolved to object names (ids differ by backend) ------- */

struct text {
	struct store *s;
	char buf[16384];
	size_t len;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof(t->buf) - t->len);
	t->len += (size_t)n;
}

static void stack_text(struct text *t, int64_t id)
{
	struct store_stack *stk = NULL;

	if (id == STORE_STACK_NONE) {
		text_add(t, "-");
		return;
	}
	assert_int_equal(store_stack_get(t->s, id, &stk), 0);
	text_add(t, "k%u/%u[", stk->kind, stk->stop_reason);
	for (uint16_t i = 0; i < stk->nframes; i++) {
		struct store_object o = { 0 };

		assert_int_equal(store_object_get(t->s, stk->frames[i].object, &o), 0);
		text_add(t, "%s%s(%u,%u)+0x%" PRIx64, i ? ";" : "", o.name, o.id.kind, o.id.len,
			 stk->frames[i].offset);
		store_object_release(&o);
	}
	text_add(t, "]");
	free(stk);
}

/* Groups are compared as a set: stack ids (hence ties' order) differ between backends. */
static int row_text(void *arg, const struct store_stack_count *r)
{
	struct text *t = arg;

	text_add(t, "%s pid=%" PRId64 " procs=%" PRIu64 " n=%" PRIu64 " u=", r->comm, r->pid,
		 r->processes, r->count);
	stack_text(t, r->user_stack);
	text_add(t, " k=");
	stack_text(t, r->kernel_stack);
	text_add(t, "\n");
	return 0;
}

static int line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts the lines of a text in place (newline-separated). */
static void text_sort(struct text *t)
{
	char *lines[256], copy[sizeof(t->buf)];
	size_t n = 0, len = 0;

	memcpy(copy, t->buf, t->len + 1);
	for (char *save, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		assert_true(n < 256);
		lines[n++] = l;
	}
	qsort(lines, n, sizeof(lines[0]), line_cmp);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(t->buf + len, sizeof(t->buf) - len, "%s\n", lines[i]);
	t->len = len;
}

static void aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
		      struct text *t, uint64_t *total)
{
	memset(t, 0, sizeof(*t));
	t->s = s;
	int rc = store_stacks_aggregate(s, f, limit, row_text, t, total);
	if (rc)
		fail_msg("store_stacks_aggregate: %s", sysom_strerror(rc));
	text_sort(t);
}

static void same_aggregate(struct ctx *c, const struct store_sample_filter *f, uint64_t want)
{
	static struct text a, b;
	uint64_t ta = 0, tb = 0;

	aggregate(c->sq, f, 1000, &a, &ta);
	aggregate(c->ch, f, 1000, &b, &tb);
	assert_string_equal(a.buf, b.buf);
	assert_int_equal(ta, tb);
	assert_int_equal(ta, want);
}

/* The same groups and total from both backends, whatever the total; returns it. */
static uint64_t same_stacks(struct ctx *c, const struct store_sample_filter *f)
{
	static struct text a, b;
	uint64_t ta = 0, tb = 0;

	aggregate(c->sq, f, 1000, &a, &ta);
	aggregate(c->ch, f, 1000, &b, &tb);
	assert_string_equal(a.buf, b.buf);
	assert_int_equal(ta, tb);
	return ta;
}

static int node_text(void *arg, const struct store_node *n)
{
	struct text *t = arg;

	text_add(t, "%s %s %s %s %s %s hz=%u ppm=%u cpus=%u first=%" PRId64 " last=%" PRId64
		 " batches=%" PRIu64 " epoch=%" PRIu64 " seq=%" PRIu64 "\n",
		 n->node_id, n->hostname, n->kernel_release, n->machine, n->agent_version,
		 n->boot_id, n->sample_hz, n->sample_rate_ppm, n->online_cpus, n->first_seen_ns,
		 n->last_seen_ns, n->batches, n->last_epoch, n->last_sequence);
	return 0;
}

/* A process's identity: "-" when unknown, else every field ("" shown as ''). */
static void identity_text(struct text *t, const struct store_identity *id)
{
	if (!id->known) {
		text_add(t, " id=-");
		return;
	}
	text_add(t, " id=[rt='%s' cid='%s' uid='%s' ns='%s' pod='%s' cn='%s' slurm=%" PRIu64
		 " step='%s' unit='%s']", id->runtime, id->container_id, id->pod_uid,
		 id->pod_namespace, id->pod_name, id->container_name, id->slurm_job, id->slurm_step,
		 id->unit);
}

static int process_text(void *arg, const struct store_process *p)
{
	struct text *t = arg;

	text_add(t, "%s %s %u %u %u %" PRIu64 " %s %s %s %" PRId64 " %" PRId64 " %" PRIu64,
		 p->node_id, p->hostname, p->pid, p->ppid, p->generation, p->start_time_ns,
		 p->comm, p->exe, p->cmdline, p->first_seen_ns, p->last_seen_ns, p->samples);
	identity_text(t, &p->identity);
	text_add(t, "\n");
	return 0;
}

static int counter_text(void *arg, const struct store_counter_total *ct)
{
	struct text *t = arg;

	text_add(t, "%u %s %s %" PRIu64 "\n", ct->counter, ct->node_id, ct->hostname, ct->total);
	return 0;
}

static void test_same_answers(void **state)
{
	struct ctx *c = *state;
	static struct text a, b;
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter all = { .from_ms = from, .to_ms = from + 3600000 };

	REQUIRE_CH();
	/* Two nodes, a few windows each, one with extra stacks and a renamed process. */
	for (uint64_t seq = 1; seq <= 3; seq++) {
		put_both(c, &(struct fixture_spec){ .node = 7, .epoch = 0xfeedULL << 48,
						     .sequence = seq,
						     .window_start_ns = T0 + (seq - 1) * 30000000000ULL,
						     .hostname = "gpu-7", .extra_stacks = 5 });
		put_both(c, &(struct fixture_spec){ .node = 8, .epoch = 9, .sequence = seq,
						     .window_start_ns = T0 + (seq - 1) * 30000000000ULL,
						     .python_comm = seq == 3 ? "trainer" : NULL });
	}
	same_aggregate(c, &all, 6 * FIXTURE_SAMPLES + 3 * 5);

	struct store_sample_filter f = all;
	f.to_ms = from + 7000; /* the first window's +5 s samples only */
	same_aggregate(c, &f, 2 * 13); /* the extra stacks are sampled later */
	f = all;
	f.node = "gpu-7";
	same_aggregate(c, &f, 3 * FIXTURE_SAMPLES + 15);
	f.node = "08080808080808080808080808080808";
	same_aggregate(c, &f, 3 * FIXTURE_SAMPLES);
	f.node = "gpu-9";
	same_aggregate(c, &f, 0);
	f = all;
	f.comm = "nccl-net";
	same_aggregate(c, &f, 6 * 9);
	f.comm = "trainer"; /* node 8's python process is now called trainer (latest batch) */
	same_aggregate(c, &f, 3 * 13);
	f = all;
	f.has_pid = true;
	f.pid = FIXTURE_PID_NCCL;
	same_aggregate(c, &f, 6 * 9);

	/* A limit keeps the largest groups and the total of all. */
	uint64_t total = 0;
	aggregate(c->ch, &all, 1, &a, &total);
	assert_int_equal(total, 6 * FIXTURE_SAMPLES + 15);
	assert_non_null(strstr(a.buf, "n=30")); /* 3 x 10: each node names its python differently */

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_nodes_list(c->sq, node_text, &a), 0);
	assert_int_equal(store_nodes_list(c->ch, node_text, &b), 0);
	assert_string_equal(a.buf, b.buf);

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_processes_list(c->sq, &all, 100, process_text, &a), 0);
	assert_int_equal(store_processes_list(c->ch, &all, 100, process_text, &b), 0);
	text_sort(&a);
	text_sort(&b);
	assert_string_equal(a.buf, b.buf);

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_counters_list(c->sq, counter_text, &a), 0);
	assert_int_equal(store_counters_list(c->ch, counter_text, &b), 0);
	assert_string_equal(a.buf, b.buf);

	/* Node 7 renamed (its latest batch names another host): the new name finds all its rows,
	 * the old one none, its id all of them. */
	put_both(c, &(struct fixture_spec){ .node = 7, .epoch = 0xfeedULL << 48, .sequence = 4,
					     .window_start_ns = T0 + 3 * 30000000000ULL,
					     .hostname = "gpu-7-new" });
	f = all;
	f.node = "gpu-7-new";
	same_aggregate(c, &f, 4 * FIXTURE_SAMPLES + 15);
	f.node = "gpu-7";
	same_aggregate(c, &f, 0);
	f.node = "07070707070707070707070707070707";
	same_aggregate(c, &f, 4 * FIXTURE_SAMPLES + 15);
}

/* ---- training jobs: ranks, communicators, collective instances ---------------------------- */

/* Puts the job batch of `js` into both stores, changed by `edit` first when not NULL. */
static void put_job_edited(struct ctx *c, const struct job_spec *js, int64_t received_ns,
			   void (*edit)(struct sysom_batch *b))
{
	struct store_put_result a, b;
	struct sysom_batch batch;

	int brc = job_batch_build(&batch, js);
	if (brc)
		fail_msg("job_batch_build (node %u): %d", js->base.node, brc);
	if (edit)
		edit(&batch);
	assert_int_equal(store_batch_put(c->sq, &batch, FIXTURE_HASH, received_ns, &a), 0);
	int rc = store_batch_put(c->ch, &batch, FIXTURE_HASH, received_ns, &b);
	if (rc)
		fail_msg("store_batch_put (ClickHouse): %s", sysom_strerror(rc));
	sysom_batch_free(&batch);
	assert_int_equal(a.duplicate, b.duplicate);
	assert_int_equal(a.job_ranks, b.job_ranks);
	assert_int_equal(a.communicators, b.communicators);
	assert_int_equal(a.nccl_calls, b.nccl_calls);
}

/* A later batch of the same ranks: its collectives continue the sequence (seq + 20). */
static void shift_seq(struct sysom_batch *b)
{
	for (uint32_t i = 0; i < b->nccl_call_count; i++)
		if (b->nccl_calls[i].comm_key)
			b->nccl_calls[i].seq += 20;
}

static void put_job_both(struct ctx *c, const struct job_spec *js, int64_t received_ns)
{
	put_job_edited(c, js, received_ns, NULL);
}

/* A later window that knows less: communicator fields unknown (the stored ones stay), the
 * communicators destroyed, a job rank unknown (the newest window's -1 wins, as in SQLite). */
static void forget(struct sysom_batch *b)
{
	for (uint32_t i = 0; i < b->communicator_count; i++) {
		struct sysom_communicator *m = &b->communicators[i];

		m->rank = m->nranks = m->split_color = m->split_key = -1;
		m->parent_key = m->nccl_comm_hash = 0;
		m->split_ordinal = 0;
		m->created_ns = 0;
		m->flags |= SYSOM_COMM_DESTROYED;
		m->handle = 0x999;
	}
	b->job_ranks[0].rank = -1;
	b->job_ranks[0].local_rank = -1;
	/* The ranks' GPUs: unknown keeps the known one, a known one replaces it (wire 1.7). */
	for (uint32_t i = 1; i < b->job_rank_count; i++)
		b->job_ranks[i].gpu_device = i == 1 ? 8 : 0;
}

/* Split communicators with the high bit set: SQLite orders keys as signed integers. */
static void high_keys(struct sysom_batch *b)
{
	for (uint32_t i = 0; i < b->communicator_count; i++)
		if (b->communicators[i].parent_key)
			b->communicators[i].key |= 1ULL << 63;
}

static int job_text(void *arg, const struct store_job *j)
{
	text_add(arg, "%s ws=%d ranks=%u procs=%u nodes=%u first=%" PRId64 " last=%" PRId64 "\n",
		 j->job, j->world_size, j->ranks, j->processes, j->nodes, j->first_seen_ns,
		 j->last_seen_ns);
	return 0;
}

static int rank_text(void *arg, const struct store_job_rank *r)
{
	text_add(arg, "r=%d ws=%d lr=%d lws=%d gr=%d src=%u %s %s pid=%u gen=%u st=%" PRIu64
		 " %s %s %s %s first=%" PRId64 " last=%" PRId64 " role=%u rpid=%u gpu=%d", r->rank,
		 r->world_size, r->local_rank, r->local_world_size, r->group_rank, r->source,
		 r->node_id, r->hostname, r->pid, r->generation, r->start_time_ns, r->comm,
		 r->job_id_source, r->master, r->groups, r->first_seen_ns, r->last_seen_ns, r->role,
		 r->rank_pid, r->gpu_device);
	identity_text(arg, &r->identity);
	text_add(arg, "\n");
	return 0;
}

static int comm_text(void *arg, const struct store_job_communicator *m)
{
	text_add(arg, "k=%" PRIx64 " pk=%" PRIx64 " h=%" PRIx64 " r=%d n=%d sc=%d sk=%d so=%u ks=%u"
		 " d=%d cr=%" PRId64 " %s %s pid=%u jr=%d first=%" PRId64 " last=%" PRId64 "\n",
		 m->key, m->parent_key, m->comm_hash, m->rank, m->nranks, m->split_color,
		 m->split_key, m->split_ordinal, m->key_source, m->destroyed, m->created_ns,
		 m->node_id, m->hostname, m->pid, m->job_rank, m->first_seen_ns, m->last_seen_ns);
	return 0;
}

static int call_text(void *arg, const struct store_collective_call *k)
{
	text_add(arg, "k=%" PRIx64 " op=%u seq=%" PRIu64 " first=%" PRId64 " n=%d r=%d in=%" PRId64
		 " out=%" PRId64 " c=%" PRIu64 " b=%" PRIu64 " peer=%d res=%d pid=%u tid=%u %s %s"
		 " jr=%d\n", k->comm_key, k->op, k->seq, k->first_entry_ns, k->nranks, k->rank,
		 k->entry_ns, k->exit_ns, k->count, k->bytes, k->peer, k->result, k->pid, k->tid,
		 k->node_id, k->hostname, k->job_rank);
	return 0;
}

/* Runs one listing on both stores; the answers must be the same text. Returns the lines. */
#define SAME_LISTING(call_sq, call_ch)                                                      \
	({                                                                                  \
		static struct text a_, b_;                                                  \
		memset(&a_, 0, sizeof(a_));                                                 \
		memset(&b_, 0, sizeof(b_));                                                 \
		assert_int_equal((call_sq), 0);                                             \
		int rc_ = (call_ch);                                                        \
		if (rc_)                                                                    \
			fail_msg("ClickHouse listing: %s", sysom_strerror(rc_));            \
		if (strcmp(a_.buf, b_.buf))                                                 \
			fprintf(stderr, "SQLite:\n%s\nClickHouse:\n%s\n", a_.buf, b_.buf);      \
		assert_string_equal(a_.buf, b_.buf);                                        \
		size_t n_ = 0;                                                              \
		for (const char *p_ = a_.buf; *p_; p_++)                                    \
			n_ += *p_ == '\n';                                                  \
		n_;                                                                         \
	})

static size_t same_collectives(struct ctx *c, const struct store_collective_filter *f,
			       uint32_t max)
{
	return SAME_LISTING(store_collectives_list(c->sq, f, max, call_text, &a_),
			    store_collectives_list(c->ch, f, max, call_text, &b_));
}

static void test_jobs_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;

	REQUIRE_CH();
	/* Two nodes of job-42 (rank 5 misses seq 1, rank 2 is 40 ms late everywhere), a second
	 * window of node 1, and node 3 whose process said job-old in an older window that
	 * arrives later (the newest window's job wins). */
	struct job_spec n1 = { .base = { .node = 1, .epoch = 1, .sequence = 1, .window_start_ns = T0,
					 .hostname = "gpu-1" },
			       .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 3,
			       .skip_rank = -1, .late_rank = 2, .late_ms = 40, .samples = true,
			       .hot_rank = 1 };
	struct job_spec n2 = n1;
	n2.base.node = 2;
	n2.base.hostname = "gpu-2";
	n2.first_rank = 4;
	n2.skip_rank = 5;
	n2.late_rank = -1;
	n2.late_ms = 0;
	n2.workers = true; /* rank 4's two DataLoader workers */
	put_job_both(c, &n1, r0);
	put_job_both(c, &n2, r0 + 1);
	put_job_both(c, &n1, r0 + 2); /* a duplicate */
	struct job_spec later = n1;
	later.base.sequence = 2;
	later.base.window_start_ns = T0 + 30000000000ULL;
	later.instances = 1;
	put_job_both(c, &later, r0 + 3);
	struct job_spec n3 = n1;
	n3.base.node = 3;
	n3.base.hostname = "gpu-3";
	n3.base.sequence = 2;
	n3.base.window_start_ns = T0 + 30000000000ULL;
	n3.first_rank = 3;
	n3.local_ranks = 1;
	n3.job = "job-43";
	put_job_both(c, &n3, r0 + 4);
	n3.base.sequence = 1;
	n3.base.window_start_ns = T0;
	n3.job = "job-old";
	put_job_both(c, &n3, r0 + 5);

	assert_int_equal(SAME_LISTING(store_jobs_list(c->sq, 10, job_text, &a_),
				      store_jobs_list(c->ch, 10, job_text, &b_)), 2);
	assert_int_equal(SAME_LISTING(store_jobs_list(c->sq, 1, job_text, &a_),
				      store_jobs_list(c->ch, 1, job_text, &b_)), 1);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-42", 100, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-42", 100, rank_text, &b_)), 10);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-42", 3, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-42", 3, rank_text, &b_)), 3);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-old", 9, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-old", 9, rank_text, &b_)), 0);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-43", 9, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-43", 9, rank_text, &b_)), 1);
	assert_int_equal(SAME_LISTING(store_job_communicators_list(c->sq, "job-42", 100, comm_text,
								   &a_),
				      store_job_communicators_list(c->ch, "job-42", 100, comm_text,
								   &b_)), 16);
	assert_int_equal(SAME_LISTING(store_job_communicators_list(c->sq, "job-42", 5, comm_text,
								   &a_),
				      store_job_communicators_list(c->ch, "job-42", 5, comm_text,
								   &b_)), 5);

	/* Instances: seq 0..2 of both nodes and seq 0 again from node 1's second window. */
	struct store_collective_filter f = { .job = "job-42", .from_ns = (int64_t)T0,
					     .to_ns = (int64_t)T0 + 60000000000LL };
	assert_int_equal(same_collectives(c, &f, 100), 8 + 4 + 7 + 8);
	assert_int_equal(same_collectives(c, &f, 1), 8 + 4);
	f.latest = true;
	assert_int_equal(same_collectives(c, &f, 1), 8);
	assert_int_equal(same_collectives(c, &f, 2), 7 + 8);
	f.latest = false;
	f.from_ns = (int64_t)T0 + 1500000000LL; /* seq 0 is in by node 1's second window */
	assert_int_equal(same_collectives(c, &f, 100), 7 + 8 + 8 + 4);
	f.to_ns = (int64_t)T0 + 10000000000LL;
	assert_int_equal(same_collectives(c, &f, 100), 7 + 8);
	f.from_ns = (int64_t)T0 + 1020000000LL; /* only rank 2's late seq 0 call is in range */
	f.to_ns = (int64_t)T0 + 1100000000LL;
	assert_int_equal(same_collectives(c, &f, 100), 8 + 4);
	f.from_ns = (int64_t)T0;
	f.to_ns = (int64_t)T0 + 60000000000LL;
	f.has_comm = true;
	f.comm = JOB_TP_COMM(0);
	assert_int_equal(same_collectives(c, &f, 100), 0);
	f.comm = JOB_COMM;
	f.op = SYSOM_NCCL_ALL_REDUCE;
	assert_int_equal(same_collectives(c, &f, 100), 8 + 4 + 7 + 8);
	f.op = SYSOM_NCCL_BROADCAST;
	assert_int_equal(same_collectives(c, &f, 100), 0);
	f.op = 0;
	f.job = "job-43"; /* its process's calls of both windows, also those under job-old */
	assert_int_equal(same_collectives(c, &f, 100), 6);
	f.job = "job-none";
	assert_int_equal(same_collectives(c, &f, 100), 0);

	/* A window that knows less: what SQLite's upserts keep, ClickHouse's merge keeps. */
	struct job_spec less = n2;
	less.base.sequence = 2;
	less.base.window_start_ns = T0 + 30000000000ULL;
	less.instances = 0;
	less.samples = false;
	put_job_edited(c, &less, r0 + 6, forget);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-42", 100, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-42", 100, rank_text, &b_)), 10);
	{
		static struct text t;
		memset(&t, 0, sizeof(t));
		assert_int_equal(store_job_ranks_list(c->ch, "job-42", 100, rank_text, &t), 0);
		assert_non_null(strstr(t.buf, " gpu=7 ")); /* a known one replaced another */
		assert_non_null(strstr(t.buf, " gpu=1 ")); /* known before, unknown later: kept */
	}
	size_t comms = SAME_LISTING(store_job_communicators_list(c->sq, "job-42", 100, comm_text,
								 &a_),
				    store_job_communicators_list(c->ch, "job-42", 100, comm_text,
								 &b_));
	assert_int_equal(comms, 16);
	assert_int_equal(SAME_LISTING(store_jobs_list(c->sq, 10, job_text, &a_),
				      store_jobs_list(c->ch, 10, job_text, &b_)), 2);
	f = (struct store_collective_filter){ .job = "job-42", .from_ns = (int64_t)T0,
					      .to_ns = (int64_t)T0 + 60000000000LL };
	assert_int_equal(same_collectives(c, &f, 100), 8 + 4 + 7 + 8);

	/* Keys past INT64_MAX list in SQLite's (signed) order. */
	struct job_spec hi = n1;
	hi.base.node = 4;
	hi.base.hostname = "gpu-4";
	hi.job = "job-44";
	hi.samples = false;
	put_job_edited(c, &hi, r0 + 7, high_keys);
	assert_int_equal(SAME_LISTING(store_job_communicators_list(c->sq, "job-44", 100, comm_text,
								   &a_),
				      store_job_communicators_list(c->ch, "job-44", 100, comm_text,
								   &b_)), 8);

	/* The sample filter's job (and rank) on the flame graph. */
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter sf = { .from_ms = from, .to_ms = from + 3600000, .job = "job-42" };
	same_aggregate(c, &sf, 2 * (4 * 10 + 30) + 4 * 10);
	sf.has_rank = true;
	sf.rank = 1;
	same_aggregate(c, &sf, 2 * (10 + 30));
	sf.job = "job-old";
	same_aggregate(c, &sf, 0);
}

/* The all-time lists (nodes, counters, jobs) of both stores are the same text. */
static void same_lists(struct ctx *c, size_t nodes, size_t counters, size_t jobs)
{
	assert_int_equal(SAME_LISTING(store_nodes_list(c->sq, node_text, &a_),
				      store_nodes_list(c->ch, node_text, &b_)), nodes);
	assert_int_equal(SAME_LISTING(store_counters_list(c->sq, counter_text, &a_),
				      store_counters_list(c->ch, counter_text, &b_)), counters);
	assert_int_equal(SAME_LISTING(store_jobs_list(c->sq, 10, job_text, &a_),
				      store_jobs_list(c->ch, 10, job_text, &b_)), jobs);
}

/*
 * The all-time lists read summaries kept at insert (schema 13): the same as SQLite after a
 * retry (a duplicate), rows of an attempt that never committed, a second copy of a batch row
 * (two replicas at once: its node is read the exact way), and after an upgrade from schema 12
 * (the migration backfills the summaries from the rows stored).
 */
static void test_lists_summaries(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;
	char err[256];

	REQUIRE_CH();
	struct job_spec n1 = { .base = { .node = 1, .epoch = 1, .sequence = 1, .window_start_ns = T0,
					 .hostname = "gpu-1" },
			       .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 1,
			       .skip_rank = -1, .late_rank = -1 };
	struct job_spec n2 = n1;
	n2.base.node = 2;
	n2.base.hostname = "gpu-2";
	n2.first_rank = 4;
	n2.job = "job-43";
	put_job_both(c, &n1, r0);
	put_job_both(c, &n2, r0 + 1);
	put_job_both(c, &n1, r0 + 2); /* a retry: a duplicate, nothing stored */
	for (uint64_t seq = 1; seq <= 3; seq++)
		put_both(c, &(struct fixture_spec){ .node = 7, .epoch = 5, .sequence = seq,
						     .window_start_ns = T0 + (seq - 1) * 30000000000ULL,
						     .hostname = "gpu-7", .extra_stacks = 1 });
	same_lists(c, 3, 6, 2);

	/* An attempt cut short before its batch row: a job rank of another job, and counters
	 * only a batch row carries. */
	ch_sql(c->db, "INSERT INTO job_ranks (day, job, node_id, process, rank, world_size,"
		      " window_start_ns, window_end_ns, received_ns, attempt) VALUES (today(),"
		      " 'job-cut', '07070707070707070707070707070707', 77, 0, 1,"
		      " 9000000000000000000, 9000000000000000000, 9000000000000000000, 7)");
	same_lists(c, 3, 6, 2);
	/* A second copy of node 7's batch 2 (another replica at once), received last, with a
	 * higher attempt and other counters: not counted, nor its receive time. */
	ch_sql(c->db, "INSERT INTO batches (day, node_id, epoch, sequence, attempt, content_hash,"
		      " received_ns, hostname, counter_ids, counter_values) VALUES (today(),"
		      " '07070707070707070707070707070707', 5, 2, 18446744073709551615, 5,"
		      " 9000000000000000000, 'other', [1, 2], [1000, 1000])");
	same_lists(c, 3, 6, 2);

	/* What a server of schema 12 left: no summaries, no columns for them. */
	store_close(c->ch);
	c->ch = NULL;
	ch_sql(c->db, "DROP TABLE node_days_mv");
	ch_sql(c->db, "DROP TABLE batch_seqs_mv");
	ch_sql(c->db, "DROP TABLE node_counters_mv");
	ch_sql(c->db, "DROP TABLE job_processes_mv");
	ch_sql(c->db, "DROP TABLE node_days");
	ch_sql(c->db, "DROP TABLE batch_seqs");
	ch_sql(c->db, "DROP TABLE node_counters");
	ch_sql(c->db, "DROP TABLE job_processes");
	ch_sql(c->db, "ALTER TABLE batches DROP COLUMN window_day, DROP COLUMN jr_process,"
		      " DROP COLUMN jr_job, DROP COLUMN jr_rank, DROP COLUMN jr_world_size");
	ch_sql(c->db, "DROP TABLE process_names_mv");
	ch_sql(c->db, "DROP TABLE process_names");
	ch_sql(c->db, "ALTER TABLE batches DROP COLUMN pn_process, DROP COLUMN pn_comm");
	ch_sql(c->db, "DROP TABLE fleet_slot_batches_mv");
	ch_sql(c->db, "DROP TABLE fleet_slot_batches");
	ch_sql(c->db, "DROP TABLE fleet_slots");
	ch_sql(c->db, "DROP TABLE fleet_slot_state");
	migrations_rewind(c->db, 12);
	int rc = store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url }, &c->ch,
				       err, sizeof(err));
	if (rc)
		fail_msg("reopen: %s", err);
	assert_int_equal(store_schema_version(c->ch), CH_SCHEMA_NEWEST);
	same_lists(c, 3, 6, 2);
	/* The process names (schema 15) were filled from the stored process rows: the flame
	 * graph's comms are SQLite's. */
	struct store_sample_filter any = { .from_ms = 0, .to_ms = INT64_MAX };
	assert_true(same_stacks(c, &any) > 0);
	/* And the summaries go on from there. */
	struct job_spec later = n2;
	later.base.sequence = 2;
	later.base.window_start_ns = T0 + 30000000000ULL;
	later.job = "job-44";
	put_job_both(c, &later, r0 + 10);
	put_both(c, &(struct fixture_spec){ .node = 7, .epoch = 5, .sequence = 4,
					     .window_start_ns = T0 + 90000000000ULL,
					     .hostname = "gpu-7b" });
	same_lists(c, 3, 6, 2); /* node 2's processes moved from job-43 to job-44 */
}

static void test_duplicate_and_conflict(void **state)
{
	struct ctx *c = *state;
	struct fixture_spec spec = { .node = 1, .epoch = 42, .sequence = 1, .window_start_ns = T0 };
	struct store_sample_filter all = { .from_ms = (int64_t)(T0 / 1000000),
					   .to_ms = (int64_t)(T0 / 1000000) + 60000 };
	struct store_put_result res;
	struct store_batch_record rec = { .exists = true };
	struct text t;
	uint64_t total;
	uint8_t node[16];

	REQUIRE_CH();
	memset(node, 1, sizeof(node));
	assert_int_equal(store_batch_find(c->ch, node, 42, 1, &rec), 0);
	assert_false(rec.exists);
	put(c->ch, &spec, FIXTURE_HASH, &res);
	assert_false(res.duplicate || res.conflict);
	assert_int_equal(res.new_stacks, 3);
	assert_int_equal(store_batch_find(c->ch, node, 42, 1, &rec), 0);
	assert_true(rec.exists && rec.hash_known && rec.content_hash == FIXTURE_HASH);
	put(c->ch, &spec, FIXTURE_HASH, &res);
	assert_true(res.duplicate);
	assert_false(res.conflict);
	assert_int_equal(res.samples, 0);
	put(c->ch, &spec, FIXTURE_HASH + 1, &res);
	assert_true(res.conflict);
	assert_false(res.duplicate);
	assert_true(res.existing.content_hash == FIXTURE_HASH);
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES);
	/* Another batch shares every stack: none new. */
	spec.sequence = 2;
	put(c->ch, &spec, FIXTURE_HASH, &res);
	assert_int_equal(res.new_stacks, 0);
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, 2 * FIXTURE_SAMPLES);
}

/* ---- group inserts (clickhouse_group.c) --------------------------------------------------- */

/* One thread's uploads: `nodes` nodes from `first_node`, sequences 1..`batches` each. */
struct uploader {
	pthread_t thread;
	struct store *s;
	uint8_t first_node, nodes;
	uint32_t batches;
	int rc;              /* the first error */
	uint32_t stored, duplicates, failed;
};

static void *uploader_main(void *arg)
{
	struct uploader *u = arg;

	for (uint32_t seq = 1; seq <= u->batches; seq++)
		for (uint8_t n = 0; n < u->nodes; n++) {
			struct fixture_spec spec = { .node = (uint8_t)(u->first_node + n), .epoch = 9,
						     .sequence = seq,
						     .window_start_ns = T0 + (seq - 1) * 30000000000ULL };
			struct store_put_result r;
			struct sysom_batch b;
			int rc = fixture_batch_build(&b, &spec);

			if (!rc)
				rc = store_batch_put(u->s, &b, FIXTURE_HASH,
						     (int64_t)T0 + 31000000000LL + (int64_t)seq, &r);
			sysom_batch_free(&b);
			if (rc) {
				u->failed++;
				if (!u->rc)
					u->rc = rc;
			} else if (r.duplicate) {
				u->duplicates++;
			} else if (!r.conflict) {
				u->stored++;
			}
		}
	return NULL;
}

/* Runs `n` uploaders at once; returns the batches they stored (not duplicates). */
static uint32_t upload_together(struct uploader *u, unsigned n)
{
	uint32_t stored = 0;

	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_create(&u[i].thread, NULL, uploader_main, &u[i]), 0);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(pthread_join(u[i].thread, NULL), 0);
		stored += u[i].stored;
	}
	return stored;
}

static size_t same_processes(struct ctx *c, const struct store_sample_filter *f)
{
	return SAME_LISTING(store_processes_list(c->sq, f, 100, process_text, &a_),
			    store_processes_list(c->ch, f, 100, process_text, &b_));
}

/* The same processes from both backends in any order (many nodes tie on their samples);
 * returns how many. */
static size_t same_processes_any_order(struct ctx *c, const struct store_sample_filter *f)
{
	static struct text a, b;
	size_t n = 0;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_processes_list(c->sq, f, 100, process_text, &a), 0);
	assert_int_equal(store_processes_list(c->ch, f, 100, process_text, &b), 0);
	text_sort(&a);
	text_sort(&b);
	assert_string_equal(a.buf, b.buf);
	for (const char *p = a.buf; *p; p++)
		n += *p == '\n';
	return n;
}

/*
 * Batches stored at the same time by many threads share group inserts (one INSERT per table)
 * and duplicate checks (one SELECT), and answer as SQLite storing them one by one: every
 * batch once, an upload racing another of the same batch answered duplicate.
 */
static void test_group_insert(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter all = { .from_ms = (int64_t)(T0 / 1000000),
					   .to_ms = (int64_t)(T0 / 1000000) + 600000 };
	struct uploader u[10];
	struct store_insert_groups g;
	uint32_t duplicates = 0;

	REQUIRE_CH();
	/* Eight threads of two nodes each, and two more uploading nodes 10-13 again. */
	for (unsigned i = 0; i < 10; i++)
		u[i] = (struct uploader){ .s = c->ch, .first_node = (uint8_t)(i < 8 ? 10 + 2 * i
										 : 10 + 2 * (i - 8)),
					  .nodes = 2, .batches = 4 };
	assert_int_equal(upload_together(u, 10), 8 * 2 * 4);
	for (unsigned i = 0; i < 10; i++) {
		assert_int_equal(u[i].rc, 0);
		duplicates += u[i].duplicates;
	}
	assert_int_equal(duplicates, 2 * 2 * 4);
	struct uploader one = { .s = c->sq, .first_node = 10, .nodes = 16, .batches = 4 };
	uploader_main(&one);
	assert_int_equal(one.rc, 0);
	assert_int_equal(one.stored, 8 * 2 * 4);
	assert_int_equal(same_stacks(c, &all), 8 * 2 * 4 * FIXTURE_SAMPLES);
	assert_int_equal(same_processes_any_order(c, &all), 2 * 16);
	for (uint8_t n = 10; n < 26; n++) {
		struct store_batch_record rec;
		uint8_t node[16];

		memset(node, n, sizeof(node));
		assert_int_equal(store_batch_find(c->ch, node, 9, 4, &rec), 0);
		assert_true(rec.exists && rec.hash_known && rec.content_hash == FIXTURE_HASH);
		assert_int_equal(store_batch_find(c->ch, node, 9, 5, &rec), 0);
		assert_false(rec.exists);
	}
	/* Grouped: fewer group inserts than batches (a batch answered duplicate inserts none). */
	assert_int_equal(store_insert_groups_get(c->ch, &g), 0);
	assert_int_equal(g.batches, 8 * 2 * 4);
	assert_true(g.groups < g.batches);
	assert_int_equal(store_insert_groups_get(c->sq, &g), -ENOTSUP);
}

/*
 * A group insert that fails fails every batch of the group: none is acknowledged, none is
 * visible (its rows inserted before the failure belong to attempts without a batch row), and
 * each stores whole when its agent sends it again.
 */
static void test_group_insert_fails_whole(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter all = { .from_ms = (int64_t)(T0 / 1000000),
					   .to_ms = (int64_t)(T0 / 1000000) + 600000 };
	struct uploader u[6];
	struct text t;
	uint64_t total;

	REQUIRE_CH();
	/* The samples table missing: inserted after processes and before the batch rows. */
	ch_sql(c->db, "RENAME TABLE samples TO samples_away");
	for (unsigned i = 0; i < 6; i++)
		u[i] = (struct uploader){ .s = c->ch, .first_node = (uint8_t)(40 + i), .nodes = 1,
					  .batches = 3 };
	assert_int_equal(upload_together(u, 6), 0);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(u[i].failed, 3);
		assert_true(u[i].rc < 0);
		assert_int_equal(u[i].duplicates, 0);
	}
	ch_sql(c->db, "RENAME TABLE samples_away TO samples");
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, 0);
	assert_int_equal(same_processes_any_order(c, &all), 0);
	for (unsigned i = 0; i < 6; i++) {
		u[i].rc = 0;
		u[i].failed = 0;
	}
	assert_int_equal(upload_together(u, 6), 6 * 3);
	struct uploader one = { .s = c->sq, .first_node = 40, .nodes = 6, .batches = 3 };
	uploader_main(&one);
	assert_int_equal(one.stored, 6 * 3);
	assert_int_equal(same_stacks(c, &all), 6 * 3 * FIXTURE_SAMPLES);
	assert_int_equal(same_processes_any_order(c, &all), 2 * 6);
}

/* A statement longer than ClickHouse's default parse limit (256 KiB), as a 10,000-rank job's
 * reads build: answered, not refused as a syntax error. */
static void test_long_statement(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter f = { .from_ms = (int64_t)(T0 / 1000000),
					 .to_ms = (int64_t)(T0 / 1000000) + 600000 };
	size_t len = 300u << 10;
	char *comm = malloc(len + 1);
	struct text t;
	uint64_t total = 1;

	REQUIRE_CH();
	assert_non_null(comm);
	memset(comm, 'x', len);
	comm[len] = 0;
	put_both(c, &(struct fixture_spec){ .node = 2, .epoch = 1, .sequence = 1,
					    .window_start_ns = T0 });
	f.comm = comm;
	aggregate(c->ch, &f, 100, &t, &total);
	assert_int_equal(total, 0);
	assert_int_equal(same_stacks(c, &f), 0);
	f.comm = NULL;
	assert_int_equal(same_stacks(c, &f), FIXTURE_SAMPLES);
	free(comm);
}

/* Rows of a write that never reached its batch row (a replica died, ClickHouse failed midway)
 * are not counted; neither is a second copy of a batch two replicas stored at once. */
static void test_uncommitted_rows_invisible(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter all = { .from_ms = (int64_t)(T0 / 1000000),
					   .to_ms = (int64_t)(T0 / 1000000) + 60000 };
	struct text t;
	uint64_t total;
	char sql[512];

	REQUIRE_CH();
	put(c->ch, &(struct fixture_spec){ .node = 3, .epoch = 1, .sequence = 1,
					   .window_start_ns = T0 }, FIXTURE_HASH, NULL);
	snprintf(sql, sizeof(sql), "INSERT INTO samples (day, node_id, time_ms, process, tgid, tid,"
		 " cpu, thread_comm, kernel_stack, user_stack, count, attempt) VALUES (today(),"
		 " '03030303030303030303030303030303', %" PRIu64 ", 1, 1, 1, 0, 'x', 0, 0, 1000, 7)",
		 (uint64_t)(T0 / 1000000 + 1000));
	ch_sql(c->db, sql);
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES);
	/* Process rows of an attempt cut short, received last and naming every process anew:
	 * the flame graph's comms stay those of the committed batch. */
	ch_sql(c->db, "INSERT INTO processes (day, node_id, process, tgid, comm, received_ns,"
		      " attempt) SELECT day, node_id, process, tgid, 'ghost', 9000000000000000000, 7"
		      " FROM processes");
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES);
	assert_null(strstr(t.buf, "ghost"));
	assert_non_null(strstr(t.buf, "python3"));
	/* A second batch row for the same identity with a higher attempt: its rows do not count. */
	ch_sql(c->db, "INSERT INTO batches (node_id, epoch, sequence, attempt, content_hash)"
		      " VALUES ('03030303030303030303030303030303', 1, 1, 18446744073709551615, 5)");
	aggregate(c->ch, &all, 100, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES);
	struct text n = { 0 };
	assert_int_equal(store_nodes_list(c->ch, node_text, &n), 0);
	assert_non_null(strstr(n.buf, "batches=1 "));
}

static void test_kernel_symbols(void **state)
{
	struct ctx *c = *state;
	const uint8_t id[4] = { 1, 2, 3, 4 }, other[4] = { 9, 9, 9, 9 };
	const struct store_ksym syms[] = { { 0x100, 'T', "start" }, { 0x200, 't', "mid" },
					   { 0x300, 'T', "end" } };
	struct store_ksym_range r;
	struct store_ksyms_usage u;
	uint64_t n;
	bool created;

	REQUIRE_CH();
	assert_int_equal(store_ksyms_count(c->ch, id, 4, &n), -ENOENT);
	assert_int_equal(store_ksyms_put(c->ch, id, 4, syms, 3, 1, &created), 0);
	assert_true(created);
	assert_int_equal(store_ksyms_put(c->ch, id, 4, syms, 2, 2, &created), 0);
	assert_false(created);
	assert_int_equal(store_ksyms_count(c->ch, id, 4, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(store_ksym_range_get(c->ch, id, 4, 0x250, &r), 0);
	assert_true(r.has_floor && r.floor == 0x200 && r.has_next && r.next == 0x300);
	assert_string_equal(r.floor_name, "mid");
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->ch, id, 4, 0x50, &r), 0);
	assert_true(!r.has_floor && r.has_next && r.next == 0x100);
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->ch, id, 4, 0x400, &r), 0);
	assert_true(r.has_floor && !r.has_next);
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->ch, other, 4, 0x100, &r), -ENOENT);
	assert_int_equal(store_ksyms_usage_get(c->ch, &u), 0);
	assert_int_equal(u.tables, 1);
	assert_int_equal(u.rows, 3);
}

/* ---- GPU, OS and off-CPU rows ---------------------------------------------------------- */

/* Adds launches, GPU kernel timing, NCCL profile/link, OS and off-CPU rows to a fixture batch
 * (values vary with `seq`, so that sums over windows are checked). */
static void gpu_os_rows_add(struct sysom_batch *b, uint64_t seq)
{
	uint32_t k = SYSOM_WIRE_NONE, u = SYSOM_WIRE_NONE, sgemm, nccl, dl, s[6];

	for (uint32_t i = 0; i < b->stack_count; i++) {
		if (b->stacks[i].kind == SYSOM_STACK_KERNEL && k == SYSOM_WIRE_NONE)
			k = i;
		if (b->stacks[i].kind == SYSOM_STACK_USER && u == SYSOM_WIRE_NONE)
			u = i;
	}
	assert_int_not_equal(k, SYSOM_WIRE_NONE);
	assert_int_not_equal(u, SYSOM_WIRE_NONE);
	assert_int_equal(sysom_batch_intern_cstring(b, "ampere_sgemm_128x64_nn", &sgemm), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "ncclKernel_AllReduce_RING", &nccl), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "dataloader", &dl), 0);
	const char *names[] = { "AllReduce", "Ring", "Simple", "ncclFloat32", "mlx5_comp0", "" };
	for (int i = 0; i < 6; i++)
		assert_int_equal(sysom_batch_intern_cstring(b, names[i], &s[i]), 0);

	struct sysom_launch l = { .process = 0, .kernel_name = sgemm, .function = 0x7f00a0,
				  .user_stack = u, .kernel_stack = SYSOM_WIRE_NONE,
				  .count = 5 * seq, .grid = { 8, 1, 1 }, .block = { 256, 1, 1 } };
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);
	l.user_stack = SYSOM_WIRE_NONE;
	l.count = 2;
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);
	l.kernel_name = s[5]; /* unnamed: "0x" and the handle */
	l.function = 0x0badf00dULL;
	l.count = 7;
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);
	l.process = 1;
	l.function = 0x10;
	l.count = 1;
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);

	struct sysom_gpu_kernel g = { .process = 0, .name = sgemm, .device = 0, .stream = 7,
				      .count = 9, .total_ns = 1000003 * seq, .min_ns = 1000,
				      .max_ns = 400000 };
	g.hist[3] = 9;
	assert_int_equal(sysom_batch_add_gpu_kernel(b, &g), 0);
	g.name = nccl; /* no launch traced: its whole time, stack unknown */
	g.total_ns = 777777;
	assert_int_equal(sysom_batch_add_gpu_kernel(b, &g), 0);

	struct sysom_nccl_profile pr = { .process = 0, .rank = 0, .comm_id = 0xc0ffee,
					 .comm_name = s[5], .nranks = 2, .func = s[0],
					 .algo = s[1], .proto = s[2], .datatype = s[3],
					 .peer = -1, .nchannels = 2, .count = 3, .bytes = 3000,
					 .kernel_timed = 3, .kernel_ns_total = 3000,
					 .kernel_ns_min = 900, .kernel_ns_max = 1100,
					 .first_seq = 1, .last_seq = 3 };
	assert_int_equal(sysom_batch_add_nccl_profile(b, &pr), 0);
	pr.comm_id = 0x8000000000000001ULL; /* sorts first: SQLite's integers are signed */
	assert_int_equal(sysom_batch_add_nccl_profile(b, &pr), 0);
	struct sysom_nccl_link nl = { .process = 0, .rank = 0, .comm_id = 0xc0ffee, .peer = 1,
				      .channel = -1, .transfers = 2, .bytes = 2000,
				      .time_ns_total = 500, .sx = 2000, .sy = 500, .sxx = 2e6,
				      .sxy = 5e5, .syy = 125000, .min_latency_ns = NAN,
				      .min_bytes_per_ns = NAN, .min_r2 = NAN };
	assert_int_equal(sysom_batch_add_nccl_link(b, &nl), 0);
	struct sysom_os_cpu oc = { .cpu = 1, .numa_node = 0, .busy_ns = 900000000,
				   .hardirq_count = 10, .hardirq_ns = 5000,
				   .context_switches = 100, .runq_wait_ns = 4000 };
	oc.softirq_count[SYSOM_SOFTIRQ_NET_RX] = 3;
	oc.softirq_ns[SYSOM_SOFTIRQ_NET_RX] = 3000;
	assert_int_equal(sysom_batch_add_os_cpu(b, &oc), 0);
	struct sysom_os_irq oq = { .cpu = 1, .irq = 33, .name = s[4], .count = 10, .ns = 5000 };
	assert_int_equal(sysom_batch_add_os_irq(b, &oq), 0);
	struct sysom_os_thread ot = { .process = 0, .tid = 4243, .comm = dl, .oncpu_ns = 5000000,
				      .runq_wait_ns = 1000, .runq_waits = 2, .migrations = 1 };
	ot.runq_hist[1] = 2;
	ot.cpus[0] = 2;
	assert_int_equal(sysom_batch_add_os_thread(b, &ot), 0);

	/* Both processes are ranks of job train-1: node 7's 0 and 2, node 8's 1 and 3. */
	uint32_t job;
	assert_int_equal(sysom_batch_intern_cstring(b, "train-1", &job), 0);
	for (uint32_t p = 0; p < 2; p++) {
		struct sysom_job_rank j = { .process = p, .job = job,
					    .rank = (int32_t)(b->node_id[0] - 7 + 2 * p),
					    .world_size = 4, .local_rank = (int32_t)p,
					    .local_world_size = 2, .group_rank = b->node_id[0] - 7,
					    .source = 1, .job_id_source = s[5], .master = s[5],
					    .groups = s[5] };
		assert_int_equal(sysom_batch_set_job_rank(b, &j), 0);
	}
	ot.process = 1;
	ot.tid = 780;
	ot.oncpu_ns = 7000 * seq;
	ot.cpus[3] = 1ULL << 63;
	assert_int_equal(sysom_batch_add_os_thread(b, &ot), 0);
	g.process = 1;
	g.stream = UINT64_MAX - 1;
	g.device = 1;
	assert_int_equal(sysom_batch_add_gpu_kernel(b, &g), 0);
	nl.min_latency_ns = 1500.25;
	nl.min_bytes_per_ns = 12.5;
	nl.min_r2 = 0.999;
	nl.min_points = 4;
	nl.peer = 0;
	nl.rank = 1;
	nl.process = 1;
	assert_int_equal(sysom_batch_add_nccl_link(b, &nl), 0);
	oq.irq = 34;
	oq.ns = 9000 * seq;
	assert_int_equal(sysom_batch_add_os_irq(b, &oq), 0);

	struct sysom_offcpu o = { .process = 0, .tid = 4250, .time_offset_ms = 1000,
				  .kernel_stack = k, .user_stack = u, .thread_comm = dl,
				  .state = SYSOM_OFFCPU_SLEEP, .count = 3,
				  .blocked_ns = 30000500 * seq, .max_ns = 20000000 };
	assert_int_equal(sysom_batch_add_offcpu(b, &o), 0);
	o.user_stack = SYSOM_WIRE_NONE;
	o.state = SYSOM_OFFCPU_DISK;
	o.count = 1;
	o.blocked_ns = o.max_ns = 7000999;
	assert_int_equal(sysom_batch_add_offcpu(b, &o), 0);
	o.process = 1;
	o.tid = 780;
	o.time_offset_ms = 20000;
	o.blocked_ns = o.max_ns = 1234567;
	assert_int_equal(sysom_batch_add_offcpu(b, &o), 0);
}

static void put_both_gpu_os(struct ctx *c, const struct fixture_spec *spec)
{
	struct store_put_result r[2];
	struct store *st[2] = { c->sq, c->ch };

	for (int i = 0; i < 2; i++) {
		struct sysom_batch b;

		assert_int_equal(fixture_batch_build(&b, spec), 0);
		gpu_os_rows_add(&b, spec->sequence);
		int rc = store_batch_put(st[i], &b, FIXTURE_HASH,
					 (int64_t)T0 + 31000000000LL + (int64_t)spec->sequence, &r[i]);
		if (rc)
			fail_msg("store_batch_put: %d (%s)", rc, sysom_strerror(rc));
		sysom_batch_free(&b);
	}
	assert_int_equal(r[0].launch_rows, r[1].launch_rows);
	assert_int_equal(r[0].launches, r[1].launches);
	assert_int_equal(r[0].gpu_kernel_rows, r[1].gpu_kernel_rows);
	assert_int_equal(r[0].nccl_profile_rows, r[1].nccl_profile_rows);
	assert_int_equal(r[0].nccl_link_rows, r[1].nccl_link_rows);
	assert_int_equal(r[0].os_cpu_rows, r[1].os_cpu_rows);
	assert_int_equal(r[0].os_irq_rows, r[1].os_irq_rows);
	assert_int_equal(r[0].os_thread_rows, r[1].os_thread_rows);
	assert_int_equal(r[1].launch_rows, 4);
	assert_int_equal(r[1].os_thread_rows, 2);
}

static int launch_text(void *arg, const struct store_launch_count *r)
{
	struct text *t = arg;

	text_add(t, "%s pid=%" PRId64 " procs=%" PRIu64 " n=%" PRIu64 " %s%s u=", r->comm, r->pid,
		 r->processes, r->count, r->named ? "" : "unnamed ", r->kernel);
	stack_text(t, r->user_stack);
	text_add(t, "\n");
	return 0;
}

static int gpu_time_text(void *arg, const struct store_gpu_time *r)
{
	struct text *t = arg;

	text_add(t, "%s pid=%" PRId64 " procs=%" PRIu64 " ns=%" PRIu64 " %s%s u=", r->comm, r->pid,
		 r->processes, r->ns, r->launch_seen ? "" : "unseen ", r->kernel);
	stack_text(t, r->user_stack);
	text_add(t, "\n");
	return 0;
}

enum agg { AGG_LAUNCHES, AGG_GPU_TIME, AGG_OFFCPU, AGG_WALL };

static void agg_text(struct store *s, enum agg kind, const struct store_sample_filter *f,
		     uint32_t limit, struct text *t, uint64_t *total)
{
	int rc = -EINVAL;

	memset(t, 0, sizeof(*t));
	t->s = s;
	switch (kind) {
	case AGG_LAUNCHES:
		rc = store_launches_aggregate(s, f, limit, launch_text, t, total);
		break;
	case AGG_GPU_TIME:
		rc = store_gpu_time_aggregate(s, f, limit, gpu_time_text, t, total);
		break;
	case AGG_OFFCPU:
		rc = store_offcpu_aggregate(s, f, limit, row_text, t, total);
		break;
	case AGG_WALL:
		rc = store_wall_aggregate(s, f, limit, row_text, t, total);
		break;
	}
	if (rc)
		fail_msg("aggregate %d: %s", kind, sysom_strerror(rc));
	text_sort(t);
}

/* The same groups and total from both backends; returns the total. */
static uint64_t same_agg(struct ctx *c, enum agg kind, const struct store_sample_filter *f,
			 uint32_t limit)
{
	static struct text a, b;
	uint64_t ta = 0, tb = 0;

	agg_text(c->sq, kind, f, limit, &a, &ta);
	agg_text(c->ch, kind, f, limit, &b, &tb);
	assert_string_equal(a.buf, b.buf);
	assert_int_equal(ta, tb);
	return ta;
}

/* Puts the fixture batch into both stores as received at `received_ns`. */
static void put_both_at(struct ctx *c, const struct fixture_spec *spec, int64_t received_ns)
{
	struct store *st[2] = { c->sq, c->ch };

	for (int i = 0; i < 2; i++) {
		struct sysom_batch b;
		struct store_put_result r;

		assert_int_equal(fixture_batch_build(&b, spec), 0);
		int rc = store_batch_put(st[i], &b, FIXTURE_HASH, received_ns, &r);
		if (rc)
			fail_msg("store_batch_put: %s", sysom_strerror(rc));
		assert_false(r.duplicate);
		sysom_batch_free(&b);
	}
}

/*
 * ClickHouse reads over a range look only at the batches (and process rows) received from the
 * day before the range on: nothing a range holds may be lost by that, whatever the receive
 * days. Batches ten days apart, a spooled batch received two days after its window, an agent
 * clock 20 hours ahead of the server's (rows timed past midnight, received the day before):
 * every range gives SQLite's answer, node and comm filters included.
 */
static void test_day_bounds(void **state)
{
	struct ctx *c = *state;
	const int64_t day = 86400000000000LL, hour = 3600000000000LL;
	const int64_t t0 = (int64_t)T0, old = (int64_t)T0 - 10 * day;

	REQUIRE_CH();
	put_both_at(c, &(struct fixture_spec){ .node = 7, .epoch = 1, .sequence = 1,
					       .window_start_ns = (uint64_t)old, .hostname = "a" },
		    old + 60000000000LL);
	put_both_at(c, &(struct fixture_spec){ .node = 7, .epoch = 1, .sequence = 2,
					       .window_start_ns = (uint64_t)t0, .hostname = "a" },
		    t0 + 60000000000LL);
	put_both_at(c, &(struct fixture_spec){ .node = 8, .epoch = 1, .sequence = 1,
					       .window_start_ns = (uint64_t)(old + 2 * hour),
					       .hostname = "spooled", .python_comm = "late" },
		    t0 + 2 * day);
	put_both_at(c, &(struct fixture_spec){ .node = 9, .epoch = 1, .sequence = 1,
					       .window_start_ns = (uint64_t)(t0 + 20 * hour),
					       .hostname = "ahead" },
		    t0);
	const struct {
		int64_t from, to; /* ns */
		uint64_t want;
	} ranges[] = {
		{ old, old + hour, FIXTURE_SAMPLES },
		{ old + 2 * hour, old + 3 * hour, FIXTURE_SAMPLES },
		{ old, old + 3 * hour, 2 * FIXTURE_SAMPLES },
		{ t0, t0 + hour, FIXTURE_SAMPLES },
		{ t0 + 20 * hour, t0 + 21 * hour, FIXTURE_SAMPLES },
		{ old - day, t0 + 2 * day, 4 * FIXTURE_SAMPLES },
		{ old + 4 * hour, t0 - hour, 0 },
	};
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		struct store_sample_filter f = { .from_ms = ranges[i].from / 1000000,
						  .to_ms = ranges[i].to / 1000000 };
		same_aggregate(c, &f, ranges[i].want);
		same_agg(c, AGG_WALL, &f, 1000);
		static struct text a, b;
		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		assert_int_equal(store_processes_list(c->sq, &f, 100, process_text, &a), 0);
		assert_int_equal(store_processes_list(c->ch, &f, 100, process_text, &b), 0);
		text_sort(&a);
		text_sort(&b);
		assert_string_equal(a.buf, b.buf);
	}
	struct store_sample_filter f = { .from_ms = (old + 2 * hour) / 1000000,
					  .to_ms = (old + 3 * hour) / 1000000, .node = "spooled" };
	same_aggregate(c, &f, FIXTURE_SAMPLES);
	f.node = NULL;
	f.comm = "late";
	same_aggregate(c, &f, 13);
	f = (struct store_sample_filter){ .from_ms = (t0 + 20 * hour) / 1000000,
					  .to_ms = (t0 + 21 * hour) / 1000000, .node = "ahead" };
	same_aggregate(c, &f, FIXTURE_SAMPLES);
}

/* ---- fleet slots (schema 14) ---------------------------------------------------------------- */

/* Puts the fixture batch with its GPU and OS rows (off-CPU rows too) into both stores. */
static void put_both_offcpu_at(struct ctx *c, const struct fixture_spec *spec, int64_t received_ns)
{
	struct store *st[2] = { c->sq, c->ch };

	for (int i = 0; i < 2; i++) {
		struct sysom_batch b;
		struct store_put_result r;

		assert_int_equal(fixture_batch_build(&b, spec), 0);
		gpu_os_rows_add(&b, spec->sequence);
		int rc = store_batch_put(st[i], &b, FIXTURE_HASH + spec->sequence, received_ns, &r);
		if (rc)
			fail_msg("store_batch_put: %s", sysom_strerror(rc));
		assert_false(r.duplicate);
		sysom_batch_free(&b);
	}
}

static struct store_fleet_slots_pass slots_run(struct ctx *c, int64_t now_ms)
{
	struct store_fleet_slots_pass p;
	int rc = store_fleet_slots_run(c->ch, now_ms, &p);

	if (rc)
		fail_msg("store_fleet_slots_run: %s", sysom_strerror(rc));
	return p;
}

/* Fleet-wide CPU and off-CPU answers over a range equal SQLite's, and so do node, comm and pid
 * filtered ones (which never read summaries). */
static uint64_t same_fleet(struct ctx *c, int64_t from_ms, int64_t to_ms)
{
	struct store_sample_filter f = { .from_ms = from_ms, .to_ms = to_ms };
	uint64_t total = same_stacks(c, &f);

	same_agg(c, AGG_OFFCPU, &f, 1000);
	f.node = "node-8";
	same_stacks(c, &f);
	same_agg(c, AGG_OFFCPU, &f, 1000);
	f.node = NULL;
	f.comm = "python3";
	same_agg(c, AGG_OFFCPU, &f, 1000);
	return total;
}

/*
 * Summaries of whole minutes and hours answer fleet-wide ranges as the rows do: aligned and
 * unaligned ranges, windows across minute and hour boundaries, rows of an attempt cut short; a
 * batch stored after a slot's summary makes it stale (read from rows) until it is rebuilt,
 * not more often than every 5 minutes; and summaries are really read.
 */
static void test_fleet_slots(void **state)
{
	struct ctx *c = *state;
	const int64_t hour = 3600000, minute = 60000;
	const int64_t h0 = ((int64_t)(T0 / 1000000) / hour + 1) * hour; /* ms, an hour's start */
	uint64_t seq = 1, batches = 0;
	struct store_fleet_slots_pass p;

	REQUIRE_CH();
	/* SQLite keeps no slots. */
	assert_int_equal(store_fleet_slots_run(c->sq, h0, &p), -ENOTSUP);
	/* Two nodes (7, 8: gpu_os_rows_add's ranks), a 30-s batch every 10 minutes for three hours, plus windows across a
	 * minute's and an hour's end. */
	for (int64_t t = h0; t < h0 + 3 * hour; t += 10 * minute)
		for (uint8_t node = 7; node <= 8; node++, batches++)
			put_both_offcpu_at(c, &(struct fixture_spec){
				.node = node, .epoch = 1, .sequence = seq++,
				.window_start_ns = (uint64_t)t * 1000000 + 5000000000ULL },
				(t + 40000) * 1000000);
	const int64_t across[] = { h0 + hour - 10000, h0 + 17 * minute - 15000 };
	for (size_t i = 0; i < 2; i++, batches++)
		put_both_offcpu_at(c, &(struct fixture_spec){ .node = 8, .epoch = 1,
				   .sequence = seq++, .window_start_ns = (uint64_t)across[i] * 1000000 },
				   (across[i] + 40000) * 1000000);
	/* Rows of an attempt cut short (no batch row): never counted, summaries included. */
	ch_sql(c->db, "INSERT INTO samples SELECT day, node_id, time_ms, process, tgid, tid, cpu,"
		      " thread_comm, kernel_stack, user_stack, count, 12345 FROM samples LIMIT 7");
	const int64_t ranges[][2] = {
		{ h0 - 7 * minute, h0 + 3 * hour + 5 * minute - 1 },
		{ h0, h0 + hour - 1 },
		{ h0 + 90000, h0 + 2 * hour + 30000 },
		{ h0 + hour - 5000, h0 + hour - 1 },
		{ h0 + 17 * minute, h0 + 18 * minute - 1 },
	};
	uint64_t totals[5];
	for (size_t i = 0; i < 5; i++)
		totals[i] = same_fleet(c, ranges[i][0], ranges[i][1]);
	assert_int_equal(totals[0], batches * FIXTURE_SAMPLES);
	assert_int_equal(totals[3], 13); /* the window across the hour's end: its first 5 s */

	/* Nothing is summarised before its slot ended two minutes ago. */
	p = slots_run(c, h0 + 2 * minute);
	assert_int_equal(p.built, 0);
	/* The batches touch 21 minutes (18 ten minutes apart, 3 more by the two windows across a
	 * minute's end) and 3 hours. */
	p = slots_run(c, h0 + 4 * hour);
	assert_int_equal(p.built, 21 + 3);
	assert_int_equal(p.rebuilt, 0);
	assert_int_equal(p.merged, 3); /* each hour from its minutes, built just before it */
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(same_fleet(c, ranges[i][0], ranges[i][1]), totals[i]);
	p = slots_run(c, h0 + 4 * hour + minute);
	assert_int_equal(p.built, 0); /* all current */

	/* A spooled batch of node 8 (its agent's next epoch) into the second hour: that hour and its minute are stale and
	 * read from rows; a rebuild waits 5 minutes after the last one. */
	put_both_offcpu_at(c, &(struct fixture_spec){ .node = 8, .epoch = 2, .sequence = 1,
			   .window_start_ns = (uint64_t)(h0 + hour + 33 * minute) * 1000000 },
			   (h0 + 4 * hour) * 1000000);
	totals[0] += FIXTURE_SAMPLES;
	totals[2] += FIXTURE_SAMPLES;
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(same_fleet(c, ranges[i][0], ranges[i][1]), totals[i]);
	p = slots_run(c, h0 + 4 * hour + 2 * minute);
	assert_int_equal(p.built, 1);   /* its minute, which had no summary */
	assert_int_equal(p.pending, 1); /* the hour, built 2 minutes ago */
	/* Another into that minute: at the next pass the minute waits (built 4 minutes before),
	 * so the hour, due, is built from its rows, not from the minute's stale summary. */
	put_both_offcpu_at(c, &(struct fixture_spec){ .node = 8, .epoch = 2, .sequence = 2,
			   .window_start_ns = (uint64_t)(h0 + hour + 33 * minute + 20000) * 1000000 },
			   (h0 + 4 * hour + 3 * minute) * 1000000);
	totals[0] += FIXTURE_SAMPLES;
	totals[2] += FIXTURE_SAMPLES;
	p = slots_run(c, h0 + 4 * hour + 6 * minute);
	assert_int_equal(p.built, 1);
	assert_int_equal(p.rebuilt, 1);
	assert_int_equal(p.merged, 0);
	assert_int_equal(p.pending, 1);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(same_fleet(c, ranges[i][0], ranges[i][1]), totals[i]);
	p = slots_run(c, h0 + 4 * hour + 8 * minute);
	assert_int_equal(p.built, 1); /* the minute; the hour is current */
	assert_int_equal(p.merged, 0);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(same_fleet(c, ranges[i][0], ranges[i][1]), totals[i]);
	/* Both stale again, both due: the minute first, then the hour merged from it. */
	put_both_offcpu_at(c, &(struct fixture_spec){ .node = 8, .epoch = 2, .sequence = 3,
			   .window_start_ns = (uint64_t)(h0 + hour + 34 * minute) * 1000000 },
			   (h0 + 4 * hour + 9 * minute) * 1000000);
	totals[0] += FIXTURE_SAMPLES;
	totals[2] += FIXTURE_SAMPLES;
	p = slots_run(c, h0 + 4 * hour + 14 * minute);
	assert_int_equal(p.built, 2); /* a new minute and the hour */
	assert_int_equal(p.rebuilt, 1);
	assert_int_equal(p.merged, 1);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(same_fleet(c, ranges[i][0], ranges[i][1]), totals[i]);

	/* The summaries are what answers: a row added to the current summary of the first hour
	 * shows in fleet-wide reads over that hour, and not in filtered ones. */
	struct store_sample_filter f = { .from_ms = h0 - minute, .to_ms = h0 + 2 * hour };
	static struct text t;
	uint64_t before = 0, total = 0;

	aggregate(c->ch, &f, 1000, &t, &before);
	ch_sql(c->db, "INSERT INTO fleet_slots SELECT day, span_ms, start_ms, summary, kind,"
		      " 'marker', user_stack, kernel_stack, lo, hi, procs, value FROM fleet_slots"
		      " WHERE span_ms = 3600000 AND kind = 0 ORDER BY start_ms LIMIT 1");
	aggregate(c->ch, &f, 1000, &t, &total);
	assert_non_null(strstr(t.buf, "marker"));
	assert_true(total > before);
	f.node = "node-7";
	aggregate(c->ch, &f, 1000, &t, &total);
	assert_null(strstr(t.buf, "marker"));
}

/* A job's GPU and OS rows as text (rows in their order; hosts, ids and values verbatim). */
static void who_text(struct text *t, const struct store_gpu_owner *w)
{
	text_add(t, "rank=%d pid=%u st=%" PRIu64 " host=%s", w->job_rank, w->pid, w->start_time_ns,
		 w->hostname);
}

static int kernel_text(void *arg, const struct store_gpu_kernel_row *r)
{
	struct text *t = arg;

	who_text(t, &r->who);
	text_add(t, " K %s dev=%u stream=%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
		 r->name, r->device, r->stream, r->count, r->total_ns, r->min_ns, r->max_ns);
	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		text_add(t, "%s%u", i ? "," : " h=", r->hist[i]);
	text_add(t, "\n");
	return 0;
}

static int profile_text(void *arg, const struct store_nccl_profile_row *r)
{
	struct text *t = arg;

	who_text(t, &r->who);
	text_add(t, " P %" PRIx64 " '%s' %d/%d %s %s %s %s peer=%d ch=%u %" PRIu64 " %" PRIu64
		 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
		 " %" PRIu64 " %" PRIu64 " %" PRIu64 "-%" PRIu64 "\n", r->comm_id, r->comm_name,
		 r->rank, r->nranks, r->func, r->algo, r->proto, r->datatype, r->peer, r->nchannels,
		 r->count, r->bytes, r->kernel_timed, r->kernel_ns_total, r->kernel_ns_min,
		 r->kernel_ns_max, r->span_timed, r->span_ns_total, r->enqueue_ns_total,
		 r->transfers, r->transfer_bytes, r->first_seq, r->last_seq);
	return 0;
}

static int link_text(void *arg, const struct store_nccl_link_row *r)
{
	struct text *t = arg;

	who_text(t, &r->who);
	text_add(t, " L %" PRIx64 " %d->%d ch=%d %" PRIu64 " %" PRIu64 " %" PRIu64
		 " %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %u\n", r->comm_id, r->rank,
		 r->peer, r->channel, r->transfers, r->bytes, r->time_ns_total, r->sx, r->sy, r->sxx,
		 r->sxy, r->syy, r->min_latency_ns, r->min_bytes_per_ns, r->min_r2, r->min_points);
	return 0;
}

static int thread_text(void *arg, const struct store_os_thread_row *r)
{
	struct text *t = arg;

	who_text(t, &r->who);
	text_add(t, " T %u %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
		 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, r->tid, r->comm,
		 r->oncpu_ns, r->runq_wait_ns, r->runq_waits, r->voluntary_switches,
		 r->involuntary_switches, r->migrations, r->numa_migrations, r->pages_migrated,
		 r->hardirq_ns, r->softirq_ns);
	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		text_add(t, "%s%u", i ? "," : " h=", r->runq_hist[i]);
	for (int i = 0; i < SYSOM_CPU_MASK_WORDS; i++)
		text_add(t, " %" PRIx64, r->cpus[i]);
	text_add(t, "\n");
	return 0;
}

static int cpu_text(void *arg, const struct store_os_cpu_row *r)
{
	struct text *t = arg;

	text_add(t, "C %s %" PRId64 " %" PRId64 " cpu=%u numa=%d %" PRIu64 " %" PRIu64 " %" PRIu64
		 " %" PRIu64 " %" PRIu64, r->hostname, r->time_ms, r->window_ms, r->cpu,
		 r->numa_node, r->busy_ns, r->hardirq_count, r->hardirq_ns, r->context_switches,
		 r->runq_wait_ns);
	for (int i = 0; i < SYSOM_SOFTIRQ_COUNT; i++)
		text_add(t, " %" PRIu64 "/%" PRIu64, r->softirq_count[i], r->softirq_ns[i]);
	text_add(t, "\n");
	return 0;
}

static int irq_text(void *arg, const struct store_os_irq_row *r)
{
	struct text *t = arg;

	text_add(t, "I %s cpu=%u irq=%u %s %" PRIu64 " %" PRIu64 "\n", r->hostname, r->cpu, r->irq,
		 r->name, r->count, r->ns);
	return 0;
}

/* The job's GPU and OS answers, rows in the order given, and whether each was truncated. */
static void same_job_rows(struct ctx *c, const struct store_gpu_filter *f, uint32_t max_rows,
			  size_t want_lines)
{
	static struct text a, b;
	struct text *tx[2] = { &a, &b };
	struct store *st[2] = { c->sq, c->ch };
	bool trunc[2][2] = { { false } };

	for (int i = 0; i < 2; i++) {
		struct store_gpu_visitor gv = { kernel_text, profile_text, link_text, tx[i] };
		struct store_os_visitor ov = { thread_text, cpu_text, irq_text, tx[i] };
		struct store_os_filter of = { .job = f->job, .has_rank = f->has_rank,
					      .rank = f->rank, .from_ms = f->from_ms,
					      .to_ms = f->to_ms };

		memset(tx[i], 0, sizeof(*tx[i]));
		int rc = store_job_gpu(st[i], f, max_rows, &gv, &trunc[i][0]);
		if (rc)
			fail_msg("store_job_gpu %d: %s", i, sysom_strerror(rc));
		rc = store_job_os(st[i], &of, max_rows, &ov, &trunc[i][1]);
		if (rc)
			fail_msg("store_job_os %d: %s", i, sysom_strerror(rc));
	}
	assert_string_equal(a.buf, b.buf);
	assert_int_equal(trunc[0][0], trunc[1][0]);
	assert_int_equal(trunc[0][1], trunc[1][1]);
	size_t lines = 0;
	for (const char *p = b.buf; (p = strchr(p, '\n')); p++)
		lines++;
	assert_int_equal(lines, want_lines);
}

static void test_gpu_os_same_answers(void **state)
{
	struct ctx *c = *state;
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter all = { .from_ms = from, .to_ms = from + 3600000 };

	REQUIRE_CH();
	for (uint64_t seq = 1; seq <= 3; seq++) {
		put_both_gpu_os(c, &(struct fixture_spec){ .node = 7, .epoch = 5, .sequence = seq,
							    .window_start_ns = T0 + (seq - 1) * 30000000000ULL,
							    .hostname = "gpu-7" });
		put_both_gpu_os(c, &(struct fixture_spec){ .node = 8, .epoch = 9, .sequence = seq,
							    .window_start_ns = T0 + (seq - 1) * 30000000000ULL,
							    .python_comm = seq == 3 ? "trainer" : NULL });
	}
	/* Launches: 5+10+15 + 3 x 2 named on one stack or none, 3 x 7 unnamed, 3 x 1 in nccl. */
	assert_int_equal(same_agg(c, AGG_LAUNCHES, &all, 1000), 2 * (30 + 6 + 21 + 3));
	assert_int_equal(same_agg(c, AGG_GPU_TIME, &all, 1000), 2 * (6000018 + 6 * 777777));
	/* Off-CPU µs are rounded down per group: python3 and trainer (per node) sleeping and in
	 * D, both nodes' nccl-proxy in D together. */
	const uint64_t offcpu_us = 2 * (180003 + 21002) + 7407;
	assert_int_equal(same_agg(c, AGG_OFFCPU, &all, 1000), offcpu_us);
	/* CPU time: 132 samples at 99 Hz x 10%: about 13.3 s, plus the off-CPU time. */
	assert_true(same_agg(c, AGG_WALL, &all, 1000) > offcpu_us + 13000000);

	struct store_sample_filter f = all;
	f.to_ms = from + 31000; /* the first window only (+1 s off-CPU rows, window-end rows) */
	same_agg(c, AGG_LAUNCHES, &f, 1000);
	same_agg(c, AGG_GPU_TIME, &f, 1000);
	same_agg(c, AGG_OFFCPU, &f, 1000);
	same_agg(c, AGG_WALL, &f, 1000);
	f = all;
	f.node = "gpu-7";
	assert_int_equal(same_agg(c, AGG_LAUNCHES, &f, 1000), 30 + 6 + 21 + 3);
	same_agg(c, AGG_GPU_TIME, &f, 1000);
	same_agg(c, AGG_OFFCPU, &f, 1000);
	same_agg(c, AGG_WALL, &f, 1000);
	f = all;
	f.comm = "dataloader"; /* a thread comm: off-CPU and wall only */
	assert_int_equal(same_agg(c, AGG_OFFCPU, &f, 1000), offcpu_us);
	assert_int_equal(same_agg(c, AGG_LAUNCHES, &f, 1000), 0);
	same_agg(c, AGG_WALL, &f, 1000);
	f.comm = "trainer";
	same_agg(c, AGG_LAUNCHES, &f, 1000);
	same_agg(c, AGG_GPU_TIME, &f, 1000);
	same_agg(c, AGG_WALL, &f, 1000);
	f = all;
	f.has_pid = true;
	f.pid = FIXTURE_PID_NCCL;
	assert_int_equal(same_agg(c, AGG_LAUNCHES, &f, 1000), 2 * 3);
	same_agg(c, AGG_OFFCPU, &f, 1000);
	same_agg(c, AGG_WALL, &f, 1000);
	same_agg(c, AGG_GPU_TIME, &f, 1000);
	/* A job's GPU and OS rows, per stored batch (IRQs summed over the range). Per batch:
	 * 3 kernel, 2 profile, 2 link, 2 thread, 1 CPU rows; IRQs: 2 per node. */
	struct store_gpu_filter g = { .job = "train-1", .from_ms = from, .to_ms = from + 3600000 };
	same_job_rows(c, &g, 1000, 6 * (3 + 2 + 2 + 2 + 1) + 2 * 2);
	g.has_rank = true;
	g.rank = 3; /* node 8's nccl-proxy: its rows, its node's CPUs and IRQs */
	same_job_rows(c, &g, 1000, 3 * (1 + 1 + 1) + 3 + 2);
	g.has_rank = false;
	g.to_ms = from + 31000; /* the first windows only */
	same_job_rows(c, &g, 1000, 2 * (3 + 2 + 2 + 2 + 1) + 2 * 2);
	g.to_ms = from + 3600000;
	same_job_rows(c, &g, 2, 6 * 2); /* truncated: 2 of each kind */
	same_job_rows(c, &g, 0, 0);
	g.job = "train-2";
	same_job_rows(c, &g, 1000, 0);

	/* A limit keeps the largest groups and the total of all. */
	same_agg(c, AGG_LAUNCHES, &all, 1);
	same_agg(c, AGG_GPU_TIME, &all, 1);
	same_agg(c, AGG_OFFCPU, &all, 2);
	same_agg(c, AGG_WALL, &all, 3);
}

/* ---- process identities (wire 1.5 IDENTITIES, ClickHouse migration 8) --------------------- */

#define ID_CID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ID_UID "6f9d1c2e-1b2a-4c3d-8e4f-0a1b2c3d4e5f"

struct id_spec {
	uint32_t process;
	uint8_t runtime;
	const char *cid, *uid, *ns, *pod, *cname, *step, *unit;
	uint64_t slurm;
};

static void identity_add(struct sysom_batch *b, const struct id_spec *s)
{
	struct sysom_identity id = { .process = s->process, .runtime = s->runtime,
				     .slurm_job = s->slurm };

	assert_int_equal(sysom_batch_intern_cstring(b, s->cid ? s->cid : "", &id.container_id), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->uid ? s->uid : "", &id.pod_uid), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->ns ? s->ns : "", &id.pod_namespace), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->pod ? s->pod : "", &id.pod_name), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->cname ? s->cname : "",
						    &id.container_name), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->step ? s->step : "", &id.slurm_step), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, s->unit ? s->unit : "", &id.unit), 0);
	assert_int_equal(sysom_batch_set_identity(b, &id), 0);
}

/* Puts a fixture batch with identities `ids` (n of them) into the stores given (NULL: skip). */
static void put_identities(struct store *sq, struct store *ch, const struct fixture_spec *spec,
			   const struct id_spec *ids, size_t n, int64_t received_ns)
{
	struct store_put_result a = { 0 }, b = { 0 };
	struct sysom_batch batch;

	assert_int_equal(fixture_batch_build(&batch, spec), 0);
	for (size_t i = 0; i < n; i++)
		identity_add(&batch, &ids[i]);
	if (sq)
		assert_int_equal(store_batch_put(sq, &batch, FIXTURE_HASH, received_ns, &a), 0);
	if (ch) {
		int rc = store_batch_put(ch, &batch, FIXTURE_HASH, received_ns, &b);
		if (rc)
			fail_msg("store_batch_put (ClickHouse): %s", sysom_strerror(rc));
	}
	sysom_batch_free(&batch);
	assert_int_equal(a.duplicate, b.duplicate);
}

/*
 * The same identities into both stores give the same identities in the process and rank
 * listings, and every identity filter selects the same processes in every sample query and
 * the jobs listing. The merge follows SQLite's upsert: the newest window's ids and unit win
 * (also over an older window arriving later), names learnt once stay, the last name to
 * arrive wins.
 */
static void test_identity_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter all = { .from_ms = from - 60000, .to_ms = from + 3600000 };
	static struct text a;

	REQUIRE_CH();
	/* Node 3: the python process in a pod's container, the NCCL helper in a Slurm step. */
	const struct id_spec first[] = {
		{ .process = 0, .runtime = SYSOM_RUNTIME_CONTAINERD, .cid = ID_CID, .uid = ID_UID,
		  .ns = "training", .pod = "llama-0", .cname = "trainer",
		  .unit = "cri-containerd-x.scope" },
		{ .process = 1, .slurm = 4242, .step = "0", .unit = "slurm-step.scope" },
	};
	put_identities(c->sq, c->ch, &(struct fixture_spec){ .node = 3, .epoch = 1, .sequence = 1,
							      .window_start_ns = T0 }, first, 2, r0);
	/* A newer window that knows no names: the names stay. */
	const struct id_spec second[] = {
		{ .process = 0, .runtime = SYSOM_RUNTIME_CONTAINERD, .cid = ID_CID, .uid = ID_UID,
		  .unit = "cri-containerd-x.scope" },
	};
	put_identities(c->sq, c->ch, &(struct fixture_spec){ .node = 3, .epoch = 1, .sequence = 2,
							      .window_start_ns = T0 + 30000000000ULL },
		       second, 1, r0 + 1);
	/* An older window arriving last: its unit and Slurm step lose to the newest window's,
	 * its names (the last to arrive) win, the one it lacks (namespace) stays. */
	const struct id_spec late[] = {
		{ .process = 0, .runtime = SYSOM_RUNTIME_CONTAINERD, .cid = ID_CID, .uid = ID_UID,
		  .pod = "llama-0", .cname = "trainer-old", .unit = "old.scope" },
		{ .process = 1, .slurm = 4242, .step = "batch", .unit = "old-step.scope" },
	};
	put_identities(c->sq, c->ch, &(struct fixture_spec){ .node = 3, .epoch = 1, .sequence = 3,
							      .window_start_ns = T0 - 30000000000ULL },
		       late, 2, r0 + 2);
	/* Node 4: no identity at all (an older agent). */
	put_identities(c->sq, c->ch, &(struct fixture_spec){ .node = 4, .epoch = 1, .sequence = 1,
							      .window_start_ns = T0 }, NULL, 0, r0 + 3);

	assert_int_equal(same_processes(c, &all), 4);
	memset(&a, 0, sizeof(a));
	assert_int_equal(store_processes_list(c->ch, &all, 100, process_text, &a), 0);
	assert_non_null(strstr(a.buf, " id=[rt='containerd' cid='" ID_CID "' uid='" ID_UID
				      "' ns='training' pod='llama-0' cn='trainer-old' slurm=0 step=''"
				      " unit='cri-containerd-x.scope']"));
	assert_non_null(strstr(a.buf, " id=[rt='' cid='' uid='' ns='' pod='' cn='' slurm=4242"
				      " step='0' unit='slurm-step.scope']"));
	assert_non_null(strstr(a.buf, " id=-"));

	const struct {
		const char *ns, *pod, *container, *unit;
		uint64_t slurm;
		size_t processes;
	} cases[] = {
		{ "training", NULL, NULL, NULL, 0, 1 },
		{ NULL, "llama-0", NULL, NULL, 0, 1 },
		{ NULL, "6F9D1C2E-1B2A-4C3D-8E4F-0A1B2C3D4E5F", NULL, NULL, 0, 1 },
		{ "training", "llama-0", "0123456789AB", NULL, 0, 1 },
		{ NULL, NULL, ID_CID, "cri-containerd-x.scope", 0, 1 },
		{ NULL, NULL, "trainer-old", NULL, 0, 1 },
		{ NULL, NULL, "trainer", NULL, 0, 0 },     /* a name replaced by a later arrival */
		{ NULL, NULL, "0123456789a", NULL, 0, 0 }, /* too short for a prefix */
		{ NULL, NULL, NULL, "old.scope", 0, 0 },   /* an older window's unit */
		{ NULL, NULL, NULL, "slurm-step.scope", 4242, 1 },
		{ NULL, NULL, NULL, NULL, 4242, 1 },
		{ NULL, NULL, NULL, NULL, 42, 0 },
		{ "other", NULL, NULL, NULL, 0, 0 },
		{ NULL, "", NULL, NULL, 0, 1 },            /* the Slurm process: in no pod */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct store_sample_filter f = all;

		f.pod_namespace = cases[i].ns;
		f.pod = cases[i].pod;
		f.container = cases[i].container;
		f.unit = cases[i].unit;
		f.has_slurm_job = cases[i].slurm != 0;
		f.slurm_job = cases[i].slurm;
		size_t n = same_processes(c, &f);
		if (n != cases[i].processes)
			fail_msg("case %zu: %zu processes", i, n);
		static struct text sa, sb;
		uint64_t ta = 0, tb = 0;
		aggregate(c->sq, &f, 1000, &sa, &ta);
		aggregate(c->ch, &f, 1000, &sb, &tb);
		assert_string_equal(sa.buf, sb.buf);
		assert_int_equal(ta, tb);
		assert_true(n ? ta > 0 : ta == 0);
		for (enum agg k = AGG_LAUNCHES; k <= AGG_WALL; k++)
			same_agg(c, k, &f, 100);
	}
}

/* A job's identity: the ranks listing names each rank's pod; the jobs listing filtered by
 * identity has the jobs with a matching process, counted over all their processes. */
static void name_ranks(struct sysom_batch *b)
{
	static const char *const pods[] = { "llama-0", "llama-1" };

	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		uint32_t p = b->job_ranks[i].process;
		char cid[65];

		snprintf(cid, sizeof(cid), "%064x", i + 1);
		identity_add(b, &(struct id_spec){ .process = p, .runtime = SYSOM_RUNTIME_CRIO,
						   .cid = cid, .uid = ID_UID, .ns = "training",
						   .pod = pods[i % 2], .cname = "rank",
						   .slurm = 0, .unit = "crio-x.scope" });
	}
}

static void test_identity_jobs_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;

	REQUIRE_CH();
	struct job_spec n1 = { .base = { .node = 1, .epoch = 1, .sequence = 1, .window_start_ns = T0,
					 .hostname = "gpu-1" },
			       .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 1,
			       .skip_rank = -1, .late_rank = -1, .samples = true, .hot_rank = 1 };
	put_job_edited(c, &n1, r0, name_ranks);
	struct job_spec n2 = n1;
	n2.base.node = 2;
	n2.base.hostname = "gpu-2";
	n2.job = "job-43"; /* no identities */
	put_job_both(c, &n2, r0 + 1);

	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-42", 100, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-42", 100, rank_text, &b_)), 4);
	assert_int_equal(SAME_LISTING(store_job_ranks_list(c->sq, "job-43", 100, rank_text, &a_),
				      store_job_ranks_list(c->ch, "job-43", 100, rank_text, &b_)), 4);
	const struct store_sample_filter filters[] = {
		{ .pod_namespace = "training" },
		{ .pod = "llama-1" },
		{ .container = "0000000000000000000000000000000000000000000000000000000000000002" },
		{ .container = "rank", .unit = "crio-x.scope" },
		{ .pod = "llama-2" },
		{ .has_slurm_job = true, .slurm_job = 1 },
	};
	const size_t want[] = { 1, 1, 1, 1, 0, 0 };
	for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
		size_t n = SAME_LISTING(store_jobs_list_identity(c->sq, &filters[i], 10, job_text, &a_),
					store_jobs_list_identity(c->ch, &filters[i], 10, job_text,
								 &b_));
		if (n != want[i])
			fail_msg("filter %zu: %zu jobs", i, n);
	}
	/* The flame graph of a job narrowed to one pod. */
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter sf = { .from_ms = from, .to_ms = from + 3600000, .job = "job-42",
					  .pod = "llama-1" };
	same_aggregate(c, &sf, 2 * 10 + 30);
}

/* A database of schema 6 (before GPU health, identities and the ranks' GPUs) is upgraded to 9
 * on open: its rows stay, its processes read as unknown, its ranks' GPUs too, and new batches
 * store identities. */
static void test_identity_upgrade_from_6(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;
	int64_t from = (int64_t)(T0 / 1000000);
	struct store_sample_filter all = { .from_ms = from, .to_ms = from + 3600000 };
	struct store_sample_filter pod = all;
	char err[256];
	static struct text t;
	uint64_t total = 0;

	REQUIRE_CH();
	const struct id_spec ids[] = {
		{ .process = 0, .runtime = SYSOM_RUNTIME_DOCKER, .cid = ID_CID, .uid = ID_UID,
		  .ns = "training", .pod = "llama-0" },
	};
	put_identities(NULL, c->ch, &(struct fixture_spec){ .node = 5, .epoch = 1, .sequence = 1,
							     .window_start_ns = T0 }, NULL, 0, r0);
	store_close(c->ch);
	c->ch = NULL;
	/* What a server of schema 6 left: no GPU health or identity table, versions 1 to 6. */
	ch_sql(c->db, "DROP TABLE process_identities");
	ch_sql(c->db, "DROP TABLE gpu_health");
	ch_sql(c->db, "ALTER TABLE job_ranks DROP COLUMN gpu_device");
	migrations_rewind(c->db, 6);
	int rc = store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url }, &c->ch,
				       err, sizeof(err));
	if (rc)
		fail_msg("reopen: %s", err);
	assert_int_equal(store_schema_version(c->ch), CH_SCHEMA_NEWEST);
	memset(&t, 0, sizeof(t));
	assert_int_equal(store_processes_list(c->ch, &all, 100, process_text, &t), 0);
	assert_non_null(strstr(t.buf, " id=-"));
	assert_null(strstr(t.buf, " id=["));
	pod.pod = "llama-0";
	assert_int_equal(store_stacks_aggregate(c->ch, &pod, 100, row_text,
						&(struct text){ .s = c->ch }, &total), 0);
	assert_int_equal(total, 0);

	put_identities(NULL, c->ch, &(struct fixture_spec){ .node = 5, .epoch = 1, .sequence = 2,
							     .window_start_ns = T0 + 30000000000ULL },
		       ids, 1, r0 + 1);
	memset(&t, 0, sizeof(t));
	assert_int_equal(store_processes_list(c->ch, &pod, 100, process_text, &t), 0);
	assert_non_null(strstr(t.buf, " id=[rt='docker' cid='" ID_CID "'"));
	assert_int_equal(store_stacks_aggregate(c->ch, &pod, 100, row_text,
						&(struct text){ .s = c->ch }, &total), 0);
	assert_true(total > 0);
}

static int no_row(void *arg, const struct store_stack_count *r)
{
	(void)arg, (void)r;
	return -EPROTO;
}

/* What ClickHouse does not store yet answers -ENOTSUP, never an empty answer. */
static void test_not_supported(void **state)
{
	struct ctx *c = *state;
	REQUIRE_CH();
	assert_int_equal(store_size_limit_set(c->ch, 1000), -ENOTSUP);
	assert_int_equal(store_ping(c->ch), 0);
	uint64_t bytes = 0;
	assert_int_equal(store_size_get(c->ch, &bytes), 0);
}

/* ---- incidents, settings, baselines, retention ---------------------------------------------- */

/* A diagnosis as text without its id (ids differ by backend: SQLite counts, ClickHouse hashes). */
static int diag_text(void *arg, const struct store_diagnosis *d)
{
	struct text *t = arg;

	text_add(t, "%s|%s|%s|%d|%s|%s|%s|%s|%s|%s|%s|%" PRId64 "|%" PRId64 "|%" PRId64 "\n",
		 d->job, d->identity, d->kind, d->rank, d->hostname, d->communicators, d->layer,
		 d->severity, d->summary, d->action, d->report, d->opened_ms, d->updated_ms,
		 d->resolved_ms);
	return 0;
}

static void diag_list(struct store *s, const struct store_diagnosis_filter *f, uint32_t limit,
		      struct text *t)
{
	memset(t, 0, sizeof(*t));
	int rc = store_diagnoses_list(s, f, limit, diag_text, t);
	if (rc)
		fail_msg("store_diagnoses_list: %s", sysom_strerror(rc));
}

static void same_diag_list(struct ctx *c, const struct store_diagnosis_filter *f, uint32_t limit,
			   unsigned want_rows)
{
	static struct text a, b;
	unsigned n = 0;

	diag_list(c->sq, f, limit, &a);
	diag_list(c->ch, f, limit, &b);
	assert_string_equal(a.buf, b.buf);
	for (size_t i = 0; i < a.len; i++)
		n += a.buf[i] == '\n';
	assert_int_equal(n, want_rows);
}

static struct store_diagnosis diag(const char *job, const char *identity, const char *summary,
				   int64_t ms)
{
	return (struct store_diagnosis){
		.job = job, .identity = identity, .kind = "straggler", .rank = 5,
		.hostname = "node-5", .communicators = "ab cd", .layer = "gpu", .severity = "warning",
		.summary = summary, .action = "check it", .report = "{\"it's\":\"a\\\\b\\tc\"}",
		.updated_ms = ms };
}

/* Upserts on both backends; the answers agree; returns the ClickHouse id. */
static int64_t upsert_both(struct ctx *c, const struct store_diagnosis *d, bool want_opened)
{
	int64_t ida, idb;
	bool oa, ob;

	assert_int_equal(store_diagnosis_upsert(c->sq, d, &ida, &oa), 0);
	assert_int_equal(store_diagnosis_upsert(c->ch, d, &idb, &ob), 0);
	assert_true(oa == want_opened && ob == want_opened);
	assert_true(ida > 0 && idb > 0 && idb < (1LL << 53));
	return idb;
}

static int64_t sq_id_of(struct ctx *c, const struct store_diagnosis *d)
{
	int64_t id;
	bool opened;

	/* Upserting the same fields again changes nothing but tells the open id. */
	assert_int_equal(store_diagnosis_upsert(c->sq, d, &id, &opened), 0);
	assert_false(opened);
	return id;
}

/* The monitor's cycle on both backends: open, update, resolve, open again; same answers. */
static void test_incidents_same_as_sqlite(void **state)
{
	struct ctx *c = *state;
	struct store_diagnosis a1 = diag("j1", "straggler rank=5", "slow 1", 1000);
	struct store_diagnosis b1 = diag("j1", "regression", "slower", 1500);
	struct store_diagnosis c1 = diag("j2", "straggler rank=5", "other job", 1700);
	struct store_diagnosis a2 = diag("j1", "straggler rank=5", "slow 2", 2000);
	struct store_diagnosis a3 = diag("j1", "straggler rank=5", "back again", 4000);
	struct store_diagnosis_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	static struct text t;
	int64_t ida, idb, ida2, ida3;

	REQUIRE_CH();
	b1.kind = "regression";
	b1.rank = -1;
	b1.hostname = NULL; /* missing texts read back as "" on both */
	ida = upsert_both(c, &a1, true);
	idb = upsert_both(c, &b1, true);
	upsert_both(c, &c1, true);
	assert_true(ida != idb);
	ida2 = upsert_both(c, &a2, false);
	assert_true(ida2 == ida);
	same_diag_list(c, &all, 100, 3);
	/* Resolve: the open one only; resolving again or an unknown id is -ENOENT. */
	int64_t sq_a = sq_id_of(c, &a2);
	assert_int_equal(store_diagnosis_resolve(c->sq, sq_a, 3000), 0);
	assert_int_equal(store_diagnosis_resolve(c->ch, ida, 3000), 0);
	assert_int_equal(store_diagnosis_resolve(c->sq, sq_a, 3500), -ENOENT);
	assert_int_equal(store_diagnosis_resolve(c->ch, ida, 3500), -ENOENT);
	assert_int_equal(store_diagnosis_resolve(c->ch, 12345, 3500), -ENOENT);
	same_diag_list(c, &all, 100, 3);
	same_diag_list(c, &(struct store_diagnosis_filter){ .to_ms = INT64_MAX, .open_only = true },
		       100, 2);
	/* The same identity again: a new incident with a new id; the old one stays resolved. */
	ida3 = upsert_both(c, &a3, true);
	assert_true(ida3 != ida);
	same_diag_list(c, &all, 100, 4);
	same_diag_list(c, &all, 2, 2);
	same_diag_list(c, &(struct store_diagnosis_filter){ .job = "j1", .to_ms = INT64_MAX }, 100,
		       3);
	same_diag_list(c, &(struct store_diagnosis_filter){ .job = "j1", .to_ms = INT64_MAX,
							    .open_only = true }, 100, 2);
	/* Open at some time in [from, to]: the resolved one (1000..3000) is outside [3100, ...]. */
	same_diag_list(c, &(struct store_diagnosis_filter){ .from_ms = 3100, .to_ms = 5000 }, 100,
		       3);
	same_diag_list(c, &(struct store_diagnosis_filter){ .from_ms = 0, .to_ms = 1200 }, 100, 1);
	/* By id: the resolved one keeps its id and fields. */
	diag_list(c->ch, &(struct store_diagnosis_filter){ .id = ida }, 1, &t);
	assert_non_null(strstr(t.buf, "|slow 2|"));
	assert_non_null(strstr(t.buf, "|1000|2000|3000\n"));
	diag_list(c->ch, &(struct store_diagnosis_filter){ .id = ida3 }, 1, &t);
	assert_non_null(strstr(t.buf, "|back again|check it|"));
	assert_non_null(strstr(t.buf, "|4000|4000|0\n"));
}

/*
 * Ids on ClickHouse: derived from (job, identity, generation), so two replicas (two stores)
 * opening the same incident agree on it; a colliding id probes the next; a write with an
 * older time still replaces the row it read; a stale update cannot undo a resolve.
 */
static void test_incident_ids_and_versions(void **state)
{
	struct ctx *c = *state;
	struct store_diagnosis d = diag("jid", "straggler rank=1", "s1", 5000);
	struct store *other = NULL;
	char url[300], err[256], sql[512];
	static struct text t;
	int64_t id1, id2, id3;
	bool opened;

	REQUIRE_CH();
	snprintf(url, sizeof(url), "%s_b", c->url);
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = url },
					       &other, err, sizeof(err)), 0);
	/* Another database (a replica racing, or a second cluster): the same id. */
	assert_int_equal(store_diagnosis_upsert(other, &d, &id1, &opened), 0);
	assert_true(opened);
	assert_int_equal(store_diagnosis_upsert(c->ch, &d, &id2, &opened), 0);
	assert_true(opened && id1 == id2);
	/* A second store on the same database (a second replica) updates the same incident. */
	struct store *replica = NULL;
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url },
					       &replica, err, sizeof(err)), 0);
	d.summary = "s2";
	d.updated_ms = 4000; /* its clock is behind: the write still wins (version = prev + 1) */
	assert_int_equal(store_diagnosis_upsert(replica, &d, &id3, &opened), 0);
	assert_true(!opened && id3 == id1);
	diag_list(c->ch, &(struct store_diagnosis_filter){ .id = id1 }, 10, &t);
	assert_non_null(strstr(t.buf, "|s2|"));
	assert_non_null(strstr(t.buf, "|5000|4000|0\n"));
	/* Resolved on one replica; a stale open copy written afterwards (a racing update with a
	 * lower version) does not reopen it. */
	assert_int_equal(store_diagnosis_resolve(replica, id1, 6000), 0);
	snprintf(sql, sizeof(sql), "INSERT INTO diagnoses (id, job, identity, summary, resolved_ms,"
		 " version) VALUES (%" PRId64 ", 'jid', 'straggler rank=1', 'stale', 0, 999999999)",
		 id1);
	ch_sql(c->db, sql);
	diag_list(c->ch, &(struct store_diagnosis_filter){ .id = id1 }, 10, &t);
	assert_non_null(strstr(t.buf, "|s2|"));
	assert_non_null(strstr(t.buf, "|6000\n"));
	diag_list(c->ch, &(struct store_diagnosis_filter){ .to_ms = INT64_MAX, .open_only = true },
		  10, &t);
	assert_int_equal(t.len, 0);
	/* Generation 1 of the identity, opened in the other database first: its id is then
	 * taken there by a foreign row, so that store probes to the next id. */
	d.updated_ms = 7000;
	assert_int_equal(store_diagnosis_upsert(c->ch, &d, &id2, &opened), 0);
	assert_true(opened && id2 != id1);
	assert_int_equal(store_diagnosis_resolve(other, id1, 6000), 0);
	snprintf(sql, sizeof(sql), "INSERT INTO diagnoses (id, job, identity, generation, version)"
		 " VALUES (%" PRId64 ", 'someone', 'else', 0, 1)", id2);
	ch_sql(strchr(url, '=') + 1, sql);
	assert_int_equal(store_diagnosis_upsert(other, &d, &id3, &opened), 0);
	assert_true(opened && id3 != id2 && id3 == ((id2 + 1) & ((1LL << 53) - 1)));
	store_close(replica);
	store_close(other);
}

static int baseline_text(void *arg, const struct store_baseline *b)
{
	struct text *t = arg;

	text_add(t, "%s %" PRId64 " %" PRId64 " %" PRIu64 " %" PRIu64 " [%s] %" PRId64 " %s\n",
		 b->job, b->from_ms, b->to_ms, b->iteration_ns, b->samples, b->profile,
		 b->created_ms, b->source);
	return 0;
}

static void same_baseline(struct ctx *c, const char *job, int want_rc)
{
	static struct text a, b;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_baseline_get(c->sq, job, baseline_text, &a), want_rc);
	assert_int_equal(store_baseline_get(c->ch, job, baseline_text, &b), want_rc);
	assert_string_equal(a.buf, b.buf);
}

static void same_settings(struct ctx *c, const char *job, const char *want)
{
	char *a = (char *)"x", *b = (char *)"x";

	assert_int_equal(store_job_settings_get(c->sq, job, &a), 0);
	assert_int_equal(store_job_settings_get(c->ch, job, &b), 0);
	if (!want) {
		assert_null(a);
		assert_null(b);
	} else {
		assert_non_null(a);
		assert_non_null(b);
		assert_string_equal(a, want);
		assert_string_equal(b, want);
	}
	free(a);
	free(b);
}

/* Settings replaced and deleted, baselines replaced: the same answers as SQLite. */
static void test_settings_and_baselines(void **state)
{
	struct ctx *c = *state;
	struct store_baseline b = { .job = "j1", .from_ms = 10, .to_ms = 20, .created_ms = 30,
				    .iteration_ns = 123456, .samples = 789,
				    .profile = "a;b 3\na;c 4\n", .source = "auto" };

	REQUIRE_CH();
	same_settings(c, "j1", NULL);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(store_job_settings_put(c->sq, "j1", "{\"straggler\":1.5}", 100), 0);
		assert_int_equal(store_job_settings_put(c->ch, "j1", "{\"straggler\":1.5}", 100), 0);
	}
	same_settings(c, "j1", "{\"straggler\":1.5}");
	/* Replaced within the same millisecond, then with an older time: the last put wins. */
	assert_int_equal(store_job_settings_put(c->sq, "j1", "{\"it's\":\"new\\n\"}", 100), 0);
	assert_int_equal(store_job_settings_put(c->ch, "j1", "{\"it's\":\"new\\n\"}", 100), 0);
	same_settings(c, "j1", "{\"it's\":\"new\\n\"}");
	assert_int_equal(store_job_settings_put(c->sq, "j1", "{\"v\":3}", 50), 0);
	assert_int_equal(store_job_settings_put(c->ch, "j1", "{\"v\":3}", 50), 0);
	same_settings(c, "j1", "{\"v\":3}");
	same_settings(c, "j2", NULL);
	assert_int_equal(store_job_settings_put(c->sq, "j1", NULL, 200), 0);
	assert_int_equal(store_job_settings_put(c->ch, "j1", NULL, 200), 0);
	same_settings(c, "j1", NULL);
	assert_int_equal(store_job_settings_put(c->ch, "j1", "{}", 300), 0);
	assert_int_equal(store_job_settings_put(c->sq, "j1", "{}", 300), 0);
	same_settings(c, "j1", "{}");

	same_baseline(c, "j1", -ENOENT);
	assert_int_equal(store_baseline_put(c->sq, &b), 0);
	assert_int_equal(store_baseline_put(c->ch, &b), 0);
	same_baseline(c, "j1", 0);
	b.iteration_ns = UINT64_MAX; /* clamped alike */
	b.profile = NULL;
	b.source = "api";
	b.created_ms = 5; /* older than the one it replaces: still the newest write */
	assert_int_equal(store_baseline_put(c->sq, &b), 0);
	assert_int_equal(store_baseline_put(c->ch, &b), 0);
	same_baseline(c, "j1", 0);
	same_baseline(c, "j2", -ENOENT);
}

static void put_at(struct store *s, uint64_t seq, uint64_t window_ns)
{
	struct sysom_batch b;
	struct store_put_result r;

	assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
						     .node = 9, .epoch = 1, .sequence = seq,
						     .window_start_ns = window_ns }), 0);
	/* Each batch names its python process's unit, as an agent does every window. */
	identity_add(&b, &(struct id_spec){ .process = 0, .unit = "ret.scope" });
	assert_int_equal(store_batch_put(s, &b, FIXTURE_HASH + seq, (int64_t)window_ns + 1000000000,
					 &r), 0);
	assert_false(r.duplicate);
	sysom_batch_free(&b);
}

static int count_row(void *arg, const struct store_stack_count *r)
{
	(void)r;
	(*(unsigned *)arg)++;
	return 0;
}

/* Retention drops whole days that ended before the cutoff and nothing newer; incidents stay. */
static void test_retention(void **state)
{
	struct ctx *c = *state;
	const uint64_t day_ns = 86400ULL * 1000000000ULL;
	uint64_t old_ns = T0 - T0 % day_ns + 3600ULL * 1000000000ULL; /* 01:00 UTC, day D */
	uint64_t new_ns = old_ns + 3 * day_ns;                         /* day D+3 */
	int64_t d_ms = (int64_t)((old_ns - old_ns % day_ns) / 1000000); /* 00:00 of day D */
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	struct store_batch_record rec;
	struct store_diagnosis d = diag("jr", "straggler rank=5", "kept", d_ms);
	uint8_t node[16];
	uint32_t dropped = 99;
	uint64_t total = 0;
	unsigned groups = 0;
	int64_t id;
	bool opened;

	REQUIRE_CH();
	memset(node, 9, sizeof(node));
	put_at(c->ch, 1, old_ns);
	put_at(c->ch, 2, new_ns);
	/* SQLite deletes rows, not days: at a day's end both backends answer the same. */
	put_at(c->sq, 1, old_ns);
	put_at(c->sq, 2, new_ns);
	assert_int_equal(store_retention_apply(c->sq, d_ms + 86400000,
					d_ms + 86400000, &dropped), 0);
	assert_true(dropped > 0);
	assert_int_equal(store_stacks_aggregate(c->sq, &all, 100, count_row, &groups, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	assert_int_equal(store_batch_find(c->sq, node, 1, 1, &rec), 0);
	assert_false(rec.exists);
	assert_int_equal(store_batch_find(c->sq, node, 1, 2, &rec), 0);
	assert_true(rec.exists);
	assert_int_equal(store_diagnosis_upsert(c->ch, &d, &id, &opened), 0);
	assert_int_equal(store_stacks_aggregate(c->ch, &all, 100, count_row, &groups, &total), 0);
	assert_int_equal(total, 2 * FIXTURE_SAMPLES);
	/* A cutoff inside day D keeps it (the day has not ended). */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 86399999,
					d_ms + 86399999, &dropped), 0);
	assert_int_equal(dropped, 0);
	/* The end of day D: its partitions go (batches, processes, samples, identities, sample
	 * rollups, the node, sequence and counter summaries, the fleet slots' batch counts, the
	 * process names, the stacks stored for D and the batch rows by window minute), D+3
	 * stays, with the identity its batch sent: filtered as on SQLite. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 86400000,
					d_ms + 86400000, &dropped), 0);
	assert_int_equal(dropped, 12);
	/* The all-time lists forget day D with its batch rows, as the reads that grouped every
	 * batch did (SQLite keeps a node's row and totals past retention). */
	static struct text t;
	memset(&t, 0, sizeof(t));
	assert_int_equal(store_nodes_list(c->ch, node_text, &t), 0);
	char want[64];
	snprintf(want, sizeof(want), " first=%" PRIu64 " ", new_ns + 1000000000);
	assert_non_null(strstr(t.buf, want));
	assert_non_null(strstr(t.buf, " batches=1 epoch=1 seq=2\n"));
	memset(&t, 0, sizeof(t));
	assert_int_equal(store_counters_list(c->ch, counter_text, &t), 0);
	snprintf(want, sizeof(want), " node-9 %u\n", FIXTURE_SAMPLES);
	assert_non_null(strstr(t.buf, want));
	assert_non_null(strstr(t.buf, " node-9 990\n"));
	assert_int_equal(store_stacks_aggregate(c->ch, &all, 100, count_row, &groups, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	struct store_sample_filter unit = all;
	uint64_t sq_total = 0;
	unit.unit = "ret.scope";
	assert_int_equal(store_stacks_aggregate(c->sq, &unit, 100, count_row, &groups, &sq_total), 0);
	assert_int_equal(store_stacks_aggregate(c->ch, &unit, 100, count_row, &groups, &total), 0);
	assert_true(total > 0 && total < FIXTURE_SAMPLES);
	assert_int_equal(total, sq_total);
	assert_int_equal(store_batch_find(c->ch, node, 1, 1, &rec), 0);
	assert_false(rec.exists);
	assert_int_equal(store_batch_find(c->ch, node, 1, 2, &rec), 0);
	assert_true(rec.exists);
	/* Again: nothing left to drop; the incident is kept. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 86400000,
					d_ms + 86400000, &dropped), 0);
	assert_int_equal(dropped, 0);
	diag_list(c->ch, &(struct store_diagnosis_filter){ .id = id }, 1, &t);
	assert_non_null(strstr(t.buf, "|kept|"));
	/* Everything before D+4 ends: D+3 goes too. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 4 * 86400000LL,
					d_ms + 4 * 86400000LL, &dropped), 0);
	assert_int_equal(dropped, 12);
	/* A node whose every batch is gone leaves the lists. */
	memset(&t, 0, sizeof(t));
	assert_int_equal(store_nodes_list(c->ch, node_text, &t), 0);
	assert_int_equal(t.len, 0);
	assert_int_equal(store_counters_list(c->ch, counter_text, &t), 0);
	assert_int_equal(t.len, 0);
	assert_int_equal(store_stacks_aggregate(c->ch, &all, 100, count_row, &groups, &total), 0);
	assert_int_equal(total, 0);
}


/* ---- per-minute rollups ---------------------------------------------------------------------- */

/* Makes readers of `s` switch to the rollups at `cutoff_ms` (a minute start). */
static void rollup_cutoff_set(struct store *s, int64_t cutoff_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	store_rollup_raw_keep_set(s, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - cutoff_ms);
}

/* Both backends, raw and with each cutoff, give the same CPU and off-CPU groups and totals as
 * the raw answer of SQLite (`want`: its totals). */
static void rollup_same(struct ctx *c, const struct store_sample_filter *f,
			const int64_t *cutoffs, int ncutoffs)
{
	static struct text raw[2], t;
	uint64_t want[2], total;

	store_rollup_raw_keep_set(c->sq, 0);
	store_rollup_raw_keep_set(c->ch, 0);
	want[0] = same_agg(c, AGG_OFFCPU, f, 1000);
	agg_text(c->sq, AGG_OFFCPU, f, 1000, &raw[0], &want[0]);
	aggregate(c->sq, f, 1000, &raw[1], &want[1]);
	same_aggregate(c, f, want[1]);
	for (int i = 0; i < ncutoffs; i++) {
		for (int b = 0; b < 2; b++) {
			struct store *s = b ? c->ch : c->sq;

			rollup_cutoff_set(s, cutoffs[i]);
			agg_text(s, AGG_OFFCPU, f, 1000, &t, &total);
			assert_string_equal(t.buf, raw[0].buf);
			assert_int_equal(total, want[0]);
			aggregate(s, f, 1000, &t, &total);
			assert_string_equal(t.buf, raw[1].buf);
			assert_int_equal(total, want[1]);
			store_rollup_raw_keep_set(s, 0);
		}
	}
}

/*
 * The ClickHouse rollups answer like the raw rows (and like SQLite's) for any cutoff; their
 * rows count only under a committed attempt; retention keeps them (and the batches,
 * processes and identities they are read through) past the raw rows.
 */
static void test_rollup_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t m0 = (int64_t)(T0 / 1000000) / 60000 * 60000;
	const int64_t cutoffs[] = { m0 + 3600000, m0 + 60000, m0 };
	struct store_sample_filter all = { .from_ms = m0 - 60000, .to_ms = m0 + 3600000 - 1 };
	struct text t;
	uint64_t total;
	char sql[512];

	REQUIRE_CH();
	for (uint64_t k = 0; k < 4; k++)
		put_both_gpu_os(c, &(struct fixture_spec){
			.node = (uint8_t)(7 + k / 2), .epoch = 1, .sequence = k + 1,
			.extra_stacks = (uint32_t)k, .window_start_ns = T0 + k * 30000000000ULL });
	rollup_same(c, &all, cutoffs, 3);
	struct store_sample_filter f = all;
	f.node = "node-8";
	rollup_same(c, &f, cutoffs, 3);
	f = all;
	f.job = "train-1"; /* through job_ranks: node 8's python3 */
	f.has_rank = true;
	f.rank = 1;
	rollup_same(c, &f, cutoffs, 3);
	f = all;
	f.has_pid = true;
	f.pid = FIXTURE_PID_NCCL;
	rollup_same(c, &f, cutoffs, 3);
	f = all;
	f.from_ms = m0 + 60000;
	f.comm = "python3";
	rollup_same(c, &f, cutoffs, 3);

	/* A retry (a duplicate) adds nothing; rollup rows of an attempt that never committed do
	 * not count. */
	struct store_put_result res;
	put(c->ch, &(struct fixture_spec){ .node = 7, .epoch = 1, .sequence = 1,
					   .window_start_ns = T0 }, FIXTURE_HASH, &res);
	assert_true(res.duplicate);
	snprintf(sql, sizeof(sql), "INSERT INTO sample_minutes (day, node_id, minute_ms, process,"
		 " tgid, user_stack, kernel_stack, count, attempt) VALUES (today(),"
		 " '07070707070707070707070707070707', %" PRId64 ", 1, 1, 0, 0, 1000, 7)", m0);
	ch_sql(c->db, sql);
	rollup_same(c, &all, cutoffs, 1);

	/* Migration 10 fills the rollups of a schema 9 database from its raw rows. */
	char err[256];
	store_close(c->ch);
	c->ch = NULL;
	ch_sql(c->db, "DROP TABLE sample_minutes");
	ch_sql(c->db, "DROP TABLE offcpu_minutes");
	migrations_rewind(c->db, 9);
	int rc = store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url }, &c->ch,
				       err, sizeof(err));
	if (rc)
		fail_msg("reopen: %s", err);
	assert_int_equal(store_schema_version(c->ch), CH_SCHEMA_NEWEST);
	rollup_same(c, &all, cutoffs, 3);

	/* Raw days dropped, rollup days kept: the rollups still answer, through the batches,
	 * processes and identities kept with them. */
	uint64_t want = 0;
	uint32_t dropped = 0;
	aggregate(c->sq, &all, 1000, &t, &want);
	assert_int_equal(store_retention_apply(c->ch, m0 + 86400000LL, 0, &dropped), 0);
	assert_true(dropped >= 2); /* samples, offcpu, launches, ... of day D */
	assert_int_equal(store_retention_apply(c->sq, m0 + 86400000LL, 0, &dropped), 0);
	store_rollup_raw_keep_set(c->ch, 0);
	aggregate(c->ch, &all, 1000, &t, &total);
	assert_int_equal(total, 0); /* the raw rows are gone */
	rollup_same(c, &all, cutoffs, 0);
	rollup_cutoff_set(c->ch, m0 + 86400000LL);
	rollup_cutoff_set(c->sq, m0 + 86400000LL);
	same_aggregate(c, &all, want);
	/* The process list reads raw rows only, as on SQLite: none are left, whatever the
	 * rollups kept (reading them would list the processes with their rollup samples). */
	assert_int_equal(same_processes_any_order(c, &all), 0);
	f = all;
	f.node = "node-8";
	static struct text a, b;
	uint64_t ta = 0, tb = 0;
	aggregate(c->sq, &f, 1000, &a, &ta);
	aggregate(c->ch, &f, 1000, &b, &tb);
	assert_string_equal(a.buf, b.buf);
	assert_true(ta > 0 && ta == tb);
	/* Rollup days past their own cutoff go too. */
	assert_int_equal(store_retention_apply(c->ch, m0 + 86400000LL, m0 + 86400000LL, &dropped),
			 0);
	assert_true(dropped >= 4); /* batches, processes, sample and off-CPU rollups */
	aggregate(c->ch, &all, 1000, &t, &total);
	assert_int_equal(total, 0);
	store_rollup_raw_keep_set(c->ch, 0);
	store_rollup_raw_keep_set(c->sq, 0);
}

/* ---- stacks collected by day (schema 16, clickhouse_schema_stacks.c) ---------------------- */

#define DAY_NS (86400ULL * 1000000000ULL)
#define DAY_MS 86400000LL

/* A number SQL answers on the private server (a count, a day). */
static long long ch_number(const char *db, const char *sql)
{
	char cmd[2048], line[64] = "";
	long long v;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "curl -sSf '%s?database=%s' --data-binary \"%s\"", ch_url, db,
		 sql);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(line, sizeof(line), p));
	assert_int_equal(pclose(p), 0);
	assert_int_equal(sscanf(line, "%lld", &v), 1);
	return v;
}

/* Rows of the five tables naming a stack (samples, offcpu, launches and their rollups) whose
 * stack stack_days does not hold: what retention must never leave. */
static long long dangling_stacks(const char *db)
{
	static const char *const tables[] = { "samples", "offcpu", "launches", "sample_minutes",
					      "offcpu_minutes" };
	char sql[512];
	long long n = 0;

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		snprintf(sql, sizeof(sql), "SELECT count() FROM %s WHERE (user_stack != 0 AND"
			 " user_stack NOT IN (SELECT id FROM stack_days)) OR (kernel_stack != 0 AND"
			 " kernel_stack NOT IN (SELECT id FROM stack_days))", tables[i]);
		n += ch_number(db, sql);
	}
	return n;
}

/* Stack rows stored for day `day` (days since 1970), and stacks stored at all. */
static long long stacks_on(const char *db, uint64_t day)
{
	char sql[128];

	snprintf(sql, sizeof(sql), "SELECT count() FROM stack_days WHERE toUInt16(day) = %" PRIu64,
		 day);
	return ch_number(db, sql);
}

static long long stacks_stored(const char *db)
{
	return ch_number(db, "SELECT uniqExact(id) FROM stack_days");
}

/* Puts into ClickHouse the fixture batch of `node` whose window starts at `window_ns` and
 * that the server received at `received_ns`, with extra user stacks 0 .. extra-1 (the same
 * stacks in every batch: one sample each, 20 s into the window). */
static void put_stacks(struct ctx *c, uint8_t node, uint64_t seq, uint64_t window_ns,
		       uint64_t received_ns, uint32_t extra)
{
	struct sysom_batch b;
	struct store_put_result r;

	assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
						     .node = node, .epoch = 1, .sequence = seq,
						     .window_start_ns = window_ns,
						     .extra_stacks = extra }), 0);
	assert_int_equal(store_batch_put(c->ch, &b, FIXTURE_HASH + seq, (int64_t)received_ns, &r),
			 0);
	assert_false(r.duplicate);
	sysom_batch_free(&b);
}

/* Closes and opens the ClickHouse store again: empty id and stack caches (a reader that
 * never saw a stack), and any migration not yet applied runs. */
static void ch_reopen(struct ctx *c)
{
	char err[256];

	store_close(c->ch);
	c->ch = NULL;
	int rc = store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url }, &c->ch,
				       err, sizeof(err));
	if (rc)
		fail_msg("reopen: %s", err);
	assert_int_equal(store_schema_version(c->ch), CH_SCHEMA_NEWEST);
}

/* A CPU flame graph over all time from a fresh reader: every stack resolves (stack_text
 * asserts it); returns the total. */
static uint64_t flame_total(struct ctx *c)
{
	static struct text t;
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	uint64_t total = 0;

	ch_reopen(c);
	aggregate(c->ch, &all, 1000, &t, &total);
	return total;
}

/*
 * Retention collects stacks: those only dropped days named go; those kept raw rows or kept
 * rollup rows name stay and resolve; a stack first stored long ago and still used survives;
 * a late batch (window days before its receive day) and an agent clock ahead (after it) keep
 * theirs; and the writer's id cache never skips a stack retention dropped.
 */
static void test_stacks_collected(void **state)
{
	struct ctx *c = *state;
	const uint64_t d0 = T0 - T0 % DAY_NS;           /* 00:00 UTC of day D */
	const uint64_t hour = 3600ULL * 1000000000ULL;
	const uint64_t day = d0 / DAY_NS;                /* D, days since 1970 */
	const int64_t d_ms = (int64_t)(d0 / 1000000);
	uint32_t dropped;

	REQUIRE_CH();
	/* A: day D, extra stacks 0-2. B: day D+3, extra stack 0 and the fixture's own stacks,
	 * first stored on D: written again for D+3. */
	put_stacks(c, 9, 1, d0 + hour, d0 + hour + 1000000000, 3);
	const long long base = stacks_stored(c->db) - 3; /* the fixture's own stacks */
	assert_true(base > 0);
	assert_int_equal(stacks_on(c->db, day), base + 3);
	put_stacks(c, 9, 2, d0 + 3 * DAY_NS + hour, d0 + 3 * DAY_NS + hour + 1000000000, 1);
	assert_int_equal(stacks_on(c->db, day + 3), base + 1);
	assert_int_equal(stacks_stored(c->db), base + 3);

	/* Day D goes: extra stacks 1 and 2, which only D named, go with it; B's stay and its
	 * flame graph resolves from a reader that never saw them. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + DAY_MS, d_ms + DAY_MS, &dropped), 0);
	assert_true(dropped > 0);
	assert_int_equal(stacks_stored(c->db), base + 1);
	assert_int_equal(stacks_on(c->db, day), 0);
	assert_int_equal(dangling_stacks(c->db), 0);

	/* A late batch from day D (dropped), received on D+5 by the writer whose id cache still
	 * holds extra stacks 1 and 2 for day D: written again, for D+5 (its receive day), as the
	 * stacks it shares with B (stored for D+3 only). */
	put_stacks(c, 8, 1, d0 + hour, d0 + 5 * DAY_NS, 3);
	assert_int_equal(stacks_on(c->db, day + 5), base + 3);
	assert_int_equal(stacks_stored(c->db), base + 3);
	assert_int_equal(dangling_stacks(c->db), 0);
	assert_int_equal(flame_total(c), 2 * FIXTURE_SAMPLES + 1 + 3);

	/* An agent clock ahead: a window on D+8 received on D+6, extra stacks 0-4 (3 and 4 only
	 * here): its stacks are stored for D+8, the day of its rows. */
	put_stacks(c, 7, 1, d0 + 8 * DAY_NS + hour, d0 + 6 * DAY_NS + hour, 5);
	assert_int_equal(stacks_on(c->db, day + 6), 0);
	assert_int_equal(stacks_on(c->db, day + 8), base + 5);
	/* Everything before D+6 goes: only the clock-ahead batch's rows (and its batch row, of
	 * its receive day) and stacks stay. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 6 * DAY_MS, d_ms + 6 * DAY_MS,
					       &dropped), 0);
	assert_int_equal(stacks_stored(c->db), base + 5);
	assert_int_equal(stacks_on(c->db, day + 5), 0);
	assert_int_equal(dangling_stacks(c->db), 0);
	assert_int_equal(flame_total(c), FIXTURE_SAMPLES + 5);

	/* Its raw rows go, its rollup rows stay: the stacks stay with them and resolve. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 9 * DAY_MS, d_ms + 6 * DAY_MS,
					       &dropped), 0);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM samples"), 0);
	assert_true(ch_number(c->db, "SELECT count() FROM sample_minutes") > 0);
	assert_int_equal(stacks_stored(c->db), base + 5);
	assert_int_equal(dangling_stacks(c->db), 0);
	ch_reopen(c);
	static struct text t;
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	uint64_t total = 0;
	rollup_cutoff_set(c->ch, d_ms + 9 * DAY_MS);
	aggregate(c->ch, &all, 1000, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES + 5);
	store_rollup_raw_keep_set(c->ch, 0);

	/* And with the rollups' day: nothing is left. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 9 * DAY_MS, d_ms + 9 * DAY_MS,
					       &dropped), 0);
	assert_int_equal(stacks_stored(c->db), 0);
}

/* What a server of schema 15 left: the stacks in `stacks`, no stack_days, no version 16. */
static void schema_15_make(struct ctx *c)
{
	store_close(c->ch);
	c->ch = NULL;
	ch_sql(c->db, "CREATE TABLE stacks (id Int64, ident String)"
		      " ENGINE = ReplacingMergeTree ORDER BY id");
	ch_sql(c->db, "INSERT INTO stacks SELECT id, ident FROM stack_days LIMIT 1 BY id");
	ch_sql(c->db, "DROP TABLE stack_days");
	migrations_rewind(c->db, 15);
}

/*
 * The upgrade from schema 15 carries every stack over, dated the newest day of any row naming
 * stacks, so that retention keeps them while rows name them and collects them after; a
 * migration cut short after the rename and part of the copy completes when run again.
 */
static void test_stacks_upgrade_from_15(void **state)
{
	struct ctx *c = *state;
	const uint64_t d0 = T0 - T0 % DAY_NS;
	const uint64_t hour = 3600ULL * 1000000000ULL;
	const uint64_t day = d0 / DAY_NS;
	const int64_t d_ms = (int64_t)(d0 / 1000000);
	uint32_t dropped;

	REQUIRE_CH();
	put_stacks(c, 9, 1, d0 + hour, d0 + hour + 1000000000, 3);
	put_stacks(c, 9, 2, d0 + 3 * DAY_NS + hour, d0 + 3 * DAY_NS + hour + 1000000000, 1);
	const long long all = stacks_stored(c->db);

	schema_15_make(c);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM stacks"), all);
	ch_reopen(c);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM system.tables WHERE database ="
					  " currentDatabase() AND name IN ('stacks', 'stacks_v13')"), 0);
	assert_int_equal(stacks_stored(c->db), all);
	assert_int_equal(stacks_on(c->db, day + 3), all); /* the newest rows' day */
	assert_int_equal(flame_total(c), 2 * FIXTURE_SAMPLES + 3 + 1);
	/* Day D goes: its stacks stay, dated D+3 (the migration cannot tell which D+3 names). */
	assert_int_equal(store_retention_apply(c->ch, d_ms + DAY_MS, d_ms + DAY_MS, &dropped), 0);
	assert_int_equal(stacks_stored(c->db), all);
	assert_int_equal(dangling_stacks(c->db), 0);
	assert_int_equal(flame_total(c), FIXTURE_SAMPLES + 1);

	/* Cut short: renamed, stack_days holding one stack, no version 16. Run again: whole. */
	schema_15_make(c);
	ch_sql(c->db, "RENAME TABLE stacks TO stacks_v13");
	ch_sql(c->db, "CREATE TABLE stack_days (day Date, id Int64, ident String)"
		      " ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY id");
	ch_sql(c->db, "INSERT INTO stack_days SELECT today(), id, ident FROM stacks_v13 LIMIT 1");
	ch_reopen(c);
	assert_int_equal(stacks_stored(c->db), all);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM stack_days"), all);
	assert_int_equal(dangling_stacks(c->db), 0);
	assert_int_equal(flame_total(c), FIXTURE_SAMPLES + 1);
	/* And collected like any: after the last day naming them, none is left but the one the
	 * cut-short copy dated today. */
	assert_int_equal(store_retention_apply(c->ch, d_ms + 4 * DAY_MS, d_ms + 4 * DAY_MS,
					       &dropped), 0);
	assert_int_equal(stacks_stored(c->db), 1);
	/* Run again on a schema 16 database: nothing changes. */
	migrations_rewind(c->db, 15);
	ch_reopen(c);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM stack_days"), 1);
}

/*
 * The upgrade from schema 16 indexes every stored batch row under the minutes its window
 * touches; run again (as a backfill cut short is, or with batches stored while it ran) it
 * indexes rows twice, which changes no answer; and the range reads find the committed
 * attempts through the index alone (emptied, it hides every row).
 */
static void test_batch_minutes_upgrade_from_16(void **state)
{
	struct ctx *c = *state;
	const uint64_t d0 = T0 - T0 % DAY_NS;
	const uint64_t hour = 3600ULL * 1000000000ULL;
	const int64_t d_ms = (int64_t)(d0 / 1000000);
	const struct store_sample_filter hour1 = { .from_ms = d_ms + 3600000,
						   .to_ms = d_ms + 2 * 3600000 - 1 };
	static struct text t;
	uint64_t total;
	char sql[256];

	REQUIRE_CH();
	put_stacks(c, 9, 1, d0 + hour, d0 + hour + 1000000000, 3);
	put_stacks(c, 9, 2, d0 + 3 * DAY_NS + hour, d0 + 3 * DAY_NS + hour + 1000000000, 1);
	/* Windows of the fixture's length starting on a minute: one minute each. */
	assert_int_equal(ch_number(c->db, "SELECT count() FROM batch_minutes"), 2);
	assert_int_equal(flame_total(c), 2 * FIXTURE_SAMPLES + 3 + 1);

	store_close(c->ch);
	c->ch = NULL;
	ch_sql(c->db, "DROP TABLE batch_minutes_mv");
	ch_sql(c->db, "DROP TABLE batch_minutes");
	migrations_rewind(c->db, 16);
	assert_int_equal(flame_total(c), 2 * FIXTURE_SAMPLES + 3 + 1);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM batch_minutes"), 2);
	snprintf(sql, sizeof(sql), "SELECT count() FROM batch_minutes WHERE minute_ms = %" PRId64
		 " AND sequence = 1", d_ms + 3600000);
	assert_int_equal(ch_number(c->db, sql), 1);

	/* Run again: each row indexed twice; the same answers, a range's too. */
	migrations_rewind(c->db, 16);
	assert_int_equal(flame_total(c), 2 * FIXTURE_SAMPLES + 3 + 1);
	assert_int_equal(ch_number(c->db, "SELECT count() FROM batch_minutes"), 4);
	aggregate(c->ch, &hour1, 1000, &t, &total);
	assert_int_equal(total, FIXTURE_SAMPLES + 3);

	/* Emptied: no batch is committed in any range. */
	ch_sql(c->db, "TRUNCATE TABLE batch_minutes");
	assert_int_equal(flame_total(c), 0);
	aggregate(c->ch, &hour1, 1000, &t, &total);
	assert_int_equal(total, 0);
}

/* ---- NCCL instances kept past the raw calls (store_nccl_rollup.c) ------------------------ */

/* Every field a consumer reads of a collectives answer, one line per call (tid apart: the
 * instances keep none; process ids differ between the stores). */
static int nccl_line(void *arg, const struct store_collective_call *k)
{
	fprintf(arg, "%llx %u %llu first=%lld n=%d r=%d %lld-%lld %llu %llu %d %d %u %s %s %d\n",
		(unsigned long long)k->comm_key, k->op, (unsigned long long)k->seq,
		(long long)k->first_entry_ns, k->nranks, k->rank, (long long)k->entry_ns,
		(long long)k->exit_ns, (unsigned long long)k->count, (unsigned long long)k->bytes,
		k->peer, k->result, k->pid, k->node_id, k->hostname, k->job_rank);
	return 0;
}

static char *nccl_text(struct store *s, const struct store_collective_filter *f, uint32_t max)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	assert_int_equal(store_collectives_list(s, f, max, nccl_line, out), 0);
	fclose(out);
	return text;
}

/*
 * The same job in both stores (two nodes, rank 5 late, a rank skipping an instance; a second
 * batch per node 90 s later); retention past the first batches only, then past everything:
 * ClickHouse answers every range, latest, communicator and limit from its kept instances as it
 * did from the raw calls and as SQLite does; run again, nothing changes.
 */
static void test_nccl_rollup_same_answers(void **state)
{
	struct ctx *c = *state;
	const struct store_collective_filter f[] = {
		{ .job = "job-42", .from_ns = 0, .to_ns = INT64_MAX },
		{ .job = "job-42", .from_ns = (int64_t)T0 + 5000000000LL,
		  .to_ns = (int64_t)T0 + 95000000000LL },
		{ .job = "job-42", .from_ns = 0, .to_ns = INT64_MAX, .latest = true },
		{ .job = "job-42", .from_ns = 0, .to_ns = INT64_MAX, .has_comm = true,
		  .comm = JOB_COMM },
	};
	const uint32_t max[] = { 1000, 3 };
	char *raw[4][2];
	uint32_t dropped;

	REQUIRE_CH();
	for (int node = 1; node <= 2; node++)
		for (int half = 0; half < 2; half++) {
			struct job_spec js = {
				.base = { .node = (uint8_t)node, .epoch = 1,
					  .sequence = 1 + (uint64_t)half,
					  .window_start_ns = T0 + (uint64_t)half * 90000000000ULL },
				.job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
				.instances = 6, .skip_rank = node == 2 ? 6 : -1, .late_rank = 5,
				.late_ms = 40,
			};
			put_job_edited(c, &js, (int64_t)T0 + 120000000000LL,
				       half ? shift_seq : NULL);
		}
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++) {
			raw[i][j] = nccl_text(c->ch, &f[i], max[j]);
			char *sq = nccl_text(c->sq, &f[i], max[j]);
			assert_string_equal(raw[i][j], sq);
			free(sq);
		}
	/* Past the first batches (T0 + 40 s: a minute start), then past every call (ClickHouse
	 * drops the whole day of T0). */
	const int64_t cuts[] = { (int64_t)(T0 / 1000000) + 40000,
				 (int64_t)(T0 / 1000000) + 2 * 86400000LL };
	for (int k = 0; k < 2; k++)
		for (int again = 0; again < 2; again++) {
			assert_int_equal(store_retention_apply(c->ch, cuts[k], 0, &dropped), 0);
			assert_int_equal(store_retention_apply(c->sq, cuts[k], 0, &dropped), 0);
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 2; j++) {
					char *got = nccl_text(c->ch, &f[i], max[j]);
					char *sq = nccl_text(c->sq, &f[i], max[j]);
					assert_string_equal(got, raw[i][j]);
					assert_string_equal(sq, raw[i][j]);
					free(got);
					free(sq);
				}
		}
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			free(raw[i][j]);
}

static void test_open_errors(void **state)
{
	struct ctx *c = *state;
	struct store *s = NULL;
	char err[256], url[256];

	REQUIRE_CH();
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){
						       .url = "ftp://x/?database=a" }, &s, err,
					       sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "http://"));
	snprintf(url, sizeof(url), "%s", ch_url);
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = url },
					       &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "database"));
	snprintf(url, sizeof(url), "%s?database=a;drop", ch_url);
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = url },
					       &s, err, sizeof(err)), -EINVAL);
	/* A newer schema is refused. */
	ch_sql(c->db, "INSERT INTO schema_migrations VALUES (99, 0)");
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = c->url },
					       &s, err, sizeof(err)), -SYSOM_EVERSION);
	assert_non_null(strstr(err, "99"));
	/* Wrong credentials: refused with a clear error. */
	char cred[256];
	snprintf(cred, sizeof(cred), "%s/cred", c->dir);
	FILE *f = fopen(cred, "w");
	assert_non_null(f);
	fputs("sysom:wrong\n", f);
	fclose(f);
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){
						       .url = c->url, .credentials_file = cred },
					       &s, err, sizeof(err)), -EACCES);
	f = fopen(cred, "w");
	fputs("sysom:sysom-secret\n", f);
	fclose(f);
	snprintf(url, sizeof(url), "%s?database=%s_cred", ch_url, c->db);
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){
						       .url = url, .credentials_file = cred },
					       &s, err, sizeof(err)), 0);
	store_close(s);
}

/* A port that accepts connections and never answers: every call gives up with -EBUSY. */
static void test_slow_and_down(void **state)
{
	struct ctx *c = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct store *s = NULL;
	char err[256], url[128];

	REQUIRE_CH();
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/?database=x", ntohs(a.sin_port));
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){
						       .url = url, .timeout_ms = 300 },
					       &s, err, sizeof(err)), -EBUSY);
	close(fd);
	/* Nothing listening at all. */
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){ .url = url },
					       &s, err, sizeof(err)), -EBUSY);

	/* The server goes away under an open store: ingest and queries fail with -EBUSY. */
	struct sysom_batch b;
	struct store_put_result r;
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	uint64_t total;

	assert_int_equal(ch_script("stop", NULL, 0), 0);
	ch_up = false;
	assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
						     .node = 5, .sequence = 1, .window_start_ns = T0 }),
			 0);
	assert_int_equal(store_batch_put(c->ch, &b, 1, (int64_t)T0, &r), -EBUSY);
	sysom_batch_free(&b);
	assert_int_equal(store_stacks_aggregate(c->ch, &all, 10, no_row, NULL, &total), -EBUSY);
	assert_int_equal(store_ping(c->ch), -EBUSY);
}

/*
 * A query the store gives up on (its statement timeout) is stopped by ClickHouse too, not left
 * running: `samples` becomes a view over ten billion numbers, a flame graph through a store
 * with a 1-s timeout fails busy, and within a few seconds no query of it is running.
 */
static void test_timeout_stops_query(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	struct store *s = NULL;
	char err[256], sql[256];
	uint64_t total;
	long long running = -1;

	REQUIRE_CH();
	ch_sql(c->db, "RENAME TABLE samples TO samples_real");
	ch_sql(c->db, "CREATE VIEW samples AS SELECT today() AS day, '' AS node_id,"
		      " toInt64(number) AS time_ms, number AS process, toUInt32(1) AS tgid,"
		      " toUInt32(1) AS tid, toUInt32(0) AS cpu, '' AS thread_comm,"
		      " toInt64(0) AS kernel_stack, toInt64(0) AS user_stack, toUInt64(1) AS count,"
		      " number AS attempt FROM numbers(10000000000) WHERE cityHash64(number) = 1");
	assert_int_equal(store_clickhouse_open(&(struct store_clickhouse_options){
						       .url = c->url, .timeout_ms = 1000 },
					       &s, err, sizeof(err)), 0);
	assert_int_equal(store_stacks_aggregate(s, &all, 10, no_row, NULL, &total), -EBUSY);
	snprintf(sql, sizeof(sql), "SELECT count() FROM system.processes WHERE query LIKE"
		 " '%%FROM samples%%' AND query NOT LIKE '%%system.processes%%'");
	for (int i = 0; i < 50 && running; i++) {
		running = ch_number(c->db, sql);
		if (running)
			usleep(100 * 1000);
	}
	assert_int_equal(running, 0);
	store_close(s);
}

/* ---- host signals (wire 1.6) ------------------------------------------------------------- */

/* Job job-42 on nodes 1 (gpu-1, ranks 0-3) and 2 (gpu-2, ranks 4-7), one instance each. */
static void two_node_job(struct job_spec *n1, struct job_spec *n2)
{
	*n1 = (struct job_spec){ .base = { .node = 1, .epoch = 1, .sequence = 1,
					   .window_start_ns = T0, .hostname = "gpu-1" },
				 .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 1,
				 .skip_rank = -1, .late_rank = -1 };
	*n2 = *n1;
	n2->base.node = 2;
	n2->base.hostname = "gpu-2";
	n2->first_rank = 4;
}

static void host_edit(struct sysom_batch *b)
{
	assert_int_equal(sysom_batch_set_host_signal(b, SYSOM_HOST_TCP_RETRANS_SEGS,
						     (double)b->node_id[0] * 1.25), 0);
	assert_int_equal(sysom_batch_set_host_signal(b, SYSOM_HOST_CPU_MHZ, 2400.5), 0);
	assert_int_equal(sysom_batch_set_host_signal(b, SYSOM_HOST_MEM_AVAILABLE, 1e11), 0);
}

static int host_text(void *arg, const struct store_host_signal_row *r)
{
	struct text *t = arg;

	text_add(t, "H %s %s %" PRId64 " %" PRId64 " %s %.17g\n", r->node_id, r->hostname,
		 r->time_ms, r->window_ms, sysom_host_signal_name(r->signal), r->value);
	return 0;
}

/* The job's nodes' host signals: the same rows from both backends (a duplicate stored once,
 * another job's node not listed), and the same truncation. */
static void test_host_signals_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 31000000000LL;
	static struct text a, b;
	struct text *tx[2] = { &a, &b };
	struct store *st[2] = { c->sq, c->ch };

	REQUIRE_CH();
	struct job_spec n1, n2;
	two_node_job(&n1, &n2);
	struct job_spec other = n1;
	other.base.node = 3;
	other.job = "job-other";
	put_job_edited(c, &n1, r0, host_edit);
	put_job_edited(c, &n2, r0 + 1, host_edit);
	put_job_edited(c, &n1, r0 + 2, host_edit); /* a duplicate */
	put_job_edited(c, &other, r0 + 3, host_edit);
	static const uint32_t maxes[] = { 100, 5 };
	for (size_t m = 0; m < 2; m++) {
		uint32_t max = maxes[m];
		bool trunc[2] = { false, false };
		for (int i = 0; i < 2; i++) {
			struct store_host_filter f = { .job = "job-42", .from_ms = 0,
						       .to_ms = INT64_MAX };
			memset(tx[i], 0, sizeof(*tx[i]));
			int rc = store_host_signals_list(st[i], &f, max, host_text, tx[i], &trunc[i]);
			if (rc)
				fail_msg("store_host_signals_list %d: %s", i, sysom_strerror(rc));
		}
		assert_string_equal(a.buf, b.buf);
		assert_int_equal(trunc[0], trunc[1]);
		assert_int_equal(trunc[0], max == 5);
		if (max == 100) {
			assert_non_null(strstr(a.buf, "H 01010101010101010101010101010101 gpu-1"));
			assert_non_null(strstr(a.buf, "tcp_retrans_segs 2.5\n"));
			assert_null(strstr(a.buf, "03030303"));
		}
	}
}

/* ---- GPU health (wire 1.6) ------------------------------------------------------------------ */

/* Two GPUs per node: device 0 with every number known, device 1 with what NVML could not say
 * left unknown (stored as NULL by SQLite, as the wire's sentinel by ClickHouse). */
static void gpu_health_edit(struct sysom_batch *b)
{
	uint32_t uuid, bus, name;
	char text[64];

	snprintf(text, sizeof(text), "GPU-%02x-0000", b->node_id[0]);
	assert_int_equal(sysom_batch_intern_cstring(b, text, &uuid), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "00000000:3B:00.0", &bus), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "NVIDIA H200", &name), 0);
	struct sysom_gpu_health g = {
		.device = 0, .uuid = uuid, .pci_bus_id = bus, .name = name, .samples = 10,
		.slowdown_samples = 3, .reasons_any = 0x28, .reasons_last = 0x8, .sm_clock_min = 1200,
		.sm_clock_last = 1410, .sm_clock_max = 1980, .mem_clock_last = 2619,
		.mem_clock_max = 3201, .temp_max = 88, .temp_last = 86, .temp_slowdown = 87,
		.temp_shutdown = 92, .power_max_mw = 700000, .power_last_mw = 650123,
		.power_limit_mw = 700000, .util_gpu = 99, .util_mem = 41, .ecc_corrected = 5,
		.ecc_uncorrected = 1, .retired_sbe = 2, .retired_dbe = 0, .pcie_replays = 7,
		.flags = 0, .nvlink_errors = (uint64_t)1 << 40, .xid_count = 2, .xid_last = 79,
	};
	assert_int_equal(sysom_batch_set_gpu_health(b, &g), 0);
	struct sysom_gpu_health u = {
		.device = 1, .uuid = uuid, .pci_bus_id = bus, .name = name, .samples = 1,
		.reasons_any = SYSOM_GPU_UNKNOWN64, .reasons_last = SYSOM_GPU_UNKNOWN64,
		.sm_clock_min = SYSOM_GPU_UNKNOWN, .sm_clock_last = SYSOM_GPU_UNKNOWN,
		.sm_clock_max = SYSOM_GPU_UNKNOWN, .mem_clock_last = SYSOM_GPU_UNKNOWN,
		.mem_clock_max = SYSOM_GPU_UNKNOWN, .temp_max = SYSOM_GPU_UNKNOWN,
		.temp_last = SYSOM_GPU_UNKNOWN, .temp_slowdown = SYSOM_GPU_UNKNOWN,
		.temp_shutdown = SYSOM_GPU_UNKNOWN, .power_max_mw = SYSOM_GPU_UNKNOWN,
		.power_last_mw = SYSOM_GPU_UNKNOWN, .power_limit_mw = SYSOM_GPU_UNKNOWN,
		.util_gpu = SYSOM_GPU_UNKNOWN, .util_mem = SYSOM_GPU_UNKNOWN,
		.ecc_corrected = SYSOM_GPU_UNKNOWN64, .ecc_uncorrected = SYSOM_GPU_UNKNOWN64,
		.retired_sbe = SYSOM_GPU_UNKNOWN, .retired_dbe = SYSOM_GPU_UNKNOWN,
		.pcie_replays = SYSOM_GPU_UNKNOWN, .nvlink_errors = SYSOM_GPU_UNKNOWN64,
	};
	assert_int_equal(sysom_batch_set_gpu_health(b, &u), 0);
}

static int gpu_health_text(void *arg, const struct store_gpu_health *g)
{
	struct text *t = arg;
	const struct sysom_gpu_health *h = &g->h;

	text_add(t,
		 "G %s %s %" PRId64 " %" PRId64 " %u %s %s %s %u %u %" PRIu64 " %" PRIu64
		 " %u %u %u %u %u %u %u %u %u %u %u %u %u %u %" PRIu64 " %" PRIu64
		 " %u %u %u %u %" PRIu64 " %u %u\n",
		 g->node_id, g->hostname, g->window_start_ns, g->window_end_ns, h->device, g->uuid,
		 g->pci_bus_id, g->name, h->samples, h->slowdown_samples, h->reasons_any,
		 h->reasons_last, h->sm_clock_min, h->sm_clock_last, h->sm_clock_max,
		 h->mem_clock_last, h->mem_clock_max, h->temp_max, h->temp_last, h->temp_slowdown,
		 h->temp_shutdown, h->power_max_mw, h->power_last_mw, h->power_limit_mw,
		 h->util_gpu, h->util_mem, h->ecc_corrected, h->ecc_uncorrected, h->retired_sbe,
		 h->retired_dbe, h->pcie_replays, h->flags, h->nvlink_errors, h->xid_count,
		 h->xid_last);
	return 0;
}

/* GET /nodes/{node}/gpus on ClickHouse: the same windows as SQLite, every number (known and
 * unknown) back as written, by node id or hostname, a duplicate once, the same limit. */
static void test_gpu_health_same_answers(void **state)
{
	struct ctx *c = *state;
	const int64_t r0 = (int64_t)T0 + 41000000000LL;
	static struct text a, b;
	struct text *tx[2] = { &a, &b };
	struct store *st[2] = { c->sq, c->ch };

	REQUIRE_CH();
	struct job_spec n1, n2;
	two_node_job(&n1, &n2);
	struct job_spec n1_later = n1;
	n1_later.base.sequence = 2;
	n1_later.base.window_start_ns = T0 + 30000000000ULL;
	put_job_edited(c, &n1, r0, gpu_health_edit);
	put_job_edited(c, &n2, r0 + 1, gpu_health_edit);
	put_job_edited(c, &n1, r0 + 2, gpu_health_edit); /* a duplicate */
	put_job_edited(c, &n1_later, r0 + 3, gpu_health_edit);
	static const struct {
		const char *node;
		uint32_t limit;
		unsigned rows;
	} cases[] = {
		{ NULL, 100, 6 }, { "gpu-1", 100, 4 }, { "02020202020202020202020202020202", 100, 2 },
		{ NULL, 3, 3 }, { "nobody", 10, 0 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		for (int i = 0; i < 2; i++) {
			memset(tx[i], 0, sizeof(*tx[i]));
			int rc = store_gpu_health_list(st[i], cases[k].node, 0, INT64_MAX / 1000000,
						       cases[k].limit, gpu_health_text, tx[i]);
			if (rc)
				fail_msg("store_gpu_health_list %d: %s", i, sysom_strerror(rc));
		}
		assert_string_equal(a.buf, b.buf);
		unsigned n = 0;
		for (size_t j = 0; j < a.len; j++)
			n += a.buf[j] == '\n';
		assert_int_equal(n, cases[k].rows);
	}
	/* The unknown numbers came back as unknown, the known ones exactly. */
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_gpu_health_list(c->ch, "gpu-2", 0, INT64_MAX / 1000000, 10,
					       gpu_health_text, &b), 0);
	assert_non_null(strstr(b.buf, " 1 GPU-02-0000 00000000:3B:00.0 NVIDIA H200 1 0 "
				      "18446744073709551615 18446744073709551615 4294967295 "));
	assert_non_null(strstr(b.buf, " 0 GPU-02-0000 00000000:3B:00.0 NVIDIA H200 10 3 40 8 1200 "
				      "1410 1980 2619 3201 88 86 87 92 700000 650123 700000 99 41 5 1 "
				      "2 0 7 0 1099511627776 2 79\n"));
	/* A window range that ends before the first window: nothing. */
	memset(&b, 0, sizeof(b));
	assert_int_equal(store_gpu_health_list(c->ch, NULL, 0, (int64_t)(T0 / 1000000) - 1, 10,
					       gpu_health_text, &b), 0);
	assert_int_equal(b.len, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_day_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fleet_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_jobs_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_upgrade_from_6, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_os_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_signals_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_health_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lists_summaries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_and_conflict, setup, teardown),
		cmocka_unit_test_setup_teardown(test_uncommitted_rows_invisible, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_insert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_insert_fails_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_statement, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_supported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incidents_same_as_sqlite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incident_ids_and_versions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_settings_and_baselines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollup_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stacks_collected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stacks_upgrade_from_15, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_minutes_upgrade_from_16, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nccl_rollup_same_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
		/* Last: it stops the server. */
		cmocka_unit_test_setup_teardown(test_timeout_stops_query, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_and_down, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
