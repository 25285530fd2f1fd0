/* SPDX-License-Identifier: Apache-2.0 */
/* One option table per program drives both its command-line flags and its config file. */
#ifndef SYSOM_COMMON_OPTIONS_H
#define SYSOM_COMMON_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sysom_option_type {
	SYSOM_OPT_STRING,   /* char *: heap copy; the target must start NULL or heap-allocated */
	SYSOM_OPT_UINT,     /* uint32_t within [min, max] */
	SYSOM_OPT_DOUBLE,   /* double within [min, max] */
	SYSOM_OPT_BOOL,     /* bool: true/false/yes/no/1/0/on/off; a bare flag means true */
	SYSOM_OPT_DURATION, /* double seconds: "30", "30s", "500ms", "5m", "1h" within [min, max] */
	SYSOM_OPT_SIZE,     /* uint64_t bytes: "1048576", "64k", "256M", "2G" within [min, max] */
};

struct sysom_option {
	const char *name;  /* "drain-interval": flag --drain-interval, config key drain-interval
			      or drain_interval */
	enum sysom_option_type type;
	void *target;      /* where the parsed value goes (type above) */
	double min, max;   /* bounds for numeric types (inclusive) */
	const char *help;  /* one line for --help */
	bool cli_only;     /* e.g. --config, --check: not accepted in the config file */
};

/*
 * Sets option `name` (hyphens and underscores are equivalent) from text. Returns 0, -ENOENT
 * for an unknown name, or -EINVAL with `err` saying why the value is refused.
 */
int sysom_option_set(const struct sysom_option *table, size_t n, const char *name,
		     const char *value, char *err, size_t errlen);

/*
 * Applies a config file: `key = value` lines, '#' comments, blank lines ignored, values may be
 * double-quoted. Unknown keys, CLI-only keys and bad values are errors naming file and line.
 * Returns 0, -errno when the file cannot be read, or -SYSOM_ECONFIG.
 */
int sysom_options_load_file(const struct sysom_option *table, size_t n, const char *path,
			    char *err, size_t errlen);

/* Same for text already in memory (`origin` names it in errors). */
int sysom_options_load_text(const struct sysom_option *table, size_t n, const char *text,
			    size_t len, const char *origin, char *err, size_t errlen);

/*
 * Parses argv flags (`--name value`, `--name=value`, bare `--flag` for booleans) from index
 * 1. Stops at the first non-flag argument and returns its index (argc when none). Returns
 * -SYSOM_ECONFIG with `err` set for unknown flags or bad values.
 */
int sysom_options_parse_argv(const struct sysom_option *table, size_t n, int argc,
			     char *const argv[], char *err, size_t errlen);

/* Finds the value of flag `name` in argv without applying anything (e.g. --config first). */
const char *sysom_options_peek_argv(int argc, char *const argv[], const char *name);

/* Prints the table as help text to `out` (a FILE *). */
void sysom_options_print_help(const struct sysom_option *table, size_t n, void *out);

/* Frees owned strings of STRING options and resets them to NULL. */
void sysom_options_free(const struct sysom_option *table, size_t n);

/* Parses a duration ("30", "30s", "500ms", "5m", "1h", "2d") into seconds; 0 or -EINVAL. */
int sysom_parse_duration(const char *text, double *seconds);
/* Parses a size ("1048576", "64k", "256M", "2G", case-insensitive, optional "iB"/"B"). */
int sysom_parse_size(const char *text, uint64_t *bytes);
/* A seconds setting as nanoseconds: `value` (0: `dflt`) must be finite and in (0, max], and
 * come to at least 1 ns. True and *out written, or false. */
bool sysom_seconds_option(double value, double dflt, double max, uint64_t *out);

#endif
