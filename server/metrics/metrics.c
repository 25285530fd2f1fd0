/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic counters and histograms rendered as Prometheus text exposition format 0.0.4. */
#include "server/metrics/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/http/render.h"

static const double ingest_bounds[] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
					0.25,  0.5,   1,    2.5,   5,    10 };

static const char *const reason_names[INGEST_ERR_COUNT] = {
	[INGEST_ERR_UNAUTHORIZED] = "unauthorized",
	[INGEST_ERR_FORBIDDEN] = "forbidden",
	[INGEST_ERR_BAD_REQUEST] = "bad_request",
	[INGEST_ERR_ENCODING] = "unsupported_encoding",
	[INGEST_ERR_DECOMPRESS] = "bad_compression",
	[INGEST_ERR_TOO_LARGE] = "too_large",
	[INGEST_ERR_CORRUPT] = "corrupt",
	[INGEST_ERR_VERSION] = "unsupported_version",
	[INGEST_ERR_KEY_MISMATCH] = "idempotency_key_mismatch",
	[INGEST_ERR_CONFLICT] = "conflict",
	[INGEST_ERR_STORAGE_FULL] = "storage_full",
	[INGEST_ERR_STORAGE_BUSY] = "storage_busy",
	[INGEST_ERR_INTERNAL] = "internal",
	[INGEST_ERR_MEMORY_BUSY] = "memory_busy",
};

static const char *const symbol_upload_names[SYMBOL_UPLOAD_RESULT_COUNT] = {
	[SYMBOL_UPLOAD_STORED] = "stored",     [SYMBOL_UPLOAD_PRESENT] = "present",
	[SYMBOL_UPLOAD_PARTIAL] = "partial",   [SYMBOL_UPLOAD_CONFLICT] = "conflict",
	[SYMBOL_UPLOAD_INVALID] = "rejected",  [SYMBOL_UPLOAD_BUSY] = "busy",
	[SYMBOL_UPLOAD_FAILED] = "failed",     [SYMBOL_UPLOAD_OVER_BUDGET] = "over_budget",
	[SYMBOL_UPLOAD_NO_SPACE] = "no_space",
};

static const char *const debuginfod_type_names[DEBUGINFOD_TYPE_COUNT] = {
	[DEBUGINFOD_EXECUTABLE] = "executable",
	[DEBUGINFOD_DEBUGINFO] = "debuginfo",
	[DEBUGINFOD_OTHER] = "other",
};

static const char *const debuginfod_result_names[DEBUGINFOD_RESULT_COUNT] = {
	[DEBUGINFOD_FOUND] = "found",
	[DEBUGINFOD_NOT_FOUND] = "not_found",
	[DEBUGINFOD_ERROR] = "error",
};

void metrics_histogram_init(struct metrics_histogram *h, const double *bounds, size_t nbounds)
{
	h->bounds = bounds;
	h->nbounds = nbounds > METRICS_HISTOGRAM_MAX_BUCKETS ? METRICS_HISTOGRAM_MAX_BUCKETS : nbounds;
}

void metrics_histogram_observe(struct metrics_histogram *h, uint64_t ns)
{
	double seconds = (double)ns / 1e9;
	size_t i = 0;

	while (i < h->nbounds && seconds > h->bounds[i])
		i++;
	atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void metrics_family_write(struct byte_buf *out, const char *name, const char *type,
			  const char *help)
{
	byte_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void write_label_value(struct byte_buf *out, const char *value)
{
	struct byte_buf clean = { 0 };

	render_utf8_append(&clean, value, strlen(value));
	for (size_t i = 0; i < clean.len; i++) {
		char c = (char)clean.data[i];
		if (c == '\\' || c == '"')
			byte_buf_printf(out, "\\%c", c);
		else if (c == '\n')
			byte_buf_append(out, "\\n", 2);
		else
			byte_buf_append(out, &c, 1);
	}
	if (byte_buf_error(&clean) && !out->error)
		out->error = byte_buf_error(&clean);
	byte_buf_free(&clean);
}

static void write_value(struct byte_buf *out, double value)
{
	if (isinf(value))
		byte_buf_printf(out, value > 0 ? "+Inf" : "-Inf");
	else if (value == floor(value) && fabs(value) < 1e15)
		byte_buf_printf(out, "%.0f", value);
	else
		byte_buf_printf(out, "%.9g", value);
}

void metrics_sample_write(struct byte_buf *out, const char *name, const char *const *labels,
			  double value)
{
	byte_buf_printf(out, "%s", name);
	if (labels && labels[0]) {
		byte_buf_append(out, "{", 1);
		for (size_t i = 0; labels[i] && labels[i + 1]; i += 2) {
			byte_buf_printf(out, "%s%s=\"", i ? "," : "", labels[i]);
			write_label_value(out, labels[i + 1]);
			byte_buf_append(out, "\"", 1);
		}
		byte_buf_append(out, "}", 1);
	}
	byte_buf_append(out, " ", 1);
	write_value(out, value);
	byte_buf_append(out, "\n", 1);
}

void metrics_histogram_write(struct byte_buf *out, const char *name, const char *help,
			     const struct metrics_histogram *h)
{
	char series[128];
	uint64_t cumulative = 0;

	metrics_family_write(out, name, "histogram", help);
	snprintf(series, sizeof(series), "%s_bucket", name);
	for (size_t i = 0; i <= h->nbounds; i++) {
		char le[32];
		const char *labels[] = { "le", le, NULL };

		cumulative += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
		if (i < h->nbounds)
			snprintf(le, sizeof(le), "%g", h->bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		metrics_sample_write(out, series, labels, (double)cumulative);
	}
	snprintf(series, sizeof(series), "%s_sum", name);
	metrics_sample_write(out, series, NULL,
			     (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9);
	snprintf(series, sizeof(series), "%s_count", name);
	metrics_sample_write(out, series, NULL, (double)cumulative);
}

void metrics_gauge_write(struct byte_buf *out, const char *name, const char *help, uint64_t v)
{
	metrics_family_write(out, name, "gauge", help);
	metrics_sample_write(out, name, NULL, (double)v);
}

void metrics_total_write(struct byte_buf *out, const char *name, const char *help, uint64_t v)
{
	metrics_family_write(out, name, "counter", help);
	metrics_sample_write(out, name, NULL, (double)v);
}

void server_metrics_init(struct server_metrics *m)
{
	metrics_histogram_init(&m->ingest_seconds, ingest_bounds,
			       sizeof(ingest_bounds) / sizeof(ingest_bounds[0]));
}

void server_metrics_reject(struct server_metrics *m, enum ingest_error_reason reason,
			   struct metrics_counter *result_counter)
{
	metrics_counter_add(&m->errors[reason], 1);
	if (result_counter)
		metrics_counter_add(result_counter, 1);
}

static int source_add(struct server_metrics *m, metrics_source_fn write, void *ctx, bool detail)
{
	if (m->nsources == SERVER_METRICS_MAX_SOURCES)
		return -ENOSPC;
	m->sources[m->nsources].write = write;
	m->sources[m->nsources].ctx = ctx;
	m->sources[m->nsources].detail = detail;
	m->nsources++;
	return 0;
}

int server_metrics_source_add(struct server_metrics *m, metrics_source_fn write, void *ctx)
{
	return source_add(m, write, ctx, false);
}

int server_metrics_detail_source_add(struct server_metrics *m, metrics_source_fn write,
				     void *ctx)
{
	return source_add(m, write, ctx, true);
}

/* A counter family with one sample per label value: `label`="names[i]" → c[i], i < n. */
static void write_labelled(struct byte_buf *out, const char *name, const char *help,
			   const char *label, const struct metrics_counter *c,
			   const char *const *names, size_t n)
{
	metrics_family_write(out, name, "counter", help);
	for (size_t i = 0; i < n; i++) {
		const char *labels[] = { label, names[i], NULL };
		metrics_sample_write(out, name, labels, (double)metrics_counter_get(&c[i]));
	}
}

static void write_counter(struct byte_buf *out, const char *name, const char *help,
			  const struct metrics_counter *c)
{
	metrics_family_write(out, name, "counter", help);
	metrics_sample_write(out, name, NULL, (double)metrics_counter_get(c));
}

void server_metrics_write(const struct server_metrics *m, struct byte_buf *out)
{
	static const char *const batch_results[] = { "stored", "duplicate", "rejected" };
	static const char *const upload_results[] = { "stored", "unchanged", "rejected" };

	write_labelled(out, "sysom_ingest_batches_total", "Batches received, by result.", "result",
		       m->batches, batch_results, INGEST_RESULT_COUNT);
	metrics_family_write(out, "sysom_ingest_bytes_total", "counter",
			     "Ingest body bytes, compressed as received and decompressed.");
	{
		const char *c[] = { "stage", "compressed", NULL };
		const char *d[] = { "stage", "decompressed", NULL };
		metrics_sample_write(out, "sysom_ingest_bytes_total", c,
				     (double)metrics_counter_get(&m->bytes_compressed));
		metrics_sample_write(out, "sysom_ingest_bytes_total", d,
				     (double)metrics_counter_get(&m->bytes_decompressed));
	}
	write_counter(out, "sysom_ingest_samples_total", "Samples stored (sum of sample counts).",
		      &m->samples_stored);
	write_counter(out, "sysom_ingest_sample_rows_total", "Sample rows stored.",
		      &m->sample_rows_stored);
	write_counter(out, "sysom_ingest_new_stacks_total", "Distinct stacks added to the store.",
		      &m->stacks_created);
	write_labelled(out, "sysom_ingest_errors_total",
		       "Refused ingest and symbol upload requests, by reason.", "reason", m->errors,
		       reason_names, INGEST_ERR_COUNT);
	metrics_histogram_write(out, "sysom_ingest_duration_seconds",
				"Time to handle an ingest request.", &m->ingest_seconds);
	write_labelled(out, "sysom_kernel_symbol_uploads_total",
		       "Kernel symbol table uploads, by result.", "result", m->ksym_uploads,
		       upload_results, INGEST_RESULT_COUNT);
	write_labelled(out, "sysom_symbol_uploads_total",
		       "Symbol file upload requests (one per chunk), by result.", "result",
		       m->symbol_uploads, symbol_upload_names, SYMBOL_UPLOAD_RESULT_COUNT);
	write_counter(out, "sysom_symbol_upload_bytes_total",
		      "Symbol file bytes received in upload chunks.", &m->symbol_upload_bytes);
	write_counter(out, "sysom_symbol_missing_queries_total",
		      "Answered queries for the Build IDs the server lacks.",
		      &m->symbol_missing_queries);
	metrics_family_write(out, "sysom_debuginfod_requests_total", "counter",
			     "debuginfod requests (/buildid/...), by file type and result.");
	for (int t = 0; t < DEBUGINFOD_TYPE_COUNT; t++) {
		for (int r = 0; r < DEBUGINFOD_RESULT_COUNT; r++) {
			const char *labels[] = { "type", debuginfod_type_names[t], "result",
						 debuginfod_result_names[r], NULL };
			metrics_sample_write(out, "sysom_debuginfod_requests_total", labels,
					     (double)metrics_counter_get(
						     &m->debuginfod_requests[t][r]));
		}
	}
	write_counter(out, "sysom_debuginfod_sent_bytes_total",
		      "File bytes offered by debuginfod answers (their Content-Length).",
		      &m->debuginfod_bytes);
	for (size_t i = 0; i < m->nsources; i++)
		if (!m->sources[i].detail)
			m->sources[i].write(m->sources[i].ctx, out);
}

void server_metrics_detail_write(const struct server_metrics *m, struct byte_buf *out)
{
	for (size_t i = 0; i < m->nsources; i++)
		if (m->sources[i].detail)
			m->sources[i].write(m->sources[i].ctx, out);
}
