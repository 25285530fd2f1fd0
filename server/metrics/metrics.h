/* SPDX-License-Identifier: Apache-2.0 */
/* Thread-safe counters and histograms, and their Prometheus text (0.0.4) rendering. */
#ifndef SYSOM_SERVER_METRICS_METRICS_H
#define SYSOM_SERVER_METRICS_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

/* A monotonically increasing counter; lock-free. */
struct metrics_counter {
	atomic_uint_least64_t value;
};

#define METRICS_HISTOGRAM_MAX_BUCKETS 16

/* A histogram of durations with fixed upper bounds in seconds (+Inf implied); lock-free. */
struct metrics_histogram {
	const double *bounds; /* ascending upper bounds, seconds (borrowed, static) */
	size_t nbounds;       /* <= METRICS_HISTOGRAM_MAX_BUCKETS */
	atomic_uint_least64_t buckets[METRICS_HISTOGRAM_MAX_BUCKETS + 1]; /* not cumulative */
	atomic_uint_least64_t sum_ns;
};

/* Adds `n` to the counter; callable from any thread. */
static inline void metrics_counter_add(struct metrics_counter *c, uint64_t n)
{
	atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

/* The counter's current value; callable from any thread. */
static inline uint64_t metrics_counter_get(const struct metrics_counter *c)
{
	return atomic_load_explicit(&c->value, memory_order_relaxed);
}

/* Prepares a histogram with `nbounds` ascending bounds (static storage, at most 16). */
void metrics_histogram_init(struct metrics_histogram *h, const double *bounds, size_t nbounds);

/* Records one observation of `ns` nanoseconds. */
void metrics_histogram_observe(struct metrics_histogram *h, uint64_t ns);

/* Writes "# HELP name help" and "# TYPE name type" lines. */
void metrics_family_write(struct byte_buf *out, const char *name, const char *type,
			  const char *help);

/*
 * Writes one sample line `name{labels} value`. `labels` is NULL or alternating key/value
 * strings ending with NULL; values are escaped (backslash, quote, newline) and made valid
 * UTF-8.
 */
void metrics_sample_write(struct byte_buf *out, const char *name, const char *const *labels,
			  double value);

/* Writes a whole histogram family (HELP, TYPE, cumulative _bucket lines, _sum, _count). */
void metrics_histogram_write(struct byte_buf *out, const char *name, const char *help,
			     const struct metrics_histogram *h);

/* Why an ingest or symbol upload request was refused (label "reason"). */
enum ingest_error_reason {
	INGEST_ERR_UNAUTHORIZED,   /* missing or wrong bearer token */
	INGEST_ERR_FORBIDDEN,      /* valid credential without the scope, or for another node */
	INGEST_ERR_BAD_REQUEST,    /* missing/malformed idempotency key, bad build ID, ... */
	INGEST_ERR_ENCODING,       /* unsupported Content-Encoding */
	INGEST_ERR_DECOMPRESS,     /* malformed zstd */
	INGEST_ERR_TOO_LARGE,      /* decompressed size or a decoder limit exceeded */
	INGEST_ERR_CORRUPT,        /* malformed batch or symbol text */
	INGEST_ERR_VERSION,        /* unsupported wire format version */
	INGEST_ERR_KEY_MISMATCH,   /* idempotency key differs from the batch header */
	INGEST_ERR_CONFLICT,       /* identity already stored with different content (409) */
	INGEST_ERR_STORAGE_FULL,   /* disk full or I/O error */
	INGEST_ERR_STORAGE_BUSY,   /* database locked */
	INGEST_ERR_INTERNAL,       /* out of memory, unexpected store error */
	INGEST_ERR_MEMORY_BUSY,    /* the decode memory budget stayed full (503, Retry-After) */
	INGEST_ERR_COUNT
};

enum ingest_result {
	INGEST_STORED,
	INGEST_DUPLICATE,
	INGEST_REJECTED,
	INGEST_RESULT_COUNT
};

/* Outcome of one symbol file chunk upload (PUT /api/v1/symbols/...; label "result"). */
enum symbol_upload_result {
	SYMBOL_UPLOAD_STORED,   /* last chunk: verified and installed (201) */
	SYMBOL_UPLOAD_PRESENT,  /* the repository has the file already (200) */
	SYMBOL_UPLOAD_PARTIAL,  /* chunk appended, file incomplete (202) */
	SYMBOL_UPLOAD_CONFLICT, /* chunk does not start where the server is (409) */
	SYMBOL_UPLOAD_INVALID,  /* malformed request, too large, hash or identity mismatch (4xx) */
	SYMBOL_UPLOAD_BUSY,     /* too many upload sessions (503) */
	SYMBOL_UPLOAD_FAILED,   /* server-side failure: disk full, I/O, install error (5xx) */
	SYMBOL_UPLOAD_OVER_BUDGET, /* partial uploads reserve too many bytes (503) */
	SYMBOL_UPLOAD_NO_SPACE, /* the disk lacks room for what partial uploads reserve (507) */
	SYMBOL_UPLOAD_RESULT_COUNT
};

/* Files asked for on the debuginfod read side (labels "type" and "result"). */
enum debuginfod_type { DEBUGINFOD_EXECUTABLE, DEBUGINFOD_DEBUGINFO, DEBUGINFOD_OTHER,
		       DEBUGINFOD_TYPE_COUNT };
enum debuginfod_result { DEBUGINFOD_FOUND, DEBUGINFOD_NOT_FOUND, DEBUGINFOD_ERROR,
			 DEBUGINFOD_RESULT_COUNT };

/*
 * Appends a module's own families to `out` (ctx: the module, borrowed). Modules that keep their
 * own statistics (the analysis monitor, ...) are wired in by the composition root (server/main.c)
 * with server_metrics_source_add, so this module depends on none of them.
 */
typedef void (*metrics_source_fn)(void *ctx, struct byte_buf *out);

#define SERVER_METRICS_MAX_SOURCES 8

/* What the server counts; zero-initialise, then server_metrics_init. */
struct server_metrics {
	struct metrics_counter batches[INGEST_RESULT_COUNT];
	struct metrics_counter errors[INGEST_ERR_COUNT];
	struct metrics_counter bytes_compressed;   /* ingest request bodies */
	struct metrics_counter bytes_decompressed; /* after zstd */
	struct metrics_counter samples_stored;     /* sum of sample counts stored */
	struct metrics_counter sample_rows_stored;
	struct metrics_counter stacks_created;     /* stacks new to the store */
	struct metrics_counter ksym_uploads[INGEST_RESULT_COUNT]; /* stored, unchanged, rejected */
	struct metrics_histogram ingest_seconds;   /* whole ingest handler */
	struct metrics_counter symbol_uploads[SYMBOL_UPLOAD_RESULT_COUNT]; /* chunks by result */
	struct metrics_counter symbol_upload_bytes;  /* chunk bytes written to partial files */
	struct metrics_counter symbol_missing_queries; /* POST /api/v1/symbols/missing answered */
	struct metrics_counter debuginfod_requests[DEBUGINFOD_TYPE_COUNT][DEBUGINFOD_RESULT_COUNT];
	struct metrics_counter debuginfod_bytes;     /* file bytes offered (Content-Length) */
	/* More families, written after the above in the order added (server_metrics_source_add,
	 * server_metrics_detail_source_add). */
	struct {
		metrics_source_fn write;
		void *ctx; /* borrowed; outlives every server_metrics_write */
		bool detail; /* series per node, job, ...: server_metrics_detail_write only */
	} sources[SERVER_METRICS_MAX_SOURCES];
	size_t nsources;
};

/* Appends a family of one unlabelled gauge (counter) sample `v`. */
void metrics_gauge_write(struct byte_buf *out, const char *name, const char *help, uint64_t v);
void metrics_total_write(struct byte_buf *out, const char *name, const char *help, uint64_t v);

/* Prepares the histograms (counters start at zero). */
void server_metrics_init(struct server_metrics *m);

/* Counts one refused ingest or symbol upload request. */
void server_metrics_reject(struct server_metrics *m, enum ingest_error_reason reason,
			   struct metrics_counter *result_counter);

/*
 * Adds a source of families written by server_metrics_write (call before the server serves).
 * Returns 0, or -ENOSPC beyond SERVER_METRICS_MAX_SOURCES.
 */
int server_metrics_source_add(struct server_metrics *m, metrics_source_fn write, void *ctx);

/*
 * Adds a source of families with one series per node, job or other entity of the data,
 * written by server_metrics_detail_write only (/metrics shows them to read credentials).
 * Returns 0, or -ENOSPC beyond SERVER_METRICS_MAX_SOURCES.
 */
int server_metrics_detail_source_add(struct server_metrics *m, metrics_source_fn write,
				     void *ctx);

/* Appends the server's own families (sysom_ingest_*, sysom_kernel_symbol_uploads_total,
 * sysom_symbol_uploads_total, sysom_symbol_upload_bytes_total, sysom_debuginfod_*), then those
 * of the sources added (the alert module, the analysis monitor, ...). */
void server_metrics_write(const struct server_metrics *m, struct byte_buf *out);

/* Appends the families of the detail sources (server_metrics_detail_source_add). */
void server_metrics_detail_write(const struct server_metrics *m, struct byte_buf *out);

#endif
