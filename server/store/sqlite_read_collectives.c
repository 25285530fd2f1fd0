/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading NCCL collective instances of a job from SQLite, with every rank's call in them.
 * The calls are stored in chunks (server/store/nccl_chunk.h), so the matching happens here:
 *   1. the job's processes and their job ranks;
 *   2. the chunks of those processes that may hold a call entered in [from, to] (the index on
 *      (process, entry_min_ns), bounded by the chunks' entry span), decoded: the instances
 *      (communicator, op, seq) with such a call, each with its earliest entry in the range;
 *   3. the first (or last) `max_instances` of them by (earliest entry, key, op, seq);
 *   4. per (communicator, op), the chunks whose seq range meets the chosen ones (the index on
 *      (comm_key, op, seq_min), bounded by the chunks' seq span): every call of the job's
 *      processes in a chosen instance, also entered outside the range;
 *   5. the names the answer carries (communicator sizes and ranks, pids, nodes), looked up
 *      once each, then the calls sorted and visited.
 * Steps 4 and 5 run on a slice of the chosen instances at a time (COLLECTIVES_CALLS_BUDGET).
 * Orders and ties are those the per-row SQL had: keys and sequence numbers compare as the
 * signed integers SQLite stores, and equal calls keep their storage order (chunk, position).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/store/nccl_chunk.h"
#include "server/store/sqlite_internal.h"

/* Calls held at once (~112 bytes each): the chosen instances are read in slices of this many
 * divided by the job's processes, so a 1,000-rank job holds ~1,000 instances at a time. */
#define COLLECTIVES_CALLS_BUDGET (1u << 20)

/* Tests: at most this many instances per slice (0: no cap), to exercise slicing on small
 * jobs (store__sqlite_collectives_slice_set). */
static size_t collectives_slice_max;

void store__sqlite_collectives_slice_set(size_t instances)
{
	collectives_slice_max = instances;
}

struct rc_proc {
	sqlite3_int64 process;
	int32_t job_rank;
	uint32_t tgid;
	bool tgid_known;
	size_t node; /* 1 + its index in rc.nodes, 0 not looked up */
};

struct rc_instance {
	uint64_t comm_key, seq;
	uint8_t op;
	int64_t first_in_range; /* earliest entry in [from, to]: the selection's order */
	int64_t first_entry;    /* earliest entry of every call read: the answer's */
	int32_t nranks;         /* the communicator's size (comm_nranks) */
};

struct rc_call {
	uint32_t instance;
	sqlite3_int64 process, node, chunk;
	uint32_t position;
	int32_t rank; /* the call's, else the process's in the communicator, else -1 */
	struct nccl_chunk_call k;
};

struct rc_node {
	sqlite3_int64 id;
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	char *hostname;
};

struct rc_comm_rank {
	sqlite3_int64 process;
	uint64_t key;
	int32_t rank;
};

struct rc_nranks {
	uint64_t key;
	int32_t nranks;
};

struct rc {
	struct conn *c;
	const struct store_collective_filter *f;
	struct rc_proc *procs;
	size_t nprocs, procs_cap;
	struct rc_instance *inst;
	size_t ninst, inst_cap;
	struct hash_index inst_index;
	struct rc_call *calls;
	size_t ncalls, calls_cap;
	struct rc_node *nodes;
	size_t nnodes, nodes_cap;
	struct rc_comm_rank *comm_ranks;
	size_t ncomm_ranks, comm_ranks_cap;
	struct rc_nranks *nranks;
	size_t nnranks, nranks_cap;
	/* step 4: the chosen instances of one (communicator, op), by seq */
	const uint32_t *group;
	size_t ngroup;
};

static int64_t as_signed(uint64_t v)
{
	return store__i64(v);
}

static int cmp_i64(int64_t a, int64_t b)
{
	return (a > b) - (a < b);
}

/* ---- 1. the job's processes ---------------------------------------------------------------- */

static int proc_row(void *ctx, sqlite3_stmt *st)
{
	struct rc *r = ctx;

	if (SYSOM_ARRAY_RESERVE(r->procs, r->procs_cap, r->nprocs, 64))
		return -ENOMEM;
	r->procs[r->nprocs++] = (struct rc_proc){ .process = sqlite3_column_int64(st, 0),
						  .job_rank = sqlite3_column_int(st, 1) };
	return 0;
}

static struct rc_proc *proc_find(const struct rc *r, sqlite3_int64 process)
{
	size_t lo = 0, hi = r->nprocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->procs[mid].process == process)
			return &r->procs[mid];
		if (r->procs[mid].process < process)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ---- 2. instances entered in the range ------------------------------------------------------ */

struct inst_probe {
	const struct rc *r;
	uint64_t comm_key, seq;
	uint8_t op;
};

static uint64_t inst_hash(uint64_t comm_key, uint8_t op, uint64_t seq)
{
	return sysom_hash_mix(sysom_hash_mix(comm_key, op), seq);
}

static bool inst_eq(const void *ctx, uint32_t value)
{
	const struct inst_probe *p = ctx;
	const struct rc_instance *x = &p->r->inst[value];

	return x->comm_key == p->comm_key && x->op == p->op && x->seq == p->seq;
}

static int chunk_decode(sqlite3_stmt *st, int col, struct nccl_chunk_call **calls, size_t *n)
{
	const void *blob = sqlite3_column_blob(st, col);
	int len = sqlite3_column_bytes(st, col);

	return nccl_chunk_decode(blob, len > 0 ? (size_t)len : 0, calls, n);
}

static int range_chunk_row(void *ctx, sqlite3_stmt *st)
{
	struct rc *r = ctx;
	uint64_t comm_key = store__u64(sqlite3_column_int64(st, 0));
	uint8_t op = (uint8_t)sqlite3_column_int(st, 1);
	struct nccl_chunk_call *calls = NULL;
	size_t n = 0;
	int rc;

	if ((rc = chunk_decode(st, 2, &calls, &n)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		int64_t entry = store__clamp(calls[i].entry_ns);
		if (entry < r->f->from_ns || entry > r->f->to_ns)
			continue;
		struct inst_probe p = { r, comm_key, calls[i].seq, op };
		uint64_t h = inst_hash(comm_key, op, calls[i].seq);
		uint32_t at = hash_index_find(&r->inst_index, h, inst_eq, &p);
		if (at != HASH_INDEX_NONE) {
			if (entry < r->inst[at].first_in_range)
				r->inst[at].first_in_range = entry;
			continue;
		}
		if (SYSOM_ARRAY_RESERVE(r->inst, r->inst_cap, r->ninst, 1024) ||
		    (rc = hash_index_insert(&r->inst_index, h, (uint32_t)r->ninst))) {
			rc = rc ? rc : -ENOMEM;
			goto cleanup;
		}
		r->inst[r->ninst++] = (struct rc_instance){ .comm_key = comm_key, .op = op,
							    .seq = calls[i].seq,
							    .first_in_range = entry,
							    .first_entry = INT64_MAX };
	}
	rc = 0;
cleanup:
	free(calls);
	return rc;
}

/* ---- 3. the chosen instances ---------------------------------------------------------------- */

static int inst_order(const struct rc_instance *a, const struct rc_instance *b)
{
	int c = cmp_i64(a->first_in_range, b->first_in_range);
	if (!c)
		c = cmp_i64(as_signed(a->comm_key), as_signed(b->comm_key));
	if (!c)
		c = (a->op > b->op) - (a->op < b->op);
	if (!c)
		c = cmp_i64(as_signed(a->seq), as_signed(b->seq));
	return c;
}

static int inst_cmp_asc(const void *x, const void *y)
{
	return inst_order(x, y);
}

static int inst_cmp_desc(const void *x, const void *y)
{
	return inst_order(y, x);
}

/* Orders instance indexes by (key, op, seq): step 4's groups. */
static int group_cmp(const void *x, const void *y, void *ctx)
{
	const struct rc_instance *inst = ctx;
	const struct rc_instance *a = &inst[*(const uint32_t *)x];
	const struct rc_instance *b = &inst[*(const uint32_t *)y];
	int c = cmp_i64(as_signed(a->comm_key), as_signed(b->comm_key));
	if (!c)
		c = (a->op > b->op) - (a->op < b->op);
	if (!c)
		c = cmp_i64(as_signed(a->seq), as_signed(b->seq));
	return c;
}

/* ---- 4. every call of the chosen instances -------------------------------------------------- */

/* The chosen instance of the current group with sequence number `seq`, or -1. */
static int64_t group_find(const struct rc *r, uint64_t seq)
{
	size_t lo = 0, hi = r->ngroup;
	int64_t s = as_signed(seq);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int64_t m = as_signed(r->inst[r->group[mid]].seq);
		if (m == s)
			return r->group[mid];
		if (m < s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static int seq_chunk_row(void *ctx, sqlite3_stmt *st)
{
	struct rc *r = ctx;
	sqlite3_int64 chunk = sqlite3_column_int64(st, 0);
	sqlite3_int64 process = sqlite3_column_int64(st, 1);
	sqlite3_int64 node = sqlite3_column_int64(st, 2);
	struct nccl_chunk_call *calls = NULL;
	size_t n = 0;
	int rc;

	if ((rc = chunk_decode(st, 3, &calls, &n)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		int64_t at = group_find(r, calls[i].seq);
		if (at < 0)
			continue;
		if (SYSOM_ARRAY_RESERVE(r->calls, r->calls_cap, r->ncalls, 1024)) {
			rc = -ENOMEM;
			goto cleanup;
		}
		r->calls[r->ncalls++] = (struct rc_call){ .instance = (uint32_t)at, .process = process,
							  .node = node, .chunk = chunk,
							  .position = (uint32_t)i,
							  .rank = calls[i].rank, .k = calls[i] };
		int64_t entry = store__clamp(calls[i].entry_ns);
		if (entry < r->inst[at].first_entry)
			r->inst[at].first_entry = entry;
	}
	rc = 0;
cleanup:
	free(calls);
	return rc;
}

/* ---- 5. names -------------------------------------------------------------------------------- */

static int i64_row(void *ctx, sqlite3_stmt *st)
{
	*(sqlite3_int64 *)ctx = sqlite3_column_type(st, 0) == SQLITE_NULL ? -1
									: sqlite3_column_int64(st, 0);
	return 0;
}

/* The process's rank in communicator `key` (communicators), -1 unknown. */
static int comm_rank(struct rc *r, sqlite3_int64 process, uint64_t key, int32_t *out)
{
	for (size_t i = 0; i < r->ncomm_ranks; i++)
		if (r->comm_ranks[i].process == process && r->comm_ranks[i].key == key) {
			*out = r->comm_ranks[i].rank;
			return 0;
		}
	sqlite3_int64 v = -1;
	int rc = store__query(r->c, &(struct store__query){
		.sql = "SELECT rank FROM communicators WHERE process = ?1 AND key = ?2",
		.args = STORE__ARGS(STORE__INT(process), STORE__INT(as_signed(key))),
		.row = i64_row, .ctx = &v, .max_rows = 1 });
	if (rc)
		return rc;
	if (SYSOM_ARRAY_RESERVE(r->comm_ranks, r->comm_ranks_cap, r->ncomm_ranks, 16))
		return -ENOMEM;
	r->comm_ranks[r->ncomm_ranks++] = (struct rc_comm_rank){ process, key, (int32_t)v };
	*out = (int32_t)v;
	return 0;
}

/* The communicator's size as the job's processes reported it (the largest), -1 unknown. */
static int comm_nranks(struct rc *r, uint64_t key, int32_t *out)
{
	for (size_t i = 0; i < r->nnranks; i++)
		if (r->nranks[i].key == key) {
			*out = r->nranks[i].nranks;
			return 0;
		}
	sqlite3_int64 v = -1;
	int rc = store__query(r->c, &(struct store__query){
		.sql = "SELECT max(nranks) FROM communicators WHERE key = ?1 AND process IN"
		       " (SELECT process FROM job_ranks WHERE job = ?2)",
		.args = STORE__ARGS(STORE__INT(as_signed(key)), STORE__TEXT(r->f->job)),
		.row = i64_row, .ctx = &v, .max_rows = 1 });
	if (rc)
		return rc;
	if (SYSOM_ARRAY_RESERVE(r->nranks, r->nranks_cap, r->nnranks, 16))
		return -ENOMEM;
	r->nranks[r->nnranks++] = (struct rc_nranks){ key, (int32_t)v };
	*out = (int32_t)v;
	return 0;
}

static int node_row(void *ctx, sqlite3_stmt *st)
{
	struct rc_node *n = ctx;

	store__text_copy(st, 0, n->node_id, sizeof(n->node_id));
	return (n->hostname = strdup(store__text(st, 1))) ? 0 : -ENOMEM;
}

static int node_find(struct rc *r, sqlite3_int64 id, const struct rc_node **out)
{
	for (size_t i = 0; i < r->nnodes; i++)
		if (r->nodes[i].id == id) {
			*out = &r->nodes[i];
			return 0;
		}
	if (SYSOM_ARRAY_RESERVE(r->nodes, r->nodes_cap, r->nnodes, 16))
		return -ENOMEM;
	struct rc_node *n = &r->nodes[r->nnodes];
	*n = (struct rc_node){ .id = id };
	int rc = store__query(r->c, &(struct store__query){
		.sql = "SELECT node_id, hostname FROM nodes WHERE id = ?1",
		.args = STORE__ARGS(STORE__INT(id)), .row = node_row, .ctx = n, .max_rows = 1 });
	if (!rc && !n->hostname && !(n->hostname = strdup("")))
		rc = -ENOMEM;
	if (rc) {
		free(n->hostname);
		return rc;
	}
	r->nnodes++;
	*out = n;
	return 0;
}

static int proc_tgid(struct rc *r, struct rc_proc *p, uint32_t *out)
{
	if (!p->tgid_known) {
		sqlite3_int64 v = 0;
		int rc = store__query(r->c, &(struct store__query){
			.sql = "SELECT tgid FROM processes WHERE id = ?1",
			.args = STORE__ARGS(STORE__INT(p->process)), .row = i64_row, .ctx = &v,
			.max_rows = 1 });
		if (rc)
			return rc;
		p->tgid = (uint32_t)v;
		p->tgid_known = true;
	}
	*out = p->tgid;
	return 0;
}

/* The answer's order: instance (as chosen, ascending), rank (unknown last), entry, storage. */
static int call_cmp(const void *x, const void *y, void *ctx)
{
	const struct rc_instance *call_inst = ctx;
	const struct rc_call *a = x, *b = y;
	int c = a->instance == b->instance ? 0 : inst_order(&call_inst[a->instance],
							      &call_inst[b->instance]);
	if (!c)
		c = (a->rank < 0) - (b->rank < 0);
	if (!c)
		c = (a->rank > b->rank) - (a->rank < b->rank);
	if (!c)
		c = cmp_i64(store__clamp(a->k.entry_ns), store__clamp(b->k.entry_ns));
	if (!c)
		c = cmp_i64(a->chunk, b->chunk);
	if (!c)
		c = (a->position > b->position) - (a->position < b->position);
	return c;
}

static int proc_cmp(const void *x, const void *y)
{
	const struct rc_proc *a = x, *b = y;
	return cmp_i64(a->process, b->process);
}

/* Steps 4 and 5 for the chosen instances [s0, s1): their calls read, sorted and visited.
 * `order`: room for s1 - s0 indexes. */
static int slice_read(struct rc *r, size_t s0, size_t s1, uint32_t *order,
		      store_collective_fn fn, void *arg)
{
	const struct store_collective_filter *f = r->f;
	size_t n = s1 - s0;
	int rc = 0;

	r->ncalls = 0;
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)(s0 + i);
	qsort_r(order, n, sizeof(*order), group_cmp, r->inst);
	for (size_t g = 0; g < n;) {
		size_t end = g + 1;
		const struct rc_instance *first = &r->inst[order[g]];
		while (end < n && r->inst[order[end]].comm_key == first->comm_key &&
		       r->inst[order[end]].op == first->op)
			end++;
		int64_t lo = as_signed(first->seq), hi = as_signed(r->inst[order[end - 1]].seq);
		int64_t seq_lo = lo < INT64_MIN + NCCL_CHUNK_MAX_SEQ_SPAN ? INT64_MIN
									   : lo - NCCL_CHUNK_MAX_SEQ_SPAN;
		r->group = order + g;
		r->ngroup = end - g;
		if ((rc = store__query(r->c, &(struct store__query){
			     .sql = "SELECT c.id, c.process, c.node, c.data FROM nccl_call_chunks c"
				    " WHERE c.comm_key = ?1 AND c.op = ?2 AND c.seq_min BETWEEN ?3 AND ?4"
				    " AND c.seq_max >= ?5 AND c.process IN"
				    " (SELECT process FROM job_ranks WHERE job = ?6)",
			     .args = STORE__ARGS(STORE__INT(as_signed(first->comm_key)),
						 STORE__INT(first->op), STORE__INT(seq_lo),
						 STORE__INT(hi), STORE__INT(lo), STORE__TEXT(f->job)),
			     .row = seq_chunk_row, .ctx = r })))
			return rc;
		g = end;
	}

	/* 5. */
	for (size_t i = 0; i < r->ncalls; i++) {
		struct rc_call *k = &r->calls[i];
		if (k->rank < 0 &&
		    (rc = comm_rank(r, k->process, r->inst[k->instance].comm_key, &k->rank)))
			return rc;
	}
	if (r->ncalls)
		qsort_r(r->calls, r->ncalls, sizeof(*r->calls), call_cmp, r->inst);
	for (size_t i = s0; i < s1; i++)
		if ((rc = comm_nranks(r, r->inst[i].comm_key, &r->inst[i].nranks)))
			return rc;
	for (size_t i = 0; i < r->ncalls; i++) {
		const struct rc_call *k = &r->calls[i];
		const struct rc_instance *in = &r->inst[k->instance];
		struct rc_proc *p = proc_find(r, k->process);
		const struct rc_node *node;
		struct store_collective_call out = {
			.comm_key = in->comm_key, .seq = in->seq, .op = in->op,
			.first_entry_ns = in->first_entry, .nranks = in->nranks, .rank = k->rank,
			.entry_ns = store__clamp(k->k.entry_ns), .exit_ns = store__clamp(k->k.exit_ns),
			.count = (uint64_t)store__clamp(k->k.count),
			.bytes = (uint64_t)store__clamp(k->k.bytes), .peer = k->k.peer,
			.result = k->k.result, .tid = k->k.tid, .job_rank = p ? p->job_rank : -1,
			.process = k->process,
		};
		if (p && (rc = proc_tgid(r, p, &out.pid)))
			return rc;
		/* A process is on one node: its node is looked up once. */
		if (p && p->node && r->nodes[p->node - 1].id == k->node) {
			node = &r->nodes[p->node - 1];
		} else {
			if ((rc = node_find(r, k->node, &node)))
				return rc;
			if (p)
				p->node = (size_t)(node - r->nodes) + 1;
		}
		memcpy(out.node_id, node->node_id, sizeof(out.node_id));
		out.hostname = node->hostname;
		if ((rc = fn(arg, &out)))
			return rc;
	}
	return 0;
}

static int collectives_read(struct rc *r, uint32_t max_instances, store_collective_fn fn,
			    void *arg)
{
	const struct store_collective_filter *f = r->f;
	uint32_t *order = NULL;
	struct byte_buf sql = { 0 };
	int rc;

	/* 1. */
	if ((rc = store__query(r->c, &(struct store__query){
		     .sql = "SELECT process, rank FROM job_ranks WHERE job = ?1",
		     .args = STORE__ARGS(STORE__TEXT(f->job)), .row = proc_row, .ctx = r })))
		goto cleanup;
	if (!r->nprocs || !max_instances)
		goto cleanup;
	qsort(r->procs, r->nprocs, sizeof(*r->procs), proc_cmp);

	/* 2. */
	if ((rc = hash_index_init(&r->inst_index, 1024)))
		goto cleanup;
	int64_t span = NCCL_CHUNK_MAX_ENTRY_SPAN_NS;
	int64_t from_lo = f->from_ns < INT64_MIN + span ? INT64_MIN : f->from_ns - span;
	byte_buf_printf(&sql, "SELECT c.comm_key, c.op, c.data FROM nccl_call_chunks c"
			      " WHERE c.process IN (SELECT process FROM job_ranks WHERE job = ?1)"
			      " AND c.entry_min_ns BETWEEN ?2 AND ?3 AND c.entry_max_ns >= ?4"
			      " AND c.comm_key != 0 AND c.op BETWEEN %d AND %d",
			SYSOM_NCCL_ALL_REDUCE, SYSOM_NCCL_RECV);
	if (f->has_comm)
		byte_buf_printf(&sql, " AND c.comm_key = ?5");
	if (f->op)
		byte_buf_printf(&sql, " AND c.op = ?6");
	if ((rc = store__sql_end(&sql)) ||
	    (rc = store__query(r->c, &(struct store__query){
		     .sql = (const char *)sql.data, .once = true,
		     .args = STORE__ARGS(STORE__TEXT(f->job), STORE__INT(from_lo),
					 STORE__INT(f->to_ns), STORE__INT(f->from_ns),
					 f->has_comm ? STORE__INT(as_signed(f->comm)) : STORE__SKIP,
					 f->op ? STORE__INT(f->op) : STORE__SKIP),
		     .row = range_chunk_row, .ctx = r })))
		goto cleanup;

	/* 3. */
	hash_index_free(&r->inst_index);
	memset(&r->inst_index, 0, sizeof(r->inst_index));
	if (!r->ninst)
		goto cleanup;
	qsort(r->inst, r->ninst, sizeof(*r->inst), f->latest ? inst_cmp_desc : inst_cmp_asc);
	if (r->ninst > max_instances)
		r->ninst = max_instances;
	if (f->latest)
		qsort(r->inst, r->ninst, sizeof(*r->inst), inst_cmp_asc);

	/* 4. and 5., a slice of the chosen instances at a time (in their order), so that the
	 * calls held at once stay bounded for a job of many ranks. */
	size_t slice = r->nprocs ? COLLECTIVES_CALLS_BUDGET / r->nprocs : r->ninst;
	if (slice < 1)
		slice = 1;
	if (collectives_slice_max && slice > collectives_slice_max)
		slice = collectives_slice_max;
	if (!(order = malloc(sizeof(*order) * (slice < r->ninst ? slice : r->ninst)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t s0 = 0; s0 < r->ninst; s0 += slice) {
		size_t s1 = s0 + slice < r->ninst ? s0 + slice : r->ninst;
		if ((rc = slice_read(r, s0, s1, order, fn, arg)))
			goto cleanup;
	}
cleanup:
	free(order);
	byte_buf_free(&sql);
	return rc;
}

int store__sqlite_collectives_list(struct store *base, const struct store_collective_filter *f,
				   uint32_t max_instances, store_collective_fn fn, void *arg)
{
	struct sqlite_store *s = store__sqlite(base);
	struct rc r = { .f = f };
	int rc;

	if ((rc = store__read_begin(s, &r.c)))
		return rc;
	rc = collectives_read(&r, max_instances, fn, arg);
	rc = store__read_end(s, r.c, rc);
	hash_index_free(&r.inst_index);
	for (size_t i = 0; i < r.nnodes; i++)
		free(r.nodes[i].hostname);
	free(r.nodes);
	free(r.comm_ranks);
	free(r.nranks);
	free(r.calls);
	free(r.inst);
	free(r.procs);
	return rc;
}
