/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded, fully validating decoder for wire format version 1. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/wire/wire.h"
#include "common/wire/wire_internal.h"
#include "common/wire/wire_layout.h"

struct decoder {
	const uint8_t *data;
	size_t len;
	const struct sysom_wire_limits *limits;
	struct sysom_batch *batch;
	struct sysom_wire_error *err;
};

struct section {
	uint16_t type;
	uint32_t count;
	uint32_t offset;
	uint32_t size;
	bool present;
};

__attribute__((format(printf, 4, 5))) static int fail(struct decoder *d, size_t offset, int code,
						       const char *fmt, ...)
{
	if (d->err) {
		va_list ap;

		d->err->offset = offset;
		va_start(ap, fmt);
		vsnprintf(d->err->message, sizeof(d->err->message), fmt, ap);
		va_end(ap);
	}
	return code;
}

#define CORRUPT(d, off, ...) fail((d), (off), -SYSOM_ECORRUPT, __VA_ARGS__)

/* Field offsets: common/wire/wire_layout.h, shared with the encoder. */

/* Whether the `n` bytes at `p` (a reserved field) are all zero. */
static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static const char *section_name(uint16_t type)
{
	switch (type) {
	case SYSOM_SECTION_STRINGS:
		return "STRINGS";
	case SYSOM_SECTION_NODE:
		return "NODE";
	case SYSOM_SECTION_OBJECTS:
		return "OBJECTS";
	case SYSOM_SECTION_PROCESSES:
		return "PROCESSES";
	case SYSOM_SECTION_MAPPINGS:
		return "MAPPINGS";
	case SYSOM_SECTION_STACKS:
		return "STACKS";
	case SYSOM_SECTION_SAMPLES:
		return "SAMPLES";
	case SYSOM_SECTION_COUNTERS:
		return "COUNTERS";
	case SYSOM_SECTION_JOB_RANKS:
		return "JOB_RANKS";
	case SYSOM_SECTION_COMMUNICATORS:
		return "COMMUNICATORS";
	case SYSOM_SECTION_NCCL_CALLS:
		return "NCCL_CALLS";
	case SYSOM_SECTION_LAUNCHES:
		return "LAUNCHES";
	case SYSOM_SECTION_GPU_KERNELS:
		return "GPU_KERNELS";
	case SYSOM_SECTION_NCCL_PROFILES:
		return "NCCL_PROFILES";
	case SYSOM_SECTION_NCCL_LINKS:
		return "NCCL_LINKS";
	case SYSOM_SECTION_OS_CPUS:
		return "OS_CPUS";
	case SYSOM_SECTION_OS_IRQS:
		return "OS_IRQS";
	case SYSOM_SECTION_OS_THREADS:
		return "OS_THREADS";
	case SYSOM_SECTION_OFFCPU:
		return "OFFCPU";
	case SYSOM_SECTION_IDENTITIES:
		return "IDENTITIES";
	case SYSOM_SECTION_GPU_HEALTH:
		return "GPU_HEALTH";
	case SYSOM_SECTION_HOST_SIGNALS:
		return "HOST_SIGNALS";
	}
	return "unknown";
}

/* Checks a section's record count against its limit and, for fixed-size records, its size. */
static int check_count(struct decoder *d, const struct section *s, uint32_t limit,
		       size_t record_size)
{
	if (s->count > limit)
		return fail(d, s->offset, -SYSOM_ELIMIT, "%s: %u records exceed the limit of %u",
			    section_name(s->type), s->count, limit);
	if (record_size && (uint64_t)s->count * record_size != s->size)
		return CORRUPT(d, s->offset, "%s: size %u is not %u records of %zu bytes",
			       section_name(s->type), s->size, s->count, record_size);
	return 0;
}

/* Allocates `count` elements (count already bounded by the limits and the section size). */
static int alloc_array(void **array, uint32_t *cap, uint32_t count, size_t elem_size)
{
	if (count == 0)
		return 0;
	*array = calloc(count, elem_size);
	if (!*array)
		return -ENOMEM;
	*cap = count;
	return 0;
}

static int decode_strings(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	struct byte_reader r;
	int err;

	if ((err = check_count(d, s, d->limits->max_strings, 0)))
		return err;
	if (s->count == 0)
		return CORRUPT(d, s->offset, "STRINGS: empty (string 0 must be \"\")");
	if (s->count > s->size / 4)
		return CORRUPT(d, s->offset, "STRINGS: %u strings cannot fit in %u bytes", s->count,
			       s->size);
	if ((err = alloc_array((void **)&b->strings, &b->string_cap, s->count, sizeof(*b->strings))))
		return err;
	/* Each string gains one NUL; the section size bounds the data. */
	b->string_data_cap = (size_t)s->size + s->count;
	b->string_data = malloc(b->string_data_cap);
	if (!b->string_data)
		return -ENOMEM;
	byte_reader_init(&r, d->data, d->len);
	r.pos = d->data + s->offset;
	r.end = r.pos + s->size;
	for (uint32_t i = 0; i < s->count; i++) {
		uint32_t len, idx;
		size_t at = byte_reader_offset(&r);

		if (byte_reader_left(&r) < WIRE_STRING_LENGTH_SIZE)
			return CORRUPT(d, at, "STRINGS: string %u: truncated length", i);
		len = load_le32(r.pos);
		r.pos += WIRE_STRING_LENGTH_SIZE;
		if (len > d->limits->max_string_len)
			return fail(d, at, -SYSOM_ELIMIT,
				    "STRINGS: string %u: length %u exceeds the limit of %u", i, len,
				    d->limits->max_string_len);
		if (byte_reader_left(&r) < len)
			return CORRUPT(d, at, "STRINGS: string %u: length %u runs past the section",
				       i, len);
		if (memchr(r.pos, '\0', len))
			return CORRUPT(d, at, "STRINGS: string %u contains a NUL byte", i);
		if (i == 0 && len != 0)
			return CORRUPT(d, at, "STRINGS: string 0 must be empty");
		if ((err = wire__append_string(b, (const char *)r.pos, len, &idx)))
			return err;
		r.pos += len;
	}
	if (byte_reader_left(&r))
		return CORRUPT(d, byte_reader_offset(&r), "STRINGS: %zu trailing bytes",
			       byte_reader_left(&r));
	return 0;
}

static int check_string(struct decoder *d, size_t at, const char *what, uint32_t idx)
{
	if (idx >= d->batch->string_count)
		return CORRUPT(d, at, "%s: string index %u out of range (%u strings)", what, idx,
			       d->batch->string_count);
	return 0;
}

static bool kind_needs_build_id(uint8_t kind)
{
	return kind == SYSOM_OBJECT_ELF || kind == SYSOM_OBJECT_FILE_HASH ||
	       kind == SYSOM_OBJECT_KERNEL || kind == SYSOM_OBJECT_KMODULE;
}

static int decode_objects(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_objects, SYSOM_OBJECT_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->objects, &b->object_cap, s->count, sizeof(*b->objects))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_OBJECT_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_object *o = &b->objects[i];
		char what[32];

		snprintf(what, sizeof(what), "OBJECTS record %u", i);
		o->kind = p[WIRE_OBJECT_KIND];
		o->build_id_len = p[WIRE_OBJECT_BUILD_ID_LEN];
		o->name = load_le32(p + WIRE_OBJECT_NAME);
		if (o->kind < SYSOM_OBJECT_ELF || o->kind > SYSOM_OBJECT_KIND_MAX)
			return CORRUPT(d, at, "%s: unknown kind %u", what, o->kind);
		if (load_le16(p + WIRE_OBJECT_RESERVED) != 0)
			return CORRUPT(d, at + WIRE_OBJECT_RESERVED, "%s: reserved field is not zero",
				       what);
		if (kind_needs_build_id(o->kind) ? (o->build_id_len < 3 || o->build_id_len > SYSOM_BUILD_ID_MAX)
						 : o->build_id_len != 0)
			return CORRUPT(d, at + WIRE_OBJECT_BUILD_ID_LEN,
				       "%s: build ID length %u invalid for kind %u", what,
				       o->build_id_len, o->kind);
		memcpy(o->build_id, p + WIRE_OBJECT_BUILD_ID, SYSOM_BUILD_ID_MAX);
		for (size_t j = o->build_id_len; j < SYSOM_BUILD_ID_MAX; j++)
			if (o->build_id[j])
				return CORRUPT(d, at + WIRE_OBJECT_BUILD_ID + j,
					       "%s: build ID padding is not zero", what);
		if ((err = check_string(d, at + WIRE_OBJECT_NAME, what, o->name)))
			return err;
		b->object_count++;
	}
	return 0;
}

static int decode_node(struct decoder *d, const struct section *s)
{
	struct sysom_node_info *n = &d->batch->node;
	const uint8_t *p = d->data + s->offset;
	size_t at = s->offset;
	int err;

	if (s->count != 1 || s->size != SYSOM_NODE_RECORD_SIZE)
		return CORRUPT(d, at, "NODE: expected one %d-byte record, got %u records in %u bytes",
			       SYSOM_NODE_RECORD_SIZE, s->count, s->size);
	n->hostname = load_le32(p + WIRE_NODE_HOSTNAME);
	n->kernel_release = load_le32(p + WIRE_NODE_KERNEL_RELEASE);
	n->machine = load_le32(p + WIRE_NODE_MACHINE);
	n->agent_version = load_le32(p + WIRE_NODE_AGENT_VERSION);
	n->kernel_object = load_le32(p + WIRE_NODE_KERNEL_OBJECT);
	n->sample_hz = load_le32(p + WIRE_NODE_SAMPLE_HZ);
	n->sample_rate_ppm = load_le32(p + WIRE_NODE_SAMPLE_RATE_PPM);
	n->drain_interval_ms = load_le32(p + WIRE_NODE_DRAIN_INTERVAL_MS);
	n->batch_interval_ms = load_le32(p + WIRE_NODE_BATCH_INTERVAL_MS);
	n->online_cpus = load_le32(p + WIRE_NODE_ONLINE_CPUS);
	memcpy(n->boot_id, p + WIRE_NODE_BOOT_ID, sizeof(n->boot_id));
	if ((err = check_string(d, at + WIRE_NODE_HOSTNAME, "NODE hostname", n->hostname)) ||
	    (err = check_string(d, at + WIRE_NODE_KERNEL_RELEASE, "NODE kernel release",
				n->kernel_release)) ||
	    (err = check_string(d, at + WIRE_NODE_MACHINE, "NODE machine", n->machine)) ||
	    (err = check_string(d, at + WIRE_NODE_AGENT_VERSION, "NODE agent version",
				n->agent_version)))
		return err;
	if (n->kernel_object != SYSOM_WIRE_NONE &&
	    (n->kernel_object >= d->batch->object_count ||
	     d->batch->objects[n->kernel_object].kind != SYSOM_OBJECT_KERNEL))
		return CORRUPT(d, at + WIRE_NODE_KERNEL_OBJECT,
			       "NODE: kernel object %u is not a kernel object",
			       n->kernel_object);
	if (n->sample_rate_ppm > 1000000)
		return CORRUPT(d, at + WIRE_NODE_SAMPLE_RATE_PPM, "NODE: sample rate %u ppm exceeds 1000000",
			       n->sample_rate_ppm);
	if (load_le64(p + WIRE_NODE_RESERVED) != 0)
		return CORRUPT(d, at + WIRE_NODE_RESERVED, "NODE: reserved field is not zero");
	return 0;
}

static int decode_processes(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_processes, SYSOM_PROCESS_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->processes, &b->process_cap, s->count,
			       sizeof(*b->processes))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_PROCESS_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_process *o = &b->processes[i];
		char what[40];

		snprintf(what, sizeof(what), "PROCESSES record %u", i);
		o->tgid = load_le32(p + WIRE_PROCESS_TGID);
		o->generation = load_le32(p + WIRE_PROCESS_GENERATION);
		o->start_time_ns = load_le64(p + WIRE_PROCESS_START_TIME);
		o->comm = load_le32(p + WIRE_PROCESS_COMM);
		o->exe = load_le32(p + WIRE_PROCESS_EXE);
		o->cmdline = load_le32(p + WIRE_PROCESS_CMDLINE);
		o->ppid = load_le32(p + WIRE_PROCESS_PPID);
		if ((err = check_string(d, at + WIRE_PROCESS_COMM, what, o->comm)) ||
		    (err = check_string(d, at + WIRE_PROCESS_EXE, what, o->exe)) ||
		    (err = check_string(d, at + WIRE_PROCESS_CMDLINE, what, o->cmdline)))
			return err;
		b->process_count++;
	}
	return 0;
}

static int decode_mappings(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_mappings, SYSOM_MAPPING_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->mappings, &b->mapping_cap, s->count,
			       sizeof(*b->mappings))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_MAPPING_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_mapping *m = &b->mappings[i];

		m->process = load_le32(p + WIRE_MAPPING_PROCESS);
		m->object = load_le32(p + WIRE_MAPPING_OBJECT);
		m->start = load_le64(p + WIRE_MAPPING_START);
		m->end = load_le64(p + WIRE_MAPPING_END);
		m->file_offset = load_le64(p + WIRE_MAPPING_FILE_OFFSET);
		if (m->process >= b->process_count)
			return CORRUPT(d, at + WIRE_MAPPING_PROCESS,
				       "MAPPINGS record %u: process %u out of range (%u)", i, m->process,
				       b->process_count);
		if (m->object >= b->object_count)
			return CORRUPT(d, at + WIRE_MAPPING_OBJECT,
				       "MAPPINGS record %u: object %u out of range (%u)",
				       i, m->object, b->object_count);
		if (m->end <= m->start)
			return CORRUPT(d, at + WIRE_MAPPING_START, "MAPPINGS record %u: empty range", i);
		b->mapping_count++;
	}
	return 0;
}

static bool object_fits_stack(uint8_t object_kind, uint8_t stack_kind)
{
	if (object_kind == SYSOM_OBJECT_UNKNOWN)
		return true;
	if (stack_kind == SYSOM_STACK_KERNEL)
		return object_kind == SYSOM_OBJECT_KERNEL || object_kind == SYSOM_OBJECT_KMODULE;
	return object_kind == SYSOM_OBJECT_ELF || object_kind == SYSOM_OBJECT_FILE_HASH ||
	       object_kind == SYSOM_OBJECT_ANON || object_kind == SYSOM_OBJECT_PYTHON ||
	       object_kind == SYSOM_OBJECT_JIT;
}

static int decode_stacks(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	struct byte_reader r;
	uint64_t total_frames = 0;
	int err;

	if ((err = check_count(d, s, d->limits->max_stacks, 0)))
		return err;
	if (s->count > s->size / (SYSOM_STACK_HEADER_SIZE + SYSOM_FRAME_RECORD_SIZE))
		return CORRUPT(d, s->offset, "STACKS: %u stacks cannot fit in %u bytes", s->count,
			       s->size);
	if ((err = alloc_array((void **)&b->stacks, &b->stack_cap, s->count, sizeof(*b->stacks))))
		return err;
	/* The section size bounds the frame count, so this allocation is bounded too. */
	uint32_t max_frames = s->size / SYSOM_FRAME_RECORD_SIZE;
	if (max_frames > d->limits->max_frames)
		max_frames = d->limits->max_frames;
	if ((err = alloc_array((void **)&b->frames, &b->frame_cap, max_frames, sizeof(*b->frames))))
		return err;
	byte_reader_init(&r, d->data, d->len);
	r.pos = d->data + s->offset;
	r.end = r.pos + s->size;
	for (uint32_t i = 0; i < s->count; i++) {
		size_t at = byte_reader_offset(&r);
		struct sysom_stack *st = &b->stacks[i];
		const uint8_t *p = r.pos;
		uint32_t reserved;

		if (!byte_reader_skip(&r, SYSOM_STACK_HEADER_SIZE))
			return CORRUPT(d, at, "STACKS record %u: truncated header", i);
		st->nframes = load_le16(p + WIRE_STACK_NFRAMES);
		st->kind = p[WIRE_STACK_KIND];
		st->stop_reason = p[WIRE_STACK_STOP_REASON];
		reserved = load_le32(p + WIRE_STACK_RESERVED);
		if (st->nframes == 0 || st->nframes > d->limits->max_frames_per_stack)
			return fail(d, at, st->nframes ? -SYSOM_ELIMIT : -SYSOM_ECORRUPT,
				    "STACKS record %u: %u frames (allowed 1..%u)", i, st->nframes,
				    d->limits->max_frames_per_stack);
		if (st->kind != SYSOM_STACK_KERNEL && st->kind != SYSOM_STACK_USER)
			return CORRUPT(d, at + WIRE_STACK_KIND, "STACKS record %u: unknown kind %u", i,
				       st->kind);
		if (st->stop_reason > SYSOM_STOP_REASON_MAX)
			return CORRUPT(d, at + WIRE_STACK_STOP_REASON,
				       "STACKS record %u: unknown stop reason %u", i,
				       st->stop_reason);
		if (reserved)
			return CORRUPT(d, at + WIRE_STACK_RESERVED,
				       "STACKS record %u: reserved field is not zero", i);
		total_frames += st->nframes;
		if (total_frames > max_frames)
			return fail(d, at, total_frames > d->limits->max_frames ? -SYSOM_ELIMIT : -SYSOM_ECORRUPT,
				    "STACKS record %u: frames exceed the section or the limit of %u",
				    i, d->limits->max_frames);
		if (byte_reader_left(&r) < (size_t)st->nframes * SYSOM_FRAME_RECORD_SIZE)
			return CORRUPT(d, at, "STACKS record %u: %u frames run past the section", i,
				       st->nframes);
		st->first_frame = b->frame_count;
		for (uint16_t j = 0; j < st->nframes; j++) {
			struct sysom_frame *f = &b->frames[b->frame_count];
			size_t fat = byte_reader_offset(&r);
			const uint8_t *fp = r.pos;

			r.pos += SYSOM_FRAME_RECORD_SIZE; /* the frames fit: checked above */
			f->object = load_le32(fp + WIRE_FRAME_OBJECT);
			f->offset = load_le64(fp + WIRE_FRAME_OFFSET);
			if (f->object >= b->object_count)
				return CORRUPT(d, fat,
					       "STACKS record %u: frame %u object %u out of range (%u objects)",
					       i, j, f->object, b->object_count);
			if (!object_fits_stack(b->objects[f->object].kind, st->kind))
				return CORRUPT(d, fat,
					       "STACKS record %u: frame %u object kind %u cannot appear in a %s stack",
					       i, j, b->objects[f->object].kind,
					       st->kind == SYSOM_STACK_KERNEL ? "kernel" : "user");
			b->frame_count++;
		}
		b->stack_count++;
	}
	if (byte_reader_left(&r))
		return CORRUPT(d, byte_reader_offset(&r), "STACKS: %zu trailing bytes",
			       byte_reader_left(&r));
	return 0;
}

static int check_stack_ref(struct decoder *d, size_t at, const char *what, uint32_t stack,
			   uint8_t want_kind)
{
	if (stack == SYSOM_WIRE_NONE)
		return 0;
	if (stack >= d->batch->stack_count)
		return CORRUPT(d, at, "%s: stack %u out of range (%u stacks)", what,
			       stack, d->batch->stack_count);
	if (d->batch->stacks[stack].kind != want_kind)
		return CORRUPT(d, at, "%s: stack %u is not a %s stack", what, stack,
			       want_kind == SYSOM_STACK_KERNEL ? "kernel" : "user");
	return 0;
}

static int decode_samples(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint64_t window_ms = (b->window_end_ns - b->window_start_ns + 999999) / 1000000;
	int err;

	if ((err = check_count(d, s, d->limits->max_samples, SYSOM_SAMPLE_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->samples, &b->sample_cap, s->count, sizeof(*b->samples))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_SAMPLE_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_sample *o = &b->samples[i];
		char what[40];

		snprintf(what, sizeof(what), "SAMPLES record %u", i);
		o->process = load_le32(p + WIRE_SAMPLE_PROCESS);
		o->tid = load_le32(p + WIRE_SAMPLE_TID);
		o->cpu = load_le32(p + WIRE_SAMPLE_CPU);
		o->time_offset_ms = load_le32(p + WIRE_SAMPLE_TIME_OFFSET_MS);
		o->kernel_stack = load_le32(p + WIRE_SAMPLE_KERNEL_STACK);
		o->user_stack = load_le32(p + WIRE_SAMPLE_USER_STACK);
		o->thread_comm = load_le32(p + WIRE_SAMPLE_THREAD_COMM);
		o->count = load_le64(p + WIRE_SAMPLE_COUNT);
		if (o->process >= b->process_count)
			return CORRUPT(d, at + WIRE_SAMPLE_PROCESS,
				       "%s: process %u out of range (%u processes)", what, o->process,
				       b->process_count);
		if (o->time_offset_ms > window_ms)
			return CORRUPT(d, at + WIRE_SAMPLE_TIME_OFFSET_MS,
				       "%s: time offset %u ms beyond the %llu ms window", what,
				       o->time_offset_ms, (unsigned long long)window_ms);
		if (o->kernel_stack == SYSOM_WIRE_NONE && o->user_stack == SYSOM_WIRE_NONE)
			return CORRUPT(d, at + WIRE_SAMPLE_KERNEL_STACK,
				       "%s: neither a kernel nor a user stack", what);
		if ((err = check_stack_ref(d, at + WIRE_SAMPLE_KERNEL_STACK, what, o->kernel_stack,
					   SYSOM_STACK_KERNEL)) ||
		    (err = check_stack_ref(d, at + WIRE_SAMPLE_USER_STACK, what, o->user_stack,
					   SYSOM_STACK_USER)) ||
		    (err = check_string(d, at + WIRE_SAMPLE_THREAD_COMM, what, o->thread_comm)))
			return err;
		if (load_le32(p + WIRE_SAMPLE_RESERVED) != 0)
			return CORRUPT(d, at + WIRE_SAMPLE_RESERVED, "%s: reserved field is not zero",
				       what);
		if (o->count == 0)
			return CORRUPT(d, at + WIRE_SAMPLE_COUNT, "%s: zero count", what);
		b->sample_count++;
	}
	return 0;
}

static int decode_offcpu(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint64_t window_ms = (b->window_end_ns - b->window_start_ns + 999999) / 1000000;
	int err;

	if ((err = check_count(d, s, d->limits->max_offcpu, SYSOM_OFFCPU_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->offcpu, &b->offcpu_cap, s->count, sizeof(*b->offcpu))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_OFFCPU_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_offcpu *o = &b->offcpu[i];
		char what[40];

		snprintf(what, sizeof(what), "OFFCPU record %u", i);
		o->process = load_le32(p + WIRE_OFFCPU_PROCESS);
		o->tid = load_le32(p + WIRE_OFFCPU_TID);
		o->time_offset_ms = load_le32(p + WIRE_OFFCPU_TIME_OFFSET_MS);
		o->kernel_stack = load_le32(p + WIRE_OFFCPU_KERNEL_STACK);
		o->user_stack = load_le32(p + WIRE_OFFCPU_USER_STACK);
		o->thread_comm = load_le32(p + WIRE_OFFCPU_THREAD_COMM);
		o->state = p[WIRE_OFFCPU_STATE];
		o->count = load_le64(p + WIRE_OFFCPU_COUNT);
		o->blocked_ns = load_le64(p + WIRE_OFFCPU_BLOCKED_NS);
		o->max_ns = load_le64(p + WIRE_OFFCPU_MAX_NS);
		if (o->process >= b->process_count)
			return CORRUPT(d, at + WIRE_OFFCPU_PROCESS,
				       "%s: process %u out of range (%u processes)", what, o->process,
				       b->process_count);
		if (o->time_offset_ms > window_ms)
			return CORRUPT(d, at + WIRE_OFFCPU_TIME_OFFSET_MS,
				       "%s: time offset %u ms beyond the %llu ms window", what,
				       o->time_offset_ms, (unsigned long long)window_ms);
		if (o->kernel_stack == SYSOM_WIRE_NONE && o->user_stack == SYSOM_WIRE_NONE)
			return CORRUPT(d, at + WIRE_OFFCPU_KERNEL_STACK,
				       "%s: neither a kernel nor a user stack", what);
		if ((err = check_stack_ref(d, at + WIRE_OFFCPU_KERNEL_STACK, what, o->kernel_stack,
					   SYSOM_STACK_KERNEL)) ||
		    (err = check_stack_ref(d, at + WIRE_OFFCPU_USER_STACK, what, o->user_stack,
					   SYSOM_STACK_USER)) ||
		    (err = check_string(d, at + WIRE_OFFCPU_THREAD_COMM, what, o->thread_comm)))
			return err;
		if (o->state == 0 || o->state > SYSOM_OFFCPU_STATE_MAX)
			return CORRUPT(d, at + WIRE_OFFCPU_STATE, "%s: unknown state %u", what,
				       o->state);
		if (!all_zero(p + WIRE_OFFCPU_RESERVED, WIRE_OFFCPU_COUNT - WIRE_OFFCPU_RESERVED))
			return CORRUPT(d, at + WIRE_OFFCPU_RESERVED, "%s: reserved field is not zero",
				       what);
		if (o->count == 0)
			return CORRUPT(d, at + WIRE_OFFCPU_COUNT, "%s: zero count", what);
		if (o->max_ns == 0 || o->max_ns > o->blocked_ns)
			return CORRUPT(d, at + WIRE_OFFCPU_MAX_NS,
				       "%s: longest block %llu ns not in 1..total %llu ns", what,
				       (unsigned long long)o->max_ns,
				       (unsigned long long)o->blocked_ns);
		b->offcpu_count++;
	}
	return 0;
}

static int decode_counters(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint64_t seen[(SYSOM_COUNTER_MAX + 63) / 64] = { 0 };
	int err;

	if ((err = check_count(d, s, d->limits->max_counters, SYSOM_COUNTER_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->counters, &b->counter_cap, s->count,
			       sizeof(*b->counters))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_COUNTER_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_counter *c = &b->counters[i];

		c->id = load_le16(p + WIRE_COUNTER_ID);
		c->value = load_le64(p + WIRE_COUNTER_VALUE);
		if (c->id == 0 || c->id >= SYSOM_COUNTER_MAX)
			return CORRUPT(d, at + WIRE_COUNTER_ID, "COUNTERS record %u: id %u out of range",
				       i, c->id);
		if (!all_zero(p + WIRE_COUNTER_RESERVED, WIRE_COUNTER_RESERVED_SIZE))
			return CORRUPT(d, at + WIRE_COUNTER_RESERVED,
				       "COUNTERS record %u: reserved field is not zero", i);
		if (seen[c->id / 64] & (1ULL << (c->id % 64)))
			return CORRUPT(d, at + WIRE_COUNTER_ID, "COUNTERS record %u: id %u repeated", i,
				       c->id);
		seen[c->id / 64] |= 1ULL << (c->id % 64);
		b->counter_count++;
	}
	return 0;
}

static int check_process(struct decoder *d, size_t at, const char *what, uint32_t process)
{
	if (process >= d->batch->process_count)
		return CORRUPT(d, at, "%s: process %u out of range (%u processes)", what, process,
			       d->batch->process_count);
	return 0;
}

/* A rank and its size: -1 each when unknown, else 0 <= rank < size. */
static int check_rank(struct decoder *d, size_t at, const char *what, int32_t rank, int32_t size)
{
	if (rank < -1 || size < -1 || size == 0 || (rank >= 0 && size > 0 && rank >= size))
		return CORRUPT(d, at, "%s: rank %d of %d is inconsistent", what, rank, size);
	return 0;
}

static int decode_job_ranks(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint8_t *seen = NULL;
	int err;

	if ((err = check_count(d, s, d->limits->max_job_ranks, SYSOM_JOB_RANK_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->job_ranks, &b->job_rank_cap, s->count,
			       sizeof(*b->job_ranks))))
		return err;
	if (s->count && !(seen = calloc(b->process_count ? b->process_count : 1, 1)))
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_JOB_RANK_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_job_rank *o = &b->job_ranks[i];
		char what[40];

		snprintf(what, sizeof(what), "JOB_RANKS record %u", i);
		o->process = load_le32(p + WIRE_JOB_RANK_PROCESS);
		o->job = load_le32(p + WIRE_JOB_RANK_JOB);
		o->rank = (int32_t)load_le32(p + WIRE_JOB_RANK_RANK);
		o->world_size = (int32_t)load_le32(p + WIRE_JOB_RANK_WORLD_SIZE);
		o->local_rank = (int32_t)load_le32(p + WIRE_JOB_RANK_LOCAL_RANK);
		o->local_world_size = (int32_t)load_le32(p + WIRE_JOB_RANK_LOCAL_WORLD_SIZE);
		o->group_rank = (int32_t)load_le32(p + WIRE_JOB_RANK_GROUP_RANK);
		o->source = p[WIRE_JOB_RANK_SOURCE];
		o->role = p[WIRE_JOB_RANK_ROLE];
		o->gpu_device = p[WIRE_JOB_RANK_GPU_DEVICE];
		o->rank_pid = load_le32(p + WIRE_JOB_RANK_RANK_PID);
		o->job_id_source = load_le32(p + WIRE_JOB_RANK_JOB_ID_SOURCE);
		o->master = load_le32(p + WIRE_JOB_RANK_MASTER);
		o->groups = load_le32(p + WIRE_JOB_RANK_GROUPS);
		if ((err = check_process(d, at + WIRE_JOB_RANK_PROCESS, what, o->process)) ||
		    (err = check_string(d, at + WIRE_JOB_RANK_JOB, what, o->job)) ||
		    (err = check_string(d, at + WIRE_JOB_RANK_JOB_ID_SOURCE, what,
					o->job_id_source)) ||
		    (err = check_string(d, at + WIRE_JOB_RANK_MASTER, what, o->master)) ||
		    (err = check_string(d, at + WIRE_JOB_RANK_GROUPS, what, o->groups)) ||
		    (err = check_rank(d, at + WIRE_JOB_RANK_RANK, what, o->rank, o->world_size)) ||
		    (err = check_rank(d, at + WIRE_JOB_RANK_LOCAL_RANK, what, o->local_rank,
				      o->local_world_size)))
			goto cleanup;
		if (o->group_rank < -1) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_GROUP_RANK, "%s: group rank %d", what,
				      o->group_rank);
			goto cleanup;
		}
		if (o->source < SYSOM_JOB_FROM_ENVIRONMENT || o->source > SYSOM_JOB_SOURCE_MAX) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_SOURCE, "%s: unknown source %u", what,
				      o->source);
			goto cleanup;
		}
		if (o->role > SYSOM_JOB_ROLE_MAX ||
		    (o->role == SYSOM_JOB_ROLE_WORKER) != (o->rank_pid != 0)) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_ROLE, "%s: role %u with rank pid %u", what,
				      o->role, o->rank_pid);
			goto cleanup;
		}
		if (o->gpu_device > SYSOM_GPU_MAX_DEVICES) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_GPU_DEVICE, "%s: GPU device %u", what,
				      o->gpu_device);
			goto cleanup;
		}
		if (!all_zero(p + WIRE_JOB_RANK_RESERVED, WIRE_JOB_RANK_RESERVED_SIZE)) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_RESERVED, "%s: reserved field is not zero",
				      what);
			goto cleanup;
		}
		if (seen[o->process]) {
			err = CORRUPT(d, at + WIRE_JOB_RANK_PROCESS, "%s: process %u repeated", what,
				      o->process);
			goto cleanup;
		}
		seen[o->process] = 1;
		b->job_rank_count++;
	}
cleanup:
	free(seen);
	return err;
}

static int decode_communicators(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_communicators, SYSOM_COMMUNICATOR_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->communicators, &b->communicator_cap, s->count,
			       sizeof(*b->communicators))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_COMMUNICATOR_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_communicator *o = &b->communicators[i];
		char what[40];

		snprintf(what, sizeof(what), "COMMUNICATORS record %u", i);
		o->process = load_le32(p + WIRE_COMM_PROCESS);
		o->rank = (int32_t)load_le32(p + WIRE_COMM_RANK);
		o->key = load_le64(p + WIRE_COMM_KEY);
		o->parent_key = load_le64(p + WIRE_COMM_PARENT_KEY);
		o->nccl_comm_hash = load_le64(p + WIRE_COMM_NCCL_COMM_HASH);
		o->nranks = (int32_t)load_le32(p + WIRE_COMM_NRANKS);
		o->split_color = (int32_t)load_le32(p + WIRE_COMM_SPLIT_COLOR);
		o->split_ordinal = load_le32(p + WIRE_COMM_SPLIT_ORDINAL);
		o->split_key = (int32_t)load_le32(p + WIRE_COMM_SPLIT_KEY);
		o->key_source = p[WIRE_COMM_KEY_SOURCE];
		o->flags = p[WIRE_COMM_FLAGS];
		o->created_ns = load_le64(p + WIRE_COMM_CREATED);
		o->handle = load_le64(p + WIRE_COMM_HANDLE);
		if ((err = check_process(d, at + WIRE_COMM_PROCESS, what, o->process)) ||
		    (err = check_rank(d, at + WIRE_COMM_RANK, what, o->rank, o->nranks)))
			return err;
		if (o->key == 0)
			return CORRUPT(d, at + WIRE_COMM_KEY, "%s: key 0", what);
		if (o->key_source == 0 || o->key_source > SYSOM_COMM_KEY_SOURCE_MAX)
			return CORRUPT(d, at + WIRE_COMM_KEY_SOURCE, "%s: unknown key source %u", what,
				       o->key_source);
		if (o->flags & ~SYSOM_COMM_DESTROYED)
			return CORRUPT(d, at + WIRE_COMM_FLAGS, "%s: unknown flags 0x%x", what,
				       o->flags);
		if (load_le32(p + WIRE_COMM_RESERVED) || load_le16(p + WIRE_COMM_RESERVED2))
			return CORRUPT(d, at + WIRE_COMM_RESERVED, "%s: reserved field is not zero",
				       what);
		b->communicator_count++;
	}
	return 0;
}

static int decode_nccl_calls(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_nccl_calls, SYSOM_NCCL_CALL_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->nccl_calls, &b->nccl_call_cap, s->count,
			       sizeof(*b->nccl_calls))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_NCCL_CALL_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_nccl_call *o = &b->nccl_calls[i];
		char what[40];

		snprintf(what, sizeof(what), "NCCL_CALLS record %u", i);
		o->process = load_le32(p + WIRE_NCCL_CALL_PROCESS);
		o->tid = load_le32(p + WIRE_NCCL_CALL_TID);
		o->comm_key = load_le64(p + WIRE_NCCL_CALL_COMM_KEY);
		o->seq = load_le64(p + WIRE_NCCL_CALL_SEQ);
		o->entry_ns = load_le64(p + WIRE_NCCL_CALL_ENTRY);
		o->exit_ns = load_le64(p + WIRE_NCCL_CALL_EXIT);
		o->count = load_le64(p + WIRE_NCCL_CALL_COUNT);
		o->bytes = load_le64(p + WIRE_NCCL_CALL_BYTES);
		o->stream = load_le64(p + WIRE_NCCL_CALL_STREAM);
		o->op = p[WIRE_NCCL_CALL_OP];
		o->datatype = p[WIRE_NCCL_CALL_DATATYPE];
		o->redop = p[WIRE_NCCL_CALL_REDOP];
		o->flags = p[WIRE_NCCL_CALL_FLAGS];
		o->peer = (int32_t)load_le32(p + WIRE_NCCL_CALL_PEER);
		o->result = (int32_t)load_le32(p + WIRE_NCCL_CALL_RESULT);
		o->rank = (int32_t)load_le32(p + WIRE_NCCL_CALL_RANK);
		if ((err = check_process(d, at + WIRE_NCCL_CALL_PROCESS, what, o->process)))
			return err;
		if (o->op == 0 || o->op > SYSOM_NCCL_OP_MAX)
			return CORRUPT(d, at + WIRE_NCCL_CALL_OP, "%s: unknown op %u", what, o->op);
		if (o->flags & ~(SYSOM_NCCL_IN_GROUP | SYSOM_NCCL_IN_FLIGHT))
			return CORRUPT(d, at + WIRE_NCCL_CALL_FLAGS, "%s: unknown flags 0x%x", what,
				       o->flags);
		if (o->exit_ns < o->entry_ns)
			return CORRUPT(d, at + WIRE_NCCL_CALL_EXIT, "%s: returns before it is entered",
				       what);
		if (o->peer < -1 || o->rank < -1)
			return CORRUPT(d, at + WIRE_NCCL_CALL_PEER, "%s: negative rank", what);
		b->nccl_call_count++;
	}
	return 0;
}

static int decode_launches(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_launches, SYSOM_LAUNCH_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->launches, &b->launch_cap, s->count,
			       sizeof(*b->launches))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_LAUNCH_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_launch *o = &b->launches[i];
		char what[40];

		snprintf(what, sizeof(what), "LAUNCHES record %u", i);
		o->process = load_le32(p + WIRE_LAUNCH_PROCESS);
		o->kernel_name = load_le32(p + WIRE_LAUNCH_KERNEL_NAME);
		o->function = load_le64(p + WIRE_LAUNCH_FUNCTION);
		o->user_stack = load_le32(p + WIRE_LAUNCH_USER_STACK);
		o->kernel_stack = load_le32(p + WIRE_LAUNCH_KERNEL_STACK);
		o->count = load_le64(p + WIRE_LAUNCH_COUNT);
		for (int k = 0; k < 3; k++) {
			o->grid[k] = load_le32(p + WIRE_LAUNCH_GRID + 4 * k);
			o->block[k] = load_le32(p + WIRE_LAUNCH_BLOCK + 4 * k);
		}
		o->shared_mem = load_le32(p + WIRE_LAUNCH_SHARED_MEM);
		o->flags = load_le16(p + WIRE_LAUNCH_FLAGS);
		if ((err = check_process(d, at + WIRE_LAUNCH_PROCESS, what, o->process)) ||
		    (err = check_string(d, at + WIRE_LAUNCH_KERNEL_NAME, what, o->kernel_name)) ||
		    (err = check_stack_ref(d, at + WIRE_LAUNCH_USER_STACK, what, o->user_stack,
					   SYSOM_STACK_USER)) ||
		    (err = check_stack_ref(d, at + WIRE_LAUNCH_KERNEL_STACK, what, o->kernel_stack,
					   SYSOM_STACK_KERNEL)))
			return err;
		if (o->count == 0)
			return CORRUPT(d, at + WIRE_LAUNCH_COUNT, "%s: zero count", what);
		if (o->flags & ~(SYSOM_LAUNCH_EX | SYSOM_LAUNCH_PTSZ))
			return CORRUPT(d, at + WIRE_LAUNCH_FLAGS, "%s: unknown flags 0x%x", what,
				       o->flags);
		if (load_le16(p + WIRE_LAUNCH_RESERVED))
			return CORRUPT(d, at + WIRE_LAUNCH_RESERVED, "%s: reserved field is not zero",
				       what);
		b->launch_count++;
	}
	return 0;
}

static int decode_gpu_kernels(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_gpu_kernels, SYSOM_GPU_KERNEL_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->gpu_kernels, &b->gpu_kernel_cap, s->count,
			       sizeof(*b->gpu_kernels))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_GPU_KERNEL_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_gpu_kernel *o = &b->gpu_kernels[i];
		const char *problem;

		o->process = load_le32(p + WIRE_GPU_KERNEL_PROCESS);
		o->name = load_le32(p + WIRE_GPU_KERNEL_NAME);
		o->device = load_le32(p + WIRE_GPU_KERNEL_DEVICE);
		o->stream = load_le64(p + WIRE_GPU_KERNEL_STREAM);
		o->count = load_le64(p + WIRE_GPU_KERNEL_COUNT);
		o->total_ns = load_le64(p + WIRE_GPU_KERNEL_TOTAL_NS);
		o->min_ns = load_le64(p + WIRE_GPU_KERNEL_MIN_NS);
		o->max_ns = load_le64(p + WIRE_GPU_KERNEL_MAX_NS);
		for (int k = 0; k < SYSOM_GPU_HIST_BUCKETS; k++)
			o->hist[k] = load_le32(p + WIRE_GPU_KERNEL_HIST + 4 * k);
		if (load_le32(p + WIRE_GPU_KERNEL_RESERVED))
			return CORRUPT(d, at + WIRE_GPU_KERNEL_RESERVED,
				       "GPU_KERNELS record %u: reserved field is not zero", i);
		if ((problem = sysom_gpu_kernel_problem(b, o)))
			return CORRUPT(d, at, "GPU_KERNELS record %u: %s", i, problem);
		b->gpu_kernel_count++;
	}
	return 0;
}

static int decode_nccl_profiles(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_nccl_profiles,
			       SYSOM_NCCL_PROFILE_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->nccl_profiles, &b->nccl_profile_cap, s->count,
			       sizeof(*b->nccl_profiles))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_NCCL_PROFILE_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_nccl_profile *o = &b->nccl_profiles[i];
		const char *problem;

		o->process = load_le32(p + WIRE_NCCL_PROFILE_PROCESS);
		o->rank = (int32_t)load_le32(p + WIRE_NCCL_PROFILE_RANK);
		o->comm_id = load_le64(p + WIRE_NCCL_PROFILE_COMM_ID);
		o->comm_name = load_le32(p + WIRE_NCCL_PROFILE_COMM_NAME);
		o->nranks = (int32_t)load_le32(p + WIRE_NCCL_PROFILE_NRANKS);
		o->func = load_le32(p + WIRE_NCCL_PROFILE_FUNC);
		o->algo = load_le32(p + WIRE_NCCL_PROFILE_ALGO);
		o->proto = load_le32(p + WIRE_NCCL_PROFILE_PROTO);
		o->datatype = load_le32(p + WIRE_NCCL_PROFILE_DATATYPE);
		o->peer = (int32_t)load_le32(p + WIRE_NCCL_PROFILE_PEER);
		o->nchannels = load_le32(p + WIRE_NCCL_PROFILE_NCHANNELS);
		o->count = load_le64(p + WIRE_NCCL_PROFILE_COUNT);
		o->bytes = load_le64(p + WIRE_NCCL_PROFILE_BYTES);
		o->kernel_timed = load_le64(p + WIRE_NCCL_PROFILE_KERNEL_TIMED);
		o->kernel_ns_total = load_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_TOTAL);
		o->kernel_ns_min = load_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_MIN);
		o->kernel_ns_max = load_le64(p + WIRE_NCCL_PROFILE_KERNEL_NS_MAX);
		o->span_timed = load_le64(p + WIRE_NCCL_PROFILE_SPAN_TIMED);
		o->span_ns_total = load_le64(p + WIRE_NCCL_PROFILE_SPAN_NS_TOTAL);
		o->enqueue_ns_total = load_le64(p + WIRE_NCCL_PROFILE_ENQUEUE_NS_TOTAL);
		o->transfers = load_le64(p + WIRE_NCCL_PROFILE_TRANSFERS);
		o->transfer_bytes = load_le64(p + WIRE_NCCL_PROFILE_TRANSFER_BYTES);
		o->first_seq = load_le64(p + WIRE_NCCL_PROFILE_FIRST_SEQ);
		o->last_seq = load_le64(p + WIRE_NCCL_PROFILE_LAST_SEQ);
		if ((problem = sysom_nccl_profile_problem(b, o)))
			return CORRUPT(d, at, "NCCL_PROFILES record %u: %s", i, problem);
		b->nccl_profile_count++;
	}
	return 0;
}

static double load_double(const uint8_t *p)
{
	uint64_t bits = load_le64(p);
	double v;

	memcpy(&v, &bits, sizeof(v));
	return v;
}

static int decode_nccl_links(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	int err;

	if ((err = check_count(d, s, d->limits->max_nccl_links, SYSOM_NCCL_LINK_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->nccl_links, &b->nccl_link_cap, s->count,
			       sizeof(*b->nccl_links))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_NCCL_LINK_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_nccl_link *o = &b->nccl_links[i];
		const char *problem;

		o->process = load_le32(p + WIRE_NCCL_LINK_PROCESS);
		o->rank = (int32_t)load_le32(p + WIRE_NCCL_LINK_RANK);
		o->comm_id = load_le64(p + WIRE_NCCL_LINK_COMM_ID);
		o->peer = (int32_t)load_le32(p + WIRE_NCCL_LINK_PEER);
		o->channel = (int32_t)load_le32(p + WIRE_NCCL_LINK_CHANNEL);
		o->transfers = load_le64(p + WIRE_NCCL_LINK_TRANSFERS);
		o->bytes = load_le64(p + WIRE_NCCL_LINK_BYTES);
		o->time_ns_total = load_le64(p + WIRE_NCCL_LINK_TIME_NS_TOTAL);
		o->sx = load_double(p + WIRE_NCCL_LINK_SX);
		o->sy = load_double(p + WIRE_NCCL_LINK_SY);
		o->sxx = load_double(p + WIRE_NCCL_LINK_SXX);
		o->sxy = load_double(p + WIRE_NCCL_LINK_SXY);
		o->syy = load_double(p + WIRE_NCCL_LINK_SYY);
		o->min_latency_ns = load_double(p + WIRE_NCCL_LINK_MIN_LATENCY_NS);
		o->min_bytes_per_ns = load_double(p + WIRE_NCCL_LINK_MIN_BYTES_PER_NS);
		o->min_r2 = load_double(p + WIRE_NCCL_LINK_MIN_R2);
		o->min_points = load_le32(p + WIRE_NCCL_LINK_MIN_POINTS);
		if (load_le32(p + WIRE_NCCL_LINK_RESERVED))
			return CORRUPT(d, at + WIRE_NCCL_LINK_RESERVED,
				       "NCCL_LINKS record %u: reserved field is not zero", i);
		if ((problem = sysom_nccl_link_problem(b, o)))
			return CORRUPT(d, at, "NCCL_LINKS record %u: %s", i, problem);
		b->nccl_link_count++;
	}
	return 0;
}

/* ---- OS signals (minor 3) ---- */

static int decode_os_cpus(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint64_t *seen = NULL; /* bitmap of CPU numbers (they are < SYSOM_OS_CPU_LIMIT) */
	int err;

	if ((err = check_count(d, s, d->limits->max_os_cpus, SYSOM_OS_CPU_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->os_cpus, &b->os_cpu_cap, s->count,
			       sizeof(*b->os_cpus))))
		return err;
	if (s->count && !(seen = calloc(SYSOM_OS_CPU_LIMIT / 64, sizeof(*seen))))
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_OS_CPU_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_os_cpu *o = &b->os_cpus[i];
		const char *problem;

		o->cpu = load_le32(p + WIRE_OS_CPU_CPU);
		o->numa_node = (int32_t)load_le32(p + WIRE_OS_CPU_NUMA_NODE);
		o->busy_ns = load_le64(p + WIRE_OS_CPU_BUSY_NS);
		o->hardirq_count = load_le64(p + WIRE_OS_CPU_HARDIRQ_COUNT);
		o->hardirq_ns = load_le64(p + WIRE_OS_CPU_HARDIRQ_NS);
		for (int v = 0; v < SYSOM_SOFTIRQ_COUNT; v++) {
			o->softirq_count[v] = load_le64(p + WIRE_OS_CPU_SOFTIRQ_COUNT + 8 * v);
			o->softirq_ns[v] = load_le64(p + WIRE_OS_CPU_SOFTIRQ_NS + 8 * v);
		}
		o->context_switches = load_le64(p + WIRE_OS_CPU_CONTEXT_SWITCHES);
		o->runq_wait_ns = load_le64(p + WIRE_OS_CPU_RUNQ_WAIT_NS);
		if ((problem = sysom_os_cpu_problem(o))) {
			err = CORRUPT(d, at, "OS_CPUS record %u: %s", i, problem);
			goto cleanup;
		}
		if (seen[o->cpu / 64] & (1ull << (o->cpu % 64))) {
			err = CORRUPT(d, at, "OS_CPUS record %u: cpu %u repeated", i, o->cpu);
			goto cleanup;
		}
		seen[o->cpu / 64] |= 1ull << (o->cpu % 64);
		b->os_cpu_count++;
	}
cleanup:
	free(seen);
	return err;
}

/* Uniqueness among the records decoded so far (hash_index values are record numbers). */
struct seen_key {
	const struct sysom_batch *b;
	uint32_t a, c;
};

static bool irq_seen_eq(const void *ctx, uint32_t idx)
{
	const struct seen_key *k = ctx;

	return k->b->os_irqs[idx].cpu == k->a && k->b->os_irqs[idx].irq == k->c;
}

static bool thread_seen_eq(const void *ctx, uint32_t idx)
{
	const struct seen_key *k = ctx;

	return k->b->os_threads[idx].process == k->a && k->b->os_threads[idx].tid == k->c;
}

/* 1 when the key of record i was seen before, 0 after adding it, or -ENOMEM. */
static int repeated(struct hash_index *seen, hash_index_eq_fn eq, const struct seen_key *k,
		    uint32_t i)
{
	uint64_t h = sysom_hash_mix(k->a, k->c);

	if (hash_index_find(seen, h, eq, k) != HASH_INDEX_NONE)
		return 1;
	return hash_index_insert(seen, h, i);
}

static int decode_os_irqs(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	struct hash_index seen = { 0 };
	int err;

	if ((err = check_count(d, s, d->limits->max_os_irqs, SYSOM_OS_IRQ_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->os_irqs, &b->os_irq_cap, s->count,
			       sizeof(*b->os_irqs))))
		return err;
	if (s->count && hash_index_init(&seen, s->count))
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_OS_IRQ_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_os_irq *o = &b->os_irqs[i];
		const char *problem;

		o->cpu = load_le32(p + WIRE_OS_IRQ_CPU);
		o->irq = load_le32(p + WIRE_OS_IRQ_IRQ);
		o->name = load_le32(p + WIRE_OS_IRQ_NAME);
		o->count = load_le64(p + WIRE_OS_IRQ_COUNT);
		o->ns = load_le64(p + WIRE_OS_IRQ_NS);
		if (load_le32(p + WIRE_OS_IRQ_RESERVED)) {
			err = CORRUPT(d, at + WIRE_OS_IRQ_RESERVED,
				      "OS_IRQS record %u: reserved field is not zero", i);
			goto cleanup;
		}
		if ((problem = sysom_os_irq_problem(b, o))) {
			err = CORRUPT(d, at, "OS_IRQS record %u: %s", i, problem);
			goto cleanup;
		}
		if ((err = repeated(&seen, irq_seen_eq, &(struct seen_key){ b, o->cpu, o->irq }, i))) {
			if (err > 0)
				err = CORRUPT(d, at, "OS_IRQS record %u: cpu %u irq %u repeated", i,
					      o->cpu, o->irq);
			goto cleanup;
		}
		b->os_irq_count++;
	}
cleanup:
	hash_index_free(&seen);
	return err;
}

static int decode_os_threads(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	struct hash_index seen = { 0 };
	int err;

	if ((err = check_count(d, s, d->limits->max_os_threads, SYSOM_OS_THREAD_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->os_threads, &b->os_thread_cap, s->count,
			       sizeof(*b->os_threads))))
		return err;
	if (s->count && hash_index_init(&seen, s->count))
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_OS_THREAD_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_os_thread *o = &b->os_threads[i];
		const char *problem;

		o->process = load_le32(p + WIRE_OS_THREAD_PROCESS);
		o->tid = load_le32(p + WIRE_OS_THREAD_TID);
		o->comm = load_le32(p + WIRE_OS_THREAD_COMM);
		o->oncpu_ns = load_le64(p + WIRE_OS_THREAD_ONCPU_NS);
		o->runq_wait_ns = load_le64(p + WIRE_OS_THREAD_RUNQ_WAIT_NS);
		o->runq_waits = load_le64(p + WIRE_OS_THREAD_RUNQ_WAITS);
		for (int k = 0; k < SYSOM_RUNQ_HIST_BUCKETS; k++)
			o->runq_hist[k] = load_le32(p + WIRE_OS_THREAD_RUNQ_HIST + 4 * k);
		o->voluntary_switches = load_le64(p + WIRE_OS_THREAD_VOLUNTARY_SWITCHES);
		o->involuntary_switches = load_le64(p + WIRE_OS_THREAD_INVOLUNTARY_SWITCHES);
		o->migrations = load_le64(p + WIRE_OS_THREAD_MIGRATIONS);
		o->numa_migrations = load_le64(p + WIRE_OS_THREAD_NUMA_MIGRATIONS);
		o->pages_migrated = load_le64(p + WIRE_OS_THREAD_PAGES_MIGRATED);
		o->hardirq_ns = load_le64(p + WIRE_OS_THREAD_HARDIRQ_NS);
		o->softirq_ns = load_le64(p + WIRE_OS_THREAD_SOFTIRQ_NS);
		for (int k = 0; k < SYSOM_CPU_MASK_WORDS; k++)
			o->cpus[k] = load_le64(p + WIRE_OS_THREAD_CPUS + 8 * k);
		if (load_le32(p + WIRE_OS_THREAD_RESERVED)) {
			err = CORRUPT(d, at + WIRE_OS_THREAD_RESERVED,
				      "OS_THREADS record %u: reserved field is not zero", i);
			goto cleanup;
		}
		if (!all_zero(p + WIRE_OS_THREAD_RESERVED2, WIRE_OS_THREAD_RESERVED2_SIZE)) {
			err = CORRUPT(d, at + WIRE_OS_THREAD_RESERVED2,
				      "OS_THREADS record %u: reserved field is not zero", i);
			goto cleanup;
		}
		if ((problem = sysom_os_thread_problem(b, o))) {
			err = CORRUPT(d, at, "OS_THREADS record %u: %s", i, problem);
			goto cleanup;
		}
		if ((err = repeated(&seen, thread_seen_eq, &(struct seen_key){ b, o->process, o->tid },
				    i))) {
			if (err > 0)
				err = CORRUPT(d, at, "OS_THREADS record %u: process %u tid %u repeated",
					      i, o->process, o->tid);
			goto cleanup;
		}
		b->os_thread_count++;
	}
cleanup:
	hash_index_free(&seen);
	return err;
}

static int decode_identities(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint8_t *seen = NULL;
	int err;

	if ((err = check_count(d, s, d->limits->max_identities, SYSOM_IDENTITY_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->identities, &b->identity_cap, s->count,
			       sizeof(*b->identities))))
		return err;
	if (s->count && !(seen = calloc(b->process_count ? b->process_count : 1, 1)))
		return -ENOMEM;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_IDENTITY_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_identity *o = &b->identities[i];
		const char *problem;

		o->process = load_le32(p + WIRE_IDENTITY_PROCESS);
		o->runtime = p[WIRE_IDENTITY_RUNTIME];
		o->container_id = load_le32(p + WIRE_IDENTITY_CONTAINER_ID);
		o->pod_uid = load_le32(p + WIRE_IDENTITY_POD_UID);
		o->pod_namespace = load_le32(p + WIRE_IDENTITY_NAMESPACE);
		o->pod_name = load_le32(p + WIRE_IDENTITY_POD_NAME);
		o->container_name = load_le32(p + WIRE_IDENTITY_CONTAINER_NAME);
		o->slurm_job = load_le64(p + WIRE_IDENTITY_SLURM_JOB);
		o->slurm_step = load_le32(p + WIRE_IDENTITY_SLURM_STEP);
		o->unit = load_le32(p + WIRE_IDENTITY_UNIT);
		if (!all_zero(p + WIRE_IDENTITY_RESERVED, WIRE_IDENTITY_CONTAINER_ID -
								  WIRE_IDENTITY_RESERVED) ||
		    load_le32(p + WIRE_IDENTITY_RESERVED2)) {
			err = CORRUPT(d, at + WIRE_IDENTITY_RESERVED,
				      "IDENTITIES record %u: reserved field is not zero", i);
			goto cleanup;
		}
		if ((problem = sysom_identity_problem(b, o))) {
			err = CORRUPT(d, at, "IDENTITIES record %u: %s", i, problem);
			goto cleanup;
		}
		if (seen[o->process]) {
			err = CORRUPT(d, at + WIRE_IDENTITY_PROCESS,
				      "IDENTITIES record %u: process %u repeated", i, o->process);
			goto cleanup;
		}
		seen[o->process] = 1;
		b->identity_count++;
	}
cleanup:
	free(seen);
	return err;
}

static int decode_gpu_health(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	uint64_t seen = 0; /* devices (< SYSOM_GPU_MAX_DEVICES = 64) */
	int err;

	_Static_assert(SYSOM_GPU_MAX_DEVICES <= 64, "device bitmap");
	if ((err = check_count(d, s, d->limits->max_gpu_health, SYSOM_GPU_HEALTH_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->gpu_health, &b->gpu_health_cap, s->count,
			       sizeof(*b->gpu_health))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_GPU_HEALTH_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_gpu_health *g = &b->gpu_health[i];
		const char *problem;

		g->device = load_le32(p + WIRE_GPU_DEVICE);
		g->uuid = load_le32(p + WIRE_GPU_UUID);
		g->pci_bus_id = load_le32(p + WIRE_GPU_PCI_BUS_ID);
		g->name = load_le32(p + WIRE_GPU_NAME);
		g->samples = load_le32(p + WIRE_GPU_SAMPLES);
		g->slowdown_samples = load_le32(p + WIRE_GPU_SLOWDOWN_SAMPLES);
		g->reasons_any = load_le64(p + WIRE_GPU_REASONS_ANY);
		g->reasons_last = load_le64(p + WIRE_GPU_REASONS_LAST);
		g->sm_clock_min = load_le32(p + WIRE_GPU_SM_CLOCK_MIN);
		g->sm_clock_last = load_le32(p + WIRE_GPU_SM_CLOCK_LAST);
		g->sm_clock_max = load_le32(p + WIRE_GPU_SM_CLOCK_MAX);
		g->mem_clock_last = load_le32(p + WIRE_GPU_MEM_CLOCK_LAST);
		g->mem_clock_max = load_le32(p + WIRE_GPU_MEM_CLOCK_MAX);
		g->temp_max = load_le32(p + WIRE_GPU_TEMP_MAX);
		g->temp_last = load_le32(p + WIRE_GPU_TEMP_LAST);
		g->temp_slowdown = load_le32(p + WIRE_GPU_TEMP_SLOWDOWN);
		g->temp_shutdown = load_le32(p + WIRE_GPU_TEMP_SHUTDOWN);
		g->power_max_mw = load_le32(p + WIRE_GPU_POWER_MAX);
		g->power_last_mw = load_le32(p + WIRE_GPU_POWER_LAST);
		g->power_limit_mw = load_le32(p + WIRE_GPU_POWER_LIMIT);
		g->util_gpu = load_le32(p + WIRE_GPU_UTIL_GPU);
		g->util_mem = load_le32(p + WIRE_GPU_UTIL_MEM);
		g->ecc_corrected = load_le64(p + WIRE_GPU_ECC_CORRECTED);
		g->ecc_uncorrected = load_le64(p + WIRE_GPU_ECC_UNCORRECTED);
		g->retired_sbe = load_le32(p + WIRE_GPU_RETIRED_SBE);
		g->retired_dbe = load_le32(p + WIRE_GPU_RETIRED_DBE);
		g->pcie_replays = load_le32(p + WIRE_GPU_PCIE_REPLAYS);
		g->flags = load_le32(p + WIRE_GPU_FLAGS);
		g->nvlink_errors = load_le64(p + WIRE_GPU_NVLINK_ERRORS);
		g->xid_count = load_le32(p + WIRE_GPU_XID_COUNT);
		g->xid_last = load_le32(p + WIRE_GPU_XID_LAST);
		if ((problem = sysom_gpu_health_problem(b, g)))
			return CORRUPT(d, at, "GPU_HEALTH record %u: %s", i, problem);
		if (seen & (1ull << g->device))
			return CORRUPT(d, at + WIRE_GPU_DEVICE, "GPU_HEALTH record %u: device %u repeated",
				       i, g->device);
		seen |= 1ull << g->device;
		b->gpu_health_count++;
	}
	return 0;
}

static int decode_host_signals(struct decoder *d, const struct section *s)
{
	struct sysom_batch *b = d->batch;
	bool seen[SYSOM_HOST_SIGNAL_MAX + 1] = { false };
	int err;

	if ((err = check_count(d, s, d->limits->max_host_signals, SYSOM_HOST_SIGNAL_RECORD_SIZE)) ||
	    (err = alloc_array((void **)&b->host_signals, &b->host_signal_cap, s->count,
			       sizeof(*b->host_signals))))
		return err;
	for (uint32_t i = 0; i < s->count; i++) {
		const uint8_t *p = d->data + s->offset + (size_t)i * SYSOM_HOST_SIGNAL_RECORD_SIZE;
		size_t at = (size_t)(p - d->data);
		struct sysom_host_signal_value *o = &b->host_signals[i];

		o->signal = load_le16(p + WIRE_HOST_SIGNAL_ID);
		o->value = load_double(p + WIRE_HOST_SIGNAL_VALUE);
		if (!all_zero(p + WIRE_HOST_SIGNAL_RESERVED,
			      WIRE_HOST_SIGNAL_VALUE - WIRE_HOST_SIGNAL_RESERVED))
			return CORRUPT(d, at + WIRE_HOST_SIGNAL_RESERVED,
				       "HOST_SIGNALS record %u: reserved field is not zero", i);
		if (!sysom_host_signal_name(o->signal))
			return CORRUPT(d, at, "HOST_SIGNALS record %u: unknown signal %u", i,
				       o->signal);
		if (!isfinite(o->value) || o->value < 0)
			return CORRUPT(d, at + WIRE_HOST_SIGNAL_VALUE,
				       "HOST_SIGNALS record %u: value of %s is not finite and >= 0",
				       i, sysom_host_signal_name(o->signal));
		if (seen[o->signal])
			return CORRUPT(d, at, "HOST_SIGNALS record %u: signal %s repeated", i,
				       sysom_host_signal_name(o->signal));
		seen[o->signal] = true;
		b->host_signal_count++;
	}
	return 0;
}

static int read_header(struct decoder *d, struct section *sections,
		       size_t nknown)
{
	const uint8_t *p = d->data;
	struct sysom_batch *b = d->batch;
	uint16_t header_size, nsections;
	size_t table_end, prev_end;

	if (d->len < SYSOM_WIRE_HEADER_SIZE)
		return CORRUPT(d, 0, "batch of %zu bytes is shorter than the %d-byte header", d->len,
			       SYSOM_WIRE_HEADER_SIZE);
	if (memcmp(p + WIRE_HDR_MAGIC, SYSOM_WIRE_MAGIC, 4) != 0)
		return CORRUPT(d, WIRE_HDR_MAGIC, "bad magic (not a sysom batch)");
	b->major = load_le16(p + WIRE_HDR_MAJOR);
	b->minor = load_le16(p + WIRE_HDR_MINOR);
	if (b->major != SYSOM_WIRE_MAJOR)
		return fail(d, WIRE_HDR_MAJOR, -SYSOM_EVERSION,
			    "format major version %u is not supported (want %d)", b->major,
			    SYSOM_WIRE_MAJOR);
	header_size = load_le16(p + WIRE_HDR_HEADER_SIZE);
	nsections = load_le16(p + WIRE_HDR_SECTION_COUNT);
	if (header_size < SYSOM_WIRE_HEADER_SIZE || header_size > d->len)
		return CORRUPT(d, WIRE_HDR_HEADER_SIZE, "header size %u invalid", header_size);
	if (nsections > SYSOM_WIRE_MAX_SECTIONS)
		return fail(d, WIRE_HDR_SECTION_COUNT, -SYSOM_ELIMIT,
			    "%u sections exceed the limit of %d", nsections, SYSOM_WIRE_MAX_SECTIONS);
	if (load_le32(p + WIRE_HDR_FLAGS) != 0)
		return CORRUPT(d, WIRE_HDR_FLAGS, "unknown header flags 0x%x",
			       load_le32(p + WIRE_HDR_FLAGS));
	memcpy(b->node_id, p + WIRE_HDR_NODE_ID, SYSOM_NODE_ID_SIZE);
	b->agent_epoch = load_le64(p + WIRE_HDR_AGENT_EPOCH);
	b->sequence = load_le64(p + WIRE_HDR_SEQUENCE);
	b->window_start_ns = load_le64(p + WIRE_HDR_WINDOW_START);
	b->window_end_ns = load_le64(p + WIRE_HDR_WINDOW_END);
	if (b->window_end_ns < b->window_start_ns)
		return CORRUPT(d, WIRE_HDR_WINDOW_END, "window ends before it starts");
	if (b->window_end_ns - b->window_start_ns > 24ULL * 3600 * 1000000000ULL)
		return fail(d, WIRE_HDR_WINDOW_END, -SYSOM_ELIMIT, "window longer than 24 hours");

	table_end = (size_t)header_size + (size_t)nsections * SYSOM_WIRE_SECTION_ENTRY_SIZE;
	if (table_end > d->len)
		return CORRUPT(d, header_size, "section table runs past the end of the batch");
	prev_end = table_end;
	for (uint16_t i = 0; i < nsections; i++) {
		const uint8_t *e = p + header_size + (size_t)i * SYSOM_WIRE_SECTION_ENTRY_SIZE;
		size_t at = (size_t)(e - p);
		struct section s = {
			.type = load_le16(e + WIRE_SEC_TYPE),
			.count = load_le32(e + WIRE_SEC_COUNT),
			.offset = load_le32(e + WIRE_SEC_OFFSET),
			.size = load_le32(e + WIRE_SEC_SIZE),
			.present = true,
		};

		if (load_le16(e + WIRE_SEC_FLAGS) != 0)
			return CORRUPT(d, at + WIRE_SEC_FLAGS, "section %u: unknown flags", i);
		if (s.offset < prev_end || (uint64_t)s.offset + s.size > d->len)
			return CORRUPT(d, at + WIRE_SEC_OFFSET,
				       "section %u (%s): range [%u, +%u) overlaps or runs past the batch",
				       i, section_name(s.type), s.offset, s.size);
		prev_end = (size_t)s.offset + s.size;
		if (s.type == 0)
			return CORRUPT(d, at, "section %u: type 0", i);
		if (s.type >= nknown || !strcmp(section_name(s.type), "unknown"))
			continue; /* a newer minor version's (or a reserved) section: skip it */
		if (sections[s.type].present)
			return CORRUPT(d, at, "section %u: %s repeated", i, section_name(s.type));
		sections[s.type] = s;
	}
	if (!sections[SYSOM_SECTION_STRINGS].present || !sections[SYSOM_SECTION_NODE].present)
		return CORRUPT(d, header_size, "required section %s missing",
			       sections[SYSOM_SECTION_STRINGS].present ? "NODE" : "STRINGS");
	/* A batch is exactly its header, table and sections: bytes after them are nobody's. */
	if (prev_end != d->len)
		return CORRUPT(d, prev_end, "%zu bytes after the last section", d->len - prev_end);
	return 0;
}

/* ---- memory the decoder will allocate (mirrors the decode_* functions above) ---- */

/* Bytes of the batch array a section of fixed-size records becomes, or 0 when the decoder
 * refuses the section before allocating (count over the limit, size not count records). */
static uint64_t fixed_array(const struct section *s, uint32_t limit, size_t record_size,
			    size_t elem_size)
{
	if (s->count > limit || (uint64_t)s->count * record_size != s->size)
		return 0;
	return (uint64_t)s->count * elem_size;
}

uint64_t sysom_batch_decode_memory(const void *data, size_t len,
				   const struct sysom_wire_limits *limits)
{
	struct section sections[SYSOM_SECTION_TYPE_MAX + 1];
	struct sysom_batch scratch;
	struct decoder d = {
		.data = data,
		.len = len,
		.limits = limits ? limits : &sysom_wire_default_limits,
		.batch = &scratch,
	};
	const struct sysom_wire_limits *l = d.limits;
	const struct sysom_batch *b = &scratch; /* for sizeof of the array elements only */
	const struct section *s;
	uint64_t arrays = 0, temporary = 0, t;

	memset(&scratch, 0, sizeof(scratch));
	memset(sections, 0, sizeof(sections));
	/* The decoder allocates nothing before the header and the section table check out. */
	if (!data || read_header(&d, sections, sizeof(sections) / sizeof(sections[0])))
		return 0;
	s = &sections[SYSOM_SECTION_STRINGS];
	if (s->count && s->count <= l->max_strings && s->count <= s->size / 4)
		arrays += (uint64_t)s->count * sizeof(*b->strings) + (uint64_t)s->size + s->count;
	arrays += fixed_array(&sections[SYSOM_SECTION_OBJECTS], l->max_objects,
			      SYSOM_OBJECT_RECORD_SIZE, sizeof(*b->objects));
	arrays += fixed_array(&sections[SYSOM_SECTION_PROCESSES], l->max_processes,
			      SYSOM_PROCESS_RECORD_SIZE, sizeof(*b->processes));
	arrays += fixed_array(&sections[SYSOM_SECTION_MAPPINGS], l->max_mappings,
			      SYSOM_MAPPING_RECORD_SIZE, sizeof(*b->mappings));
	s = &sections[SYSOM_SECTION_STACKS];
	if (s->count <= l->max_stacks &&
	    s->count <= s->size / (SYSOM_STACK_HEADER_SIZE + SYSOM_FRAME_RECORD_SIZE)) {
		uint32_t max_frames = s->size / SYSOM_FRAME_RECORD_SIZE;
		if (max_frames > l->max_frames)
			max_frames = l->max_frames;
		arrays += (uint64_t)s->count * sizeof(*b->stacks) +
			  (uint64_t)max_frames * sizeof(*b->frames);
	}
	arrays += fixed_array(&sections[SYSOM_SECTION_SAMPLES], l->max_samples,
			      SYSOM_SAMPLE_RECORD_SIZE, sizeof(*b->samples));
	arrays += fixed_array(&sections[SYSOM_SECTION_COUNTERS], l->max_counters,
			      SYSOM_COUNTER_RECORD_SIZE, sizeof(*b->counters));
	t = fixed_array(&sections[SYSOM_SECTION_JOB_RANKS], l->max_job_ranks,
			SYSOM_JOB_RANK_RECORD_SIZE, sizeof(*b->job_ranks));
	if (t) { /* plus a byte per decoded process (at least one), to find repeats */
		arrays += t;
		t = sections[SYSOM_SECTION_PROCESSES].count ? sections[SYSOM_SECTION_PROCESSES].count
							    : 1;
		temporary = t > temporary ? t : temporary;
	}
	arrays += fixed_array(&sections[SYSOM_SECTION_COMMUNICATORS], l->max_communicators,
			      SYSOM_COMMUNICATOR_RECORD_SIZE, sizeof(*b->communicators));
	arrays += fixed_array(&sections[SYSOM_SECTION_NCCL_CALLS], l->max_nccl_calls,
			      SYSOM_NCCL_CALL_RECORD_SIZE, sizeof(*b->nccl_calls));
	arrays += fixed_array(&sections[SYSOM_SECTION_LAUNCHES], l->max_launches,
			      SYSOM_LAUNCH_RECORD_SIZE, sizeof(*b->launches));
	arrays += fixed_array(&sections[SYSOM_SECTION_GPU_KERNELS], l->max_gpu_kernels,
			      SYSOM_GPU_KERNEL_RECORD_SIZE, sizeof(*b->gpu_kernels));
	arrays += fixed_array(&sections[SYSOM_SECTION_NCCL_PROFILES], l->max_nccl_profiles,
			      SYSOM_NCCL_PROFILE_RECORD_SIZE, sizeof(*b->nccl_profiles));
	arrays += fixed_array(&sections[SYSOM_SECTION_NCCL_LINKS], l->max_nccl_links,
			      SYSOM_NCCL_LINK_RECORD_SIZE, sizeof(*b->nccl_links));
	if ((t = fixed_array(&sections[SYSOM_SECTION_OS_CPUS], l->max_os_cpus,
			     SYSOM_OS_CPU_RECORD_SIZE, sizeof(*b->os_cpus)))) {
		arrays += t; /* plus a bitmap of CPU numbers */
		t = SYSOM_OS_CPU_LIMIT / 64 * sizeof(uint64_t);
		temporary = t > temporary ? t : temporary;
	}
	s = &sections[SYSOM_SECTION_OS_IRQS];
	if ((t = fixed_array(s, l->max_os_irqs, SYSOM_OS_IRQ_RECORD_SIZE, sizeof(*b->os_irqs)))) {
		arrays += t; /* plus an index of (cpu, irq) */
		t = hash_index_memory(s->count);
		temporary = t > temporary ? t : temporary;
	}
	s = &sections[SYSOM_SECTION_OS_THREADS];
	if ((t = fixed_array(s, l->max_os_threads, SYSOM_OS_THREAD_RECORD_SIZE,
			     sizeof(*b->os_threads)))) {
		arrays += t; /* plus an index of (process, tid) */
		t = hash_index_memory(s->count);
		temporary = t > temporary ? t : temporary;
	}
	arrays += fixed_array(&sections[SYSOM_SECTION_OFFCPU], l->max_offcpu,
			      SYSOM_OFFCPU_RECORD_SIZE, sizeof(*b->offcpu));
	t = fixed_array(&sections[SYSOM_SECTION_IDENTITIES], l->max_identities,
			SYSOM_IDENTITY_RECORD_SIZE, sizeof(*b->identities));
	if (t) { /* plus a byte per decoded process (at least one), to find repeats */
		arrays += t;
		t = sections[SYSOM_SECTION_PROCESSES].count ? sections[SYSOM_SECTION_PROCESSES].count
							    : 1;
		temporary = t > temporary ? t : temporary;
	}
	arrays += fixed_array(&sections[SYSOM_SECTION_GPU_HEALTH], l->max_gpu_health,
			      SYSOM_GPU_HEALTH_RECORD_SIZE, sizeof(*b->gpu_health));
	arrays += fixed_array(&sections[SYSOM_SECTION_HOST_SIGNALS], l->max_host_signals,
			      SYSOM_HOST_SIGNAL_RECORD_SIZE, sizeof(*b->host_signals));
	/* Temporaries live one section at a time, after that section's array. */
	return arrays + temporary;
}

int sysom_batch_decode(const void *data, size_t len, const struct sysom_wire_limits *limits,
		       struct sysom_batch *out, struct sysom_wire_error *err)
{
	struct section sections[SYSOM_SECTION_TYPE_MAX + 1];
	struct decoder d = {
		.data = data,
		.len = len,
		.limits = limits ? limits : &sysom_wire_default_limits,
		.batch = out,
		.err = err,
	};
	/* Dependency order: strings, then objects (node refers to the kernel object), ... */
	static const struct {
		uint16_t type;
		int (*decode)(struct decoder *, const struct section *);
	} order[] = {
		{ SYSOM_SECTION_STRINGS, decode_strings },
		{ SYSOM_SECTION_OBJECTS, decode_objects },
		{ SYSOM_SECTION_NODE, decode_node },
		{ SYSOM_SECTION_PROCESSES, decode_processes },
		{ SYSOM_SECTION_MAPPINGS, decode_mappings },
		{ SYSOM_SECTION_STACKS, decode_stacks },
		{ SYSOM_SECTION_SAMPLES, decode_samples },
		{ SYSOM_SECTION_COUNTERS, decode_counters },
		{ SYSOM_SECTION_JOB_RANKS, decode_job_ranks },
		{ SYSOM_SECTION_COMMUNICATORS, decode_communicators },
		{ SYSOM_SECTION_NCCL_CALLS, decode_nccl_calls },
		{ SYSOM_SECTION_LAUNCHES, decode_launches },
		{ SYSOM_SECTION_GPU_KERNELS, decode_gpu_kernels },
		{ SYSOM_SECTION_NCCL_PROFILES, decode_nccl_profiles },
		{ SYSOM_SECTION_NCCL_LINKS, decode_nccl_links },
		{ SYSOM_SECTION_OS_CPUS, decode_os_cpus },
		{ SYSOM_SECTION_OS_IRQS, decode_os_irqs },
		{ SYSOM_SECTION_OS_THREADS, decode_os_threads },
		{ SYSOM_SECTION_OFFCPU, decode_offcpu },
		{ SYSOM_SECTION_IDENTITIES, decode_identities },
		{ SYSOM_SECTION_GPU_HEALTH, decode_gpu_health },
		{ SYSOM_SECTION_HOST_SIGNALS, decode_host_signals },
	};
	int rc;

	memset(out, 0, sizeof(*out));
	memset(sections, 0, sizeof(sections));
	if (err) {
		err->offset = 0;
		err->message[0] = '\0';
	}
	if (!data && len)
		return -EINVAL;
	rc = read_header(&d, sections, sizeof(sections) / sizeof(sections[0]));
	if (rc)
		goto cleanup;
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		const struct section *s = &sections[order[i].type];

		if (!s->present)
			continue;
		rc = order[i].decode(&d, s);
		if (rc)
			goto cleanup;
	}
cleanup:
	if (rc) {
		/* Nothing half-decoded leaves the decoder: a failed decode yields an empty batch. */
		sysom_batch_free(out);
		if (rc == -ENOMEM && err)
			snprintf(err->message, sizeof(err->message), "out of memory while decoding");
	}
	return rc;
}
