/* SPDX-License-Identifier: Apache-2.0 */
/* SQLite store backend: versioned schema, one serialized writer, pooled WAL readers. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/bytes.h"
#include "common/elf_buildid.h"
#include "common/error.h"
#include "common/hash.h"
#include "server/store/store_impl.h"

/*
 * Durability: journal_mode=WAL with synchronous=FULL. The agent deletes its spool file as soon
 * as ingest answers 2xx, so a batch we acknowledged must survive a power loss, not only a
 * process crash; NORMAL would let the last commits vanish on power loss. FULL costs one fsync
 * of the WAL per batch (one commit per node every 30 s), which a single disk sustains for
 * thousands of nodes.
 */
#define DEFAULT_READERS 4
#define MAX_READERS 64
#define DEFAULT_BUSY_TIMEOUT_MS 5000
#define STACK_PROBES 16 /* content-hash collisions tolerated per stack (never seen in practice) */

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
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

enum stmt_id {
	ST_NODE_ROW,
	ST_BATCH_FIND,
	ST_NODE_UPSERT,
	ST_BATCH_INSERT,
	ST_OBJECT_FIND,
	ST_OBJECT_INSERT,
	ST_PROCESS_UPSERT,
	ST_STACK_FIND,
	ST_STACK_INSERT,
	ST_SAMPLE_INSERT,
	ST_COUNTER_ADD,
	ST_JOB_RANK_UPSERT,
	ST_COMMUNICATOR_UPSERT,
	ST_NCCL_CALL_INSERT,
	ST_LAUNCH_INSERT,
	ST_GPU_KERNEL_INSERT,
	ST_NCCL_PROFILE_INSERT,
	ST_NCCL_LINK_INSERT,
	ST_OS_CPU_INSERT,
	ST_OS_IRQ_INSERT,
	ST_OS_THREAD_INSERT,
	ST_KSYMS_FIND,
	ST_KSYMS_INSERT,
	ST_KSYM_INSERT,
	ST_KSYM_FLOOR,
	ST_KSYM_NEXT,
	ST_OBJECT_GET,
	ST_STACK_GET,
	ST_NODES_LIST,
	ST_COUNTERS_LIST,
	ST_PING,
	ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_NODE_ROW] = "SELECT id FROM nodes WHERE node_id = ?1",
	[ST_BATCH_FIND] = "SELECT 1 FROM batches b JOIN nodes n ON n.id = b.node"
			  " WHERE n.node_id = ?1 AND b.epoch = ?2 AND b.sequence = ?3",
	[ST_NODE_UPSERT] =
		"INSERT INTO nodes (node_id, hostname, kernel_release, machine, agent_version, boot_id,"
		" kernel_object, sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
		" batches, last_epoch, last_sequence)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, 1, ?12, ?13)"
		" ON CONFLICT (node_id) DO UPDATE SET hostname = excluded.hostname,"
		" kernel_release = excluded.kernel_release, machine = excluded.machine,"
		" agent_version = excluded.agent_version, boot_id = excluded.boot_id,"
		" kernel_object = excluded.kernel_object, sample_hz = excluded.sample_hz,"
		" sample_rate_ppm = excluded.sample_rate_ppm, online_cpus = excluded.online_cpus,"
		" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns), batches = batches + 1,"
		" last_sequence = CASE WHEN last_epoch = excluded.last_epoch"
		"   THEN max(last_sequence, excluded.last_sequence) ELSE excluded.last_sequence END,"
		" last_epoch = excluded.last_epoch"
		" RETURNING id",
	[ST_BATCH_INSERT] = "INSERT INTO batches (node, epoch, sequence, received_ns, window_start_ns,"
			    " window_end_ns, samples, sample_rows, counters)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
			    " ON CONFLICT (node, epoch, sequence) DO NOTHING",
	[ST_OBJECT_FIND] = "SELECT id FROM objects WHERE kind = ?1 AND key = ?2",
	[ST_OBJECT_INSERT] = "INSERT INTO objects (kind, key, build_id, name) VALUES (?1, ?2, ?3, ?4)",
	[ST_PROCESS_UPSERT] =
		"INSERT INTO processes (node, tgid, start_time_ns, generation, ppid, comm, exe, cmdline,"
		" first_seen_ns, last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
		" ON CONFLICT (node, tgid, start_time_ns, generation) DO UPDATE SET"
		" ppid = excluded.ppid, comm = excluded.comm, exe = excluded.exe,"
		" cmdline = excluded.cmdline, first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)"
		" RETURNING id",
	[ST_STACK_FIND] = "SELECT kind, stop_reason, frames FROM stacks WHERE id = ?1",
	[ST_STACK_INSERT] = "INSERT INTO stacks (id, kind, stop_reason, nframes, frames)"
			    " VALUES (?1, ?2, ?3, ?4, ?5)",
	[ST_SAMPLE_INSERT] = "INSERT INTO samples (time_ms, node, process, tid, cpu, thread_comm,"
			     " kernel_stack, user_stack, count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
	[ST_COUNTER_ADD] = "INSERT INTO node_counters (node, counter, total) VALUES (?1, ?2, ?3)"
			   " ON CONFLICT (node, counter) DO UPDATE SET total = total + excluded.total",
	/* Attributes follow the newest window (batches may arrive out of order). */
	[ST_JOB_RANK_UPSERT] =
		"INSERT INTO job_ranks (process, node, job, rank, world_size, local_rank,"
		" local_world_size, group_rank, source, job_id_source, master, groups, first_seen_ns,"
		" last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
		" ON CONFLICT (process) DO UPDATE SET"
		" job = iif(excluded.last_seen_ns >= last_seen_ns, excluded.job, job),"
		" rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.rank, rank),"
		" world_size = iif(excluded.last_seen_ns >= last_seen_ns, excluded.world_size, world_size),"
		" local_rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.local_rank, local_rank),"
		" local_world_size = iif(excluded.last_seen_ns >= last_seen_ns,"
		"   excluded.local_world_size, local_world_size),"
		" group_rank = iif(excluded.last_seen_ns >= last_seen_ns, excluded.group_rank, group_rank),"
		" source = iif(excluded.last_seen_ns >= last_seen_ns, excluded.source, source),"
		" job_id_source = iif(excluded.last_seen_ns >= last_seen_ns, excluded.job_id_source,"
		"   job_id_source),"
		" master = iif(excluded.last_seen_ns >= last_seen_ns, excluded.master, master),"
		" groups = iif(excluded.last_seen_ns >= last_seen_ns, excluded.groups, groups),"
		" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)",
	[ST_COMMUNICATOR_UPSERT] =
		"INSERT INTO communicators (process, key, node, rank, nranks, parent_key, split_color,"
		" split_key, split_ordinal, key_source, comm_hash, handle, created_ns, destroyed,"
		" first_seen_ns, last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
		" ?12, ?13, ?14, ?15, ?16)"
		" ON CONFLICT (process, key) DO UPDATE SET"
		" rank = iif(excluded.rank >= 0, excluded.rank, rank),"
		" nranks = iif(excluded.nranks >= 1, excluded.nranks, nranks),"
		" parent_key = iif(excluded.parent_key != 0, excluded.parent_key, parent_key),"
		" split_color = iif(excluded.split_color != -1, excluded.split_color, split_color),"
		" split_key = iif(excluded.split_key != -1, excluded.split_key, split_key),"
		" split_ordinal = iif(excluded.split_ordinal != 0, excluded.split_ordinal, split_ordinal),"
		" key_source = excluded.key_source,"
		" comm_hash = iif(excluded.comm_hash != 0, excluded.comm_hash, comm_hash),"
		" handle = excluded.handle,"
		" created_ns = iif(excluded.created_ns != 0, excluded.created_ns, created_ns),"
		" destroyed = max(destroyed, excluded.destroyed),"
		" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)",
	[ST_NCCL_CALL_INSERT] =
		"INSERT INTO nccl_calls (node, process, tid, comm_key, op, seq, entry_ns, exit_ns,"
		" count, bytes, peer, result, rank, datatype, redop, flags, stream) VALUES (?1, ?2,"
		" ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
	[ST_LAUNCH_INSERT] =
		"INSERT INTO launches (time_ms, node, process, function, kernel_name, user_stack,"
		" kernel_stack, count, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem,"
		" flags) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
	[ST_GPU_KERNEL_INSERT] =
		"INSERT INTO gpu_kernels (time_ms, node, process, name, device, stream, count, total_ns,"
		" min_ns, max_ns, hist) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[ST_OS_CPU_INSERT] =
		"INSERT INTO os_cpus (time_ms, node, window_ms, cpu, numa_node, busy_ns, hardirq_count,"
		" hardirq_ns, softirq_count, softirq_ns, context_switches, runq_wait_ns)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
	[ST_OS_IRQ_INSERT] = "INSERT INTO os_irqs (time_ms, node, cpu, irq, name, count, ns)"
			     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_OS_THREAD_INSERT] =
		"INSERT INTO os_threads (time_ms, node, process, tid, comm, oncpu_ns, runq_wait_ns,"
		" runq_waits, runq_hist, voluntary_switches, involuntary_switches, migrations,"
		" numa_migrations, pages_migrated, hardirq_ns, softirq_ns, cpus) VALUES (?1, ?2, ?3,"
		" ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
	[ST_NCCL_PROFILE_INSERT] =
		"INSERT INTO nccl_profiles (time_ms, node, process, comm_id, comm_name, rank, nranks,"
		" func, algo, proto, datatype, peer, nchannels, count, bytes, kernel_timed,"
		" kernel_ns_total, kernel_ns_min, kernel_ns_max, span_timed, span_ns_total,"
		" enqueue_ns_total, transfers, transfer_bytes, first_seq, last_seq) VALUES (?1, ?2,"
		" ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,"
		" ?21, ?22, ?23, ?24, ?25, ?26)",
	[ST_NCCL_LINK_INSERT] =
		"INSERT INTO nccl_links (time_ms, node, process, comm_id, rank, peer, channel,"
		" transfers, bytes, time_ns_total, sx, sy, sxx, sxy, syy, min_latency_ns,"
		" min_bytes_per_ns, min_r2, min_points) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
		" ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
	[ST_KSYMS_FIND] = "SELECT id, symbols FROM kernel_symbol_tables WHERE build_id = ?1",
	[ST_KSYMS_INSERT] = "INSERT INTO kernel_symbol_tables (build_id, symbols, uploaded_ns)"
			    " VALUES (?1, ?2, ?3)",
	[ST_KSYM_INSERT] = "INSERT INTO kernel_symbols (tbl, offset, type, name) VALUES (?1, ?2, ?3, ?4)",
	[ST_KSYM_FLOOR] = "SELECT offset, name FROM kernel_symbols WHERE tbl = ?1 AND offset <= ?2"
			  " ORDER BY offset DESC LIMIT 1",
	[ST_KSYM_NEXT] = "SELECT offset FROM kernel_symbols WHERE tbl = ?1 AND offset > ?2"
			 " ORDER BY offset LIMIT 1",
	[ST_OBJECT_GET] = "SELECT kind, build_id, name FROM objects WHERE id = ?1",
	[ST_STACK_GET] = "SELECT kind, stop_reason, nframes, frames FROM stacks WHERE id = ?1",
	[ST_NODES_LIST] = "SELECT node_id, hostname, kernel_release, machine, agent_version, boot_id,"
			  " sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
			  " batches, last_epoch, last_sequence FROM nodes ORDER BY hostname, node_id",
	[ST_COUNTERS_LIST] = "SELECT n.node_id, n.hostname, c.counter, c.total FROM node_counters c"
			     " JOIN nodes n ON n.id = c.node ORDER BY c.counter, n.node_id",
	[ST_PING] = "SELECT count(*) FROM kernel_symbol_tables WHERE id = 0",
};

/* A connection with its lazily prepared statements; used by one thread at a time. */
struct conn {
	sqlite3 *db;
	sqlite3_stmt *stmts[ST_COUNT];
	struct conn *next_free;
};

struct sqlite_store {
	struct store base;
	char *db_path;
	char *wal_path;
	int lock_fd;
	uint32_t page_size;
	pthread_mutex_t write_lock; /* serializes every write transaction on `writer` */
	struct conn writer;
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct conn *readers;
	uint32_t reader_count;
	struct conn *free_readers;
};

static struct sqlite_store *from_base(struct store *s)
{
	return (struct sqlite_store *)s;
}

/* Maps an SQLite result code to the store's negative errors. */
static int sql_error(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_IOERR:
		return -EIO;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -SYSOM_ECORRUPT;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
	case SQLITE_CANTOPEN:
		return -EACCES;
	case SQLITE_TOOBIG:
		return -E2BIG;
	}
	return -EPROTO; /* anything else is a bug or an unexpected database state */
}

/* Same bits, signed: how unsigned 64-bit wire values are stored. */
static sqlite3_int64 as_i64(uint64_t v)
{
	sqlite3_int64 r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

static uint64_t as_u64(sqlite3_int64 v)
{
	uint64_t r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

/* Counts are unsigned on the wire; the database keeps them as non-negative signed values. */
static sqlite3_int64 clamp_i64(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

static void hex_of(const uint8_t *bytes, size_t len, char *out, size_t outlen)
{
	struct sysom_build_id id = { .len = (uint8_t)len };

	memcpy(id.bytes, bytes, len);
	sysom_build_id_hex(&id, out, outlen);
}

static const char *column_text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);

	return t ? (const char *)t : "";
}

static void copy_column(sqlite3_stmt *st, int i, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s", column_text(st, i));
}

static int conn_exec(struct conn *c, const char *sql)
{
	return sql_error(sqlite3_exec(c->db, sql, NULL, NULL, NULL));
}

/* The prepared statement `id` of the connection, reset and unbound. */
static int conn_stmt(struct conn *c, enum stmt_id id, sqlite3_stmt **out)
{
	if (!c->stmts[id]) {
		int rc = sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
					    &c->stmts[id], NULL);
		if (rc != SQLITE_OK)
			return sql_error(rc);
	}
	*out = c->stmts[id];
	return 0;
}

/* Ends a use of a cached statement so it holds no locks or borrowed bindings. */
static void stmt_done(sqlite3_stmt *st)
{
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
}

/* Steps a statement that returns no row. */
static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	return rc == SQLITE_DONE ? 0 : rc == SQLITE_ROW ? -EPROTO : sql_error(rc);
}

static void conn_close(struct conn *c)
{
	for (int i = 0; i < ST_COUNT; i++) {
		sqlite3_finalize(c->stmts[i]);
		c->stmts[i] = NULL;
	}
	sqlite3_close(c->db);
	c->db = NULL;
}

static int conn_open(struct conn *c, const char *path, uint32_t busy_timeout_ms, bool reader,
		     char *err, size_t errlen)
{
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (reader ? 0 : SQLITE_OPEN_CREATE);
	int rc = sqlite3_open_v2(path, &c->db, flags, NULL);

	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path,
			 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		rc = sql_error(rc);
		goto cleanup;
	}
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_busy_timeout(c->db, (int)busy_timeout_ms);
	rc = conn_exec(c, reader ? "PRAGMA foreign_keys = ON; PRAGMA query_only = ON;"
				 : "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;"
				   " PRAGMA cache_size = -32768;");
	if (rc)
		snprintf(err, errlen, "cannot configure %s: %s", path, sqlite3_errmsg(c->db));
cleanup:
	if (rc)
		conn_close(c);
	return rc;
}

static int pragma_int(struct conn *c, const char *sql, sqlite3_int64 *out)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK) {
		rc = sql_error(rc);
		goto cleanup;
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
		goto cleanup;
	}
	*out = sqlite3_column_int64(st, 0);
	rc = 0;
cleanup:
	sqlite3_finalize(st);
	return rc;
}

/* Brings the schema to SCHEMA_VERSION, one transaction per migration. */
static int migrate(struct conn *c, const char *path, char *err, size_t errlen)
{
	sqlite3_int64 version;
	int rc = pragma_int(c, "PRAGMA user_version", &version);

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
		rc = conn_exec(c, "BEGIN IMMEDIATE");
		if (!rc)
			rc = conn_exec(c, migrations[v]);
		if (!rc)
			rc = conn_exec(c, bump);
		if (!rc)
			rc = conn_exec(c, "COMMIT");
		if (rc) {
			snprintf(err, errlen, "cannot migrate %s to schema version %d: %s", path, v + 1,
				 sqlite3_errmsg(c->db));
			if (!sqlite3_get_autocommit(c->db))
				conn_exec(c, "ROLLBACK");
			return rc;
		}
	}
	return 0;
}

static int apply_size_limit(struct sqlite_store *s, uint64_t max_bytes)
{
	char sql[80];
	uint64_t pages = max_bytes ? max_bytes / s->page_size : 0xfffffffeULL;

	if (pages == 0)
		pages = 1;
	if (pages > 0xfffffffeULL)
		pages = 0xfffffffeULL;
	/* SQLite raises a limit below the current size to the current size: growth then fails. */
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %llu", (unsigned long long)pages);
	return conn_exec(&s->writer, sql);
}

static void sqlite_close(struct store *base)
{
	struct sqlite_store *s = from_base(base);

	for (uint32_t i = 0; i < s->reader_count; i++)
		conn_close(&s->readers[i]);
	free(s->readers);
	/* The writer closes last: the last connection checkpoints the WAL into the database. */
	conn_close(&s->writer);
	pthread_mutex_destroy(&s->write_lock);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_cond_destroy(&s->pool_cond);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s->db_path);
	free(s->wal_path);
	free(s);
}

static int sqlite_schema_version(struct store *base)
{
	(void)base;
	return SCHEMA_VERSION;
}

static struct conn *reader_acquire(struct sqlite_store *s)
{
	struct conn *c;

	pthread_mutex_lock(&s->pool_lock);
	while (!s->free_readers)
		pthread_cond_wait(&s->pool_cond, &s->pool_lock);
	c = s->free_readers;
	s->free_readers = c->next_free;
	pthread_mutex_unlock(&s->pool_lock);
	return c;
}

static void reader_release(struct sqlite_store *s, struct conn *c)
{
	pthread_mutex_lock(&s->pool_lock);
	c->next_free = s->free_readers;
	s->free_readers = c;
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
}

/* ---- writing a batch ---------------------------------------------------------------------- */

static bool kind_has_build_id(uint8_t kind)
{
	return kind == SYSOM_OBJECT_ELF || kind == SYSOM_OBJECT_FILE_HASH ||
	       kind == SYSOM_OBJECT_KERNEL || kind == SYSOM_OBJECT_KMODULE;
}

/* The store-wide id of a batch object, inserting it when new. */
static int object_id(struct conn *c, const struct sysom_batch *b, const struct sysom_object *o,
		     sqlite3_int64 *out)
{
	const char *name = sysom_batch_string(b, o->name);
	bool by_id = kind_has_build_id(o->kind);
	const void *key = by_id ? (const void *)o->build_id : (const void *)name;
	int key_len = by_id ? o->build_id_len : (int)strlen(name);
	sqlite3_stmt *st = NULL;
	int rc;

	/* A zero-length blob needs a non-NULL pointer (NULL would bind SQL NULL). */
	if ((rc = conn_stmt(c, ST_OBJECT_FIND, &st)))
		return rc;
	sqlite3_bind_int(st, 1, o->kind);
	sqlite3_bind_blob(st, 2, key_len ? key : "", key_len, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		stmt_done(st);
		return 0;
	}
	stmt_done(st);
	if (rc != SQLITE_DONE)
		return sql_error(rc);
	if ((rc = conn_stmt(c, ST_OBJECT_INSERT, &st)))
		return rc;
	sqlite3_bind_int(st, 1, o->kind);
	sqlite3_bind_blob(st, 2, key_len ? key : "", key_len, SQLITE_STATIC);
	if (by_id)
		sqlite3_bind_blob(st, 3, o->build_id, o->build_id_len, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	rc = step_done(st);
	stmt_done(st);
	if (!rc)
		*out = sqlite3_last_insert_rowid(c->db);
	return rc;
}

static int node_upsert(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       sqlite3_int64 kernel_object, int64_t received_ns, sqlite3_int64 *out)
{
	const struct sysom_node_info *n = &b->node;
	char boot_hex[33];
	sqlite3_stmt *st = NULL;
	int rc;

	hex_of(n->boot_id, sizeof(n->boot_id), boot_hex, sizeof(boot_hex));
	if ((rc = conn_stmt(c, ST_NODE_UPSERT, &st)))
		return rc;
	sqlite3_bind_text(st, 1, node_hex, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, sysom_batch_string(b, n->hostname), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, sysom_batch_string(b, n->kernel_release), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, sysom_batch_string(b, n->machine), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, sysom_batch_string(b, n->agent_version), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, boot_hex, -1, SQLITE_STATIC);
	if (kernel_object)
		sqlite3_bind_int64(st, 7, kernel_object);
	sqlite3_bind_int64(st, 8, n->sample_hz);
	sqlite3_bind_int64(st, 9, n->sample_rate_ppm);
	sqlite3_bind_int64(st, 10, n->online_cpus);
	sqlite3_bind_int64(st, 11, received_ns);
	sqlite3_bind_int64(st, 12, as_i64(b->agent_epoch));
	sqlite3_bind_int64(st, 13, as_i64(b->sequence));
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

/* The batch's counters as a JSON object {"name": value}; caller frees. */
static char *counters_json(const struct sysom_batch *b)
{
	json_t *obj = json_object();
	char *text = NULL;

	if (!obj)
		return NULL;
	for (uint32_t i = 0; i < b->counter_count; i++) {
		const char *name = sysom_counter_name(b->counters[i].id);
		char fallback[32];

		if (!name) {
			snprintf(fallback, sizeof(fallback), "counter_%u", b->counters[i].id);
			name = fallback;
		}
		if (json_object_set_new(obj, name, json_integer(clamp_i64(b->counters[i].value))))
			goto cleanup;
	}
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
cleanup:
	json_decref(obj);
	return text;
}

static int batch_insert(struct conn *c, const struct sysom_batch *b, sqlite3_int64 node,
			int64_t received_ns, uint64_t samples, const char *counters, bool *inserted)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_BATCH_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int64(st, 2, as_i64(b->agent_epoch));
	sqlite3_bind_int64(st, 3, as_i64(b->sequence));
	sqlite3_bind_int64(st, 4, received_ns);
	sqlite3_bind_int64(st, 5, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 6, clamp_i64(b->window_end_ns));
	sqlite3_bind_int64(st, 7, clamp_i64(samples));
	sqlite3_bind_int64(st, 8, b->sample_count);
	sqlite3_bind_text(st, 9, counters, -1, SQLITE_STATIC);
	rc = step_done(st);
	stmt_done(st);
	if (!rc)
		*inserted = sqlite3_changes(c->db) == 1;
	return rc;
}

static int process_upsert(struct conn *c, const struct sysom_batch *b, const struct sysom_process *p,
			  sqlite3_int64 node, sqlite3_int64 *out)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_PROCESS_UPSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int64(st, 2, p->tgid);
	sqlite3_bind_int64(st, 3, as_i64(p->start_time_ns));
	sqlite3_bind_int64(st, 4, p->generation);
	sqlite3_bind_int64(st, 5, p->ppid);
	sqlite3_bind_text(st, 6, sysom_batch_string(b, p->comm), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, sysom_batch_string(b, p->exe), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 8, sysom_batch_string(b, p->cmdline), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 9, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 10, clamp_i64(b->window_end_ns));
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

/*
 * The content-addressed id of a stack whose frames (already mapped to store-wide object ids)
 * are in `blob`, inserting it when new; *created says whether it was.
 */
static int stack_id(struct conn *c, uint8_t kind, uint8_t stop, uint16_t nframes,
		    const struct byte_buf *blob, sqlite3_int64 *out, bool *created)
{
	uint64_t h = sysom_hash_mix(sysom_hash64(blob->data, blob->len, 0), (uint64_t)kind << 8 | stop);
	sqlite3_stmt *st = NULL;
	int rc;

	for (int probe = 0; probe < STACK_PROBES; probe++, h++) {
		sqlite3_int64 id = as_i64(h);

		if (id == STORE_STACK_NONE)
			continue;
		if ((rc = conn_stmt(c, ST_STACK_FIND, &st)))
			return rc;
		sqlite3_bind_int64(st, 1, id);
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			bool same = sqlite3_column_int(st, 0) == kind &&
				    sqlite3_column_int(st, 1) == stop &&
				    (size_t)sqlite3_column_bytes(st, 2) == blob->len &&
				    memcmp(sqlite3_column_blob(st, 2), blob->data, blob->len) == 0;
			stmt_done(st);
			if (same) {
				*out = id;
				*created = false;
				return 0;
			}
			continue; /* a different stack holds this hash: probe the next id */
		}
		stmt_done(st);
		if (rc != SQLITE_DONE)
			return sql_error(rc);
		if ((rc = conn_stmt(c, ST_STACK_INSERT, &st)))
			return rc;
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, kind);
		sqlite3_bind_int(st, 3, stop);
		sqlite3_bind_int(st, 4, nframes);
		sqlite3_bind_blob(st, 5, blob->data, (int)blob->len, SQLITE_STATIC);
		rc = step_done(st);
		stmt_done(st);
		if (!rc) {
			*out = id;
			*created = true;
		}
		return rc;
	}
	return -EOVERFLOW;
}

static int sample_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_sample *smp,
			 sqlite3_int64 node, const sqlite3_int64 *processes,
			 const sqlite3_int64 *stacks)
{
	sqlite3_stmt *st = NULL;
	int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + smp->time_offset_ms;
	int rc;

	if ((rc = conn_stmt(c, ST_SAMPLE_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, time_ms);
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[smp->process]);
	sqlite3_bind_int64(st, 4, smp->tid);
	sqlite3_bind_int64(st, 5, smp->cpu);
	sqlite3_bind_text(st, 6, sysom_batch_string(b, smp->thread_comm), -1, SQLITE_STATIC);
	if (smp->kernel_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 7, stacks[smp->kernel_stack]);
	if (smp->user_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 8, stacks[smp->user_stack]);
	sqlite3_bind_int64(st, 9, clamp_i64(smp->count));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int counter_add(struct conn *c, sqlite3_int64 node, const struct sysom_counter *ctr)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_COUNTER_ADD, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int(st, 2, ctr->id);
	sqlite3_bind_int64(st, 3, clamp_i64(ctr->value));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int job_rank_upsert(struct conn *c, const struct sysom_batch *b, const struct sysom_job_rank *j,
			   sqlite3_int64 node, const sqlite3_int64 *processes)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_JOB_RANK_UPSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, processes[j->process]);
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_text(st, 3, sysom_batch_string(b, j->job), -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 4, j->rank);
	sqlite3_bind_int(st, 5, j->world_size);
	sqlite3_bind_int(st, 6, j->local_rank);
	sqlite3_bind_int(st, 7, j->local_world_size);
	sqlite3_bind_int(st, 8, j->group_rank);
	sqlite3_bind_int(st, 9, j->source);
	sqlite3_bind_text(st, 10, sysom_batch_string(b, j->job_id_source), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, sysom_batch_string(b, j->master), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 12, sysom_batch_string(b, j->groups), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 13, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 14, clamp_i64(b->window_end_ns));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int communicator_upsert(struct conn *c, const struct sysom_batch *b,
			       const struct sysom_communicator *m, sqlite3_int64 node,
			       const sqlite3_int64 *processes)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_COMMUNICATOR_UPSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, processes[m->process]);
	sqlite3_bind_int64(st, 2, as_i64(m->key));
	sqlite3_bind_int64(st, 3, node);
	sqlite3_bind_int(st, 4, m->rank);
	sqlite3_bind_int(st, 5, m->nranks);
	sqlite3_bind_int64(st, 6, as_i64(m->parent_key));
	sqlite3_bind_int(st, 7, m->split_color);
	sqlite3_bind_int(st, 8, m->split_key);
	sqlite3_bind_int64(st, 9, m->split_ordinal);
	sqlite3_bind_int(st, 10, m->key_source);
	sqlite3_bind_int64(st, 11, as_i64(m->nccl_comm_hash));
	sqlite3_bind_int64(st, 12, as_i64(m->handle));
	sqlite3_bind_int64(st, 13, clamp_i64(m->created_ns));
	sqlite3_bind_int(st, 14, (m->flags & SYSOM_COMM_DESTROYED) ? 1 : 0);
	sqlite3_bind_int64(st, 15, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 16, clamp_i64(b->window_end_ns));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int nccl_call_insert(struct conn *c, const struct sysom_nccl_call *k, sqlite3_int64 node,
			    const sqlite3_int64 *processes)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_NCCL_CALL_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int64(st, 2, processes[k->process]);
	sqlite3_bind_int64(st, 3, k->tid);
	sqlite3_bind_int64(st, 4, as_i64(k->comm_key));
	sqlite3_bind_int(st, 5, k->op);
	sqlite3_bind_int64(st, 6, as_i64(k->seq));
	sqlite3_bind_int64(st, 7, clamp_i64(k->entry_ns));
	sqlite3_bind_int64(st, 8, clamp_i64(k->exit_ns));
	sqlite3_bind_int64(st, 9, clamp_i64(k->count));
	sqlite3_bind_int64(st, 10, clamp_i64(k->bytes));
	sqlite3_bind_int(st, 11, k->peer);
	sqlite3_bind_int(st, 12, k->result);
	sqlite3_bind_int(st, 13, k->rank);
	sqlite3_bind_int(st, 14, k->datatype);
	sqlite3_bind_int(st, 15, k->redop);
	sqlite3_bind_int(st, 16, k->flags);
	sqlite3_bind_int64(st, 17, as_i64(k->stream));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int launch_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_launch *l,
			 sqlite3_int64 node, const sqlite3_int64 *processes,
			 const sqlite3_int64 *stacks)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_LAUNCH_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[l->process]);
	sqlite3_bind_int64(st, 4, as_i64(l->function));
	sqlite3_bind_text(st, 5, sysom_batch_string(b, l->kernel_name), -1, SQLITE_STATIC);
	if (l->user_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 6, stacks[l->user_stack]);
	if (l->kernel_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 7, stacks[l->kernel_stack]);
	sqlite3_bind_int64(st, 8, clamp_i64(l->count));
	for (int i = 0; i < 3; i++) {
		sqlite3_bind_int64(st, 9 + i, l->grid[i]);
		sqlite3_bind_int64(st, 12 + i, l->block[i]);
	}
	sqlite3_bind_int64(st, 15, l->shared_mem);
	sqlite3_bind_int(st, 16, l->flags);
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int gpu_kernel_insert(struct conn *c, const struct sysom_batch *b,
			     const struct sysom_gpu_kernel *k, sqlite3_int64 node,
			     const sqlite3_int64 *processes)
{
	uint8_t hist[4 * SYSOM_GPU_HIST_BUCKETS];
	sqlite3_stmt *st = NULL;
	int rc;

	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		store_le32(hist + 4 * i, k->hist[i]);
	if ((rc = conn_stmt(c, ST_GPU_KERNEL_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[k->process]);
	sqlite3_bind_text(st, 4, sysom_batch_string(b, k->name), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, k->device);
	sqlite3_bind_int64(st, 6, as_i64(k->stream));
	sqlite3_bind_int64(st, 7, clamp_i64(k->count));
	sqlite3_bind_int64(st, 8, clamp_i64(k->total_ns));
	sqlite3_bind_int64(st, 9, clamp_i64(k->min_ns));
	sqlite3_bind_int64(st, 10, clamp_i64(k->max_ns));
	sqlite3_bind_blob(st, 11, hist, sizeof(hist), SQLITE_TRANSIENT);
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int nccl_profile_insert(struct conn *c, const struct sysom_batch *b,
			       const struct sysom_nccl_profile *p, sqlite3_int64 node,
			       const sqlite3_int64 *processes)
{
	const uint64_t sums[] = { p->count, p->bytes, p->kernel_timed, p->kernel_ns_total,
				  p->kernel_ns_min, p->kernel_ns_max, p->span_timed,
				  p->span_ns_total, p->enqueue_ns_total, p->transfers,
				  p->transfer_bytes, p->first_seq, p->last_seq };
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_NCCL_PROFILE_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[p->process]);
	sqlite3_bind_int64(st, 4, as_i64(p->comm_id));
	sqlite3_bind_text(st, 5, sysom_batch_string(b, p->comm_name), -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 6, p->rank);
	sqlite3_bind_int(st, 7, p->nranks);
	sqlite3_bind_text(st, 8, sysom_batch_string(b, p->func), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 9, sysom_batch_string(b, p->algo), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, sysom_batch_string(b, p->proto), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, sysom_batch_string(b, p->datatype), -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 12, p->peer);
	sqlite3_bind_int64(st, 13, p->nchannels);
	for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
		sqlite3_bind_int64(st, 14 + (int)i, clamp_i64(sums[i]));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

/* NaN (no MIN-mode fit) is stored as NULL. */
static void bind_real_or_null(sqlite3_stmt *st, int i, double v)
{
	if (v == v)
		sqlite3_bind_double(st, i, v);
	else
		sqlite3_bind_null(st, i);
}

static int nccl_link_insert(struct conn *c, const struct sysom_batch *b,
			    const struct sysom_nccl_link *l, sqlite3_int64 node,
			    const sqlite3_int64 *processes)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_NCCL_LINK_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[l->process]);
	sqlite3_bind_int64(st, 4, as_i64(l->comm_id));
	sqlite3_bind_int(st, 5, l->rank);
	sqlite3_bind_int(st, 6, l->peer);
	sqlite3_bind_int(st, 7, l->channel);
	sqlite3_bind_int64(st, 8, clamp_i64(l->transfers));
	sqlite3_bind_int64(st, 9, clamp_i64(l->bytes));
	sqlite3_bind_int64(st, 10, clamp_i64(l->time_ns_total));
	sqlite3_bind_double(st, 11, l->sx);
	sqlite3_bind_double(st, 12, l->sy);
	sqlite3_bind_double(st, 13, l->sxx);
	sqlite3_bind_double(st, 14, l->sxy);
	sqlite3_bind_double(st, 15, l->syy);
	bind_real_or_null(st, 16, l->min_latency_ns);
	bind_real_or_null(st, 17, l->min_bytes_per_ns);
	bind_real_or_null(st, 18, l->min_r2);
	sqlite3_bind_int64(st, 19, l->min_points);
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

/* ---- OS signals ------------------------------------------------------------------------------ */

static void bind_u64_blob(sqlite3_stmt *st, int col, const uint64_t *v, size_t n)
{
	uint8_t buf[8 * 16];

	for (size_t i = 0; i < n && i < 16; i++)
		store_le64(buf + 8 * i, v[i]);
	sqlite3_bind_blob(st, col, buf, (int)(8 * n), SQLITE_TRANSIENT);
}

static void column_u64_blob(sqlite3_stmt *st, int col, uint64_t *v, size_t n)
{
	const uint8_t *blob = sqlite3_column_blob(st, col);

	if (blob && sqlite3_column_bytes(st, col) == (int)(8 * n))
		for (size_t i = 0; i < n; i++)
			v[i] = load_le64(blob + 8 * i);
}

static int os_cpu_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_os_cpu *o,
			 sqlite3_int64 node)
{
	sqlite3_stmt *st = NULL;
	uint64_t window_ns = b->window_end_ns > b->window_start_ns
				     ? b->window_end_ns - b->window_start_ns : 0;
	int rc;

	if ((rc = conn_stmt(c, ST_OS_CPU_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, clamp_i64(window_ns / 1000000));
	sqlite3_bind_int64(st, 4, o->cpu);
	sqlite3_bind_int(st, 5, o->numa_node);
	sqlite3_bind_int64(st, 6, clamp_i64(o->busy_ns));
	sqlite3_bind_int64(st, 7, clamp_i64(o->hardirq_count));
	sqlite3_bind_int64(st, 8, clamp_i64(o->hardirq_ns));
	bind_u64_blob(st, 9, o->softirq_count, SYSOM_SOFTIRQ_COUNT);
	bind_u64_blob(st, 10, o->softirq_ns, SYSOM_SOFTIRQ_COUNT);
	sqlite3_bind_int64(st, 11, clamp_i64(o->context_switches));
	sqlite3_bind_int64(st, 12, clamp_i64(o->runq_wait_ns));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int os_irq_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_os_irq *q,
			 sqlite3_int64 node)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_OS_IRQ_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, q->cpu);
	sqlite3_bind_int64(st, 4, q->irq);
	sqlite3_bind_text(st, 5, sysom_batch_string(b, q->name), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, clamp_i64(q->count));
	sqlite3_bind_int64(st, 7, clamp_i64(q->ns));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int os_thread_insert(struct conn *c, const struct sysom_batch *b,
			    const struct sysom_os_thread *t, sqlite3_int64 node,
			    const sqlite3_int64 *processes)
{
	uint8_t hist[4 * SYSOM_RUNQ_HIST_BUCKETS];
	sqlite3_stmt *st = NULL;
	int rc;

	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		store_le32(hist + 4 * i, t->runq_hist[i]);
	if ((rc = conn_stmt(c, ST_OS_THREAD_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, clamp_i64(b->window_end_ns / 1000000));
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[t->process]);
	sqlite3_bind_int64(st, 4, t->tid);
	sqlite3_bind_text(st, 5, sysom_batch_string(b, t->comm), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, clamp_i64(t->oncpu_ns));
	sqlite3_bind_int64(st, 7, clamp_i64(t->runq_wait_ns));
	sqlite3_bind_int64(st, 8, clamp_i64(t->runq_waits));
	sqlite3_bind_blob(st, 9, hist, sizeof(hist), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 10, clamp_i64(t->voluntary_switches));
	sqlite3_bind_int64(st, 11, clamp_i64(t->involuntary_switches));
	sqlite3_bind_int64(st, 12, clamp_i64(t->migrations));
	sqlite3_bind_int64(st, 13, clamp_i64(t->numa_migrations));
	sqlite3_bind_int64(st, 14, clamp_i64(t->pages_migrated));
	sqlite3_bind_int64(st, 15, clamp_i64(t->hardirq_ns));
	sqlite3_bind_int64(st, 16, clamp_i64(t->softirq_ns));
	bind_u64_blob(st, 17, t->cpus, SYSOM_CPU_MASK_WORDS);
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int batch_find(struct conn *c, const char *node_hex, uint64_t epoch, uint64_t sequence,
		      bool *exists)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_BATCH_FIND, &st)))
		return rc;
	sqlite3_bind_text(st, 1, node_hex, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, as_i64(epoch));
	sqlite3_bind_int64(st, 3, as_i64(sequence));
	rc = sqlite3_step(st);
	stmt_done(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return sql_error(rc);
	*exists = rc == SQLITE_ROW;
	return 0;
}

/* Everything of a batch after the duplicate check, inside the open transaction. */
static int batch_write(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       int64_t received_ns, struct store_put_result *r)
{
	sqlite3_int64 *objects = calloc(b->object_count + 1, sizeof(*objects));
	sqlite3_int64 *processes = calloc(b->process_count + 1, sizeof(*processes));
	sqlite3_int64 *stacks = calloc(b->stack_count + 1, sizeof(*stacks));
	struct byte_buf blob = { 0 };
	sqlite3_int64 node = 0, kernel_object = 0;
	char *counters = counters_json(b);
	bool inserted = false;
	int rc = 0;

	if (!objects || !processes || !stacks || !counters) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		r->samples = b->samples[i].count > UINT64_MAX - r->samples ? UINT64_MAX
									    : r->samples + b->samples[i].count;
	for (uint32_t i = 0; i < b->object_count; i++)
		if ((rc = object_id(c, b, &b->objects[i], &objects[i])))
			goto cleanup;
	if (b->node.kernel_object != SYSOM_WIRE_NONE && b->node.kernel_object < b->object_count)
		kernel_object = objects[b->node.kernel_object];
	if ((rc = node_upsert(c, b, node_hex, kernel_object, received_ns, &node)) ||
	    (rc = batch_insert(c, b, node, received_ns, r->samples, counters, &inserted)))
		goto cleanup;
	if (!inserted) {
		rc = -EPROTO; /* the duplicate check ran in this transaction: cannot happen */
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->process_count; i++)
		if ((rc = process_upsert(c, b, &b->processes[i], node, &processes[i])))
			goto cleanup;
	r->processes = b->process_count;
	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct sysom_stack *stk = &b->stacks[i];
		const struct sysom_frame *f = sysom_batch_stack_frames(b, i);
		bool created = false;

		blob.len = 0;
		for (uint16_t j = 0; j < stk->nframes; j++) {
			byte_buf_put_u64(&blob, (uint64_t)objects[f[j].object]);
			byte_buf_put_u64(&blob, f[j].offset);
		}
		if ((rc = byte_buf_error(&blob)))
			goto cleanup;
		rc = stack_id(c, stk->kind, stk->stop_reason, stk->nframes, &blob, &stacks[i], &created);
		if (rc)
			goto cleanup;
		r->new_stacks += created;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		if ((rc = sample_insert(c, b, &b->samples[i], node, processes, stacks)))
			goto cleanup;
	r->sample_rows = b->sample_count;
	for (uint32_t i = 0; i < b->counter_count; i++)
		if ((rc = counter_add(c, node, &b->counters[i])))
			goto cleanup;
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		if ((rc = job_rank_upsert(c, b, &b->job_ranks[i], node, processes)))
			goto cleanup;
	r->job_ranks = b->job_rank_count;
	/* A repeated (process, key) updates the row: the last record wins. */
	for (uint32_t i = 0; i < b->communicator_count; i++)
		if ((rc = communicator_upsert(c, b, &b->communicators[i], node, processes)))
			goto cleanup;
	r->communicators = b->communicator_count;
	for (uint32_t i = 0; i < b->nccl_call_count; i++)
		if ((rc = nccl_call_insert(c, &b->nccl_calls[i], node, processes)))
			goto cleanup;
	r->nccl_calls = b->nccl_call_count;
	for (uint32_t i = 0; i < b->launch_count; i++) {
		const struct sysom_launch *l = &b->launches[i];
		if ((rc = launch_insert(c, b, l, node, processes, stacks)))
			goto cleanup;
		r->launches = l->count > UINT64_MAX - r->launches ? UINT64_MAX : r->launches + l->count;
	}
	r->launch_rows = b->launch_count;
	for (uint32_t i = 0; i < b->gpu_kernel_count; i++)
		if ((rc = gpu_kernel_insert(c, b, &b->gpu_kernels[i], node, processes)))
			goto cleanup;
	r->gpu_kernel_rows = b->gpu_kernel_count;
	for (uint32_t i = 0; i < b->nccl_profile_count; i++)
		if ((rc = nccl_profile_insert(c, b, &b->nccl_profiles[i], node, processes)))
			goto cleanup;
	r->nccl_profile_rows = b->nccl_profile_count;
	for (uint32_t i = 0; i < b->nccl_link_count; i++)
		if ((rc = nccl_link_insert(c, b, &b->nccl_links[i], node, processes)))
			goto cleanup;
	r->nccl_link_rows = b->nccl_link_count;
	for (uint32_t i = 0; i < b->os_cpu_count; i++)
		if ((rc = os_cpu_insert(c, b, &b->os_cpus[i], node)))
			goto cleanup;
	r->os_cpu_rows = b->os_cpu_count;
	for (uint32_t i = 0; i < b->os_irq_count; i++)
		if ((rc = os_irq_insert(c, b, &b->os_irqs[i], node)))
			goto cleanup;
	r->os_irq_rows = b->os_irq_count;
	for (uint32_t i = 0; i < b->os_thread_count; i++)
		if ((rc = os_thread_insert(c, b, &b->os_threads[i], node, processes)))
			goto cleanup;
	r->os_thread_rows = b->os_thread_count;
cleanup:
	free(objects);
	free(processes);
	free(stacks);
	free(counters);
	byte_buf_free(&blob);
	return rc;
}

/* Ends a failed write transaction, if SQLite did not already roll it back itself. */
static void rollback(struct conn *c)
{
	if (!sqlite3_get_autocommit(c->db))
		conn_exec(c, "ROLLBACK");
}

static int sqlite_batch_put(struct store *base, const struct sysom_batch *b, int64_t received_ns,
			    struct store_put_result *res)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	struct store_put_result r = { 0 };
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	bool exists = false;
	int rc;

	hex_of(b->node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	pthread_mutex_lock(&s->write_lock);
	if ((rc = conn_exec(c, "BEGIN IMMEDIATE")))
		goto cleanup;
	if ((rc = batch_find(c, node_hex, b->agent_epoch, b->sequence, &exists)))
		goto cleanup;
	if (exists) {
		r.duplicate = true;
		goto cleanup; /* rc == 0: the rollback below ends the read-only transaction */
	}
	if ((rc = batch_write(c, b, node_hex, received_ns, &r)))
		goto cleanup;
	rc = conn_exec(c, "COMMIT");
cleanup:
	rollback(c);
	pthread_mutex_unlock(&s->write_lock);
	if (!rc)
		*res = r;
	return rc;
}

static int sqlite_batch_exists(struct store *base, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
			       uint64_t epoch, uint64_t sequence, bool *exists)
{
	struct sqlite_store *s = from_base(base);
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	struct conn *c = reader_acquire(s);
	int rc;

	hex_of(node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	rc = batch_find(c, node_hex, epoch, sequence, exists);
	reader_release(s, c);
	return rc;
}

/* ---- kernel symbols ------------------------------------------------------------------------ */

/* Finds the table of a build ID: 0 with *id (and *count), -ENOENT, or an error. */
static int ksyms_find(struct conn *c, const uint8_t *build_id, size_t len, sqlite3_int64 *id,
		      uint64_t *count)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYMS_FIND, &st)))
		return rc;
	sqlite3_bind_blob(st, 1, build_id, (int)len, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		if (count)
			*count = (uint64_t)sqlite3_column_int64(st, 1);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

static int ksyms_write(struct conn *c, const uint8_t *build_id, size_t len,
		       const struct store_ksym *syms, size_t count, int64_t uploaded_ns)
{
	sqlite3_stmt *st = NULL;
	sqlite3_int64 tbl;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYMS_INSERT, &st)))
		return rc;
	sqlite3_bind_blob(st, 1, build_id, (int)len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)count);
	sqlite3_bind_int64(st, 3, uploaded_ns);
	rc = step_done(st);
	stmt_done(st);
	if (rc)
		return rc;
	tbl = sqlite3_last_insert_rowid(c->db);
	if ((rc = conn_stmt(c, ST_KSYM_INSERT, &st)))
		return rc;
	for (size_t i = 0; i < count; i++) {
		char type[2] = { syms[i].type, '\0' };

		sqlite3_bind_int64(st, 1, tbl);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)syms[i].offset);
		sqlite3_bind_text(st, 3, type, 1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 4, syms[i].name, -1, SQLITE_STATIC);
		rc = step_done(st);
		stmt_done(st);
		if (rc)
			return rc;
	}
	return 0;
}

static int sqlite_ksyms_put(struct store *base, const uint8_t *build_id, size_t build_id_len,
			    const struct store_ksym *syms, size_t count, int64_t uploaded_ns,
			    bool *created)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_int64 tbl;
	bool fresh = false;
	int rc;

	if (build_id_len == 0 || build_id_len > SYSOM_BUILD_ID_MAX)
		return -EINVAL;
	for (size_t i = 0; i < count; i++)
		if (syms[i].offset > INT64_MAX || (i && syms[i].offset <= syms[i - 1].offset))
			return -EINVAL;
	pthread_mutex_lock(&s->write_lock);
	if ((rc = conn_exec(c, "BEGIN IMMEDIATE")))
		goto cleanup;
	rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);
	if (rc == 0)
		goto cleanup; /* already stored: unchanged */
	if (rc != -ENOENT)
		goto cleanup;
	if ((rc = ksyms_write(c, build_id, build_id_len, syms, count, uploaded_ns)))
		goto cleanup;
	if ((rc = conn_exec(c, "COMMIT")))
		goto cleanup;
	fresh = true;
cleanup:
	rollback(c);
	pthread_mutex_unlock(&s->write_lock);
	if (!rc)
		*created = fresh;
	return rc;
}

static int sqlite_ksyms_count(struct store *base, const uint8_t *build_id, size_t build_id_len,
			      uint64_t *count)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, count);

	reader_release(s, c);
	return rc;
}

static int ksym_range_query(struct conn *c, sqlite3_int64 tbl, uint64_t offset,
			    struct store_ksym_range *r)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYM_FLOOR, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, tbl);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		r->has_floor = true;
		r->floor = (uint64_t)sqlite3_column_int64(st, 0);
		r->floor_name = strdup(column_text(st, 1));
		rc = r->floor_name ? 0 : -ENOMEM;
	} else {
		rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
	}
	stmt_done(st);
	if (rc)
		return rc;
	if ((rc = conn_stmt(c, ST_KSYM_NEXT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, tbl);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		r->has_next = true;
		r->next = (uint64_t)sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

static int sqlite_ksym_range_get(struct store *base, const uint8_t *build_id, size_t build_id_len,
				 uint64_t offset, struct store_ksym_range *out)
{
	struct sqlite_store *s = from_base(base);
	struct store_ksym_range r = { 0 };
	struct conn *c = reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);

	/* Symbol offsets are below 2^63; a larger frame offset lies beyond every symbol. */
	if (!rc && offset <= INT64_MAX)
		rc = ksym_range_query(c, tbl, offset, &r);
	reader_release(s, c);
	if (rc) {
		store_ksym_range_release(&r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- reading ------------------------------------------------------------------------------- */

static int sqlite_object_get(struct store *base, int64_t id, struct store_object *out)
{
	struct sqlite_store *s = from_base(base);
	struct store_object o = { 0 };
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_OBJECT_GET, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
		goto cleanup;
	}
	o.id.kind = (uint8_t)sqlite3_column_int(st, 0);
	int len = sqlite3_column_bytes(st, 1);
	if (len > SYSOM_BUILD_ID_MAX) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (len)
		memcpy(o.id.bytes, sqlite3_column_blob(st, 1), (size_t)len);
	o.id.len = (uint8_t)len;
	o.name = strdup(column_text(st, 2));
	rc = o.name ? 0 : -ENOMEM;
cleanup:
	stmt_done(st);
	reader_release(s, c);
	if (!rc)
		*out = o;
	return rc;
}

static int sqlite_stack_get(struct store *base, int64_t id, struct store_stack **out)
{
	struct sqlite_store *s = from_base(base);
	struct store_stack *stk = NULL;
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_STACK_GET, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
		goto cleanup;
	}
	int nframes = sqlite3_column_int(st, 2);
	const uint8_t *blob = sqlite3_column_blob(st, 3);
	int bytes = sqlite3_column_bytes(st, 3);
	if (nframes < 1 || nframes > UINT16_MAX || bytes != nframes * 16) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	stk = malloc(sizeof(*stk) + (size_t)nframes * sizeof(stk->frames[0]));
	if (!stk) {
		rc = -ENOMEM;
		goto cleanup;
	}
	stk->id = id;
	stk->kind = (uint8_t)sqlite3_column_int(st, 0);
	stk->stop_reason = (uint8_t)sqlite3_column_int(st, 1);
	stk->nframes = (uint16_t)nframes;
	for (int i = 0; i < nframes; i++) {
		stk->frames[i].object = (int64_t)load_le64(blob + 16 * i);
		stk->frames[i].offset = load_le64(blob + 16 * i + 8);
	}
	rc = 0;
cleanup:
	stmt_done(st);
	reader_release(s, c);
	if (rc) {
		free(stk);
		return rc;
	}
	*out = stk;
	return 0;
}

static int sqlite_nodes_list(struct store *base, store_node_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_NODES_LIST, &st)))
		goto cleanup;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_node n = {
			.hostname = column_text(st, 1),
			.kernel_release = column_text(st, 2),
			.machine = column_text(st, 3),
			.agent_version = column_text(st, 4),
			.sample_hz = (uint32_t)sqlite3_column_int64(st, 6),
			.sample_rate_ppm = (uint32_t)sqlite3_column_int64(st, 7),
			.online_cpus = (uint32_t)sqlite3_column_int64(st, 8),
			.first_seen_ns = sqlite3_column_int64(st, 9),
			.last_seen_ns = sqlite3_column_int64(st, 10),
			.batches = (uint64_t)sqlite3_column_int64(st, 11),
			.last_epoch = as_u64(sqlite3_column_int64(st, 12)),
			.last_sequence = as_u64(sqlite3_column_int64(st, 13)),
		};
		copy_column(st, 0, n.node_id, sizeof(n.node_id));
		copy_column(st, 5, n.boot_id, sizeof(n.boot_id));
		if ((rc = fn(arg, &n)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

/*
 * Appends the WHERE conditions of a sample filter over table alias `t` (samples `s`, which
 * have thread comms, or launches `l`); parameters ?1 .. ?5 and ?7 (see bind_filter).
 */
static void filter_sql_on(struct byte_buf *sql, const struct store_sample_filter *f, char t)
{
	byte_buf_printf(sql, " WHERE %c.time_ms BETWEEN ?1 AND ?2", t);
	if (f->node)
		byte_buf_printf(sql, " AND %c.node IN (SELECT id FROM nodes"
				     " WHERE node_id = lower(?3) OR hostname = ?3)", t);
	if (f->has_pid)
		byte_buf_printf(sql, " AND p.tgid = ?4");
	if (f->comm)
		byte_buf_printf(sql, t == 's' ? " AND (p.comm = ?5 OR s.thread_comm = ?5)"
					      : " AND p.comm = ?5");
	if (f->job)
		byte_buf_printf(sql, " AND %c.process IN (SELECT process FROM job_ranks"
				     " WHERE job = ?7%s)", t, f->has_rank ? " AND rank = ?8" : "");
}

static void filter_sql(struct byte_buf *sql, const struct store_sample_filter *f)
{
	filter_sql_on(sql, f, 's');
}

static void bind_filter(sqlite3_stmt *st, const struct store_sample_filter *f)
{
	sqlite3_bind_int64(st, 1, f->from_ms);
	sqlite3_bind_int64(st, 2, f->to_ms);
	if (f->node)
		sqlite3_bind_text(st, 3, f->node, -1, SQLITE_STATIC);
	if (f->has_pid)
		sqlite3_bind_int64(st, 4, f->pid);
	if (f->comm)
		sqlite3_bind_text(st, 5, f->comm, -1, SQLITE_STATIC);
	if (f->job)
		sqlite3_bind_text(st, 7, f->job, -1, SQLITE_STATIC);
	if (f->job && f->has_rank)
		sqlite3_bind_int(st, 8, f->rank);
}

/* Prepares a one-off query (filters change its shape, so the planner sees only live terms). */
static int prepare_sql(struct conn *c, struct byte_buf *sql, sqlite3_stmt **out)
{
	byte_buf_append(sql, "", 1);
	if (byte_buf_error(sql))
		return byte_buf_error(sql);
	return sql_error(sqlite3_prepare_v2(c->db, (const char *)sql->data, -1, out, NULL));
}

static int sqlite_processes_list(struct store *base, const struct store_sample_filter *f,
				 uint32_t limit, store_process_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	int rc;

	byte_buf_printf(&sql, "SELECT n.node_id, n.hostname, p.tgid, p.ppid, p.generation,"
			      " p.start_time_ns, p.comm, p.exe, p.cmdline, p.first_seen_ns,"
			      " p.last_seen_ns, sum(s.count) AS c"
			      " FROM samples s JOIN processes p ON p.id = s.process"
			      " JOIN nodes n ON n.id = p.node");
	filter_sql(&sql, f);
	byte_buf_printf(&sql, " GROUP BY s.process ORDER BY c DESC, s.process LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_process p = {
			.hostname = column_text(st, 1),
			.pid = (uint32_t)sqlite3_column_int64(st, 2),
			.ppid = (uint32_t)sqlite3_column_int64(st, 3),
			.generation = (uint32_t)sqlite3_column_int64(st, 4),
			.start_time_ns = as_u64(sqlite3_column_int64(st, 5)),
			.comm = column_text(st, 6),
			.exe = column_text(st, 7),
			.cmdline = column_text(st, 8),
			.first_seen_ns = sqlite3_column_int64(st, 9),
			.last_seen_ns = sqlite3_column_int64(st, 10),
			.samples = (uint64_t)sqlite3_column_int64(st, 11),
		};
		copy_column(st, 0, p.node_id, sizeof(p.node_id));
		if ((rc = fn(arg, &p)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	return rc;
}

static int sqlite_stacks_aggregate(struct store *base, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	uint64_t sum = 0;
	int rc;

	/* The window sum runs over every group before LIMIT: the total counts everything. */
	byte_buf_printf(&sql, "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT s.process),"
			      " coalesce(s.user_stack, 0) AS u, coalesce(s.kernel_stack, 0) AS k,"
			      " sum(s.count) AS c, sum(sum(s.count)) OVER () AS total"
			      " FROM samples s JOIN processes p ON p.id = s.process");
	filter_sql(&sql, f);
	byte_buf_printf(&sql, " GROUP BY p.comm, u, k ORDER BY c DESC, p.comm, u, k LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
		struct store_stack_count row = {
			.comm = column_text(st, 0),
			.pid = lo == hi ? lo : -1,
			.processes = (uint64_t)sqlite3_column_int64(st, 3),
			.user_stack = sqlite3_column_int64(st, 4),
			.kernel_stack = sqlite3_column_int64(st, 5),
			.count = (uint64_t)sqlite3_column_int64(st, 6),
		};
		sum = (uint64_t)sqlite3_column_int64(st, 7);
		if ((rc = fn(arg, &row)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	if (!rc)
		*total = sum;
	return rc;
}

static int sqlite_launches_aggregate(struct store *base, const struct store_sample_filter *f,
				     uint32_t limit, store_launch_count_fn fn, void *arg,
				     uint64_t *total)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	uint64_t sum = 0;
	int rc;

	/* Rows repeating a key (the decoder allows it) are summed like any other rows. */
	byte_buf_printf(&sql, "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT l.process),"
			      " coalesce(l.user_stack, 0) AS u, l.kernel_name != '' AS named,"
			      " iif(l.kernel_name != '', l.kernel_name, printf('0x%%x', l.function)) AS kn,"
			      " sum(l.count) AS c, sum(sum(l.count)) OVER () AS total"
			      " FROM launches l JOIN processes p ON p.id = l.process");
	filter_sql_on(&sql, f, 'l');
	byte_buf_printf(&sql, " GROUP BY p.comm, u, named, kn ORDER BY c DESC, p.comm, u, kn LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
		struct store_launch_count row = {
			.comm = column_text(st, 0),
			.pid = lo == hi ? lo : -1,
			.processes = (uint64_t)sqlite3_column_int64(st, 3),
			.user_stack = sqlite3_column_int64(st, 4),
			.named = sqlite3_column_int(st, 5) != 0,
			.kernel = column_text(st, 6),
			.count = (uint64_t)sqlite3_column_int64(st, 7),
		};
		sum = (uint64_t)sqlite3_column_int64(st, 8);
		if ((rc = fn(arg, &row)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	if (!rc)
		*total = sum;
	return rc;
}

/* Prepares a fixed one-off query on a reader connection. */
static int prepare_text(struct conn *c, const char *sql, sqlite3_stmt **out)
{
	return sql_error(sqlite3_prepare_v2(c->db, sql, -1, out, NULL));
}


/* ---- GPU-side timing ------------------------------------------------------------------------ */

/* Columns 0-3 of every GPU row query: who it belongs to. */
#define GPU_OWNER_COLUMNS "coalesce(j.rank, -1), p.tgid, p.start_time_ns, n.hostname"
#define GPU_OWNER_JOIN(t)                                                                  \
	" JOIN processes p ON p.id = " t ".process JOIN nodes n ON n.id = p.node"              \
	" JOIN job_ranks j ON j.process = " t ".process"                                      \
	" WHERE j.job = ?1 AND (?2 IS NULL OR j.rank = ?2) AND " t ".time_ms BETWEEN ?3 AND ?4"
#define GPU_OWNER_ORDER "j.rank < 0, j.rank, p.tgid, p.start_time_ns"

static struct store_gpu_owner gpu_owner(sqlite3_stmt *st)
{
	return (struct store_gpu_owner){
		.job_rank = sqlite3_column_int(st, 0),
		.pid = (uint32_t)sqlite3_column_int64(st, 1),
		.start_time_ns = as_u64(sqlite3_column_int64(st, 2)),
		.hostname = column_text(st, 3),
	};
}

static void gpu_bind(sqlite3_stmt *st, const struct store_gpu_filter *f, uint32_t max_rows)
{
	sqlite3_bind_text(st, 1, f->job, -1, SQLITE_STATIC);
	if (f->has_rank)
		sqlite3_bind_int(st, 2, f->rank);
	sqlite3_bind_int64(st, 3, f->from_ms);
	sqlite3_bind_int64(st, 4, f->to_ms);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)max_rows + 1);
}

static double column_real_or_nan(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Runs one row query of a job's rows (GPU or OS: ?1 job, ?2 rank, ?3..?4 range, ?5 limit);
 * `row` turns a result row into a call of the visitor `v`. */
static int job_rows(struct conn *c, const char *sql, const struct store_gpu_filter *f,
		    uint32_t max_rows, int (*row)(sqlite3_stmt *st, const void *v), const void *v,
		    bool *truncated)
{
	sqlite3_stmt *st = NULL;
	uint32_t n = 0;
	int rc;

	if ((rc = prepare_text(c, sql, &st)))
		return rc;
	gpu_bind(st, f, max_rows);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (++n > max_rows) {
			*truncated = true;
			rc = SQLITE_DONE;
			break;
		}
		if ((rc = row(st, v)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	return rc;
}

static int gpu_kernel_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_gpu_visitor *v = arg;
	struct store_gpu_kernel_row r = {
		.who = gpu_owner(st),
		.name = column_text(st, 4),
		.device = (uint32_t)sqlite3_column_int64(st, 5),
		.stream = as_u64(sqlite3_column_int64(st, 6)),
		.count = (uint64_t)sqlite3_column_int64(st, 7),
		.total_ns = (uint64_t)sqlite3_column_int64(st, 8),
		.min_ns = (uint64_t)sqlite3_column_int64(st, 9),
		.max_ns = (uint64_t)sqlite3_column_int64(st, 10),
	};
	const uint8_t *hist = sqlite3_column_blob(st, 11);

	if (hist && sqlite3_column_bytes(st, 11) == 4 * SYSOM_GPU_HIST_BUCKETS)
		for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
			r.hist[i] = load_le32(hist + 4 * i);
	return v->kernel ? v->kernel(v->arg, &r) : 0;
}

static int nccl_profile_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_gpu_visitor *v = arg;
	struct store_nccl_profile_row r = {
		.who = gpu_owner(st),
		.comm_id = as_u64(sqlite3_column_int64(st, 4)),
		.comm_name = column_text(st, 5),
		.rank = sqlite3_column_int(st, 6),
		.nranks = sqlite3_column_int(st, 7),
		.func = column_text(st, 8),
		.algo = column_text(st, 9),
		.proto = column_text(st, 10),
		.datatype = column_text(st, 11),
		.peer = sqlite3_column_int(st, 12),
		.nchannels = (uint32_t)sqlite3_column_int64(st, 13),
	};
	uint64_t *sums[] = { &r.count, &r.bytes, &r.kernel_timed, &r.kernel_ns_total,
			     &r.kernel_ns_min, &r.kernel_ns_max, &r.span_timed, &r.span_ns_total,
			     &r.enqueue_ns_total, &r.transfers, &r.transfer_bytes, &r.first_seq,
			     &r.last_seq };

	for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
		*sums[i] = (uint64_t)sqlite3_column_int64(st, 14 + (int)i);
	return v->profile ? v->profile(v->arg, &r) : 0;
}

static int nccl_link_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_gpu_visitor *v = arg;
	struct store_nccl_link_row r = {
		.who = gpu_owner(st),
		.comm_id = as_u64(sqlite3_column_int64(st, 4)),
		.rank = sqlite3_column_int(st, 5),
		.peer = sqlite3_column_int(st, 6),
		.channel = sqlite3_column_int(st, 7),
		.transfers = (uint64_t)sqlite3_column_int64(st, 8),
		.bytes = (uint64_t)sqlite3_column_int64(st, 9),
		.time_ns_total = (uint64_t)sqlite3_column_int64(st, 10),
		.sx = sqlite3_column_double(st, 11),
		.sy = sqlite3_column_double(st, 12),
		.sxx = sqlite3_column_double(st, 13),
		.sxy = sqlite3_column_double(st, 14),
		.syy = sqlite3_column_double(st, 15),
		.min_latency_ns = column_real_or_nan(st, 16),
		.min_bytes_per_ns = column_real_or_nan(st, 17),
		.min_r2 = column_real_or_nan(st, 18),
		.min_points = (uint32_t)sqlite3_column_int64(st, 19),
	};

	return v->link ? v->link(v->arg, &r) : 0;
}

static int sqlite_job_gpu(struct store *base, const struct store_gpu_filter *f, uint32_t max_rows,
			  const struct store_gpu_visitor *v, bool *truncated)
{
	static const char kernels_sql[] =
		"SELECT " GPU_OWNER_COLUMNS ", g.name, g.device, g.stream, g.count, g.total_ns,"
		" g.min_ns, g.max_ns, g.hist FROM gpu_kernels g" GPU_OWNER_JOIN("g")
		" ORDER BY " GPU_OWNER_ORDER ", g.name, g.device, g.stream LIMIT ?5";
	static const char profiles_sql[] =
		"SELECT " GPU_OWNER_COLUMNS ", g.comm_id, g.comm_name, g.rank, g.nranks, g.func,"
		" g.algo, g.proto, g.datatype, g.peer, g.nchannels, g.count, g.bytes, g.kernel_timed,"
		" g.kernel_ns_total, g.kernel_ns_min, g.kernel_ns_max, g.span_timed, g.span_ns_total,"
		" g.enqueue_ns_total, g.transfers, g.transfer_bytes, g.first_seq, g.last_seq"
		" FROM nccl_profiles g" GPU_OWNER_JOIN("g")
		" ORDER BY " GPU_OWNER_ORDER ", g.comm_id, g.func, g.algo, g.proto, g.datatype,"
		" g.peer LIMIT ?5";
	static const char links_sql[] =
		"SELECT " GPU_OWNER_COLUMNS ", g.comm_id, g.rank, g.peer, g.channel, g.transfers,"
		" g.bytes, g.time_ns_total, g.sx, g.sy, g.sxx, g.sxy, g.syy, g.min_latency_ns,"
		" g.min_bytes_per_ns, g.min_r2, g.min_points FROM nccl_links g" GPU_OWNER_JOIN("g")
		" ORDER BY " GPU_OWNER_ORDER ", g.comm_id, g.peer, g.channel LIMIT ?5";
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	int rc;

	/* One read transaction: the three kinds come from the same snapshot. */
	if ((rc = conn_exec(c, "BEGIN")))
		goto cleanup;
	if ((rc = job_rows(c, kernels_sql, f, max_rows, gpu_kernel_row, v, truncated)) ||
	    (rc = job_rows(c, profiles_sql, f, max_rows, nccl_profile_row, v, truncated)) ||
	    (rc = job_rows(c, links_sql, f, max_rows, nccl_link_row, v, truncated)))
		goto cleanup;
cleanup:
	if (!sqlite3_get_autocommit(c->db))
		conn_exec(c, "COMMIT");
	reader_release(s, c);
	return rc;
}

static int sqlite_gpu_time_aggregate(struct store *base, const struct store_sample_filter *f,
				     uint32_t limit, store_gpu_time_fn fn, void *arg,
				     uint64_t *total)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	uint64_t sum = 0;
	int rc;

	/* Per (process, kernel): its GPU time in the range, its launches per user stack and in
	 * all; each stack gets the share of the time its launches had. */
	byte_buf_printf(&sql,
			"SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT g.process),"
			" coalesce(l.u, 0) AS u, l.c IS NOT NULL AS seen, g.name AS kn,"
			" CAST(sum(iif(l.c IS NULL, g.ns, g.ns * 1.0 * l.c / lt.c)) AS INTEGER) AS t,"
			" CAST(sum(sum(iif(l.c IS NULL, g.ns, g.ns * 1.0 * l.c / lt.c))) OVER ()"
			"  AS INTEGER)"
			" FROM (SELECT process, node, name, min(time_ms) AS time_ms,"
			"   sum(total_ns) AS ns FROM gpu_kernels WHERE time_ms BETWEEN ?1 AND ?2"
			"   GROUP BY process, name) g"
			" JOIN processes p ON p.id = g.process"
			" LEFT JOIN (SELECT process, kernel_name AS name, coalesce(user_stack, 0) AS u,"
			"   sum(count) AS c FROM launches WHERE time_ms BETWEEN ?1 AND ?2"
			"   GROUP BY process, kernel_name, u) l ON l.process = g.process AND l.name = g.name"
			" LEFT JOIN (SELECT process, kernel_name AS name, sum(count) AS c FROM launches"
			"   WHERE time_ms BETWEEN ?1 AND ?2 GROUP BY process, kernel_name) lt"
			"   ON lt.process = g.process AND lt.name = g.name");
	filter_sql_on(&sql, f, 'g');
	byte_buf_printf(&sql, " GROUP BY p.comm, u, seen, kn ORDER BY t DESC, p.comm, u, kn LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
		struct store_gpu_time row = {
			.comm = column_text(st, 0),
			.pid = lo == hi ? lo : -1,
			.processes = (uint64_t)sqlite3_column_int64(st, 3),
			.user_stack = sqlite3_column_int64(st, 4),
			.launch_seen = sqlite3_column_int(st, 5) != 0,
			.kernel = column_text(st, 6),
			.ns = (uint64_t)sqlite3_column_int64(st, 7),
		};
		sum = (uint64_t)sqlite3_column_int64(st, 8);
		if ((rc = fn(arg, &row)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	if (!rc)
		*total = sum;
	return rc;
}


static int sqlite_jobs_list(struct store *base, uint32_t limit, store_job_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	rc = prepare_text(c, "SELECT job, max(world_size), count(DISTINCT iif(rank >= 0, rank, NULL)),"
			     " count(*), count(DISTINCT node), min(first_seen_ns),"
			     " max(last_seen_ns) AS last FROM job_ranks WHERE job != ''"
			     " GROUP BY job ORDER BY last DESC, job LIMIT ?1", &st);
	if (rc)
		goto cleanup;
	sqlite3_bind_int64(st, 1, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_job j = {
			.job = column_text(st, 0),
			.world_size = sqlite3_column_int(st, 1),
			.ranks = (uint32_t)sqlite3_column_int64(st, 2),
			.processes = (uint32_t)sqlite3_column_int64(st, 3),
			.nodes = (uint32_t)sqlite3_column_int64(st, 4),
			.first_seen_ns = sqlite3_column_int64(st, 5),
			.last_seen_ns = sqlite3_column_int64(st, 6),
		};
		if ((rc = fn(arg, &j)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_job_ranks_list(struct store *base, const char *job, uint32_t limit,
				 store_job_rank_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	rc = prepare_text(c, "SELECT j.rank, j.world_size, j.local_rank, j.local_world_size,"
			     " j.group_rank, j.source, n.node_id, n.hostname, p.tgid, p.generation,"
			     " p.start_time_ns, p.comm, j.job_id_source, j.master, j.groups,"
			     " j.first_seen_ns, j.last_seen_ns FROM job_ranks j"
			     " JOIN processes p ON p.id = j.process JOIN nodes n ON n.id = j.node"
			     " WHERE j.job = ?1 ORDER BY j.rank < 0, j.rank, n.node_id, p.tgid,"
			     " p.start_time_ns LIMIT ?2", &st);
	if (rc)
		goto cleanup;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_job_rank r = {
			.rank = sqlite3_column_int(st, 0),
			.world_size = sqlite3_column_int(st, 1),
			.local_rank = sqlite3_column_int(st, 2),
			.local_world_size = sqlite3_column_int(st, 3),
			.group_rank = sqlite3_column_int(st, 4),
			.source = (uint8_t)sqlite3_column_int(st, 5),
			.hostname = column_text(st, 7),
			.pid = (uint32_t)sqlite3_column_int64(st, 8),
			.generation = (uint32_t)sqlite3_column_int64(st, 9),
			.start_time_ns = as_u64(sqlite3_column_int64(st, 10)),
			.comm = column_text(st, 11),
			.job_id_source = column_text(st, 12),
			.master = column_text(st, 13),
			.groups = column_text(st, 14),
			.first_seen_ns = sqlite3_column_int64(st, 15),
			.last_seen_ns = sqlite3_column_int64(st, 16),
		};
		copy_column(st, 6, r.node_id, sizeof(r.node_id));
		if ((rc = fn(arg, &r)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_job_communicators_list(struct store *base, const char *job, uint32_t limit,
					 store_job_communicator_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	rc = prepare_text(c, "SELECT m.key, m.parent_key, m.comm_hash, m.rank, m.nranks,"
			     " m.split_color, m.split_key, m.split_ordinal, m.key_source, m.destroyed,"
			     " m.created_ns, n.node_id, n.hostname, p.tgid, j.rank, m.first_seen_ns,"
			     " m.last_seen_ns FROM job_ranks j"
			     " JOIN communicators m ON m.process = j.process"
			     " JOIN processes p ON p.id = j.process JOIN nodes n ON n.id = m.node"
			     " WHERE j.job = ?1 ORDER BY m.key, m.rank < 0, m.rank, n.node_id, p.tgid"
			     " LIMIT ?2", &st);
	if (rc)
		goto cleanup;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_job_communicator m = {
			.key = as_u64(sqlite3_column_int64(st, 0)),
			.parent_key = as_u64(sqlite3_column_int64(st, 1)),
			.comm_hash = as_u64(sqlite3_column_int64(st, 2)),
			.rank = sqlite3_column_int(st, 3),
			.nranks = sqlite3_column_int(st, 4),
			.split_color = sqlite3_column_int(st, 5),
			.split_key = sqlite3_column_int(st, 6),
			.split_ordinal = (uint32_t)sqlite3_column_int64(st, 7),
			.key_source = (uint8_t)sqlite3_column_int(st, 8),
			.destroyed = sqlite3_column_int(st, 9) != 0,
			.created_ns = sqlite3_column_int64(st, 10),
			.hostname = column_text(st, 12),
			.pid = (uint32_t)sqlite3_column_int64(st, 13),
			.job_rank = sqlite3_column_int(st, 14),
			.first_seen_ns = sqlite3_column_int64(st, 15),
			.last_seen_ns = sqlite3_column_int64(st, 16),
		};
		copy_column(st, 11, m.node_id, sizeof(m.node_id));
		if ((rc = fn(arg, &m)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_collectives_list(struct store *base, const struct store_collective_filter *f,
				   uint32_t max_instances, store_collective_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	int rc;

	/* Instances first (bounded), then every call of the job's processes in them. A call
	 * without its rank takes the process's rank in the communicator. */
	byte_buf_printf(&sql, "WITH jp AS MATERIALIZED (SELECT process FROM job_ranks WHERE job = ?1),"
			      " inst AS MATERIALIZED (SELECT c.comm_key AS k, c.op AS op, c.seq AS seq,"
			      " min(c.entry_ns) AS first FROM nccl_calls c WHERE c.process IN jp"
			      " AND c.comm_key != 0 AND c.op BETWEEN %d AND %d"
			      " AND c.entry_ns BETWEEN ?2 AND ?3",
			SYSOM_NCCL_ALL_REDUCE, SYSOM_NCCL_RECV);
	if (f->has_comm)
		byte_buf_printf(&sql, " AND c.comm_key = ?4");
	if (f->op)
		byte_buf_printf(&sql, " AND c.op = ?5");
	byte_buf_printf(&sql, " GROUP BY c.comm_key, c.op, c.seq ORDER BY first %s, k %s, op %s, seq %s"
			      " LIMIT ?6)", f->latest ? "DESC" : "", f->latest ? "DESC" : "",
			f->latest ? "DESC" : "", f->latest ? "DESC" : "");
	/* Communicator sizes once per key, not per call row: per row it is quadratic in the
	 * job's size (every call scanning every rank's communicator record). */
	byte_buf_printf(&sql, ", nr AS MATERIALIZED (SELECT m.key AS k, max(m.nranks) AS nranks FROM communicators m"
			      " WHERE m.process IN jp AND m.key IN (SELECT DISTINCT k FROM inst)"
			      " GROUP BY m.key)");
	byte_buf_printf(&sql, " SELECT i.k, i.op, i.seq,"
			      " min(c.entry_ns) OVER (PARTITION BY i.k, i.op, i.seq),"
			      " coalesce((SELECT nr.nranks FROM nr WHERE nr.k = i.k), -1),"
			      " iif(c.rank >= 0, c.rank, coalesce((SELECT m.rank FROM communicators m"
			      "  WHERE m.process = c.process AND m.key = c.comm_key), -1)) AS r,"
			      " c.entry_ns, c.exit_ns, c.count, c.bytes, c.peer, c.result, p.tgid, c.tid,"
			      " n.node_id, n.hostname FROM inst i JOIN nccl_calls c ON c.comm_key = i.k"
			      " AND c.op = i.op AND c.seq = i.seq AND c.process IN jp"
			      " JOIN processes p ON p.id = c.process JOIN nodes n ON n.id = c.node"
			      " ORDER BY i.first, i.k, i.op, i.seq, r < 0, r, c.entry_ns, c.id");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	sqlite3_bind_text(st, 1, f->job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, f->from_ns);
	sqlite3_bind_int64(st, 3, f->to_ns);
	if (f->has_comm)
		sqlite3_bind_int64(st, 4, as_i64(f->comm));
	if (f->op)
		sqlite3_bind_int(st, 5, f->op);
	sqlite3_bind_int64(st, 6, max_instances);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_collective_call k = {
			.comm_key = as_u64(sqlite3_column_int64(st, 0)),
			.op = (uint8_t)sqlite3_column_int(st, 1),
			.seq = as_u64(sqlite3_column_int64(st, 2)),
			.first_entry_ns = sqlite3_column_int64(st, 3),
			.nranks = sqlite3_column_int(st, 4),
			.rank = sqlite3_column_int(st, 5),
			.entry_ns = sqlite3_column_int64(st, 6),
			.exit_ns = sqlite3_column_int64(st, 7),
			.count = (uint64_t)sqlite3_column_int64(st, 8),
			.bytes = (uint64_t)sqlite3_column_int64(st, 9),
			.peer = sqlite3_column_int(st, 10),
			.result = sqlite3_column_int(st, 11),
			.pid = (uint32_t)sqlite3_column_int64(st, 12),
			.tid = (uint32_t)sqlite3_column_int64(st, 13),
			.hostname = column_text(st, 15),
		};
		copy_column(st, 14, k.node_id, sizeof(k.node_id));
		if ((rc = fn(arg, &k)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	return rc;
}

/* ---- OS signals of a job --------------------------------------------------------------------- */

#define OS_JOB_NODES                                                                        \
	" IN (SELECT DISTINCT j.node FROM job_ranks j WHERE j.job = ?1"                       \
	" AND (?2 IS NULL OR j.rank = ?2))"

static int os_thread_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_os_visitor *v = arg;
	struct store_os_thread_row r = {
		.who = gpu_owner(st),
		.tid = (uint32_t)sqlite3_column_int64(st, 4),
		.comm = column_text(st, 5),
		.oncpu_ns = (uint64_t)sqlite3_column_int64(st, 6),
		.runq_wait_ns = (uint64_t)sqlite3_column_int64(st, 7),
		.runq_waits = (uint64_t)sqlite3_column_int64(st, 8),
		.voluntary_switches = (uint64_t)sqlite3_column_int64(st, 10),
		.involuntary_switches = (uint64_t)sqlite3_column_int64(st, 11),
		.migrations = (uint64_t)sqlite3_column_int64(st, 12),
		.numa_migrations = (uint64_t)sqlite3_column_int64(st, 13),
		.pages_migrated = (uint64_t)sqlite3_column_int64(st, 14),
		.hardirq_ns = (uint64_t)sqlite3_column_int64(st, 15),
		.softirq_ns = (uint64_t)sqlite3_column_int64(st, 16),
	};
	const uint8_t *hist = sqlite3_column_blob(st, 9);

	if (hist && sqlite3_column_bytes(st, 9) == 4 * SYSOM_RUNQ_HIST_BUCKETS)
		for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
			r.runq_hist[i] = load_le32(hist + 4 * i);
	column_u64_blob(st, 17, r.cpus, SYSOM_CPU_MASK_WORDS);
	return v->thread ? v->thread(v->arg, &r) : 0;
}

static int os_cpu_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_os_visitor *v = arg;
	struct store_os_cpu_row r = {
		.hostname = column_text(st, 0),
		.time_ms = sqlite3_column_int64(st, 1),
		.window_ms = sqlite3_column_int64(st, 2),
		.cpu = (uint32_t)sqlite3_column_int64(st, 3),
		.numa_node = sqlite3_column_int(st, 4),
		.busy_ns = (uint64_t)sqlite3_column_int64(st, 5),
		.hardirq_count = (uint64_t)sqlite3_column_int64(st, 6),
		.hardirq_ns = (uint64_t)sqlite3_column_int64(st, 7),
		.context_switches = (uint64_t)sqlite3_column_int64(st, 10),
		.runq_wait_ns = (uint64_t)sqlite3_column_int64(st, 11),
	};

	column_u64_blob(st, 8, r.softirq_count, SYSOM_SOFTIRQ_COUNT);
	column_u64_blob(st, 9, r.softirq_ns, SYSOM_SOFTIRQ_COUNT);
	return v->cpu ? v->cpu(v->arg, &r) : 0;
}

static int os_irq_row(sqlite3_stmt *st, const void *arg)
{
	const struct store_os_visitor *v = arg;
	struct store_os_irq_row r = {
		.hostname = column_text(st, 0),
		.cpu = (uint32_t)sqlite3_column_int64(st, 1),
		.irq = (uint32_t)sqlite3_column_int64(st, 2),
		.name = column_text(st, 3),
		.count = (uint64_t)sqlite3_column_int64(st, 4),
		.ns = (uint64_t)sqlite3_column_int64(st, 5),
	};

	return v->irq ? v->irq(v->arg, &r) : 0;
}

static int sqlite_job_os(struct store *base, const struct store_os_filter *f, uint32_t max_rows,
			 const struct store_os_visitor *v, bool *truncated)
{
	static const char threads_sql[] =
		"SELECT " GPU_OWNER_COLUMNS ", g.tid, g.comm, g.oncpu_ns, g.runq_wait_ns, g.runq_waits,"
		" g.runq_hist, g.voluntary_switches, g.involuntary_switches, g.migrations,"
		" g.numa_migrations, g.pages_migrated, g.hardirq_ns, g.softirq_ns, g.cpus"
		" FROM os_threads g" GPU_OWNER_JOIN("g")
		" ORDER BY " GPU_OWNER_ORDER ", g.tid, g.time_ms LIMIT ?5";
	static const char cpus_sql[] =
		"SELECT n.hostname, c.time_ms, c.window_ms, c.cpu, c.numa_node, c.busy_ns,"
		" c.hardirq_count, c.hardirq_ns, c.softirq_count, c.softirq_ns, c.context_switches,"
		" c.runq_wait_ns FROM os_cpus c JOIN nodes n ON n.id = c.node"
		" WHERE c.node" OS_JOB_NODES " AND c.time_ms BETWEEN ?3 AND ?4"
		" ORDER BY c.node, c.cpu, c.time_ms LIMIT ?5";
	static const char irqs_sql[] =
		"SELECT n.hostname, q.cpu, q.irq, q.name, sum(q.count), sum(q.ns) FROM os_irqs q"
		" JOIN nodes n ON n.id = q.node WHERE q.node" OS_JOB_NODES
		" AND q.time_ms BETWEEN ?3 AND ?4 GROUP BY q.node, q.cpu, q.irq, q.name"
		" ORDER BY sum(q.ns) DESC, q.node, q.cpu, q.irq LIMIT ?5";
	struct store_gpu_filter g = { .job = f->job, .has_rank = f->has_rank, .rank = f->rank,
				      .from_ms = f->from_ms, .to_ms = f->to_ms };
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	int rc;

	if ((rc = conn_exec(c, "BEGIN")))
		goto cleanup;
	if ((rc = job_rows(c, threads_sql, &g, max_rows, os_thread_row, v, truncated)) ||
	    (rc = job_rows(c, cpus_sql, &g, max_rows, os_cpu_row, v, truncated)) ||
	    (rc = job_rows(c, irqs_sql, &g, max_rows, os_irq_row, v, truncated)))
		goto cleanup;
cleanup:
	if (!sqlite3_get_autocommit(c->db))
		conn_exec(c, "COMMIT");
	reader_release(s, c);
	return rc;
}

/* ---- diagnoses, job settings, baselines ------------------------------------------------------- */

static int sqlite_diagnosis_upsert(struct store *base, const struct store_diagnosis *d, int64_t *id,
				   bool *opened)
{
	static const char find_sql[] =
		"SELECT id FROM diagnoses WHERE job = ?1 AND identity = ?2 AND resolved_ms IS NULL";
	static const char update_sql[] =
		"UPDATE diagnoses SET kind = ?2, rank = ?3, hostname = ?4, communicators = ?5,"
		" layer = ?6, severity = ?7, summary = ?8, action = ?9, report = ?10, updated_ms = ?11"
		" WHERE id = ?1";
	static const char insert_sql[] =
		"INSERT INTO diagnoses (job, identity, kind, rank, hostname, communicators, layer,"
		" severity, summary, action, report, opened_ms, updated_ms) VALUES (?1, ?2, ?3, ?4,"
		" ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)";
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_stmt *st = NULL;
	sqlite3_int64 found = 0;
	const char *text[] = { d->hostname, d->communicators, d->layer, d->severity, d->summary,
			       d->action, d->report };
	int rc;

	pthread_mutex_lock(&s->write_lock);
	if ((rc = conn_exec(c, "BEGIN IMMEDIATE")) || (rc = prepare_text(c, find_sql, &st)))
		goto cleanup;
	sqlite3_bind_text(st, 1, d->job, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, d->identity, -1, SQLITE_STATIC);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		found = sqlite3_column_int64(st, 0);
	else if (rc != SQLITE_DONE) {
		rc = sql_error(rc);
		goto cleanup;
	}
	sqlite3_finalize(st);
	st = NULL;
	if ((rc = prepare_text(c, found ? update_sql : insert_sql, &st)))
		goto cleanup;
	if (found) {
		sqlite3_bind_int64(st, 1, found);
		sqlite3_bind_text(st, 2, d->kind, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, d->rank);
		for (int i = 0; i < 7; i++)
			sqlite3_bind_text(st, 4 + i, text[i] ? text[i] : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 11, d->updated_ms);
	} else {
		sqlite3_bind_text(st, 1, d->job, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, d->identity, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, d->kind, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 4, d->rank);
		for (int i = 0; i < 7; i++)
			sqlite3_bind_text(st, 5 + i, text[i] ? text[i] : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 12, d->updated_ms);
	}
	if ((rc = step_done(st)))
		goto cleanup;
	*id = found ? found : sqlite3_last_insert_rowid(c->db);
	*opened = !found;
	rc = conn_exec(c, "COMMIT");
cleanup:
	sqlite3_finalize(st);
	rollback(c);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static int sqlite_diagnosis_resolve(struct store *base, int64_t id, int64_t now_ms)
{
	static const char sql[] =
		"UPDATE diagnoses SET resolved_ms = ?2 WHERE id = ?1 AND resolved_ms IS NULL";
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->write_lock);
	if ((rc = prepare_text(c, sql, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now_ms);
	if (!(rc = step_done(st)) && sqlite3_changes(c->db) == 0)
		rc = -ENOENT;
cleanup:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static int sqlite_diagnoses_list(struct store *base, const struct store_diagnosis_filter *f,
				 uint32_t limit, store_diagnosis_fn fn, void *arg)
{
	static const char sql[] =
		"SELECT id, job, identity, kind, rank, hostname, communicators, layer, severity,"
		" summary, action, report, opened_ms, updated_ms, coalesce(resolved_ms, 0)"
		" FROM diagnoses WHERE (?1 > 0 AND id = ?1) OR (?1 <= 0 AND (?2 IS NULL OR job = ?2)"
		" AND opened_ms <= ?4 AND (resolved_ms IS NULL OR resolved_ms >= ?3)"
		" AND (?5 = 0 OR resolved_ms IS NULL)) ORDER BY opened_ms DESC, id DESC LIMIT ?6";
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = prepare_text(c, sql, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, f->id);
	if (f->job)
		sqlite3_bind_text(st, 2, f->job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, f->from_ms);
	sqlite3_bind_int64(st, 4, f->to_ms);
	sqlite3_bind_int(st, 5, f->open_only);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_diagnosis d = {
			.id = sqlite3_column_int64(st, 0),
			.job = column_text(st, 1),
			.identity = column_text(st, 2),
			.kind = column_text(st, 3),
			.rank = sqlite3_column_int(st, 4),
			.hostname = column_text(st, 5),
			.communicators = column_text(st, 6),
			.layer = column_text(st, 7),
			.severity = column_text(st, 8),
			.summary = column_text(st, 9),
			.action = column_text(st, 10),
			.report = column_text(st, 11),
			.opened_ms = sqlite3_column_int64(st, 12),
			.updated_ms = sqlite3_column_int64(st, 13),
			.resolved_ms = sqlite3_column_int64(st, 14),
		};
		if ((rc = fn(arg, &d)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_job_settings_get(struct store *base, const char *job, char **json)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = prepare_text(c, "SELECT settings FROM job_settings WHERE job = ?1", &st)))
		goto cleanup;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = (*json = strdup(column_text(st, 0))) ? 0 : -ENOMEM;
	} else
		rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_job_settings_put(struct store *base, const char *job, const char *json,
				   int64_t now_ms)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = prepare_text(c, json ? "INSERT INTO job_settings (job, settings, updated_ms)"
				    " VALUES (?1, ?2, ?3) ON CONFLICT (job) DO UPDATE SET"
				    " settings = ?2, updated_ms = ?3"
				  : "DELETE FROM job_settings WHERE job = ?1", &st);
	if (rc)
		goto cleanup;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	if (json) {
		sqlite3_bind_text(st, 2, json, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, now_ms);
	}
	rc = step_done(st);
cleanup:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static int sqlite_baseline_put(struct store *base, const struct store_baseline *b)
{
	static const char sql[] =
		"INSERT INTO job_baselines (job, from_ms, to_ms, iteration_ns, samples, profile,"
		" created_ms, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (job) DO"
		" UPDATE SET from_ms = ?2, to_ms = ?3, iteration_ns = ?4, samples = ?5, profile = ?6,"
		" created_ms = ?7, source = ?8";
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->write_lock);
	if ((rc = prepare_text(c, sql, &st)))
		goto cleanup;
	sqlite3_bind_text(st, 1, b->job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, b->from_ms);
	sqlite3_bind_int64(st, 3, b->to_ms);
	sqlite3_bind_int64(st, 4, clamp_i64(b->iteration_ns));
	sqlite3_bind_int64(st, 5, clamp_i64(b->samples));
	sqlite3_bind_text(st, 6, b->profile ? b->profile : "", -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 7, b->created_ms);
	sqlite3_bind_text(st, 8, b->source ? b->source : "auto", -1, SQLITE_STATIC);
	rc = step_done(st);
cleanup:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static int sqlite_baseline_get(struct store *base, const char *job,
			       int (*fn)(void *arg, const struct store_baseline *b), void *arg)
{
	static const char sql[] = "SELECT from_ms, to_ms, iteration_ns, samples, profile, created_ms,"
				  " source FROM job_baselines WHERE job = ?1";
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = prepare_text(c, sql, &st)))
		goto cleanup;
	sqlite3_bind_text(st, 1, job, -1, SQLITE_STATIC);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_baseline b = {
			.job = job,
			.from_ms = sqlite3_column_int64(st, 0),
			.to_ms = sqlite3_column_int64(st, 1),
			.iteration_ns = (uint64_t)sqlite3_column_int64(st, 2),
			.samples = (uint64_t)sqlite3_column_int64(st, 3),
			.profile = column_text(st, 4),
			.created_ms = sqlite3_column_int64(st, 5),
			.source = column_text(st, 6),
		};
		rc = fn(arg, &b);
	} else
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_counters_list(struct store *base, store_counter_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_COUNTERS_LIST, &st)))
		goto cleanup;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_counter_total t = {
			.hostname = column_text(st, 1),
			.counter = (uint16_t)sqlite3_column_int(st, 2),
			.total = (uint64_t)sqlite3_column_int64(st, 3),
		};
		copy_column(st, 0, t.node_id, sizeof(t.node_id));
		if ((rc = fn(arg, &t)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_ping(struct store *base)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_PING, &st)))
		goto cleanup;
	rc = sqlite3_step(st);
	rc = rc == SQLITE_ROW ? 0 : sql_error(rc == SQLITE_DONE ? SQLITE_ERROR : rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_size_get(struct store *base, uint64_t *bytes)
{
	struct sqlite_store *s = from_base(base);
	struct stat st;
	uint64_t total;

	if (stat(s->db_path, &st))
		return -errno;
	total = (uint64_t)st.st_size;
	if (stat(s->wal_path, &st) == 0)
		total += (uint64_t)st.st_size;
	else if (errno != ENOENT)
		return -errno;
	*bytes = total;
	return 0;
}

static int sqlite_size_limit_set(struct store *base, uint64_t max_bytes)
{
	struct sqlite_store *s = from_base(base);
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = apply_size_limit(s, max_bytes);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static const struct store_ops sqlite_ops = {
	.close = sqlite_close,
	.schema_version = sqlite_schema_version,
	.batch_put = sqlite_batch_put,
	.batch_exists = sqlite_batch_exists,
	.ksyms_put = sqlite_ksyms_put,
	.ksyms_count = sqlite_ksyms_count,
	.ksym_range_get = sqlite_ksym_range_get,
	.object_get = sqlite_object_get,
	.stack_get = sqlite_stack_get,
	.nodes_list = sqlite_nodes_list,
	.processes_list = sqlite_processes_list,
	.stacks_aggregate = sqlite_stacks_aggregate,
	.counters_list = sqlite_counters_list,
	.launches_aggregate = sqlite_launches_aggregate,
	.jobs_list = sqlite_jobs_list,
	.job_ranks_list = sqlite_job_ranks_list,
	.job_communicators_list = sqlite_job_communicators_list,
	.collectives_list = sqlite_collectives_list,
	.job_gpu = sqlite_job_gpu,
	.gpu_time_aggregate = sqlite_gpu_time_aggregate,
	.job_os = sqlite_job_os,
	.diagnosis_upsert = sqlite_diagnosis_upsert,
	.diagnosis_resolve = sqlite_diagnosis_resolve,
	.diagnoses_list = sqlite_diagnoses_list,
	.job_settings_get = sqlite_job_settings_get,
	.job_settings_put = sqlite_job_settings_put,
	.baseline_put = sqlite_baseline_put,
	.baseline_get = sqlite_baseline_get,
	.ping = sqlite_ping,
	.size_get = sqlite_size_get,
	.size_limit_set = sqlite_size_limit_set,
};

/* ---- opening ------------------------------------------------------------------------------- */

/* Makes sure `dir` is a directory (creating it) and locks it for this process. */
static int data_dir_lock(const char *dir, int *lock_fd, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, rc;

	if (mkdir(dir, 0750) && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create data directory %s: %s", dir, sysom_strerror(rc));
		return rc;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "data directory %s is not a directory", dir);
		return -ENOTDIR;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/sysom.lock", dir) >= sizeof(path)) {
		snprintf(err, errlen, "data directory path too long");
		return -ENAMETOOLONG;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot use data directory %s: %s: %s", dir, path,
			 sysom_strerror(rc));
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen, "data directory %s is in use by another sysom-server (%s)", dir,
			 path);
		close(fd);
		return rc;
	}
	*lock_fd = fd;
	return 0;
}

static int open_connections(struct sqlite_store *s, const struct store_sqlite_options *o,
			    char *err, size_t errlen)
{
	sqlite3_int64 page_size;
	char mode[16] = "";
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_open(&s->writer, s->db_path, o->busy_timeout_ms, false, err, errlen)))
		return rc;
	rc = sqlite3_prepare_v2(s->writer.db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		copy_column(st, 0, mode, sizeof(mode));
	rc = sqlite3_finalize(st);
	if (rc != SQLITE_OK || strcmp(mode, "wal") != 0) {
		snprintf(err, errlen, "cannot use %s: %s", s->db_path,
			 rc != SQLITE_OK ? sqlite3_errmsg(s->writer.db) : "WAL journal mode refused");
		return rc != SQLITE_OK ? sql_error(rc) : -EPROTO;
	}
	if ((rc = migrate(&s->writer, s->db_path, err, errlen)))
		return rc;
	if ((rc = pragma_int(&s->writer, "PRAGMA page_size", &page_size)) || page_size <= 0) {
		snprintf(err, errlen, "cannot read the page size of %s", s->db_path);
		return rc ? rc : -EPROTO;
	}
	s->page_size = (uint32_t)page_size;
	if (o->max_size && (rc = apply_size_limit(s, o->max_size))) {
		snprintf(err, errlen, "cannot limit the size of %s: %s", s->db_path,
			 sqlite3_errmsg(s->writer.db));
		return rc;
	}
	s->readers = calloc(o->read_connections, sizeof(*s->readers));
	if (!s->readers)
		return -ENOMEM;
	for (uint32_t i = 0; i < o->read_connections; i++) {
		if ((rc = conn_open(&s->readers[i], s->db_path, o->busy_timeout_ms, true, err, errlen)))
			return rc;
		s->reader_count++;
		s->readers[i].next_free = s->free_readers;
		s->free_readers = &s->readers[i];
	}
	return 0;
}

int store_sqlite_open(const char *data_dir, const struct store_sqlite_options *opts,
		      struct store **out, char *err, size_t errlen)
{
	struct store_sqlite_options o = opts ? *opts : (struct store_sqlite_options){ 0 };
	struct sqlite_store *s = NULL;
	int rc;

	if (!o.read_connections)
		o.read_connections = DEFAULT_READERS;
	if (o.read_connections > MAX_READERS)
		o.read_connections = MAX_READERS;
	if (!o.busy_timeout_ms)
		o.busy_timeout_ms = DEFAULT_BUSY_TIMEOUT_MS;
	if (!sqlite3_threadsafe()) {
		snprintf(err, errlen, "the SQLite library was built without thread support");
		return -ENOTSUP;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &sqlite_ops;
	s->lock_fd = -1;
	pthread_mutex_init(&s->write_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_cond, NULL);
	if (asprintf(&s->db_path, "%s/sysom.db", data_dir) < 0)
		s->db_path = NULL;
	if (asprintf(&s->wal_path, "%s/sysom.db-wal", data_dir) < 0)
		s->wal_path = NULL;
	if (!s->db_path || !s->wal_path) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = data_dir_lock(data_dir, &s->lock_fd, err, errlen)))
		goto cleanup;
	rc = open_connections(s, &o, err, errlen);
cleanup:
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(err, errlen, "out of memory opening the store");
		sqlite_close(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}
