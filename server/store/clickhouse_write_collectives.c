/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Storing a batch's training-job rows in ClickHouse: job ranks, communicators, NCCL calls and
 * the spans indexing the calls by time (tables: clickhouse_schema_collectives.c). Written
 * before the batch row, under the batch's attempt, like every other row of the batch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

static int64_t clamp63(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

struct coll_put {
	struct ch_batch_rows *out;
	const struct sysom_batch *b;
	const char *node_hex;
	const uint64_t *keys; /* process keys */
	int64_t received_ns, window_start_ns, window_end_ns;
	uint64_t attempt;
};

static int job_ranks_write(const struct coll_put *p)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	int rc;

	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		const struct sysom_job_rank *j = &b->job_ranks[i];
		const struct sysom_process *pr = &b->processes[j->process];

		ch__rb_date_ns(&rows, p->window_start_ns);
		ch__rb_str(&rows, sysom_batch_string(b, j->job));
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, p->keys[j->process]);
		byte_buf_put_u32(&rows, pr->tgid);
		byte_buf_put_u64(&rows, pr->start_time_ns);
		byte_buf_put_u32(&rows, pr->generation);
		byte_buf_put_u32(&rows, (uint32_t)j->rank);
		byte_buf_put_u32(&rows, (uint32_t)j->world_size);
		byte_buf_put_u32(&rows, (uint32_t)j->local_rank);
		byte_buf_put_u32(&rows, (uint32_t)j->local_world_size);
		byte_buf_put_u32(&rows, (uint32_t)j->group_rank);
		byte_buf_put_u8(&rows, j->source);
		ch__rb_str(&rows, sysom_batch_string(b, j->job_id_source));
		ch__rb_str(&rows, sysom_batch_string(b, j->master));
		ch__rb_str(&rows, sysom_batch_string(b, j->groups));
		byte_buf_put_u64(&rows, (uint64_t)p->window_start_ns);
		byte_buf_put_u64(&rows, (uint64_t)p->window_end_ns);
		byte_buf_put_u64(&rows, (uint64_t)p->received_ns);
		byte_buf_put_u64(&rows, p->attempt);
		byte_buf_put_u8(&rows, j->role);         /* schema 5 */
		byte_buf_put_u32(&rows, j->rank_pid);
		byte_buf_put_u16(&rows, (uint16_t)(int16_t)((int)j->gpu_device - 1)); /* schema 9 */
	}
	rc = ch__rows_take(p->out, "job_ranks", &rows);
	byte_buf_free(&rows);
	return rc;
}

static int communicators_write(const struct coll_put *p)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	int rc;

	for (uint32_t i = 0; i < b->communicator_count; i++) {
		const struct sysom_communicator *m = &b->communicators[i];

		ch__rb_date_ns(&rows, p->window_start_ns);
		byte_buf_put_u64(&rows, m->key);
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, p->keys[m->process]);
		byte_buf_put_u32(&rows, b->processes[m->process].tgid);
		byte_buf_put_u32(&rows, i); /* a repeated (process, key): the last record wins */
		byte_buf_put_u32(&rows, (uint32_t)m->rank);
		byte_buf_put_u32(&rows, (uint32_t)m->nranks);
		byte_buf_put_u64(&rows, m->parent_key);
		byte_buf_put_u32(&rows, (uint32_t)m->split_color);
		byte_buf_put_u32(&rows, (uint32_t)m->split_key);
		byte_buf_put_u32(&rows, m->split_ordinal);
		byte_buf_put_u8(&rows, m->key_source);
		byte_buf_put_u64(&rows, m->nccl_comm_hash);
		byte_buf_put_u64(&rows, m->handle);
		byte_buf_put_u64(&rows, (uint64_t)clamp63(m->created_ns));
		byte_buf_put_u8(&rows, (m->flags & SYSOM_COMM_DESTROYED) ? 1 : 0);
		byte_buf_put_u64(&rows, (uint64_t)p->window_start_ns);
		byte_buf_put_u64(&rows, (uint64_t)p->window_end_ns);
		byte_buf_put_u64(&rows, (uint64_t)p->received_ns);
		byte_buf_put_u64(&rows, p->attempt);
	}
	rc = ch__rows_take(p->out, "communicators", &rows);
	byte_buf_free(&rows);
	return rc;
}

/* One span: the calls of one (process, communicator, op) in this batch. */
struct span {
	uint32_t process;
	uint8_t op;
	uint64_t comm_key;
	uint64_t min_seq, max_seq;
	int64_t min_entry, max_entry;
	uint32_t calls;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->process != y->process)
		return x->process < y->process ? -1 : 1;
	if (x->comm_key != y->comm_key)
		return x->comm_key < y->comm_key ? -1 : 1;
	return (x->op > y->op) - (x->op < y->op);
}

/* In-flight calls are stored once they return (they come again then), as in SQLite. */
static int nccl_calls_write(const struct coll_put *p)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 }, spans_rows = { 0 };
	struct span *spans = calloc(b->nccl_call_count + 1, sizeof(*spans));
	size_t nspans = 0, out = 0;
	int rc;

	if (!spans)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		const struct sysom_nccl_call *k = &b->nccl_calls[i];
		int64_t entry = clamp63(k->entry_ns);

		if (k->flags & SYSOM_NCCL_IN_FLIGHT)
			continue;
		ch__rb_date_ns(&rows, entry);
		byte_buf_put_u64(&rows, k->comm_key);
		byte_buf_put_u8(&rows, k->op);
		byte_buf_put_u64(&rows, k->seq);
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, p->keys[k->process]);
		byte_buf_put_u32(&rows, b->processes[k->process].tgid);
		byte_buf_put_u32(&rows, k->tid);
		byte_buf_put_u64(&rows, (uint64_t)entry);
		byte_buf_put_u64(&rows, (uint64_t)clamp63(k->exit_ns));
		byte_buf_put_u64(&rows, (uint64_t)clamp63(k->count));
		byte_buf_put_u64(&rows, (uint64_t)clamp63(k->bytes));
		byte_buf_put_u32(&rows, (uint32_t)k->peer);
		byte_buf_put_u32(&rows, (uint32_t)k->result);
		byte_buf_put_u32(&rows, (uint32_t)k->rank);
		byte_buf_put_u8(&rows, k->datatype);
		byte_buf_put_u8(&rows, k->redop);
		byte_buf_put_u8(&rows, k->flags);
		byte_buf_put_u64(&rows, k->stream);
		byte_buf_put_u64(&rows, (uint64_t)p->received_ns);
		byte_buf_put_u32(&rows, i);
		byte_buf_put_u64(&rows, p->attempt);
		spans[nspans++] = (struct span){ .process = k->process, .op = k->op,
						 .comm_key = k->comm_key, .min_seq = k->seq,
						 .max_seq = k->seq, .min_entry = entry,
						 .max_entry = entry, .calls = 1 };
	}
	/* Merge the calls of each (process, communicator, op) into one span. */
	qsort(spans, nspans, sizeof(*spans), span_cmp);
	for (size_t i = 0; i < nspans; i++) {
		struct span *o = &spans[out], *x = &spans[i];

		if (i && !span_cmp(o, x)) {
			o->min_seq = x->min_seq < o->min_seq ? x->min_seq : o->min_seq;
			o->max_seq = x->max_seq > o->max_seq ? x->max_seq : o->max_seq;
			o->min_entry = x->min_entry < o->min_entry ? x->min_entry : o->min_entry;
			o->max_entry = x->max_entry > o->max_entry ? x->max_entry : o->max_entry;
			o->calls++;
			continue;
		}
		if (i)
			o = &spans[++out];
		*o = *x;
	}
	if (nspans)
		out++;
	for (size_t i = 0; i < out; i++) {
		const struct span *x = &spans[i];

		ch__rb_date_ns(&spans_rows, x->min_entry);
		ch__rb_str(&spans_rows, p->node_hex);
		byte_buf_put_u64(&spans_rows, p->keys[x->process]);
		byte_buf_put_u64(&spans_rows, x->comm_key);
		byte_buf_put_u8(&spans_rows, x->op);
		byte_buf_put_u64(&spans_rows, x->min_seq);
		byte_buf_put_u64(&spans_rows, x->max_seq);
		byte_buf_put_u64(&spans_rows, (uint64_t)x->min_entry);
		byte_buf_put_u64(&spans_rows, (uint64_t)x->max_entry);
		byte_buf_put_u32(&spans_rows, x->calls);
		byte_buf_put_u64(&spans_rows, p->attempt);
	}
	if (!(rc = ch__rows_take(p->out, "nccl_calls", &rows)))
		rc = ch__rows_take(p->out, "nccl_spans", &spans_rows);
	byte_buf_free(&rows);
	byte_buf_free(&spans_rows);
	free(spans);
	return rc;
}

int ch__collectives_write(struct ch_batch_rows *out, const struct sysom_batch *b,
			  const char *node_hex, const uint64_t *process_keys, int64_t received_ns,
			  uint64_t attempt, struct store_put_result *r)
{
	const struct coll_put p = {
		.out = out, .b = b, .node_hex = node_hex, .keys = process_keys,
		.received_ns = received_ns, .window_start_ns = clamp63(b->window_start_ns),
		.window_end_ns = clamp63(b->window_end_ns), .attempt = attempt,
	};
	int rc;

	if ((rc = job_ranks_write(&p)) || (rc = communicators_write(&p)) ||
	    (rc = nccl_calls_write(&p)))
		return rc;
	r->job_ranks = b->job_rank_count;
	r->communicators = b->communicator_count;
	r->nccl_calls = b->nccl_call_count;
	return 0;
}
