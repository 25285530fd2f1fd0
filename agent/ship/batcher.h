/* SPDX-License-Identifier: Apache-2.0 */
/* The open window: drained samples with resolved frames, sealed into compressed batches. */
#ifndef SYSOM_AGENT_SHIP_BATCHER_H
#define SYSOM_AGENT_SHIP_BATCHER_H

#include <stdint.h>

#include "agent/node/host.h"
#include "agent/ranks/jobenv.h"
#include "agent/node/kernel.h"
#include "agent/node/proctrack.h"
#include "agent/sampling/sampler.h"
#include "common/bytes.h"

struct batcher_options {
	const struct host_identity *host;  /* borrowed; outlives the batcher */
	const struct kernel_info *kernel;  /* borrowed */
	const char *agent_version;
	uint32_t hz;
	double sample_rate;
	double drain_interval_s;
	double batch_interval_s;
	uint32_t max_sample_rows; /* rows per batch; further samples are dropped and counted */
	uint32_t max_nccl_calls;  /* NCCL calls per batch (0: 1 << 20); more are dropped, counted */
	int zstd_level;
	struct pyframes *py;      /* borrowed, may be NULL: names Python frames of user stacks */
	struct perfmap_cache *jit; /* borrowed, may be NULL: names JIT frames (perf maps) */
};

/* What a sealed batch holds. */
struct batcher_seal_info {
	uint64_t sequence;
	uint64_t window_start_ns, window_end_ns;
	uint64_t samples;        /* sum of counts */
	uint64_t drained_keys;   /* distinct BPF aggregation keys drained in the window */
	uint32_t sample_rows, stacks, processes, objects;
	size_t encoded_bytes, compressed_bytes;
};

struct batcher;
struct pyframes;
struct perfmap_cache;

int batcher_new(const struct batcher_options *opts, struct proctrack *pt, struct batcher **out);
void batcher_free(struct batcher *b);

/* Whether JIT frames may be sent as wire object kind JIT (1.8): only to a server that said it
 * reads 1.8; until then they stay anonymous memory ("[anon]+0x..."). Off at start. */
void batcher_set_jit_names(struct batcher *b, bool on);

/* Starts folding one drain's entries; `drain_realtime_ns` stamps their time offset. */
void batcher_begin_drain(struct batcher *b, uint64_t drain_realtime_ns);

/* A sampler_drain callback: resolves the entry's frames and adds it. 0 or -errno. */
int batcher_add_entry(void *batcher, const struct sampler_entry *entry);

/* sampler_offcpu_fn: adds one drained off-CPU entry (blocked time on a pair of stacks) to the
 * open window as an OFFCPU row; rows beyond max_sample_rows are counted as lost. */
int batcher_add_offcpu(void *batcher, const struct sampler_offcpu_entry *entry);

/* Adds `delta` to a batch counter (enum sysom_counter_id). */
void batcher_add_counter(struct batcher *b, uint16_t id, uint64_t delta);

/*
 * Training-job records of process incarnation (tgid, generation) (wire minor 1). Each returns
 * 0 or -errno; a process the tracker cannot hold is skipped (0).
 */
int batcher_add_nccl_call(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_nccl_call *c);
int batcher_set_communicator(struct batcher *b, uint32_t tgid, uint32_t generation,
			     const struct sysom_communicator *c);
/* `source`: enum sysom_job_source; `groups` may be NULL; `rank_pid`: 0 for a rank's own
 * process, else the pid of the rank process whose worker `tgid` is (role worker);
 * `gpu_device`: the rank's GPU as NVML index + 1, 0 unknown (wire 1.7). */
int batcher_set_job_rank(struct batcher *b, uint32_t tgid, uint32_t generation,
			 const struct job_identity *id, uint8_t source, const char *groups,
			 uint32_t rank_pid, uint8_t gpu_device);

/* Launches of one kernel from one user stack (leaf first, raw addresses). */
struct batcher_launch {
	uint64_t function;
	const char *kernel_name; /* NULL when unknown */
	const uint64_t *ips;
	uint16_t nframes;
	uint64_t count;
	uint32_t grid[3], block[3], shared_mem;
	uint16_t flags;          /* SYSOM_LAUNCH_* */
};
int batcher_add_launch(struct batcher *b, uint32_t tgid, uint32_t generation,
		       const struct batcher_launch *l);

/* Changes the sampling settings recorded from the next batch on (SIGHUP). */
/* GPU-side statistics from in-process components (agent/gpu/gpustats.c), merged per row; at most
 * BATCHER_MAX_GPU_ROWS rows of each kind per batch, more are dropped and counted
 * (SYSOM_COUNTER_GPU_STATS_DROPPED), as are rows of processes the tracker cannot see. The
 * string index fields of the records are ignored: the strings are passed instead. */
#define BATCHER_MAX_GPU_ROWS (1u << 16)
int batcher_add_gpu_kernel(struct batcher *b, uint32_t tgid, uint32_t generation,
			   const struct sysom_gpu_kernel *k, const char *name);
struct batcher_profile_names {
	const char *comm_name, *func, *algo, *proto, *datatype;
};
int batcher_add_nccl_profile(struct batcher *b, uint32_t tgid, uint32_t generation,
			     const struct sysom_nccl_profile *p,
			     const struct batcher_profile_names *names);
int batcher_add_nccl_link(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_nccl_link *l);

/* OS signals (agent/os/ossignals.c), merged per row: CPU rows, (CPU, IRQ) rows with the handler's
 * name, thread rows of process incarnation (tgid, generation) with the thread's comm. At most
 * BATCHER_MAX_OS_CPUS / BATCHER_MAX_OS_ROWS rows per kind and batch (the decoder's limits);
 * more, and threads of processes the tracker cannot see, are dropped and counted
 * (SYSOM_COUNTER_OS_ROWS_DROPPED). String and process fields of the records are ignored. */
#define BATCHER_MAX_OS_CPUS 4096u
#define BATCHER_MAX_OS_ROWS (1u << 16)
int batcher_add_os_cpu(struct batcher *b, const struct sysom_os_cpu *c);
int batcher_add_os_irq(struct batcher *b, const struct sysom_os_irq *q, const char *name);
/* One GPU's health over the window (GPU_HEALTH, agent/gpu/nvml.h); the record's string fields
 * are ignored: `uuid`, `pci_bus_id` and `name` are interned. -EINVAL for an invalid record. */
int batcher_add_gpu_health(struct batcher *b, const struct sysom_gpu_health *g, const char *uuid,
			   const char *pci_bus_id, const char *name);
int batcher_add_os_thread(struct batcher *b, uint32_t tgid, uint32_t generation,
			  const struct sysom_os_thread *t, const char *comm);

/* A host signal of the window (agent/os/hostsig.c): the last value set wins. -EINVAL for what
 * the wire refuses (unknown signal, not finite, negative). */
int batcher_set_host_signal(struct batcher *b, uint16_t signal, double value);

void batcher_set_sampling(struct batcher *b, uint32_t hz, double sample_rate,
			  double drain_interval_s, double batch_interval_s);

/*
 * Seals the window [window start, now): encodes it with the given identity, compresses it
 * into `out` (appended) and opens the next window. Returns 0 or -errno (the window's data
 * is then kept and sealed with the next call).
 */
int batcher_seal(struct batcher *b, const uint8_t node_id[16], uint64_t epoch, uint64_t sequence,
		 uint64_t now_realtime_ns, struct byte_buf *out, struct batcher_seal_info *info);

#endif
