/* SPDX-License-Identifier: Apache-2.0 */
/* Process tracker: /proc snapshots per incarnation, object identity cache, address lookup. */
#include "agent/node/proctrack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/array.h"
#include "agent/node/host.h"
#include "agent/node/procmaps.h"
#include "common/error.h"
#include "common/hash.h"

#define CMDLINE_MAX 1024

struct object_entry {
	struct pt_object object;
	/* File identity key (zero for pseudo objects, which are keyed by name). */
	uint64_t dev, ino, size, mtime_ns;
	bool pseudo;
	bool referenced; /* mark bit for garbage collection */
};

struct proctrack {
	struct proctrack_options opts;
	struct pt_process **procs;
	uint32_t proc_count, proc_cap;
	struct hash_index proc_index; /* hash(tgid, generation) → procs index */
	struct object_entry **objects;
	uint32_t object_count, object_cap;
	struct hash_index object_index; /* file key or pseudo name → objects index */
	struct object_entry *vdso;      /* identity of the vDSO, read from our own */
	struct identity_names *names;   /* container names (NULL: no container log root) */
	uint64_t drains;
	struct proctrack_stats stats;
};

/* The container log links are read again for an unknown container at most this often: a
 * container whose first process is met sooner after the last read stays unnamed. */
#define CONTAINER_NAMES_RESCAN_NS 1000000000ULL

/* Live processes rescanned per drain at most (see proctrack_after_drain). */
#define PERIODIC_RESCANS_PER_DRAIN 64

void proctrack_options_default(struct proctrack_options *opts)
{
	*opts = (struct proctrack_options){
		.proc_root = "/proc",
		.max_processes = 16384,
		.max_mappings = 4096,
		.max_objects = 65536,
		.rescan_interval_ns = 1000000000ULL,
		.periodic_rescan_ns = 5000000000ULL,
	};
}

static uint64_t proc_hash(uint32_t tgid, uint32_t generation)
{
	return sysom_hash_mix(tgid, (uint64_t)generation << 32 | 0x5052);
}

struct proc_key {
	const struct proctrack *pt;
	uint32_t tgid, generation;
};

static bool proc_eq(const void *ctx, uint32_t idx)
{
	const struct proc_key *k = ctx;

	return k->pt->procs[idx]->tgid == k->tgid && k->pt->procs[idx]->generation == k->generation;
}

static struct pt_process *find_process(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct proc_key key = { pt, tgid, generation };
	uint32_t idx = hash_index_find(&pt->proc_index, proc_hash(tgid, generation), proc_eq, &key);

	return idx == HASH_INDEX_NONE ? NULL : pt->procs[idx];
}

/* ---- objects ------------------------------------------------------------------------------ */

static uint64_t file_key_hash(uint64_t dev, uint64_t ino, uint64_t size, uint64_t mtime_ns)
{
	return sysom_hash_mix(sysom_hash_mix(dev, ino), sysom_hash_mix(size, mtime_ns));
}

static uint64_t pseudo_key_hash(uint8_t kind, const char *name)
{
	return sysom_hash64(name, strlen(name), kind);
}

/* The index key of an object: its file identity, or (kind, name) for pseudo objects. */
static uint64_t object_hash(const struct object_entry *o)
{
	return o->pseudo ? pseudo_key_hash(o->object.id.kind, o->object.path)
			 : file_key_hash(o->dev, o->ino, o->size, o->mtime_ns);
}

struct object_key {
	const struct proctrack *pt;
	bool pseudo;
	const char *name;
	uint8_t kind;
	uint64_t dev, ino, size, mtime_ns;
};

static bool object_eq(const void *ctx, uint32_t idx)
{
	const struct object_key *k = ctx;
	const struct object_entry *o = k->pt->objects[idx];

	if (o->pseudo != k->pseudo)
		return false;
	if (k->pseudo)
		return o->object.id.kind == k->kind && strcmp(o->object.path, k->name) == 0;
	return o->dev == k->dev && o->ino == k->ino && o->size == k->size && o->mtime_ns == k->mtime_ns;
}

static struct object_entry *object_add(struct proctrack *pt, uint64_t hash, struct object_entry *e)
{
	if (SYSOM_ARRAY_RESERVE(pt->objects, pt->object_cap, pt->object_count, 64))
		return NULL;
	struct object_entry *copy = malloc(sizeof(*copy));
	if (!copy)
		return NULL;
	*copy = *e;
	if (hash_index_insert(&pt->object_index, hash, pt->object_count)) {
		free(copy);
		return NULL;
	}
	pt->objects[pt->object_count++] = copy;
	return copy;
}

/* A pseudo object (anonymous region, unknown) named `name`. */
static const struct pt_object *pseudo_object(struct proctrack *pt, uint8_t kind, const char *name)
{
	struct object_key key = { .pt = pt, .pseudo = true, .name = name, .kind = kind };
	uint64_t h = pseudo_key_hash(kind, name);
	uint32_t idx = hash_index_find(&pt->object_index, h, object_eq, &key);
	struct object_entry e = { .pseudo = true };

	if (idx != HASH_INDEX_NONE)
		return &pt->objects[idx]->object;
	e.object.id.kind = kind;
	e.object.path = strdup(name);
	if (!e.object.path)
		return NULL;
	struct object_entry *added = object_add(pt, h, &e);
	if (!added) {
		free(e.object.path);
		return NULL;
	}
	return &added->object;
}

static const struct pt_object *unknown_object(struct proctrack *pt)
{
	return pseudo_object(pt, SYSOM_OBJECT_UNKNOWN, "[unknown]");
}

/* Identity of a mapped file, opened through the process (works for deleted files and for
 * files in other mount namespaces), cached by (dev, inode, size, mtime). */
static const struct pt_object *file_object(struct proctrack *pt, uint32_t tgid,
					   const struct procmaps_entry *m)
{
	char path[PATH_MAX + 64];
	const struct pt_object *result = NULL;
	struct object_entry e = { 0 };
	struct stat st;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%u/map_files/%lx-%lx", pt->opts.proc_root, tgid,
		 (unsigned long)m->start, (unsigned long)m->end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && !m->deleted) {
		snprintf(path, sizeof(path), "%s/%u/root%s", pt->opts.proc_root, tgid, m->path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0 || fstat(fd, &st)) {
		pt->stats.object_errors++;
		result = pseudo_object(pt, SYSOM_OBJECT_UNKNOWN, m->path);
		goto cleanup;
	}
	struct object_key key = {
		.pt = pt,
		.dev = st.st_dev,
		.ino = st.st_ino,
		.size = (uint64_t)st.st_size,
		.mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec,
	};
	uint64_t h = file_key_hash(key.dev, key.ino, key.size, key.mtime_ns);
	uint32_t idx = hash_index_find(&pt->object_index, h, object_eq, &key);
	if (idx != HASH_INDEX_NONE) {
		result = &pt->objects[idx]->object;
		goto cleanup;
	}
	if (pt->object_count >= pt->opts.max_objects) {
		result = pseudo_object(pt, SYSOM_OBJECT_UNKNOWN, m->path);
		goto cleanup;
	}
	rc = sysom_elf_build_id(fd, &e.object.id);
	if (rc == 0) {
		pt->stats.build_id_reads++;
	} else if (rc == -SYSOM_ENOBUILDID || rc == -SYSOM_ENOTELF) {
		rc = sysom_file_content_hash(fd, &e.object.id);
		if (rc == 0)
			pt->stats.content_hashes++;
	}
	if (rc) {
		pt->stats.object_errors++;
		result = pseudo_object(pt, SYSOM_OBJECT_UNKNOWN, m->path);
		goto cleanup;
	}
	e.dev = key.dev;
	e.ino = key.ino;
	e.size = key.size;
	e.mtime_ns = key.mtime_ns;
	e.object.path = strdup(m->path);
	if (!e.object.path)
		goto cleanup;
	struct object_entry *added = object_add(pt, h, &e);
	if (!added) {
		free(e.object.path);
		goto cleanup;
	}
	result = &added->object;
cleanup:
	if (fd >= 0)
		close(fd);
	return result;
}

/* The vDSO is the same image in every 64-bit process: identify it once from our own. */
static int vdso_visit(void *ctx, const struct procmaps_entry *m)
{
	uint64_t *len = ctx;

	if (strcmp(m->path, "[vdso]") == 0) {
		*len = m->end - m->start;
		return 1;
	}
	return 0;
}

static const struct pt_object *vdso_object(struct proctrack *pt)
{
	if (pt->vdso)
		return &pt->vdso->object;
	unsigned long image = getauxval(AT_SYSINFO_EHDR);
	uint64_t len = 0;
	struct object_entry e = { .pseudo = true };

	if (image)
		procmaps_read(getpid(), NULL, false, 1u << 16, vdso_visit, &len, NULL);
	if (!image || !len || sysom_elf_build_id_memory((const void *)image, len, &e.object.id))
		return pseudo_object(pt, SYSOM_OBJECT_UNKNOWN, "[vdso]");
	e.object.path = strdup("[vdso]");
	if (!e.object.path)
		return NULL;
	pt->vdso = object_add(pt, object_hash(&e), &e);
	if (!pt->vdso) {
		free(e.object.path);
		return NULL;
	}
	return &pt->vdso->object;
}

/* ---- snapshots ------------------------------------------------------------------------------ */

struct scan_ctx {
	struct proctrack *pt;
	struct pt_process *proc;
	struct pt_mapping *maps;
	uint32_t count, cap;
	int error;
};

static int scan_visit(void *ctx, const struct procmaps_entry *m)
{
	struct scan_ctx *sc = ctx;
	const struct pt_object *obj;
	uint64_t offset_base = m->offset;

	if (m->path[0] == '\0') {
		obj = pseudo_object(sc->pt, SYSOM_OBJECT_ANON, "[anon]");
	} else if (strcmp(m->path, "[vdso]") == 0) {
		obj = vdso_object(sc->pt);
		offset_base = 0; /* the vDSO image is mapped from its start */
	} else if (m->path[0] == '[') {
		/* [anon:name], [vsyscall], [stack] with exec... */
		obj = pseudo_object(sc->pt,
				    strncmp(m->path, "[anon", 5) == 0 ? SYSOM_OBJECT_ANON
								      : SYSOM_OBJECT_UNKNOWN,
				    m->path);
	} else if (m->inode == 0 && m->dev_major == 0 && m->dev_minor == 0) {
		/* memfd or similar without a backing file we can reopen */
		obj = pseudo_object(sc->pt, SYSOM_OBJECT_ANON, m->path);
	} else {
		obj = file_object(sc->pt, sc->proc->tgid, m);
	}
	if (!obj) {
		sc->error = -ENOMEM;
		return -ENOMEM;
	}
	if (SYSOM_ARRAY_RESERVE(sc->maps, sc->cap, sc->count,
					32)) {
			sc->error = -ENOMEM;
			return -ENOMEM;
		}
	sc->maps[sc->count++] = (struct pt_mapping){
		.start = m->start,
		.end = m->end,
		.file_offset = offset_base,
		.object = obj,
	};
	return 0;
}

/*
 * Whether an address outside `proc`'s known mappings may trigger a rescan now. Once per
 * rescan interval, except after the first scan: that one is taken at the process's first
 * sample, which may come while the dynamic loader is still mapping its libraries (libpython
 * of a --enable-shared interpreter: without it the process is walked natively only, so a
 * second look is allowed after a tenth of the interval, as for a traced library load).
 */
static bool rescan_allowed(const struct proctrack *pt, const struct pt_process *proc,
			   uint64_t now)
{
	uint64_t interval = pt->opts.rescan_interval_ns;

	if (proc->vanished || proc->exited)
		return false;
	if (proc->scans <= 1)
		interval /= 10;
	return now - proc->last_scan_ns >= interval;
}

static int compare_mappings(const void *a, const void *b)
{
	const struct pt_mapping *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

bool proctrack_note_comm(struct pt_process *proc, const char *comm)
{
	char now[sizeof(proc->comm)] = "";
	size_t len = strnlen(comm, sizeof(now) - 1); /* a name longer than comm's is cut */

	memcpy(now, comm, len);
	if (!now[0] || !strcmp(now, proc->comm))
		return false;
	memcpy(proc->comm, now, sizeof(now));
	return true;
}

/* Its name now, from /proc/<tgid>/comm (a rename since exec); unreadable: unchanged. */
static void reread_comm(struct proctrack *pt, struct pt_process *proc)
{
	char path[PATH_MAX], text[64];

	snprintf(path, sizeof(path), "%s/%u/comm", pt->opts.proc_root, proc->tgid);
	if (host_read_text(path, text, sizeof(text)) < 0)
		return;
	text[strcspn(text, "\n")] = '\0';
	proctrack_note_comm(proc, text);
}

/* Re-reads the executable mappings of a process; a vanished process keeps its old ones. */
static int scan_mappings(struct proctrack *pt, struct pt_process *proc)
{
	struct scan_ctx sc = { .pt = pt, .proc = proc };
	char path[PATH_MAX];
	int rc;

	proc->last_scan_ns = sysom_monotonic_ns();
	if (proc->scans++ > 0 && !proc->exited)
		reread_comm(pt, proc); /* the first scan follows read_stat's */
	proc->rescan_due = false;
	pt->stats.scans++;
	snprintf(path, sizeof(path), "%s/%u/maps", pt->opts.proc_root, proc->tgid);
	rc = procmaps_read((int)proc->tgid, path, true, pt->opts.max_mappings, scan_visit, &sc, NULL);
	if (sc.error)
		rc = sc.error;
	if (rc < 0 && rc != -SYSOM_ELIMIT) {
		pt->stats.scan_failures++;
		if (rc == -ESRCH || rc == -ENOENT) {
			if (!proc->vanished)
				pt->stats.vanished++;
			proc->vanished = true;
		}
		free(sc.maps);
		return rc;
	}
	if (sc.count)
		qsort(sc.maps, sc.count, sizeof(*sc.maps), compare_mappings);
	free(proc->mappings);
	proc->mappings = sc.maps;
	proc->mapping_count = sc.count;
	proc->scanned = true;
	if (pt->opts.on_mappings)
		pt->opts.on_mappings(pt->opts.mappings_ctx, proc);
	return 0;
}

/* Reads comm, ppid and start time from /proc/<tgid>/stat. */
static int read_stat(struct proctrack *pt, struct pt_process *proc)
{
	char path[PATH_MAX], text[4096];
	unsigned long long start_ticks = 0;
	int ppid = 0;
	int rc;

	snprintf(path, sizeof(path), "%s/%u/stat", pt->opts.proc_root, proc->tgid);
	rc = host_read_text(path, text, sizeof(text));
	if (rc < 0)
		return rc;
	/* comm may contain spaces and parentheses: it ends at the last ')'. */
	char *open_paren = strchr(text, '(');
	char *close_paren = strrchr(text, ')');
	if (!open_paren || !close_paren || close_paren < open_paren)
		return -SYSOM_ECORRUPT;
	size_t comm_len = (size_t)(close_paren - open_paren - 1);
	if (comm_len >= sizeof(proc->comm))
		comm_len = sizeof(proc->comm) - 1;
	memcpy(proc->comm, open_paren + 1, comm_len);
	proc->comm[comm_len] = '\0';
	/* After ") ": state(3) ppid(4) ... starttime(22). */
	char *p = close_paren + 2;
	int field = 3;
	char *save = NULL;
	for (char *tok = strtok_r(p, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
		if (field == 4)
			ppid = atoi(tok);
		if (field == 22) {
			start_ticks = strtoull(tok, NULL, 10);
			break;
		}
	}
	if (field != 22)
		return -SYSOM_ECORRUPT;
	long hz = sysconf(_SC_CLK_TCK);
	proc->ppid = ppid > 0 ? (uint32_t)ppid : 0;
	proc->start_time_ns = start_ticks * (1000000000ULL / (uint64_t)(hz > 0 ? hz : 100));
	return 0;
}

/* Container, pod, Slurm job and unit from /proc/<tgid>/cgroup: once per incarnation (a
 * process that moves between cgroups later keeps the identity it started with). */
static void read_cgroup_identity(struct proctrack *pt, struct pt_process *proc)
{
	struct pt_identity *id;
	char path[PATH_MAX];

	free(proc->identity);
	proc->identity = NULL;
	id = calloc(1, sizeof(*id));
	if (!id)
		return;
	snprintf(path, sizeof(path), "%s/%u/cgroup", pt->opts.proc_root, proc->tgid);
	if (identity_read((int)proc->tgid, path, &id->cg) < 0 ||
	    (!id->cg.container_id[0] && !id->cg.pod_uid[0] && !id->cg.slurm_job &&
	     !id->cg.unit[0])) {
		free(id);
		return;
	}
	if (id->cg.pod_uid[0] && pt->opts.pod_log_root && pt->opts.pod_log_root[0] &&
	    identity_pod_lookup(pt->opts.pod_log_root, id->cg.pod_uid, id->pod_namespace,
				sizeof(id->pod_namespace), id->pod_name, sizeof(id->pod_name)) < 0)
		id->pod_namespace[0] = id->pod_name[0] = '\0';
	if (id->cg.container_id[0] && pt->names &&
	    identity_container_name(pt->names, id->cg.container_id, sysom_monotonic_ns(),
				    id->container_name, sizeof(id->container_name)) < 0) {
		id->container_name[0] = '\0';
		pt->stats.container_names_missing++;
	}
	proc->identity = id;
}

static void read_identity(struct proctrack *pt, struct pt_process *proc)
{
	char path[PATH_MAX], target[PATH_MAX];
	char cmd[CMDLINE_MAX + 1];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%u/exe", pt->opts.proc_root, proc->tgid);
	n = readlink(path, target, sizeof(target) - 1);
	free(proc->exe);
	proc->exe = NULL;
	if (n > 0) {
		target[n] = '\0';
		proc->exe = strdup(target);
	}
	snprintf(path, sizeof(path), "%s/%u/cmdline", pt->opts.proc_root, proc->tgid);
	int len = host_read_text(path, cmd, sizeof(cmd));
	free(proc->cmdline);
	proc->cmdline = NULL;
	if (len > 0) {
		while (len > 0 && cmd[len - 1] == '\0')
			len--;
		for (int i = 0; i < len; i++)
			if (cmd[i] == '\0')
				cmd[i] = ' ';
		cmd[len] = '\0';
		proc->cmdline = strdup(cmd);
	}
	read_cgroup_identity(pt, proc);
}

static void process_free(struct proctrack *pt, struct pt_process *proc)
{
	if (!proc)
		return;
	if (proc->scanned && pt->opts.on_forget)
		pt->opts.on_forget(pt->opts.mappings_ctx, proc);
	free(proc->exe);
	free(proc->cmdline);
	free(proc->identity);
	free(proc->mappings);
	free(proc);
}

static struct pt_process *process_create(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct pt_process *proc;

	if (pt->proc_count >= pt->opts.max_processes)
		return NULL;
	if (SYSOM_ARRAY_RESERVE(pt->procs, pt->proc_cap, pt->proc_count, 64))
		return NULL;
	proc = calloc(1, sizeof(*proc));
	if (!proc)
		return NULL;
	proc->tgid = tgid;
	proc->generation = generation;
	if (read_stat(pt, proc) < 0) {
		proc->vanished = true;
		pt->stats.vanished++;
		snprintf(proc->comm, sizeof(proc->comm), "[exited]");
	} else {
		read_identity(pt, proc);
		scan_mappings(pt, proc);
	}
	if (hash_index_insert(&pt->proc_index, proc_hash(tgid, generation), pt->proc_count)) {
		process_free(pt, proc);
		return NULL;
	}
	pt->procs[pt->proc_count++] = proc;
	return proc;
}

/* ---- public API ------------------------------------------------------------------------------ */

int proctrack_new(const struct proctrack_options *opts, struct proctrack **out)
{
	struct proctrack *pt = calloc(1, sizeof(*pt));

	if (!pt)
		return -ENOMEM;
	pt->opts = *opts;
	if (!pt->opts.proc_root)
		pt->opts.proc_root = "/proc";
	if (hash_index_init(&pt->proc_index, 256) || hash_index_init(&pt->object_index, 256) ||
	    (pt->opts.container_log_root && pt->opts.container_log_root[0] &&
	     identity_names_new(pt->opts.container_log_root, 0, CONTAINER_NAMES_RESCAN_NS,
				&pt->names))) {
		proctrack_free(pt);
		return -ENOMEM;
	}
	*out = pt;
	return 0;
}

void proctrack_free(struct proctrack *pt)
{
	if (!pt)
		return;
	for (uint32_t i = 0; i < pt->proc_count; i++)
		process_free(pt, pt->procs[i]);
	for (uint32_t i = 0; i < pt->object_count; i++) {
		free(pt->objects[i]->object.path);
		free(pt->objects[i]);
	}
	free(pt->procs);
	free(pt->objects);
	hash_index_free(&pt->proc_index);
	hash_index_free(&pt->object_index);
	identity_names_free(pt->names);
	free(pt);
}

struct pt_process *proctrack_get(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct pt_process *proc = find_process(pt, tgid, generation);

	return proc ? proc : process_create(pt, tgid, generation);
}

struct pt_process *proctrack_get_live(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct pt_process *proc = find_process(pt, tgid, generation);
	char dir[64];

	if (proc)
		return proc;
	snprintf(dir, sizeof(dir), "%s/%u", pt->opts.proc_root, tgid);
	if (access(dir, F_OK))
		return NULL;
	proc = process_create(pt, tgid, generation);
	return proc && !proc->vanished ? proc : NULL; /* gone in between: forgotten as vanished */
}

void proctrack_on_new(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	proctrack_get(pt, tgid, generation);
}

void proctrack_on_exec(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	/* The old image's samples may still be in a buffer: keep its snapshot one more drain.
	 * The new image's snapshot is taken on its first sample (its libraries are not mapped
	 * yet at exec time). */
	if (generation > 0)
		proctrack_on_exit(pt, tgid, generation - 1);
}

void proctrack_on_exit(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct pt_process *proc = find_process(pt, tgid, generation);

	if (proc && !proc->exited) {
		proc->exited = true;
		proc->exit_drain = pt->drains;
		proc->exit_ns = sysom_monotonic_ns();
	}
}

void proctrack_resolve(struct proctrack *pt, struct pt_process *proc, uint64_t addr,
		       struct pt_resolved *out)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		uint32_t lo = 0, hi = proc->mapping_count;
		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;
			const struct pt_mapping *m = &proc->mappings[mid];
			if (addr < m->start) {
				hi = mid;
			} else if (addr >= m->end) {
				lo = mid + 1;
			} else {
				out->object = m->object;
				bool file = m->object->id.kind == SYSOM_OBJECT_ELF ||
					    m->object->id.kind == SYSOM_OBJECT_FILE_HASH;
				out->offset = file ? addr - m->start + m->file_offset : addr;
				if (file && !m->object->sampled) {
					/* Objects are owned by the tracker; the const is for callers. */
					((struct pt_object *)m->object)->sampled = true;
					if (pt->opts.on_new_object)
						pt->opts.on_new_object(pt->opts.object_ctx, m->object,
								       proc->tgid, m->start, m->end);
				}
				return;
			}
		}
		/* Not mapped when we last looked: maybe dlopen'ed since. Rescan a live process,
		 * at most once per rescan interval. */
		if (attempt == 0 && rescan_allowed(pt, proc, sysom_monotonic_ns())) {
			scan_mappings(pt, proc);
			continue;
		}
		break;
	}
	pt->stats.unmapped++;
	out->object = unknown_object(pt);
	out->offset = addr;
}

bool proctrack_rescan(struct proctrack *pt, uint32_t tgid, uint32_t generation)
{
	struct pt_process *proc = find_process(pt, tgid, generation);

	if (!proc || !rescan_allowed(pt, proc, sysom_monotonic_ns()))
		return false;
	return scan_mappings(pt, proc) == 0;
}

bool proctrack_rescan_loaded(struct proctrack *pt, uint32_t tgid, uint32_t generation,
			     uint64_t load_ns)
{
	struct pt_process *proc = find_process(pt, tgid, generation);

	uint64_t now = sysom_monotonic_ns();

	if (!proc || proc->vanished || proc->exited || proc->last_scan_ns >= load_ns)
		return false; /* gone, or its last scan already saw the library */
	/* Only scans for loads count against the floor: one made for any other reason just
	 * before the load (the exec's, a Python interpreter's) did not see the library, and a
	 * process that launches as soon as dlopen returns would wait for the next drain. */
	if (proc->last_load_scan_ns &&
	    now - proc->last_load_scan_ns < pt->opts.rescan_interval_ns / 10) {
		proc->rescan_due = true;
		return false;
	}
	proc->last_load_scan_ns = now;
	return scan_mappings(pt, proc) == 0;
}

/* Frees objects no process maps any more, once the cache is over its bound. */
static void collect_objects(struct proctrack *pt)
{
	if (pt->object_count <= pt->opts.max_objects / 2)
		return;
	for (uint32_t i = 0; i < pt->object_count; i++)
		pt->objects[i]->referenced = pt->objects[i] == pt->vdso;
	for (uint32_t i = 0; i < pt->proc_count; i++)
		for (uint32_t j = 0; j < pt->procs[i]->mapping_count; j++)
			((struct object_entry *)pt->procs[i]->mappings[j].object)->referenced = true;
	uint32_t kept = 0;
	hash_index_clear(&pt->object_index);
	for (uint32_t i = 0; i < pt->object_count; i++) {
		struct object_entry *o = pt->objects[i];
		if (!o->referenced) {
			free(o->object.path);
			free(o);
			continue;
		}
		pt->objects[kept] = o;
		hash_index_insert(&pt->object_index, object_hash(o), kept);
		kept++;
	}
	pt->object_count = kept;
}

void proctrack_after_drain(struct proctrack *pt)
{
	uint32_t kept = 0;
	bool removed = false;
	uint64_t now = sysom_monotonic_ns();

	pt->drains++;
	for (uint32_t i = 0; i < pt->proc_count; i++) {
		struct pt_process *proc = pt->procs[i];
		/* Exited before the drain that just completed started, and long enough ago that its
		 * late ring records are in too. */
		bool gone = (proc->exited && proc->exit_drain < pt->drains &&
			     now - proc->exit_ns >= PROCTRACK_EXIT_KEEP_NS) ||
			    (proc->vanished && now - proc->last_scan_ns > pt->opts.periodic_rescan_ns);
		if (gone) {
			process_free(pt, proc);
			removed = true;
			continue;
		}
		pt->procs[kept++] = proc;
	}
	pt->proc_count = kept;
	/* Periodic rescans find libraries loaded since (the unwinder's reports find most of them
	 * sooner); bounded per drain so thousands of processes cost a steady trickle. */
	uint32_t rescans = 0;
	for (uint32_t i = 0; i < pt->proc_count && rescans < PERIODIC_RESCANS_PER_DRAIN; i++) {
		struct pt_process *proc = pt->procs[i];
		if (!proc->exited && !proc->vanished &&
		    now - proc->last_scan_ns >= pt->opts.periodic_rescan_ns) {
			scan_mappings(pt, proc);
			rescans++;
		}
	}
	/* Libraries known to be loaded since the last scan (proctrack_rescan_loaded): one scan
	 * per load notification. After the periodic ones, which clear rescan_due when they
	 * scan (a scan's time is past `now`). */
	for (uint32_t i = 0; i < pt->proc_count; i++) {
		struct pt_process *proc = pt->procs[i];
		if (proc->rescan_due && !proc->exited && !proc->vanished &&
		    now - proc->last_load_scan_ns >= pt->opts.rescan_interval_ns / 10) {
			proc->last_load_scan_ns = now;
			scan_mappings(pt, proc);
		}
	}
	if (removed) {
		hash_index_clear(&pt->proc_index);
		for (uint32_t i = 0; i < pt->proc_count; i++)
			hash_index_insert(&pt->proc_index,
					  proc_hash(pt->procs[i]->tgid, pt->procs[i]->generation), i);
	}
	collect_objects(pt);
}

void proctrack_stats_read(const struct proctrack *pt, struct proctrack_stats *out)
{
	struct identity_names_stats ns;

	*out = pt->stats;
	identity_names_stats_read(pt->names, &ns);
	out->container_log_scans = ns.scans;
	out->processes = pt->proc_count;
	out->objects = pt->object_count;
}

void proctrack_for_each(const struct proctrack *pt, proctrack_visit_fn fn, void *ctx)
{
	for (uint32_t i = 0; i < pt->proc_count; i++)
		fn(ctx, pt->procs[i]);
}
