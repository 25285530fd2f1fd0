/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl command line: global flags, one option table per command, request URLs. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "ctl/ctl.h"

static const struct {
	const char *name;
	enum ctl_command command;
	const char *path;
} commands[] = {
	{ "nodes", CTL_NODES, "/api/v1/nodes" },
	{ "processes", CTL_PROCESSES, "/api/v1/processes" },
	{ "flamegraph", CTL_FLAMEGRAPH, "/api/v1/flamegraph" },
	{ "jobs", CTL_JOBS, "/api/v1/jobs" },
	{ "collectives", CTL_COLLECTIVES, "/api/v1/jobs/" }, /* + the job + /collectives */
	{ "gpu", CTL_GPU, "/api/v1/jobs/" },                 /* + the job + /gpu */
	{ "stragglers", CTL_STRAGGLERS, "/api/v1/jobs/" },   /* + the job + /stragglers */
	{ "diff", CTL_DIFF, "/api/v1/flamegraph/diff" },
	{ "diagnose", CTL_DIAGNOSE, "/api/v1/diagnoses" },
	{ "trace", CTL_TRACE, "/api/v1/jobs/" },             /* + the job + /trace */
	{ "patterns", CTL_PATTERNS, "/api/v1/jobs/" },       /* + the job + /patterns */
	{ "hosts", CTL_HOSTS, "/api/v1/jobs/" },             /* + the job + /hosts */
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

void ctl_usage(FILE *out)
{
	fputs("usage: sysomctl [--server URL] [--token-file F] COMMAND [options]\n"
	      "\n"
	      "  --server URL        sysom-server to ask (default $SYSOM_SERVER, else " CTL_DEFAULT_SERVER ")\n"
	      "  --token-file F      file whose first line is the API's bearer token\n"
	      "\n"
	      "commands:\n"
	      "  nodes [--format table|json]\n"
	      "      nodes that sent data: hostname, kernel, agent, batches, last seen\n"
	      "  processes [--node N] [--pid P] [--comm C] [--from T] [--to T] [--limit N]\n"
	      "            [--namespace NS] [--pod POD] [--container C] [--unit U] [--slurm-job J]\n"
	      "            [--format table|json]\n"
	      "      processes with their sample counts in the time range\n"
	      "  flamegraph [--node N] [--pid P] [--comm C] [--job J [--rank R]] [--from T] [--to T]\n"
	      "             [--namespace NS] [--pod POD] [--container C] [--unit U] [--slurm-job J]\n"
	      "             [--kind K] [--format top|folded|json|pprof|speedscope] [--limit N]\n"
	      "             [--top N] [-o FILE]\n"
	      "      CPU stacks over the range (--kind cpu, the default), GPU kernel launches by\n"
	      "      launching stack (--kind gpu-launch) or GPU kernel time by launching stack\n"
	      "      (--kind gpu-time), time threads spent blocked, in microseconds (--kind off-cpu),\n"
	      "      or one process's on-CPU plus off-CPU time in microseconds (--kind wall, with\n"
	      "      --pid or --job and --rank): a terminal summary (top, the default), folded stacks for\n"
	      "      flamegraph.pl, the server's JSON, a gzipped pprof profile (go tool pprof,\n"
	      "      Pyroscope, Grafana; binary: needs -o FILE on a terminal) or a speedscope file\n"
	      "  jobs [--namespace NS] [--pod POD] [--container C] [--unit U] [--slurm-job J]\n"
	      "       [--format table|json]\n"
	      "      training jobs seen: world size, ranks, processes, nodes, last seen\n"
	      "  collectives --job J [--comm KEY] [--op OP] [--from T] [--to T] [--limit N]\n"
	      "              [--format table|json]\n"
	      "      NCCL collective instances of a job matched across its ranks: skew between\n"
	      "      the first and the last rank to enter, and which rank came last\n"
	      "  gpu --job J [--rank R] [--from T] [--to T] [--top N] [--format table|json]\n"
	      "      GPU-side timing of a job's ranks: kernel time and its ratio to the job's\n"
	      "      median, top kernels, NCCL operations timed on the GPU, link latency and\n"
	      "      bandwidth fits\n"
	      "  stragglers --job J [--comm KEY] [--from T] [--to T] [--k K] [--window W]\n"
	      "             [--min-excess-ms M] [--format table|json]\n"
	      "      slow ranks per communicator: entry lateness against the other ranks over the\n"
	      "      last W collective instances, median + k MAD (default k=3.5, W=100, 1 ms)\n"
	      "  patterns --job J [--from T] [--to T] [--k K] [--history-from T --history-to T]\n"
	      "           [--limit N] [--top N] [--format table|json]\n"
	      "      behaviour patterns (EROICA): per rank and key function (NCCL calls, GPU\n"
	      "      kernels, hot CPU functions) share of time, mean duration and variation;\n"
	      "      the abnormal (rank, function) pairs ranked, and what changed for every rank\n"
	      "      against the job's history (its baseline stretch, or the one given)\n"
	      "  hosts --job J [--from T] [--to T] [--format table|json]\n"
	      "      host anomaly scores (Reveal) of the job's nodes: host signals (PSI, TCP\n"
	      "      retransmits, drops, disk latency, memory, clocks) against each node's history\n"
	      "      and its peers; anomalous nodes first, with their deviating signals\n"
	      "  diff --job J --a RANK --b RANK [--from T] [--to T] [--limit N] [--top N]\n"
	      "       [--format top|folded]\n"
	      "      two ranks' CPU profiles compared: functions ranked by the difference in their\n"
	      "      share of samples (top), or 'stack a b' lines for a differential flame graph\n"
	      "  diagnose [--job J] [--from T] [--to T] [--status open|all] [--limit N]\n"
	      "           [--format table|json]\n"
	      "  diagnose --id ID [--format text|json]\n"
	      "      the incidents the server diagnosed by itself (stragglers with their layer,\n"
	      "      regressions against the job's baseline), or one incident's full report\n"
	      "  trace JOB [--comm KEY] [--from T] [--to T] [--limit N] [-o FILE]\n"
	      "      the job's NCCL calls per rank as Chrome trace JSON (open it in\n"
	      "      ui.perfetto.dev or chrome://tracing): a process per rank, a thread per\n"
	      "      communicator; at most N calls (default 50000), the answer says if truncated\n"
	      "\n"
	      "  -o FILE, --output FILE  write the answer to FILE instead of standard output\n"
	      "\n"
	      "  N: node id (32 hex digits) or hostname. T: Unix seconds, RFC 3339\n"
	      "  (2026-11-22T10:00:00Z), now, or relative (-30s, -5m, -1h); default the last hour.\n"
	      "  --limit caps the stacks or processes the server returns; --top the rows shown.\n",
	      out);
}

void ctl_args_free(struct ctl_args *a)
{
	if (!a)
		return;
	free(a->server);
	free(a->token_file);
	free(a->node);
	free(a->pid);
	free(a->comm);
	free(a->pod_namespace);
	free(a->pod);
	free(a->container);
	free(a->unit);
	free(a->slurm_job);
	free(a->from);
	free(a->to);
	free(a->format_text);
	free(a->kind);
	free(a->rank);
	free(a->k);
	free(a->window);
	free(a->min_excess_ms);
	free(a->rank_a);
	free(a->rank_b);
	free(a->history_from);
	free(a->history_to);
	free(a->id);
	free(a->status);
	free(a->job);
	free(a->communicator);
	free(a->op);
	free(a->output);
	memset(a, 0, sizeof(*a));
}

static int parse_format(struct ctl_args *a, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		enum ctl_format format;
		bool for_flamegraph;
	} formats[] = {
		{ "table", CTL_FORMAT_TABLE, false },
		{ "text", CTL_FORMAT_TEXT, false },
		{ "json", CTL_FORMAT_JSON, true },
		{ "top", CTL_FORMAT_TOP, true },
		{ "folded", CTL_FORMAT_FOLDED, true },
		{ "pprof", CTL_FORMAT_PPROF, true },
		{ "speedscope", CTL_FORMAT_SPEEDSCOPE, true },
	};
	bool flame = a->command == CTL_FLAMEGRAPH || a->command == CTL_DIFF;

	bool one = a->command == CTL_DIAGNOSE && a->id; /* one report: text or json */

	a->format = flame ? CTL_FORMAT_TOP : one ? CTL_FORMAT_TEXT : CTL_FORMAT_TABLE;
	if (a->command == CTL_TRACE) {
		a->format = CTL_FORMAT_JSON; /* the only one: the server's Chrome trace JSON */
		return 0;
	}
	if (!a->format_text)
		return 0;
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		if (strcmp(a->format_text, formats[i].name) != 0)
			continue;
		/* The exports are the flame graph's; a diff stays folded or a summary. */
		if ((formats[i].format == CTL_FORMAT_PPROF ||
		     formats[i].format == CTL_FORMAT_SPEEDSCOPE) && a->command != CTL_FLAMEGRAPH)
			continue;
		if (formats[i].format == CTL_FORMAT_TEXT || formats[i].format == CTL_FORMAT_TABLE) {
			if ((formats[i].format == CTL_FORMAT_TEXT) != one || flame)
				continue;
			a->format = formats[i].format;
			return 0;
		}
		if (formats[i].format == CTL_FORMAT_JSON || formats[i].for_flamegraph == flame) {
			a->format = formats[i].format;
			return 0;
		}
	}
	snprintf(err, errlen, "--format: '%s' is not one of %s", a->format_text,
		 a->command == CTL_FLAMEGRAPH ? "top, folded, json, pprof, speedscope"
		 : flame ? "top, folded, json" : one ? "text, json" : "table, json");
	return -SYSOM_ECONFIG;
}

static int check_pid(const char *pid, char *err, size_t errlen)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(pid, &end, 10);
	if (!isdigit((unsigned char)pid[0]) || *end || errno || v > UINT32_MAX) {
		snprintf(err, errlen, "--pid: '%s' is not a process id", pid);
		return -SYSOM_ECONFIG;
	}
	return 0;
}

static int check_server(struct ctl_args *a, char *err, size_t errlen)
{
	size_t len = strlen(a->server);

	if (strncmp(a->server, "http://", 7) != 0 && strncmp(a->server, "https://", 8) != 0) {
		snprintf(err, errlen, "--server: '%s' is not an http:// or https:// URL", a->server);
		return -SYSOM_ECONFIG;
	}
	while (len > 8 && a->server[len - 1] == '/')
		a->server[--len] = '\0';
	return 0;
}

/* Parses the command's own flags from argv[0] (the command name) on. */
static int parse_command(struct ctl_args *a, int argc, char *const argv[], char *err, size_t errlen)
{
#define OPT_STR(name, field) { name, SYSOM_OPT_STRING, &a->field, 0, 0, "", true }
#define OPT_FORMAT OPT_STR("format", format_text)
#define OPT_HELP { "help", SYSOM_OPT_BOOL, &a->help, 0, 0, "", true }, OPT_STR("output", output)
#define OPT_FILTERS OPT_STR("node", node), OPT_STR("pid", pid), OPT_STR("comm", comm), \
		    OPT_STR("from", from), OPT_STR("to", to),                        \
		    OPT_STR("namespace", pod_namespace), OPT_STR("pod", pod),        \
		    OPT_STR("container", container), OPT_STR("unit", unit),          \
		    OPT_STR("slurm-job", slurm_job),                                 \
		    { "limit", SYSOM_OPT_UINT, &a->limit, 1, 100000, "", true }
	const struct sysom_option nodes[] = { OPT_FORMAT, OPT_HELP };
	const struct sysom_option jobs[] = { OPT_FORMAT, OPT_HELP, OPT_STR("namespace", pod_namespace),
					     OPT_STR("pod", pod), OPT_STR("container", container),
					     OPT_STR("unit", unit), OPT_STR("slurm-job", slurm_job) };
	const struct sysom_option processes[] = { OPT_FORMAT, OPT_HELP, OPT_FILTERS };
	const struct sysom_option flamegraph[] = { OPT_FORMAT, OPT_HELP, OPT_FILTERS,
						   { "top", SYSOM_OPT_UINT, &a->top, 1, 1000, "", true },
						   OPT_STR("kind", kind), OPT_STR("job", job),
						   OPT_STR("rank", rank) };
	const struct sysom_option collectives[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("comm", communicator),
		OPT_STR("op", op), OPT_STR("from", from), OPT_STR("to", to),
		{ "limit", SYSOM_OPT_UINT, &a->limit, 1, 10000, "", true }
	};
	const struct sysom_option stragglers[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("comm", communicator),
		OPT_STR("from", from), OPT_STR("to", to), OPT_STR("k", k), OPT_STR("window", window),
		OPT_STR("min-excess-ms", min_excess_ms)
	};
	const struct sysom_option diff[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("a", rank_a), OPT_STR("b", rank_b),
		OPT_STR("from", from), OPT_STR("to", to),
		{ "limit", SYSOM_OPT_UINT, &a->limit, 1, 100000, "", true },
		{ "top", SYSOM_OPT_UINT, &a->top, 1, 1000, "", true }
	};
	const struct sysom_option diagnose[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("from", from), OPT_STR("to", to),
		OPT_STR("status", status), OPT_STR("id", id),
		{ "limit", SYSOM_OPT_UINT, &a->limit, 1, 10000, "", true }
	};
	const struct sysom_option trace[] = {
		OPT_HELP, OPT_STR("job", job), OPT_STR("comm", communicator), OPT_STR("from", from),
		OPT_STR("to", to), { "limit", SYSOM_OPT_UINT, &a->limit, 1, 200000, "", true }
	};
	const struct sysom_option patterns[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("from", from), OPT_STR("to", to),
		OPT_STR("k", k), OPT_STR("history-from", history_from),
		OPT_STR("history-to", history_to),
		{ "limit", SYSOM_OPT_UINT, &a->limit, 1, 10000, "", true },
		{ "top", SYSOM_OPT_UINT, &a->top, 1, 1000, "", true }
	};
	const struct sysom_option hosts[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("from", from), OPT_STR("to", to)
	};
	const struct sysom_option gpu[] = {
		OPT_FORMAT, OPT_HELP, OPT_STR("job", job), OPT_STR("rank", rank), OPT_STR("from", from),
		OPT_STR("to", to), { "top", SYSOM_OPT_UINT, &a->top, 1, 1000, "", true }
	};
#undef OPT_STR
#undef OPT_FORMAT
#undef OPT_HELP
#undef OPT_FILTERS
	const struct sysom_option *table;
	size_t n;

	switch (a->command) {
	case CTL_NODES:
		table = nodes;
		n = sizeof(nodes) / sizeof(nodes[0]);
		break;
	case CTL_JOBS:
		table = jobs;
		n = sizeof(jobs) / sizeof(jobs[0]);
		break;
	case CTL_PROCESSES:
		table = processes;
		n = sizeof(processes) / sizeof(processes[0]);
		break;
	case CTL_COLLECTIVES:
		table = collectives;
		n = sizeof(collectives) / sizeof(collectives[0]);
		break;
	case CTL_GPU:
		table = gpu;
		n = sizeof(gpu) / sizeof(gpu[0]);
		break;
	case CTL_STRAGGLERS:
		table = stragglers;
		n = sizeof(stragglers) / sizeof(stragglers[0]);
		break;
	case CTL_DIFF:
		table = diff;
		n = sizeof(diff) / sizeof(diff[0]);
		break;
	case CTL_DIAGNOSE:
		table = diagnose;
		n = sizeof(diagnose) / sizeof(diagnose[0]);
		break;
	case CTL_PATTERNS:
		table = patterns;
		n = sizeof(patterns) / sizeof(patterns[0]);
		break;
	case CTL_HOSTS:
		table = hosts;
		n = sizeof(hosts) / sizeof(hosts[0]);
		break;
	case CTL_TRACE:
		table = trace;
		n = sizeof(trace) / sizeof(trace[0]);
		break;
	default:
		table = flamegraph;
		n = sizeof(flamegraph) / sizeof(flamegraph[0]);
		break;
	}
	int rc, at = 0;

	/* Flags up to an argument; trace takes one (the job) anywhere among its flags. */
	for (;;) {
		if ((rc = sysom_options_parse_argv(table, n, argc - at, argv + at, err, errlen)) < 0)
			return rc;
		if ((at += rc) >= argc)
			break;
		if (a->command != CTL_TRACE || a->job || argv[at][0] == '-') {
			snprintf(err, errlen, "%s: unexpected argument '%s'", argv[0], argv[at]);
			return -SYSOM_ECONFIG;
		}
		if (!(a->job = strdup(argv[at])))
			return -ENOMEM;
	}
	if (a->output && !a->output[0]) {
		snprintf(err, errlen, "%s: --output needs a file name", argv[0]);
		return -SYSOM_ECONFIG;
	}
	if (a->pid && (rc = check_pid(a->pid, err, errlen)))
		return rc;
	if ((a->command == CTL_COLLECTIVES || a->command == CTL_GPU ||
	     a->command == CTL_STRAGGLERS || a->command == CTL_DIFF || a->command == CTL_TRACE ||
	     a->command == CTL_PATTERNS || a->command == CTL_HOSTS) &&
	    !a->help &&
	    (!a->job || !a->job[0])) {
		snprintf(err, errlen, "%s: --job is required (see sysomctl jobs)", argv[0]);
		return -SYSOM_ECONFIG;
	}
	if (a->command == CTL_DIFF && !a->help) {
		const char *v[2] = { a->rank_a, a->rank_b };
		for (int i = 0; i < 2; i++)
			if (!v[i] || !isdigit((unsigned char)v[i][0]) || strlen(v[i]) > 9 ||
			    strspn(v[i], "0123456789") != strlen(v[i])) {
				snprintf(err, errlen, "diff: --%c must be a rank (0, 1, ...)", 'a' + i);
				return -SYSOM_ECONFIG;
			}
	}
	if (a->id && (!isdigit((unsigned char)a->id[0]) || strlen(a->id) > 18 ||
		      strspn(a->id, "0123456789") != strlen(a->id) || strtoll(a->id, NULL, 10) <= 0)) {
		snprintf(err, errlen, "diagnose: --id '%s' is not a diagnosis id", a->id);
		return -SYSOM_ECONFIG;
	}
	if (a->id && (a->job || a->from || a->to || a->status || a->limit)) {
		snprintf(err, errlen, "diagnose: --id takes no other filter");
		return -SYSOM_ECONFIG;
	}
	if (a->status && strcmp(a->status, "open") && strcmp(a->status, "all")) {
		snprintf(err, errlen, "diagnose: --status must be open or all");
		return -SYSOM_ECONFIG;
	}
	if (a->rank && (!isdigit((unsigned char)a->rank[0]) || strlen(a->rank) > 9 ||
			strspn(a->rank, "0123456789") != strlen(a->rank))) {
		snprintf(err, errlen, "--rank: '%s' is not a rank (0, 1, ...)", a->rank);
		return -SYSOM_ECONFIG;
	}
	if (a->kind && strcmp(a->kind, "cpu") && strcmp(a->kind, "gpu-launch") &&
	    strcmp(a->kind, "gpu-time") && strcmp(a->kind, "off-cpu") && strcmp(a->kind, "wall")) {
		snprintf(err, errlen, "--kind: '%s' is not cpu, gpu-launch, gpu-time, off-cpu or wall",
			 a->kind);
		return -SYSOM_ECONFIG;
	}
	return parse_format(a, err, errlen);
}

int ctl_args_parse(int argc, char *const argv[], const char *env_server, struct ctl_args *out,
		   char *err, size_t errlen)
{
	struct ctl_args a = { .top = CTL_DEFAULT_TOP };
	const struct sysom_option global[] = {
		{ "server", SYSOM_OPT_STRING, &a.server, 0, 0, "", true },
		{ "token-file", SYSOM_OPT_STRING, &a.token_file, 0, 0, "", true },
		{ "help", SYSOM_OPT_BOOL, &a.help, 0, 0, "", true },
	};
	char **args = NULL;
	size_t i;
	int rc, at;

	at = sysom_options_parse_argv(global, 3, argc, argv, err, errlen);
	if (at < 0) {
		rc = at;
		goto cleanup;
	}
	if (a.help || (at < argc && strcmp(argv[at], "help") == 0)) {
		a.help = true;
		rc = 1;
		goto cleanup;
	}
	if (at >= argc) {
		snprintf(err, errlen, "missing command (nodes, processes, flamegraph, jobs, "
			 "collectives, gpu, stragglers, diff, diagnose or trace; see --help)");
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	for (i = 0; i < NCOMMANDS && strcmp(argv[at], commands[i].name) != 0; i++)
		;
	if (i == NCOMMANDS) {
		snprintf(err, errlen, "unknown command '%s' (nodes, processes, flamegraph, jobs, "
			 "collectives, gpu, stragglers, diff, diagnose or trace)", argv[at]);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	a.command = commands[i].command;
	/* `-o FILE`, the one short flag, is `--output FILE`. */
	if (!(args = calloc((size_t)(argc - at) + 1, sizeof(*args)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (int j = at; j < argc; j++)
		args[j - at] = strcmp(argv[j], "-o") == 0 ? (char *)"--output" : argv[j];
	if ((rc = parse_command(&a, argc - at, args, err, errlen)))
		goto cleanup;
	if (a.help) {
		rc = 1;
		goto cleanup;
	}
	if (!a.server) {
		a.server = strdup(env_server && *env_server ? env_server : CTL_DEFAULT_SERVER);
		if (!a.server) {
			rc = -ENOMEM;
			goto cleanup;
		}
	}
	rc = check_server(&a, err, errlen);
cleanup:
	free(args);
	if (rc < 0) {
		ctl_args_free(&a);
		return rc;
	}
	*out = a;
	return rc;
}

/* Appends `value` percent-encoded (RFC 3986 unreserved characters kept). */
static void append_encoded(struct byte_buf *url, const char *value)
{
	for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
		if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
			byte_buf_append(url, p, 1);
		else
			byte_buf_printf(url, "%%%02X", *p);
	}
}

/* Appends "&name=value" (or "?name=value" first) with the value percent-encoded. */
static void query_add(struct byte_buf *url, bool *first, const char *name, const char *value)
{
	if (!value)
		return;
	byte_buf_printf(url, "%c%s=", *first ? '?' : '&', name);
	*first = false;
	append_encoded(url, value);
}

int ctl_url_build(const struct ctl_args *a, struct byte_buf *url)
{
	const char *path = "";
	char limit[16];
	bool first = true;

	memset(url, 0, sizeof(*url));
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (commands[i].command == a->command)
			path = commands[i].path;
	byte_buf_printf(url, "%s%s", a->server, path);
	if (a->command == CTL_COLLECTIVES) {
		append_encoded(url, a->job); /* a path segment: '/' is encoded too */
		byte_buf_printf(url, "/collectives");
		query_add(url, &first, "comm", a->communicator);
		query_add(url, &first, "op", a->op);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	if (a->command == CTL_STRAGGLERS) {
		append_encoded(url, a->job);
		byte_buf_printf(url, "/stragglers");
		query_add(url, &first, "comm", a->communicator);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		query_add(url, &first, "k", a->k);
		query_add(url, &first, "window", a->window);
		query_add(url, &first, "min_excess_ms", a->min_excess_ms);
	}
	if (a->command == CTL_HOSTS) {
		append_encoded(url, a->job);
		byte_buf_printf(url, "/hosts");
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
	}
	if (a->command == CTL_PATTERNS) {
		append_encoded(url, a->job);
		byte_buf_printf(url, "/patterns");
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		query_add(url, &first, "k", a->k);
		query_add(url, &first, "history_from", a->history_from);
		query_add(url, &first, "history_to", a->history_to);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	if (a->command == CTL_GPU) {
		append_encoded(url, a->job);
		byte_buf_printf(url, "/gpu");
		query_add(url, &first, "rank", a->rank);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
	}
	if (a->command == CTL_DIFF) {
		query_add(url, &first, "job", a->job);
		query_add(url, &first, "a", a->rank_a);
		query_add(url, &first, "b", a->rank_b);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	if (a->command == CTL_DIAGNOSE && a->id) {
		byte_buf_printf(url, "/%s", a->id);
		query_add(url, &first, "format", a->format == CTL_FORMAT_TEXT ? "text" : "json");
	} else if (a->command == CTL_DIAGNOSE) {
		query_add(url, &first, "job", a->job);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		query_add(url, &first, "status", a->status);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	if (a->command == CTL_TRACE) {
		append_encoded(url, a->job);
		byte_buf_printf(url, "/trace");
		query_add(url, &first, "comm", a->communicator);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	if (a->command == CTL_FLAMEGRAPH) {
		query_add(url, &first, "job", a->job);
		query_add(url, &first, "rank", a->rank);
		query_add(url, &first, "format",
			  a->format == CTL_FORMAT_FOLDED	   ? "folded"
			  : a->format == CTL_FORMAT_PPROF	   ? "pprof"
			  : a->format == CTL_FORMAT_SPEEDSCOPE ? "speedscope"
							       : "json");
		query_add(url, &first, "kind", a->kind);
	}
	if (a->command == CTL_JOBS) {
		query_add(url, &first, "namespace", a->pod_namespace);
		query_add(url, &first, "pod", a->pod);
		query_add(url, &first, "container", a->container);
		query_add(url, &first, "unit", a->unit);
		query_add(url, &first, "slurm_job", a->slurm_job);
	}
	if (a->command == CTL_PROCESSES || a->command == CTL_FLAMEGRAPH) {
		query_add(url, &first, "node", a->node);
		query_add(url, &first, "pid", a->pid);
		query_add(url, &first, "comm", a->comm);
		query_add(url, &first, "namespace", a->pod_namespace);
		query_add(url, &first, "pod", a->pod);
		query_add(url, &first, "container", a->container);
		query_add(url, &first, "unit", a->unit);
		query_add(url, &first, "slurm_job", a->slurm_job);
		query_add(url, &first, "from", a->from);
		query_add(url, &first, "to", a->to);
		if (a->limit) {
			snprintf(limit, sizeof(limit), "%u", a->limit);
			query_add(url, &first, "limit", limit);
		}
	}
	byte_buf_append(url, "", 1);
	if (byte_buf_error(url)) {
		byte_buf_free(url);
		return -ENOMEM;
	}
	return 0;
}
