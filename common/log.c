/* SPDX-License-Identifier: Apache-2.0 */
/* Levelled logging to stderr, journald-aware. */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum sysom_log_level max_printed = SYSOM_LOG_INFO;
static const char *program_name = "sysom";
static bool journald_stream;

void sysom_log_setup(const char *program, enum sysom_log_level max_level)
{
	if (program)
		program_name = program;
	max_printed = max_level;
	journald_stream = getenv("JOURNAL_STREAM") != NULL;
}

int sysom_log_level_parse(const char *name, enum sysom_log_level *out)
{
	static const struct {
		const char *name;
		enum sysom_log_level level;
	} names[] = {
		{ "error", SYSOM_LOG_ERROR },
		{ "warn", SYSOM_LOG_WARN },
		{ "warning", SYSOM_LOG_WARN },
		{ "info", SYSOM_LOG_INFO },
		{ "debug", SYSOM_LOG_DEBUG },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(name, names[i].name) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return -EINVAL;
}

bool sysom_log_enabled(enum sysom_log_level level)
{
	return level <= max_printed;
}

static const char *level_name(enum sysom_log_level level)
{
	switch (level) {
	case SYSOM_LOG_ERROR:
		return "error";
	case SYSOM_LOG_WARN:
		return "warn";
	case SYSOM_LOG_INFO:
		return "info";
	case SYSOM_LOG_DEBUG:
		return "debug";
	}
	return "?";
}

void sysom_log(enum sysom_log_level level, const char *fmt, ...)
{
	char line[2048];
	size_t used = 0;
	int saved_errno = errno;
	va_list ap;

	if (!sysom_log_enabled(level))
		return;
	if (journald_stream) {
		used = (size_t)snprintf(line, sizeof(line), "<%d>", (int)level);
	} else {
		struct timespec now;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &now);
		gmtime_r(&now.tv_sec, &tm);
		used = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
		used += (size_t)snprintf(line + used, sizeof(line) - used, ".%03ldZ %s %s: ",
					 now.tv_nsec / 1000000, program_name, level_name(level));
	}
	va_start(ap, fmt);
	int n = vsnprintf(line + used, sizeof(line) - used, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	used += (size_t)n;
	if (used > sizeof(line) - 2)
		used = sizeof(line) - 2;
	line[used++] = '\n';
	/* One write per line keeps lines whole when threads log at once. */
	ssize_t ignored = write(STDERR_FILENO, line, used);
	(void)ignored;
	errno = saved_errno;
}
