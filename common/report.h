/* SPDX-License-Identifier: Apache-2.0 */
/* How library modules hand a message to their owner, which decides whether and how to log it. */
#ifndef SYSOM_COMMON_REPORT_H
#define SYSOM_COMMON_REPORT_H

/*
 * Library code does not log: a module that has something a person should read (a library
 * attached, a tracepoint missing) reports it through a callback in its options, and the
 * daemon's top level logs it. The levels are the syslog priorities of common/log.h's
 * enum sysom_log_level, so the daemon passes them through.
 */
enum sysom_report_level {
	SYSOM_REPORT_WARN = 4,  /* something does not work as configured (data is missing) */
	SYSOM_REPORT_INFO = 6,  /* a state change worth one line */
	SYSOM_REPORT_DEBUG = 7, /* detail: one item skipped, counted elsewhere */
};

/* Receives one message (`text` valid during the call only, no trailing newline). */
typedef void (*sysom_report_fn)(void *ctx, enum sysom_report_level level, const char *text);

/* A module's report callback and its context; zeroed: messages are dropped. */
struct sysom_reporter {
	sysom_report_fn fn;
	void *ctx;
};

/* Formats the message (at most 1023 bytes kept) and hands it to `r->fn`; nothing when `r` or
 * its fn is NULL. */
void sysom_report(const struct sysom_reporter *r, enum sysom_report_level level,
		  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
