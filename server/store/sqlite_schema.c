/* SPDX-License-Identifier: Apache-2.0 */
/* The SQLite schema: its migrations, applied in order when the store opens. */
#include <errno.h>
#include <stdio.h>

#include "common/error.h"
#include "server/store/sqlite_internal.h"

/*
 * Schema migrations, applied in order; migration i brings user_version from i to i + 1.
 * Never edit a released migration: append a new one.
 *
 * Integers that are unsigned 64-bit on the wire (epochs, sequences, offsets, start times) are
 * stored as the signed 64-bit value with the same bits. Times are ns (or ms where named
 * *_ms) since the Unix epoch.
 */
static const char *const migrations[] = {
	/* 1: initial schema. */
	"CREATE TABLE nodes ("
	"  id INTEGER PRIMARY KEY,"
	"  node_id TEXT NOT NULL UNIQUE,"         /* 32 lower-case hex digits */
	"  hostname TEXT NOT NULL,"
	"  kernel_release TEXT NOT NULL,"
	"  machine TEXT NOT NULL,"
	"  agent_version TEXT NOT NULL,"
	"  boot_id TEXT NOT NULL,"
	"  kernel_object INTEGER REFERENCES objects(id),"
	"  sample_hz INTEGER NOT NULL,"
	"  sample_rate_ppm INTEGER NOT NULL,"
	"  online_cpus INTEGER NOT NULL,"
	"  first_seen_ns INTEGER NOT NULL,"       /* server receive time of the first batch */
	"  last_seen_ns INTEGER NOT NULL,"        /* ... of the latest */
	"  batches INTEGER NOT NULL,"
	"  last_epoch INTEGER NOT NULL,"
	"  last_sequence INTEGER NOT NULL"
	");"
	"CREATE INDEX nodes_hostname ON nodes(hostname);"
	/* The primary key is the idempotency key: a replayed batch conflicts with it. */
	"CREATE TABLE batches ("
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  epoch INTEGER NOT NULL,"
	"  sequence INTEGER NOT NULL,"
	"  received_ns INTEGER NOT NULL,"
	"  window_start_ns INTEGER NOT NULL,"
	"  window_end_ns INTEGER NOT NULL,"
	"  samples INTEGER NOT NULL,"             /* sum of sample counts */
	"  sample_rows INTEGER NOT NULL,"
	"  counters TEXT NOT NULL,"               /* JSON object: counter name -> value */
	"  PRIMARY KEY (node, epoch, sequence)"
	");"
	/* key: the build ID for ELF/FILE_HASH/KERNEL/KMODULE objects, the name otherwise. */
	"CREATE TABLE objects ("
	"  id INTEGER PRIMARY KEY,"
	"  kind INTEGER NOT NULL,"
	"  key BLOB NOT NULL,"
	"  build_id BLOB,"
	"  name TEXT NOT NULL,"                   /* first name seen */
	"  UNIQUE (kind, key)"
	");"
	"CREATE TABLE processes ("
	"  id INTEGER PRIMARY KEY,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  tgid INTEGER NOT NULL,"
	"  start_time_ns INTEGER NOT NULL,"       /* since the node's boot */
	"  generation INTEGER NOT NULL,"
	"  ppid INTEGER NOT NULL,"
	"  comm TEXT NOT NULL,"
	"  exe TEXT NOT NULL,"
	"  cmdline TEXT NOT NULL,"
	"  first_seen_ns INTEGER NOT NULL,"       /* batch windows it appeared in */
	"  last_seen_ns INTEGER NOT NULL,"
	"  UNIQUE (node, tgid, start_time_ns, generation)"
	");"
	"CREATE INDEX processes_comm ON processes(comm);"
	/* Content-addressed: id = 64-bit hash of (kind, stop reason, frames), probing on a
	 * collision; frames = nframes x (u64 object id, u64 offset) little-endian, leaf first. */
	"CREATE TABLE stacks ("
	"  id INTEGER PRIMARY KEY,"
	"  kind INTEGER NOT NULL,"
	"  stop_reason INTEGER NOT NULL,"
	"  nframes INTEGER NOT NULL,"
	"  frames BLOB NOT NULL"
	");"
	"CREATE TABLE samples ("
	"  time_ms INTEGER NOT NULL,"             /* window start + time offset */
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  tid INTEGER NOT NULL,"
	"  cpu INTEGER NOT NULL,"
	"  thread_comm TEXT NOT NULL,"
	"  kernel_stack INTEGER REFERENCES stacks(id),"
	"  user_stack INTEGER REFERENCES stacks(id),"
	"  count INTEGER NOT NULL"
	");"
	"CREATE INDEX samples_time ON samples(time_ms);"
	"CREATE INDEX samples_node_time ON samples(node, time_ms);"
	"CREATE INDEX samples_process_time ON samples(process, time_ms);"
	/* Running totals of the agents' counters, for /metrics without scanning batches. */
	"CREATE TABLE node_counters ("
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  counter INTEGER NOT NULL,"
	"  total INTEGER NOT NULL,"
	"  PRIMARY KEY (node, counter)"
	") WITHOUT ROWID;"
	"CREATE TABLE kernel_symbol_tables ("
	"  id INTEGER PRIMARY KEY,"
	"  build_id BLOB NOT NULL UNIQUE,"
	"  symbols INTEGER NOT NULL,"
	"  uploaded_ns INTEGER NOT NULL"
	");"
	"CREATE TABLE kernel_symbols ("
	"  tbl INTEGER NOT NULL REFERENCES kernel_symbol_tables(id),"
	"  offset INTEGER NOT NULL,"              /* from _text (or the module base), < 2^63 */
	"  type TEXT NOT NULL,"
	"  name TEXT NOT NULL,"
	"  PRIMARY KEY (tbl, offset)"
	") WITHOUT ROWID;",
	/* 2: training jobs, NCCL communicators and calls, GPU kernel launches (wire minor 1). */
	/* A process incarnation's place in a training job; attributes of the latest window. */
	"CREATE TABLE job_ranks ("
	"  process INTEGER PRIMARY KEY REFERENCES processes(id),"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  job TEXT NOT NULL,"                    /* job id, '' unknown */
	"  rank INTEGER NOT NULL,"                /* -1 unknown (also below) */
	"  world_size INTEGER NOT NULL,"
	"  local_rank INTEGER NOT NULL,"
	"  local_world_size INTEGER NOT NULL,"
	"  group_rank INTEGER NOT NULL,"          /* node rank within the job */
	"  source INTEGER NOT NULL,"              /* enum sysom_job_source */
	"  job_id_source TEXT NOT NULL,"          /* the variable the job id came from */
	"  master TEXT NOT NULL,"                 /* rendezvous addr:port or '' */
	"  groups TEXT NOT NULL,"                 /* registered groups 'tp=0,dp=3' or '' */
	"  first_seen_ns INTEGER NOT NULL,"       /* batch windows it appeared in */
	"  last_seen_ns INTEGER NOT NULL"
	");"
	"CREATE INDEX job_ranks_job ON job_ranks(job, rank);"
	/* An NCCL communicator as one process sees it; key is identical on every rank. */
	"CREATE TABLE communicators ("
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  key INTEGER NOT NULL,"                 /* u64 bits */
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  rank INTEGER NOT NULL,"                /* rank in the communicator, -1 unknown */
	"  nranks INTEGER NOT NULL,"              /* -1 unknown */
	"  parent_key INTEGER NOT NULL,"          /* CommSplit parent, 0 none */
	"  split_color INTEGER NOT NULL,"         /* -1 none */
	"  split_key INTEGER NOT NULL,"           /* -1 none */
	"  split_ordinal INTEGER NOT NULL,"       /* 0 none */
	"  key_source INTEGER NOT NULL,"          /* enum sysom_comm_key_source */
	"  comm_hash INTEGER NOT NULL,"           /* NCCL's commHash, 0 unknown */
	"  handle INTEGER NOT NULL,"              /* ncclComm_t in the process */
	"  created_ns INTEGER NOT NULL,"          /* 0 unknown */
	"  destroyed INTEGER NOT NULL,"           /* 1 once a window said destroyed/aborted */
	"  first_seen_ns INTEGER NOT NULL,"
	"  last_seen_ns INTEGER NOT NULL,"
	"  PRIMARY KEY (process, key)"
	") WITHOUT ROWID;"
	"CREATE INDEX communicators_key ON communicators(key);"
	/* One row per traced NCCL API call. */
	"CREATE TABLE nccl_calls ("
	"  id INTEGER PRIMARY KEY,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  tid INTEGER NOT NULL,"
	"  comm_key INTEGER NOT NULL,"            /* u64 bits, 0 none */
	"  op INTEGER NOT NULL,"                  /* enum sysom_nccl_op */
	"  seq INTEGER NOT NULL,"                 /* per (process, comm, op): same on every rank */
	"  entry_ns INTEGER NOT NULL,"
	"  exit_ns INTEGER NOT NULL,"
	"  count INTEGER NOT NULL,"
	"  bytes INTEGER NOT NULL,"
	"  peer INTEGER NOT NULL,"                /* root or peer, -1 none */
	"  result INTEGER NOT NULL,"              /* ncclResult_t */
	"  rank INTEGER NOT NULL,"                /* -1 unknown */
	"  datatype INTEGER NOT NULL,"            /* 255 none */
	"  redop INTEGER NOT NULL,"               /* 255 none */
	"  flags INTEGER NOT NULL,"               /* SYSOM_NCCL_* */
	"  stream INTEGER NOT NULL"
	");"
	"CREATE INDEX nccl_calls_instance ON nccl_calls(comm_key, op, seq);"
	"CREATE INDEX nccl_calls_process_time ON nccl_calls(process, entry_ns);"
	/* GPU kernel launch counts per window, like samples (stacks: the same stack table). */
	"CREATE TABLE launches ("
	"  time_ms INTEGER NOT NULL,"             /* the batch window end */
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  function INTEGER NOT NULL,"            /* CUfunction handle (u64 bits) */
	"  kernel_name TEXT NOT NULL,"            /* '' unknown */
	"  user_stack INTEGER REFERENCES stacks(id),"
	"  kernel_stack INTEGER REFERENCES stacks(id),"
	"  count INTEGER NOT NULL,"
	"  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,"
	"  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,"
	"  shared_mem INTEGER NOT NULL,"
	"  flags INTEGER NOT NULL"                /* SYSOM_LAUNCH_* */
	");"
	"CREATE INDEX launches_time ON launches(time_ms);"
	"CREATE INDEX launches_process_time ON launches(process, time_ms);",
	/* 3: GPU-side timing from in-process components (wire minor 2); rows per batch, summed
	 * by readers; time_ms is the batch window end. */
	"CREATE TABLE gpu_kernels ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  name TEXT NOT NULL,"
	"  device INTEGER NOT NULL,"
	"  stream INTEGER NOT NULL,"               /* u64 bits */
	"  count INTEGER NOT NULL,"
	"  total_ns INTEGER NOT NULL,"
	"  min_ns INTEGER NOT NULL,"
	"  max_ns INTEGER NOT NULL,"
	"  hist BLOB NOT NULL"                     /* 20 x u32 little-endian (wire GPU_KERNELS) */
	");"
	"CREATE INDEX gpu_kernels_process_time ON gpu_kernels(process, time_ms);"
	"CREATE INDEX gpu_kernels_time ON gpu_kernels(time_ms);"
	"CREATE TABLE nccl_profiles ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  comm_id INTEGER NOT NULL,"              /* u64 bits */
	"  comm_name TEXT NOT NULL,"
	"  rank INTEGER NOT NULL,"
	"  nranks INTEGER NOT NULL,"
	"  func TEXT NOT NULL,"
	"  algo TEXT NOT NULL,"
	"  proto TEXT NOT NULL,"
	"  datatype TEXT NOT NULL,"
	"  peer INTEGER NOT NULL,"
	"  nchannels INTEGER NOT NULL,"
	"  count INTEGER NOT NULL,"
	"  bytes INTEGER NOT NULL,"
	"  kernel_timed INTEGER NOT NULL,"
	"  kernel_ns_total INTEGER NOT NULL,"
	"  kernel_ns_min INTEGER NOT NULL,"
	"  kernel_ns_max INTEGER NOT NULL,"
	"  span_timed INTEGER NOT NULL,"
	"  span_ns_total INTEGER NOT NULL,"
	"  enqueue_ns_total INTEGER NOT NULL,"
	"  transfers INTEGER NOT NULL,"
	"  transfer_bytes INTEGER NOT NULL,"
	"  first_seq INTEGER NOT NULL,"
	"  last_seq INTEGER NOT NULL"
	");"
	"CREATE INDEX nccl_profiles_process_time ON nccl_profiles(process, time_ms);"
	"CREATE TABLE nccl_links ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  comm_id INTEGER NOT NULL,"
	"  rank INTEGER NOT NULL,"
	"  peer INTEGER NOT NULL,"
	"  channel INTEGER NOT NULL,"
	"  transfers INTEGER NOT NULL,"
	"  bytes INTEGER NOT NULL,"
	"  time_ns_total INTEGER NOT NULL,"
	"  sx REAL NOT NULL, sy REAL NOT NULL, sxx REAL NOT NULL, sxy REAL NOT NULL,"
	"  syy REAL NOT NULL,"
	"  min_latency_ns REAL, min_bytes_per_ns REAL, min_r2 REAL," /* NULL: no MIN fit */
	"  min_points INTEGER NOT NULL"
	");"
	"CREATE INDEX nccl_links_process_time ON nccl_links(process, time_ms);",
	/* 4: OS signals (wire minor 3), the monitor's diagnoses, per-job analysis settings and
	 * temporal baselines. OS rows are per batch (time_ms: window end), summed by readers. */
	"CREATE TABLE os_cpus ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  window_ms INTEGER NOT NULL,"            /* the batch window's length */
	"  cpu INTEGER NOT NULL,"
	"  numa_node INTEGER NOT NULL,"
	"  busy_ns INTEGER NOT NULL,"
	"  hardirq_count INTEGER NOT NULL,"
	"  hardirq_ns INTEGER NOT NULL,"
	"  softirq_count BLOB NOT NULL,"           /* 10 x u64 little-endian, per vector */
	"  softirq_ns BLOB NOT NULL,"
	"  context_switches INTEGER NOT NULL,"
	"  runq_wait_ns INTEGER NOT NULL"
	");"
	"CREATE INDEX os_cpus_node_time ON os_cpus(node, time_ms);"
	"CREATE TABLE os_irqs ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  cpu INTEGER NOT NULL,"
	"  irq INTEGER NOT NULL,"
	"  name TEXT NOT NULL,"
	"  count INTEGER NOT NULL,"
	"  ns INTEGER NOT NULL"
	");"
	"CREATE INDEX os_irqs_node_time ON os_irqs(node, time_ms);"
	"CREATE TABLE os_threads ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  tid INTEGER NOT NULL,"
	"  comm TEXT NOT NULL,"
	"  oncpu_ns INTEGER NOT NULL,"
	"  runq_wait_ns INTEGER NOT NULL,"
	"  runq_waits INTEGER NOT NULL,"
	"  runq_hist BLOB NOT NULL,"               /* 20 x u32 little-endian (wire OS_THREADS) */
	"  voluntary_switches INTEGER NOT NULL,"
	"  involuntary_switches INTEGER NOT NULL,"
	"  migrations INTEGER NOT NULL,"
	"  numa_migrations INTEGER NOT NULL,"
	"  pages_migrated INTEGER NOT NULL,"
	"  hardirq_ns INTEGER NOT NULL,"
	"  softirq_ns INTEGER NOT NULL,"
	"  cpus BLOB NOT NULL"                     /* 4 x u64 little-endian CPU bitmap */
	");"
	"CREATE INDEX os_threads_process_time ON os_threads(process, time_ms);"
	/* An incident the monitor opened: open while resolved_ms IS NULL; one open row per
	 * (job, identity). */
	"CREATE TABLE diagnoses ("
	"  id INTEGER PRIMARY KEY,"
	"  job TEXT NOT NULL,"
	"  identity TEXT NOT NULL,"                /* 'straggler rank=5', 'regression' */
	"  kind TEXT NOT NULL,"                    /* straggler | regression */
	"  rank INTEGER NOT NULL,"                 /* -1: the whole job */
	"  hostname TEXT NOT NULL,"
	"  communicators TEXT NOT NULL,"           /* hex keys, space-separated */
	"  layer TEXT NOT NULL,"                   /* gpu | cpu | os | unknown */
	"  severity TEXT NOT NULL,"
	"  summary TEXT NOT NULL,"
	"  action TEXT NOT NULL,"
	"  report TEXT NOT NULL,"                  /* JSON: the evidence */
	"  opened_ms INTEGER NOT NULL,"
	"  updated_ms INTEGER NOT NULL,"
	"  resolved_ms INTEGER"
	");"
	"CREATE INDEX diagnoses_job_time ON diagnoses(job, opened_ms);"
	"CREATE INDEX diagnoses_time ON diagnoses(opened_ms);"
	"CREATE UNIQUE INDEX diagnoses_open ON diagnoses(job, identity) WHERE resolved_ms IS NULL;"
	"CREATE TABLE job_settings ("
	"  job TEXT PRIMARY KEY,"
	"  settings TEXT NOT NULL,"                /* JSON object (docs/http-api.md) */
	"  updated_ms INTEGER NOT NULL"
	");"
	"CREATE TABLE job_baselines ("
	"  job TEXT PRIMARY KEY,"
	"  from_ms INTEGER NOT NULL,"
	"  to_ms INTEGER NOT NULL,"
	"  iteration_ns INTEGER NOT NULL,"         /* 0 unknown */
	"  samples INTEGER NOT NULL,"
	"  profile TEXT NOT NULL,"                 /* folded 'stack count' lines, job-wide */
	"  created_ms INTEGER NOT NULL,"
	"  source TEXT NOT NULL"                   /* auto | api */
	");",
	/* 5: the content hash of each batch, so that a batch re-sent under a stored identity with
	 * other content is a conflict rather than a duplicate: XXH3-64 (seed 0) of the plain wire
	 * bytes, as the signed 64-bit value with the same bits; NULL for batches stored before. */
	"ALTER TABLE batches ADD COLUMN content_hash INTEGER;",
	/* 6: when each kernel symbol table was last used (stored, or named by a stored batch as
	 * its kernel or a module), so that a bound on the kernel symbols evicts the least
	 * recently used tables first and never one in use. */
	"ALTER TABLE kernel_symbol_tables ADD COLUMN last_used_ns INTEGER NOT NULL DEFAULT 0;"
	"UPDATE kernel_symbol_tables SET last_used_ns = uploaded_ns;"
	"CREATE INDEX kernel_symbol_tables_last_used ON kernel_symbol_tables(last_used_ns);",
	/* Off-CPU (blocked) time per thread and stacks (wire 1.4 OFFCPU), like samples. */
	"CREATE TABLE offcpu ("
	"  time_ms INTEGER NOT NULL,"             /* window start + time offset */
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  tid INTEGER NOT NULL,"
	"  thread_comm TEXT NOT NULL,"
	"  state INTEGER NOT NULL,"               /* enum sysom_offcpu_state_class */
	"  kernel_stack INTEGER REFERENCES stacks(id),"
	"  user_stack INTEGER REFERENCES stacks(id),"
	"  count INTEGER NOT NULL,"               /* blocks */
	"  blocked_ns INTEGER NOT NULL,"
	"  max_ns INTEGER NOT NULL"
	");"
	"CREATE INDEX offcpu_time ON offcpu(time_ms);"
	"CREATE INDEX offcpu_node_time ON offcpu(node, time_ms);"
	"CREATE INDEX offcpu_process_time ON offcpu(process, time_ms);",
	/* Who each process belongs to (wire 1.5 IDENTITIES): container, pod, Slurm job, systemd
	 * unit from its cgroup; "" (0 for slurm_job) when unknown. One row per process. */
	"CREATE TABLE process_identities ("
	"  process INTEGER PRIMARY KEY REFERENCES processes(id),"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  runtime TEXT NOT NULL,"                /* containerd, cri-o, docker, podman, unknown */
	"  container_id TEXT NOT NULL,"
	"  pod_uid TEXT NOT NULL,"
	"  namespace TEXT NOT NULL,"
	"  pod_name TEXT NOT NULL,"
	"  container_name TEXT NOT NULL,"
	"  slurm_job INTEGER NOT NULL,"
	"  slurm_step TEXT NOT NULL,"
	"  unit TEXT NOT NULL,"
	"  last_seen_ns INTEGER NOT NULL"
	");"
	"CREATE INDEX process_identities_pod ON process_identities(pod_uid);"
	"CREATE INDEX process_identities_pod_name ON process_identities(namespace, pod_name);"
	"CREATE INDEX process_identities_container ON process_identities(container_id);"
	"CREATE INDEX process_identities_slurm ON process_identities(slurm_job);"
	"CREATE INDEX process_identities_unit ON process_identities(unit);",
	/* GPU health per GPU per window (wire 1.6 GPU_HEALTH, agent/gpu/nvml.c): NULL where NVML
	 * could not say. reasons_any: clock event reason bits seen in any sample. */
	"CREATE TABLE gpu_health ("
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  window_start_ns INTEGER NOT NULL,"
	"  window_end_ns INTEGER NOT NULL,"
	"  device INTEGER NOT NULL,"
	"  uuid TEXT NOT NULL, pci_bus_id TEXT NOT NULL, name TEXT NOT NULL,"
	"  samples INTEGER NOT NULL, slowdown_samples INTEGER NOT NULL,"
	"  reasons_any INTEGER, reasons_last INTEGER,"
	"  sm_clock_min INTEGER, sm_clock_last INTEGER, sm_clock_max INTEGER,"
	"  mem_clock_last INTEGER, mem_clock_max INTEGER,"
	"  temp_max INTEGER, temp_last INTEGER, temp_slowdown INTEGER, temp_shutdown INTEGER,"
	"  power_max_mw INTEGER, power_last_mw INTEGER, power_limit_mw INTEGER,"
	"  util_gpu INTEGER, util_mem INTEGER,"
	"  ecc_corrected INTEGER, ecc_uncorrected INTEGER,"
	"  retired_sbe INTEGER, retired_dbe INTEGER, pcie_replays INTEGER, flags INTEGER NOT NULL,"
	"  nvlink_errors INTEGER, xid_count INTEGER NOT NULL, xid_last INTEGER NOT NULL,"
	"  PRIMARY KEY (node, device, window_end_ns)"
	");"
	"CREATE INDEX gpu_health_time ON gpu_health(window_end_ns);",
	/* Host signals (wire minor 6, HOST_SIGNALS): one row per (batch, signal); a signal the
	 * node could not read has no row. time_ms: the batch window's end. */
	"CREATE TABLE host_signals ("
	"  time_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  window_ms INTEGER NOT NULL,"
	"  signal INTEGER NOT NULL,"              /* enum sysom_host_signal */
	"  value REAL NOT NULL"
	");"
	"CREATE INDEX host_signals_node_time ON host_signals(node, time_ms);",
	/* A rank's workers (wire JOB_RANKS role 1, e.g. PyTorch DataLoader workers): they carry
	 * the rank's numbers, so rank filters include them; lists and counts of ranks skip them.
	 * rank_pid: the pid of the rank's own process on the same node (0 for a rank). */
	"ALTER TABLE job_ranks ADD COLUMN role INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE job_ranks ADD COLUMN rank_pid INTEGER NOT NULL DEFAULT 0;",
	/* The rank's GPU as the node's NVML index (wire 1.7 JOB_RANKS gpu_device - 1): the
	 * device whose health windows are the rank's; -1 unknown (older agents, or the agent
	 * could not tell). */
	"ALTER TABLE job_ranks ADD COLUMN gpu_device INTEGER NOT NULL DEFAULT -1;",
	/* 13: NCCL calls as chunks (server/store/nccl_chunk.h): one row per (batch, process,
	 * communicator, op) with the calls in a compressed blob, instead of one row per call
	 * (96% of the database, 2.8 MB per 30-s batch of an 8-rank node). Bounds the writer keeps
	 * per chunk: seq_max - seq_min <= NCCL_CHUNK_MAX_SEQ_SPAN and entry_max_ns -
	 * entry_min_ns <= NCCL_CHUNK_MAX_ENTRY_SPAN_NS, so the readers' ranges over
	 * (comm_key, op, seq_min) and (process, entry_min_ns) are bounded. The rows of nccl_calls
	 * move into chunks in the same transaction (migration_steps), and the table goes. */
	"CREATE TABLE nccl_call_chunks ("
	"  id INTEGER PRIMARY KEY,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  comm_key INTEGER NOT NULL,"            /* u64 bits, 0 none */
	"  op INTEGER NOT NULL,"                  /* enum sysom_nccl_op */
	"  seq_min INTEGER NOT NULL,"
	"  seq_max INTEGER NOT NULL,"
	"  entry_min_ns INTEGER NOT NULL,"
	"  entry_max_ns INTEGER NOT NULL,"
	"  calls INTEGER NOT NULL,"
	"  data BLOB NOT NULL"                    /* nccl_chunk.h's blob */
	");"
	"CREATE INDEX nccl_call_chunks_process_time ON nccl_call_chunks(process, entry_min_ns);"
	"CREATE INDEX nccl_call_chunks_instance ON nccl_call_chunks(comm_key, op, seq_min);",
	/* 14: per-minute rollups of CPU samples and off-CPU time, kept past the raw rows
	 * (--rollup-retention-days): the samples (off-CPU rows) of one process with the same
	 * stacks in one minute summed into one row; thread id, CPU, thread comm and off-CPU
	 * state dropped. minute_ms: time_ms rounded down to the minute. Stacks are 0 for none
	 * (not NULL), so that the unique key holds. The batch writer adds to them in its own
	 * transaction; this fills them from the raw rows stored so far. */
	"CREATE TABLE sample_minutes ("
	"  minute_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  user_stack INTEGER NOT NULL,"          /* stacks(id), 0 none */
	"  kernel_stack INTEGER NOT NULL,"        /* stacks(id), 0 none */
	"  count INTEGER NOT NULL"
	");"
	"CREATE UNIQUE INDEX sample_minutes_key"
	"  ON sample_minutes(process, minute_ms, user_stack, kernel_stack);"
	"CREATE INDEX sample_minutes_time ON sample_minutes(minute_ms);"
	"CREATE TABLE offcpu_minutes ("
	"  minute_ms INTEGER NOT NULL,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  user_stack INTEGER NOT NULL,"
	"  kernel_stack INTEGER NOT NULL,"
	"  blocked_ns INTEGER NOT NULL"
	");"
	"CREATE UNIQUE INDEX offcpu_minutes_key"
	"  ON offcpu_minutes(process, minute_ms, user_stack, kernel_stack);"
	"CREATE INDEX offcpu_minutes_time ON offcpu_minutes(minute_ms);"
	"INSERT INTO sample_minutes (minute_ms, node, process, user_stack, kernel_stack, count)"
	"  SELECT time_ms - time_ms % 60000 AS m, node, process, coalesce(user_stack, 0) AS u,"
	"  coalesce(kernel_stack, 0) AS k, sum(count) FROM samples GROUP BY process, m, u, k;"
	"INSERT INTO offcpu_minutes (minute_ms, node, process, user_stack, kernel_stack,"
	"  blocked_ns)"
	"  SELECT time_ms - time_ms % 60000 AS m, node, process, coalesce(user_stack, 0) AS u,"
	"  coalesce(kernel_stack, 0) AS k, sum(blocked_ns) FROM offcpu GROUP BY process, m, u, k;",
	/* 15: NCCL collective instances kept past the raw calls (store_nccl_rollup.c,
	 * nccl_instance.h), written by retention just before the calls go and kept
	 * --rollup-retention-days: one row per (job, communicator, op, minute of the first
	 * entries, part) with the instances in a blob; first_min/first_max: their first entries,
	 * last_max: their latest call. The blobs name processes, which nccl_instance_processes
	 * keeps from process collection as long as a row does (last_ns: the newest first entry
	 * naming it). nccl_rollup_state: the first entry up to which instances are written (a
	 * minute start; 0: none yet) and the longest last_max - first_min of a row (the readers'
	 * bound). */
	"CREATE TABLE nccl_instances ("
	"  id INTEGER PRIMARY KEY,"
	"  job TEXT NOT NULL,"
	"  comm_key INTEGER NOT NULL,"            /* u64 bits */
	"  op INTEGER NOT NULL,"                  /* enum sysom_nccl_op */
	"  minute_ns INTEGER NOT NULL,"
	"  part INTEGER NOT NULL,"
	"  first_min_ns INTEGER NOT NULL,"
	"  first_max_ns INTEGER NOT NULL,"
	"  last_max_ns INTEGER NOT NULL,"
	"  instances INTEGER NOT NULL,"
	"  calls INTEGER NOT NULL,"
	"  data BLOB NOT NULL"                    /* nccl_instance.h's blob */
	");"
	"CREATE UNIQUE INDEX nccl_instances_key ON nccl_instances(job, comm_key, op, minute_ns, part);"
	"CREATE INDEX nccl_instances_time ON nccl_instances(job, first_min_ns);"
	"CREATE TABLE nccl_instance_processes ("
	"  process INTEGER PRIMARY KEY REFERENCES processes(id),"
	"  last_ns INTEGER NOT NULL"
	");"
	"CREATE TABLE nccl_rollup_state ("
	"  id INTEGER PRIMARY KEY CHECK (id = 1),"
	"  watermark_ns INTEGER NOT NULL,"
	"  max_span_ns INTEGER NOT NULL"
	");"
	"INSERT INTO nccl_rollup_state (id, watermark_ns, max_span_ns) VALUES (1, 0, 0);",
};
/* A step in C after a migration's SQL, in its transaction (NULL: none). */
static int (*const migration_steps[])(struct conn *c) = {
	[12] = store__nccl_calls_to_chunks,
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

int store__schema_version(void)
{
	return SCHEMA_VERSION;
}

/* Brings the schema to SCHEMA_VERSION, one transaction per migration. */
int store__schema_migrate(struct conn *c, const char *path, char *err, size_t errlen)
{
	sqlite3_int64 version = 0;
	uint64_t rows = 0;
	int rc = store__query(c, &(struct store__query){ .sql = "PRAGMA user_version", .once = true,
							  .row = store__row_i64, .ctx = &version,
							  .max_rows = 1, .rows = &rows });

	if (!rc && !rows)
		rc = -EPROTO;
	if (rc) {
		snprintf(err, errlen, "cannot read the schema version of %s: %s", path,
			 sqlite3_errmsg(c->db));
		return rc;
	}
	if (version > SCHEMA_VERSION) {
		snprintf(err, errlen,
			 "%s has schema version %lld, newer than the %d this sysom-server supports;"
			 " run a newer sysom-server",
			 path, (long long)version, SCHEMA_VERSION);
		return -SYSOM_EVERSION;
	}
	if (version < 0) {
		snprintf(err, errlen, "%s has an invalid schema version %lld", path, (long long)version);
		return -SYSOM_ECORRUPT;
	}
	for (int v = (int)version; v < SCHEMA_VERSION; v++) {
		char bump[64];

		snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
		rc = store__conn_exec(c, "BEGIN IMMEDIATE");
		if (!rc)
			rc = store__conn_exec(c, migrations[v]);
		if (!rc && v < (int)(sizeof(migration_steps) / sizeof(migration_steps[0])) &&
		    migration_steps[v])
			rc = migration_steps[v](c);
		if (!rc)
			rc = store__conn_exec(c, bump);
		if (!rc)
			rc = store__conn_exec(c, "COMMIT");
		if (rc) {
			snprintf(err, errlen, "cannot migrate %s to schema version %d: %s", path, v + 1,
				 sqlite3_errmsg(c->db));
			if (!sqlite3_get_autocommit(c->db))
				store__conn_exec(c, "ROLLBACK");
			return rc;
		}
	}
	return 0;
}
