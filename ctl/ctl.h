/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl: argument parsing, request URLs, terminal renderers and the HTTP client. */
#ifndef SYSOM_CTL_CTL_H
#define SYSOM_CTL_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/bytes.h"

#define CTL_DEFAULT_SERVER "http://127.0.0.1:8080"
#define CTL_DEFAULT_TOP 10
#define CTL_MAX_RESPONSE (1024u << 20) /* largest response body accepted */

enum ctl_command { CTL_NODES, CTL_PROCESSES, CTL_FLAMEGRAPH, CTL_JOBS, CTL_COLLECTIVES, CTL_GPU,
		   CTL_STRAGGLERS, CTL_DIFF, CTL_DIAGNOSE, CTL_TRACE, CTL_PATTERNS,
		   CTL_HOSTS };
enum ctl_format { CTL_FORMAT_TABLE, CTL_FORMAT_TOP, CTL_FORMAT_FOLDED, CTL_FORMAT_JSON,
		  CTL_FORMAT_TEXT, CTL_FORMAT_PPROF, CTL_FORMAT_SPEEDSCOPE };

/* A parsed command line. Strings are heap copies (ctl_args_free); NULL when not given. */
struct ctl_args {
	char *server;      /* base URL without a trailing '/' */
	char *token_file;
	enum ctl_command command;
	char *node, *pid, *comm, *from, *to;
	char *pod_namespace, *pod, *container, *unit, *slurm_job; /* identity filters */
	char *kind;        /* flamegraph: cpu, gpu-launch or gpu-time */
	char *job, *communicator, *op; /* collectives (job: also gpu, trace) */
	char *rank;        /* gpu */
	char *k, *window, *min_excess_ms; /* stragglers */
	char *rank_a, *rank_b;            /* diff */
	char *history_from, *history_to; /* patterns */
	char *id, *status;                /* diagnose */
	char *format_text;
	enum ctl_format format;
	char *output;      /* -o/--output FILE: the answer goes there instead of stdout */
	uint32_t limit;    /* 0: the server's default */
	uint32_t top;      /* rows of the top renderer */
	bool help;
};

/*
 * Parses `sysomctl [--server URL] [--token-file F] COMMAND [options]` (`-o F` is
 * `--output F`; `trace` takes the job as its argument or as --job). The server defaults to
 * `env_server` (the SYSOM_SERVER variable; NULL or "" for none), else CTL_DEFAULT_SERVER.
 * Returns 0, 1 when help was asked for (out->help), or -SYSOM_ECONFIG with `err` saying why.
 * On failure nothing is left allocated in *out.
 */
int ctl_args_parse(int argc, char *const argv[], const char *env_server, struct ctl_args *out,
		   char *err, size_t errlen);

/* Frees the strings of parsed arguments; accepts NULL. */
void ctl_args_free(struct ctl_args *a);

/* Prints the usage text to `out`. */
void ctl_usage(FILE *out);

/*
 * Builds the request URL for the command into `url` (zeroed first; NUL-terminated): the
 * server's path with the options as percent-encoded query parameters. The top format asks for
 * JSON. Returns 0 or -ENOMEM.
 */
int ctl_url_build(const struct ctl_args *a, struct byte_buf *url);

/*
 * Renders a flame graph JSON document (GET /api/v1/flamegraph?format=json) for a terminal:
 * the total, the `top` largest stacks with count, percentage and frames leaf to root (kernel
 * frames marked [k]), then the functions with the most self (leaf) and total (inclusive)
 * samples. Returns 0 or -EINVAL when the document does not have that shape.
 */
int ctl_top_render(const json_t *doc, uint32_t top, FILE *out);

/* Renders GET /api/v1/nodes as a table. Returns 0 or -EINVAL for another shape. */
int ctl_nodes_render(const json_t *doc, FILE *out);

/* Renders GET /api/v1/processes as a table. Returns 0 or -EINVAL for another shape. */
int ctl_processes_render(const json_t *doc, FILE *out);

/* Renders GET /api/v1/jobs as a table. Returns 0 or -EINVAL for another shape. */
int ctl_jobs_render(const json_t *doc, FILE *out);

/*
 * Renders GET /api/v1/jobs/{job}/collectives as a table, one instance per row: op, sequence,
 * communicator, bytes, ranks seen of the communicator's size, entry skew (first to last rank
 * to enter) and the last rank to enter (the one the others waited for). Returns 0 or -EINVAL.
 */
int ctl_collectives_render(const json_t *doc, FILE *out);

/*
 * Renders GET /api/v1/jobs/{job}/gpu: per process its GPU kernel time, its ratio to the job's
 * median and its top kernels; then the NCCL operations (GPU time per operation, algorithm
 * bandwidth) and the links (latency and bandwidth fits). Returns 0 or -EINVAL.
 */
int ctl_gpu_render(const json_t *doc, uint32_t top, FILE *out);

/*
 * Renders GET /api/v1/jobs/{job}/stragglers: the job's straggling ranks, then per communicator
 * its instances and its ranks with the most excess lateness (mean lateness, excess over the
 * other ranks, z, how often flagged and last to enter, verdict). Returns 0 or -EINVAL.
 */
int ctl_stragglers_render(const json_t *doc, FILE *out);
int ctl_patterns_render(const json_t *doc, uint32_t top, FILE *out);
/* GET /api/v1/jobs/{job}/hosts: one line per node, anomalous first, its top deviations. */
int ctl_hosts_render(const json_t *doc, FILE *out);

/*
 * Renders a differential folded profile ("stack count_a count_b" lines, GET
 * /api/v1/flamegraph/diff) for a terminal: both totals, then the `top` functions whose share
 * of CPU samples (inclusive: on the stack) differs most between rank a and rank b, in
 * percentage points, largest difference first. Returns 0 or -EINVAL for malformed text.
 */
int ctl_diff_render(const char *text, size_t len, uint32_t top, uint32_t rank_a, uint32_t rank_b,
		    FILE *out);

/* A list of diagnoses (GET /api/v1/diagnoses): one line each, newest first. */
int ctl_diagnoses_render(const json_t *doc, FILE *out);

/*
 * The message of an error response: the "error" member of a JSON body, else the body's first
 * line (at most 200 bytes), else "(empty response)". Written to `out`.
 */
void ctl_error_text(const uint8_t *body, size_t len, char *out, size_t outlen);


/*
 * GETs `url` (with "Authorization: Bearer TOKEN" when `token` is not NULL), storing the body
 * (at most CTL_MAX_RESPONSE bytes) in `body` and the status in *status. Returns 0 when an HTTP
 * response arrived, whatever its status, or -EIO with `err` saying why none did.
 */
int ctl_http_get(const char *url, const char *token, struct byte_buf *body, long *status,
		 char *err, size_t errlen);

#endif
