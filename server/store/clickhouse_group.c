/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Group insert: the rows of the batches being stored at the same time go to ClickHouse in one
 * INSERT per table, not one per table per batch.
 *
 * Why: every INSERT into a MergeTree writes a new part per partition and runs the table's
 * materialized views; ClickHouse 18.16 takes a few milliseconds for each whatever its size, so
 * with one INSERT per table per batch (about 20 tables) ClickHouse, not the server, bounded
 * ingest at ~45 small batches a second on this machine (docs/PERFORMANCE.md). Merged, a
 * group's cost is about that of one batch.
 *
 * How (a leader/follower group commit, as databases do for their logs): a writer queues its
 * batch's rows and waits. A writer that finds fewer than CH_GROUP_FLUSHERS groups being
 * inserted takes the queue (up to CH_GROUP_MAX_BYTES, at least one batch) and inserts it: each
 * table's rows of every batch of the group in one INSERT, the `batches` rows last, in one
 * INSERT of their own. Nothing waits on a timer: a group is whatever queued while the previous
 * one was being inserted, so one batch alone is inserted at once.
 *
 * What an acknowledgment means does not change: a batch's rows count from its batch row on
 * (the committed attempts), and that row is inserted after every other row of the group. A
 * failed INSERT fails every batch of the group (each is answered 503 and retried by its agent);
 * the rows a failed group did insert belong to attempts without a batch row, invisible as a
 * batch cut short always was. A group's `batches` INSERT that ClickHouse applied in part (one
 * block per day partition) leaves some of its batches stored: their retries answer duplicate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/* The table written last, whose row commits a batch. */
static const char commit_table[] = "batches";

int ch__rows_take(struct ch_batch_rows *out, const char *table, struct byte_buf *rows)
{
	struct ch_table_rows *t = NULL;
	int rc = byte_buf_error(rows);

	if (rc)
		goto cleanup;
	if (!rows->len)
		goto cleanup;
	for (unsigned i = 0; i < out->count && !t; i++)
		if (!strcmp(out->tables[i].table, table))
			t = &out->tables[i];
	if (!t) {
		if (out->count == CH_GROUP_TABLES) {
			rc = -E2BIG;
			goto cleanup;
		}
		t = &out->tables[out->count++];
		t->table = table;
		t->rows = *rows;
		out->bytes += rows->len;
		*rows = (struct byte_buf){ 0 };
		return 0;
	}
	byte_buf_append(&t->rows, rows->data, rows->len);
	if ((rc = byte_buf_error(&t->rows)))
		goto cleanup;
	out->bytes += rows->len;
cleanup:
	byte_buf_free(rows);
	return rc;
}

void ch__batch_rows_free(struct ch_batch_rows *r)
{
	for (unsigned i = 0; i < r->count; i++)
		byte_buf_free(&r->tables[i].rows);
	r->count = 0;
	r->bytes = 0;
}

void ch__group_init(struct ch_group *g, ch_group_run_fn run, uint32_t max_entries,
		    size_t max_bytes)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->done, NULL);
	g->head = NULL;
	g->tail = &g->head;
	g->run = run;
	g->max_entries = max_entries;
	g->max_bytes = max_bytes;
}

void ch__group_destroy(struct ch_group *g)
{
	pthread_cond_destroy(&g->done);
	pthread_mutex_destroy(&g->lock);
}

int ch__group_join(struct ch_store *s, struct ch_group *g, struct ch_group_entry *me)
{
	int rc;

	me->next = NULL;
	me->done = false;
	pthread_mutex_lock(&g->lock);
	*g->tail = me;
	g->tail = &me->next;
	while (!me->done) {
		struct ch_group_entry *first = g->head, *last = first, *e;
		size_t bytes;
		uint32_t n = 1;

		if (!first || g->running >= CH_GROUP_RUNNERS) {
			pthread_cond_wait(&g->done, &g->lock);
			continue;
		}
		/* Lead: take the queue's head up to the limits (one entry at least). */
		bytes = first->bytes;
		while (last->next && n < g->max_entries &&
		       bytes + last->next->bytes <= g->max_bytes) {
			last = last->next;
			bytes += last->bytes;
			n++;
		}
		g->head = last->next;
		if (!g->head)
			g->tail = &g->head;
		last->next = NULL;
		g->running++;
		pthread_mutex_unlock(&g->lock);
		rc = g->run(s, first);
		pthread_mutex_lock(&g->lock);
		for (e = first; e; ) {
			struct ch_group_entry *next = e->next;

			e->rc = rc;
			e->done = true;
			e = next;
		}
		g->running--;
		g->groups++;
		g->entries += n;
		pthread_cond_broadcast(&g->done);
	}
	rc = me->rc;
	pthread_mutex_unlock(&g->lock);
	return rc;
}

/* Appends every entry's rows of `table` to one body and inserts it. */
static int insert_table(struct ch_store *s, struct ch_group_entry *first, const char *table,
			struct byte_buf *body)
{
	body->len = 0;
	for (struct ch_group_entry *e = first; e; e = e->next) {
		const struct ch_batch_rows *rows = e->arg;

		for (unsigned i = 0; i < rows->count; i++)
			if (!strcmp(rows->tables[i].table, table))
				byte_buf_append(body, rows->tables[i].rows.data,
						rows->tables[i].rows.len);
	}
	return ch__insert_rows(s, table, body);
}

/*
 * Inserts a group (a list ending in NULL): each table its batches name in the order first
 * named, `batches` last. The tables are the writers' fixed set (fewer than CH_GROUP_TABLES).
 */
int ch__insert_group_run(struct ch_store *s, struct ch_group_entry *first)
{
	const char *tables[CH_GROUP_TABLES + 1];
	struct byte_buf body = { 0 };
	unsigned ntables = 0;
	int rc = 0;

	for (struct ch_group_entry *e = first; e; e = e->next)
		for (unsigned i = 0; i < ((const struct ch_batch_rows *)e->arg)->count; i++) {
			const char *table = ((const struct ch_batch_rows *)e->arg)->tables[i].table;
			unsigned k = 0;

			while (k < ntables && strcmp(tables[k], table))
				k++;
			if (k < ntables || !strcmp(table, commit_table))
				continue;
			if (ntables == CH_GROUP_TABLES)
				return -E2BIG;
			tables[ntables++] = table;
		}
	tables[ntables++] = commit_table;
	for (unsigned k = 0; k < ntables && !rc; k++)
		rc = insert_table(s, first, tables[k], &body);
	byte_buf_free(&body);
	return rc;
}

int ch__group_insert(struct ch_store *s, struct ch_batch_rows *rows)
{
	struct ch_group_entry me = { .arg = rows, .bytes = rows->bytes };

	return ch__group_join(s, &s->inserts, &me);
}

int ch__insert_groups_get(struct store *base, struct store_insert_groups *out)
{
	struct ch_group *g = &ch__store(base)->inserts;

	pthread_mutex_lock(&g->lock);
	out->groups = g->groups;
	out->batches = g->entries;
	pthread_mutex_unlock(&g->lock);
	return 0;
}
