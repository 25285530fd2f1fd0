/* SPDX-License-Identifier: Apache-2.0 */
/* Process identity from cgroup paths and the kubelet's pod log directories (identity.h). */
#include "agent/node/identity.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

const char *identity_runtime_name(enum identity_runtime r)
{
	switch (r) {
	case IDENTITY_RUNTIME_CONTAINERD:
		return "containerd";
	case IDENTITY_RUNTIME_CRIO:
		return "cri-o";
	case IDENTITY_RUNTIME_DOCKER:
		return "docker";
	case IDENTITY_RUNTIME_PODMAN:
		return "podman";
	case IDENTITY_RUNTIME_UNKNOWN:
		return "unknown";
	case IDENTITY_RUNTIME_NONE:
		break;
	}
	return "";
}

/* A component of a path: [p, p + n). */
struct span {
	const char *p;
	size_t n;
};

static bool has_prefix(struct span s, const char *prefix)
{
	size_t n = strlen(prefix);
	return s.n >= n && memcmp(s.p, prefix, n) == 0;
}

static bool has_suffix(struct span s, const char *suffix)
{
	size_t n = strlen(suffix);
	return s.n >= n && memcmp(s.p + s.n - n, suffix, n) == 0;
}

static bool equals(struct span s, const char *word)
{
	return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0;
}

static bool is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* Exactly 64 lowercase hex digits. */
static bool is_container_id(const char *p, size_t n)
{
	if (n != IDENTITY_CONTAINER_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_lower_hex(p[i]))
			return false;
	return true;
}

/*
 * A pod UID, 8-4-4-4-12 hex digits (either case), with `sep` ('-' or, in systemd slice
 * names, '_') between the groups; copied with '-' and lowercase into `out`.
 */
static bool take_pod_uid(const char *p, size_t n, char sep, char out[IDENTITY_POD_UID_LEN + 1])
{
	char uid[IDENTITY_POD_UID_LEN + 1];

	if (n != IDENTITY_POD_UID_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != sep)
				return false;
			uid[i] = '-';
			continue;
		}
		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (!is_lower_hex(c))
			return false;
		uid[i] = c;
	}
	uid[n] = '\0';
	memcpy(out, uid, sizeof(uid)); /* only a whole uid: `out` is untouched on failure */
	return true;
}

static void set_container(struct proc_identity *id, enum identity_runtime rt, const char *p)
{
	id->runtime = rt;
	memcpy(id->container_id, p, IDENTITY_CONTAINER_ID_LEN);
	id->container_id[IDENTITY_CONTAINER_ID_LEN] = '\0';
}

/* "<prefix><CID>.scope" of a container runtime under systemd. */
static bool scope_container(struct span s, struct proc_identity *id)
{
	static const struct {
		const char *prefix;
		enum identity_runtime rt;
	} scopes[] = {
		{ "cri-containerd-", IDENTITY_RUNTIME_CONTAINERD },
		{ "crio-", IDENTITY_RUNTIME_CRIO },
		{ "docker-", IDENTITY_RUNTIME_DOCKER },
		{ "libpod-", IDENTITY_RUNTIME_PODMAN },
	};
	if (!has_suffix(s, ".scope"))
		return false;
	for (size_t i = 0; i < sizeof(scopes) / sizeof(scopes[0]); i++) {
		size_t pl = strlen(scopes[i].prefix);
		if (!has_prefix(s, scopes[i].prefix))
			continue;
		const char *cid = s.p + pl;
		size_t n = s.n - pl - strlen(".scope");
		if (is_container_id(cid, n)) {
			set_container(id, scopes[i].rt, cid);
			return true;
		}
	}
	return false;
}

/* A decimal number of 1..20 digits without overflow into *v. */
static bool parse_u64(const char *p, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		uint64_t d = (uint64_t)(p[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	return true;
}

/* "step_<S>": a decimal step (< 2^32) or batch, extern, interactive. */
static bool take_slurm_step(struct span s, char out[IDENTITY_SLURM_STEP_MAX])
{
	static const char *const named[] = { "batch", "extern", "interactive" };
	uint64_t v;
	if (!has_prefix(s, "step_"))
		return false;
	struct span rest = { s.p + 5, s.n - 5 };
	for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
		if (equals(rest, named[i])) {
			snprintf(out, IDENTITY_SLURM_STEP_MAX, "%s", named[i]);
			return true;
		}
	}
	if (!parse_u64(rest.p, rest.n, &v) || v > UINT32_MAX)
		return false;
	snprintf(out, IDENTITY_SLURM_STEP_MAX, "%llu", (unsigned long long)v);
	return true;
}

/* The pod UID of a Kubernetes pod component: "pod<UID>" (cgroupfs) or
 * "kubepods[-<qos>]-pod<UID with _>.slice" (systemd). */
static bool take_pod(struct span s, bool under_kubepods, char out[IDENTITY_POD_UID_LEN + 1])
{
	if (under_kubepods && has_prefix(s, "pod"))
		return take_pod_uid(s.p + 3, s.n - 3, '-', out);
	if (has_prefix(s, "kubepods-") && has_suffix(s, ".slice")) {
		struct span body = { s.p, s.n - strlen(".slice") };
		/* The UID is the last 36 bytes, after "pod". */
		if (body.n < IDENTITY_POD_UID_LEN + 3)
			return false;
		const char *uid = body.p + body.n - IDENTITY_POD_UID_LEN;
		if (memcmp(uid - 3, "pod", 3) != 0 || (uid - 4 >= body.p && uid[-4] != '-'))
			return false;
		return take_pod_uid(uid, IDENTITY_POD_UID_LEN, '_', out);
	}
	return false;
}

int identity_parse_cgroup_path(const char *path, size_t len, struct proc_identity *out)
{
	bool kubepods = false, docker = false, slurm = false;
	struct span prev = { "", 0 };
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	if (len == 0 || len > IDENTITY_PATH_MAX || path[0] != '/' || memchr(path, '\0', len))
		return -SYSOM_ECORRUPT;
	while (i < len) {
		while (i < len && path[i] == '/')
			i++;
		size_t start = i;
		while (i < len && path[i] != '/')
			i++;
		struct span s = { path + start, i - start };
		if (s.n == 0)
			break;
		if (equals(s, "kubepods") || equals(s, "kubepods.slice")) {
			kubepods = true;
		} else if (equals(s, "docker")) {
			docker = true;
		} else if (equals(s, "slurm") || equals(s, "slurmstepd.scope") ||
			   (!slurm && !prev.n && has_prefix(s, "slurm_"))) {
			/* slurm_<node>: slurmd's cgroup root when several run on one host */
			slurm = true;
		} else if (!out->pod_uid[0] && take_pod(s, kubepods, out->pod_uid)) {
			/* the pod */
		} else if (out->pod_uid[0] && !out->container_id[0] && is_container_id(s.p, s.n)) {
			/* cgroupfs driver: the container directory under the pod, no runtime named */
			set_container(out, IDENTITY_RUNTIME_UNKNOWN, s.p);
		} else if (out->pod_uid[0] && !out->container_id[0] && has_prefix(s, "crio-") &&
			   is_container_id(s.p + 5, s.n - 5)) {
			/* CRI-O with the cgroupfs driver: crio-<CID> (crio-conmon-<CID> is its monitor) */
			set_container(out, IDENTITY_RUNTIME_CRIO, s.p + 5);
		} else if (docker && !out->container_id[0] && is_container_id(s.p, s.n) &&
			   equals(prev, "docker")) {
			set_container(out, IDENTITY_RUNTIME_DOCKER, s.p);
		} else if (!out->container_id[0] && scope_container(s, out)) {
			/* runtime-named container scope */
		} else if (slurm && has_prefix(s, "job_") && !out->slurm_job) {
			uint64_t job;
			if (parse_u64(s.p + 4, s.n - 4, &job) && job > 0)
				out->slurm_job = job;
		} else if (slurm && out->slurm_job && !out->slurm_step[0]) {
			take_slurm_step(s, out->slurm_step);
		}
		/* The deepest unit: a component ending in .service or .scope. */
		if ((has_suffix(s, ".service") || has_suffix(s, ".scope")) && s.n < IDENTITY_UNIT_MAX) {
			memcpy(out->unit, s.p, s.n);
			out->unit[s.n] = '\0';
		}
		prev = s;
	}
	return 0;
}

/* How much a parsed path says (container > pod > Slurm job > unit). */
static int richness(const struct proc_identity *id)
{
	return (id->container_id[0] ? 8 : 0) + (id->pod_uid[0] ? 4 : 0) + (id->slurm_job ? 2 : 0) +
	       (id->unit[0] ? 1 : 0);
}

int identity_parse_cgroup_file(const char *text, size_t len, struct proc_identity *out)
{
	struct proc_identity cand;
	int best = -1, best_rank = 0, lines = 0;
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	while (i < len) {
		const char *line = text + i;
		const char *nl = memchr(line, '\n', len - i);
		size_t n = nl ? (size_t)(nl - line) : len - i;
		i += n + (nl ? 1 : 0);
		/* ID:CONTROLLERS:PATH; the path may itself contain ':'. */
		const char *c1 = memchr(line, ':', n);
		if (!c1)
			continue;
		const char *c2 = memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line));
		if (!c2 || c1 == line)
			continue;
		uint64_t hid;
		if (!parse_u64(line, (size_t)(c1 - line), &hid))
			continue;
		const char *p = c2 + 1;
		size_t pn = n - (size_t)(p - line);
		if (identity_parse_cgroup_path(p, pn, &cand) != 0)
			continue;
		lines++;
		/* Preference among equally rich lines: v2, name=systemd, then file order. */
		struct span ctl = { c1 + 1, (size_t)(c2 - c1 - 1) };
		int rank = hid == 0 && ctl.n == 0 ? 2 : equals(ctl, "name=systemd") ? 1 : 0;
		int r = richness(&cand);
		if (r > best || (r == best && rank > best_rank)) {
			best = r;
			best_rank = rank;
			*out = cand;
		}
	}
	return lines > 0 ? 0 : -SYSOM_ECORRUPT;
}

int identity_read(int pid, const char *path, struct proc_identity *out)
{
	char proc_path[64], *buf = NULL;
	size_t used = 0;
	int fd = -1, rc;

	memset(out, 0, sizeof(*out));
	if (!path) {
		if (pid <= 0)
			return -EINVAL;
		snprintf(proc_path, sizeof(proc_path), "/proc/%d/cgroup", pid);
		path = proc_path;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ENOENT && path == proc_path ? -ESRCH : -errno;
		goto cleanup;
	}
	buf = malloc(IDENTITY_CGROUP_FILE_MAX + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (;;) {
		ssize_t n = read(fd, buf + used, IDENTITY_CGROUP_FILE_MAX + 1 - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errno == ESRCH ? -ESRCH : -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		used += (size_t)n;
		if (used > IDENTITY_CGROUP_FILE_MAX) {
			rc = -SYSOM_ELIMIT;
			goto cleanup;
		}
	}
	rc = identity_parse_cgroup_file(buf, used, out);
cleanup:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

int identity_parse_pod_dir(const char *dir, size_t len, char *ns, size_t ns_size, char *name,
			   size_t name_size, char uid[IDENTITY_POD_UID_LEN + 1])
{
	/* <namespace>_<name>_<uid>: the uid is the last 36 bytes. */
	if (len < IDENTITY_POD_UID_LEN + 4 || memchr(dir, '\0', len))
		return -SYSOM_ECORRUPT;
	const char *u = dir + len - IDENTITY_POD_UID_LEN;
	if (u[-1] != '_' || !take_pod_uid(u, IDENTITY_POD_UID_LEN, '-', uid))
		return -SYSOM_ECORRUPT;
	size_t head = len - IDENTITY_POD_UID_LEN - 1; /* "<namespace>_<name>" */
	const char *sep = memchr(dir, '_', head);
	if (!sep)
		return -SYSOM_ECORRUPT;
	size_t nsl = (size_t)(sep - dir), nl = head - nsl - 1;
	if (nsl == 0 || nl == 0 || memchr(sep + 1, '_', nl) || nsl >= IDENTITY_K8S_NAME_MAX ||
	    nl >= IDENTITY_K8S_NAME_MAX || nsl >= ns_size || nl >= name_size)
		return -SYSOM_ECORRUPT;
	memcpy(ns, dir, nsl);
	ns[nsl] = '\0';
	memcpy(name, sep + 1, nl);
	name[nl] = '\0';
	return 0;
}

int identity_pod_lookup(const char *log_root, const char *pod_uid, char *ns, size_t ns_size,
			char *name, size_t name_size)
{
	char want[IDENTITY_POD_UID_LEN + 1], uid[IDENTITY_POD_UID_LEN + 1];
	char ns_tmp[IDENTITY_K8S_NAME_MAX], name_tmp[IDENTITY_K8S_NAME_MAX];
	struct dirent *de;
	unsigned seen = 0;
	DIR *d = NULL;
	int rc = -ENOENT;

	if (!log_root || !pod_uid || !ns || !name || ns_size == 0 || name_size == 0 ||
	    !take_pod_uid(pod_uid, strnlen(pod_uid, IDENTITY_POD_UID_LEN + 1), '-', want))
		return -EINVAL;
	d = opendir(log_root);
	if (!d)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		if (++seen > IDENTITY_POD_DIRS_MAX) {
			rc = -SYSOM_ELIMIT;
			goto cleanup;
		}
		size_t n = strlen(de->d_name);
		if (n <= IDENTITY_POD_UID_LEN || memcmp(de->d_name + n - IDENTITY_POD_UID_LEN, want,
							IDENTITY_POD_UID_LEN) != 0)
			continue;
		if (identity_parse_pod_dir(de->d_name, n, ns_tmp, sizeof(ns_tmp), name_tmp,
					   sizeof(name_tmp), uid) != 0)
			continue;
		if (strlen(ns_tmp) >= ns_size || strlen(name_tmp) >= name_size) {
			rc = -EINVAL;
			goto cleanup;
		}
		strcpy(ns, ns_tmp);
		strcpy(name, name_tmp);
		rc = 0;
		goto cleanup;
	}
cleanup:
	closedir(d);
	return rc;
}

int identity_parse_container_log(const char *file, size_t len, char *container,
				 size_t container_size, char cid[IDENTITY_CONTAINER_ID_LEN + 1])
{
	/* <pod>_<namespace>_<container>-<cid>.log: the id is the 64 bytes before ".log". */
	static const char ext[] = ".log";
	const size_t tail = IDENTITY_CONTAINER_ID_LEN + sizeof(ext) - 1;

	if (len < tail + 6 || memchr(file, '\0', len) ||
	    memcmp(file + len - sizeof(ext) + 1, ext, sizeof(ext) - 1) != 0)
		return -SYSOM_ECORRUPT;
	const char *id = file + len - tail;
	if (id[-1] != '-' || !is_container_id(id, IDENTITY_CONTAINER_ID_LEN))
		return -SYSOM_ECORRUPT;
	size_t head = len - tail - 1; /* "<pod>_<namespace>_<container>" */
	const char *s1 = memchr(file, '_', head);
	if (!s1 || s1 == file)
		return -SYSOM_ECORRUPT;
	const char *s2 = memchr(s1 + 1, '_', head - (size_t)(s1 + 1 - file));
	if (!s2 || s2 == s1 + 1)
		return -SYSOM_ECORRUPT;
	const char *c = s2 + 1;
	size_t cl = head - (size_t)(c - file);
	if (cl == 0 || memchr(c, '_', cl) || cl >= IDENTITY_CONTAINER_NAME_MAX ||
	    cl >= container_size)
		return -SYSOM_ECORRUPT;
	memcpy(container, c, cl);
	container[cl] = '\0';
	memcpy(cid, id, IDENTITY_CONTAINER_ID_LEN);
	cid[IDENTITY_CONTAINER_ID_LEN] = '\0';
	return 0;
}

/* One container of the table: its id in binary (half the bytes of the text). */
struct name_entry {
	uint8_t id[IDENTITY_CONTAINER_ID_LEN / 2];
	char name[IDENTITY_CONTAINER_NAME_MAX];
};

struct identity_names {
	char *root;
	uint32_t max_entries;
	uint64_t min_rescan_ns;
	struct name_entry *entries; /* sorted by id */
	uint32_t count;
	bool scanned;
	uint64_t last_scan_ns;
	struct identity_names_stats stats;
};

static void id_to_binary(const char *hex, uint8_t out[IDENTITY_CONTAINER_ID_LEN / 2])
{
	for (size_t i = 0; i < IDENTITY_CONTAINER_ID_LEN / 2; i++) {
		unsigned hi = (unsigned char)hex[2 * i], lo = (unsigned char)hex[2 * i + 1];
		hi = hi <= '9' ? hi - '0' : hi - 'a' + 10;
		lo = lo <= '9' ? lo - '0' : lo - 'a' + 10;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
}

static int entry_cmp(const void *a, const void *b)
{
	return memcmp(((const struct name_entry *)a)->id, ((const struct name_entry *)b)->id,
		      IDENTITY_CONTAINER_ID_LEN / 2);
}

int identity_names_new(const char *log_root, uint32_t max_entries, uint64_t min_rescan_ns,
		       struct identity_names **out)
{
	struct identity_names *n;

	if (!log_root || !log_root[0] || !out)
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n || !(n->root = strdup(log_root))) {
		free(n);
		return -ENOMEM;
	}
	n->max_entries = max_entries ? max_entries : IDENTITY_CONTAINER_LOGS_MAX;
	n->min_rescan_ns = min_rescan_ns;
	*out = n;
	return 0;
}

void identity_names_free(struct identity_names *n)
{
	if (!n)
		return;
	free(n->entries);
	free(n->root);
	free(n);
}

/* Reads the whole directory into a fresh table (the old one stays on failure). */
static int names_scan(struct identity_names *n)
{
	struct name_entry *table = NULL;
	uint32_t count = 0, cap = 0, seen = 0;
	char cid[IDENTITY_CONTAINER_ID_LEN + 1];
	bool truncated = false;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	n->stats.scans++;
	d = opendir(n->root);
	if (!d)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		if (++seen > n->max_entries) {
			truncated = true;
			break;
		}
		struct name_entry e;
		if (identity_parse_container_log(de->d_name, strlen(de->d_name), e.name,
						 sizeof(e.name), cid) != 0)
			continue;
		id_to_binary(cid, e.id);
		if (count == cap) {
			uint32_t ncap = cap ? cap * 2 : 256;
			struct name_entry *t = realloc(table, (size_t)ncap * sizeof(*t));
			if (!t) {
				rc = -ENOMEM;
				goto cleanup;
			}
			table = t;
			cap = ncap;
		}
		table[count++] = e;
	}
	if (count)
		qsort(table, count, sizeof(*table), entry_cmp);
	free(n->entries);
	n->entries = table;
	table = NULL;
	n->count = count;
	n->stats.entries = count;
	n->stats.truncated = truncated;
cleanup:
	free(table);
	closedir(d);
	return rc;
}

static const struct name_entry *names_find(const struct identity_names *n,
					   const uint8_t id[IDENTITY_CONTAINER_ID_LEN / 2])
{
	struct name_entry key;

	if (!n->count)
		return NULL;
	memcpy(key.id, id, sizeof(key.id));
	return bsearch(&key, n->entries, n->count, sizeof(key), entry_cmp);
}

int identity_container_name(struct identity_names *n, const char *cid, uint64_t now_ns,
			    char *name, size_t name_size)
{
	uint8_t id[IDENTITY_CONTAINER_ID_LEN / 2];
	const struct name_entry *e;

	if (!n || !cid || !name || name_size == 0 ||
	    !is_container_id(cid, strnlen(cid, IDENTITY_CONTAINER_ID_LEN + 1)))
		return -EINVAL;
	id_to_binary(cid, id);
	e = names_find(n, id);
	if (!e && (!n->scanned || now_ns - n->last_scan_ns >= n->min_rescan_ns)) {
		n->scanned = true;
		n->last_scan_ns = now_ns;
		int rc = names_scan(n);
		if (rc)
			return rc;
		e = names_find(n, id);
	}
	if (!e)
		return n->stats.truncated ? -SYSOM_ELIMIT : -ENOENT;
	if (strlen(e->name) >= name_size)
		return -EINVAL;
	strcpy(name, e->name);
	return 0;
}

void identity_names_stats_read(const struct identity_names *n, struct identity_names_stats *out)
{
	*out = n ? n->stats : (struct identity_names_stats){ 0 };
}
