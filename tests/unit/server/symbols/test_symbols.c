/* SPDX-License-Identifier: Apache-2.0 */
/* The symbol repository's server side with real ELF files compiled at test time: missing
 * queries, chunked uploads (resume, hash and identity checks, limits, concurrent uploads),
 * info, the debuginfod read side, and symbolization of user frames through the repository
 * (leaf and return-address frames, inlined calls, stripped symbols never misattributed). */
#include <dirent.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "common/elf_buildid.h"
#include "common/error.h"
#include "server/symbols/symbols.h"
#include "server/symbols/upstream.h"
#include "symrepo/repo.h"
#include "tests/unit/server/harness.h"

#define EXE "executable"
#define DBG "debuginfo"
#define UPLOAD_A "00112233445566778899aabbccddeeff"
#define UPLOAD_B "ffeeddccbbaa99887766554433221100"
#define NOPE_HEX "0123456789abcdef0123456789abcdef01234567"

/* A program under test: its bytes, identity and function symbols. */
struct func {
	char name[32];
	uint64_t vaddr, size;
};

struct prog {
	char path[256];
	uint8_t *data;
	size_t len;
	struct sysom_build_id id;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	char hash[64]; /* "xxh3-128:<hex>" */
	struct func funcs[64];
	int nfuncs;
	/* The executable PT_LOAD (file offset → vaddr). */
	uint64_t seg_offset, seg_vaddr, seg_size;
};

/* Compiled once for the whole group. */
static struct {
	char dir[64];
	struct prog prog;          /* -g: symbols and DWARF (inlined add_one) */
	struct prog prog2;         /* f1..f5 back to back, with debug info */
	struct prog prog2_stripped;/* prog2 without f2, f3 symbols and without DWARF */
	struct prog prog2_debug;   /* objcopy --only-keep-debug prog2 */
	uint64_t inline_vaddr;     /* an address inside add_one inlined into uses_inline */
} g;

struct state {
	struct harness *h;
	struct symrepo *repo;
	struct symbols *sy;
	char symdir[256];
	bool mounted; /* symdir is a tmpfs of this test's */
};

static const char prog_c[] =
	"#include <stdlib.h>\n"
	"volatile int sink;\n"
	"__attribute__((noinline)) void fa(int n) { for (int i = 0; i < n; i++) sink += i; }\n"
	"__attribute__((noinline, noreturn)) void die(int code) { exit(code); }\n"
	"__attribute__((noinline)) void ends_in_call(int n) { sink += n; die(n); }\n"
	"__attribute__((noinline)) void after_call(int n) { sink -= n; sink *= 3; }\n"
	"static inline __attribute__((always_inline)) int add_one(volatile int *p)\n"
	"{\n"
	"	int v = *p;\n"
	"	v = v * 7 + 1;\n"
	"	*p = v;\n"
	"	return v;\n"
	"}\n"
	"__attribute__((noinline)) int uses_inline(int x) { volatile int v = x; int r = add_one(&v);"
	" return r * 3 + v; }\n"
	"int main(int argc, char **argv)\n"
	"{\n"
	"	(void)argv;\n"
	"	fa(argc);\n"
	"	after_call(argc);\n"
	"	if (argc > 5) ends_in_call(argc);\n"
	"	return uses_inline(argc) & 1;\n"
	"}\n";

static const char prog2_c[] =
	"volatile int sink;\n"
	"__attribute__((noinline)) void f1(int n) { for (int i = 0; i < n; i++) sink += i; }\n"
	"__attribute__((noinline)) void f2(int n) { for (int i = 0; i < n; i++) sink ^= i * 3; }\n"
	"__attribute__((noinline)) void f3(int n) { for (int i = 0; i < n; i++) sink -= i * 5; }\n"
	"__attribute__((noinline)) void f4(int n) { for (int i = 0; i < n; i++) sink |= i * 7; }\n"
	"__attribute__((noinline)) void f5(int n) { for (int i = 0; i < n; i++) sink &= i * 9; }\n"
	"int main(int argc, char **argv) { (void)argv; f1(argc); f2(argc); f3(argc); f4(argc);"
	" f5(argc); return 0; }\n";

/* ---- test-time ELF helpers ------------------------------------------------------------------ */

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void hash_text(const uint8_t *data, size_t len, char out[64])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	strcpy(out, "xxh3-128:");
	for (int i = 0; i < 16; i++)
		snprintf(out + 9 + 2 * i, 3, "%02x", c.digest[i]);
}

/* Reads a program: bytes, build ID, content hash, functions and its executable segment. */
static void prog_load(struct prog *p, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	Elf *elf;
	Elf_Scn *scn = NULL;
	size_t nph;

	memset(p, 0, sizeof(*p));
	snprintf(p->path, sizeof(p->path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	p->len = (size_t)st.st_size;
	p->data = malloc(p->len);
	assert_non_null(p->data);
	assert_int_equal(pread(fd, p->data, p->len, 0), (ssize_t)p->len);
	assert_int_equal(sysom_elf_build_id(fd, &p->id), 0);
	sysom_build_id_hex(&p->id, p->hex, sizeof(p->hex));
	hash_text(p->data, p->len, p->hash);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	assert_non_null(elf);
	assert_int_equal(elf_getphdrnum(elf, &nph), 0);
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		assert_non_null(gelf_getphdr(elf, (int)i, &ph));
		if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && ph.p_filesz) {
			p->seg_offset = ph.p_offset;
			p->seg_vaddr = ph.p_vaddr;
			p->seg_size = ph.p_filesz;
		}
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		assert_non_null(gelf_getshdr(scn, &sh));
		if (sh.sh_type != SHT_SYMTAB || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;
			gelf_getsym(d, (int)i, &sym);
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_value || !name ||
			    strlen(name) >= sizeof(p->funcs[0].name) || p->nfuncs == 64)
				continue;
			snprintf(p->funcs[p->nfuncs].name, sizeof(p->funcs[0].name), "%s", name);
			p->funcs[p->nfuncs].vaddr = sym.st_value;
			p->funcs[p->nfuncs].size = sym.st_size;
			p->nfuncs++;
		}
	}
	elf_end(elf);
	close(fd);
}

static const struct func *func_of(const struct prog *p, const char *name)
{
	for (int i = 0; i < p->nfuncs; i++)
		if (strcmp(p->funcs[i].name, name) == 0)
			return &p->funcs[i];
	fail_msg("%s has no function %s", p->path, name);
	return NULL;
}

/* The file offset of a vaddr in the executable segment (what agents send). */
static uint64_t offset_of(const struct prog *p, uint64_t vaddr)
{
	assert_true(vaddr >= p->seg_vaddr && vaddr < p->seg_vaddr + p->seg_size);
	return vaddr - p->seg_vaddr + p->seg_offset;
}

/* Finds the low address of an inlined call of `name` (libdw). */
static bool find_inline(Dwarf_Die *die, const char *name, uint64_t *out)
{
	Dwarf_Die child;

	if (dwarf_tag(die) == DW_TAG_inlined_subroutine) {
		Dwarf_Attribute attr;
		Dwarf_Die origin;
		Dwarf_Addr low;
		if (dwarf_attr(die, DW_AT_abstract_origin, &attr) &&
		    dwarf_formref_die(&attr, &origin) && dwarf_diename(&origin) &&
		    strcmp(dwarf_diename(&origin), name) == 0) {
			if (dwarf_lowpc(die, &low) == 0) {
				*out = low;
				return true;
			}
			Dwarf_Addr base, start, end;
			if (dwarf_ranges(die, 0, &base, &start, &end) > 0) {
				*out = start;
				return true;
			}
		}
	}
	if (dwarf_child(die, &child) != 0)
		return false;
	do {
		if (find_inline(&child, name, out))
			return true;
	} while (dwarf_siblingof(&child, &child) == 0);
	return false;
}

static uint64_t inline_address(const char *path, const char *name)
{
	int fd = open(path, O_RDONLY);
	Dwarf *dw = dwarf_begin(fd, DWARF_C_READ);
	Dwarf_Off off = 0, next;
	size_t hsize;
	uint64_t addr = 0;
	bool found = false;

	assert_non_null(dw);
	while (!found && dwarf_nextcu(dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
		Dwarf_Die cu;
		if (dwarf_offdie(dw, off + hsize, &cu))
			found = find_inline(&cu, name, &addr);
		off = next;
	}
	dwarf_end(dw);
	close(fd);
	if (!found)
		fail_msg("%s: no inlined call of %s", path, name);
	return addr;
}

static int group_setup(void **state)
{
	char path[256];

	(void)state;
	elf_version(EV_CURRENT);
	assert_int_equal(fixture_tmpdir_make(g.dir, sizeof(g.dir)), 0);
	snprintf(path, sizeof(path), "%s/prog.c", g.dir);
	write_text(path, prog_c);
	snprintf(path, sizeof(path), "%s/prog2.c", g.dir);
	write_text(path, prog2_c);
	/* Functions in source order, back to back (the misattribution case needs neighbours). */
	const char *flags = "-g -O1 -fno-toplevel-reorder -falign-functions=1 -fno-inline-small-functions"
			    " -fno-optimize-sibling-calls -Wl,--build-id";
	run("cd %s && gcc %s -o prog prog.c && gcc %s -o prog2 prog2.c", g.dir, flags, flags);
	run("cd %s && objcopy --only-keep-debug prog2 prog2.debug && objcopy --strip-debug"
	    " --strip-symbol=f2 --strip-symbol=f3 prog2 prog2.stripped", g.dir);
	snprintf(path, sizeof(path), "%s/prog", g.dir);
	prog_load(&g.prog, path);
	g.inline_vaddr = inline_address(path, "add_one");
	snprintf(path, sizeof(path), "%s/prog2", g.dir);
	prog_load(&g.prog2, path);
	snprintf(path, sizeof(path), "%s/prog2.stripped", g.dir);
	prog_load(&g.prog2_stripped, path);
	snprintf(path, sizeof(path), "%s/prog2.debug", g.dir);
	prog_load(&g.prog2_debug, path);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	free(g.prog.data);
	free(g.prog2.data);
	free(g.prog2_stripped.data);
	free(g.prog2_debug.data);
	fixture_tmpdir_remove(g.dir);
	return 0;
}

/* ---- per-test server side -------------------------------------------------------------------- */

static void state_free(struct state *s);

/* A server side over a fresh repository; with `tmpfs_size` ("1m"), the repository is on a
 * tmpfs of that size (NULL where mounting is not allowed: the caller skips). */
static struct state *state_new_on(const struct symbols_options *base, const char *tmpfs_size)
{
	struct state *s = calloc(1, sizeof(*s));
	struct symrepo_options ro;
	struct symbols_options so = base ? *base : (struct symbols_options){ 0 };
	char err[256], opts[64];

	assert_non_null(s);
	s->h = harness_new(HARNESS_TOKEN, NULL);
	assert_non_null(s->h);
	snprintf(s->symdir, sizeof(s->symdir), "%s/symbols", s->h->dir);
	if (tmpfs_size) {
		assert_int_equal(mkdir(s->symdir, 0750), 0);
		snprintf(opts, sizeof(opts), "size=%s", tmpfs_size);
		if (mount("tmpfs", s->symdir, "tmpfs", 0, opts) != 0) {
			print_message("# cannot mount a tmpfs (%s): this test needs root and "
				      "CAP_SYS_ADMIN\n", strerror(errno));
			state_free(s);
			return NULL;
		}
		s->mounted = true;
	}
	symrepo_options_default(&ro, s->symdir);
	assert_int_equal(symrepo_open(&ro, &s->repo), 0);
	so.dir = s->symdir;
	if (symbols_new(s->repo, s->h->auth, s->h->sym, &s->h->metrics, &so, &s->sy, err,
			sizeof(err)))
		fail_msg("symbols_new: %s", err);
	symbolizer_repository_set(s->h->sym, s->repo, NULL, NULL);
	return s;
}

static struct state *state_new(const struct symbols_options *base)
{
	return state_new_on(base, NULL);
}

static void state_free(struct state *s)
{
	symbols_free(s->sy);
	symrepo_close(s->repo);
	if (s->mounted)
		umount2(s->symdir, MNT_DETACH);
	harness_free(s->h);
	free(s);
}

static int setup(void **state)
{
	*state = state_new(NULL);
	return 0;
}

static int teardown(void **state)
{
	state_free(*state);
	return 0;
}

/* One chunk PUT; returns the status, *body the answer (free it). */
static int put_chunk(struct state *s, const char *hex, const char *kind, const char *upload_id,
		     const char *hash, const char *identity, const uint8_t *data, uint64_t start,
		     uint64_t end, uint64_t total, char **body)
{
	struct test_request t;
	struct http_response resp;
	char path[256], range[96];

	snprintf(path, sizeof(path), SYMBOLS_PREFIX "%s/%s", hex, kind);
	snprintf(range, sizeof(range), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, start, end, total);
	request_init(&t, "PUT", path, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-range", range);
	if (upload_id)
		request_header(&t, "x-sysom-upload-id", upload_id);
	if (hash)
		request_header(&t, "x-sysom-content-hash", hash);
	if (identity)
		request_header(&t, "x-sysom-identity", identity);
	request_body(&t, data + start, (size_t)(end - start + 1));
	return call(symbols_put, s->sy, &t, &resp, body);
}

/* Uploads `p` (or its bytes under another hex) in chunks of `chunk`; returns the last status,
 * and the last body in *last (free it; NULL: dropped). Fails on any unexpected answer. */
static int upload(struct state *s, const struct prog *p, const char *hex, const char *kind,
		  const char *upload_id, size_t chunk, char **last)
{
	char *body = NULL;
	int status = 0;

	for (uint64_t at = 0; at < p->len; at += chunk) {
		uint64_t end = at + chunk > p->len ? p->len - 1 : at + chunk - 1;
		free(body);
		status = put_chunk(s, hex ? hex : p->hex, kind, upload_id, p->hash, NULL, p->data, at,
				   end, p->len, &body);
		if (end + 1 < p->len && status != 202)
			break;
	}
	if (last)
		*last = body;
	else
		free(body);
	return status;
}

static json_t *parse(const char *body)
{
	json_t *doc = json_loads(body, 0, NULL);

	if (!doc)
		fail_msg("not JSON: %s", body);
	return doc;
}

static int post_missing(struct state *s, const char *json, char **body)
{
	struct test_request t;
	struct http_response resp;

	request_init(&t, "POST", SYMBOLS_MISSING_PATH, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_body(&t, json, strlen(json));
	return call(symbols_missing_post, s->sy, &t, &resp, body);
}

static int get_info(struct state *s, const char *hex, char **body)
{
	struct test_request t;
	struct http_response resp;
	char path[256];

	snprintf(path, sizeof(path), SYMBOLS_PREFIX "%s", hex);
	request_init(&t, "GET", path, NULL);
	request_token(&t, HARNESS_TOKEN);
	return call(symbols_get, s->sy, &t, &resp, body);
}

/* The uploads directory's *.part files. */
static int part_files(struct state *s)
{
	char path[300];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "%s/uploads", s->symdir);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".part") != NULL;
	closedir(d);
	return n;
}

/* ---- missing ----------------------------------------------------------------------------------- */

static void test_missing(void **state)
{
	struct state *s = *state;
	char req[1024], *body;
	json_t *doc, *list;

	snprintf(req, sizeof(req),
		 "{\"objects\":[{\"build_id\":\"%s\",\"kind\":\"elf\"},{\"build_id\":\"%s\"},"
		 "{\"build_id\":\"%s\",\"kind\":\"elf\"},"
		 "{\"build_id\":\"00112233445566778899aabbccddeeff\",\"kind\":\"file-hash\"}]}",
		 g.prog.hex, NOPE_HEX, g.prog.hex);
	assert_int_equal(post_missing(s, req, &body), 200);
	doc = parse(body);
	list = json_object_get(doc, "missing");
	/* The duplicate is answered once; a file-hash object never needs a debug file. */
	assert_int_equal(json_array_size(list), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "build_id")),
			    g.prog.hex);
	assert_true(json_is_true(json_object_get(json_array_get(list, 0), "executable")));
	assert_true(json_is_true(json_object_get(json_array_get(list, 0), "debuginfo")));
	assert_true(json_is_false(json_object_get(json_array_get(list, 2), "debuginfo")));
	json_decref(doc);
	free(body);

	/* The unstripped executable is its own debug file: nothing missing for it then. */
	assert_int_equal(upload(s, &g.prog, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	/* The stripped one still wants a debug file. */
	assert_int_equal(upload(s, &g.prog2_stripped, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	snprintf(req, sizeof(req), "{\"objects\":[{\"build_id\":\"%s\"},{\"build_id\":\"%s\"}]}",
		 g.prog.hex, g.prog2.hex);
	assert_int_equal(post_missing(s, req, &body), 200);
	doc = parse(body);
	list = json_object_get(doc, "missing");
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "build_id")),
			    g.prog2.hex);
	assert_true(json_is_false(json_object_get(json_array_get(list, 0), "executable")));
	assert_true(json_is_true(json_object_get(json_array_get(list, 0), "debuginfo")));
	json_decref(doc);
	free(body);
	/* An empty list is fine. */
	assert_int_equal(post_missing(s, "{\"objects\":[]}", &body), 200);
	assert_string_equal(body, "{\"missing\":[]}\n");
	free(body);
}

static void test_missing_malformed(void **state)
{
	struct state *s = *state;
	static const char *const bad[] = {
		"",
		"not json",
		"[]",
		"{\"objects\":{}}",
		"{\"objects\":[1]}",
		"{\"objects\":[{\"kind\":\"elf\"}]}",
		"{\"objects\":[{\"build_id\":\"abc\"}]}",                     /* odd */
		"{\"objects\":[{\"build_id\":\"abcd\"}]}",                    /* too short */
		"{\"objects\":[{\"build_id\":\"zz112233\"}]}",                /* not hex */
		"{\"objects\":[{\"build_id\":\"00112233\",\"kind\":\"pe\"}]}", /* unknown kind */
		"{\"objects\":[{\"build_id\":\"00112233\",\"kind\":\"file-hash\"}]}", /* not 16 bytes */
		"{\"objects\":[],\"objects\":[]}",                            /* duplicate key */
	};
	struct test_request t;
	struct http_response resp;
	char *body;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int status = post_missing(s, bad[i], &body);
		if (status != 400)
			fail_msg("'%s': %d %s", bad[i], status, body);
		assert_non_null(strstr(body, "\"error\""));
		free(body);
	}
	/* Too many objects. */
	size_t n = SYMBOLS_MAX_MISSING_OBJECTS + 1, len = 0;
	char *big = malloc(n * 40 + 32);
	assert_non_null(big);
	len += (size_t)sprintf(big, "{\"objects\":[");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(big + len, "%s{\"build_id\":\"%08zx\"}", i ? "," : "", i);
	sprintf(big + len, "]}");
	assert_int_equal(post_missing(s, big, &body), 413);
	free(body);
	/* Exactly the limit is fine. */
	len = (size_t)(strrchr(big, ',') - big);
	sprintf(big + len, "]}");
	assert_int_equal(post_missing(s, big, &body), 200);
	free(body);
	free(big);
	/* Without the token. */
	request_init(&t, "POST", SYMBOLS_MISSING_PATH, NULL);
	request_body(&t, "{\"objects\":[]}", 14);
	assert_int_equal(call(symbols_missing_post, s->sy, &t, &resp, &body), 401);
	free(body);
}

/* ---- uploads ----------------------------------------------------------------------------------- */

static void test_upload_chunks_and_resume(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	size_t third = p->len / 3 + 1;
	char *body;
	json_t *doc;

	assert_true(p->len > 3000);
	/* Chunk 1 of 3. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, third - 1,
				   p->len, &body), 202);
	doc = parse(body);
	assert_string_equal(json_string_value(json_object_get(doc, "status")), "partial");
	assert_int_equal(json_integer_value(json_object_get(doc, "received")), third);
	json_decref(doc);
	free(body);
	/* Chunk 3 before chunk 2: 409 says where to resume. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 2 * third,
				   p->len - 1, p->len, &body), 409);
	doc = parse(body);
	assert_int_equal(json_integer_value(json_object_get(doc, "resume_at")), third);
	assert_non_null(json_object_get(doc, "error"));
	json_decref(doc);
	free(body);
	/* Chunk 1 again: also a conflict (the server is past it). */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, third - 1,
				   p->len, &body), 409);
	free(body);
	/* Another upload id that starts in the middle: nothing there, start at 0. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_B, p->hash, NULL, p->data, third,
				   2 * third - 1, p->len, &body), 409);
	doc = parse(body);
	assert_int_equal(json_integer_value(json_object_get(doc, "resume_at")), 0);
	json_decref(doc);
	free(body);
	assert_int_equal(symbols_sessions_count(s->sy), 1);
	/* The info shows the partial upload. */
	assert_int_equal(get_info(s, p->hex, &body), 200);
	doc = parse(body);
	assert_true(json_is_null(json_object_get(doc, "executable")));
	json_t *up = json_array_get(json_object_get(doc, "uploads"), 0);
	assert_string_equal(json_string_value(json_object_get(up, "kind")), "executable");
	assert_string_equal(json_string_value(json_object_get(up, "upload_id")), UPLOAD_A);
	assert_int_equal(json_integer_value(json_object_get(up, "received")), third);
	assert_non_null(strstr(json_string_value(json_object_get(up, "updated")), "Z"));
	json_decref(doc);
	free(body);
	/* Resume where the server said: chunks 2 and 3. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, third,
				   2 * third - 1, p->len, &body), 202);
	free(body);
	assert_false(symrepo_has(s->repo, &p->id, SYMREPO_EXECUTABLE));
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 2 * third,
				   p->len - 1, p->len, &body), 201);
	doc = parse(body);
	assert_string_equal(json_string_value(json_object_get(doc, "status")), "stored");
	json_t *syms = json_object_get(doc, "symbols");
	assert_true(json_is_object(syms));
	assert_true(json_integer_value(json_object_get(syms, "functions")) >= 5);
	assert_true(json_integer_value(json_object_get(syms, "segments")) >= 1);
	json_decref(doc);
	free(body);
	assert_true(symrepo_has(s->repo, &p->id, SYMREPO_EXECUTABLE));
	assert_int_equal(part_files(s), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 0);
	/* The installed file is the upload, byte for byte. */
	char path[PATH_MAX];
	struct prog installed;
	assert_int_equal(symrepo_path(s->repo, &p->id, SYMREPO_EXECUTABLE, path, sizeof(path)), 0);
	prog_load(&installed, path);
	assert_int_equal(installed.len, p->len);
	assert_memory_equal(installed.data, p->data, p->len);
	free(installed.data);
	/* Uploading it again: present, at any chunk. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_B, p->hash, NULL, p->data, 0, third - 1,
				   p->len, &body), 200);
	assert_non_null(strstr(body, "\"present\""));
	free(body);
	assert_int_equal(part_files(s), 0);
	/* The metrics counted every outcome. */
	assert_int_equal(metrics_counter_get(&s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_PARTIAL]), 2);
	assert_int_equal(metrics_counter_get(&s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_CONFLICT]), 3);
	assert_int_equal(metrics_counter_get(&s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_STORED]), 1);
	assert_int_equal(metrics_counter_get(&s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_PRESENT]), 1);
	assert_int_equal(metrics_counter_get(&s->h->metrics.symbol_upload_bytes), p->len);
}

/* A restarted server (new context over the same directory) resumes partial uploads. */
static void test_upload_survives_restart(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	struct symbols_options so = { .dir = s->symdir };
	char err[256], *body;

	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, 999,
				   p->len, &body), 202);
	free(body);
	symbols_free(s->sy);
	assert_int_equal(symbols_new(s->repo, s->h->auth, s->h->sym, &s->h->metrics, &so, &s->sy,
				     err, sizeof(err)), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 1);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 500, 999,
				   p->len, &body), 409);
	assert_non_null(strstr(body, "\"resume_at\":1000"));
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 1000,
				   p->len - 1, p->len, &body), 201);
	free(body);
	assert_true(symrepo_has(s->repo, &p->id, SYMREPO_EXECUTABLE));
}

static void test_upload_wrong_hash(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	char wrong[64], *body;

	snprintf(wrong, sizeof(wrong), "%s", p->hash);
	wrong[20] = wrong[20] == '0' ? '1' : '0';
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, wrong, NULL, p->data, 0, 99, p->len,
				   &body), 202);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, wrong, NULL, p->data, 100, p->len - 1,
				   p->len, &body), 422);
	assert_non_null(strstr(body, "content hash mismatch"));
	free(body);
	/* Nothing installed, nothing left behind; the next attempt starts from 0. */
	assert_false(symrepo_has(s->repo, &p->id, SYMREPO_EXECUTABLE));
	assert_false(symrepo_has(s->repo, &p->id, SYMREPO_SYMBOLS));
	assert_int_equal(part_files(s), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 0);
	assert_int_equal(get_info(s, p->hex, &body), 404);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 100, 199,
				   p->len, &body), 409);
	assert_non_null(strstr(body, "\"resume_at\":0"));
	free(body);
	assert_int_equal(upload(s, p, NULL, EXE, UPLOAD_A, 4096, NULL), 201);
}

static void test_upload_identity_mismatch(void **state)
{
	struct state *s = *state;
	char *body;

	/* prog2's bytes (with their correct content hash) claimed to be prog. */
	assert_int_equal(upload(s, &g.prog2, g.prog.hex, EXE, UPLOAD_A, 1 << 20, &body), 422);
	assert_non_null(strstr(body, "identity mismatch"));
	assert_non_null(strstr(body, g.prog2.hex));
	free(body);
	assert_false(symrepo_has(s->repo, &g.prog.id, SYMREPO_EXECUTABLE));
	assert_false(symrepo_has(s->repo, &g.prog2.id, SYMREPO_EXECUTABLE));
	assert_int_equal(part_files(s), 0);
	/* A debug file of another build, too. */
	assert_int_equal(upload(s, &g.prog2_debug, g.prog.hex, DBG, UPLOAD_A, 1 << 20, &body), 422);
	free(body);
	assert_false(symrepo_has(s->repo, &g.prog.id, SYMREPO_DEBUGINFO));
	/* A file-hash identity whose bytes hash to something else. */
	const char *other = "00112233445566778899aabbccddeeff";
	assert_int_equal(put_chunk(s, other, EXE, UPLOAD_A, g.prog.hash, "file-hash", g.prog.data,
				   0, g.prog.len - 1, g.prog.len, &body), 422);
	free(body);
	assert_int_equal(part_files(s), 0);
	assert_int_equal(
		metrics_counter_get(&s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_INVALID]), 3);
}

/* A file without a build ID, identified by its content hash. */
static void test_upload_file_hash(void **state)
{
	struct state *s = *state;
	static const char script[] = "#!/bin/sh\necho not an ELF file\n";
	char hash[64], hex[64], req[256], *body;

	hash_text((const uint8_t *)script, sizeof(script) - 1, hash);
	snprintf(hex, sizeof(hex), "%s", hash + 9);
	assert_int_equal(put_chunk(s, hex, EXE, UPLOAD_A, hash, "file-hash",
				   (const uint8_t *)script, 0, sizeof(script) - 2, sizeof(script) - 1,
				   &body), 201);
	free(body);
	/* A debug file for it makes no sense. */
	assert_int_equal(put_chunk(s, hex, DBG, UPLOAD_A, hash, "file-hash", (const uint8_t *)script,
				   0, sizeof(script) - 2, sizeof(script) - 1, &body), 400);
	free(body);
	snprintf(req, sizeof(req), "{\"objects\":[{\"build_id\":\"%s\",\"kind\":\"file-hash\"}]}",
		 hex);
	assert_int_equal(post_missing(s, req, &body), 200);
	assert_string_equal(body, "{\"missing\":[]}\n");
	free(body);
	assert_int_equal(get_info(s, hex, &body), 200);
	json_t *doc = parse(body);
	assert_string_equal(json_string_value(json_object_get(doc, "identity")), "file-hash");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "executable"),
							     "size")),
			 sizeof(script) - 1);
	json_decref(doc);
	free(body);
}

static void test_upload_malformed_and_limits(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	struct test_request t;
	struct http_response resp;
	char *body, path[256];
	static const char *const ranges[] = { "bytes 0-99", "bytes 10-5/100", "bytes 0-99/99",
					      "0-99/100", "bytes 0-99/1e3", "bytes -1-99/100",
					      "bytes 0-99/100 ", "items 0-99/100" };

	snprintf(path, sizeof(path), SYMBOLS_PREFIX "%s/" EXE, p->hex);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		request_init(&t, "PUT", path, NULL);
		request_token(&t, HARNESS_TOKEN);
		request_header(&t, "content-range", ranges[i]);
		request_header(&t, "x-sysom-upload-id", UPLOAD_A);
		request_header(&t, "x-sysom-content-hash", p->hash);
		request_body(&t, p->data, 100);
		if (call(symbols_put, s->sy, &t, &resp, &body) != 400)
			fail_msg("Content-Range '%s' accepted: %s", ranges[i], body);
		free(body);
	}
	/* Headers: upload id too short / not hex, hash malformed, identity unknown. */
	assert_int_equal(put_chunk(s, p->hex, EXE, "0011", p->hash, NULL, p->data, 0, 99, p->len,
				   &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, "zz112233445566778899", p->hash, NULL, p->data, 0,
				   99, p->len, &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, "md5:0011", NULL, p->data, 0, 99,
				   p->len, &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, NULL, NULL, p->data, 0, 99, p->len,
				   &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, NULL, p->hash, NULL, p->data, 0, 99, p->len,
				   &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, "pe", p->data, 0, 99, p->len,
				   &body), 400);
	free(body);
	/* Path: bad build ID, unknown kind. */
	assert_int_equal(put_chunk(s, "xyz", EXE, UPLOAD_A, p->hash, NULL, p->data, 0, 99, p->len,
				   &body), 400);
	free(body);
	assert_int_equal(put_chunk(s, p->hex, "source", UPLOAD_A, p->hash, NULL, p->data, 0, 99,
				   p->len, &body), 400);
	free(body);
	/* Body length differs from the range. */
	request_init(&t, "PUT", path, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-range", "bytes 0-99/5000");
	request_header(&t, "x-sysom-upload-id", UPLOAD_A);
	request_header(&t, "x-sysom-content-hash", p->hash);
	request_body(&t, p->data, 99);
	assert_int_equal(call(symbols_put, s->sy, &t, &resp, &body), 400);
	free(body);
	/* No token. */
	request_init(&t, "PUT", path, NULL);
	request_header(&t, "content-range", "bytes 0-99/5000");
	request_body(&t, p->data, 100);
	assert_int_equal(call(symbols_put, s->sy, &t, &resp, &body), 401);
	free(body);
	assert_int_equal(part_files(s), 0);

	/* A file over the limit is refused before anything is written. */
	struct state *small = state_new(&(struct symbols_options){ .max_file_size = 4096 });
	assert_int_equal(put_chunk(small, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, 99,
				   p->len, &body), 413);
	free(body);
	assert_int_equal(part_files(small), 0);
	state_free(small);
}

static void test_upload_sessions_and_sweep(void **state)
{
	struct state *s = state_new(&(struct symbols_options){ .max_sessions = 2,
								.upload_expiry_s = 3600 });
	const struct prog *p = &g.prog;
	char *body, path[512];
	struct symbols_sweep_stats st;
	struct test_request t;
	struct http_response resp;

	(void)state;
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, 99, p->len,
				   &body), 202);
	free(body);
	assert_int_equal(put_chunk(s, g.prog2.hex, EXE, UPLOAD_A, g.prog2.hash, NULL, g.prog2.data,
				   0, 99, g.prog2.len, &body), 202);
	free(body);
	/* A third upload: 503 with Retry-After; the existing ones continue. */
	request_init(&t, "PUT", SYMBOLS_PREFIX "0102030405060708/" EXE, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-range", "bytes 0-9/100");
	request_header(&t, "x-sysom-upload-id", UPLOAD_B);
	request_header(&t, "x-sysom-content-hash", p->hash);
	request_body(&t, p->data, 10);
	response_init(&resp);
	symbols_put(s->sy, &t.req, &resp);
	assert_int_equal(resp.status, 503);
	assert_non_null(response_header(&resp, "Retry-After"));
	http_response_release(&resp);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 100, 199,
				   p->len, &body), 202);
	free(body);
	/* A sweep keeps fresh uploads... */
	assert_int_equal(symbols_sweep(s->sy, &st), 0);
	assert_int_equal(st.removed, 0);
	assert_int_equal(st.kept, 2);
	/* ...and deletes one idle for longer than the expiry. */
	snprintf(path, sizeof(path), "%s/uploads/%s.executable.%s.part", s->symdir, g.prog2.hex,
		 UPLOAD_A);
	struct timespec old[2] = { { .tv_sec = time(NULL) - 7200 }, { .tv_sec = time(NULL) - 7200 } };
	assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
	assert_int_equal(symbols_sweep(s->sy, &st), 0);
	assert_int_equal(st.removed, 1);
	assert_int_equal(st.kept, 1);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(symbols_sessions_count(s->sy), 1);
	/* Room again. */
	symbols_put(s->sy, &t.req, &resp);
	assert_int_equal(resp.status, 202);
	http_response_release(&resp);
	state_free(s);
}

/* A chunk of an upload that declares a file of `total` bytes (never completed: the bytes
 * are not a file of that size). Returns the status; *retry_after gets the header (or ""). */
static int put_declared(struct state *s, const char *hex, const char *upload_id, uint64_t start,
			uint64_t total, char *retry_after, size_t ralen, char **body)
{
	static uint8_t zeros[100];
	struct test_request t;
	struct http_response resp;
	char path[256], range[96];

	snprintf(path, sizeof(path), SYMBOLS_PREFIX "%s/" EXE, hex);
	snprintf(range, sizeof(range), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, start,
		 start + sizeof(zeros) - 1, total);
	request_init(&t, "PUT", path, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-range", range);
	request_header(&t, "x-sysom-upload-id", upload_id);
	request_header(&t, "x-sysom-content-hash", g.prog.hash);
	request_body(&t, zeros, sizeof(zeros));
	int status = call(symbols_put, s->sy, &t, &resp, body);
	const char *ra = response_header(&resp, "Retry-After");
	snprintf(retry_after, ralen, "%s", ra ? ra : "");
	return status;
}

#define KIB 1024ull
#define FAKE_X "0102030405060708"
#define FAKE_Y "a1a2a3a4a5a6a7a8"

/* The partial uploads' reservations (declared sizes) stay within max_reserved_bytes: beyond,
 * 503 with Retry-After (the others finish or expire); released on completion, abort, expiry;
 * after a restart a partial upload reserves what it holds until its next chunk. */
static void test_upload_reservations(void **state)
{
	const struct prog *p = &g.prog;
	struct symbols_options so = { .max_file_size = 1024 * KIB,
				      .max_reserved_bytes = 1536 * KIB, .upload_expiry_s = 3600 };
	struct state *s = state_new(&so);
	struct metrics_counter *over = &s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_OVER_BUDGET];
	char ra[32], *body, err[256], path[512];
	struct symbols_sweep_stats st;

	(void)state;
	assert_true(p->len < 256 * KIB);
	assert_int_equal(put_declared(s, FAKE_X, UPLOAD_A, 0, 1024 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0, 99, p->len,
				   &body), 202);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB + p->len);
	/* 1024 KiB + the program + 512 KiB > 1536 KiB: refused, nothing written. */
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 0, 512 * KIB, ra, sizeof(ra), &body),
			 503);
	assert_string_equal(ra, "30");
	assert_non_null(strstr(body, "retry later"));
	free(body);
	assert_int_equal(metrics_counter_get(over), 1);
	assert_int_equal(part_files(s), 2);
	assert_int_equal(symbols_sessions_count(s->sy), 2);
	/* Completion releases the program's share: now it fits exactly. */
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 100,
				   p->len - 1, p->len, &body), 201);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB);
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 0, 512 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1536 * KIB);
	/* A later chunk cannot declare a larger file beyond the budget either. */
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 100, 513 * KIB, ra, sizeof(ra), &body),
			 503);
	free(body);
	assert_int_equal(metrics_counter_get(over), 2);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1536 * KIB);
	struct byte_buf text = { 0 };
	server_metrics_write(&s->h->metrics, &text);
	byte_buf_append(&text, "", 1);
	assert_int_equal(text.error, 0);
	assert_non_null(strstr((const char *)text.data,
			       "sysom_symbol_uploads_total{result=\"over_budget\"} 2\n"));
	assert_non_null(strstr((const char *)text.data,
			       "sysom_symbol_uploads_total{result=\"no_space\"} 0\n"));
	byte_buf_free(&text);

	/* Abort (the complete file fails its hash check) releases it. */
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 100, 200, ra, sizeof(ra), &body), 422);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB);

	/* A restart forgets the reservations: X reserves the 100 bytes it holds... */
	symbols_free(s->sy);
	so.dir = s->symdir;
	assert_int_equal(symbols_new(s->repo, s->h->auth, s->h->sym, &s->h->metrics, &so, &s->sy,
				     err, sizeof(err)), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 1);
	assert_int_equal(symbols_reserved_bytes(s->sy), 100);
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 0, 1024 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	/* ...and its next chunk must find room for the whole file again. */
	assert_int_equal(put_declared(s, FAKE_X, UPLOAD_A, 100, 1024 * KIB, ra, sizeof(ra), &body),
			 503);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB + 100);

	/* Expiry releases: Y idle for longer than the expiry is swept; X's chunk fits. */
	snprintf(path, sizeof(path), "%s/uploads/%s.executable.%s.part", s->symdir, FAKE_Y,
		 UPLOAD_B);
	struct timespec old[2] = { { .tv_sec = time(NULL) - 7200 }, { .tv_sec = time(NULL) - 7200 } };
	assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
	assert_int_equal(symbols_sweep(s->sy, &st), 0);
	assert_int_equal(st.removed, 1);
	assert_int_equal(symbols_reserved_bytes(s->sy), 100);
	assert_int_equal(put_declared(s, FAKE_X, UPLOAD_A, 100, 1024 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 1024 * KIB);
	state_free(s);

	/* A reserve below the largest file is refused at start; 0 means four largest files. */
	struct symrepo *repo = NULL;
	struct symbols *sy = NULL;
	struct harness *h = harness_new(HARNESS_TOKEN, NULL);
	struct symrepo_options ro;
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/symbols", h->dir);
	symrepo_options_default(&ro, dir);
	assert_int_equal(symrepo_open(&ro, &repo), 0);
	so = (struct symbols_options){ .dir = dir, .max_file_size = 4096,
				       .max_reserved_bytes = 4095 };
	assert_int_equal(symbols_new(repo, h->auth, NULL, &h->metrics, &so, &sy, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "never be uploaded"));
	so.max_reserved_bytes = 0;
	assert_int_equal(symbols_new(repo, h->auth, NULL, &h->metrics, &so, &sy, err, sizeof(err)),
			 0);
	symbols_free(sy);
	symrepo_close(repo);
	harness_free(h);
}

/* A reservation never promises disk that is not there: what the partial uploads still await
 * must fit in the free space, else 507 (waiting alone does not make room). */
static void test_upload_reservation_disk(void **state)
{
	struct state *s = state_new_on(NULL, "1m");
	char ra[32], *body;

	(void)state;
	if (!s)
		skip();
	/* Far larger than the disk, though within the size and reserve limits. */
	assert_int_equal(put_declared(s, FAKE_X, UPLOAD_A, 0, 2048 * KIB, ra, sizeof(ra), &body),
			 507);
	assert_string_equal(ra, "60");
	assert_non_null(strstr(body, "bytes free"));
	free(body);
	assert_int_equal(metrics_counter_get(
				 &s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_NO_SPACE]), 1);
	assert_int_equal(part_files(s), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 0);
	/* Half the disk: fine. Another 600 KiB would overcommit it; 300 KiB fits. */
	assert_int_equal(put_declared(s, FAKE_X, UPLOAD_A, 0, 512 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 0, 600 * KIB, ra, sizeof(ra), &body),
			 507);
	free(body);
	assert_int_equal(put_declared(s, FAKE_Y, UPLOAD_B, 0, 300 * KIB, ra, sizeof(ra), &body),
			 202);
	free(body);
	assert_int_equal(symbols_reserved_bytes(s->sy), 812 * KIB);
	assert_int_equal(metrics_counter_get(
				 &s->h->metrics.symbol_uploads[SYMBOL_UPLOAD_NO_SPACE]), 2);
	state_free(s);
}

/* Several nodes upload the same file at once: all end well, one file is installed. */
struct racer {
	struct state *s;
	char upload_id[40];
	size_t chunk;
	int status;
};

static void *race(void *arg)
{
	struct racer *r = arg;

	r->status = upload(r->s, &g.prog, NULL, EXE, r->upload_id, r->chunk, NULL);
	return NULL;
}

static void test_concurrent_uploads(void **state)
{
	struct state *s = *state;
	struct racer r[6];
	pthread_t th[6];
	int stored = 0;

	for (int i = 0; i < 6; i++) {
		r[i] = (struct racer){ .s = s, .chunk = 2048 + 512 * (size_t)i };
		snprintf(r[i].upload_id, sizeof(r[i].upload_id), "%016x%016x", i + 1, 0xabcd);
		assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		if (r[i].status != 201 && r[i].status != 200)
			fail_msg("racer %d ended with %d", i, r[i].status);
		stored += r[i].status == 201;
	}
	assert_true(stored >= 1);
	assert_true(symrepo_has(s->repo, &g.prog.id, SYMREPO_EXECUTABLE));
	assert_true(symrepo_has(s->repo, &g.prog.id, SYMREPO_SYMBOLS));
	assert_int_equal(part_files(s), 0);
	assert_int_equal(symbols_sessions_count(s->sy), 0);
	char path[PATH_MAX];
	struct prog installed;
	assert_int_equal(symrepo_path(s->repo, &g.prog.id, SYMREPO_EXECUTABLE, path, sizeof(path)), 0);
	prog_load(&installed, path);
	assert_memory_equal(installed.data, g.prog.data, g.prog.len);
	free(installed.data);
}

/*
 * Symbol uploads reserve from the decode memory budget: a chunk holds its body and the hashing
 * buffer, the installation an estimate of the symbol file's build. With the budget held by
 * another request a chunk gets 503 (Retry-After: 2) and nothing is written; a chunk that can
 * never fit gets 413; concurrent uploads all end well, and the reservations never pass the
 * budget and are all given back.
 */
static void test_upload_memory_budget(void **state)
{
	(void)state;
	const struct prog *p = &g.prog;
	struct membudget_options mo = { .capacity = 3 * (1024 * KIB), .max_wait_ms = 0 };
	struct membudget *b = NULL, *tiny = NULL;
	struct membudget_hold other;
	struct membudget_stats st;
	char *body = NULL;

	assert_int_equal(membudget_new(&mo, &b), 0);
	struct state *s = state_new(&(struct symbols_options){ .memory_budget = b });

	/* Another request holds nearly all of it: 503, nothing received. */
	membudget_hold_init(&other, b);
	assert_int_equal(membudget_hold_resize(&other, 3 * (1024 * KIB) - 1024), 0);
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_A, p->hash, NULL, p->data, 0,
				   p->len / 2, p->len, &body), 503);
	assert_non_null(strstr(body, "decode memory"));
	free(body);
	membudget_stats_get(b, &st);
	assert_int_equal(st.reserved, 3 * (1024 * KIB) - 1024);
	assert_int_equal(st.timeouts, 1);
	membudget_hold_release(&other);

	/* Free again: the same upload goes through, chunk by chunk, and installs. */
	assert_int_equal(upload(s, p, NULL, EXE, UPLOAD_A, p->len / 2 + 1, NULL), 201);
	membudget_stats_get(b, &st);
	assert_int_equal(st.reserved, 0);
	assert_true(st.reserved_peak <= st.capacity);
	assert_true(st.reserved_peak >= 1 * (1024 * KIB) + p->len / 2); /* hash buffer + chunk held */
	state_free(s);

	/* Concurrent uploads of several nodes under the budget, waiting for one another. */
	membudget_free(b);
	mo.max_wait_ms = 20000;
	mo.capacity = 2 * (1024 * KIB) + 64 * 1024;
	assert_int_equal(membudget_new(&mo, &b), 0);
	s = state_new(&(struct symbols_options){ .memory_budget = b });
	struct racer r[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		r[i] = (struct racer){ .s = s, .chunk = 4096 + 1024 * (size_t)i };
		snprintf(r[i].upload_id, sizeof(r[i].upload_id), "%016x%016x", i + 1, 0xbeef);
		assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		if (r[i].status != 201 && r[i].status != 200)
			fail_msg("racer %d ended with %d", i, r[i].status);
	}
	membudget_stats_get(b, &st);
	assert_int_equal(st.reserved, 0);
	assert_true(st.reserved_peak <= st.capacity);
	assert_true(st.grants > 0);
	assert_true(symrepo_has(s->repo, &p->id, SYMREPO_SYMBOLS));
	state_free(s);
	membudget_free(b);

	/* A budget smaller than one chunk and the hashing buffer: 413, it can never fit. */
	mo = (struct membudget_options){ .capacity = 512 * 1024, .max_wait_ms = 0 };
	assert_int_equal(membudget_new(&mo, &tiny), 0);
	s = state_new(&(struct symbols_options){ .memory_budget = tiny });
	assert_int_equal(put_chunk(s, p->hex, EXE, UPLOAD_B, p->hash, NULL, p->data, 0,
				   p->len - 1, p->len, &body), 413);
	assert_non_null(strstr(body, "smaller chunks"));
	free(body);
	state_free(s);
	membudget_free(tiny);
}

static void test_info(void **state)
{
	struct state *s = *state;
	char *body;
	json_t *doc;
	struct test_request t;
	struct http_response resp;

	assert_int_equal(get_info(s, g.prog2.hex, &body), 404);
	free(body);
	assert_int_equal(get_info(s, "xyz", &body), 400);
	free(body);
	assert_int_equal(upload(s, &g.prog2_stripped, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(upload(s, &g.prog2_debug, g.prog2.hex, DBG, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(get_info(s, g.prog2.hex, &body), 200);
	doc = parse(body);
	assert_string_equal(json_string_value(json_object_get(doc, "build_id")), g.prog2.hex);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "executable"),
							     "size")),
			 g.prog2_stripped.len);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "debuginfo"),
							     "size")),
			 g.prog2_debug.len);
	json_t *syms = json_object_get(doc, "symbols");
	static const char *const fields[] = { "segments", "functions", "inline_ranges", "line_rows",
					      "files", "string_bytes", "file_bytes", "from_symtab",
					      "from_dynsym", "from_dwarf" };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		assert_true(json_is_integer(json_object_get(syms, fields[i])));
	assert_true(json_integer_value(json_object_get(syms, "functions")) >= 6);
	assert_int_equal(json_array_size(json_object_get(doc, "uploads")), 0);
	json_decref(doc);
	free(body);
	/* GET on the missing endpoint is not a build ID. */
	request_init(&t, "GET", SYMBOLS_MISSING_PATH, NULL);
	request_token(&t, HARNESS_TOKEN);
	assert_int_equal(call(symbols_get, s->sy, &t, &resp, &body), 405);
	free(body);
	/* Token required. */
	request_init(&t, "GET", SYMBOLS_PREFIX NOPE_HEX, NULL);
	assert_int_equal(call(symbols_get, s->sy, &t, &resp, &body), 401);
	free(body);
}

/* Executables without DWARF or a debug file make the server want their debug file. */
struct wanted {
	int calls;
	struct sysom_build_id last;
};

static void on_want(void *ctx, const struct sysom_build_id *id)
{
	struct wanted *w = ctx;

	w->calls++;
	w->last = *id;
}

static void test_want_debuginfo(void **state)
{
	struct state *s = *state;
	struct wanted w = { 0 };

	symbols_want_debuginfo_set(s->sy, on_want, &w);
	/* With DWARF in the executable: nothing wanted. */
	assert_int_equal(upload(s, &g.prog, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(w.calls, 0);
	/* A stripped executable: its debug file is wanted. */
	assert_int_equal(upload(s, &g.prog2_stripped, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(w.calls, 1);
	assert_memory_equal(w.last.bytes, g.prog2.id.bytes, g.prog2.id.len);
	assert_int_equal(w.last.kind, SYSOM_OBJECT_ELF);
}

/* ---- the debuginfod read side ------------------------------------------------------------------ */

/* GET /buildid/...: status; a file body is read into *data (free it) and closed. */
static int debuginfod_get(struct symbols *sy, const char *path, bool token, uint8_t **data,
			  size_t *len, struct http_response *resp)
{
	struct test_request t;

	request_init(&t, "GET", path, NULL);
	if (token)
		request_token(&t, HARNESS_TOKEN);
	response_init(resp);
	symbols_debuginfod_get(sy, &t.req, resp);
	*data = NULL;
	*len = 0;
	if (resp->has_body_fd) {
		*len = (size_t)resp->body_fd_length;
		*data = malloc(*len + 1);
		assert_non_null(*data);
		assert_int_equal(pread(resp->body_fd, *data, *len, (off_t)resp->body_fd_offset),
				 (ssize_t)*len);
	}
	return resp->status;
}

static void test_debuginfod(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	char path[256], size[32];
	uint8_t *data;
	size_t len;

	snprintf(path, sizeof(path), "/buildid/%s/executable", g.prog.hex);
	assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 404);
	http_response_release(&resp);
	assert_int_equal(upload(s, &g.prog, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(upload(s, &g.prog2_stripped, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	/* The executable, streamed from the repository, with debuginfod's headers. */
	assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 200);
	assert_int_equal(len, g.prog.len);
	assert_memory_equal(data, g.prog.data, len);
	assert_string_equal(resp.content_type, "application/octet-stream");
	snprintf(size, sizeof(size), "%zu", g.prog.len);
	assert_string_equal(response_header(&resp, "X-DEBUGINFOD-SIZE"), size);
	assert_non_null(strstr(response_header(&resp, "Last-Modified"), " GMT"));
	free(data);
	http_response_release(&resp);
	/* Its debuginfo: the executable itself, which carries DWARF. */
	snprintf(path, sizeof(path), "/buildid/%s/debuginfo", g.prog.hex);
	assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 200);
	assert_int_equal(len, g.prog.len);
	free(data);
	http_response_release(&resp);
	/* A stripped executable is not a debug file; its uploaded debug file is. */
	snprintf(path, sizeof(path), "/buildid/%s/debuginfo", g.prog2.hex);
	assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 404);
	http_response_release(&resp);
	assert_int_equal(upload(s, &g.prog2_debug, g.prog2.hex, DBG, UPLOAD_A, 1 << 20, NULL), 201);
	assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 200);
	assert_int_equal(len, g.prog2_debug.len);
	assert_memory_equal(data, g.prog2_debug.data, len);
	free(data);
	http_response_release(&resp);
	/* Sources, sections, other paths and bad IDs: 404. */
	static const char *const nopes[][2] = { { "/buildid/", "/source/usr/src/prog.c" },
						{ "/buildid/", "/section/.text" },
						{ "/buildid/", "" },
						{ "/buildid/", "/" },
						{ "/buildid/zz", "/executable" } };
	for (size_t i = 0; i < sizeof(nopes) / sizeof(nopes[0]); i++) {
		snprintf(path, sizeof(path), "%s%s%s", nopes[i][0], g.prog.hex, nopes[i][1]);
		assert_int_equal(debuginfod_get(s->sy, path, false, &data, &len, &resp), 404);
		assert_false(resp.has_body_fd);
		http_response_release(&resp);
	}
	assert_int_equal(
		metrics_counter_get(&s->h->metrics.debuginfod_requests[DEBUGINFOD_EXECUTABLE][DEBUGINFOD_FOUND]),
		1);
	assert_int_equal(
		metrics_counter_get(&s->h->metrics.debuginfod_requests[DEBUGINFOD_DEBUGINFO][DEBUGINFOD_FOUND]),
		2);

	/* With --debuginfod-auth the token is required there too. */
	struct state *closed = state_new(&(struct symbols_options){ .debuginfod_auth = true });
	snprintf(path, sizeof(path), "/buildid/%s/executable", g.prog.hex);
	assert_int_equal(debuginfod_get(closed->sy, path, false, &data, &len, &resp), 401);
	http_response_release(&resp);
	assert_int_equal(debuginfod_get(closed->sy, path, true, &data, &len, &resp), 404);
	http_response_release(&resp);
	state_free(closed);
}

static void test_routes(void **state)
{
	struct state *s = *state;
	struct http_route routes[API_ROUTE_COUNT];
	struct api_route_limits lim = { .symbols_max_chunk = 12345 };
	size_t n = api_routes_build(s->h->api, s->h->ingest, s->sy, &lim, routes);
	int seen = 0;

	assert_int_equal(n, API_ROUTE_COUNT);
	for (size_t i = 0; i < n; i++) {
		const struct http_route *r = &routes[i];
		if (strcmp(r->path, SYMBOLS_MISSING_PATH) == 0) {
			assert_string_equal(r->method, "POST");
			assert_false(r->prefix);
			assert_int_equal(r->max_body, SYMBOLS_MISSING_MAX_BODY);
			seen |= 1;
		} else if (strcmp(r->path, SYMBOLS_PREFIX) == 0) {
			assert_true(r->prefix);
			assert_int_equal(r->max_body, strcmp(r->method, "PUT") == 0 ? 12345 : 0);
			seen |= strcmp(r->method, "PUT") == 0 ? 2 : 4;
		} else if (strcmp(r->path, DEBUGINFOD_PREFIX) == 0) {
			assert_string_equal(r->method, "GET");
			assert_true(r->prefix);
			seen |= 8;
		}
	}
	assert_int_equal(seen, 15);
}

/* ---- symbolization ----------------------------------------------------------------------------- */

/* Stores one batch with a user stack (leaf first) over objects: `ids[i]` named `names[i]`. */
static void store_user_stack(struct state *s, const struct sysom_build_id *const *ids,
			     const char *const *names, const uint32_t *objs, const uint64_t *offsets,
			     uint16_t nframes, uint64_t count)
{
	struct sysom_batch b;
	uint32_t proc, u, comm, idx[8];
	struct sysom_process pr = { .tgid = 4321, .start_time_ns = 1 };
	struct sysom_frame frames[16];
	struct store_put_result res;

	assert_int_equal(sysom_batch_init(&b), 0);
	memset(b.node_id, 0x44, sizeof(b.node_id));
	b.sequence = (uint64_t)rand();
	b.window_start_ns = HARNESS_T0;
	b.window_end_ns = HARNESS_T0 + 30000000000ULL;
	for (int i = 0; names[i]; i++)
		assert_int_equal(sysom_batch_add_object(&b, ids[i]->kind, ids[i]->bytes, ids[i]->len,
							names[i], &idx[i]),
				 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "app", &comm), 0);
	pr.comm = comm;
	assert_int_equal(sysom_batch_add_process(&b, &pr, &proc), 0);
	for (uint16_t i = 0; i < nframes; i++)
		frames[i] = (struct sysom_frame){ idx[objs[i]], offsets[i] };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, frames, nframes, &u), 0);
	struct sysom_sample smp = { .process = proc, .user_stack = u, .kernel_stack = SYSOM_WIRE_NONE,
				    .count = count, .thread_comm = comm, .time_offset_ms = 5000 };
	assert_int_equal(sysom_batch_add_sample(&b, &smp), 0);
	assert_int_equal(store_batch_put(s->h->store, &b, 0, 1, &res), 0);
	sysom_batch_free(&b);
}

/* Resolves a frame of the object with this build ID; returns its names joined with ';'. */
static char *resolve_names(struct state *s, int64_t object, uint64_t offset, bool leaf,
			   struct symbolized_location *keep)
{
	struct symbolized_location loc;
	char *out = calloc(1, 1024);

	assert_non_null(out);
	assert_int_equal(symbolizer_location_resolve(s->h->sym, SYSOM_STACK_USER, object, offset,
						     leaf, &loc),
			 0);
	for (uint32_t i = 0; i < loc.count; i++)
		snprintf(out + strlen(out), 1024 - strlen(out), "%s%s%s", i ? ";" : "",
			 loc.frames[i].name, loc.frames[i].inlined ? "_[i]" : "");
	if (keep)
		*keep = loc;
	else
		symbolized_location_release(&loc);
	return out;
}

static int64_t object_of(struct state *s, const char *name)
{
	char path[300];
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t id;

	snprintf(path, sizeof(path), "%s/sysom.db", s->h->dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT id FROM objects WHERE name = ?", -1, &st,
					    NULL),
			 SQLITE_OK);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return id;
}

static void expect_name(struct state *s, int64_t object, uint64_t offset, bool leaf,
			const char *want)
{
	char *got = resolve_names(s, object, offset, leaf, NULL);

	if (strcmp(got, want) != 0)
		fail_msg("offset 0x%" PRIx64 " (%s): '%s', want '%s'", offset,
			 leaf ? "leaf" : "return address", got, want);
	free(got);
}

static void test_symbolize_leaf_and_return(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	const struct func *fa = func_of(p, "fa"), *ends = func_of(p, "ends_in_call"),
			  *after = func_of(p, "after_call");
	const struct sysom_build_id *ids[] = { &p->id, NULL };
	const char *names[] = { "/opt/app/prog", NULL };
	uint32_t objs[] = { 0, 0 };
	uint64_t offs[] = { offset_of(p, fa->vaddr + 2), offset_of(p, after->vaddr) };
	char want[64];

	/* The noreturn call is the last instruction: its return address starts the next function. */
	if (ends->vaddr + ends->size != after->vaddr)
		fail_msg("ends_in_call [0x%" PRIx64 ", +0x%" PRIx64 ") does not end at after_call"
			 " 0x%" PRIx64, ends->vaddr, ends->size, after->vaddr);
	store_user_stack(s, ids, names, objs, offs, 2, 1);
	int64_t obj = object_of(s, "/opt/app/prog");
	/* Before the upload: file+offset. */
	snprintf(want, sizeof(want), "prog+0x%" PRIx64, offset_of(p, after->vaddr));
	expect_name(s, obj, offset_of(p, after->vaddr), false, want);
	assert_int_equal(upload(s, p, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	/* The upload invalidated the cached file+offset. */
	expect_name(s, obj, offset_of(p, after->vaddr), true, "after_call");
	expect_name(s, obj, offset_of(p, after->vaddr), false, "ends_in_call");
	expect_name(s, obj, offset_of(p, fa->vaddr), true, "fa");
	expect_name(s, obj, offset_of(p, fa->vaddr + fa->size - 1), true, "fa");
	/* Cached per leaf/return: both answers again, from the cache. */
	struct symbolizer_stats st1, st2;
	symbolizer_stats_get(s->h->sym, &st1);
	expect_name(s, obj, offset_of(p, after->vaddr), true, "after_call");
	expect_name(s, obj, offset_of(p, after->vaddr), false, "ends_in_call");
	symbolizer_stats_get(s->h->sym, &st2);
	assert_int_equal(st2.hits, st1.hits + 2);
	assert_true(st2.repo_named >= 4);
	/* The symbol offset is that of the return address itself. */
	struct symbolized_location loc;
	free(resolve_names(s, obj, offset_of(p, after->vaddr), false, &loc));
	assert_true(loc.frames[0].has_symbol_offset);
	assert_int_equal(loc.frames[0].symbol_offset, ends->size);
	assert_string_equal(loc.frames[0].object, "/opt/app/prog");
	assert_string_equal(loc.frames[0].build_id, p->hex);
	symbolized_location_release(&loc);
	/* An offset outside the executable segment stays file+offset. */
	expect_name(s, obj, 0x10, true, "prog+0x10");
	assert_true(st2.invalidations >= 1);
}

static void test_symbolize_inlined(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	const struct sysom_build_id *ids[] = { &p->id, NULL };
	const char *names[] = { "/opt/app/prog", NULL };
	uint32_t objs[] = { 0 };
	uint64_t off = offset_of(p, g.inline_vaddr);
	struct symbolized_location loc;

	store_user_stack(s, ids, names, objs, &off, 1, 1);
	int64_t obj = object_of(s, "/opt/app/prog");
	assert_int_equal(upload(s, p, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	char *got = resolve_names(s, obj, off, true, &loc);
	if (strcmp(got, "uses_inline;add_one_[i]") != 0)
		fail_msg("inlined call at 0x%" PRIx64 ": '%s'", g.inline_vaddr, got);
	free(got);
	assert_false(loc.frames[0].inlined);
	assert_true(loc.frames[1].inlined);
	assert_non_null(loc.frames[1].file);
	assert_non_null(strstr(loc.frames[1].file, "prog.c"));
	assert_true(loc.frames[1].line >= 7 && loc.frames[1].line <= 13);
	symbolized_location_release(&loc);
}

/* The misattribution case: frames in functions whose symbols were stripped never get the
 * nearest remaining symbol's name; with the debug file they get their own. */
static void test_symbolize_stripped_range(void **state)
{
	struct state *s = *state;
	const struct prog *full = &g.prog2;
	const struct func *f[6] = { NULL, func_of(full, "f1"), func_of(full, "f2"),
				    func_of(full, "f3"), func_of(full, "f4"), func_of(full, "f5") };
	const struct sysom_build_id *ids[] = { &full->id, NULL };
	const char *names[] = { "/opt/app/prog2", NULL };
	uint32_t objs[] = { 0, 0, 0, 0 };
	uint64_t offs[4];
	char want[64];

	/* Back to back: the stripped ones lie right after f1, below f4. */
	assert_int_equal(f[1]->vaddr + f[1]->size, f[2]->vaddr);
	assert_int_equal(f[2]->vaddr + f[2]->size, f[3]->vaddr);
	assert_int_equal(f[3]->vaddr + f[3]->size, f[4]->vaddr);
	assert_memory_equal(g.prog2_stripped.id.bytes, full->id.bytes, full->id.len);
	for (int i = 0; i < 4; i++)
		offs[i] = offset_of(full, f[i + 1]->vaddr + f[i + 1]->size / 2);
	store_user_stack(s, ids, names, objs, offs, 4, 3);
	int64_t obj = object_of(s, "/opt/app/prog2");
	assert_int_equal(upload(s, &g.prog2_stripped, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	for (int i = 2; i <= 3; i++) {
		for (uint64_t at = f[i]->vaddr; at < f[i]->vaddr + f[i]->size; at += 3) {
			snprintf(want, sizeof(want), "prog2+0x%" PRIx64, offset_of(full, at));
			expect_name(s, obj, offset_of(full, at), true, want);
		}
		/* As a return address right after the gap's first byte too. */
		snprintf(want, sizeof(want), "prog2+0x%" PRIx64, offset_of(full, f[i]->vaddr + 1));
		expect_name(s, obj, offset_of(full, f[i]->vaddr + 1), false, want);
	}
	expect_name(s, obj, offs[0], true, "f1");
	expect_name(s, obj, offs[3], true, "f4");
	struct symbolizer_stats st;
	symbolizer_stats_get(s->h->sym, &st);
	assert_true(st.repo_gaps > 0);
	/* The flame graph says the same. */
	struct test_request t;
	struct http_response resp;
	char *body;
	request_init(&t, "GET", "/api/v1/flamegraph", "comm=app");
	request_token(&t, HARNESS_TOKEN);
	assert_int_equal(call(api_flamegraph_get, s->h->api, &t, &resp, &body), 200);
	snprintf(want, sizeof(want), "app;f4;prog2+0x%" PRIx64 ";prog2+0x%" PRIx64 ";f1 3\n",
		 offs[2], offs[1]);
	assert_string_equal(body, want);
	free(body);
	/* With the debug file the stripped functions get their names. */
	assert_int_equal(upload(s, &g.prog2_debug, full->hex, DBG, UPLOAD_A, 1 << 20, NULL), 201);
	expect_name(s, obj, offs[1], true, "f2");
	expect_name(s, obj, offs[2], true, "f3");
	expect_name(s, obj, offset_of(full, f[3]->vaddr + 1), false, "f3");
	assert_int_equal(call(api_flamegraph_get, s->h->api, &t, &resp, &body), 200);
	assert_string_equal(body, "app;f4;f3;f2;f1 3\n");
	free(body);
}

static void test_flamegraph_symbolized(void **state)
{
	struct state *s = *state;
	const struct prog *p = &g.prog;
	const struct func *fa = func_of(p, "fa"), *after = func_of(p, "after_call");
	struct sysom_build_id libfoo;
	const struct sysom_build_id *ids[] = { &p->id, &libfoo, NULL };
	const char *names[] = { "/opt/app/prog", "/usr/lib/libfoo.so.1", NULL };
	uint32_t objs[] = { 0, 0, 0, 1 };
	/* Leaf first: the inlined call, a return address at after_call's start (the call in
	 * ends_in_call), a return address inside fa, an object nobody uploaded. */
	uint64_t offs[] = { offset_of(p, g.inline_vaddr), offset_of(p, after->vaddr),
			    offset_of(p, fa->vaddr + 3), 0x1234 };
	struct test_request t;
	struct http_response resp;
	char *body, want[256];

	assert_int_equal(sysom_build_id_parse_hex(NOPE_HEX, SYSOM_OBJECT_ELF, &libfoo), 0);
	store_user_stack(s, ids, names, objs, offs, 4, 7);
	assert_int_equal(upload(s, p, NULL, EXE, UPLOAD_A, 1 << 20, NULL), 201);
	request_init(&t, "GET", "/api/v1/flamegraph", "comm=app");
	request_token(&t, HARNESS_TOKEN);
	assert_int_equal(call(api_flamegraph_get, s->h->api, &t, &resp, &body), 200);
	snprintf(want, sizeof(want), "app;libfoo.so.1+0x1234;fa;ends_in_call;uses_inline;add_one_[i] 7\n");
	assert_string_equal(body, want);
	free(body);
	request_init(&t, "GET", "/api/v1/flamegraph", "comm=app&format=json");
	request_token(&t, HARNESS_TOKEN);
	assert_int_equal(call(api_flamegraph_get, s->h->api, &t, &resp, &body), 200);
	json_t *doc = parse(body);
	json_t *frames = json_object_get(json_array_get(json_object_get(doc, "stacks"), 0), "frames");
	assert_int_equal(json_array_size(frames), 5);
	json_t *f0 = json_array_get(frames, 0), *f1 = json_array_get(frames, 1);
	json_t *f3 = json_array_get(frames, 3), *f4 = json_array_get(frames, 4);
	assert_string_equal(json_string_value(json_object_get(f0, "name")), "libfoo.so.1+0x1234");
	assert_null(json_object_get(f0, "symbol_offset"));
	assert_string_equal(json_string_value(json_object_get(f1, "name")), "fa");
	assert_string_equal(json_string_value(json_object_get(f1, "symbol_offset")), "0x3");
	assert_string_equal(json_string_value(json_object_get(f1, "build_id")), p->hex);
	assert_null(json_object_get(f1, "inlined"));
	assert_string_equal(json_string_value(json_object_get(f3, "name")), "uses_inline");
	assert_string_equal(json_string_value(json_object_get(f4, "name")), "add_one");
	assert_true(json_is_true(json_object_get(f4, "inlined")));
	assert_non_null(strstr(json_string_value(json_object_get(f4, "file")), "prog.c"));
	assert_true(json_integer_value(json_object_get(f4, "line")) > 0);
	assert_string_equal(json_string_value(json_object_get(f4, "offset")),
			    json_string_value(json_object_get(f3, "offset")));
	json_decref(doc);
	free(body);
}

/* ---- upstream fetcher (unreachable upstream; the real one is in tests/e2e) ----------------------- */

struct events {
	pthread_mutex_t mu;
	int count;
	int last_error;
};

static void on_event(void *ctx, const struct sysom_build_id *id, const struct upstream_result *r)
{
	struct events *e = ctx;

	(void)id;
	pthread_mutex_lock(&e->mu);
	e->count++;
	e->last_error = r->error;
	pthread_mutex_unlock(&e->mu);
}

static void test_upstream_queue(void **state)
{
	struct state *s = *state;
	struct upstream *u = NULL;
	struct upstream_stats st;
	struct events ev = { .mu = PTHREAD_MUTEX_INITIALIZER };
	char cache[300], err[256];
	struct sysom_build_id id, fh;

	snprintf(cache, sizeof(cache), "%s/debuginfod-cache", s->h->dir);
	/* Port 1 on loopback: nothing listens, every fetch fails at once. */
	struct upstream_options uo = { .urls = "http://127.0.0.1:1", .cache_dir = cache,
				       .queue_max = 2, .threads = 1 };
	struct upstream_hooks hooks = { .done = on_event, .ctx = &ev };
	assert_int_equal(upstream_new(s->repo, &uo, &hooks, &u, err, sizeof(err)), 0);
	assert_int_equal(sysom_build_id_parse_hex(NOPE_HEX, SYSOM_OBJECT_ELF, &id), 0);
	assert_int_equal(sysom_build_id_parse_hex("00112233445566778899aabbccddeeff",
						  SYSOM_OBJECT_FILE_HASH, &fh), 0);
	for (int i = 0; i < 5; i++)
		upstream_request(u, &id);
	upstream_request(u, &fh); /* content hashes are not debuginfod's business */
	assert_int_equal(upstream_wait_idle(u, 30000), 0);
	upstream_stats_get(u, &st);
	assert_int_equal(st.requested, 1);
	assert_int_equal(st.not_found + st.failed, 1);
	assert_int_equal(st.fetched, 0);
	assert_int_equal(st.queued, 0);
	pthread_mutex_lock(&ev.mu);
	assert_int_equal(ev.count, 1);
	assert_true(ev.last_error < 0);
	pthread_mutex_unlock(&ev.mu);
	/* Within the negative TTL it is not asked again. */
	upstream_request(u, &id);
	assert_int_equal(upstream_wait_idle(u, 30000), 0);
	upstream_stats_get(u, &st);
	assert_int_equal(st.requested, 1);
	assert_false(symrepo_has(s->repo, &id, SYMREPO_EXECUTABLE));
	upstream_free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_chunks_and_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_wrong_hash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_identity_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_file_hash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_malformed_and_limits, setup, teardown),
		cmocka_unit_test(test_upload_sessions_and_sweep),
		cmocka_unit_test(test_upload_reservations),
		cmocka_unit_test(test_upload_reservation_disk),
		cmocka_unit_test_setup_teardown(test_concurrent_uploads, setup, teardown),
		cmocka_unit_test(test_upload_memory_budget),
		cmocka_unit_test_setup_teardown(test_info, setup, teardown),
		cmocka_unit_test_setup_teardown(test_want_debuginfo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_debuginfod, setup, teardown),
		cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symbolize_leaf_and_return, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symbolize_inlined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symbolize_stripped_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flamegraph_symbolized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upstream_queue, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
