/* SPDX-License-Identifier: Apache-2.0 */
/* Uploads the kernel's (and modules') text symbols once per build ID, off the main thread. */
#ifndef SYSOM_AGENT_SYMBOLS_KSYMS_UPLOAD_H
#define SYSOM_AGENT_SYMBOLS_KSYMS_UPLOAD_H

#include <stdint.h>

#include "agent/node/kernel.h"

enum ksyms_upload_event_kind {
	KSYMS_UPLOAD_PRESENT = 1, /* the server already has this object's symbols */
	KSYMS_UPLOAD_DONE,        /* uploaded (count = symbols) */
	KSYMS_UPLOAD_RETRY,       /* failed; retried after delay_ms */
	KSYMS_UPLOAD_GIVEN_UP,    /* refused for good (4xx) or nothing to upload */
};

struct ksyms_upload_event {
	enum ksyms_upload_event_kind kind;
	const char *object;  /* "[kernel.kallsyms]" or a module name */
	const char *build_id; /* hex */
	long count;
	int http_status;
	uint64_t delay_ms;
	const char *message; /* error text, never NULL */
};

typedef void (*ksyms_upload_event_fn)(void *ctx, const struct ksyms_upload_event *ev);

struct ksyms_upload_options {
	const char *server_url;   /* copied */
	const char *token;        /* copied, may be NULL */
	const char *ca_file;      /* copied, may be NULL */
	const struct kernel_info *kernel; /* borrowed; outlives the uploader */
	const char *kallsyms_path; /* NULL: /proc/kallsyms */
	double retry_initial_s;   /* 0: 5 s; doubles per failure. A server's Retry-After (a
				     503 while its decode memory is busy) replaces it */
	double retry_max_s;       /* 0: 300 s; bounds Retry-After too */
	ksyms_upload_event_fn on_event;
	void *event_ctx;
};

struct ksyms_upload;

/* Starts the upload thread. 0 or -errno. */
int ksyms_upload_start(const struct ksyms_upload_options *opts, struct ksyms_upload **out);

/* Stops the thread (interrupting a backoff wait or transfer) and frees it. Accepts NULL. */
void ksyms_upload_stop(struct ksyms_upload *u);

#endif
