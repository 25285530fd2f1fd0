/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading training jobs from ClickHouse: jobs, a job's ranks and communicators, and collective
 * instances with every rank's call (tables: clickhouse_schema_collectives.c). Batches append
 * records; the merge rules here are SQLite's upserts (sqlite_write_gpu.c): a job rank takes the
 * attributes of its newest window; a communicator field keeps the last known value in arrival
 * order (received_ns, then the record's place in its batch).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/* The newest window of a job rank (ties: the later arrival, as SQLite's >=). */
#define JR_ORDER "(window_end_ns, received_ns)"
/* Arrival order of communicator records. */
#define CM_ORDER "(received_ns, idx)"
/* A communicator field: the last value satisfying `cond` in arrival order, else the first. */
#define CM_MERGE(col, cond)                                                                 \
	"if(countIf(" cond ") > 0, argMaxIf(" col ", " CM_ORDER ", " cond "), argMin(" col ", " \
	CM_ORDER "))"

/* Job processes at most listed by value in a query (else by subquery). */
#define LITERAL_MAX 2048
/* Seq ranges of the span lookup at most put in a query (else filters by comm/op only). */
#define RANGES_MAX 1024
/* Instances (and communicator keys) per query of the call lookup. */
#define CHUNK 1024

typedef int (*row_fn)(void *ctx, char **f);

/* Runs `q` (FORMAT TabSeparated appended) and calls `row` per row of `nfields` fields. */
static int run(struct ch_store *s, struct byte_buf *q, unsigned nfields, row_fn row, void *ctx)
{
	struct byte_buf ans = { 0 };
	struct ch_tsv t;
	char *f[CH_MAX_FIELDS];
	int rc;

	byte_buf_printf(q, " FORMAT TabSeparated");
	byte_buf_append(q, "", 1);
	if ((rc = byte_buf_error(q)) || (rc = ch__exec(s, (const char *)q->data, NULL, 0, &ans)))
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	while ((rc = ch_tsv_row(&t, f, nfields)) == 1)
		if ((rc = row(ctx, f)))
			goto cleanup;
	if (rc > 0)
		rc = 0;
cleanup:
	byte_buf_free(&ans);
	return rc;
}

static int i32_field(const char *f, int32_t *out)
{
	int64_t v;

	if (ch_tsv_i64(f, &v) || v < INT32_MIN || v > INT32_MAX)
		return -EPROTO;
	*out = (int32_t)v;
	return 0;
}

static int node_field(const char *f, char out[2 * SYSOM_NODE_ID_SIZE + 1])
{
	if (!f || strlen(f) != 2 * SYSOM_NODE_ID_SIZE)
		return -EPROTO;
	memcpy(out, f, 2 * SYSOM_NODE_ID_SIZE + 1);
	return 0;
}

/* The merged job rank of each process that ever named job `job` (NULL: every process). */
static void job_ranks_merged(struct byte_buf *q, const char *job)
{
	byte_buf_printf(q, "(SELECT process, argMax(job, " JR_ORDER ") AS j,"
			   " argMax(rank, " JR_ORDER ") AS r, argMax(world_size, " JR_ORDER ") AS ws,"
			   " argMax(local_rank, " JR_ORDER ") AS lr,"
			   " argMax(local_world_size, " JR_ORDER ") AS lws,"
			   " argMax(group_rank, " JR_ORDER ") AS gr, argMax(source, " JR_ORDER ") AS src,"
			   " argMax(job_id_source, " JR_ORDER ") AS jis,"
			   " argMax(master, " JR_ORDER ") AS ms, argMax(groups, " JR_ORDER ") AS gs,"
			   " argMax(role, " JR_ORDER ") AS role, argMax(rank_pid, " JR_ORDER ") AS rpid,"
			   " if(countIf(gpu_device >= 0) > 0, argMaxIf(gpu_device, " JR_ORDER ","
			   " gpu_device >= 0), -1) AS gdev,"
			   " any(node_id) AS node, any(tgid) AS pid, any(start_time_ns) AS st,"
			   " any(generation) AS gen, min(window_start_ns) AS f, max(window_end_ns) AS l"
			   " FROM job_ranks WHERE ");
	if (job) {
		/* The batches of the nodes that ran the job (its processes' rows in other jobs
		 * are on the same nodes). */
		ch__committed_job_sql(q, job, CH_ALL_TIME);
		byte_buf_printf(q, " AND process IN (SELECT process FROM job_ranks WHERE job = ");
		ch__quote(q, job);
		byte_buf_printf(q, " AND ");
		ch__committed_job_sql(q, job, CH_ALL_TIME);
		byte_buf_printf(q, ")");
	} else {
		byte_buf_printf(q, CH_COMMITTED);
	}
	byte_buf_printf(q, " GROUP BY process");
	if (job) {
		byte_buf_printf(q, " HAVING j = ");
		ch__quote(q, job);
	}
	byte_buf_printf(q, ")");
}

void ch__job_ranks_sql(struct byte_buf *q, const char *job)
{
	job_ranks_merged(q, job);
}

void ch__job_processes_sql(struct byte_buf *q, const char *job, bool has_rank, int32_t rank)
{
	byte_buf_printf(q, "(SELECT process FROM ");
	job_ranks_merged(q, job);
	if (has_rank)
		byte_buf_printf(q, " WHERE r = %" PRId32, rank);
	byte_buf_printf(q, ")");
}

/* Nodes' current hostnames (the latest batch's), as the nodes listing names them. */
struct host {
	char node[2 * SYSOM_NODE_ID_SIZE + 1];
	char *name;
};

struct hosts {
	struct host *v;
	size_t n, cap;
};

static int host_cmp(const void *a, const void *b)
{
	return strcmp(((const struct host *)a)->node, ((const struct host *)b)->node);
}

static int host_row(void *ctx, char **f)
{
	struct hosts *h = ctx;

	if (h->n == h->cap || !f[1] || node_field(f[0], h->v[h->n].node))
		return -EPROTO;
	if (!(h->v[h->n].name = strdup(f[1])))
		return -ENOMEM;
	h->n++;
	return 0;
}

static void hosts_free(struct hosts *h)
{
	for (size_t i = 0; i < h->n; i++)
		free(h->v[i].name);
	free(h->v);
	*h = (struct hosts){ 0 };
}

static int node_ptr_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reads the hostnames of `n` nodes (node ids, duplicates allowed: a job's ranks' nodes). */
static int hosts_read(struct ch_store *s, const char *const *nodes, size_t n, struct hosts *h)
{
	struct byte_buf q = { 0 };
	const char **distinct = NULL;
	size_t nd = 0;
	int rc = 0;

	*h = (struct hosts){ .v = calloc(n + 1, sizeof(*h->v)), .cap = n };
	if (!h->v || !(distinct = calloc(n + 1, sizeof(*distinct)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if (!n)
		goto cleanup;
	/* Each node once (8 ranks a node: an eighth of the statement). */
	memcpy(distinct, nodes, n * sizeof(*nodes));
	qsort(distinct, n, sizeof(*distinct), node_ptr_cmp);
	for (size_t i = 0; i < n; i++)
		if (!nd || strcmp(distinct[nd - 1], distinct[i]))
			distinct[nd++] = distinct[i];
	byte_buf_printf(&q, "SELECT node_id, argMax(hostname, received_ns) FROM batches WHERE ");
	for (int pass = 0; pass < 2; pass++) { /* the committed batches of these nodes, and them */
		if (pass == 0)
			ch__committed_nodes_begin(&q);
		else
			byte_buf_printf(&q, " AND node_id IN ");
		for (size_t i = 0; i < nd; i++) {
			byte_buf_printf(&q, "%s", i ? "," : "(");
			ch__quote(&q, distinct[i]);
		}
		byte_buf_printf(&q, ")");
		if (pass == 0)
			ch__committed_nodes_end(&q, CH_ALL_TIME);
	}
	byte_buf_printf(&q, " GROUP BY node_id");
	rc = run(s, &q, 2, host_row, h);
	if (!rc && h->n)
		qsort(h->v, h->n, sizeof(*h->v), host_cmp);
cleanup:
	free(distinct);
	byte_buf_free(&q);
	return rc;
}

static const char *host_name(const struct hosts *h, const char *node)
{
	struct host key, *hit;

	snprintf(key.node, sizeof(key.node), "%s", node);
	hit = h->n ? bsearch(&key, h->v, h->n, sizeof(*h->v), host_cmp) : NULL;
	return hit ? hit->name : "";
}

/* ---- jobs ----------------------------------------------------------------------------------- */

struct job_visit {
	store_job_fn fn;
	void *arg;
};

static int job_row(void *ctx, char **f)
{
	const struct job_visit *v = ctx;
	struct store_job j = { .job = f[0] };

	if (!f[0] || i32_field(f[1], &j.world_size) || ch_tsv_u32(f[2], &j.ranks) ||
	    ch_tsv_u32(f[3], &j.processes) || ch_tsv_u32(f[4], &j.nodes) ||
	    ch_tsv_i64(f[5], &j.first_seen_ns) || ch_tsv_i64(f[6], &j.last_seen_ns))
		return -EPROTO;
	return v->fn(v->arg, &j);
}

/*
 * Appends each process's merged job rank from its summary (clickhouse_schema_summaries.c: kept
 * from the committed batch rows, a few rows per process and day) instead of every job_ranks
 * row of every batch: (process, job, rk, wsz, nd, fs, ls).
 */
static void job_summaries_sql(struct byte_buf *q)
{
	byte_buf_printf(q, "(SELECT process, argMaxMerge(j) AS job, argMaxMerge(r) AS rk,"
			   " argMaxMerge(ws) AS wsz, anyMerge(node) AS nd, minMerge(f) AS fs,"
			   " maxMerge(l) AS ls FROM job_processes GROUP BY process)");
}

int ch__jobs_list(struct store *base, uint32_t limit, store_job_fn fn, void *arg)
{
	struct job_visit v = { fn, arg };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT job, max(wsz), uniqExactIf(rk, rk >= 0), count(), uniqExact(nd),"
			    " min(fs), max(ls) AS last FROM ");
	job_summaries_sql(&q);
	byte_buf_printf(&q, " WHERE job != '' GROUP BY job ORDER BY last DESC, job LIMIT %" PRIu32,
			limit);
	rc = run(ch__store(base), &q, 7, job_row, &v);
	byte_buf_free(&q);
	return rc;
}

int ch__jobs_list_identity(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_job_fn fn, void *arg)
{
	struct job_visit v = { fn, arg };
	struct byte_buf q = { 0 };
	int rc;

	/* As SQLite: the jobs of the processes whose identity matches, counted over all their
	 * processes (each process's job rank from the summaries, as the plain list). */
	byte_buf_printf(&q, "SELECT job, max(wsz), uniqExactIf(rk, rk >= 0), count(), uniqExact(nd),"
			    " min(fs), max(ls) AS last FROM ");
	job_summaries_sql(&q);
	byte_buf_printf(&q, " WHERE job != '' AND job IN (SELECT job FROM ");
	job_summaries_sql(&q);
	byte_buf_printf(&q, " WHERE process IN ");
	ch__identity_processes_sql(&q, f, CH_ALL_TIME);
	byte_buf_printf(&q, ") GROUP BY job ORDER BY last DESC, job LIMIT %" PRIu32, limit);
	rc = run(ch__store(base), &q, 7, job_row, &v);
	byte_buf_free(&q);
	return rc;
}

/* ---- ranks ---------------------------------------------------------------------------------- */

/* Rows read whole first (then hostnames and comms): the callback sees them in order. */
struct rank_ent {
	struct store_job_rank r;
	uint64_t process;
	char *strings; /* job_id_source, master, groups, then the identity's: one allocation */
};

struct ranks {
	struct rank_ent *v;
	size_t n, cap;
};

/* job_id_source, master, groups, then the identity's strings ("" when unknown). */
#define RANK_STRINGS 11

static const char *rank_string(const struct rank_ent *e, char **f, unsigned i)
{
	static const unsigned identity_field[] = { 1, 2, 3, 4, 5, 6, 8, 9 };

	if (i < 3)
		return f[11 + i];
	return e->r.identity.known ? f[18 + identity_field[i - 3]] : "";
}

static int rank_row(void *ctx, char **f)
{
	struct ranks *rs = ctx;
	struct rank_ent *e;
	uint64_t src, role;
	size_t len = 0;

	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? 2 * rs->cap : 64;
		struct rank_ent *v = realloc(rs->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rs->v = v;
		rs->cap = cap;
	}
	e = &rs->v[rs->n];
	memset(e, 0, sizeof(*e));
	if (ch_tsv_u64(f[0], &e->process) || i32_field(f[1], &e->r.rank) ||
	    i32_field(f[2], &e->r.world_size) || i32_field(f[3], &e->r.local_rank) ||
	    i32_field(f[4], &e->r.local_world_size) || i32_field(f[5], &e->r.group_rank) ||
	    ch_tsv_u64(f[6], &src) || src > UINT8_MAX || node_field(f[7], e->r.node_id) ||
	    ch_tsv_u32(f[8], &e->r.pid) || ch_tsv_u32(f[9], &e->r.generation) ||
	    ch_tsv_u64(f[10], &e->r.start_time_ns) || !f[11] || !f[12] || !f[13] ||
	    ch_tsv_i64(f[14], &e->r.first_seen_ns) || ch_tsv_i64(f[15], &e->r.last_seen_ns) ||
	    ch_tsv_u64(f[16], &role) || role > SYSOM_JOB_ROLE_MAX || ch_tsv_u32(f[17], &e->r.rank_pid))
		return -EPROTO;
	e->r.source = (uint8_t)src;
	e->r.role = (uint8_t)role;
	if (ch__identity_read(f + 18, &e->r.identity) ||
	    i32_field(f[18 + CH_IDENTITY_FIELDS], &e->r.gpu_device))
		return -EPROTO;
	if (e->r.gpu_device < -1 || e->r.gpu_device >= SYSOM_GPU_MAX_DEVICES)
		e->r.gpu_device = -1;
	/* The strings outlive the answer: copied into one allocation, pointed at later. */
	for (unsigned i = 0; i < RANK_STRINGS; i++)
		len += strlen(rank_string(e, f, i)) + 1;
	if (!(e->strings = malloc(len)))
		return -ENOMEM;
	len = 0;
	for (unsigned i = 0; i < RANK_STRINGS; i++) {
		size_t l = strlen(rank_string(e, f, i)) + 1;

		memcpy(e->strings + len, rank_string(e, f, i), l);
		len += l;
	}
	rs->n++;
	return 0;
}

/* Points the strings of a rank at their copies (in rank_string's order). */
static void rank_strings_set(struct rank_ent *e)
{
	const char **to[RANK_STRINGS] = {
		&e->r.job_id_source, &e->r.master, &e->r.groups, &e->r.identity.runtime,
		&e->r.identity.container_id, &e->r.identity.pod_uid, &e->r.identity.pod_namespace,
		&e->r.identity.pod_name, &e->r.identity.container_name, &e->r.identity.slurm_step,
		&e->r.identity.unit,
	};
	const char *p = e->strings;

	for (unsigned i = 0; i < RANK_STRINGS; i++) {
		if (i < 3 || e->r.identity.known)
			*to[i] = p;
		p += strlen(p) + 1;
	}
}

struct comm_name {
	uint64_t process;
	char *comm;
};

struct comm_names {
	struct comm_name *v;
	size_t n, cap;
};

static int comm_name_cmp(const void *a, const void *b)
{
	const struct comm_name *x = a, *y = b;

	return (x->process > y->process) - (x->process < y->process);
}

static int comm_name_row(void *ctx, char **f)
{
	struct comm_names *c = ctx;

	if (c->n == c->cap || ch_tsv_u64(f[0], &c->v[c->n].process) || !f[1])
		return -EPROTO;
	if (!(c->v[c->n].comm = strdup(f[1])))
		return -ENOMEM;
	c->n++;
	return 0;
}

int ch__job_ranks_list(struct store *base, const char *job, uint32_t limit, store_job_rank_fn fn,
		       void *arg)
{
	struct ch_store *s = ch__store(base);
	struct ranks rs = { 0 };
	struct comm_names cn = { 0 };
	struct hosts h = { 0 };
	const char **nodes = NULL;
	struct byte_buf q = { 0 }, job_nodes = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT process, r, ws, lr, lws, gr, src, node, pid, gen, st, jis, ms,"
			    " gs, f, l, role, rpid, " CH_IDENTITY_COLUMNS ", gdev FROM ");
	job_ranks_merged(&q, job);
	byte_buf_printf(&q, " ANY LEFT JOIN ");
	ch__job_node_ids_sql(&job_nodes, job);
	byte_buf_append(&job_nodes, "", 1);
	if ((rc = byte_buf_error(&job_nodes)))
		goto cleanup;
	ch__identities_merged_sql(&q, job, (const char *)job_nodes.data, CH_ALL_TIME);
	byte_buf_printf(&q, " USING process ORDER BY r < 0, r, node, pid, st LIMIT %" PRIu32, limit);
	if ((rc = run(s, &q, 19 + CH_IDENTITY_FIELDS, rank_row, &rs)) || !rs.n)
		goto cleanup;
	/* The processes' current comm (the latest batch's), as the process listing has it. */
	cn.v = calloc(rs.n, sizeof(*cn.v));
	nodes = calloc(rs.n, sizeof(*nodes));
	if (!cn.v || !nodes) {
		rc = -ENOMEM;
		goto cleanup;
	}
	cn.cap = rs.n;
	q.len = 0;
	byte_buf_printf(&q, "SELECT process, argMax(comm, received_ns) FROM processes WHERE ");
	ch__committed_job_sql(&q, job, CH_ALL_TIME);
	byte_buf_printf(&q, " AND node_id IN %s AND process IN (", (const char *)job_nodes.data);
	for (size_t i = 0; i < rs.n; i++) {
		byte_buf_printf(&q, "%s%" PRIu64, i ? "," : "", rs.v[i].process);
		nodes[i] = rs.v[i].r.node_id;
	}
	byte_buf_printf(&q, ") GROUP BY process");
	if ((rc = run(s, &q, 2, comm_name_row, &cn)) || (rc = hosts_read(s, nodes, rs.n, &h)))
		goto cleanup;
	qsort(cn.v, cn.n, sizeof(*cn.v), comm_name_cmp);
	for (size_t i = 0; i < rs.n && !rc; i++) {
		struct rank_ent *e = &rs.v[i];
		struct comm_name key = { .process = e->process }, *hit;

		hit = bsearch(&key, cn.v, cn.n, sizeof(*cn.v), comm_name_cmp);
		e->r.comm = hit ? hit->comm : "";
		rank_strings_set(e);
		e->r.hostname = host_name(&h, e->r.node_id);
		rc = fn(arg, &e->r);
	}
cleanup:
	for (size_t i = 0; i < rs.n; i++)
		free(rs.v[i].strings);
	free(rs.v);
	for (size_t i = 0; i < cn.n; i++)
		free(cn.v[i].comm);
	free(cn.v);
	free(nodes);
	hosts_free(&h);
	byte_buf_free(&q);
	byte_buf_free(&job_nodes);
	return rc;
}

/* ---- the job's processes (rank and node), for communicators and collectives ----------------- */

struct jp {
	uint64_t process;
	int32_t rank;
	char node[2 * SYSOM_NODE_ID_SIZE + 1];
};

struct jps {
	struct jp *v;
	size_t n, cap;
};

static int jp_cmp(const void *a, const void *b)
{
	const struct jp *x = a, *y = b;

	return (x->process > y->process) - (x->process < y->process);
}

static int jp_row(void *ctx, char **f)
{
	struct jps *j = ctx;

	if (j->n == j->cap) {
		size_t cap = j->cap ? 2 * j->cap : 64;
		struct jp *v = realloc(j->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		j->v = v;
		j->cap = cap;
	}
	if (ch_tsv_u64(f[0], &j->v[j->n].process) || i32_field(f[1], &j->v[j->n].rank) ||
	    node_field(f[2], j->v[j->n].node))
		return -EPROTO;
	j->n++;
	return 0;
}

static int jps_read(struct ch_store *s, const char *job, struct jps *j)
{
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT process, r, node FROM ");
	job_ranks_merged(&q, job);
	rc = run(s, &q, 3, jp_row, j);
	byte_buf_free(&q);
	if (!rc && j->n)
		qsort(j->v, j->n, sizeof(*j->v), jp_cmp);
	return rc;
}

static const struct jp *jp_find(const struct jps *j, uint64_t process)
{
	struct jp key = { .process = process };

	return j->n ? bsearch(&key, j->v, j->n, sizeof(*j->v), jp_cmp) : NULL;
}

/* " process IN (...)": the job's processes, by value when few. */
static void jp_in(struct byte_buf *q, const struct jps *j, const char *job)
{
	byte_buf_printf(q, " process IN ");
	if (j->n > LITERAL_MAX) {
		ch__job_processes_sql(q, job, false, 0);
		return;
	}
	byte_buf_printf(q, "(");
	for (size_t i = 0; i < j->n; i++)
		byte_buf_printf(q, "%s%" PRIu64, i ? "," : "", j->v[i].process);
	byte_buf_printf(q, ")");
}

static int jp_hosts(struct ch_store *s, const struct jps *j, struct hosts *h)
{
	const char **nodes = calloc(j->n + 1, sizeof(*nodes));
	size_t n = 0;
	int rc;

	if (!nodes)
		return -ENOMEM;
	for (size_t i = 0; i < j->n; i++) {
		bool seen = false;

		for (size_t k = 0; k < n && !seen; k++)
			seen = !strcmp(nodes[k], j->v[i].node);
		if (!seen)
			nodes[n++] = j->v[i].node;
	}
	rc = hosts_read(s, nodes, n, h);
	free(nodes);
	return rc;
}

/* ---- communicators -------------------------------------------------------------------------- */

struct comm_visit {
	store_job_communicator_fn fn;
	void *arg;
	const struct jps *jp;
	const struct hosts *h;
};

static int communicator_row(void *ctx, char **f)
{
	const struct comm_visit *v = ctx;
	struct store_job_communicator m = { 0 };
	uint64_t process, ks, destroyed;
	const struct jp *p;

	if (ch_tsv_u64(f[0], &process) || ch_tsv_u64(f[1], &m.key) ||
	    ch_tsv_u64(f[2], &m.parent_key) || ch_tsv_u64(f[3], &m.comm_hash) ||
	    i32_field(f[4], &m.rank) || i32_field(f[5], &m.nranks) ||
	    i32_field(f[6], &m.split_color) || i32_field(f[7], &m.split_key) ||
	    ch_tsv_u32(f[8], &m.split_ordinal) || ch_tsv_u64(f[9], &ks) || ks > UINT8_MAX ||
	    ch_tsv_u64(f[10], &destroyed) || ch_tsv_i64(f[11], &m.created_ns) ||
	    node_field(f[12], m.node_id) || ch_tsv_u32(f[13], &m.pid) ||
	    ch_tsv_i64(f[14], &m.first_seen_ns) || ch_tsv_i64(f[15], &m.last_seen_ns))
		return -EPROTO;
	m.key_source = (uint8_t)ks;
	m.destroyed = destroyed != 0;
	p = jp_find(v->jp, process);
	m.job_rank = p ? p->rank : -1;
	m.hostname = host_name(v->h, m.node_id);
	return v->fn(v->arg, &m);
}

/* The merged communicators of (process, key) rows, as a FROM subquery; `where` filters. */
#define COMMS_MERGED_SELECT                                                                   \
	"SELECT process, key, " CM_MERGE("parent_key", "parent_key != 0") " AS pk, "          \
	CM_MERGE("comm_hash", "comm_hash != 0") " AS ch, " CM_MERGE("rank", "rank >= 0")       \
	" AS rk, " CM_MERGE("nranks", "nranks >= 1") " AS nr, "                               \
	CM_MERGE("split_color", "split_color != -1") " AS sc, "                               \
	CM_MERGE("split_key", "split_key != -1") " AS sk, "                                   \
	CM_MERGE("split_ordinal", "split_ordinal != 0") " AS so, argMax(key_source, " CM_ORDER \
	") AS ks, max(destroyed) AS d, " CM_MERGE("created_ns", "created_ns != 0") " AS cr,"  \
	" any(node_id) AS node, any(tgid) AS pid, min(window_start_ns) AS f,"                 \
	" max(window_end_ns) AS l FROM communicators WHERE " CH_COMMITTED

int ch__job_communicators_list(struct store *base, const char *job, uint32_t limit,
			       store_job_communicator_fn fn, void *arg)
{
	struct ch_store *s = ch__store(base);
	struct jps j = { 0 };
	struct hosts h = { 0 };
	struct comm_visit v = { fn, arg, &j, &h };
	struct byte_buf q = { 0 };
	int rc;

	if ((rc = jps_read(s, job, &j)) || !j.n || (rc = jp_hosts(s, &j, &h)))
		goto cleanup;
	byte_buf_printf(&q, "SELECT process, key, pk, ch, rk, nr, sc, sk, so, ks, d, cr, node, pid,"
			    " f, l FROM (" COMMS_MERGED_SELECT " AND");
	jp_in(&q, &j, job);
	/* Keys in SQLite's order: it stores the u64 bits as a signed integer. */
	byte_buf_printf(&q, " GROUP BY process, key) ORDER BY toInt64(key), rk < 0, rk, node, pid"
			    " LIMIT %" PRIu32, limit);
	rc = run(s, &q, 16, communicator_row, &v);
cleanup:
	free(j.v);
	hosts_free(&h);
	byte_buf_free(&q);
	return rc;
}

/* ---- collective instances ------------------------------------------------------------------- */

struct range {
	uint64_t key;
	uint8_t op;
	uint64_t lo, hi;
};

struct inst {
	uint64_t key, seq;
	uint8_t op;
	int64_t first;     /* earliest entry in [from, to] (the order) */
	int64_t first_all; /* earliest entry of all its calls */
	int32_t nranks;
	uint32_t order;
};

struct call {
	const struct inst *inst;
	uint64_t process;
	int32_t rank; /* the call's, else the process's in the communicator, -1 */
	struct store_collective_call c;
	int64_t received_ns;
	uint32_t idx;
};

struct comm_rank {
	uint64_t process, key;
	int32_t rank, nranks;
};

struct coll {
	struct ch_store *s;
	const struct store_collective_filter *f;
	struct jps jp;
	struct hosts h;
	struct range *ranges;
	size_t nranges, cap_ranges;
	struct inst *insts; /* query order, then sorted by identity */
	size_t ninsts, cap_insts;
	struct call *calls;
	size_t ncalls, cap_calls;
	struct comm_rank *comms;
	size_t ncomms, cap_comms;
};

/* Grows *v (of *cap elements of `size`) to hold one more; 0 or -ENOMEM. */
static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? 2 * *cap : 64;
	if (!(nv = realloc(*v, ncap * size)))
		return -ENOMEM;
	*v = nv;
	*cap = ncap;
	return 0;
}

static int u8_field(const char *f, uint8_t *out)
{
	uint64_t v;

	if (ch_tsv_u64(f, &v) || v > UINT8_MAX)
		return -EPROTO;
	*out = (uint8_t)v;
	return 0;
}

static int range_row(void *ctx, char **f)
{
	struct coll *c = ctx;
	struct range *r;

	if (grow((void **)&c->ranges, &c->cap_ranges, c->nranges, sizeof(*c->ranges)))
		return -ENOMEM;
	r = &c->ranges[c->nranges];
	if (ch_tsv_u64(f[0], &r->key) || u8_field(f[1], &r->op) || ch_tsv_u64(f[2], &r->lo) ||
	    ch_tsv_u64(f[3], &r->hi))
		return -EPROTO;
	c->nranges++;
	return 0;
}

static int inst_row(void *ctx, char **f)
{
	struct coll *c = ctx;
	struct inst *i;

	if (grow((void **)&c->insts, &c->cap_insts, c->ninsts, sizeof(*c->insts)))
		return -ENOMEM;
	i = &c->insts[c->ninsts];
	memset(i, 0, sizeof(*i));
	if (ch_tsv_u64(f[0], &i->key) || u8_field(f[1], &i->op) || ch_tsv_u64(f[2], &i->seq) ||
	    ch_tsv_i64(f[3], &i->first))
		return -EPROTO;
	i->first_all = i->first;
	i->nranks = -1;
	c->ninsts++;
	return 0;
}

static int inst_cmp(const void *a, const void *b)
{
	const struct inst *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->op != y->op)
		return x->op < y->op ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

static int comm_rank_cmp(const void *a, const void *b)
{
	const struct comm_rank *x = a, *y = b;

	if (x->process != y->process)
		return x->process < y->process ? -1 : 1;
	return (x->key > y->key) - (x->key < y->key);
}

static int call_row(void *ctx, char **f)
{
	struct coll *c = ctx;
	struct inst key = { 0 };
	struct call *k;
	const struct jp *p;

	if (grow((void **)&c->calls, &c->cap_calls, c->ncalls, sizeof(*c->calls)))
		return -ENOMEM;
	k = &c->calls[c->ncalls];
	memset(k, 0, sizeof(*k));
	if (ch_tsv_u64(f[0], &key.key) || u8_field(f[1], &key.op) || ch_tsv_u64(f[2], &key.seq) ||
	    ch_tsv_u64(f[3], &k->process) || node_field(f[4], k->c.node_id) ||
	    ch_tsv_u32(f[5], &k->c.pid) || ch_tsv_u32(f[6], &k->c.tid) ||
	    i32_field(f[7], &k->rank) || ch_tsv_i64(f[8], &k->c.entry_ns) ||
	    ch_tsv_i64(f[9], &k->c.exit_ns) || ch_tsv_u64(f[10], &k->c.count) ||
	    ch_tsv_u64(f[11], &k->c.bytes) || i32_field(f[12], &k->c.peer) ||
	    i32_field(f[13], &k->c.result) || ch_tsv_i64(f[14], &k->received_ns) ||
	    ch_tsv_u32(f[15], &k->idx))
		return -EPROTO;
	k->inst = bsearch(&key, c->insts, c->ninsts, sizeof(*c->insts), inst_cmp);
	p = jp_find(&c->jp, k->process);
	if (!k->inst || !p)
		return 0; /* not asked for (the IN lists are supersets) */
	k->c.job_rank = p->rank;
	c->ncalls++;
	return 0;
}

static int comm_rank_row(void *ctx, char **f)
{
	struct coll *c = ctx;
	struct comm_rank *m;

	if (grow((void **)&c->comms, &c->cap_comms, c->ncomms, sizeof(*c->comms)))
		return -ENOMEM;
	m = &c->comms[c->ncomms];
	if (ch_tsv_u64(f[0], &m->process) || ch_tsv_u64(f[1], &m->key) ||
	    i32_field(f[2], &m->rank) || i32_field(f[3], &m->nranks))
		return -EPROTO;
	c->ncomms++;
	return 0;
}

/* Instance order, then rank (unknown last), entry, arrival (SQLite: the row id). */
static int call_cmp(const void *a, const void *b)
{
	const struct call *x = a, *y = b;

	if (x->inst->order != y->inst->order)
		return x->inst->order < y->inst->order ? -1 : 1;
	if ((x->rank < 0) != (y->rank < 0))
		return x->rank < 0 ? 1 : -1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->c.entry_ns != y->c.entry_ns)
		return x->c.entry_ns < y->c.entry_ns ? -1 : 1;
	if (x->received_ns != y->received_ns)
		return x->received_ns < y->received_ns ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

static int64_t ns_to_ms(int64_t ns)
{
	return ns / 1000000 - (ns % 1000000 < 0);
}

/*
 * CH_COMMITTED for the calls and spans of the instances of [from, to]: the batches of the job's
 * nodes received from the day before `from` on. The batch holding a call has a window that
 * holds its exit, and a collective's every call exits after its last rank entered, which for
 * an instance with a call in the range is at `from` or later: so even a rank's call entered
 * long before the range is in a batch received since (one a day behind only with a call left
 * unfinished for a day, which NCCL's and PyTorch's timeouts end much sooner).
 */
static void range_committed(struct byte_buf *q, const struct coll *c)
{
	ch__committed_job_sql(q, c->f->job, ns_to_ms(c->f->from_ns));
}

/* The filters every instance query shares (communicator, op). */
static void coll_filters(struct byte_buf *q, const struct store_collective_filter *f)
{
	byte_buf_printf(q, " AND comm_key != 0 AND op BETWEEN %d AND %d", SYSOM_NCCL_ALL_REDUCE,
			SYSOM_NCCL_RECV);
	if (f->has_comm)
		byte_buf_printf(q, " AND comm_key = %" PRIu64, f->comm);
	if (f->op)
		byte_buf_printf(q, " AND op = %u", (unsigned)f->op);
}

/* Picks the instances: seq ranges from the spans, then the calls in [from, to] inside them. */
static int instances_read(struct coll *c, uint32_t max_instances)
{
	const struct store_collective_filter *f = c->f;
	const char *dir = f->latest ? " DESC" : "";
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT comm_key, op, min(min_seq), max(max_seq) FROM nccl_spans"
			    " WHERE max_entry_ns >= %" PRId64 " AND min_entry_ns <= %" PRId64
			    " AND ", f->from_ns, f->to_ns);
	range_committed(&q, c);
	byte_buf_printf(&q, " AND");
	jp_in(&q, &c->jp, f->job);
	coll_filters(&q, f);
	byte_buf_printf(&q, " GROUP BY comm_key, op");
	if ((rc = run(c->s, &q, 4, range_row, c)) || !c->nranges)
		goto cleanup;
	q.len = 0;
	byte_buf_printf(&q, "SELECT comm_key, op, seq, min(entry_ns) AS first FROM nccl_calls"
			    " WHERE entry_ns BETWEEN %" PRId64 " AND %" PRId64, f->from_ns, f->to_ns);
	ch__own_days_sql(&q, ns_to_ms(f->from_ns), ns_to_ms(f->to_ns));
	byte_buf_printf(&q, " AND ");
	range_committed(&q, c);
	byte_buf_printf(&q, " AND");
	jp_in(&q, &c->jp, f->job);
	coll_filters(&q, f);
	if (c->nranges <= RANGES_MAX) {
		byte_buf_printf(&q, " AND (");
		for (size_t i = 0; i < c->nranges; i++)
			byte_buf_printf(&q, "%s(comm_key = %" PRIu64 " AND op = %u AND seq BETWEEN %"
					PRIu64 " AND %" PRIu64 ")", i ? " OR " : "",
					c->ranges[i].key, (unsigned)c->ranges[i].op, c->ranges[i].lo,
					c->ranges[i].hi);
		byte_buf_printf(&q, ")");
	}
	/* Ties in SQLite's order: keys and seqs are u64 bits stored as signed integers. */
	byte_buf_printf(&q, " GROUP BY comm_key, op, seq ORDER BY first%s, toInt64(comm_key)%s,"
			    " op%s, toInt64(seq)%s LIMIT %" PRIu32, dir, dir, dir, dir, max_instances);
	if ((rc = run(c->s, &q, 4, inst_row, c)))
		goto cleanup;
	/* Visited ascending: the latest ones were read newest first. */
	for (size_t i = 0; i < c->ninsts; i++)
		c->insts[i].order = (uint32_t)(f->latest ? c->ninsts - 1 - i : i);
	if (c->ninsts)
		qsort(c->insts, c->ninsts, sizeof(*c->insts), inst_cmp);
cleanup:
	byte_buf_free(&q);
	return rc;
}

/* Seq gaps at most read through when one range covers several chosen instances. */
#define SEQ_GAP_MAX 16

/*
 * Every call of the job's processes in the instances (sorted by key, op, seq), read as seq
 * ranges of the primary key: the chosen instances of a (communicator, op) are mostly one run
 * of consecutive sequence numbers, so the 20,000 instances of a stragglers answer are a few
 * range reads in one query rather than 20 queries of 1,024 (key, op, seq) tuples each.
 * Calls of unchosen instances inside a range (gaps up to SEQ_GAP_MAX) are dropped by call_row.
 */
static int calls_read(struct coll *c)
{
	struct byte_buf q = { 0 };
	size_t at = 0;
	int rc = 0;

	while (at < c->ninsts && !rc) {
		q.len = 0;
		byte_buf_printf(&q, "SELECT comm_key, op, seq, process, node_id, tgid, tid, rank,"
				    " entry_ns, exit_ns, count, bytes, peer, result, received_ns, idx"
				    " FROM nccl_calls WHERE (");
		for (size_t nr = 0; at < c->ninsts && nr < RANGES_MAX; nr++) {
			const struct inst *a = &c->insts[at];
			size_t end = at + 1;

			while (end < c->ninsts && c->insts[end].key == a->key &&
			       c->insts[end].op == a->op &&
			       c->insts[end].seq - c->insts[end - 1].seq <= SEQ_GAP_MAX)
				end++;
			byte_buf_printf(&q, "%s(comm_key = %" PRIu64 " AND op = %u AND seq BETWEEN %"
					PRIu64 " AND %" PRIu64 ")", nr ? " OR " : "", a->key,
					(unsigned)a->op, a->seq, c->insts[end - 1].seq);
			at = end;
		}
		byte_buf_printf(&q, ") AND ");
		range_committed(&q, c);
		byte_buf_printf(&q, " AND");
		jp_in(&q, &c->jp, c->f->job);
		rc = run(c->s, &q, 16, call_row, c);
	}
	byte_buf_free(&q);
	return rc;
}

/* The communicator ranks and sizes of the job's processes for the instances' keys. */
static int comm_ranks_read(struct coll *c)
{
	struct byte_buf q = { 0 };
	uint64_t *keys = calloc(c->ninsts + 1, sizeof(*keys));
	size_t nkeys = 0;
	int rc = 0;

	if (!keys)
		return -ENOMEM;
	for (size_t i = 0; i < c->ninsts; i++) /* sorted by key: distinct keys are runs */
		if (!nkeys || keys[nkeys - 1] != c->insts[i].key)
			keys[nkeys++] = c->insts[i].key;
	for (size_t at = 0; at < nkeys && !rc; at += CHUNK) {
		size_t end = at + CHUNK < nkeys ? at + CHUNK : nkeys;

		q.len = 0;
		byte_buf_printf(&q, "SELECT process, key, " CM_MERGE("rank", "rank >= 0") ", "
				    CM_MERGE("nranks", "nranks >= 1") " FROM communicators WHERE ");
		/* Every window of the job's nodes: a communicator's rank may be known only
		 * from the batch that saw it created, days before the range. */
		ch__committed_job_sql(&q, c->f->job, CH_ALL_TIME);
		byte_buf_printf(&q, " AND key IN (");
		for (size_t i = at; i < end; i++)
			byte_buf_printf(&q, "%s%" PRIu64, i > at ? "," : "", keys[i]);
		byte_buf_printf(&q, ") AND");
		jp_in(&q, &c->jp, c->f->job);
		byte_buf_printf(&q, " GROUP BY process, key");
		rc = run(c->s, &q, 4, comm_rank_row, c);
	}
	free(keys);
	byte_buf_free(&q);
	if (!rc && c->ncomms)
		qsort(c->comms, c->ncomms, sizeof(*c->comms), comm_rank_cmp);
	return rc;
}

int ch__collectives_list(struct store *base, const struct store_collective_filter *f,
			 uint32_t max_instances, store_collective_fn fn, void *arg)
{
	struct coll c = { .s = ch__store(base), .f = f };
	int rc;

	if ((rc = jps_read(c.s, f->job, &c.jp)) || !c.jp.n || !max_instances ||
	    (rc = instances_read(&c, max_instances)) || !c.ninsts || (rc = calls_read(&c)) ||
	    (rc = comm_ranks_read(&c)) || (rc = jp_hosts(c.s, &c.jp, &c.h)))
		goto cleanup;
	/* Sizes per key: the largest any of the job's processes reported. */
	for (size_t i = 0; i < c.ncomms; i++)
		for (size_t k = 0; k < c.ninsts; k++)
			if (c.insts[k].key == c.comms[i].key && c.comms[i].nranks > c.insts[k].nranks)
				c.insts[k].nranks = c.comms[i].nranks;
	for (size_t i = 0; i < c.ncalls; i++) {
		struct call *k = &c.calls[i];
		struct inst *in = (struct inst *)k->inst;

		if (k->rank < 0) {
			struct comm_rank key = { .process = k->process, .key = in->key }, *m;

			m = c.ncomms ? bsearch(&key, c.comms, c.ncomms, sizeof(*c.comms),
						       comm_rank_cmp) : NULL;
			k->rank = m ? m->rank : -1;
		}
		if (k->c.entry_ns < in->first_all)
			in->first_all = k->c.entry_ns;
	}
	if (c.ncalls)
		qsort(c.calls, c.ncalls, sizeof(*c.calls), call_cmp);
	for (size_t i = 0; i < c.ncalls && !rc; i++) {
		struct call *k = &c.calls[i];

		k->c.comm_key = k->inst->key;
		k->c.op = k->inst->op;
		k->c.seq = k->inst->seq;
		k->c.first_entry_ns = k->inst->first_all;
		k->c.nranks = k->inst->nranks;
		k->c.rank = k->rank;
		k->c.hostname = host_name(&c.h, k->c.node_id);
		k->c.process = (int64_t)k->process;
		rc = fn(arg, &k->c);
	}
cleanup:
	free(c.jp.v);
	hosts_free(&c.h);
	free(c.ranges);
	free(c.insts);
	free(c.calls);
	free(c.comms);
	return rc;
}
