/* SPDX-License-Identifier: Apache-2.0 */
/* Levelled logging to stderr for the daemons' top level (library code does not log). */
#ifndef SYSOM_COMMON_LOG_H
#define SYSOM_COMMON_LOG_H

#include <stdbool.h>

enum sysom_log_level {
	SYSOM_LOG_ERROR = 3, /* syslog priorities, so journald can take them as <N> prefixes */
	SYSOM_LOG_WARN = 4,
	SYSOM_LOG_INFO = 6,
	SYSOM_LOG_DEBUG = 7,
};

/* Sets the most verbose level printed (default INFO) and the program name for each line. */
void sysom_log_setup(const char *program, enum sysom_log_level max_level);

/* Parses "error", "warn", "info" or "debug"; returns 0 or -EINVAL. */
int sysom_log_level_parse(const char *name, enum sysom_log_level *out);

/* True when messages of this level are printed. */
bool sysom_log_enabled(enum sysom_log_level level);

/*
 * Prints one line. Under journald (JOURNAL_STREAM set) lines carry a "<N>" priority prefix;
 * otherwise a UTC timestamp, the level and the program name. Thread-safe, one write per line.
 */
void sysom_log(enum sysom_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) sysom_log(SYSOM_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) sysom_log(SYSOM_LOG_WARN, __VA_ARGS__)
#define log_info(...) sysom_log(SYSOM_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                    \
	do {                                              \
		if (sysom_log_enabled(SYSOM_LOG_DEBUG))   \
			sysom_log(SYSOM_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif
