/* SPDX-License-Identifier: Apache-2.0 */
/* Re-stamps a captured agent batch as if another node had sent it (tests/support/batch_stamp.h). */
#include "tests/support/batch_stamp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "include/sysom/nccl_ops.h"

/* A string whose text changes with every stamp: room reserved at the end of string_data. */
struct slot {
	uint32_t index;    /* string index in the batch */
	uint32_t capacity; /* bytes reserved, the NUL included */
	uint32_t source;   /* job slots: the captured job id's string index */
};

struct batch_stamp {
	struct sysom_batch batch;  /* owned; the stamped fields are rewritten by every encode */
	uint64_t window_start_ns;  /* as captured */
	uint64_t window_end_ns;
	struct slot hostname;
	struct slot *jobs;         /* one per distinct non-empty job id */
	uint32_t njobs;
	/* The captured records that stamping changes, restored before each stamp. */
	struct sysom_communicator *communicators;
	struct sysom_nccl_call *nccl_calls;
	struct sysom_nccl_profile *nccl_profiles;
	struct sysom_nccl_link *nccl_links;
	uint64_t seq_span;
};

static void *memdup_array(const void *src, size_t n, size_t size)
{
	void *p;

	if (n == 0)
		return NULL;
	p = malloc(n * size);
	if (p)
		memcpy(p, src, n * size);
	return p;
}

/* Appends an empty string with `capacity` bytes of room; *slot gets its index. */
static int slot_append(struct sysom_batch *b, uint32_t capacity, uint32_t source, struct slot *slot)
{
	if (b->string_count == b->string_cap) {
		uint32_t cap = b->string_cap ? b->string_cap * 2 : 16;
		void *p = realloc(b->strings, (size_t)cap * sizeof(*b->strings));
		if (!p)
			return -ENOMEM;
		b->strings = p;
		b->string_cap = cap;
	}
	if (b->string_data_len + capacity > b->string_data_cap) {
		size_t cap = (b->string_data_len + capacity) * 2;
		char *p = realloc(b->string_data, cap);
		if (!p)
			return -ENOMEM;
		b->string_data = p;
		b->string_data_cap = cap;
	}
	b->strings[b->string_count] = (struct sysom_string_ref){ (uint32_t)b->string_data_len, 0 };
	b->string_data[b->string_data_len] = '\0';
	*slot = (struct slot){ b->string_count, capacity, source };
	b->string_data_len += capacity;
	b->string_count++;
	return 0;
}

/* Writes `len` bytes of text into a slot (truncated to its room). */
static void slot_write(struct sysom_batch *b, const struct slot *slot, const char *text, size_t len)
{
	struct sysom_string_ref *ref = &b->strings[slot->index];

	if (len > slot->capacity - 1)
		len = slot->capacity - 1;
	memcpy(b->string_data + ref->offset, text, len);
	b->string_data[ref->offset + len] = '\0';
	ref->length = (uint32_t)len;
}

static struct slot *job_slot(struct batch_stamp *t, uint32_t source)
{
	for (uint32_t i = 0; i < t->njobs; i++)
		if (t->jobs[i].source == source)
			return &t->jobs[i];
	return NULL;
}

/* Adds the job slots and the hostname slot and points the records at them. */
static int slots_make(struct batch_stamp *t)
{
	struct sysom_batch *b = &t->batch;
	int rc;

	t->jobs = calloc(b->job_rank_count ? b->job_rank_count : 1, sizeof(*t->jobs));
	if (!t->jobs)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		uint32_t job = b->job_ranks[i].job;
		if (b->strings[job].length == 0 || job_slot(t, job))
			continue;
		/* "<job id>-<hostname>" and its NUL. */
		rc = slot_append(b, b->strings[job].length + 1 + BATCH_STAMP_HOSTNAME_MAX + 1, job,
				 &t->jobs[t->njobs]);
		if (rc)
			return rc;
		t->njobs++;
	}
	if ((rc = slot_append(b, BATCH_STAMP_HOSTNAME_MAX + 1, b->node.hostname, &t->hostname)))
		return rc;
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		struct slot *s = job_slot(t, b->job_ranks[i].job);
		if (s)
			b->job_ranks[i].job = s->index;
	}
	b->node.hostname = t->hostname.index;
	return 0;
}

static uint64_t seq_span_of(const struct sysom_batch *b)
{
	uint64_t span = 0;

	for (uint32_t i = 0; i < b->nccl_call_count; i++)
		if (sysom_nccl_op_is_collective(b->nccl_calls[i].op) && b->nccl_calls[i].seq >= span)
			span = b->nccl_calls[i].seq + 1;
	for (uint32_t i = 0; i < b->nccl_profile_count; i++)
		if (b->nccl_profiles[i].last_seq >= span)
			span = b->nccl_profiles[i].last_seq + 1;
	return span;
}

int batch_stamp_new(struct sysom_batch *captured, struct batch_stamp **out)
{
	const struct sysom_string_ref *src;
	struct batch_stamp *t = NULL;
	int rc = -ENOMEM;

	*out = NULL;
	if (captured->dedup || captured->string_count == 0) {
		sysom_batch_free(captured);
		memset(captured, 0, sizeof(*captured));
		return -EINVAL;
	}
	if (!(t = calloc(1, sizeof(*t)))) {
		sysom_batch_free(captured);
		memset(captured, 0, sizeof(*captured));
		return -ENOMEM;
	}
	t->batch = *captured;
	memset(captured, 0, sizeof(*captured));
	/* In-flight calls go: their return would come in the node's next batch with the same
	 * seq, but every copy's seqs move on, so each copy's in-flight collectives would wait
	 * forever (a hang for the server's detector at every replay). */
	uint32_t returned = 0;
	for (uint32_t i = 0; i < t->batch.nccl_call_count; i++)
		if (!(t->batch.nccl_calls[i].flags & SYSOM_NCCL_IN_FLIGHT))
			t->batch.nccl_calls[returned++] = t->batch.nccl_calls[i];
	t->batch.nccl_call_count = returned;
	t->window_start_ns = t->batch.window_start_ns;
	t->window_end_ns = t->batch.window_end_ns;
	t->seq_span = seq_span_of(&t->batch);
	t->communicators = memdup_array(t->batch.communicators, t->batch.communicator_count,
					sizeof(*t->batch.communicators));
	t->nccl_calls = memdup_array(t->batch.nccl_calls, t->batch.nccl_call_count,
				     sizeof(*t->batch.nccl_calls));
	t->nccl_profiles = memdup_array(t->batch.nccl_profiles, t->batch.nccl_profile_count,
					sizeof(*t->batch.nccl_profiles));
	t->nccl_links = memdup_array(t->batch.nccl_links, t->batch.nccl_link_count,
				     sizeof(*t->batch.nccl_links));
	if ((t->batch.communicator_count && !t->communicators) ||
	    (t->batch.nccl_call_count && !t->nccl_calls) ||
	    (t->batch.nccl_profile_count && !t->nccl_profiles) ||
	    (t->batch.nccl_link_count && !t->nccl_links))
		goto cleanup;
	if ((rc = slots_make(t)))
		goto cleanup;
	/* Until the first stamp the slots hold the captured text. */
	for (uint32_t i = 0; i < t->njobs; i++) {
		src = &t->batch.strings[t->jobs[i].source];
		slot_write(&t->batch, &t->jobs[i], t->batch.string_data + src->offset, src->length);
	}
	src = &t->batch.strings[t->hostname.source];
	slot_write(&t->batch, &t->hostname, t->batch.string_data + src->offset, src->length);
	*out = t;
	t = NULL;
cleanup:
	batch_stamp_free(t);
	return rc;
}

void batch_stamp_free(struct batch_stamp *t)
{
	if (!t)
		return;
	sysom_batch_free(&t->batch);
	free(t->jobs);
	free(t->communicators);
	free(t->nccl_calls);
	free(t->nccl_profiles);
	free(t->nccl_links);
	free(t);
}

uint64_t batch_stamp_seq_span(const struct batch_stamp *t)
{
	return t->seq_span;
}

const struct sysom_batch *batch_stamp_batch(const struct batch_stamp *t)
{
	return &t->batch;
}

/* A communicator key or comm hash of the simulated node: 0 (none) stays 0, and a key is never
 * turned into 0. */
static uint64_t salted(uint64_t key, uint64_t salt)
{
	return key == 0 || key == salt ? key : key ^ salt;
}

/* A time of the captured window moved by `shift` (mod 2^64); 0 (unknown) stays 0. */
static uint64_t shifted(uint64_t ns, uint64_t shift)
{
	return ns ? ns + shift : 0;
}

int batch_stamp_encode(struct batch_stamp *t, const struct batch_stamp_identity *id,
		       struct byte_buf *out)
{
	struct sysom_batch *b = &t->batch;
	uint64_t length = t->window_end_ns - t->window_start_ns, shift;
	size_t hostname_len = id->hostname ? strnlen(id->hostname, BATCH_STAMP_HOSTNAME_MAX + 1) : 0;

	if (hostname_len == 0 || hostname_len > BATCH_STAMP_HOSTNAME_MAX || id->sequence == 0 ||
	    id->key_salt == 0 || id->window_end_ns < length)
		return -EINVAL;
	shift = id->window_end_ns - t->window_end_ns;
	memcpy(b->node_id, id->node_id, SYSOM_NODE_ID_SIZE);
	b->agent_epoch = id->epoch;
	b->sequence = id->sequence;
	b->window_end_ns = id->window_end_ns;
	b->window_start_ns = id->window_end_ns - length;

	slot_write(b, &t->hostname, id->hostname, hostname_len);
	for (uint32_t i = 0; i < t->njobs; i++) {
		const struct slot *s = &t->jobs[i];
		const struct sysom_string_ref *src = &b->strings[s->source];
		char *dst = b->string_data + b->strings[s->index].offset;

		/* The slot has room for both parts, a '-' and the NUL. */
		memcpy(dst, b->string_data + src->offset, src->length);
		dst[src->length] = '-';
		memcpy(dst + src->length + 1, id->hostname, hostname_len);
		dst[src->length + 1 + hostname_len] = '\0';
		b->strings[s->index].length = src->length + 1 + (uint32_t)hostname_len;
	}

	for (uint32_t i = 0; i < b->communicator_count; i++) {
		struct sysom_communicator *c = &b->communicators[i];
		*c = t->communicators[i];
		c->key = salted(c->key, id->key_salt);
		c->parent_key = salted(c->parent_key, id->key_salt);
		c->nccl_comm_hash = salted(c->nccl_comm_hash, id->key_salt);
		c->created_ns = shifted(c->created_ns, shift);
	}
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		struct sysom_nccl_call *c = &b->nccl_calls[i];
		*c = t->nccl_calls[i];
		c->comm_key = salted(c->comm_key, id->key_salt);
		if (sysom_nccl_op_is_collective(c->op))
			c->seq += id->seq_offset;
		c->entry_ns = shifted(c->entry_ns, shift);
		c->exit_ns = shifted(c->exit_ns, shift);
	}
	for (uint32_t i = 0; i < b->nccl_profile_count; i++) {
		struct sysom_nccl_profile *p = &b->nccl_profiles[i];
		*p = t->nccl_profiles[i];
		p->comm_id = salted(p->comm_id, id->key_salt);
		if (p->peer < 0) { /* collectives; P2P rows carry no range (0, 0) */
			p->first_seq += id->seq_offset;
			p->last_seq += id->seq_offset;
		}
	}
	for (uint32_t i = 0; i < b->nccl_link_count; i++) {
		struct sysom_nccl_link *l = &b->nccl_links[i];
		*l = t->nccl_links[i];
		l->comm_id = salted(l->comm_id, id->key_salt);
	}
	return sysom_batch_encode(b, out);
}
