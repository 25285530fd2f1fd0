/* SPDX-License-Identifier: Apache-2.0 */
/* Decoders of component telemetry records (docs/channel-records.md). */
#include "agent/ranks/channel.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/error.h"

/*
 * Producers run on the agent's own host (the socket is a local Unix socket), so the payload
 * structs are read with memcpy in the host's layout: include/sysom/records.h fixes their sizes
 * and offsets with static assertions, and both sides are little-endian on every supported
 * architecture (x86-64, arm64).
 */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "records are little-endian");

/* Copies text of at most `len` bytes (cut at the first NUL) into `out` (SYSOM_REC_NAME_MAX + 1
 * bytes), replacing control characters with spaces. -EINVAL when it is too long. */
static int copy_name(const uint8_t *p, size_t len, char *out)
{
	size_t n = 0;

	while (n < len && p[n])
		n++;
	if (n > SYSOM_REC_NAME_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		out[i] = p[i] < 0x20 || p[i] == 0x7f ? ' ' : (char)p[i];
	out[n] = '\0';
	return 0;
}

int channel_decode_hello(const uint8_t *p, size_t len, struct channel_hello *out)
{
	struct sysom_rec_hello h;
	struct channel_hello o;
	int rc;

	if (len < sizeof(h))
		return -SYSOM_ECORRUPT;
	memcpy(&h, p, sizeof(h));
	if (h.reserved[0] || h.reserved[1])
		return -SYSOM_ECORRUPT;
	memset(&o, 0, sizeof(o));
	o.component = h.component;
	o.interface = h.interface;
	o.activation_mask = h.activation_mask;
	if ((rc = copy_name(p + sizeof(h), len - sizeof(h), o.name)))
		return rc;
	*out = o;
	return 0;
}

int channel_decode_comm(const uint8_t *p, size_t len, struct channel_comm *out)
{
	struct sysom_rec_comm c;
	struct channel_comm o;
	int rc;

	if (len < sizeof(c))
		return -SYSOM_ECORRUPT;
	memcpy(&c, p, sizeof(c));
	if (c.comm_id == 0 || c.nranks < 1 || c.nranks > (1 << 24) || c.rank < 0 ||
	    c.rank >= c.nranks || c.nnodes < 1 || c.nnodes > c.nranks ||
	    (c.flags & ~(uint32_t)SYSOM_REC_COMM_FINALIZED))
		return -EINVAL;
	memset(&o, 0, sizeof(o));
	o.comm_id = c.comm_id;
	o.rank = c.rank;
	o.nranks = c.nranks;
	o.nnodes = c.nnodes;
	o.flags = c.flags;
	if ((rc = copy_name(p + sizeof(c), len - sizeof(c), o.name)))
		return rc;
	*out = o;
	return 0;
}

static size_t known_entry_size(uint16_t type)
{
	switch (type) {
	case SYSOM_REC_NCCL_COLL:
		return sizeof(struct sysom_rec_coll);
	case SYSOM_REC_NCCL_LINK:
		return sizeof(struct sysom_rec_link);
	case SYSOM_REC_GPU_KERNEL:
		return sizeof(struct sysom_rec_kernel);
	default:
		return 0;
	}
}

/* The entry prefix this agent knows, zero-filled past entry_size (never: entry_size >= known). */
static void copy_entry(const struct channel_table *t, uint32_t i, void *out, size_t known)
{
	memcpy(out, t->entries + (size_t)i * t->entry_size, known);
}

void channel_table_coll(const struct channel_table *t, uint32_t i, struct sysom_rec_coll *out)
{
	copy_entry(t, i, out, sizeof(*out));
}

void channel_table_link(const struct channel_table *t, uint32_t i, struct sysom_rec_link *out)
{
	copy_entry(t, i, out, sizeof(*out));
}

void channel_table_kernel(const struct channel_table *t, uint32_t i, struct sysom_rec_kernel *out)
{
	copy_entry(t, i, out, sizeof(*out));
}

/* A string offset must name the start of a string: 0 ("") or just after a NUL; the string is
 * at most CHANNEL_MAX_STRING bytes (a longer one would make the batch undecodable). */
static bool string_ok(const struct channel_table *t, uint32_t off, bool nonempty)
{
	if (off >= t->strings_size || (off > 0 && t->strings[off - 1] != '\0'))
		return false;
	if (strnlen(t->strings + off, CHANNEL_MAX_STRING + 1) > CHANNEL_MAX_STRING)
		return false;
	return !nonempty || t->strings[off] != '\0';
}

static int check_coll(const struct channel_table *t, const struct sysom_rec_coll *e)
{
	if (!string_ok(t, e->func, true) || !string_ok(t, e->algo, false) ||
	    !string_ok(t, e->proto, false) || !string_ok(t, e->datatype, false))
		return -SYSOM_ECORRUPT;
	if (e->count == 0 || e->kernel_timed > e->count || e->span_timed > e->count ||
	    e->peer < -1 || e->nchannels > CHANNEL_MAX_CHANNELS || e->first_seq > e->last_seq ||
	    (e->kernel_timed && e->kernel_ns_min > e->kernel_ns_max) ||
	    (!e->kernel_timed && (e->kernel_ns_total || e->kernel_ns_min || e->kernel_ns_max)))
		return -EINVAL;
	return 0;
}

static bool finite_all(const double *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(v[i]))
			return false;
	return true;
}

static bool finite_or_nan(double v)
{
	return isfinite(v) || isnan(v);
}

static int check_link(const struct sysom_rec_link *e)
{
	const double sums[] = { e->sx, e->sy, e->sxx, e->sxy, e->syy };

	if (e->transfers == 0 || e->peer < 0 || e->channel < -1 ||
	    e->channel >= CHANNEL_MAX_CHANNELS || !finite_all(sums, 5) ||
	    !finite_or_nan(e->min_latency_ns) || !finite_or_nan(e->min_bytes_per_ns) ||
	    !finite_or_nan(e->min_r2) || e->reserved)
		return -EINVAL;
	return 0;
}

static int check_kernel(const struct channel_table *t, const struct sysom_rec_kernel *e)
{
	uint64_t sum = 0;

	if (!string_ok(t, e->name, true))
		return -SYSOM_ECORRUPT;
	for (unsigned b = 0; b < SYSOM_REC_HIST_BUCKETS; b++)
		sum += e->hist[b];
	if (e->count == 0 || e->min_ns > e->max_ns || sum != e->count || e->total_ns < e->max_ns)
		return -EINVAL;
	return 0;
}

int channel_decode_table(const uint8_t *p, size_t len, uint16_t type, struct channel_table *out)
{
	struct sysom_rec_table h;
	struct channel_table t;
	size_t known = known_entry_size(type), body;
	int rc;

	if (!known)
		return -EINVAL;
	if (len < sizeof(h))
		return -SYSOM_ECORRUPT;
	memcpy(&h, p, sizeof(h));
	if (h.entry_size < known || h.entry_size > CHANNEL_MAX_ENTRY_SIZE || h.entry_count == 0 ||
	    h.strings_size == 0)
		return -SYSOM_ECORRUPT;
	body = (size_t)h.entry_size * h.entry_count;
	if (len - sizeof(h) < body || len - sizeof(h) - body != h.strings_size)
		return -SYSOM_ECORRUPT;
	if (h.window_end_ns < h.window_start_ns)
		return -EINVAL;
	t.type = type;
	t.entry_size = h.entry_size;
	t.entry_count = h.entry_count;
	t.comm_id = h.comm_id;
	t.window_start_ns = h.window_start_ns;
	t.window_end_ns = h.window_end_ns;
	t.entries = p + sizeof(h);
	t.strings = (const char *)p + sizeof(h) + body;
	t.strings_size = h.strings_size;
	if (t.strings[t.strings_size - 1] != '\0' || t.strings[0] != '\0')
		return -SYSOM_ECORRUPT;
	if (type != SYSOM_REC_GPU_KERNEL && t.comm_id == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < t.entry_count; i++) {
		if (type == SYSOM_REC_NCCL_COLL) {
			struct sysom_rec_coll e;

			channel_table_coll(&t, i, &e);
			rc = check_coll(&t, &e);
		} else if (type == SYSOM_REC_NCCL_LINK) {
			struct sysom_rec_link e;

			channel_table_link(&t, i, &e);
			rc = check_link(&e);
		} else {
			struct sysom_rec_kernel e;

			channel_table_kernel(&t, i, &e);
			rc = check_kernel(&t, &e);
		}
		if (rc)
			return rc;
	}
	*out = t;
	return 0;
}

int channel_decode_stats(const uint8_t *p, size_t len, uint64_t values[CHANNEL_STAT_MAX + 1],
			 bool present[CHANNEL_STAT_MAX + 1])
{
	uint64_t v[CHANNEL_STAT_MAX + 1] = { 0 };
	bool seen[CHANNEL_STAT_MAX + 1] = { false };

	if (len % sizeof(struct sysom_rec_stat))
		return -SYSOM_ECORRUPT;
	for (size_t off = 0; off < len; off += sizeof(struct sysom_rec_stat)) {
		struct sysom_rec_stat s;

		memcpy(&s, p + off, sizeof(s));
		if (s.reserved[0] || s.reserved[1] || s.reserved[2])
			return -SYSOM_ECORRUPT;
		if (s.id == 0 || s.id > CHANNEL_STAT_MAX)
			continue; /* a newer component's counter */
		if (seen[s.id])
			return -SYSOM_ECORRUPT;
		seen[s.id] = true;
		v[s.id] = s.value;
	}
	memcpy(values, v, sizeof(v));
	memcpy(present, seen, sizeof(seen));
	return 0;
}
