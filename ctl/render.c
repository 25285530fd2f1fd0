/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl terminal output: the flame graph summary ("top"), node and process tables. */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

#include "common/array.h"
#include "ctl/ctl.h"

/* A function's samples: self (leaf) and total (inclusive, once per stack). */
struct func {
	const char *name; /* borrowed from the document */
	bool kernel;
	uint64_t self, total;
	size_t last_stack; /* stack index + 1 that last added to `total` */
};

struct funcs {
	struct func *items;
	size_t count, cap;
	struct hash_index index;
};

struct func_key {
	const struct funcs *fs;
	const char *name;
	bool kernel;
};

static bool func_eq(const void *ctx, uint32_t idx)
{
	const struct func_key *k = ctx;
	const struct func *f = &k->fs->items[idx];

	return f->kernel == k->kernel && strcmp(f->name, k->name) == 0;
}

static struct func *func_get(struct funcs *fs, const char *name, bool kernel)
{
	struct func_key key = { fs, name, kernel };
	uint64_t h = sysom_hash64(name, strlen(name), kernel);
	uint32_t idx = hash_index_find(&fs->index, h, func_eq, &key);

	if (idx != HASH_INDEX_NONE)
		return &fs->items[idx];
	if (SYSOM_ARRAY_RESERVE(fs->items, fs->cap, fs->count, 256))
		return NULL;
	if (hash_index_insert(&fs->index, h, (uint32_t)fs->count))
		return NULL;
	fs->items[fs->count] = (struct func){ .name = name, .kernel = kernel };
	return &fs->items[fs->count++];
}

static const char *frame_name(const json_t *frame, bool *kernel, bool *error)
{
	const char *name = json_string_value(json_object_get(frame, "name"));
	const char *kind = json_string_value(json_object_get(frame, "kind"));

	*kernel = kind && strcmp(kind, "kernel") == 0;
	*error = kind && strcmp(kind, "error") == 0;
	return name;
}

static double percent(uint64_t part, uint64_t total)
{
	return total ? 100.0 * (double)part / (double)total : 0.0;
}

static int by_self(const void *a, const void *b)
{
	const struct func *x = a, *y = b;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int by_total(const void *a, const void *b)
{
	const struct func *x = a, *y = b;

	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void print_funcs(struct funcs *fs, bool self, uint32_t top, uint64_t total, FILE *out)
{
	size_t shown = 0;

	qsort(fs->items, fs->count, sizeof(*fs->items), self ? by_self : by_total);
	fprintf(out, "\nTop functions by %s samples:\n  %10s  %7s  %s\n",
		self ? "self" : "total (inclusive)", self ? "SELF" : "TOTAL", "%", "FUNCTION");
	for (size_t i = 0; i < fs->count && shown < top; i++) {
		uint64_t v = self ? fs->items[i].self : fs->items[i].total;
		if (v == 0)
			break;
		fprintf(out, "  %10" PRIu64 "  %6.2f%%  %s%s\n", v, percent(v, total), fs->items[i].name,
			fs->items[i].kernel ? " [k]" : "");
		shown++;
	}
}

/*
 * Stacks that differ only in instruction offsets (a loop's leaf at several addresses) render
 * identically once symbolized: they are shown as one, with their counts summed.
 */
struct stack_group {
	const json_t *first; /* a representative stack (borrowed) */
	uint64_t count;
};

struct stack_groups {
	struct stack_group *items;
	size_t count;
	struct hash_index index;
};

static bool frame_same(const json_t *a, const json_t *b)
{
	const char *na = json_string_value(json_object_get(a, "name"));
	const char *nb = json_string_value(json_object_get(b, "name"));
	const char *ka = json_string_value(json_object_get(a, "kind"));
	const char *kb = json_string_value(json_object_get(b, "kind"));

	return na && nb && strcmp(na, nb) == 0 && (ka == kb || (ka && kb && strcmp(ka, kb) == 0)) &&
	       json_is_true(json_object_get(a, "inlined")) == json_is_true(json_object_get(b, "inlined"));
}

struct group_key {
	const struct stack_groups *gs;
	const json_t *stack;
};

static bool stack_same(const void *ctx, uint32_t idx)
{
	const struct group_key *k = ctx;
	const json_t *a = k->gs->items[idx].first, *b = k->stack;
	const json_t *pa = json_object_get(a, "process"), *pb = json_object_get(b, "process");
	const json_t *fa = json_object_get(a, "frames"), *fb = json_object_get(b, "frames");

	if (!json_equal(json_object_get(pa, "pid"), json_object_get(pb, "pid")) ||
	    !json_equal(json_object_get(pa, "comm"), json_object_get(pb, "comm")) ||
	    json_array_size(fa) != json_array_size(fb))
		return false;
	for (size_t i = 0; i < json_array_size(fa); i++)
		if (!frame_same(json_array_get(fa, i), json_array_get(fb, i)))
			return false;
	return true;
}

static uint64_t stack_hash(const json_t *stack)
{
	const json_t *process = json_object_get(stack, "process");
	const json_t *frames = json_object_get(stack, "frames");
	const char *comm = json_string_value(json_object_get(process, "comm"));
	uint64_t h = sysom_hash_mix((uint64_t)json_integer_value(json_object_get(process, "pid")),
				    comm ? sysom_hash64(comm, strlen(comm), 0) : 0);

	for (size_t i = 0; i < json_array_size(frames); i++) {
		const char *name = json_string_value(json_object_get(json_array_get(frames, i), "name"));
		h = sysom_hash_mix(h, name ? sysom_hash64(name, strlen(name), i) : i);
	}
	return h;
}

static int by_group_count(const void *a, const void *b)
{
	const struct stack_group *x = a, *y = b;

	return x->count != y->count ? (x->count > y->count ? -1 : 1) : 0;
}

/* Groups the document's stacks by how they render; sorted by count, largest first. */
static int group_stacks(const json_t *stacks, struct stack_groups *gs)
{
	size_t n = json_array_size(stacks);
	int rc;

	gs->items = calloc(n ? n : 1, sizeof(*gs->items));
	if (!gs->items)
		return -ENOMEM;
	if ((rc = hash_index_init(&gs->index, (uint32_t)n)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		const json_t *stack = json_array_get(stacks, i);
		const json_t *count = json_object_get(stack, "count");
		struct group_key key = { gs, stack };
		if (!json_is_array(json_object_get(stack, "frames")) || !json_is_integer(count))
			return -EINVAL;
		uint64_t h = stack_hash(stack);
		uint32_t idx = hash_index_find(&gs->index, h, stack_same, &key);
		if (idx == HASH_INDEX_NONE) {
			idx = (uint32_t)gs->count++;
			gs->items[idx].first = stack;
			if ((rc = hash_index_insert(&gs->index, h, idx)))
				return rc;
		}
		gs->items[idx].count += (uint64_t)json_integer_value(count);
	}
	/* The index is not used after sorting. */
	qsort(gs->items, gs->count, sizeof(*gs->items), by_group_count);
	return 0;
}

/* Prints one stack (frames leaf to root) and adds its frames to the function tallies. */
static int stack_render(const json_t *stack, uint64_t count, size_t index, uint32_t top,
			uint64_t total, struct funcs *fs, FILE *out)
{
	const json_t *frames = json_object_get(stack, "frames");
	const json_t *process = json_object_get(stack, "process");
	const json_t *pid = json_object_get(process, "pid");
	const char *comm = json_string_value(json_object_get(process, "comm"));
	size_t n = json_array_size(frames);

	if (!json_is_array(frames))
		return -EINVAL;
	if (index < top) {
		fprintf(out, "\n  #%zu  %" PRIu64 " samples (%.2f%%)  %s", index + 1, count,
			percent(count, total), comm ? comm : "?");
		if (json_is_integer(pid))
			fprintf(out, " [pid %" JSON_INTEGER_FORMAT "]\n", json_integer_value(pid));
		else
			fprintf(out, " [%" JSON_INTEGER_FORMAT " processes]\n",
				json_integer_value(json_object_get(process, "processes")));
	}
	for (size_t j = n; j-- > 0;) {
		bool kernel, error;
		const json_t *frame = json_array_get(frames, j);
		const char *name = frame_name(frame, &kernel, &error);
		if (!name)
			return -EINVAL;
		/* An inlined call is a frame of its own (innermost last) but the same function
		 * as its out-of-line copies: it is marked here and tallied under its name. */
		if (index < top)
			fprintf(out, "        %s%s%s\n", name, kernel ? " [k]" : "",
				json_is_true(json_object_get(frame, "inlined")) ? " [inlined]" : "");
		if (error)
			continue; /* "[truncated: ...]" says how the unwind ended: not a function */
		struct func *f = func_get(fs, name, kernel);
		if (!f)
			return -ENOMEM;
		if (j == n - 1)
			f->self += count;
		/* Recursion repeats a function in one stack: count the stack once. */
		if (f->last_stack != index + 1) {
			f->total += count;
			f->last_stack = index + 1;
		}
	}
	return 0;
}

int ctl_top_render(const json_t *doc, uint32_t top, FILE *out)
{
	const json_t *stacks = json_object_get(doc, "stacks");
	const json_t *total_j = json_object_get(doc, "total");
	struct funcs fs = { 0 };
	struct stack_groups gs = { 0 };
	uint64_t total;
	size_t n;
	int rc = 0;

	if (!json_is_array(stacks) || !json_is_integer(total_j))
		return -EINVAL;
	total = (uint64_t)json_integer_value(total_j);
	n = json_array_size(stacks);
	const char *unit = json_string_value(json_object_get(doc, "unit"));
	fprintf(out, "Total: %" PRIu64 " %s", total, unit ? unit : "samples");
	if (json_is_string(json_object_get(doc, "from")) && json_is_string(json_object_get(doc, "to")))
		fprintf(out, " from %s to %s", json_string_value(json_object_get(doc, "from")),
			json_string_value(json_object_get(doc, "to")));
	fprintf(out, "\n");
	if (total == 0 || n == 0) {
		fprintf(out, "No samples match.\n");
		return 0;
	}
	if (json_is_true(json_object_get(doc, "truncated")))
		fprintf(out, "(the server returned the %zu largest stacks; percentages are of the total)\n",
			n);
	if ((rc = hash_index_init(&fs.index, 256)) || (rc = group_stacks(stacks, &gs)))
		goto cleanup;
	fprintf(out, "\nTop %zu stacks (leaf first):\n", gs.count < top ? gs.count : (size_t)top);
	for (size_t i = 0; i < gs.count; i++)
		if ((rc = stack_render(gs.items[i].first, gs.items[i].count, i, top, total, &fs, out)))
			goto cleanup;
	print_funcs(&fs, true, top, total, out);
	print_funcs(&fs, false, top, total, out);
cleanup:
	free(fs.items);
	hash_index_free(&fs.index);
	free(gs.items);
	hash_index_free(&gs.index);
	return rc;
}

static const char *str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "-";
}

int ctl_nodes_render(const json_t *doc, FILE *out)
{
	const json_t *nodes = json_object_get(doc, "nodes");
	size_t i;
	json_t *n;

	if (!json_is_array(nodes))
		return -EINVAL;
	fprintf(out, "%-32s  %-20s  %-20s  %-16s  %8s  %s\n", "NODE ID", "HOSTNAME", "KERNEL",
		"AGENT", "BATCHES", "LAST SEEN");
	json_array_foreach(nodes, i, n) {
		fprintf(out, "%-32s  %-20s  %-20s  %-16s  %8" JSON_INTEGER_FORMAT "  %s\n",
			str(n, "node_id"), str(n, "hostname"), str(n, "kernel_release"),
			str(n, "agent_version"), json_integer_value(json_object_get(n, "batches")),
			str(n, "last_seen"));
	}
	if (json_array_size(nodes) == 0)
		fprintf(out, "(no nodes have sent data)\n");
	return 0;
}

/* An identity field, "" when absent. */
static const char *istr(const json_t *id, const char *key)
{
	const char *s = json_string_value(json_object_get(id, key));

	return s ? s : "";
}

/* Who a process belongs to, in one word: namespace/pod[/container], pod:<uid>,
 * container:<12 hex>, slurm:<job>[.<step>], the systemd unit, or "-". */
static void identity_owner(const json_t *id, char *out, size_t size)
{
	const char *pod = istr(id, "pod"), *ns = istr(id, "namespace"), *uid = istr(id, "pod_uid");
	const char *cname = istr(id, "container"), *cid = istr(id, "container_id");
	const json_t *job = json_object_get(id, "slurm_job");

	if (!json_is_object(id))
		snprintf(out, size, "-");
	else if (*pod)
		snprintf(out, size, "%s/%s%s%s", ns, pod, *cname ? "/" : "", cname);
	else if (*uid)
		snprintf(out, size, "pod:%s", uid);
	else if (*cid)
		snprintf(out, size, "container:%.12s", cid);
	else if (json_is_integer(job))
		snprintf(out, size, "slurm:%" JSON_INTEGER_FORMAT "%s%s", json_integer_value(job),
			 *istr(id, "slurm_step") ? "." : "", istr(id, "slurm_step"));
	else if (*istr(id, "unit"))
		snprintf(out, size, "%s", istr(id, "unit"));
	else
		snprintf(out, size, "-");
}

int ctl_processes_render(const json_t *doc, FILE *out)
{
	const json_t *list = json_object_get(doc, "processes");
	size_t i;
	json_t *p;

	if (!json_is_array(list))
		return -EINVAL;
	fprintf(out, "%10s  %8s  %-16s  %-20s  %-32s  %s\n", "SAMPLES", "PID", "COMM", "NODE",
		"OWNER", "COMMAND");
	json_array_foreach(list, i, p) {
		char owner[600];

		identity_owner(json_object_get(p, "identity"), owner, sizeof(owner));
		fprintf(out, "%10" JSON_INTEGER_FORMAT "  %8" JSON_INTEGER_FORMAT
			     "  %-16s  %-20s  %-32s  %s\n",
			json_integer_value(json_object_get(p, "samples")),
			json_integer_value(json_object_get(p, "pid")), str(p, "comm"),
			str(p, "hostname"), owner, str(p, "cmdline"));
	}
	if (json_array_size(list) == 0)
		fprintf(out, "(no samples in the range)\n");
	return 0;
}

int ctl_jobs_render(const json_t *doc, FILE *out)
{
	const json_t *list = json_object_get(doc, "jobs");
	size_t i;
	json_t *j;

	if (!json_is_array(list))
		return -EINVAL;
	fprintf(out, "%-32s  %6s  %6s  %9s  %5s  %s\n", "JOB", "WORLD", "RANKS", "PROCESSES",
		"NODES", "LAST SEEN");
	json_array_foreach(list, i, j) {
		fprintf(out, "%-32s  %6" JSON_INTEGER_FORMAT "  %6" JSON_INTEGER_FORMAT
			     "  %9" JSON_INTEGER_FORMAT "  %5" JSON_INTEGER_FORMAT "  %s\n",
			str(j, "job"), json_integer_value(json_object_get(j, "world_size")),
			json_integer_value(json_object_get(j, "ranks")),
			json_integer_value(json_object_get(j, "processes")),
			json_integer_value(json_object_get(j, "nodes")), str(j, "last_seen"));
	}
	if (json_array_size(list) == 0)
		fprintf(out, "(no training jobs seen)\n");
	return 0;
}

int ctl_collectives_render(const json_t *doc, FILE *out)
{
	const json_t *list = json_object_get(doc, "instances");
	size_t i;
	json_t *inst;

	if (!json_is_array(list))
		return -EINVAL;
	fprintf(out, "%-14s  %8s  %-16s  %12s  %9s  %10s  %s\n", "OP", "SEQ", "COMMUNICATOR", "BYTES",
		"RANKS", "SKEW ms", "LAST TO ENTER");
	json_array_foreach(list, i, inst) {
		const json_t *calls = json_object_get(inst, "calls"), *nranks;
		json_int_t last_entry = 0;
		const json_t *last = NULL;
		char ranks[32], who[96] = "-";
		size_t k;
		json_t *c;

		if (!json_is_array(calls))
			return -EINVAL;
		json_array_foreach(calls, k, c) {
			json_int_t entry = json_integer_value(json_object_get(c, "entry_ns"));
			if (!last || entry > last_entry) {
				last = c;
				last_entry = entry;
			}
		}
		nranks = json_object_get(inst, "nranks");
		if (json_is_integer(nranks))
			snprintf(ranks, sizeof(ranks), "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
				 json_integer_value(json_object_get(inst, "ranks_seen")),
				 json_integer_value(nranks));
		else
			snprintf(ranks, sizeof(ranks), "%" JSON_INTEGER_FORMAT "/?",
				 json_integer_value(json_object_get(inst, "ranks_seen")));
		if (last && json_is_integer(json_object_get(last, "rank")))
			snprintf(who, sizeof(who), "rank %" JSON_INTEGER_FORMAT " (%s pid %" JSON_INTEGER_FORMAT ")",
				 json_integer_value(json_object_get(last, "rank")), str(last, "hostname"),
				 json_integer_value(json_object_get(last, "pid")));
		else if (last)
			snprintf(who, sizeof(who), "%s pid %" JSON_INTEGER_FORMAT, str(last, "hostname"),
				 json_integer_value(json_object_get(last, "pid")));
		fprintf(out, "%-14s  %8" JSON_INTEGER_FORMAT "  %-16s  %12" JSON_INTEGER_FORMAT
			     "  %9s  %10.3f  %s%s\n",
			str(inst, "op"), json_integer_value(json_object_get(inst, "seq")),
			str(inst, "comm"), json_integer_value(json_object_get(inst, "bytes")), ranks,
			(double)json_integer_value(json_object_get(inst, "skew_ns")) / 1e6, who,
			json_is_true(json_object_get(inst, "complete")) ? "" : "  [incomplete]");
	}
	if (json_array_size(list) == 0)
		fprintf(out, "(no collective instances in the range)\n");
	if (json_is_true(json_object_get(doc, "truncated")))
		fprintf(out, "(truncated: narrow the range or raise --limit)\n");
	return 0;
}

static json_int_t int_of(const json_t *obj, const char *key)
{
	return json_integer_value(json_object_get(obj, key));
}

static void rank_text(const json_t *proc, char *out, size_t len)
{
	if (json_is_integer(json_object_get(proc, "rank")))
		snprintf(out, len, "%" JSON_INTEGER_FORMAT, int_of(proc, "rank"));
	else
		snprintf(out, len, "?");
}

int ctl_gpu_render(const json_t *doc, uint32_t top, FILE *out)
{
	const json_t *procs = json_object_get(doc, "processes");
	size_t i, k, links = 0, colls = 0;
	json_t *p, *e;
	char rank[16];

	if (!json_is_array(procs))
		return -EINVAL;
	fprintf(out, "%-6s  %-16s  %8s  %12s  %10s  %9s  %s\n", "RANK", "HOST", "PID", "GPU ms",
		"KERNELS", "vs MEDIAN", "TOP KERNELS (share of GPU time)");
	json_array_foreach(procs, i, p) {
		const json_t *kernels = json_object_get(p, "kernels");
		const json_t *ratio = json_object_get(p, "gpu_time_ratio_to_median");
		json_int_t gpu = int_of(p, "gpu_kernel_ns");
		char vs[16] = "-";

		if (!json_is_array(kernels))
			return -EINVAL;
		rank_text(p, rank, sizeof(rank));
		if (json_is_number(ratio))
			snprintf(vs, sizeof(vs), "%.2fx", json_number_value(ratio));
		fprintf(out, "%-6s  %-16s  %8" JSON_INTEGER_FORMAT "  %12.3f  %10" JSON_INTEGER_FORMAT
			     "  %9s  ",
			rank, str(p, "hostname"), int_of(p, "pid"), (double)gpu / 1e6,
			int_of(p, "kernel_executions"), vs);
		json_array_foreach(kernels, k, e) {
			if (k >= 3 || k >= top)
				break;
			fprintf(out, "%s%s (%.0f%%)", k ? ", " : "", str(e, "name"),
				gpu ? 100.0 * (double)int_of(e, "total_ns") / (double)gpu : 0.0);
		}
		fprintf(out, "%s\n", json_array_size(kernels) ? "" : "-");
		colls += json_array_size(json_object_get(p, "collectives"));
		links += json_array_size(json_object_get(p, "links"));
	}
	if (json_array_size(procs) == 0)
		fprintf(out, "(no GPU timing for this job in the range)\n");
	if (colls) {
		fprintf(out, "\n%-6s  %-14s  %-8s  %-7s  %-12s  %5s  %10s  %14s  %12s  %10s\n", "RANK",
			"OP", "ALGO", "PROTO", "DATATYPE", "PEER", "COUNT", "BYTES/OP", "GPU us/OP",
			"ALGBW GB/s");
		json_array_foreach(procs, i, p) {
			rank_text(p, rank, sizeof(rank));
			json_array_foreach(json_object_get(p, "collectives"), k, e) {
				const json_t *gpu = json_object_get(e, "gpu");
				json_int_t count = int_of(e, "count");
				char peer[16] = "-", us[24] = "-", bw[24] = "-";

				if (json_is_integer(json_object_get(e, "peer")))
					snprintf(peer, sizeof(peer), "%" JSON_INTEGER_FORMAT, int_of(e, "peer"));
				if (json_is_object(gpu)) {
					snprintf(us, sizeof(us), "%.1f", (double)int_of(gpu, "mean_ns") / 1e3);
					snprintf(bw, sizeof(bw), "%.2f",
						 json_number_value(json_object_get(gpu, "algbw_gbps")));
				}
				fprintf(out, "%-6s  %-14s  %-8s  %-7s  %-12s  %5s  %10" JSON_INTEGER_FORMAT
					     "  %14.0f  %12s  %10s\n",
					rank, str(e, "func"), str(e, "algo"), str(e, "proto"),
					str(e, "datatype"), peer, count,
					count ? (double)int_of(e, "bytes") / (double)count : 0.0, us, bw);
			}
		}
	}
	if (links) {
		fprintf(out, "\n%-6s  %6s  %7s  %10s  %12s  %12s  %6s  %s\n", "RANK", "PEER", "CHANNEL",
			"TRANSFERS", "LATENCY us", "BW GB/s", "R2", "(MIN fit: latency us, GB/s)");
		json_array_foreach(procs, i, p) {
			rank_text(p, rank, sizeof(rank));
			json_array_foreach(json_object_get(p, "links"), k, e) {
				const json_t *fit = json_object_get(e, "fit");
				const json_t *mf = json_object_get(e, "min_fit");
				char ch[16] = "all", lat[24] = "-", bw[24] = "-", r2[16] = "-",
				     minf[64] = "";

				if (json_is_integer(json_object_get(e, "channel")))
					snprintf(ch, sizeof(ch), "%" JSON_INTEGER_FORMAT,
						 int_of(e, "channel"));
				if (json_is_object(fit)) {
					snprintf(lat, sizeof(lat), "%.2f",
						 json_number_value(json_object_get(fit, "latency_ns")) / 1e3);
					snprintf(bw, sizeof(bw), "%.2f",
						 json_number_value(json_object_get(fit, "bandwidth_gbps")));
					snprintf(r2, sizeof(r2), "%.3f",
						 json_number_value(json_object_get(fit, "r2")));
				}
				if (json_is_object(mf))
					snprintf(minf, sizeof(minf), "(%.2f, %.2f)",
						 json_number_value(json_object_get(mf, "latency_ns")) / 1e3,
						 json_number_value(json_object_get(mf, "bandwidth_gbps")));
				fprintf(out, "%-6s  %6" JSON_INTEGER_FORMAT "  %7s  %10" JSON_INTEGER_FORMAT
					     "  %12s  %12s  %6s  %s\n",
					rank, int_of(e, "peer"), ch, int_of(e, "transfers"), lat, bw, r2,
					minf);
			}
		}
	}
	if (json_is_true(json_object_get(doc, "truncated")))
		fprintf(out, "(truncated: narrow the range)\n");
	return 0;
}

static double dbl_of(const json_t *obj, const char *key)
{
	return json_number_value(json_object_get(obj, key));
}

int ctl_stragglers_render(const json_t *doc, FILE *out)
{
	const json_t *comms = json_object_get(doc, "communicators");
	const json_t *job = json_object_get(doc, "stragglers");
	size_t i, k;
	json_t *c, *r;

	const json_t *pipe = json_object_get(doc, "pipeline");
	const json_t *pstages = json_object_get(pipe, "stages"), *plinks = json_object_get(pipe, "links");

	if (!json_is_array(comms) || !json_is_array(job))
		return -EINVAL;
	if (json_array_size(job) == 0 && int_of(pipe, "slow_stages") == 0 &&
	    int_of(pipe, "slow_links") == 0)
		fprintf(out, "No straggler.\n");
	/* Pipeline stragglers first: a slow stage or link holds every stage of its pipeline. */
	json_array_foreach(pstages, i, r) {
		if (!json_is_true(json_object_get(r, "slow")))
			continue;
		const char *clock = json_string_value(json_object_get(r, "clock"));
		if (clock && !strcmp(clock, "gpu")) /* its GPU compute alone */
			fprintf(out, "PIPELINE STRAGGLER: stage %" JSON_INTEGER_FORMAT " (rank %"
				     JSON_INTEGER_FORMAT ", %s pid %" JSON_INTEGER_FORMAT ") of %s is "
				     "slow on the GPU: +%.3f ms of GPU compute per microbatch (%.3f ms; "
				     "host busy %.3f ms like the other stages)\n",
				int_of(r, "stage"), int_of(r, "job_rank"), str(r, "hostname"),
				int_of(r, "pid"), str(r, "communicator"), dbl_of(r, "gpu_excess_ms"),
				dbl_of(r, "gpu_busy_ms"), dbl_of(r, "busy_ms"));
		else
			fprintf(out, "PIPELINE STRAGGLER: stage %" JSON_INTEGER_FORMAT " (rank %"
				     JSON_INTEGER_FORMAT ", %s pid %" JSON_INTEGER_FORMAT ") of %s is "
				     "slow: +%.3f ms per microbatch (%.3f ms busy)\n",
				int_of(r, "stage"), int_of(r, "job_rank"), str(r, "hostname"),
				int_of(r, "pid"), str(r, "communicator"), dbl_of(r, "excess_ms"),
				dbl_of(r, "busy_ms"));
		const json_t *dg = json_object_get(r, "diagnosis");
		if (json_is_object(dg)) {
			fprintf(out, "  layer: %s: %s\n", str(dg, "layer"), str(dg, "summary"));
			fprintf(out, "  action: %s\n", str(dg, "action"));
		}
	}
	json_array_foreach(plinks, i, r)
		if (json_is_true(json_object_get(r, "slow")))
			fprintf(out, "PIPELINE STRAGGLER: link %" JSON_INTEGER_FORMAT "->%" JSON_INTEGER_FORMAT
				     " (rank %" JSON_INTEGER_FORMAT " on %s to rank %" JSON_INTEGER_FORMAT
				     " on %s) of %s is slow: %.3f ms per transfer, +%.3f ms over the other "
				     "links\n",
				int_of(r, "src"), int_of(r, "dst"), int_of(r, "src_job_rank"),
				str(r, "src_host"), int_of(r, "dst_job_rank"), str(r, "dst_host"),
				str(r, "communicator"), dbl_of(r, "transfer_ms"), dbl_of(r, "excess_ms"));
	json_array_foreach(job, i, r) {
		fprintf(out, "STRAGGLER: rank %" JSON_INTEGER_FORMAT " (%s pid %" JSON_INTEGER_FORMAT
			     "), %s, up to %.3f ms later than the other ranks, in",
			int_of(r, "rank"), str(r, "hostname"), int_of(r, "pid"), str(r, "persistence"),
			dbl_of(r, "max_excess_ms"));
		json_array_foreach(json_object_get(r, "communicators"), k, c)
			fprintf(out, " %s", json_string_value(c) ? json_string_value(c) : "?");
		fprintf(out, "\n");
		const json_t *dg = json_object_get(r, "diagnosis");
		if (json_is_object(dg)) {
			fprintf(out, "  layer: %s: %s\n", str(dg, "layer"), str(dg, "summary"));
			fprintf(out, "  action: %s\n", str(dg, "action"));
		}
	}
	json_array_foreach(comms, i, c) {
		const json_t *ranks = json_object_get(c, "ranks");

		if (!json_is_array(ranks))
			return -EINVAL;
		fprintf(out, "\ncommunicator %s: %" JSON_INTEGER_FORMAT " ranks, %" JSON_INTEGER_FORMAT
			     " instances analysed, %" JSON_INTEGER_FORMAT " incomplete\n",
			str(c, "comm"), int_of(c, "nranks"), int_of(c, "instances"),
			int_of(c, "incomplete"));
		fprintf(out, "  %-6s  %-16s  %8s  %12s  %10s  %8s  %8s  %6s  %s\n", "RANK", "HOST",
			"PID", "TRIMMED ms", "EXCESS ms", "z", "FLAGGED", "LAST", "VERDICT");
		json_array_foreach(ranks, k, r) {
			char z[16] = "inf";
			if (json_is_number(json_object_get(r, "z")))
				snprintf(z, sizeof(z), "%.1f", dbl_of(r, "z"));
			fprintf(out, "  %-6" JSON_INTEGER_FORMAT "  %-16s  %8" JSON_INTEGER_FORMAT
				     "  %12.3f  %10.3f  %8s  %7.0f%%  %5.0f%%  %s\n",
				int_of(r, "rank"), str(r, "hostname"), int_of(r, "pid"),
				dbl_of(r, "trimmed_lateness_ms"), dbl_of(r, "excess_ms"), z,
				100 * dbl_of(r, "flagged_fraction"),
				100 * dbl_of(r, "last_to_enter_fraction"),
				json_is_true(json_object_get(r, "straggler")) ? str(r, "persistence")
										: "-");
		}
	}
	if (json_array_size(comms) == 0)
		fprintf(out, "(no collective instances in the range)\n");
	if (json_array_size(pstages)) {
		fprintf(out, "\npipeline: %" JSON_INTEGER_FORMAT " transfers paired, %" JSON_INTEGER_FORMAT
			     " sends and %" JSON_INTEGER_FORMAT " receives unmatched\n",
			int_of(pipe, "transfers"), int_of(pipe, "unmatched_sends"),
			int_of(pipe, "unmatched_recvs"));
		fprintf(out, "  %-16s  %5s  %6s  %12s  %12s  %10s  %12s  %s\n", "COMMUNICATOR",
			"STAGE", "RANK", "BUSY ms", "RECV WAIT ms", "EXCESS ms", "GPU BUSY ms",
			"VERDICT");
		json_array_foreach(pstages, i, r) {
			char gpu[32] = "-", verdict[16] = "-";
			const char *clock = json_string_value(json_object_get(r, "clock"));
			if (json_is_number(json_object_get(r, "gpu_busy_ms")))
				snprintf(gpu, sizeof(gpu), "%.3f", dbl_of(r, "gpu_busy_ms"));
			if (json_is_true(json_object_get(r, "slow")))
				snprintf(verdict, sizeof(verdict), "slow (%s)", clock ? clock : "host");
			fprintf(out, "  %-16s  %5" JSON_INTEGER_FORMAT "  %6" JSON_INTEGER_FORMAT
				     "  %12.3f  %12.3f  %10.3f  %12s  %s\n",
				str(r, "communicator"), int_of(r, "stage"), int_of(r, "job_rank"),
				dbl_of(r, "busy_ms"), dbl_of(r, "recv_wait_ms"), dbl_of(r, "excess_ms"),
				gpu, verdict);
		}
		fprintf(out, "  %-16s  %8s  %12s  %12s  %10s  %12s  %s\n", "COMMUNICATOR", "LINK",
			"TRANSFER ms", "WAIT ms", "EXCESS ms", "GPU ms", "VERDICT");
		json_array_foreach(plinks, i, r) {
			char link[32], gpu[32] = "-";
			snprintf(link, sizeof(link), "%" JSON_INTEGER_FORMAT "->%" JSON_INTEGER_FORMAT,
				 int_of(r, "src"), int_of(r, "dst"));
			if (json_is_number(json_object_get(r, "gpu_transfer_ms")))
				snprintf(gpu, sizeof(gpu), "%.3f", dbl_of(r, "gpu_transfer_ms"));
			fprintf(out, "  %-16s  %8s  %12.3f  %12.3f  %10.3f  %12s  %s\n",
				str(r, "communicator"), link, dbl_of(r, "transfer_ms"),
				dbl_of(r, "wait_ms"), dbl_of(r, "excess_ms"), gpu,
				json_is_true(json_object_get(r, "slow")) ? "slow" : "-");
		}
	}
	return 0;
}

int ctl_hosts_render(const json_t *doc, FILE *out)
{
	const json_t *nodes = json_object_get(doc, "nodes");
	size_t i, shown = 0;
	json_t *n, *d;

	if (!json_is_array(nodes))
		return -EINVAL;
	if (json_array_size(nodes) == 0) {
		fprintf(out, "(no host signals from the job's nodes in the range)\n");
		return 0;
	}
	fprintf(out, "%-20s  %-32s  %8s  %8s  %7s  %-9s  %s\n", "HOST", "NODE", "SCORE",
		"THRESH", "PERIODS", "VERDICT", "DEVIATIONS (z; peers, own)");
	for (int pass = 0; pass < 2; pass++) { /* anomalous nodes first */
		json_array_foreach(nodes, i, n) {
			bool bad = json_is_true(json_object_get(n, "anomalous"));
			size_t k;
			if (bad != (pass == 0))
				continue;
			const char *verdict = bad ? "ANOMALOUS"
					      : json_is_true(json_object_get(n, "stale"))   ? "stale"
					      : !json_is_true(json_object_get(n, "has_peers")) ? "no-peers"
					      : !json_is_true(json_object_get(n, "has_history"))
							? "learning"
							: "normal";
			fprintf(out, "%-20s  %-32s  %8.1f  %8.1f  %7" JSON_INTEGER_FORMAT "  %-9s ",
				str(n, "hostname"), str(n, "node_id"), dbl_of(n, "score"),
				dbl_of(n, "threshold"), int_of(n, "periods_over"), verdict);
			json_array_foreach(json_object_get(n, "deviations"), k, d) {
				if (k >= 3)
					break;
				fprintf(out, " %s %.4g (z %.1f; %.4g, %.4g)", str(d, "signal"),
					dbl_of(d, "value"), dbl_of(d, "z"), dbl_of(d, "peer_median"),
					dbl_of(d, "own_median"));
			}
			fprintf(out, "\n");
			shown++;
		}
	}
	return shown ? 0 : -EINVAL;
}

int ctl_patterns_render(const json_t *doc, uint32_t top, FILE *out)
{
	const json_t *findings = json_object_get(doc, "findings");
	const json_t *fns = json_object_get(doc, "functions");
	const json_t *hist = json_object_get(doc, "history");
	const json_t *changes = json_object_get(hist, "changes");
	size_t i;
	json_t *f;

	if (!json_is_array(findings) || !json_is_array(fns) || !json_is_object(hist))
		return -EINVAL;
	fprintf(out, "%" JSON_INTEGER_FORMAT " ranks, %zu key functions\n", int_of(doc, "workers"),
		json_array_size(fns));
	if (json_array_size(findings) == 0)
		fprintf(out, "No rank abnormal in any function.\n");
	else
		fprintf(out, "%-6s  %-10s  %-32s  %-5s  %12s  %12s  %7s  %6s  %s\n", "RANK", "KIND",
			"FUNCTION", "DIM", "VALUE", "MEDIAN", "z", "COST", "WHY");
	json_array_foreach(findings, i, f) {
		if (top && i >= top)
			break;
		fprintf(out, "%-6" JSON_INTEGER_FORMAT "  %-10s  %-32.32s  %-5s  %12.4f  %12.4f  %7.1f  "
			     "%5.1f%%  %s\n",
			int_of(f, "rank"), str(f, "kind"), str(f, "function"), str(f, "dimension"),
			dbl_of(f, "value"), dbl_of(f, "median"), dbl_of(f, "z"),
			100 * dbl_of(f, "cost"), str(f, "why"));
	}
	if (json_is_string(json_object_get(hist, "from"))) {
		fprintf(out, "\nagainst the job's history %s .. %s:\n", str(hist, "from"),
			str(hist, "to"));
		if (!json_array_size(changes))
			fprintf(out, "  no function changed for every rank\n");
		json_array_foreach(changes, i, f) {
			char change[32] = "new";
			if (json_is_number(json_object_get(f, "change")))
				snprintf(change, sizeof(change), "%+.0f%%", 100 * dbl_of(f, "change"));
			fprintf(out, "  ALL RANKS: %s %s: %s %.4f (was %.4f, %s)\n", str(f, "kind"),
				str(f, "function"), str(f, "dimension"), dbl_of(f, "now"),
				dbl_of(f, "then"), change);
		}
	}
	return 0;
}

int ctl_diagnoses_render(const json_t *doc, FILE *out)
{
	const json_t *list = json_object_get(doc, "diagnoses");
	size_t i;
	json_t *d;

	if (!json_is_array(list))
		return -EINVAL;
	if (json_array_size(list) == 0) {
		fprintf(out, "No diagnosis in the range.\n");
		return 0;
	}
	fprintf(out, "%-6s  %-8s  %-24s  %-10s  %-5s  %-7s  %-8s  %s\n", "ID", "STATUS", "OPENED",
		"KIND", "RANK", "LAYER", "SEVERITY", "JOB / SUMMARY");
	json_array_foreach(list, i, d) {
		char rank[16] = "-";
		if (json_is_integer(json_object_get(d, "rank")))
			snprintf(rank, sizeof(rank), "%" JSON_INTEGER_FORMAT, int_of(d, "rank"));
		fprintf(out, "%-6" JSON_INTEGER_FORMAT "  %-8s  %-24s  %-10s  %-5s  %-7s  %-8s  %s\n",
			int_of(d, "id"), str(d, "status"), str(d, "opened"), str(d, "kind"), rank,
			str(d, "layer"), str(d, "severity"), str(d, "job"));
		fprintf(out, "        %s\n", str(d, "summary"));
	}
	return 0;
}

struct diff_fn {
	const char *name; /* a key of the jansson object (borrowed) */
	double a, b, delta;
};

static int diff_fn_compare(const void *x, const void *y)
{
	const struct diff_fn *p = x, *q = y;
	double dp = fabs(p->delta), dq = fabs(q->delta);

	return dp < dq ? 1 : dp > dq ? -1 : strcmp(p->name, q->name);
}

int ctl_diff_render(const char *text, size_t len, uint32_t top, uint32_t rank_a, uint32_t rank_b,
		    FILE *out)
{
	json_t *fns = json_object();
	const char *p = text, *end = text + len;
	uint64_t total[2] = { 0, 0 };
	struct diff_fn *list = NULL;
	size_t n = 0;
	int rc = 0;

	if (!fns)
		return -ENOMEM;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		char line[65536], *sp2, *sp1, *frames[512];
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		unsigned long long c[2];
		int nf = 0;

		if (l == 0 || l >= sizeof(line)) {
			p += l + 1;
			continue;
		}
		memcpy(line, p, l);
		line[l] = '\0';
		p += l + 1;
		if (!(sp2 = strrchr(line, ' ')))
			goto bad;
		*sp2 = '\0';
		if (!(sp1 = strrchr(line, ' ')))
			goto bad;
		*sp1 = '\0';
		if (sscanf(sp1 + 1, "%llu", &c[0]) != 1 || sscanf(sp2 + 1, "%llu", &c[1]) != 1)
			goto bad;
		total[0] += c[0];
		total[1] += c[1];
		/* Frames after the process comm; each function counted once per stack. */
		for (char *save = NULL, *f = strtok_r(line, ";", &save); f && nf < 512;
		     f = strtok_r(NULL, ";", &save))
			frames[nf++] = f;
		for (int i = 1; i < nf; i++) {
			bool seen = false;
			for (int j = 1; j < i && !seen; j++)
				seen = strcmp(frames[i], frames[j]) == 0;
			if (seen)
				continue;
			json_t *v = json_object_get(fns, frames[i]);
			if (!v) {
				v = json_pack("[f,f]", 0.0, 0.0);
				if (!v || json_object_set_new(fns, frames[i], v)) {
					rc = -ENOMEM;
					goto cleanup;
				}
			}
			json_array_set_new(v, 0, json_real(json_number_value(json_array_get(v, 0)) + (double)c[0]));
			json_array_set_new(v, 1, json_real(json_number_value(json_array_get(v, 1)) + (double)c[1]));
		}
	}
	if (!(list = calloc(json_object_size(fns) + 1, sizeof(*list)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	const char *key;
	json_t *v;
	json_object_foreach(fns, key, v) {
		double a = total[0] ? json_number_value(json_array_get(v, 0)) / (double)total[0] : 0;
		double b = total[1] ? json_number_value(json_array_get(v, 1)) / (double)total[1] : 0;
		list[n++] = (struct diff_fn){ key, a, b, b - a };
	}
	qsort(list, n, sizeof(*list), diff_fn_compare);
	fprintf(out, "rank %u: %llu samples; rank %u: %llu samples\n", rank_a,
		(unsigned long long)total[0], rank_b, (unsigned long long)total[1]);
	if (!total[0] || !total[1])
		fprintf(out, "(one side has no samples in the range)\n");
	fprintf(out, "%10s  %8s  %8s  %s\n", "DELTA pp", "A %", "B %", "FUNCTION (on the stack)");
	for (size_t i = 0; i < n && i < top; i++)
		fprintf(out, "%+10.2f  %8.2f  %8.2f  %s\n", 100 * list[i].delta, 100 * list[i].a,
			100 * list[i].b, list[i].name);
	goto cleanup;
bad:
	rc = -EINVAL;
cleanup:
	free(list);
	json_decref(fns);
	return rc;
}

void ctl_error_text(const uint8_t *body, size_t len, char *out, size_t outlen)
{
	json_t *doc = len ? json_loadb((const char *)body, len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(doc, "error"));

	if (msg) {
		snprintf(out, outlen, "%s", msg);
	} else if (len) {
		size_t n = 0;
		while (n < len && n < 200 && body[n] != '\n' && body[n] != '\r')
			n++;
		snprintf(out, outlen, "%.*s", (int)n, (const char *)body);
	} else {
		snprintf(out, outlen, "(empty response)");
	}
	json_decref(doc);
}
