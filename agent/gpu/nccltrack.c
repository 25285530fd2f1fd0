/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator keys, per-process communicator tables and kernel names from gputrace events. */
#include "agent/gpu/nccltrack.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/gputrace.h"
#include "common/array.h"
#include "common/error.h"
#include "common/hash.h"

#define SEED_UNIQUE_ID 0x5359534f4d4e4931ull /* "SYSOMNI1" */
#define SEED_SPLIT 0x5359534f4d535031ull
#define SEED_LOCAL 0x5359534f4d4c4331ull

struct comm {
	uint64_t handle;
	struct sysom_communicator rec; /* process field unused */
	uint32_t splits;               /* successful CommSplit calls with this parent */
};

struct name {
	uint64_t handle;
	char *text;
};

struct proc {
	uint32_t tgid, generation;
	bool gone;
	struct comm *comms;
	uint32_t ncomms, comms_cap;
	struct name *names;
	uint32_t nnames, names_cap;
	struct hash_index name_index;
	bool name_index_ready;
};

struct nccltrack {
	struct nccltrack_options opts;
	struct proc *procs;
	uint32_t nprocs, procs_cap;
	uint64_t corrupt_events, table_full;
};

void nccltrack_options_default(struct nccltrack_options *o)
{
	*o = (struct nccltrack_options){ .max_processes = 4096, .max_comms = 1024,
					 .max_names = 65536 };
}

int nccltrack_new(const struct nccltrack_options *o, struct nccltrack **out)
{
	struct nccltrack *nt = calloc(1, sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	nt->opts = *o;
	*out = nt;
	return 0;
}

static void proc_free(struct proc *p)
{
	for (uint32_t i = 0; i < p->nnames; i++)
		free(p->names[i].text);
	free(p->names);
	free(p->comms);
	if (p->name_index_ready)
		hash_index_free(&p->name_index);
	memset(p, 0, sizeof(*p));
}

void nccltrack_free(struct nccltrack *nt)
{
	if (!nt)
		return;
	for (uint32_t i = 0; i < nt->nprocs; i++)
		proc_free(&nt->procs[i]);
	free(nt->procs);
	free(nt);
}

uint32_t nccltrack_datatype_size(int32_t datatype)
{
	/* ncclDataType_t: int8, uint8, int32, uint32, int64, uint64, half, float, double, bf16,
	 * fp8 e4m3, fp8 e5m2 (nccl.h). */
	static const uint8_t sizes[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };

	return datatype >= 0 && (size_t)datatype < sizeof(sizes) ? sizes[datatype] : 0;
}

static struct proc *find_proc(struct nccltrack *nt, uint32_t tgid)
{
	for (uint32_t i = 0; i < nt->nprocs; i++)
		if (nt->procs[i].tgid == tgid)
			return &nt->procs[i];
	return NULL;
}

/* The process's state, replacing an older incarnation of the same tgid. */
static struct proc *get_proc(struct nccltrack *nt, uint32_t tgid, uint32_t generation)
{
	struct proc *p = find_proc(nt, tgid);

	if (p && p->generation != generation) {
		proc_free(p);
		p->tgid = tgid;
		p->generation = generation;
		return p;
	}
	if (p)
		return p;
	if (nt->nprocs >= nt->opts.max_processes)
		return NULL;
	if (SYSOM_ARRAY_RESERVE(nt->procs, nt->procs_cap, nt->nprocs, 16))
		return NULL;
	p = &nt->procs[nt->nprocs++];
	memset(p, 0, sizeof(*p));
	p->tgid = tgid;
	p->generation = generation;
	return p;
}

static struct comm *find_comm(struct proc *p, uint64_t handle)
{
	/* Newest first: a handle reused after CommDestroy belongs to the newest communicator. */
	for (uint32_t i = p->ncomms; i-- > 0;)
		if (p->comms[i].handle == handle)
			return &p->comms[i];
	return NULL;
}

static struct comm *add_comm(struct nccltrack *nt, struct proc *p, uint64_t handle)
{
	struct comm *c;

	if (p->ncomms >= nt->opts.max_comms) {
		/* Make room by dropping the oldest destroyed communicator, else refuse. */
		uint32_t i;
		for (i = 0; i < p->ncomms && !(p->comms[i].rec.flags & SYSOM_COMM_DESTROYED); i++)
			;
		if (i == p->ncomms)
			return NULL;
		memmove(&p->comms[i], &p->comms[i + 1], (p->ncomms - i - 1) * sizeof(*p->comms));
		p->ncomms--;
	}
	if (SYSOM_ARRAY_RESERVE(p->comms, p->comms_cap, p->ncomms, 8))
		return NULL;
	c = &p->comms[p->ncomms++];
	memset(c, 0, sizeof(*c));
	c->handle = handle;
	c->rec.handle = handle;
	c->rec.rank = -1;
	c->rec.nranks = -1;
	c->rec.split_color = -1;
	c->rec.split_key = -1;
	return c;
}

static uint64_t nonzero(uint64_t key)
{
	return key ? key : 1;
}

static uint64_t local_key(const struct proc *p, uint64_t handle)
{
	return nonzero(sysom_hash_mix(sysom_hash_mix(SEED_LOCAL, (uint64_t)p->tgid << 32 |
							       p->generation), handle));
}

/* A communicator met first in a collective (its init predates the agent, or was lost). */
static struct comm *comm_from_call(struct nccltrack *nt, struct proc *p,
				   const struct gt_nccl_event *e)
{
	struct comm *c = add_comm(nt, p, e->comm);

	if (!c)
		return NULL;
	if ((e->flags & GT_COMM_FIELDS) && e->comm_hash) {
		c->rec.key = e->comm_hash;
		c->rec.key_source = SYSOM_COMM_KEY_COMM_HASH;
	} else {
		c->rec.key = local_key(p, e->comm);
		c->rec.key_source = SYSOM_COMM_KEY_LOCAL;
	}
	return c;
}

static void take_fields(struct comm *c, const struct gt_nccl_event *e)
{
	if (e->flags & GT_COMM_FIELDS) {
		c->rec.nccl_comm_hash = e->comm_hash;
		if (e->nranks > 0 && e->rank >= 0 && e->rank < e->nranks) {
			c->rec.rank = e->rank;
			c->rec.nranks = e->nranks;
		}
	}
}

static bool valid_rank(int32_t rank, int32_t nranks)
{
	return nranks > 0 && rank >= 0 && rank < nranks;
}

/* CommInitRank[Config|Scalable], CommInitAll and CommSplit returned. */
static int on_init(struct nccltrack *nt, struct proc *p, const struct gt_nccl_init_event *ie,
		   int64_t to_real, uint64_t *key_out)
{
	const struct gt_nccl_event *e = &ie->call;
	struct comm *c;

	*key_out = 0;
	if (e->result != 0)
		return 0; /* nothing was created */
	if (e->fn == GT_NCCL_COMM_INIT_ALL) {
		int32_t n = e->nranks;
		uint64_t key = local_key(p, ie->comms[0]);

		if (n <= 0)
			return 0;
		if (n > GT_INIT_ALL_MAX)
			n = GT_INIT_ALL_MAX;
		for (int32_t i = 0; i < n; i++) {
			if (!ie->comms[i])
				continue;
			if (!(c = add_comm(nt, p, ie->comms[i])))
				return -ENOSPC;
			c->rec.key = key;
			c->rec.key_source = SYSOM_COMM_KEY_LOCAL;
			c->rec.rank = i;
			c->rec.nranks = e->nranks;
			c->rec.created_ns = e->exit_ns + (uint64_t)to_real;
		}
		*key_out = key;
		return 0;
	}
	if (!e->comm)
		return 0; /* CommSplit with NCCL_SPLIT_NOCOLOR: no communicator for this rank */
	if (e->fn == GT_NCCL_COMM_SPLIT) {
		struct comm *parent = find_comm(p, e->parent);
		uint64_t parent_key = parent ? parent->rec.key : 0;
		uint32_t ordinal = parent ? ++parent->splits : 0;

		if (!(c = add_comm(nt, p, e->comm)))
			return -ENOSPC;
		take_fields(c, e);
		c->rec.split_color = e->color;
		c->rec.split_key = e->key;
		c->rec.split_ordinal = ordinal;
		c->rec.parent_key = parent_key;
		if (parent && parent->rec.key_source != SYSOM_COMM_KEY_LOCAL) {
			uint64_t h = sysom_hash_mix(SEED_SPLIT, parent_key);
			h = sysom_hash_mix(h, ordinal);
			c->rec.key = nonzero(sysom_hash_mix(h, (uint32_t)e->color));
			c->rec.key_source = SYSOM_COMM_KEY_SPLIT;
		} else if ((e->flags & GT_COMM_FIELDS) && e->comm_hash) {
			c->rec.key = e->comm_hash;
			c->rec.key_source = SYSOM_COMM_KEY_COMM_HASH;
		} else {
			c->rec.key = local_key(p, e->comm);
			c->rec.key_source = SYSOM_COMM_KEY_LOCAL;
		}
	} else {
		if (!(c = add_comm(nt, p, e->comm)))
			return -ENOSPC;
		c->rec.key = nonzero(sysom_hash64(ie->unique_id, sizeof(ie->unique_id),
						  SEED_UNIQUE_ID));
		c->rec.key_source = SYSOM_COMM_KEY_UNIQUE_ID;
		if (valid_rank(e->rank, e->nranks)) {
			c->rec.rank = e->rank;
			c->rec.nranks = e->nranks;
		}
		take_fields(c, e);
	}
	c->rec.created_ns = e->exit_ns + (uint64_t)to_real;
	*key_out = c->rec.key;
	return 0;
}

static int add_name(struct nccltrack *nt, struct proc *p, uint64_t handle, const char *text,
		    size_t len)
{
	uint64_t h = sysom_hash_mix(0, handle);
	char *copy;
	int rc;

	if (!p->name_index_ready) {
		if ((rc = hash_index_init(&p->name_index, 256)))
			return rc;
		p->name_index_ready = true;
	}
	if (p->nnames >= nt->opts.max_names)
		return -ENOSPC;
	if (SYSOM_ARRAY_RESERVE(p->names, p->names_cap, p->nnames, 64))
		return -ENOMEM;
	/* `text` need not be NUL-terminated within `len` bytes (a ring event's name buffer). */
	if (!(copy = malloc(len + 1)))
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	for (char *s = copy; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
	p->names[p->nnames] = (struct name){ handle, copy };
	if ((rc = hash_index_insert(&p->name_index, h, p->nnames))) {
		free(copy);
		return rc;
	}
	p->nnames++;
	return 0;
}

struct name_probe {
	const struct proc *p;
	uint64_t handle;
};

static bool name_eq(const void *ctx, uint32_t i)
{
	const struct name_probe *k = ctx;

	return k->p->names[i].handle == k->handle;
}

static const char *find_name(const struct proc *p, uint64_t handle)
{
	struct name_probe k = { p, handle };
	uint32_t i;

	if (!p->name_index_ready)
		return NULL;
	i = hash_index_find(&p->name_index, sysom_hash_mix(0, handle), name_eq, &k);
	return i == HASH_INDEX_NONE ? NULL : p->names[i].text;
}

static int on_name(struct nccltrack *nt, const struct gt_name_event *e)
{
	struct proc *p = get_proc(nt, e->tgid, e->generation);
	const char *text;
	size_t len;

	if (!p)
		return -ENOSPC;
	if (e->type == GT_EVENT_CU_ALIAS) {
		text = find_name(p, e->source);
		if (!text)
			return 0; /* the kernel's name was never seen */
		len = strlen(text);
	} else {
		text = e->name;
		len = e->name_len < GT_NAME_MAX ? e->name_len : GT_NAME_MAX - 1;
		len = strnlen(text, len);
	}
	if (find_name(p, e->handle))
		return 0; /* the first name of a handle stays (handles are not reused while loaded) */
	return add_name(nt, p, e->handle, text, len);
}

int nccltrack_event(struct nccltrack *nt, const void *data, size_t len, int64_t mono_to_real_ns,
		    struct nccltrack_call *out)
{
	const struct gt_nccl_event *e = data;
	struct sysom_nccl_call *c = &out->call;
	uint32_t type;
	struct proc *p;
	struct comm *cm = NULL;
	uint64_t key = 0;
	int rc;

	if (len < sizeof(type))
		goto corrupt;
	memcpy(&type, data, sizeof(type));
	switch (type) {
	case GT_EVENT_CU_NAME:
	case GT_EVENT_CU_ALIAS:
		if (len != sizeof(struct gt_name_event))
			goto corrupt;
		rc = on_name(nt, data);
		if (rc == -ENOSPC)
			nt->table_full++;
		return rc == -ENOSPC ? rc : (rc < 0 ? rc : 0);
	case GT_EVENT_NCCL_CALL:
		if (len != sizeof(struct gt_nccl_event))
			goto corrupt;
		break;
	case GT_EVENT_NCCL_INIT:
		if (len != sizeof(struct gt_nccl_init_event))
			goto corrupt;
		break;
	default:
		goto corrupt;
	}
	if (e->fn == 0 || e->fn > GT_NCCL_LAST || e->exit_ns < e->entry_ns)
		goto corrupt;
	if (!(p = get_proc(nt, e->tgid, e->generation))) {
		nt->table_full++;
		return -ENOSPC;
	}
	memset(out, 0, sizeof(*out));
	out->tgid = e->tgid;
	out->generation = e->generation;
	c->rank = -1;
	if (type == GT_EVENT_NCCL_INIT) {
		if ((rc = on_init(nt, p, data, mono_to_real_ns, &key)) == -ENOSPC)
			nt->table_full++;
		if (key)
			cm = find_comm(p, e->comm);
	} else if (e->comm) {
		cm = find_comm(p, e->comm);
		if (!cm && sysom_nccl_op_is_collective(e->fn) && !(cm = comm_from_call(nt, p, e)))
			nt->table_full++;
		if (cm && (e->fn == GT_NCCL_COMM_DESTROY || e->fn == GT_NCCL_COMM_ABORT) &&
		    e->result == 0)
			cm->rec.flags |= SYSOM_COMM_DESTROYED;
		if (cm && sysom_nccl_op_is_collective(e->fn))
			take_fields(cm, e);
	}
	if (cm) {
		key = cm->rec.key;
		c->rank = cm->rec.rank;
	}
	if ((e->flags & GT_COMM_FIELDS) && valid_rank(e->rank, e->nranks))
		c->rank = e->rank;
	c->tid = e->tid;
	c->comm_key = key;
	c->seq = e->seq;
	c->entry_ns = e->entry_ns + (uint64_t)mono_to_real_ns;
	c->exit_ns = e->exit_ns + (uint64_t)mono_to_real_ns;
	c->op = e->fn;
	c->datatype = e->datatype >= 0 && e->datatype < SYSOM_NCCL_NO_DATATYPE
			      ? (uint8_t)e->datatype : SYSOM_NCCL_NO_DATATYPE;
	c->redop = e->redop >= 0 && e->redop < SYSOM_NCCL_NO_REDOP ? (uint8_t)e->redop
								    : SYSOM_NCCL_NO_REDOP;
	c->flags = (e->flags & GT_IN_GROUP) ? SYSOM_NCCL_IN_GROUP : 0;
	c->count = e->count;
	c->bytes = e->count * nccltrack_datatype_size(e->datatype);
	c->stream = e->stream;
	c->peer = e->peer >= 0 ? e->peer : -1;
	/* A Send/Recv peer outside its communicator cannot be paired: none (-1). */
	if ((e->fn == SYSOM_NCCL_SEND || e->fn == SYSOM_NCCL_RECV) && cm && cm->rec.nranks > 0 &&
	    e->peer >= cm->rec.nranks)
		c->peer = -1;
	c->result = e->result;
	if (!sysom_nccl_op_is_collective(e->fn))
		c->seq = 0;
	return 1;
corrupt:
	nt->corrupt_events++;
	return -SYSOM_ECORRUPT;
}

void nccltrack_for_each_comm(const struct nccltrack *nt, nccltrack_comm_fn fn, void *ctx)
{
	for (uint32_t i = 0; i < nt->nprocs; i++) {
		const struct proc *p = &nt->procs[i];
		for (uint32_t j = 0; j < p->ncomms; j++)
			fn(ctx, p->tgid, p->generation, &p->comms[j].rec);
	}
}

const char *nccltrack_kernel_name(const struct nccltrack *nt, uint32_t tgid, uint64_t handle)
{
	for (uint32_t i = 0; i < nt->nprocs; i++)
		if (nt->procs[i].tgid == tgid)
			return find_name(&nt->procs[i], handle);
	return NULL;
}

void nccltrack_forget(struct nccltrack *nt, uint32_t tgid)
{
	struct proc *p = find_proc(nt, tgid);

	if (p)
		p->gone = true;
}

void nccltrack_prune(struct nccltrack *nt)
{
	for (uint32_t i = 0; i < nt->nprocs;) {
		struct proc *p = &nt->procs[i];

		if (p->gone) {
			proc_free(p);
			nt->procs[i] = nt->procs[--nt->nprocs];
			continue;
		}
		uint32_t kept = 0;
		for (uint32_t j = 0; j < p->ncomms; j++)
			if (!(p->comms[j].rec.flags & SYSOM_COMM_DESTROYED))
				p->comms[kept++] = p->comms[j];
		p->ncomms = kept;
		i++;
	}
}

void nccltrack_stats_read(const struct nccltrack *nt, struct nccltrack_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->processes = nt->nprocs;
	for (uint32_t i = 0; i < nt->nprocs; i++) {
		out->communicators += nt->procs[i].ncomms;
		out->names += nt->procs[i].nnames;
	}
	out->corrupt_events = nt->corrupt_events;
	out->table_full = nt->table_full;

}
