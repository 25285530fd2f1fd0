/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Telemetry records that in-process components (the NCCL profiler plugin, the CUPTI activity
 * library, the simulated job's fake CUDA) send to the local agent over its registration socket
 * (docs/registration-protocol.md has the framing; docs/channel-records.md these payloads).
 *
 * Producers and the agent run on one host: the layouts are little-endian, naturally aligned,
 * with explicit padding (always 0), and their sizes are checked below. Libc only, so the
 * component libraries and the agent can both include it.
 */
#ifndef SYSOM_RECORDS_H
#define SYSOM_RECORDS_H

#include <stdint.h>

#include "include/sysom/histogram.h"

/* Record types in the 16-byte registry header (1 REGISTER and 2 ACK are the registration's). */
enum sysom_record_type {
	SYSOM_REC_HELLO = 3,        /* component → agent, first record of a connection */
	SYSOM_REC_MASK = 4,         /* agent → component: NCCL profiler activation mask */
	SYSOM_REC_NCCL_COMM = 5,    /* plugin → agent: a communicator (init and finalize) */
	SYSOM_REC_NCCL_COLL = 6,    /* plugin → agent: table of struct sysom_rec_coll */
	SYSOM_REC_NCCL_LINK = 7,    /* plugin → agent: table of struct sysom_rec_link */
	SYSOM_REC_GPU_KERNEL = 8,   /* CUPTI library → agent: table of struct sysom_rec_kernel */
	SYSOM_REC_STATS = 9,        /* component → agent: cumulative counters */
};

enum sysom_component {
	SYSOM_COMPONENT_NCCL_PROFILER = 1, /* libnccl-profiler-sysom.so */
	SYSOM_COMPONENT_CUPTI = 2,         /* libsysom-cupti.so */
	SYSOM_COMPONENT_SIMULATED = 3,     /* a test double (the simulated job's fake CUDA) */
};

#define SYSOM_REC_NAME_MAX 127 /* bytes of a component or communicator name */

/* HELLO payload: this struct, then the component's name and version as text (at most
 * SYSOM_REC_NAME_MAX bytes, NUL optional), e.g. "libnccl-profiler-sysom 0.6 (v5)". */
struct sysom_rec_hello {
	uint16_t component;       /* enum sysom_component */
	uint16_t interface;       /* NCCL profiler ABI (4, 5) or CUPTI API version */
	uint32_t activation_mask; /* profiler: the mask in force; others 0 */
	uint32_t reserved[2];     /* 0 */
};
_Static_assert(sizeof(struct sysom_rec_hello) == 16, "hello layout");

/* MASK payload (agent → NCCL profiler): the event types to record from now on (NCCL's
 * ncclProfile* bits; the plugin keeps only those it understands). */
struct sysom_rec_mask {
	uint32_t activation_mask;
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct sysom_rec_mask) == 8, "mask layout");

#define SYSOM_REC_COMM_FINALIZED 0x1

/* NCCL_COMM payload: this struct, then the communicator's name as text (<= 127 bytes). */
struct sysom_rec_comm {
	uint64_t comm_id; /* the commId NCCL passed to init (its commHash), != 0 */
	int32_t rank;     /* 0 <= rank < nranks */
	int32_t nranks;   /* >= 1 */
	int32_t nnodes;   /* >= 1 */
	uint32_t flags;   /* SYSOM_REC_COMM_* */
};
_Static_assert(sizeof(struct sysom_rec_comm) == 24, "comm layout");

/*
 * Tables (NCCL_COLL, NCCL_LINK, GPU_KERNEL) share one shape: this header, `entry_count`
 * entries of `entry_size` bytes, then `strings_size` bytes of NUL-terminated strings that
 * entries name by byte offset (offset 0 is always "", so strings_size >= 1). A reader takes
 * the fields it knows from each entry and ignores the rest (entry_size may grow; it never
 * shrinks below the sizes here). The whole record is at most 64 KiB: producers split tables.
 */
struct sysom_rec_table {
	uint16_t entry_size;
	uint16_t entry_count;
	uint32_t strings_size;
	uint64_t comm_id;         /* NCCL tables: the communicator (announced by NCCL_COMM first) */
	uint64_t window_start_ns; /* CLOCK_REALTIME */
	uint64_t window_end_ns;   /* >= window_start_ns */
};
_Static_assert(sizeof(struct sysom_rec_table) == 32, "table layout");

/* NCCL_COLL entry: one kind of operation in one window (see struct sysom_nccl_profile in
 * common/wire/wire.h for the meaning of each field; strings are offsets into the table's strings). */
struct sysom_rec_coll {
	uint32_t func, algo, proto, datatype;
	int32_t peer;       /* -1 for collectives */
	uint32_t nchannels;
	uint64_t count;
	uint64_t bytes;
	uint64_t kernel_timed;
	uint64_t kernel_ns_total, kernel_ns_min, kernel_ns_max;
	uint64_t span_timed;
	uint64_t span_ns_total;
	uint64_t enqueue_ns_total;
	uint64_t transfers;
	uint64_t transfer_bytes;
	uint64_t first_seq, last_seq;
};
_Static_assert(sizeof(struct sysom_rec_coll) == 128, "coll layout");

/* NCCL_LINK entry: sends to one peer over one channel (-1: all channels) in one window (see
 * struct sysom_nccl_link in common/wire/wire.h). */
struct sysom_rec_link {
	int32_t peer;
	int32_t channel;
	uint64_t transfers;
	uint64_t bytes;
	uint64_t time_ns_total;
	double sx, sy, sxx, sxy, syy;
	double min_latency_ns, min_bytes_per_ns, min_r2;
	uint32_t min_points;
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct sysom_rec_link) == 104, "link layout");

#define SYSOM_REC_HIST_BUCKETS SYSOM_GPU_HIST_BUCKETS /* include/sysom/histogram.h */

/* GPU_KERNEL entry: one (kernel name, device, stream) in one window. */
struct sysom_rec_kernel {
	uint32_t name;   /* string offset, not "" */
	uint32_t device;
	uint64_t stream;
	uint64_t count, total_ns, min_ns, max_ns;
	uint32_t hist[SYSOM_REC_HIST_BUCKETS];
};
_Static_assert(sizeof(struct sysom_rec_kernel) == 128, "kernel layout");

/* STATS payload: `n` of these (n = length / 16), cumulative since the component started. */
struct sysom_rec_stat {
	uint16_t id;  /* enum sysom_rec_stat_id; unknown ids are ignored */
	uint16_t reserved[3];
	uint64_t value;
};
_Static_assert(sizeof(struct sysom_rec_stat) == 16, "stat layout");

enum sysom_rec_stat_id {
	SYSOM_STAT_EVENTS = 1,          /* profiler events recorded */
	SYSOM_STAT_EVENTS_DROPPED = 2,  /* profiler events dropped (windows full) */
	SYSOM_STAT_ORPHANS = 3,         /* child events whose parent's window was gone */
	SYSOM_STAT_FORCED_CLOSES = 4,   /* windows processed with operations still open */
	SYSOM_STAT_WINDOWS = 5,         /* windows processed */
	SYSOM_STAT_RECORDS_SENT = 6,
	SYSOM_STAT_RECORDS_DROPPED = 7, /* records not sent: agent absent or its socket full */
	SYSOM_STAT_CUPTI_RECORDS = 8,   /* CUPTI kernel records folded */
	SYSOM_STAT_CUPTI_DROPPED = 9,   /* CUPTI records dropped (by CUPTI, or a full table) */
};

/* Histogram bucket of a duration in ns (shared by producers and tests): the GPU rule of
 * include/sysom/histogram.h, which the agent forwards to the wire unchanged. */
static inline unsigned sysom_rec_hist_bucket(uint64_t ns)
{
	return sysom_gpu_hist_bucket(ns);
}

#endif
