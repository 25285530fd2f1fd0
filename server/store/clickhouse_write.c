/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Storing a batch in ClickHouse: the duplicate check, content-addressed objects and stacks
 * (ids resolved through a cache, then one lookup per batch), process and sample rows in
 * RowBinary, and the batch row last (the commit point: see clickhouse_open.c).
 *
 * Stacks are collected by day (clickhouse_schema_stacks.c): a batch names its stacks only if
 * stack_days holds each of them for the batch's stack day (stack_day_of) or a later one, and
 * writes again those it holds only for earlier days. The stack day is never before the
 * receive day, and retention never drops the partition of a day that has not ended at least
 * a day ago (its cutoffs are whole days of --retention-days >= 1 back): so a stack the id
 * cache or the lookup found for that day is not one retention is dropping, whatever runs at
 * the same time on other replicas (clocks within a day of each other).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/hash.h"
#include "server/store/clickhouse_internal.h"

#define NS_PER_DAY (86400LL * 1000000000LL)
#define MS_PER_DAY (86400LL * 1000LL)

void ch__rb_varint(struct byte_buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	byte_buf_append(b, tmp, n);
}

void ch__rb_string(struct byte_buf *b, const void *data, size_t len)
{
	ch__rb_varint(b, len);
	byte_buf_append(b, data, len);
}

void ch__rb_str(struct byte_buf *b, const char *text)
{
	ch__rb_string(b, text, strlen(text));
}

/* The Date (days since 1970, clamped as ClickHouse's UInt16) of a time in ms. */
static uint16_t day_of_ms(int64_t ms)
{
	int64_t days = ms < 0 ? 0 : ms / MS_PER_DAY;

	return (uint16_t)(days > UINT16_MAX ? UINT16_MAX : days);
}

void ch__rb_date_ns(struct byte_buf *b, int64_t ns)
{
	int64_t days = ns < 0 ? 0 : ns / NS_PER_DAY;

	byte_buf_put_u16(b, (uint16_t)(days > UINT16_MAX ? UINT16_MAX : days));
}

static int64_t clamp63(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

int ch__insert_rows(struct ch_store *s, const char *table, const struct byte_buf *rows)
{
	char sql[128];

	if (byte_buf_error(rows))
		return byte_buf_error(rows);
	if (!rows->len)
		return 0;
	snprintf(sql, sizeof(sql), "INSERT INTO %s FORMAT RowBinary", table);
	return ch__exec(s, sql, rows->data, rows->len, NULL);
}

/* ---- content-addressed ids ------------------------------------------------------------------ */

/* One thing to resolve: its identity bytes, hashes and the id found. */
struct ident {
	const uint8_t *data;
	size_t len;
	uint64_t h0, h1;
	int64_t id;      /* 0: not resolved yet */
	int64_t probe;   /* candidate under test */
	bool created;    /* inserted by this batch */
	bool stale;      /* stored, but only for days before the one asked for: written again */
};

static int64_t candidate(uint64_t h)
{
	int64_t id = (int64_t)(h & INT64_MAX);

	return id ? id : 1;
}

/* A hit only when the cached row is stored for `day` or later (objects: day 0). */
static bool cache_get(struct ch_store *s, struct ident *x, uint16_t day)
{
	struct ch_id_slot *slot = &s->ids[x->h0 & (CH_ID_CACHE - 1)];
	bool hit;

	pthread_mutex_lock(&s->lock);
	hit = slot->h0 == x->h0 && slot->h1 == x->h1 && slot->id && slot->day >= day;
	if (hit)
		x->id = slot->id;
	pthread_mutex_unlock(&s->lock);
	return hit;
}

/* Caches x's id, known stored for `day` (objects: 0). */
static void cache_put(struct ch_store *s, const struct ident *x, uint16_t day)
{
	struct ch_id_slot *slot = &s->ids[x->h0 & (CH_ID_CACHE - 1)];

	pthread_mutex_lock(&s->lock);
	*slot = (struct ch_id_slot){ .h0 = x->h0, .h1 = x->h1, .id = x->id, .day = day };
	pthread_mutex_unlock(&s->lock);
}

/* Where ids are resolved: the table, and whether it is dated (stack_days: one row per id and
 * day it was written on). */
struct id_table {
	const char *name;
	bool dated;
};

static const struct id_table objects_table = { "objects", false };
static const struct id_table stacks_table = { "stack_days", true };

struct found {
	int64_t id;
	uint8_t *ident;
	size_t len;
	uint64_t day; /* the newest day stored (dated tables) */
};

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

/*
 * Resolves every item's id: the cache, else the stored row under its candidate id (the same
 * identity: that id; another identity: the next candidate, as SQLite probes), else the
 * candidate is free and the item is new (the caller inserts it). One query per round. In a
 * dated table an item stored only for days before `day` is `stale` (the caller writes it
 * again for `day`), and the cache answers only for `day` or later.
 */
static int resolve_some(struct ch_store *s, const struct id_table *table, uint16_t day,
			struct ident *items, size_t n)
{
	struct byte_buf sql = { 0 }, ans = { 0 };
	struct found *found = NULL;
	size_t nfound = 0, pending = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		items[i].id = 0;
		items[i].created = items[i].stale = false;
		items[i].probe = candidate(items[i].h0);
		if (!cache_get(s, &items[i], table->dated ? day : 0))
			pending++;
	}
	for (int round = 0; pending && round < STORE__STACK_PROBES; round++) {
		struct ch_tsv t;
		char *f[3];
		bool first = true;

		sql.len = 0;
		/* A dated table holds an id once per day written: its identity (the same every
		 * day) and newest day. */
		if (table->dated)
			byte_buf_printf(&sql, "SELECT id, hex(argMax(ident, day)), toUInt16(max(day))"
					      " FROM %s WHERE id IN (", table->name);
		else
			byte_buf_printf(&sql, "SELECT id, hex(ident), 0 FROM %s WHERE id IN (",
					table->name);
		for (size_t i = 0; i < n; i++) {
			if (items[i].id)
				continue;
			byte_buf_printf(&sql, "%s%lld", first ? "" : ",", (long long)items[i].probe);
			first = false;
		}
		byte_buf_printf(&sql, table->dated ? ") GROUP BY id FORMAT TabSeparated"
						   : ") LIMIT 1 BY id FORMAT TabSeparated");
		byte_buf_append(&sql, "", 1);
		if ((rc = byte_buf_error(&sql)) ||
		    (rc = ch__exec(s, (const char *)sql.data, NULL, 0, &ans)))
			goto cleanup;
		for (size_t i = 0; i < nfound; i++)
			free(found[i].ident);
		free(found);
		found = calloc(pending + 1, sizeof(*found));
		nfound = 0;
		if (!found) {
			rc = -ENOMEM;
			goto cleanup;
		}
		ch_tsv_init(&t, (char *)ans.data, ans.len);
		while ((rc = ch_tsv_row(&t, f, 3)) == 1) {
			struct found *x = &found[nfound];

			if (nfound == pending || ch_tsv_i64(f[0], &x->id) || ch_tsv_u64(f[2], &x->day)) {
				rc = -EPROTO;
				goto cleanup;
			}
			if (!(x->ident = malloc(strlen(f[1]) / 2 + 1))) {
				rc = -ENOMEM;
				goto cleanup;
			}
			nfound++;
			if ((rc = ch_tsv_hex(f[1], x->ident, strlen(f[1]) / 2, &x->len)))
				goto cleanup;
		}
		if (rc < 0)
			goto cleanup;
		rc = 0;
		qsort(found, nfound, sizeof(*found), found_cmp);
		for (size_t i = 0; i < n; i++) {
			struct ident *it = &items[i];
			struct found key = { .id = it->probe }, *hit;

			if (it->id)
				continue;
			hit = bsearch(&key, found, nfound, sizeof(*found), found_cmp);
			if (!hit) {
				it->id = it->probe;
				it->created = true;
				pending--;
			} else if (hit->len == it->len && !memcmp(hit->ident, it->data, it->len)) {
				it->id = it->probe;
				pending--;
				if (table->dated && hit->day < day)
					it->stale = true; /* cached once written again */
				else
					cache_put(s, it, (uint16_t)hit->day);
			} else {
				it->probe = candidate((uint64_t)it->probe + 1);
			}
		}
	}
	if (pending)
		rc = -EOVERFLOW;
cleanup:
	for (size_t i = 0; i < nfound; i++)
		free(found[i].ident);
	free(found);
	byte_buf_free(&sql);
	byte_buf_free(&ans);
	return rc;
}

/* At most this many ids per lookup (ClickHouse parses at most max_query_size, 256 KiB). */
#define RESOLVE_CHUNK 4096

static int resolve(struct ch_store *s, const struct id_table *table, uint16_t day,
		   struct ident *items, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i += RESOLVE_CHUNK)
		rc = resolve_some(s, table, day, items + i,
				  n - i < RESOLVE_CHUNK ? n - i : RESOLVE_CHUNK);
	return rc;
}

/* ---- the batch ------------------------------------------------------------------------------ */

struct put {
	struct ch_store *s;
	const struct sysom_batch *b;
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	int64_t received_ns;
	uint64_t attempt;
	struct ident *objects, *stacks;
	struct byte_buf object_idents, stack_idents; /* the bytes items[].data point into */
	uint64_t *processes;                          /* process keys */
	struct ch_batch_rows rows;                    /* for the group insert */
};

static int objects_write(struct put *p, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	size_t *offsets = calloc(b->object_count + 1, sizeof(*offsets));
	int rc;

	(void)r;
	if (!offsets)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->object_count; i++) {
		const struct sysom_object *o = &b->objects[i];
		const char *name = sysom_batch_string(b, o->name);

		offsets[i] = p->object_idents.len;
		byte_buf_put_u8(&p->object_idents, o->kind);
		if (store__object_by_build_id(o->kind))
			byte_buf_append(&p->object_idents, o->build_id, o->build_id_len);
		else
			byte_buf_append(&p->object_idents, name, strlen(name));
	}
	if ((rc = byte_buf_error(&p->object_idents)))
		goto cleanup;
	for (uint32_t i = 0; i < b->object_count; i++) {
		struct ident *x = &p->objects[i];
		size_t end = i + 1 < b->object_count ? offsets[i + 1] : p->object_idents.len;

		x->data = p->object_idents.data + offsets[i];
		x->len = end - offsets[i];
		x->h0 = sysom_hash64(x->data, x->len, 0);
		x->h1 = sysom_hash64(x->data, x->len, 1);
	}
	if ((rc = resolve(p->s, &objects_table, 0, p->objects, b->object_count)))
		goto cleanup;
	for (uint32_t i = 0; i < b->object_count; i++) {
		const struct sysom_object *o = &b->objects[i];
		const struct ident *x = &p->objects[i];

		if (!x->created)
			continue;
		byte_buf_put_u64(&rows, (uint64_t)x->id);
		ch__rb_string(&rows, x->data, x->len);
		byte_buf_put_u8(&rows, o->kind);
		ch__rb_string(&rows, o->build_id,
			      store__object_by_build_id(o->kind) ? o->build_id_len : 0);
		ch__rb_str(&rows, sysom_batch_string(b, o->name));
		byte_buf_put_u64(&rows, (uint64_t)p->received_ns);
	}
	if ((rc = ch__insert_rows(p->s, "objects", &rows)))
		goto cleanup;
	for (uint32_t i = 0; i < b->object_count; i++)
		if (p->objects[i].created)
			cache_put(p->s, &p->objects[i], 0);
cleanup:
	byte_buf_free(&rows);
	free(offsets);
	return rc;
}

/*
 * The day the batch's stacks must be stored for: the latest day partition a row of the batch
 * naming a stack lands in (samples and off-CPU rows: their time; launches: the window's end;
 * the minute rollups: their minute, never after the rows they sum), and never before the
 * receive day (see the top of this file). A late or spooled batch (window days before its
 * receive day) so keeps its stacks as long as rows received today; an agent clock ahead
 * dates them after today, with its rows.
 */
static uint16_t stack_day_of(const struct put *p)
{
	const struct sysom_batch *b = p->b;
	int64_t start_ms = (int64_t)(b->window_start_ns / 1000000);
	uint16_t day = day_of_ms(p->received_ns / 1000000), d;

	if (b->launch_count && (d = day_of_ms(clamp63(b->window_end_ns / 1000000))) > day)
		day = d;
	for (uint32_t i = 0; i < b->sample_count; i++)
		if ((d = day_of_ms(start_ms + b->samples[i].time_offset_ms)) > day)
			day = d;
	for (uint32_t i = 0; i < b->offcpu_count; i++)
		if ((d = day_of_ms(start_ms + b->offcpu[i].time_offset_ms)) > day)
			day = d;
	return day;
}

static int stacks_write(struct put *p, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	size_t *offsets = calloc(b->stack_count + 1, sizeof(*offsets));
	uint16_t day = stack_day_of(p);
	int rc;

	if (!offsets)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct sysom_stack *stk = &b->stacks[i];
		const struct sysom_frame *f = sysom_batch_stack_frames(b, i);

		offsets[i] = p->stack_idents.len;
		byte_buf_put_u8(&p->stack_idents, stk->kind);
		byte_buf_put_u8(&p->stack_idents, stk->stop_reason);
		for (uint16_t j = 0; j < stk->nframes; j++) {
			byte_buf_put_u64(&p->stack_idents, (uint64_t)p->objects[f[j].object].id);
			byte_buf_put_u64(&p->stack_idents, f[j].offset);
		}
	}
	if ((rc = byte_buf_error(&p->stack_idents)))
		goto cleanup;
	for (uint32_t i = 0; i < b->stack_count; i++) {
		struct ident *x = &p->stacks[i];
		size_t end = i + 1 < b->stack_count ? offsets[i + 1] : p->stack_idents.len;

		x->data = p->stack_idents.data + offsets[i];
		x->len = end - offsets[i];
		/* The first candidate is the one SQLite uses (store__stack_hash). */
		x->h0 = store__stack_hash(x->data[0], x->data[1], x->data + 2, x->len - 2);
		x->h1 = sysom_hash64(x->data, x->len, 1);
	}
	if ((rc = resolve(p->s, &stacks_table, day, p->stacks, b->stack_count)))
		goto cleanup;
	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct ident *x = &p->stacks[i];
		bool repeat = false;

		if (!x->created && !x->stale)
			continue;
		/* A batch may repeat a stack: one row and one count for it. */
		for (uint32_t j = 0; j < i && !repeat; j++)
			repeat = (p->stacks[j].created || p->stacks[j].stale) &&
				 p->stacks[j].id == x->id && p->stacks[j].h1 == x->h1;
		if (repeat)
			continue;
		byte_buf_put_u16(&rows, day);
		byte_buf_put_u64(&rows, (uint64_t)x->id);
		ch__rb_string(&rows, x->data, x->len);
		/* Written again for a later day: not new to the store. */
		if (x->created)
			r->new_stacks++;
	}
	if ((rc = ch__insert_rows(p->s, "stack_days", &rows)))
		goto cleanup;
	for (uint32_t i = 0; i < b->stack_count; i++)
		if (p->stacks[i].created || p->stacks[i].stale)
			cache_put(p->s, &p->stacks[i], day);
cleanup:
	byte_buf_free(&rows);
	free(offsets);
	return rc;
}

static uint64_t process_key(const struct sysom_batch *b, const struct sysom_process *pr)
{
	uint64_t h = sysom_hash64(b->node_id, SYSOM_NODE_ID_SIZE, 0);

	h = sysom_hash_mix(h, pr->tgid);
	h = sysom_hash_mix(h, pr->start_time_ns);
	return sysom_hash_mix(h, pr->generation);
}

static int processes_write(struct put *p, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	int rc;

	for (uint32_t i = 0; i < b->process_count; i++) {
		const struct sysom_process *pr = &b->processes[i];

		p->processes[i] = process_key(b, pr);
		ch__rb_date_ns(&rows, p->received_ns);
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, p->processes[i]);
		byte_buf_put_u32(&rows, pr->tgid);
		byte_buf_put_u64(&rows, pr->start_time_ns);
		byte_buf_put_u32(&rows, pr->generation);
		byte_buf_put_u32(&rows, pr->ppid);
		ch__rb_str(&rows, sysom_batch_string(b, pr->comm));
		ch__rb_str(&rows, sysom_batch_string(b, pr->exe));
		ch__rb_str(&rows, sysom_batch_string(b, pr->cmdline));
		byte_buf_put_u64(&rows, (uint64_t)clamp63(b->window_start_ns));
		byte_buf_put_u64(&rows, (uint64_t)clamp63(b->window_end_ns));
		byte_buf_put_u64(&rows, (uint64_t)p->received_ns);
		byte_buf_put_u64(&rows, p->attempt);
	}
	rc = ch__rows_take(&p->rows, "processes", &rows);
	if (!rc)
		r->processes = b->process_count;
	byte_buf_free(&rows);
	return rc;
}

static int samples_write(struct put *p, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	int rc;

	for (uint32_t i = 0; i < b->sample_count; i++) {
		const struct sysom_sample *smp = &b->samples[i];
		int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + smp->time_offset_ms;

		ch__rb_date_ns(&rows, time_ms * 1000000);
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, (uint64_t)time_ms);
		byte_buf_put_u64(&rows, p->processes[smp->process]);
		byte_buf_put_u32(&rows, b->processes[smp->process].tgid);
		byte_buf_put_u32(&rows, smp->tid);
		byte_buf_put_u32(&rows, smp->cpu);
		ch__rb_str(&rows, sysom_batch_string(b, smp->thread_comm));
		byte_buf_put_u64(&rows, smp->kernel_stack != SYSOM_WIRE_NONE
						? (uint64_t)p->stacks[smp->kernel_stack].id : 0);
		byte_buf_put_u64(&rows, smp->user_stack != SYSOM_WIRE_NONE
						? (uint64_t)p->stacks[smp->user_stack].id : 0);
		byte_buf_put_u64(&rows, (uint64_t)clamp63(smp->count));
		byte_buf_put_u64(&rows, p->attempt);
	}
	rc = ch__rows_take(&p->rows, "samples", &rows);
	if (!rc)
		r->sample_rows = b->sample_count;
	byte_buf_free(&rows);
	return rc;
}

/* The batch row: written last, it makes the batch's other rows count. */
static int batch_row_write(struct put *p, uint64_t content_hash, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	const struct sysom_node_info *n = &b->node;
	struct byte_buf row = { 0 };
	char boot_hex[33];
	int64_t kernel_object = 0;
	int rc;

	if (n->kernel_object != SYSOM_WIRE_NONE && n->kernel_object < b->object_count)
		kernel_object = p->objects[n->kernel_object].id;
	store__hex(n->boot_id, sizeof(n->boot_id), boot_hex, sizeof(boot_hex));
	ch__rb_date_ns(&row, p->received_ns);
	ch__rb_str(&row, p->node_hex);
	byte_buf_put_u64(&row, b->agent_epoch);
	byte_buf_put_u64(&row, b->sequence);
	byte_buf_put_u64(&row, p->attempt);
	byte_buf_put_u64(&row, content_hash);
	byte_buf_put_u64(&row, (uint64_t)p->received_ns);
	byte_buf_put_u64(&row, (uint64_t)clamp63(b->window_start_ns));
	byte_buf_put_u64(&row, (uint64_t)clamp63(b->window_end_ns));
	byte_buf_put_u64(&row, (uint64_t)clamp63(r->samples));
	byte_buf_put_u32(&row, b->sample_count);
	ch__rb_str(&row, sysom_batch_string(b, n->hostname));
	ch__rb_str(&row, sysom_batch_string(b, n->kernel_release));
	ch__rb_str(&row, sysom_batch_string(b, n->machine));
	ch__rb_str(&row, sysom_batch_string(b, n->agent_version));
	ch__rb_str(&row, boot_hex);
	byte_buf_put_u64(&row, (uint64_t)kernel_object);
	byte_buf_put_u32(&row, n->sample_hz);
	byte_buf_put_u32(&row, n->sample_rate_ppm);
	byte_buf_put_u32(&row, n->online_cpus);
	ch__rb_varint(&row, b->counter_count);
	for (uint32_t i = 0; i < b->counter_count; i++)
		byte_buf_put_u16(&row, b->counters[i].id);
	ch__rb_varint(&row, b->counter_count);
	for (uint32_t i = 0; i < b->counter_count; i++)
		byte_buf_put_u64(&row, (uint64_t)clamp63(b->counters[i].value));
	/* Schema 13: what the job list's summary needs of the job ranks, committed with the
	 * batch (clickhouse_schema_summaries.c): the job_ranks rows' day, process, job, rank and
	 * world size. */
	ch__rb_date_ns(&row, clamp63(b->window_start_ns));
	ch__rb_varint(&row, b->job_rank_count);
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		byte_buf_put_u64(&row, p->processes[b->job_ranks[i].process]);
	ch__rb_varint(&row, b->job_rank_count);
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		ch__rb_str(&row, sysom_batch_string(b, b->job_ranks[i].job));
	ch__rb_varint(&row, b->job_rank_count);
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		byte_buf_put_u32(&row, (uint32_t)b->job_ranks[i].rank);
	ch__rb_varint(&row, b->job_rank_count);
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		byte_buf_put_u32(&row, (uint32_t)b->job_ranks[i].world_size);
	/* Schema 15: the processes' ids and comms, for the process names' summary. */
	ch__rb_varint(&row, b->process_count);
	for (uint32_t i = 0; i < b->process_count; i++)
		byte_buf_put_u64(&row, p->processes[i]);
	ch__rb_varint(&row, b->process_count);
	for (uint32_t i = 0; i < b->process_count; i++)
		ch__rb_str(&row, sysom_batch_string(b, b->processes[i].comm));
	rc = ch__rows_take(&p->rows, "batches", &row);
	byte_buf_free(&row);
	return rc;
}

/* One duplicate check in its group (ch__find_group_run). */
struct find_item {
	const char *node_hex;
	uint64_t epoch, sequence;
	struct store_batch_record rec; /* the answer */
};

/*
 * The duplicate checks of a group in one SELECT: the batch rows of every identity asked
 * (through the primary key: node_id, epoch, sequence), the first attempt's content hash each.
 */
int ch__find_group_run(struct ch_store *s, struct ch_group_entry *first)
{
	struct byte_buf q = { 0 }, ans = { 0 };
	struct ch_tsv t;
	char *f[4];
	int rc;

	byte_buf_printf(&q, "SELECT node_id, epoch, sequence, argMin(content_hash, attempt)"
			    " FROM batches WHERE node_id IN (");
	for (struct ch_group_entry *e = first; e; e = e->next) {
		const struct find_item *it = e->arg;

		ch__quote(&q, it->node_hex);
		byte_buf_printf(&q, "%s", e->next ? ", " : ") AND (node_id, epoch, sequence) IN (");
	}
	for (struct ch_group_entry *e = first; e; e = e->next) {
		const struct find_item *it = e->arg;

		byte_buf_printf(&q, "(");
		ch__quote(&q, it->node_hex);
		byte_buf_printf(&q, ", %llu, %llu)%s", (unsigned long long)it->epoch,
				(unsigned long long)it->sequence, e->next ? ", " : "");
	}
	byte_buf_printf(&q, ") GROUP BY node_id, epoch, sequence FORMAT TabSeparated");
	byte_buf_put_u8(&q, 0);
	if ((rc = byte_buf_error(&q)) || (rc = ch__exec(s, (const char *)q.data, NULL, 0, &ans)))
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	while ((rc = ch_tsv_row(&t, f, 4)) == 1) {
		uint64_t epoch, sequence, hash;

		if (!f[0] || ch_tsv_u64(f[1], &epoch) || ch_tsv_u64(f[2], &sequence) ||
		    ch_tsv_u64(f[3], &hash)) {
			rc = -EPROTO;
			goto cleanup;
		}
		/* The same identity may be asked twice in a group (two uploads of one batch). */
		for (struct ch_group_entry *e = first; e; e = e->next) {
			struct find_item *it = e->arg;

			if (it->epoch == epoch && it->sequence == sequence &&
			    !strcmp(it->node_hex, f[0]))
				it->rec = (struct store_batch_record){ .exists = true, .hash_known = true,
								       .content_hash = hash };
		}
	}
cleanup:
	byte_buf_free(&q);
	byte_buf_free(&ans);
	return rc;
}

/* What the store holds under an identity: a duplicate check run with the others waiting. */
static int batch_find_hex(struct ch_store *s, const char *node_hex, uint64_t epoch,
			  uint64_t sequence, struct store_batch_record *out)
{
	struct find_item it = { .node_hex = node_hex, .epoch = epoch, .sequence = sequence };
	struct ch_group_entry me = { .arg = &it, .bytes = 1 };
	int rc = ch__group_join(s, &s->finds, &me);

	if (!rc)
		*out = it.rec;
	return rc;
}

int ch__batch_find(struct store *base, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
		   uint64_t epoch, uint64_t sequence, struct store_batch_record *out)
{
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];

	store__hex(node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	return batch_find_hex(ch__store(base), node_hex, epoch, sequence, out);
}

int ch__batch_put(struct store *base, const struct sysom_batch *b, uint64_t content_hash,
		  int64_t received_ns, struct store_put_result *res)
{
	struct ch_store *s = ch__store(base);
	struct store_put_result r = { 0 };
	struct put p = { .s = s, .b = b, .received_ns = received_ns };
	pthread_mutex_t *stripe;
	int64_t *stack_ids = NULL;
	int rc;

	store__hex(b->node_id, SYSOM_NODE_ID_SIZE, p.node_hex, sizeof(p.node_hex));
	stripe = &s->stripes[sysom_hash_mix(sysom_hash64(b->node_id, SYSOM_NODE_ID_SIZE, 0),
					    b->agent_epoch ^ b->sequence) % CH_STRIPES];
	p.objects = calloc(b->object_count + 1, sizeof(*p.objects));
	p.stacks = calloc(b->stack_count + 1, sizeof(*p.stacks));
	p.processes = calloc(b->process_count + 1, sizeof(*p.processes));
	if (!p.objects || !p.stacks || !p.processes) {
		free(p.objects);
		free(p.stacks);
		free(p.processes);
		return -ENOMEM;
	}
	do {
		if (getrandom(&p.attempt, sizeof(p.attempt), 0) != sizeof(p.attempt)) {
			rc = -errno;
			free(p.objects);
			free(p.stacks);
			free(p.processes);
			return rc;
		}
	} while (!p.attempt);
	pthread_mutex_lock(stripe);
	if ((rc = batch_find_hex(s, p.node_hex, b->agent_epoch, b->sequence, &r.existing)))
		goto cleanup;
	if (r.existing.exists) {
		r.conflict = r.existing.content_hash != content_hash;
		r.duplicate = !r.conflict;
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		r.samples = b->samples[i].count > UINT64_MAX - r.samples ? UINT64_MAX
									  : r.samples + b->samples[i].count;
	if ((rc = objects_write(&p, &r)) || (rc = stacks_write(&p, &r)) ||
	    (rc = processes_write(&p, &r)) || (rc = samples_write(&p, &r)) ||
	    (rc = ch__collectives_write(&p.rows, b, p.node_hex, p.processes, received_ns,
					p.attempt, &r)) ||
	    (rc = ch__identities_write(&p.rows, b, p.node_hex, p.processes, received_ns,
				       p.attempt)))
		goto cleanup;
	if (!(stack_ids = calloc(b->stack_count + 1, sizeof(*stack_ids)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->stack_count; i++)
		stack_ids[i] = p.stacks[i].id;
	struct ch_gpu_os_put gp = { .s = s, .out = &p.rows, .b = b, .node_hex = p.node_hex,
				    .attempt = p.attempt, .processes = p.processes,
				    .stacks = stack_ids };
	if ((rc = ch__batch_write_gpu_os(&gp, &r)) || (rc = ch__batch_write_host(&gp)) ||
	    (rc = ch__batch_write_gpu_health(&gp)) || (rc = ch__batch_write_rollup(&gp)) ||
	    (rc = batch_row_write(&p, content_hash, &r)))
		goto cleanup;
	/* Everything above was queued; the batch counts once its group is inserted. */
	rc = ch__group_insert(s, &p.rows);
cleanup:
	free(stack_ids);
	pthread_mutex_unlock(stripe);
	if (!rc)
		*res = r;
	ch__batch_rows_free(&p.rows);
	byte_buf_free(&p.object_idents);
	byte_buf_free(&p.stack_idents);
	free(p.objects);
	free(p.stacks);
	free(p.processes);
	return rc;
}
