/* SPDX-License-Identifier: Apache-2.0 */
/* The agent → server batch: in-memory model, builder, encoder and bounded decoder. */
#ifndef SYSOM_COMMON_WIRE_WIRE_H
#define SYSOM_COMMON_WIRE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/hash.h"
#include "include/sysom/histogram.h"
#include "include/sysom/nccl_ops.h"

/*
 * Wire format version 1.4 (docs/wire-format.md has the same tables, including the record
 * layouts of the sections below). All integers little-endian.
 *
 * Header, 64 bytes:
 *   OFFSET SIZE FIELD
 *   0      4    magic "SYSB"
 *   4      2    major version (1): a reader rejects any other major
 *   6      2    minor version (4): minors only add section types; readers skip unknown types
 *   8      2    header size in bytes (>= 64; a reader skips bytes it does not know)
 *   10     2    section count (<= 64)
 *   12     4    flags (0; a reader rejects unknown flags)
 *   16     16   node id (machine id of the node)
 *   32     8    agent epoch (random, fixed for the life of the agent's spool state)
 *   40     8    batch sequence number (per epoch, strictly increasing)
 *   48     8    window start, ns since the Unix epoch (CLOCK_REALTIME)
 *   56     8    window end, ns since the Unix epoch (>= start)
 *
 * Section table at `header size`, `section count` entries of 16 bytes:
 *   0      2    section type (enum sysom_section_type)
 *   2      2    flags (0)
 *   4      4    record count
 *   8      4    offset of the section from the start of the batch
 *   12     4    size of the section in bytes
 * Sections lie after the table, in increasing offset order, without overlap; each known type
 * appears at most once; STRINGS and NODE are required.
 */
#define SYSOM_WIRE_MAGIC "SYSB"
#define SYSOM_WIRE_MAJOR 1
#define SYSOM_WIRE_MINOR 8 /* 1.1 added JOB_RANKS, COMMUNICATORS, NCCL_CALLS, LAUNCHES;
			     * 1.2 GPU_KERNELS, NCCL_PROFILES, NCCL_LINKS;
			     * 1.3 OS_CPUS, OS_IRQS, OS_THREADS; 1.4 OFFCPU, NCCL_CALLS'
			     * in-flight flag, object kind PYTHON (Python frames);
			     * 1.5 IDENTITIES (24); 1.6 GPU_HEALTH (21), HOST_SIGNALS (22);
			     * 1.7 JOB_RANKS' gpu_device; 1.8 object kind JIT, counters 78, 79 */
/* HTTP response header of POST /api/v1/ingest (1.7 and on): the minor version the server
 * reads; an agent sends the fields of a minor only to a server that names it or a later one. */
#define SYSOM_WIRE_MINOR_HEADER "Sysom-Wire-Minor"
#define SYSOM_WIRE_HEADER_SIZE 64
#define SYSOM_WIRE_SECTION_ENTRY_SIZE 16
#define SYSOM_WIRE_MAX_SECTIONS 64
#define SYSOM_WIRE_NONE UINT32_MAX /* "no such entry" for optional indexes */
#define SYSOM_BUILD_ID_MAX 64
#define SYSOM_NODE_ID_SIZE 16

enum sysom_section_type {
	SYSOM_SECTION_STRINGS = 1,   /* u32 length + bytes, per string; string 0 is "" */
	SYSOM_SECTION_NODE = 2,      /* one 64-byte record */
	SYSOM_SECTION_OBJECTS = 3,   /* 72-byte records: executable files, kernel, anon regions */
	SYSOM_SECTION_PROCESSES = 4, /* 32-byte records */
	SYSOM_SECTION_MAPPINGS = 5,  /* 32-byte records */
	SYSOM_SECTION_STACKS = 6,    /* 8-byte header + 12 bytes per frame */
	SYSOM_SECTION_SAMPLES = 7,   /* 40-byte records */
	SYSOM_SECTION_COUNTERS = 8,  /* 16-byte records */
	/* Minor 1: training jobs, NCCL and CUDA (older readers skip these). */
	SYSOM_SECTION_JOB_RANKS = 9,     /* 48-byte records: a process's place in a training job */
	SYSOM_SECTION_COMMUNICATORS = 10, /* 72-byte records: NCCL communicators per process */
	SYSOM_SECTION_NCCL_CALLS = 11,   /* 80-byte records: one per traced NCCL API call */
	SYSOM_SECTION_LAUNCHES = 12,     /* 64-byte records: kernel launches per (kernel, stack) */
	/* Minor 2: GPU-side timing from in-process components (docs/channel-records.md). */
	SYSOM_SECTION_GPU_KERNELS = 13,   /* 136-byte records: GPU kernel time per (kernel, stream) */
	SYSOM_SECTION_NCCL_PROFILES = 14, /* 152-byte records: NCCL profiler plugin per operation kind */
	SYSOM_SECTION_NCCL_LINKS = 15,    /* 120-byte records: rank-to-rank transfer statistics */
	/* Minor 3: OS signals per window (interrupts, softirqs, scheduling, NUMA). */
	SYSOM_SECTION_OS_CPUS = 16,    /* 208-byte records: one per CPU */
	SYSOM_SECTION_OS_IRQS = 17,    /* 32-byte records: hard interrupts per (CPU, IRQ) */
	SYSOM_SECTION_OS_THREADS = 18, /* 224-byte records: one per thread of a tracked process */
	/* Minor 4: off-CPU (blocked) time per thread and stacks. (20 is kept for off-CPU too.) */
	SYSOM_SECTION_OFFCPU = 19,     /* 56-byte records */
	/* 20, 23: reserved, skipped like any unknown section. */
	/* Minor 6: GPU health from NVML and the kernel log (agent/gpu/nvml.c). */
	SYSOM_SECTION_GPU_HEALTH = 21, /* 144-byte records: one per GPU per window */
	/* Minor 6: host-level signals per window (Reveal: PSI, network, disk, memory, CPU
	 * frequency), one record per signal the node could read. */
	SYSOM_SECTION_HOST_SIGNALS = 22, /* 16-byte records */
	/* Minor 5: who a process belongs to (container, pod, Slurm job, systemd unit). */
	SYSOM_SECTION_IDENTITIES = 24, /* 48-byte records */
	SYSOM_SECTION_TYPE_MAX = SYSOM_SECTION_IDENTITIES,
};

#define SYSOM_NODE_RECORD_SIZE 64
#define SYSOM_OBJECT_RECORD_SIZE 72
#define SYSOM_PROCESS_RECORD_SIZE 32
#define SYSOM_MAPPING_RECORD_SIZE 32
#define SYSOM_STACK_HEADER_SIZE 8
#define SYSOM_FRAME_RECORD_SIZE 12
#define SYSOM_SAMPLE_RECORD_SIZE 40
#define SYSOM_COUNTER_RECORD_SIZE 16
#define SYSOM_JOB_RANK_RECORD_SIZE 48
#define SYSOM_COMMUNICATOR_RECORD_SIZE 72
#define SYSOM_NCCL_CALL_RECORD_SIZE 80
#define SYSOM_LAUNCH_RECORD_SIZE 64
#define SYSOM_GPU_KERNEL_RECORD_SIZE 136
#define SYSOM_NCCL_PROFILE_RECORD_SIZE 152
#define SYSOM_NCCL_LINK_RECORD_SIZE 120
#define SYSOM_OS_CPU_RECORD_SIZE 208
#define SYSOM_OS_IRQ_RECORD_SIZE 32
#define SYSOM_OS_THREAD_RECORD_SIZE 224
#define SYSOM_OFFCPU_RECORD_SIZE 56
#define SYSOM_IDENTITY_RECORD_SIZE 48
#define SYSOM_GPU_HEALTH_RECORD_SIZE 144
#define SYSOM_HOST_SIGNAL_RECORD_SIZE 16

/* What an object (the thing a frame's offset is relative to) is. */
enum sysom_object_kind {
	SYSOM_OBJECT_ELF = 1,       /* ELF file identified by its GNU build ID note */
	SYSOM_OBJECT_FILE_HASH = 2, /* file without a build ID: 16-byte XXH3-128 of its content */
	SYSOM_OBJECT_KERNEL = 3,    /* running kernel image; offsets are relative to _text */
	SYSOM_OBJECT_KMODULE = 4,   /* kernel module; offsets relative to its core base */
	SYSOM_OBJECT_ANON = 5,      /* anonymous executable memory (JIT); offset = address */
	SYSOM_OBJECT_UNKNOWN = 6,   /* address in no known mapping; offset = address */
	/* Minor 4: a Python function; name "<qualname>\t<file>", offset = line (0: unknown). */
	SYSOM_OBJECT_PYTHON = 7,
	/* Minor 8: a JIT-compiled function named by its process's perf map (/tmp/perf-PID.map);
	 * name as the map gives it, offset = the frame's address minus the function's start. */
	SYSOM_OBJECT_JIT = 8,
	SYSOM_OBJECT_KIND_MAX = SYSOM_OBJECT_JIT,
};

enum sysom_stack_kind {
	SYSOM_STACK_KERNEL = 1,
	SYSOM_STACK_USER = 2,
};

/* Why an unwind ended; 0 means it reached the outermost frame (or the kernel said so). */
enum sysom_stack_stop {
	SYSOM_STOP_COMPLETE = 0,
	SYSOM_STOP_DEPTH_LIMIT = 1,  /* the depth limit was reached */
	SYSOM_STOP_READ_FAULT = 2,   /* the stack could not be read */
	SYSOM_STOP_STACK_LOST = 3,   /* the agent lost the stack (BPF stack store full) */
	/* Hybrid unwinder (enum unwind_stop in bpf/unwind.h; the agent maps them in one table,
	 * agent/sampling/sampler.c). */
	SYSOM_STOP_NO_MAPPING = 4,   /* a pc in no executable mapping known to the unwinder */
	SYSOM_STOP_FP_INVALID = 5,   /* no usable CFI and the frame pointer failed validation */
	SYSOM_STOP_JIT = 6,          /* anonymous (JIT) code without a valid frame pointer */
	SYSOM_STOP_CFA_ORDER = 7,    /* the caller's stack pointer did not increase */
	SYSOM_STOP_RBP_UNKNOWN = 8,  /* a rule needed RBP, lost in a callee */
	SYSOM_STOP_TAIL_CALLS = 9,   /* the BPF tail-call budget ran out */
	SYSOM_STOP_TABLE = 10,       /* the unwind table was unreadable */
	SYSOM_STOP_REASON_MAX = 31,  /* later unwinders add reasons below this */
};

/* Counters carried with each batch (agent health, drops). Ids are stable on the wire. */
enum sysom_counter_id {
	SYSOM_COUNTER_TICKS = 1,             /* timer ticks seen by the sampler */
	SYSOM_COUNTER_GATED_OUT = 2,         /* ticks skipped by the sampling-rate gate */
	SYSOM_COUNTER_IDLE_SKIPPED = 3,      /* ticks that hit the idle task */
	SYSOM_COUNTER_SAMPLES = 4,           /* samples recorded */
	SYSOM_COUNTER_KSTACK_ERRORS = 5,     /* kernel stack could not be collected */
	SYSOM_COUNTER_USTACK_ERRORS = 6,     /* user stack could not be collected */
	SYSOM_COUNTER_COUNT_MAP_FULL = 7,    /* samples lost: BPF count map full */
	SYSOM_COUNTER_STACK_MAP_FULL = 8,    /* stacks lost: BPF stack store full */
	SYSOM_COUNTER_EVENTS_LOST = 9,       /* process events lost: ring buffer full */
	SYSOM_COUNTER_FRAMES_UNMAPPED = 10,  /* user frames in no known mapping */
	SYSOM_COUNTER_PROCESSES_VANISHED = 11, /* sampled processes gone before their maps were read */
	SYSOM_COUNTER_SPOOL_DROPPED = 12,    /* batches dropped by the spool's full policy */
	SYSOM_COUNTER_UPLOAD_RETRIES = 13,   /* failed upload attempts (retried) */
	SYSOM_COUNTER_DRAINS = 14,           /* drains of the BPF maps in this window */
	SYSOM_COUNTER_DISTINCT_KEYS = 15,    /* distinct (process, thread, cpu, stacks) keys drained */
	SYSOM_COUNTER_BATCH_LIMIT_DROPS = 16, /* samples dropped: batch reached a size limit */
	/* Hybrid unwinder (struct unwind_stats in bpf/unwind.h). */
	SYSOM_COUNTER_UNWIND_FRAMES = 17,      /* user frames it produced */
	SYSOM_COUNTER_UNWIND_FRAMES_DWARF = 18, /* ... stepped by a CFI row */
	SYSOM_COUNTER_UNWIND_FRAMES_FP = 19,   /* ... stepped by frame pointer */
	SYSOM_COUNTER_UNWIND_FRAMES_CACHED = 20, /* ... whose rule came from a cached marker */
	SYSOM_COUNTER_UNWIND_FALLBACK = 21,    /* stacks by kernel frame pointers: process unpublished */
	SYSOM_COUNTER_UNWIND_STOP_FIRST = 22,  /* 22..30: stacks stopped early, per reason: */
	/* depth, read fault, no mapping, invalid FP, JIT, SP order, RBP unknown, tail calls, table
	 * (enum unwind_stop 1..9, counter = 21 + reason) */
	SYSOM_COUNTER_UNWIND_STOP_LAST = 30,
	/* NCCL and CUDA tracing (minor 1). */
	SYSOM_COUNTER_NCCL_CALLS = 31,         /* NCCL API calls traced (entry and return seen) */
	SYSOM_COUNTER_NCCL_EVENTS_LOST = 32,   /* NCCL calls lost: ring buffer full */
	SYSOM_COUNTER_NCCL_CALLS_DROPPED = 33, /* NCCL calls dropped: batch reached its limit */
	SYSOM_COUNTER_NCCL_UNMATCHED = 34,     /* returns without an entry (attached mid-call) */
	SYSOM_COUNTER_LAUNCHES = 35,           /* GPU kernel launches counted */
	SYSOM_COUNTER_LAUNCH_MAP_FULL = 36,    /* launches lost: BPF aggregation map full */
	SYSOM_COUNTER_GPU_LIBRARIES = 37,      /* NCCL/CUDA library files with probes attached */
	SYSOM_COUNTER_GPU_ATTACH_ERRORS = 38,  /* probe attachments that failed */
	SYSOM_COUNTER_KERNEL_NAMES = 39,       /* kernel names learnt (function handle → name) */
	SYSOM_COUNTER_LAUNCH_TRACED_MS = 40,   /* ms the launch probes were attached (duty cycle):
						* LAUNCHES counts cover this much of the window */
	/* In-process components over the agent's socket (minor 2). */
	SYSOM_COUNTER_CHANNEL_RECORDS = 41,     /* telemetry records accepted from components */
	SYSOM_COUNTER_CHANNEL_REJECTED = 42,    /* telemetry records rejected as malformed */
	SYSOM_COUNTER_PROFILER_EVENTS = 43,     /* NCCL profiler plugin events recorded */
	SYSOM_COUNTER_PROFILER_DROPPED = 44,    /* ... dropped: every window full or closed */
	SYSOM_COUNTER_PROFILER_ORPHANS = 45,    /* ... whose parent's window was already processed */
	SYSOM_COUNTER_PROFILER_FORCED = 46,     /* windows processed with operations still open */
	SYSOM_COUNTER_COMPONENT_SEND_DROPS = 47, /* records components could not send (agent busy) */
	SYSOM_COUNTER_CUPTI_RECORDS = 48,       /* CUPTI kernel activity records folded */
	SYSOM_COUNTER_CUPTI_DROPPED = 49,       /* CUPTI records dropped (CUPTI or table full) */
	SYSOM_COUNTER_GPU_STATS_DROPPED = 50,   /* GPU/NCCL statistics rows dropped: batch limit */
	/* OS signals (minor 3). */
	SYSOM_COUNTER_OS_THREADS_LOST = 51,     /* threads not measured: the BPF thread map was full */
	SYSOM_COUNTER_OS_IRQS_LOST = 52,        /* interrupts not counted per (CPU, IRQ): BPF map full */
	SYSOM_COUNTER_OS_ROWS_DROPPED = 53,     /* OS_CPUS/OS_IRQS/OS_THREADS rows dropped: batch
						 * limit, or the thread's process is unknown */
	SYSOM_COUNTER_OS_ATTACH_ERRORS = 54,    /* OS signal tracepoints that failed to attach */
	SYSOM_COUNTER_OS_TRACKED = 55,          /* processes whose threads are measured, at the
						 * end of the window (a level, not a count of
						 * events; 0 with os-signals-all) */
	/* Off-CPU time (minor 4). */
	SYSOM_COUNTER_OFFCPU_BLOCKS = 56,       /* blocks counted in OFFCPU rows */
	SYSOM_COUNTER_OFFCPU_SHORT = 57,        /* blocks shorter than the minimum (not counted) */
	SYSOM_COUNTER_OFFCPU_LOST = 58,         /* blocks lost: a BPF map was full, or the batch
						 * reached its limit */
	SYSOM_COUNTER_OFFCPU_FP_FALLBACK = 59,  /* off-CPU user stacks by frame pointers (the
						 * hybrid unwinder had no tables for the process) */
	/* Loader notifications (issue 17, "no blind jobs"). */
	SYSOM_COUNTER_GPU_LOADER_EVENTS = 72,   /* processes that mapped NCCL/CUDA, seen by ld.so's
						 * notification and attached at once */
	SYSOM_COUNTER_GPU_LOADER_HELD = 73,     /* ... of those stopped until attached (hold) */
	/* GPU health (minor 6, agent/gpu/nvml.c). */
	SYSOM_COUNTER_NVML_SAMPLES = 74,        /* GPU readings taken (devices x samples) */
	SYSOM_COUNTER_NVML_ERRORS = 75,         /* NVML queries that failed (not counting "not
						 * supported"): those fields are unknown */
	SYSOM_COUNTER_XID_EVENTS = 76,          /* NVRM Xid lines read from the kernel log */
	SYSOM_COUNTER_XID_UNMATCHED = 77,       /* ... whose PCI address is no NVML device, or
						 * that could not be parsed, or kernel log records
						 * overwritten before they were read */
	/* Hangs (issue 17): off-CPU blocks still in progress at a drain, delivered so far. */
	SYSOM_COUNTER_OFFCPU_OPEN = 80,         /* OFFCPU rows that are the time so far of a block
						 * still in progress (>= 1 s, jobs mode) */
	/* Uploads with Expect: 100-continue (issue 20). */
	SYSOM_COUNTER_UPLOAD_REFUSED_EARLY = 90, /* batch upload attempts refused (an error status)
						  * before their body was sent */
	SYSOM_COUNTER_UPLOAD_REFUSED_BYTES = 91, /* body bytes sent anyway in refused batch upload
						  * attempts (the server's 100 came late, or none) */
	/* Host signals (minor 6, agent/os/hostsig.c). */
	SYSOM_COUNTER_HOST_SIGNALS = 81,        /* HOST_SIGNALS records sent */
	SYSOM_COUNTER_HOST_FILES_MISSING = 82,  /* host signal files absent or unreadable (per read) */
	SYSOM_COUNTER_HOST_PARSE_ERRORS = 83,   /* ... present but not in the expected format */
	/* CPython frames (minor 4; struct py_stats in bpf/pyframes.h, agent/sampling/pyframes.c). */
	SYSOM_COUNTER_PY_FRAMES = 60,          /* Python frames stitched into user stacks */
	SYSOM_COUNTER_PY_NO_THREAD = 61,       /* samples of a Python process whose thread had no
						* Python frame (eval frames kept native) */
	SYSOM_COUNTER_PY_LOST_READ = 62,       /* Python frames lost: thread state or frame unreadable */
	SYSOM_COUNTER_PY_LOST_INVALID = 63,    /* ... a frame's code object address implausible */
	SYSOM_COUNTER_PY_LOST_DEPTH = 64,      /* ... the stack's depth limit reached inside a run */
	SYSOM_COUNTER_PY_UNRESOLVED = 65,      /* Python frames whose code object could not be read
						* when named (freed, corrupted): "[python unresolved]" */
	SYSOM_COUNTER_PY_UNSUPPORTED = 66,     /* Python processes found without known offsets
						* (sampled natively) */
	SYSOM_COUNTER_PY_NAME_LOOKUPS = 67,    /* Python frames named by the agent */
	SYSOM_COUNTER_PY_NAME_CACHE_HITS = 68, /* ... from its name cache */
	SYSOM_COUNTER_PY_NAME_REUSED = 85,     /* Python frames left unnamed: their code object was
						* freed and its address reused by another before the
						* agent named them (also in PY_UNRESOLVED) */
	/* Container names (agent/node/identity.c, /var/log/containers). */
	SYSOM_COUNTER_CONTAINER_LOG_SCANS = 69, /* reads of the container log link directory */
	SYSOM_COUNTER_CONTAINER_NAMES_MISSING = 70, /* processes of a container whose name was not
						 * found (no link, read too recently, or past
						 * the directory's entry limit) */
	/* JIT code (agent/symbols/perfmap.c), 1.8. */
	SYSOM_COUNTER_JIT_NAMED = 78,          /* frames in anonymous memory named by a perf map */
	SYSOM_COUNTER_JIT_UNNAMED = 79,        /* ... in no function of one (or no map) */
	SYSOM_COUNTER_NCCL_P2P_CALLS = 86,     /* ncclSend/ncclRecv calls traced (pipeline pairing) */
	SYSOM_COUNTER_NCCL_P2P_BAD_PEER = 87,  /* ... whose peer was outside its communicator: sent
						* with peer -1 (not paired) */
	/* The off-CPU unwind budget (bpf/profile.bpf.c, offcpu_budget_ns). */
	SYSOM_COUNTER_OFFCPU_OVER_BUDGET = 71, /* off-CPU user stacks by the frame-pointer walk:
						* the CPU had spent its unwind budget */
	SYSOM_COUNTER_OFFCPU_UNWIND_US = 84,   /* µs spent unwinding blocking threads' user stacks */
	SYSOM_COUNTER_MAX = 96,
};

/* NCCL API calls (NCCL_CALLS records): enum sysom_nccl_op, sysom_nccl_op_name and
 * sysom_nccl_op_is_collective are in include/sysom/nccl_ops.h. */

/* Why a stack stopped, in words ("depth limit", "no mapping", ...); NULL for COMPLETE or an
 * unknown reason. */
const char *sysom_stop_reason_name(uint8_t stop_reason);

/* Name of a counter id for logs and metrics ("ticks", ...); NULL when unknown. */
const char *sysom_counter_name(uint16_t id);

/* NODE record (64 bytes; offsets in docs/wire-format.md). */
struct sysom_node_info {
	uint32_t hostname;       /* string */
	uint32_t kernel_release; /* string, uname -r */
	uint32_t machine;        /* string, uname -m */
	uint32_t agent_version;  /* string */
	uint32_t kernel_object;  /* object index of the running kernel, or SYSOM_WIRE_NONE */
	uint32_t sample_hz;      /* timer frequency per CPU */
	uint32_t sample_rate_ppm; /* fraction of ticks that collect a stack, parts per million */
	uint32_t drain_interval_ms;
	uint32_t batch_interval_ms;
	uint32_t online_cpus;
	uint8_t boot_id[16];     /* /proc/sys/kernel/random/boot_id */
};

/* OBJECTS record (72 bytes). */
struct sysom_object {
	uint8_t kind;                          /* enum sysom_object_kind */
	uint8_t build_id_len;                  /* 0..64 */
	uint8_t build_id[SYSOM_BUILD_ID_MAX];  /* zero beyond build_id_len */
	uint32_t name;                         /* string: path, "[kernel.kallsyms]", "[vdso]" */
};

/* PROCESSES record (32 bytes). */
struct sysom_process {
	uint32_t tgid;
	uint32_t generation;    /* execs the agent has seen for this tgid (identity across exec) */
	uint64_t start_time_ns; /* since boot, from /proc/<pid>/stat (identity across pid reuse) */
	uint32_t comm;          /* string */
	uint32_t exe;           /* string: /proc/<pid>/exe target */
	uint32_t cmdline;       /* string: arguments joined by spaces, truncated to 1 KiB */
	uint32_t ppid;
};

/* MAPPINGS record (32 bytes): an executable mapping of a process. */
struct sysom_mapping {
	uint32_t process;
	uint32_t object;
	uint64_t start;
	uint64_t end;
	uint64_t file_offset;
};

/* One frame: an offset inside an object (file offset for ELF files, see the kind). */
struct sysom_frame {
	uint32_t object;
	uint64_t offset;
};

/* STACKS record: 8-byte header then `nframes` 12-byte frames, leaf first. */
struct sysom_stack {
	uint16_t nframes;     /* 1..limit */
	uint8_t kind;         /* enum sysom_stack_kind */
	uint8_t stop_reason;  /* enum sysom_stack_stop */
	uint32_t first_frame; /* in memory only: index into the batch's frame array */
};

/* SAMPLES record (40 bytes). Rows are unique per (process..user_stack). */
struct sysom_sample {
	uint32_t process;
	uint32_t tid;
	uint32_t cpu;
	uint32_t time_offset_ms; /* end of the drain interval, relative to the window start */
	uint32_t kernel_stack;   /* stack index or SYSOM_WIRE_NONE */
	uint32_t user_stack;     /* stack index or SYSOM_WIRE_NONE */
	uint32_t thread_comm;    /* string */
	uint64_t count;          /* >= 1 */
};

/* COUNTERS record (16 bytes). */
struct sysom_counter {
	uint16_t id;
	uint64_t value;
};

/* How a process's job identity was learnt. */
enum sysom_job_source {
	SYSOM_JOB_FROM_ENVIRONMENT = 1, /* launcher variables in /proc/<pid>/environ */
	SYSOM_JOB_FROM_REGISTRATION = 2, /* the process registered over the agent's socket */
	SYSOM_JOB_FROM_CGROUP = 3,       /* rank from the environment, job from its Slurm job or
					  * pod (the environment named no job; wire 1.6 and on) */
	SYSOM_JOB_SOURCE_MAX = SYSOM_JOB_FROM_CGROUP,
};

/* job_id_source of a job the agent took from the cgroup (sent with source ENVIRONMENT, so that
 * readers older than source 3 accept it; servers show such a rank as source cgroup). */
#define SYSOM_JOB_ID_SOURCE_SLURM_CGROUP "slurm cgroup"
#define SYSOM_JOB_ID_SOURCE_POD_NAME "pod name"

/* A process's role in its rank: the rank's own process, or a helper process it started that
 * inherited its environment (a PyTorch DataLoader worker: forked or spawned, same executable). */
enum sysom_job_role {
	SYSOM_JOB_ROLE_RANK = 0,
	SYSOM_JOB_ROLE_WORKER = 1,
	SYSOM_JOB_ROLE_MAX = SYSOM_JOB_ROLE_WORKER,
};

/* JOB_RANKS record (48 bytes): at most one per process. Unknown numbers are -1. */
struct sysom_job_rank {
	uint32_t process;
	uint32_t job;               /* string: job id ("" unknown) */
	int32_t rank, world_size;
	int32_t local_rank, local_world_size;
	int32_t group_rank;         /* node rank within the job */
	uint8_t source;             /* enum sysom_job_source */
	uint8_t role;               /* enum sysom_job_role */
	uint8_t gpu_device;         /* (1.7) the rank's GPU: NVML index + 1, at most
				     * SYSOM_GPU_MAX_DEVICES; 0 unknown (and from older agents) */
	uint32_t job_id_source;     /* string: the variable the job id came from */
	uint32_t master;            /* string: "addr:port" of the rendezvous, or "" */
	uint32_t groups;            /* string: registered group names ("tp=0,dp=3"), or "" */
	uint32_t rank_pid;          /* a worker's rank process (its pid on the node); 0 for a rank */
};

/* How a communicator key was derived (identical on every rank of the communicator). */
enum sysom_comm_key_source {
	SYSOM_COMM_KEY_UNIQUE_ID = 1, /* hash of the 128-byte ncclUniqueId passed to init */
	SYSOM_COMM_KEY_SPLIT = 2,     /* hash of (parent key, split ordinal, color) */
	SYSOM_COMM_KEY_COMM_HASH = 3, /* NCCL's own commHash read from the communicator */
	SYSOM_COMM_KEY_LOCAL = 4,     /* only the process-local handle: not matched across ranks */
	SYSOM_COMM_KEY_SOURCE_MAX = SYSOM_COMM_KEY_LOCAL,
};

#define SYSOM_COMM_DESTROYED 0x1 /* communicator flags: destroyed or aborted in the window */

/* COMMUNICATORS record (72 bytes): a communicator as one process sees it. A CommSplit child's
 * rank, when the library could not tell, follows from NCCL's rule: ranks of one color are
 * ordered by (split key, rank in the parent). */
struct sysom_communicator {
	uint32_t process;
	int32_t rank;          /* rank in the communicator, -1 unknown */
	uint64_t key;          /* != 0 */
	uint64_t parent_key;   /* CommSplit parent, 0 none */
	uint64_t nccl_comm_hash; /* commHash read from the library, 0 unknown */
	int32_t nranks;        /* -1 unknown, else >= 1 */
	int32_t split_color;   /* CommSplit color, -1 none */
	int32_t split_key;     /* CommSplit key argument, -1 none */
	uint32_t split_ordinal; /* n-th split of the parent in this process (from 1), 0 none */
	uint8_t key_source;    /* enum sysom_comm_key_source */
	uint8_t flags;         /* SYSOM_COMM_* */
	uint64_t created_ns;   /* init return, ns since the Unix epoch; 0 unknown */
	uint64_t handle;       /* ncclComm_t in the process */
};

#define SYSOM_NCCL_IN_GROUP 0x1 /* NCCL_CALLS flags: called between GroupStart and GroupEnd */
#define SYSOM_NCCL_IN_FLIGHT 0x2 /* (1.4) not returned when the agent sealed: exit_ns is the seal
                                  * time; sent again, without the flag, once it returns */
#define SYSOM_NCCL_NO_DATATYPE 0xff
#define SYSOM_NCCL_NO_REDOP 0xff

/* NCCL_CALLS record (80 bytes): one traced NCCL API call. */
struct sysom_nccl_call {
	uint32_t process;
	uint32_t tid;
	uint64_t comm_key;     /* 0 when the call has no communicator or it is unknown */
	uint64_t seq;          /* per (process, communicator, op), from 0, as NCCL's seqNumber */
	uint64_t entry_ns;     /* ns since the Unix epoch */
	uint64_t exit_ns;      /* >= entry_ns */
	uint64_t count;        /* element count argument */
	uint64_t bytes;        /* count x datatype size */
	uint64_t stream;       /* cudaStream_t */
	uint8_t op;            /* enum sysom_nccl_op */
	uint8_t datatype;      /* ncclDataType_t, SYSOM_NCCL_NO_DATATYPE when none */
	uint8_t redop;         /* ncclRedOp_t, SYSOM_NCCL_NO_REDOP when none */
	uint8_t flags;         /* SYSOM_NCCL_* */
	int32_t peer;          /* root or peer rank, -1 none */
	int32_t result;        /* ncclResult_t returned */
	int32_t rank;          /* caller's rank in the communicator, -1 unknown */
};

#define SYSOM_LAUNCH_EX 0x1   /* LAUNCHES flags: cuLaunchKernelEx */
#define SYSOM_LAUNCH_PTSZ 0x2 /* per-thread default stream variant */

/* LAUNCHES record (64 bytes): GPU kernel launches aggregated per (process, kernel, stacks). */
struct sysom_launch {
	uint32_t process;
	uint32_t kernel_name;  /* string, "" when unknown */
	uint64_t function;     /* CUfunction handle */
	uint32_t user_stack;   /* stack index or SYSOM_WIRE_NONE */
	uint32_t kernel_stack; /* stack index or SYSOM_WIRE_NONE */
	uint64_t count;        /* >= 1 */
	uint32_t grid[3];      /* of the last launch counted */
	uint32_t block[3];
	uint32_t shared_mem;
	uint16_t flags;        /* SYSOM_LAUNCH_* */
};

/* SYSOM_GPU_HIST_BUCKETS and sysom_gpu_hist_bucket: include/sysom/histogram.h. */

/* GPU_KERNELS record (136 bytes): GPU execution time of one kernel name on one device and
 * stream, from a CUPTI activity library (or the simulated job's fake CUDA). Rows are unique
 * per (process, name, device, stream). */
struct sysom_gpu_kernel {
	uint32_t process;
	uint32_t name;       /* string: kernel name as CUPTI reports it (mangled), not "" */
	uint32_t device;     /* CUDA device ordinal */
	uint64_t stream;     /* CUPTI stream id */
	uint64_t count;      /* >= 1 kernel executions */
	uint64_t total_ns;   /* sum of end - start */
	uint64_t min_ns;     /* <= max_ns */
	uint64_t max_ns;
	uint32_t hist[SYSOM_GPU_HIST_BUCKETS]; /* executions per duration bucket; sum <= count (a bucket saturates) */
};

/* NCCL_PROFILES record (152 bytes): what the NCCL profiler plugin measured for one kind of
 * operation of one communicator in one process. Rows are unique per (process, comm_id, func,
 * algo, proto, datatype, peer). Collectives have peer -1; Send/Recv have a peer and "" algo. */
struct sysom_nccl_profile {
	uint32_t process;
	int32_t rank;           /* rank in the communicator */
	uint64_t comm_id;       /* the commId NCCL gives the plugin (its commHash), != 0 */
	uint32_t comm_name;     /* string: NCCL_COMM_NAME / config.commName, "" none */
	int32_t nranks;         /* >= 1 */
	uint32_t func;          /* string: "AllReduce", "Send", ... not "" */
	uint32_t algo;          /* string: "Ring", "Tree", ... "" for P2P */
	uint32_t proto;         /* string: "LL", "LL128", "Simple", "" */
	uint32_t datatype;      /* string: "ncclFloat32", ... */
	int32_t peer;           /* P2P peer rank, -1 for collectives */
	uint32_t nchannels;     /* most channels one operation used */
	uint64_t count;         /* operations, >= 1 */
	uint64_t bytes;         /* sum of element count x datatype size */
	uint64_t kernel_timed;  /* operations with GPU kernel timing (KernelCh), <= count */
	uint64_t kernel_ns_total; /* GPU time: first channel start → last channel stop (GPU clock) */
	uint64_t kernel_ns_min;   /* 0 when kernel_timed == 0 */
	uint64_t kernel_ns_max;
	uint64_t span_timed;    /* operations timed through the proxy, <= count */
	uint64_t span_ns_total; /* CPU clock: operation start → last ProxyOp stop */
	uint64_t enqueue_ns_total; /* CPU clock: operation start → stop (enqueue only) */
	uint64_t transfers;     /* network transfer steps (ProxyStep in SendWait) */
	uint64_t transfer_bytes;
	uint64_t first_seq;     /* NCCL seqNumber range of the operations (P2P: 0) */
	uint64_t last_seq;      /* >= first_seq */
};

/* NCCL_LINKS record (120 bytes): sends from one rank to a peer rank over one channel (or all,
 * channel -1), with the sufficient statistics of the least-squares fit time = latency +
 * bytes / bandwidth over every transfer (x = bytes, y = ns), which add across windows, and
 * the plugin's fit through the fastest transfer per size ("MIN" mode). Rows are unique per
 * (process, comm_id, peer, channel). */
struct sysom_nccl_link {
	uint32_t process;
	int32_t rank;        /* sending rank */
	uint64_t comm_id;
	int32_t peer;        /* receiving rank, >= 0 */
	int32_t channel;     /* -1: all channels */
	uint64_t transfers;  /* >= 1 */
	uint64_t bytes;
	uint64_t time_ns_total;
	double sx, sy, sxx, sxy, syy; /* finite; n = transfers */
	double min_latency_ns;        /* MIN-mode fit; NaN when fewer than 2 distinct sizes */
	double min_bytes_per_ns;
	double min_r2;
	uint32_t min_points;          /* distinct sizes in the MIN-mode fit */
};

/* Softirq vectors, in the kernel's order (include/linux/interrupt.h; stable since 2.6.35). */
enum sysom_softirq {
	SYSOM_SOFTIRQ_HI = 0,
	SYSOM_SOFTIRQ_TIMER = 1,
	SYSOM_SOFTIRQ_NET_TX = 2,
	SYSOM_SOFTIRQ_NET_RX = 3,
	SYSOM_SOFTIRQ_BLOCK = 4,
	SYSOM_SOFTIRQ_IRQ_POLL = 5,
	SYSOM_SOFTIRQ_TASKLET = 6,
	SYSOM_SOFTIRQ_SCHED = 7,
	SYSOM_SOFTIRQ_HRTIMER = 8,
	SYSOM_SOFTIRQ_RCU = 9,
	SYSOM_SOFTIRQ_COUNT = 10,
};

/* Softirq vector name as /proc/softirqs spells it ("NET_RX"); NULL when out of range. */
const char *sysom_softirq_name(uint32_t vec);

/* SYSOM_RUNQ_HIST_BUCKETS and sysom_runq_hist_bucket: include/sysom/histogram.h. */

/* CPUs a thread ran on: a bitmap of the first 256 CPUs (CPUs beyond are not recorded). */
#define SYSOM_CPU_MASK_WORDS 4

/* CPU numbers in OS_CPUS and OS_IRQS are below this. */
#define SYSOM_OS_CPU_LIMIT 65536

/* OS_CPUS record (208 bytes): one CPU over the batch window. Rows are unique per cpu. */
struct sysom_os_cpu {
	uint32_t cpu;
	int32_t numa_node;        /* -1 unknown */
	uint64_t busy_ns;         /* time not in the idle task */
	uint64_t hardirq_count;
	uint64_t hardirq_ns;
	uint64_t softirq_count[SYSOM_SOFTIRQ_COUNT];
	uint64_t softirq_ns[SYSOM_SOFTIRQ_COUNT];
	uint64_t context_switches;
	uint64_t runq_wait_ns;    /* summed run-queue wait of every thread woken onto this CPU */
};

/* OS_IRQS record (32 bytes): one hard interrupt line on one CPU. Unique per (cpu, irq). */
struct sysom_os_irq {
	uint32_t cpu;
	uint32_t irq;
	uint32_t name;    /* string: the handler's name ("mlx5_comp3@pci:...", "eth0-TxRx-1"), may be "" */
	uint64_t count;   /* >= 1 */
	uint64_t ns;      /* handler time */
};

/* OS_THREADS record (224 bytes): one thread of a tracked (training) process over the window.
 * Unique per (process, tid). Times are nanoseconds. */
struct sysom_os_thread {
	uint32_t process;          /* index into PROCESSES */
	uint32_t tid;
	uint32_t comm;             /* string: the thread's comm */
	uint64_t oncpu_ns;         /* time it ran */
	uint64_t runq_wait_ns;     /* time runnable but waiting for a CPU (wakeup or preemption → run) */
	uint64_t runq_waits;       /* waits measured */
	uint32_t runq_hist[SYSOM_RUNQ_HIST_BUCKETS]; /* waits per latency bucket; sum <= runq_waits */
	uint64_t voluntary_switches;   /* it blocked */
	uint64_t involuntary_switches; /* it was preempted while runnable */
	uint64_t migrations;       /* moved between CPUs */
	uint64_t numa_migrations;  /* ... to a CPU of another NUMA node */
	uint64_t pages_migrated;   /* pages migrated while it was current (NUMA balancing, compaction) */
	uint64_t hardirq_ns;       /* hard interrupt time taken while it was on the CPU */
	uint64_t softirq_ns;       /* softirq time taken while it was on the CPU */
	uint64_t cpus[SYSOM_CPU_MASK_WORDS]; /* CPUs it ran on (bit c of word c / 64); all zero
					      * only when it ran on no CPU below 256 in the window */
};

/* How a thread was off the CPU (the kernel's task state when it switched out). */
enum sysom_offcpu_state_class {
	SYSOM_OFFCPU_SLEEP = 1, /* S: interruptible sleep (futex, poll, pipe, nanosleep) */
	SYSOM_OFFCPU_DISK = 2,  /* D: uninterruptible (I/O, page fault, some kernel locks) */
	SYSOM_OFFCPU_OTHER = 3, /* stopped, traced, ... */
	SYSOM_OFFCPU_STATE_MAX = SYSOM_OFFCPU_OTHER,
};

/* "S", "D", "other"; NULL when out of range. */
const char *sysom_offcpu_state_name(uint8_t state);

/* OFFCPU record (56 bytes): time threads spent blocked (switched out while not runnable,
 * until switched in again; at least the agent's minimum block each) on one pair of stacks.
 * Rows are unique per (process, tid, time offset, stacks, comm, state). */
struct sysom_offcpu {
	uint32_t process;
	uint32_t tid;
	uint32_t time_offset_ms; /* end of the drain interval, relative to the window start */
	uint32_t kernel_stack;   /* stack index or SYSOM_WIRE_NONE; not both NONE */
	uint32_t user_stack;
	uint32_t thread_comm;    /* string */
	uint8_t state;           /* enum sysom_offcpu_state_class */
	uint64_t count;          /* blocks, >= 1 */
	uint64_t blocked_ns;     /* their total, >= max_ns */
	uint64_t max_ns;         /* the longest, >= 1 */
};

/* Container runtimes in IDENTITIES records (the numbers of enum identity_runtime in
 * agent/node/identity.h). */
enum sysom_container_runtime {
	SYSOM_RUNTIME_NONE = 0,
	SYSOM_RUNTIME_CONTAINERD = 1,
	SYSOM_RUNTIME_CRIO = 2,
	SYSOM_RUNTIME_DOCKER = 3,
	SYSOM_RUNTIME_PODMAN = 4,
	SYSOM_RUNTIME_UNKNOWN = 5, /* a Kubernetes container directory without runtime prefix */
	SYSOM_RUNTIME_MAX = SYSOM_RUNTIME_UNKNOWN,
};

/* "containerd", "cri-o", "docker", "podman", "unknown", "" for NONE; NULL when out of range. */
const char *sysom_runtime_name(uint8_t runtime);

#define SYSOM_IDENT_CONTAINER_ID_LEN 64 /* lowercase hex digits */
#define SYSOM_IDENT_POD_UID_LEN 36      /* 8-4-4-4-12 lowercase hex */
#define SYSOM_IDENT_NAME_MAX 253        /* namespace, pod name, container name: bytes */
#define SYSOM_IDENT_SLURM_STEP_MAX 15   /* "0", "batch", "extern", "interactive" */
#define SYSOM_IDENT_UNIT_MAX 255        /* systemd unit name */

/* IDENTITIES record (48 bytes): at most one per process; string fields are "" when unknown,
 * and at least one field says something. */
struct sysom_identity {
	uint32_t process;
	uint8_t runtime;           /* enum sysom_container_runtime; NONE iff container_id is "" */
	uint32_t container_id;     /* string: "" or 64 lowercase hex digits */
	uint32_t pod_uid;          /* string: "" or a 36-character UUID */
	uint32_t pod_namespace;    /* string: Kubernetes namespace ("" unknown; needs pod_uid) */
	uint32_t pod_name;         /* string: pod name ("" unknown; needs pod_uid) */
	uint32_t container_name;   /* string: container name in the pod ("" unknown) */
	uint64_t slurm_job;        /* 0 none */
	uint32_t slurm_step;       /* string: "" none (needs slurm_job) */
	uint32_t unit;             /* string: systemd unit, "" none */
};

/*
 * Host signals (HOST_SIGNALS records, minor 6): one value per signal per window, measured by the
 * node from /proc and /sys without hardware counters. A signal the node cannot read (no
 * cpufreq in a VM, no PSI, a counter that went backwards) has no record: unknown, never 0.
 * Rates are per second of the window; "share" values are fractions 0..1 of the window.
 */
enum sysom_host_signal {
	SYSOM_HOST_CPU_MHZ = 1,            /* mean scaling_cur_freq over the CPUs, MHz (a level) */
	SYSOM_HOST_CPU_MHZ_MIN = 2,        /* the slowest CPU's, MHz */
	SYSOM_HOST_CPU_BUSY = 3,           /* share of CPU time not idle or in iowait (/proc/stat) */
	SYSOM_HOST_CPU_IOWAIT = 4,         /* share in iowait */
	SYSOM_HOST_CPU_STEAL = 5,          /* share stolen by the hypervisor */
	SYSOM_HOST_CONTEXT_SWITCHES = 6,   /* per second */
	SYSOM_HOST_PROCS_BLOCKED = 7,      /* tasks in D state at the end (a level) */
	SYSOM_HOST_SOFTIRQ_NET_RX = 8,     /* NET_RX softirqs per second, all CPUs (/proc/softirqs) */
	SYSOM_HOST_SOFTIRQ_NET_TX = 9,
	SYSOM_HOST_SOFTIRQ_TOTAL = 10,
	SYSOM_HOST_PSI_CPU_SOME_AVG10 = 11, /* /proc/pressure/cpu "some avg10", percent */
	SYSOM_HOST_PSI_CPU_SOME = 12,       /* share of the window stalled (the total's delta) */
	SYSOM_HOST_PSI_CPU_FULL_AVG10 = 13,
	SYSOM_HOST_PSI_CPU_FULL = 14,
	SYSOM_HOST_PSI_MEM_SOME_AVG10 = 15,
	SYSOM_HOST_PSI_MEM_SOME = 16,
	SYSOM_HOST_PSI_MEM_FULL_AVG10 = 17,
	SYSOM_HOST_PSI_MEM_FULL = 18,
	SYSOM_HOST_PSI_IO_SOME_AVG10 = 19,
	SYSOM_HOST_PSI_IO_SOME = 20,
	SYSOM_HOST_PSI_IO_FULL_AVG10 = 21,
	SYSOM_HOST_PSI_IO_FULL = 22,
	SYSOM_HOST_TCP_OUT_SEGS = 23,       /* /proc/net/snmp Tcp OutSegs per second */
	SYSOM_HOST_TCP_RETRANS_SEGS = 24,   /* ... RetransSegs per second */
	SYSOM_HOST_TCP_IN_ERRS = 25,        /* ... InErrs per second */
	SYSOM_HOST_TCP_LOST_RETRANSMIT = 26, /* /proc/net/netstat TCPLostRetransmit per second */
	SYSOM_HOST_TCP_TIMEOUTS = 27,       /* ... TCPTimeouts per second */
	SYSOM_HOST_NET_RX_DROPS = 28,       /* /proc/net/dev, all devices but lo, per second */
	SYSOM_HOST_NET_TX_DROPS = 29,
	SYSOM_HOST_NET_RX_ERRS = 30,
	SYSOM_HOST_NET_TX_ERRS = 31,
	SYSOM_HOST_DISK_READ_IOPS = 32,     /* /proc/diskstats, whole disks, per second */
	SYSOM_HOST_DISK_WRITE_IOPS = 33,
	SYSOM_HOST_DISK_READ_MS = 34,       /* mean read latency in the window, ms (no reads: unknown) */
	SYSOM_HOST_DISK_WRITE_MS = 35,
	SYSOM_HOST_MEM_AVAILABLE = 36,      /* MemAvailable, bytes (a level) */
	SYSOM_HOST_MEM_AVAILABLE_SHARE = 37, /* MemAvailable / MemTotal */
	SYSOM_HOST_PGMAJFAULT = 38,         /* /proc/vmstat pgmajfault per second */
	SYSOM_HOST_SIGNAL_MAX = SYSOM_HOST_PGMAJFAULT,
};

/* "cpu_mhz", "tcp_retrans_segs", ...; NULL when out of range. */
const char *sysom_host_signal_name(uint16_t signal);
/* The signal named `name`, 0 when none. */
uint16_t sysom_host_signal_by_name(const char *name);

/* HOST_SIGNALS record (16 bytes). Unique per signal; value finite and >= 0. */
struct sysom_host_signal_value {
	uint16_t signal; /* enum sysom_host_signal */
	double value;
};

struct sysom_batch;

/* Why an identity record is invalid in batch `b` (for the builder and the decoder), or NULL. */
const char *sysom_identity_problem(const struct sysom_batch *b, const struct sysom_identity *id);

/* GPU_HEALTH (minor 6): what NVML said about one GPU over the window. A number NVML could not
 * give (not supported, no permission, failed) is SYSOM_GPU_UNKNOWN (UINT32_MAX, or UINT64_MAX
 * for the 64-bit fields), never a guess. Clock event ("throttle") reason bits are NVML's
 * (nvmlClocksEventReason*, values from nvml.h), below. */
#define SYSOM_GPU_UNKNOWN UINT32_MAX
#define SYSOM_GPU_UNKNOWN64 UINT64_MAX
#define SYSOM_GPU_MAX_DEVICES 64 /* device index bound */

#define SYSOM_GPU_REASON_IDLE 0x1ull            /* nvmlClocksEventReasonGpuIdle */
#define SYSOM_GPU_REASON_APP_CLOCKS 0x2ull      /* ...ApplicationsClocksSetting */
#define SYSOM_GPU_REASON_SW_POWER_CAP 0x4ull    /* ...SwPowerCap */
#define SYSOM_GPU_REASON_HW_SLOWDOWN 0x8ull     /* nvmlClocksThrottleReasonHwSlowdown */
#define SYSOM_GPU_REASON_SYNC_BOOST 0x10ull     /* ...SyncBoost */
#define SYSOM_GPU_REASON_SW_THERMAL 0x20ull     /* ...SwThermalSlowdown */
#define SYSOM_GPU_REASON_HW_THERMAL 0x40ull     /* nvmlClocksThrottleReasonHwThermalSlowdown */
#define SYSOM_GPU_REASON_HW_POWER_BRAKE 0x80ull /* ...HwPowerBrakeSlowdown */
#define SYSOM_GPU_REASON_DISPLAY_CLOCKS 0x100ull /* ...DisplayClockSetting */
/* Reasons that slow a busy GPU down (idle, application clocks and display clocks do not). */
#define SYSOM_GPU_REASONS_SLOWDOWN                                                                  \
	(SYSOM_GPU_REASON_SW_POWER_CAP | SYSOM_GPU_REASON_HW_SLOWDOWN | SYSOM_GPU_REASON_SYNC_BOOST | \
	 SYSOM_GPU_REASON_SW_THERMAL | SYSOM_GPU_REASON_HW_THERMAL | SYSOM_GPU_REASON_HW_POWER_BRAKE)

enum sysom_gpu_health_flags {
	SYSOM_GPU_REMAPPED_ROWS = 1u << 0, /* retired_sbe/dbe are remapped rows (corrected,
					    * uncorrected), not retired pages */
	SYSOM_GPU_RETIRE_PENDING = 1u << 1, /* a page retirement or row remap waits for a reset */
	SYSOM_GPU_REMAP_FAILED = 1u << 2,   /* a row remap failed */
	SYSOM_GPU_FLAGS_ALL = 0x7u,
};

/* "sw_power_cap,hw_thermal" style names of `reasons` (idle etc. included) into buf; "" for 0. */
void sysom_gpu_reasons_format(uint64_t reasons, char *buf, size_t len);

/* GPU_HEALTH record (144 bytes): one per GPU per window. Fast-moving fields (clocks, reasons,
 * temperature, power, utilization) are sampled every second: `samples` readings, the lowest
 * and last SM clock, the highest temperature and power, the reasons seen in any sample (a
 * throttle of 200 ms shows when it overlapped a sample) and how many samples had a slowdown
 * reason. Counters (ECC, pages, PCIe replays, NVLink errors) are the values at the window's
 * end (cumulative since the driver loaded); Xid events are those logged in the window. */
struct sysom_gpu_health {
	uint32_t device;            /* NVML index, < SYSOM_GPU_MAX_DEVICES, unique in a batch */
	uint32_t uuid;              /* string: "GPU-..." or "" */
	uint32_t pci_bus_id;        /* string: "00000000:3B:00.0" or "" */
	uint32_t name;              /* string: product name or "" */
	uint32_t samples;           /* >= 1 */
	uint32_t slowdown_samples;  /* samples with a SYSOM_GPU_REASONS_SLOWDOWN bit, <= samples */
	uint64_t reasons_any;       /* OR of the samples' reasons, or UNKNOWN64 */
	uint64_t reasons_last;      /* UNKNOWN64 when unknown */
	uint32_t sm_clock_min, sm_clock_last, sm_clock_max; /* MHz; max: the GPU's maximum */
	uint32_t mem_clock_last, mem_clock_max;             /* MHz */
	uint32_t temp_max, temp_last;                       /* °C */
	uint32_t temp_slowdown, temp_shutdown;              /* °C thresholds */
	uint32_t power_max_mw, power_last_mw, power_limit_mw; /* mW; limit: enforced */
	uint32_t util_gpu, util_mem;                        /* %, last sample */
	uint64_t ecc_corrected, ecc_uncorrected;            /* volatile counts */
	uint32_t retired_sbe, retired_dbe;                  /* pages (or rows, see flags) */
	uint32_t pcie_replays;
	uint32_t flags;                                     /* enum sysom_gpu_health_flags */
	uint64_t nvlink_errors;     /* sum over links and counters (replay, recovery, CRC, ECC) */
	uint32_t xid_count;         /* Xid events in the window (0 also when unreadable) */
	uint32_t xid_last;          /* the last one's code, 0 none */
};

/* Why a GPU_HEALTH record is invalid in batch `b` (for the builder and the decoder), or NULL. */
const char *sysom_gpu_health_problem(const struct sysom_batch *b,
				     const struct sysom_gpu_health *g);

/* Decoder limits: everything a peer controls is bounded. */
struct sysom_wire_limits {
	uint32_t max_strings;
	uint32_t max_string_len;
	uint32_t max_objects;
	uint32_t max_processes;
	uint32_t max_mappings;
	uint32_t max_stacks;
	uint32_t max_frames_per_stack;
	uint32_t max_frames;
	uint32_t max_samples;
	uint32_t max_counters;
	uint32_t max_job_ranks;
	uint32_t max_communicators;
	uint32_t max_nccl_calls;
	uint32_t max_launches;
	uint32_t max_gpu_kernels;
	uint32_t max_nccl_profiles;
	uint32_t max_nccl_links;
	uint32_t max_os_cpus;
	uint32_t max_os_irqs;
	uint32_t max_os_threads;
	uint32_t max_offcpu;
	uint32_t max_identities;
	uint32_t max_gpu_health;
	uint32_t max_host_signals;
};

/* The defaults: generous for one node's 30 s window, small enough to bound server memory. */
extern const struct sysom_wire_limits sysom_wire_default_limits;

/* Where and why decoding failed. */
struct sysom_wire_error {
	size_t offset;     /* byte offset in the batch where the problem was found */
	char message[160]; /* e.g. "STACKS record 12: frame 3 object 99 out of range (72 objects)" */
};

/*
 * A batch in memory: what the agent builds and the server decodes. Arrays are owned by the
 * batch. Builder calls de-duplicate strings, objects, processes, stacks and sample rows.
 */
struct sysom_batch {
	uint16_t major;
	uint16_t minor;
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	uint64_t agent_epoch;
	uint64_t sequence;
	uint64_t window_start_ns;
	uint64_t window_end_ns;
	struct sysom_node_info node;

	char *string_data; /* NUL-terminated strings back to back */
	struct sysom_string_ref {
		uint32_t offset; /* string i starts at string_data + strings[i].offset */
		uint32_t length; /* bytes, without the NUL */
	} *strings;
	uint32_t string_count, string_cap;
	size_t string_data_len, string_data_cap;

	struct sysom_object *objects;
	uint32_t object_count, object_cap;
	struct sysom_process *processes;
	uint32_t process_count, process_cap;
	struct sysom_mapping *mappings;
	uint32_t mapping_count, mapping_cap;
	struct sysom_stack *stacks;
	uint32_t stack_count, stack_cap;
	struct sysom_frame *frames;
	uint32_t frame_count, frame_cap;
	struct sysom_sample *samples;
	uint32_t sample_count, sample_cap;
	struct sysom_counter *counters;
	uint32_t counter_count, counter_cap;
	struct sysom_job_rank *job_ranks;
	uint32_t job_rank_count, job_rank_cap;
	struct sysom_communicator *communicators;
	uint32_t communicator_count, communicator_cap;
	struct sysom_nccl_call *nccl_calls;
	uint32_t nccl_call_count, nccl_call_cap;
	struct sysom_launch *launches;
	uint32_t launch_count, launch_cap;
	struct sysom_gpu_kernel *gpu_kernels;
	uint32_t gpu_kernel_count, gpu_kernel_cap;
	struct sysom_nccl_profile *nccl_profiles;
	uint32_t nccl_profile_count, nccl_profile_cap;
	struct sysom_nccl_link *nccl_links;
	uint32_t nccl_link_count, nccl_link_cap;
	struct sysom_os_cpu *os_cpus;
	uint32_t os_cpu_count, os_cpu_cap;
	struct sysom_os_irq *os_irqs;
	uint32_t os_irq_count, os_irq_cap;
	struct sysom_os_thread *os_threads;
	uint32_t os_thread_count, os_thread_cap;
	struct sysom_offcpu *offcpu;
	uint32_t offcpu_count, offcpu_cap;
	struct sysom_identity *identities;
	uint32_t identity_count, identity_cap;
	struct sysom_gpu_health *gpu_health;
	uint32_t gpu_health_count, gpu_health_cap;
	struct sysom_host_signal_value *host_signals;
	uint32_t host_signal_count, host_signal_cap;

	struct batch_dedup *dedup; /* builder indexes; NULL in decoded batches */
};

/* Starts an empty batch for building (string 0 = ""); returns 0 or -ENOMEM. */
int sysom_batch_init(struct sysom_batch *b);
/* Frees everything the batch owns; accepts NULL; the struct may be re-initialised. */
void sysom_batch_free(struct sysom_batch *b);

/* String `idx` (NUL-terminated, borrowed from the batch); "" when out of range. */
const char *sysom_batch_string(const struct sysom_batch *b, uint32_t idx);

/* Builder: each returns 0 and writes the entry's index to *idx, or a negative errno. */
int sysom_batch_intern_string(struct sysom_batch *b, const char *s, size_t len, uint32_t *idx);
int sysom_batch_intern_cstring(struct sysom_batch *b, const char *s, uint32_t *idx);
/* Objects are unique by (kind, build ID) — and by name for kinds without a build ID. */
int sysom_batch_add_object(struct sysom_batch *b, uint8_t kind, const uint8_t *build_id,
			   uint8_t build_id_len, const char *name, uint32_t *idx);
/* Processes are unique by (tgid, start time, generation). String fields are indexes. */
int sysom_batch_add_process(struct sysom_batch *b, const struct sysom_process *p, uint32_t *idx);
int sysom_batch_add_mapping(struct sysom_batch *b, const struct sysom_mapping *m);
/* Stacks are unique by (kind, stop reason, frames); `frames` is leaf first. */
int sysom_batch_add_stack(struct sysom_batch *b, uint8_t kind, uint8_t stop_reason,
			  const struct sysom_frame *frames, uint16_t nframes, uint32_t *idx);
/* Adds s->count to the row with the same key, creating it if needed. */
int sysom_batch_add_sample(struct sysom_batch *b, const struct sysom_sample *s);
/* Adds `delta` to counter `id` (creating it). */
int sysom_batch_add_counter(struct sysom_batch *b, uint16_t id, uint64_t delta);
/* Value of counter `id`, 0 when absent. */
uint64_t sysom_batch_counter(const struct sysom_batch *b, uint16_t id);

/* One identity per process: a second call for the same process replaces the first. */
int sysom_batch_set_job_rank(struct sysom_batch *b, const struct sysom_job_rank *j);
/* One record per (process, key): a second call replaces the first. */
int sysom_batch_set_communicator(struct sysom_batch *b, const struct sysom_communicator *c);
/* Appends a call (no de-duplication). */
int sysom_batch_add_nccl_call(struct sysom_batch *b, const struct sysom_nccl_call *c);
/* Adds l->count to the row with the same (process, function, stacks), taking the name when
 * the row has none and the last launch's dimensions. */
int sysom_batch_add_launch(struct sysom_batch *b, const struct sysom_launch *l);

/* Merges into the row with the same (process, name, device, stream): counts, totals and
 * histogram add, min/max combine. -EINVAL for what the decoder would reject. */
int sysom_batch_add_gpu_kernel(struct sysom_batch *b, const struct sysom_gpu_kernel *k);
/* Merges into the row with the same (process, comm_id, func, algo, proto, datatype, peer):
 * sums add, min/max and the seq range combine, nchannels takes the larger. -EINVAL as above. */
int sysom_batch_add_nccl_profile(struct sysom_batch *b, const struct sysom_nccl_profile *p);
/* Merges into the row with the same (process, comm_id, peer, channel): counts and sufficient
 * statistics add; the MIN-mode fit with more points wins. -EINVAL as above. */
int sysom_batch_add_nccl_link(struct sysom_batch *b, const struct sysom_nccl_link *l);

/* Adds into the row of the same cpu (sums; numa_node taken when known). -EINVAL for what the
 * decoder would reject. */
int sysom_batch_add_os_cpu(struct sysom_batch *b, const struct sysom_os_cpu *c);
/* Adds into the row of the same (cpu, irq); a non-empty name replaces the row's. -EINVAL as
 * above. */
int sysom_batch_add_os_irq(struct sysom_batch *b, const struct sysom_os_irq *q);
/* Adds into the row of the same (process, tid): sums and histogram add, CPU masks OR, the
 * comm is the latest. -EINVAL as above. */
int sysom_batch_add_os_thread(struct sysom_batch *b, const struct sysom_os_thread *t);

/* Adds into the row with the same key (counts and totals add, max combines). -EINVAL for
 * what the decoder would reject. */
int sysom_batch_add_offcpu(struct sysom_batch *b, const struct sysom_offcpu *o);

/* One identity per process: a second call for the same process replaces the first. -EINVAL
 * for what the decoder would reject (sysom_identity_problem). */
int sysom_batch_set_identity(struct sysom_batch *b, const struct sysom_identity *id);

/* One GPU_HEALTH record per device: a second call for the same device replaces the first.
 * -EINVAL for what the decoder would reject (sysom_gpu_health_problem). */
int sysom_batch_set_gpu_health(struct sysom_batch *b, const struct sysom_gpu_health *g);
/* Sets signal `signal` of the window (replacing an earlier value). -EINVAL for an unknown signal
 * or a value that is not finite and >= 0. */
int sysom_batch_set_host_signal(struct sysom_batch *b, uint16_t signal, double value);
/* The value of `signal` in *out; false when the batch has none. */
bool sysom_batch_host_signal(const struct sysom_batch *b, uint16_t signal, double *out);

/* Frames of stack `idx` (borrowed). */
static inline const struct sysom_frame *sysom_batch_stack_frames(const struct sysom_batch *b,
								 uint32_t idx)
{
	return b->frames + b->stacks[idx].first_frame;
}

/* Encodes the batch; appends to `out` (check byte_buf_error). Returns 0 or negative errno. */
int sysom_batch_encode(const struct sysom_batch *b, struct byte_buf *out);

/*
 * Decodes and fully validates `len` bytes into `out` (which the caller frees with
 * sysom_batch_free). Returns 0, -SYSOM_ECORRUPT, -SYSOM_EVERSION, -SYSOM_ELIMIT or -ENOMEM;
 * on failure `out` is left empty (all zero, owning nothing; freeing it again is harmless) and
 * `err` (optional) says where and why.
 */
int sysom_batch_decode(const void *data, size_t len, const struct sysom_wire_limits *limits,
		       struct sysom_batch *out, struct sysom_wire_error *err);

/*
 * The most heap memory sysom_batch_decode allocates at once for these `len` bytes under
 * `limits` (NULL: the defaults), whether it then succeeds or fails: the batch's arrays as the
 * section table sizes them, plus the largest temporary index. Reads only the header and the
 * section table (0 when they are malformed: the decoder then allocates nothing). For
 * reserving memory before decoding untrusted input.
 */
uint64_t sysom_batch_decode_memory(const void *data, size_t len,
				   const struct sysom_wire_limits *limits);

/* Heap bytes the batch's arrays take (their capacities; builder indexes not included). */
uint64_t sysom_batch_memory(const struct sysom_batch *b);

#endif
