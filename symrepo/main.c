/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-symrepo: add files to, query, inspect, verify and clean a Build-ID symbol repository. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/elf_buildid.h"
#include "common/error.h"
#include "common/options.h"
#include "symrepo/repo.h"

#define PROG "sysom-symrepo"
#define DEFAULT_REPO "/var/lib/sysom-server/symbols"
#define EXIT_USAGE 2
#define MAX_FRAMES 64       /* inline depth printed per address */
#define MAX_ADD_FILES 4096  /* FILE arguments of one add */

struct cli {
	char *repo;
	uint32_t max_open;
	bool inline_frames, line_table, help;
	uint64_t memory_budget;
};

static void usage(FILE *out, const struct sysom_option *table, size_t n)
{
	fprintf(out,
		"usage: " PROG " [OPTIONS] COMMAND ...\n"
		"\n"
		"commands:\n"
		"  add FILE [--debug DEBUGFILE] [FILE [--debug DEBUGFILE]]...\n"
		"        install ELF files (and their separate debug files), build symbol files\n"
		"  lookup [--vaddr] BUILDID ADDR...\n"
		"        symbolize hex file offsets (what agents send) or, with --vaddr, addresses\n"
		"  info BUILDID      files held for a Build ID and symbol file statistics\n"
		"  verify            check every file's identity and every symbol file\n"
		"  gc                remove leftovers, rebuild missing or corrupt symbol files\n"
		"\n"
		"options (before the command):\n");
	sysom_options_print_help(table, n, out);
	fprintf(out, "\nexit status: 0 success, 1 failure (unknown Build ID, problems found), 2 usage\n");
}

static const char *human_bytes(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	unsigned u = 0;

	while (d >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", v);
	else
		snprintf(buf, len, "%.1f %s", d, units[u]);
	return buf;
}

/* Parses a Build ID given on the command line: a GNU build ID, or (32 hex digits held only
 * under the content-hash tree) a FILE_HASH identity. */
static int parse_build_id(struct symrepo *r, const char *hex, struct sysom_build_id *out)
{
	struct sysom_build_id elf, hash;

	if (sysom_build_id_parse_hex(hex, SYSOM_OBJECT_ELF, &elf))
		return -EINVAL;
	if (strlen(hex) == 32 && sysom_build_id_parse_hex(hex, SYSOM_OBJECT_FILE_HASH, &hash) == 0 &&
	    !symrepo_has(r, &elf, SYMREPO_EXECUTABLE) && !symrepo_has(r, &elf, SYMREPO_SYMBOLS) &&
	    !symrepo_has(r, &elf, SYMREPO_DEBUGINFO) &&
	    (symrepo_has(r, &hash, SYMREPO_EXECUTABLE) || symrepo_has(r, &hash, SYMREPO_SYMBOLS))) {
		*out = hash;
		return 0;
	}
	*out = elf;
	return 0;
}

static int parse_hex_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	if (!*s || strlen(s) > 16)
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 16);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* add */

static void print_add(const char *file, const char *debug, const struct symrepo_add_result *res)
{
	char hex[2 * SYSOM_BUILD_ID_MAX + 1], b1[32], b2[32];
	const struct symfile_write_stats *s = &res->stats;

	sysom_build_id_hex(&res->id, hex, sizeof(hex));
	printf("%s  %s%s%s\n", hex, file, debug ? " + " : "", debug ? debug : "");
	printf("  identity: %s\n",
	       res->id.kind == SYSOM_OBJECT_ELF ? "GNU build ID" : "content hash (no build ID note)");
	printf("  executable: %s\n", res->executable_installed ? "installed" : "already held");
	if (debug)
		printf("  debug file: %s\n", res->debug_installed ? "installed" : "already held");
	if (!res->symbols_built) {
		printf("  symbol file: %s\n", res->executable_installed || res->debug_installed
						      ? "not built (not an ELF file)"
						      : "already built");
		return;
	}
	printf("  symbol file: built in %.3f s, %s, writer peak heap %s\n", s->seconds,
	       human_bytes(s->output_bytes, b1, sizeof(b1)),
	       human_bytes(s->peak_heap_bytes, b2, sizeof(b2)));
	printf("  functions: %" PRIu32 " from .symtab, %" PRIu32 " from .dynsym, %" PRIu32
	       " from DWARF\n",
	       s->from_symtab, s->from_dynsym, s->from_dwarf);
	printf("  inline ranges: %" PRIu32 "%s, line rows: %" PRIu32 "%s\n", s->inline_ranges,
	       s->inlines_dropped ? " (dropped: memory budget)" : "", s->line_rows,
	       s->lines_dropped ? " (dropped: memory budget)" : "");
}

static int cmd_add(struct symrepo *r, int argc, char **argv)
{
	const char *files[MAX_ADD_FILES], *debugs[MAX_ADD_FILES];
	struct symrepo_add_result res;
	char err[1024];
	int n = 0, failed = 0, rc;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *dbg = NULL;

		if (!strcmp(a, "--debug")) {
			if (i + 1 >= argc) {
				fprintf(stderr, PROG ": --debug needs a file\n");
				return EXIT_USAGE;
			}
			dbg = argv[++i];
		} else if (!strncmp(a, "--debug=", 8)) {
			dbg = a + 8;
		} else if (a[0] == '-' && a[1] == '-') {
			fprintf(stderr, PROG ": add: unknown option %s\n", a);
			return EXIT_USAGE;
		}
		if (dbg) {
			if (!n || debugs[n - 1]) {
				fprintf(stderr, PROG ": --debug %s must follow the FILE it belongs to "
						"(one debug file per FILE)\n", dbg);
				return EXIT_USAGE;
			}
			debugs[n - 1] = dbg;
			continue;
		}
		if (n == MAX_ADD_FILES) {
			fprintf(stderr, PROG ": add: at most %d files per run\n", MAX_ADD_FILES);
			return EXIT_USAGE;
		}
		files[n] = a;
		debugs[n++] = NULL;
	}
	if (!n) {
		fprintf(stderr, PROG ": add: no FILE given\n");
		return EXIT_USAGE;
	}
	for (int i = 0; i < n; i++) {
		rc = symrepo_add_files_ex(r, files[i], debugs[i], &res, err, sizeof(err));
		if (rc == 0 || rc == -EEXIST) {
			print_add(files[i], debugs[i], &res);
		} else {
			fprintf(stderr, PROG ": %s: %s\n", files[i], err[0] ? err : sysom_strerror(rc));
			failed++;
		}
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* lookup */

static void print_frame_location(const struct symfile_frame *fr)
{
	printf("%s", fr->demangled ? fr->demangled : fr->name);
	if (fr->file)
		printf("  %s:%" PRIu32, fr->file, fr->line);
	putchar('\n');
}

static int cmd_lookup(struct symrepo *r, int argc, char **argv)
{
	struct symfile_frame frames[MAX_FRAMES];
	const char *id_arg = NULL;
	struct sysom_build_id id;
	struct symfile *f = NULL;
	bool vaddr_mode = false;
	int naddr = 0, rc, status = EXIT_SUCCESS;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--vaddr"))
			vaddr_mode = true;
		else if (argv[i][0] == '-' && argv[i][1] == '-') {
			fprintf(stderr, PROG ": lookup: unknown option %s\n", argv[i]);
			return EXIT_USAGE;
		} else if (!id_arg)
			id_arg = argv[i];
		else
			naddr++;
	}
	if (!id_arg || !naddr) {
		fprintf(stderr, PROG ": usage: lookup [--vaddr] BUILDID ADDR...\n");
		return EXIT_USAGE;
	}
	if (parse_build_id(r, id_arg, &id)) {
		fprintf(stderr, PROG ": %s is not a Build ID (6..128 hex digits, even count)\n",
			id_arg);
		return EXIT_USAGE;
	}
	/* Addresses are checked before anything is printed. */
	for (int i = 0; i < argc; i++) {
		uint64_t v;

		if (argv[i] == id_arg || argv[i][0] == '-')
			continue;
		if (parse_hex_u64(argv[i], &v)) {
			fprintf(stderr, PROG ": %s is not a hex address\n", argv[i]);
			return EXIT_USAGE;
		}
	}
	sysom_build_id_hex(&id, hex, sizeof(hex));
	f = symrepo_symbols_acquire(r, &id, &rc);
	if (!f) {
		if (rc == -ENOENT && symrepo_has(r, &id, SYMREPO_EXECUTABLE))
			fprintf(stderr, PROG ": %s: the executable is held but its symbol file is "
					"missing (run gc)\n", hex);
		else if (rc == -ENOENT)
			fprintf(stderr, PROG ": %s: unknown Build ID\n", hex);
		else
			fprintf(stderr, PROG ": %s: symbol file unusable: %s (run verify/gc)\n", hex,
				sysom_strerror(rc));
		return EXIT_FAILURE;
	}
	for (int i = 0; i < argc; i++) {
		uint64_t addr, vaddr;
		int n, width;

		if (argv[i] == id_arg || argv[i][0] == '-')
			continue;
		parse_hex_u64(argv[i], &addr);
		width = printf("0x%" PRIx64, addr);
		vaddr = addr;
		if (!vaddr_mode && symfile_offset_to_vaddr(f, addr, &vaddr)) {
			printf("  [no symbol] (offset in no executable segment)\n");
			continue;
		}
		n = symfile_lookup(f, vaddr, frames, MAX_FRAMES);
		if (n < 0) {
			printf("  [error: %s]\n", sysom_strerror(n));
			status = EXIT_FAILURE;
			continue;
		}
		if (n == 0) {
			printf("  [no symbol]\n");
			continue;
		}
		/* The function itself first; the calls inlined into it below, indented. */
		printf("  ");
		print_frame_location(&frames[n - 1]);
		for (int k = n - 2, depth = 1; k >= 0; k--, depth++) {
			printf("%*s  %*s(inlined) ", width, "", 2 * depth, "");
			print_frame_location(&frames[k]);
		}
	}
	symrepo_symbols_release(r, f);
	if (fflush(stdout))
		status = EXIT_FAILURE;
	return status;
}

/* ------------------------------------------------------------------------------------------ */
/* info */

/* True when the repository's executable of `id` starts with the ELF magic (only ELF files
 * get symbol files; a content-hash identity may name a script). */
static bool executable_is_elf(struct symrepo *r, const struct sysom_build_id *id)
{
	char path[4096], magic[4];
	bool elf = false;
	FILE *f;

	if (symrepo_path(r, id, SYMREPO_EXECUTABLE, path, sizeof(path)))
		return false;
	f = fopen(path, "rb");
	if (f) {
		elf = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "\177ELF", 4);
		fclose(f);
	}
	return elf;
}


static bool print_file(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		       const char *label)
{
	char path[4096], b[32];
	struct stat st;

	if (symrepo_path(r, id, kind, path, sizeof(path)) || stat(path, &st) < 0) {
		printf("%-12s absent\n", label);
		return false;
	}
	printf("%-12s %s (%s, %lld bytes)\n", label, path, human_bytes((uint64_t)st.st_size, b, sizeof(b)),
	       (long long)st.st_size);
	return true;
}

static int cmd_info(struct symrepo *r, int argc, char **argv)
{
	char hex[2 * SYSOM_BUILD_ID_MAX + 1], err[1024], b[32];
	struct sysom_build_id id;
	struct symfile_info info;
	struct symfile *f;
	bool any = false;
	int rc, status = EXIT_SUCCESS;

	if (argc != 1) {
		fprintf(stderr, PROG ": usage: info BUILDID\n");
		return EXIT_USAGE;
	}
	if (parse_build_id(r, argv[0], &id)) {
		fprintf(stderr, PROG ": %s is not a Build ID\n", argv[0]);
		return EXIT_USAGE;
	}
	sysom_build_id_hex(&id, hex, sizeof(hex));
	printf("build ID:    %s (%s)\n", hex,
	       id.kind == SYSOM_OBJECT_ELF ? "GNU build ID" : "content hash");
	any |= print_file(r, &id, SYMREPO_EXECUTABLE, "executable:");
	any |= print_file(r, &id, SYMREPO_DEBUGINFO, "debug file:");
	any |= print_file(r, &id, SYMREPO_SYMBOLS, "symbols:");
	if (!any) {
		fprintf(stderr, PROG ": %s: unknown Build ID\n", hex);
		return EXIT_FAILURE;
	}
	rc = symrepo_check(r, &id, SYMREPO_SYMBOLS, err, sizeof(err));
	if (rc == -ENOENT) {
		if (symrepo_has(r, &id, SYMREPO_EXECUTABLE) && !executable_is_elf(r, &id))
			printf("status:      not an ELF file: no symbol file\n");
		else if (symrepo_has(r, &id, SYMREPO_EXECUTABLE))
			printf("status:      symbol file missing (run gc)\n");
		else
			printf("status:      no executable yet: the symbol file is built when it "
			       "arrives\n");
		return EXIT_SUCCESS;
	}
	if (rc) {
		printf("status:      %s\n", err[0] ? err : sysom_strerror(rc));
		status = EXIT_FAILURE;
	} else {
		printf("status:      ok (verified)\n");
	}
	f = symrepo_symbols_acquire(r, &id, &rc);
	if (!f)
		return EXIT_FAILURE;
	symfile_info_get(f, &info);
	printf("segments:    %" PRIu32 " executable PT_LOAD\n", info.segments);
	printf("functions:   %" PRIu32 " (%" PRIu32 " from .symtab, %" PRIu32 " from .dynsym, %" PRIu32
	       " from DWARF)\n",
	       info.functions, info.from_symtab, info.from_dynsym, info.from_dwarf);
	printf("inline:      %" PRIu32 " ranges\n", info.inline_ranges);
	printf("lines:       %" PRIu32 " rows in %" PRIu32 " files\n", info.line_rows, info.files);
	printf("strings:     %s\n", human_bytes(info.string_bytes, b, sizeof(b)));
	printf("file size:   %s\n", human_bytes(info.file_bytes, b, sizeof(b)));
	symrepo_symbols_release(r, f);
	return status;
}

/* ------------------------------------------------------------------------------------------ */
/* verify */


struct verify_ctx {
	struct symrepo *r;
	uint64_t ids, problems;
};

static int verify_one(void *ctx, const struct sysom_build_id *id, bool executable, bool debuginfo,
		      bool symbols)
{
	static const char *const names[] = { "executable", "debug file", "symbol file" };
	struct verify_ctx *v = ctx;
	bool present[3] = { executable, debuginfo, symbols };
	char hex[2 * SYSOM_BUILD_ID_MAX + 1], err[1024];
	int rc;

	v->ids++;
	sysom_build_id_hex(id, hex, sizeof(hex));
	for (int k = 0; k < 3; k++) {
		if (!present[k])
			continue;
		rc = symrepo_check(v->r, id, (enum symrepo_kind)k, err, sizeof(err));
		if (rc && rc != -ENOENT) {
			printf("PROBLEM %s %s: %s\n", hex, names[k], err[0] ? err : sysom_strerror(rc));
			v->problems++;
		}
	}
	if (executable && !symbols && !symrepo_has(v->r, id, SYMREPO_SYMBOLS) &&
	    executable_is_elf(v->r, id)) {
		printf("PROBLEM %s symbol file: missing (run gc)\n", hex);
		v->problems++;
	}
	return 0;
}

static int cmd_verify(struct symrepo *r, int argc)
{
	struct verify_ctx v = { .r = r };
	int rc;

	if (argc) {
		fprintf(stderr, PROG ": usage: verify\n");
		return EXIT_USAGE;
	}
	rc = symrepo_for_each(r, verify_one, &v);
	if (rc) {
		fprintf(stderr, PROG ": walking the repository: %s\n", sysom_strerror(rc));
		return EXIT_FAILURE;
	}
	printf("%" PRIu64 " Build IDs checked, %" PRIu64 " problem%s\n", v.ids, v.problems,
	       v.problems == 1 ? "" : "s");
	return v.problems ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* gc */

static int cmd_gc(struct symrepo *r, int argc)
{
	struct symrepo_gc_stats st = { 0 };
	char err[1024];
	int rc;

	if (argc) {
		fprintf(stderr, PROG ": usage: gc\n");
		return EXIT_USAGE;
	}
	rc = symrepo_gc(r, &st, err, sizeof(err));
	if (rc) {
		fprintf(stderr, PROG ": gc: %s\n", err[0] ? err : sysom_strerror(rc));
		return EXIT_FAILURE;
	}
	printf("temporary files removed: %" PRIu64 "\n", st.tmp_removed);
	printf("symbol files rebuilt:    %" PRIu64 "\n", st.symbols_rebuilt);
	printf("corrupt files removed:   %" PRIu64 "\n", st.corrupt_removed);
	printf("symbol files failed:     %" PRIu64 "\n", st.symbols_failed);
	printf("Build IDs held:          %" PRIu64 "\n", st.build_ids);
	if (st.symbols_failed) {
		fprintf(stderr, PROG ": gc: %s\n", err);
		return EXIT_FAILURE;
	}
	return EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct cli c = { .inline_frames = true, .line_table = true };
	const struct sysom_option table[] = {
		{ "repo", SYSOM_OPT_STRING, &c.repo, 0, 0,
		  "repository directory (default " DEFAULT_REPO ")", false },
		{ "max-open", SYSOM_OPT_UINT, &c.max_open, 1, 65536,
		  "symbol files kept mapped (default 256)", false },
		{ "inline-frames", SYSOM_OPT_BOOL, &c.inline_frames, 0, 0,
		  "write inline frames into symbol files (default true)", false },
		{ "line-table", SYSOM_OPT_BOOL, &c.line_table, 0, 0,
		  "write file:line rows into symbol files (default true)", false },
		{ "memory-budget", SYSOM_OPT_SIZE, &c.memory_budget, 0, (double)(1ULL << 40),
		  "heap the symbol-file writer may use (default: the writer's, 256M)", false },
		{ "help", SYSOM_OPT_BOOL, &c.help, 0, 0, "this text", true },
	};
	const size_t ntable = sizeof(table) / sizeof(table[0]);
	struct symrepo_options opts;
	struct symrepo *r = NULL;
	const char *cmd;
	char err[512];
	int idx, rc, status = EXIT_USAGE;

	idx = sysom_options_parse_argv(table, ntable, argc, argv, err, sizeof(err));
	if (idx < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		goto cleanup;
	}
	if (c.help) {
		usage(stdout, table, ntable);
		status = EXIT_SUCCESS;
		goto cleanup;
	}
	if (idx >= argc) {
		usage(stderr, table, ntable);
		goto cleanup;
	}
	cmd = argv[idx++];
	if (strcmp(cmd, "add") && strcmp(cmd, "lookup") && strcmp(cmd, "info") &&
	    strcmp(cmd, "verify") && strcmp(cmd, "gc")) {
		fprintf(stderr, PROG ": unknown command '%s' (add, lookup, info, verify, gc)\n", cmd);
		goto cleanup;
	}
	symrepo_options_default(&opts, c.repo ? c.repo : DEFAULT_REPO);
	if (c.max_open)
		opts.max_open_files = c.max_open;
	opts.inline_frames = c.inline_frames;
	opts.line_table = c.line_table;
	opts.writer_memory_budget = c.memory_budget;
	rc = symrepo_open(&opts, &r);
	if (rc) {
		fprintf(stderr, PROG ": cannot open repository %s: %s\n", opts.root, sysom_strerror(rc));
		status = EXIT_FAILURE;
		goto cleanup;
	}
	if (!strcmp(cmd, "add"))
		status = cmd_add(r, argc - idx, argv + idx);
	else if (!strcmp(cmd, "lookup"))
		status = cmd_lookup(r, argc - idx, argv + idx);
	else if (!strcmp(cmd, "info"))
		status = cmd_info(r, argc - idx, argv + idx);
	else if (!strcmp(cmd, "verify"))
		status = cmd_verify(r, argc - idx);
	else
		status = cmd_gc(r, argc - idx);
cleanup:
	symrepo_close(r);
	sysom_options_free(table, ntable);
	if (fflush(stdout) && status == EXIT_SUCCESS)
		status = EXIT_FAILURE;
	return status;
}
