/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiles and collectives in the formats other tools read: pprof (gzipped profile.proto:
 * go tool pprof, Pyroscope, Grafana), speedscope's JSON file format, and Chrome trace event
 * JSON (Perfetto UI, chrome://tracing) of a job's NCCL calls per rank. docs/http-api.md
 * describes what each holds.
 */
#ifndef SYSOM_SERVER_QUERY_EXPORT_H
#define SYSOM_SERVER_QUERY_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "server/query/profile.h"
#include "server/store/store.h"

/* What an exported profile says about itself besides its stacks. */
struct query_export_info {
	enum query_profile_kind kind;
	int64_t from_ns, to_ns; /* the query's time range, ns since the epoch */
	uint32_t sample_hz;     /* CPU profiles: the sampling rate of every node; 0 unknown/mixed */
};

/*
 * Appends the profile `p` as a gzip-compressed pprof Profile (server/query/profile.proto):
 * sample types per kind (cpu: samples/count, and cpu/nanoseconds when info->sample_hz is
 * known; gpu-launch: launches/count; gpu-time: gpu_time/nanoseconds), one Sample per stack
 * (leaf first, labels comm, pid, processes), Locations with their Mapping (object path, Build
 * ID; addresses are offsets in the object: memory_start 0, file_offset 0) and Lines (inlined
 * calls first), Functions (name, source file), the range as time_nanos/duration_nanos, the
 * sampling period. Returns 0 or -ENOMEM.
 */
int query_pprof_encode(const struct query_profile *p, const struct query_export_info *info,
		       struct byte_buf *out);

/*
 * Appends the profile as a speedscope file (https://www.speedscope.app/file-format-schema.json):
 * shared frames (name, file: the source file, else the object; line), one "sampled" profile
 * whose samples are the stacks root first (the thread name as the root frame, as in folded
 * output) with their counts as weights (unit "none"; "nanoseconds" for gpu-time). Returns 0
 * or -ENOMEM.
 */
int query_speedscope_render(const struct query_profile *p, const struct query_export_info *info,
			    struct byte_buf *out);

#define QUERY_TRACE_DEFAULT_EVENTS 50000
#define QUERY_TRACE_MAX_EVENTS 200000 /* about 60 MiB of JSON */

/*
 * A Chrome trace event document of a job's NCCL calls, written as the calls arrive (in the
 * order of store_collectives_list): a process per (node, pid) named by its job rank and host,
 * a thread per communicator (the same tid in every process), one complete ("X") event per
 * call (name the op; args op, comm, seq, instance "comm/op/seq", bytes, count, result, pid,
 * tid, entry_delay_ns, and rank, nranks, peer in the communicator, null when unknown). Times
 * are µs since the range's start (time_origin_ns in otherData).
 */
struct query_trace;

/* Starts a document for job `job` over [from_ns, to_ns] that holds at most `max_events`
 * calls. *out: free with query_trace_free. 0 or -ENOMEM. */
int query_trace_new(const char *job, int64_t from_ns, int64_t to_ns, uint32_t max_events,
		    struct query_trace **out);

/* Makes process (node_id, pid) known with its rank in the job (before its calls arrive):
 * processes are numbered in the order they become known. 0 or -ENOMEM. */
int query_trace_process_add(struct query_trace *t, const char *node_id, uint32_t pid,
			    int32_t job_rank, const char *hostname);

/* Adds a call. 0, -ENOMEM, or -ENOSPC when the document is full (it says it is truncated). */
int query_trace_add(struct query_trace *t, const struct store_collective_call *c);

/* Marks the document truncated (the source had more than it could hold). */
void query_trace_truncated_set(struct query_trace *t);

/* Closes the document and appends it to `out` (moved there without a copy when `out` is
 * empty); call once. 0 or -ENOMEM. */
int query_trace_finish(struct query_trace *t, struct byte_buf *out);

/* Calls written so far. */
uint32_t query_trace_events(const struct query_trace *t);

/* Frees it; accepts NULL. */
void query_trace_free(struct query_trace *t);

/* Appends `s` as a JSON string (quotes included), sanitised to valid UTF-8. */
void query_json_string_append(struct byte_buf *out, const char *s);

#endif
