/* SPDX-License-Identifier: Apache-2.0 */
/* The Build-ID repository: checked installs, races between threads and processes, crash
 * leftovers, gc, the LRU of mapped symbol files, content-hash identities. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/elf_buildid.h"
#include "common/error.h"
#include "symrepo/repo.h"

#define PATH_LEN 4096
#define NPROGS 3
#define RACE_THREADS 6
#define LRU_IDS 96
#define LRU_MAX 8
#define LRU_SYMBOLS 40

static char tmpdir[] = "/tmp/h-repo-test-XXXXXX";
static unsigned repo_counter;

/* Test programs compiled at start: prog[i] with -g, its stripped copy and debug file. */
static char prog[NPROGS][PATH_LEN];
static char prog_stripped[PATH_LEN], prog_debug[PATH_LEN], prog_nobid[PATH_LEN];
static struct sysom_build_id prog_id[NPROGS], nobid_id;
static uint64_t known_fn_vaddr;

static const char prog_source[] =
	"#include <stdio.h>\n"
	"__attribute__((noinline)) int known_fn(int x) { return x * VARIANT + 1; }\n"
	"static inline int helper(int x) { return x ^ 5; }\n"
	"__attribute__((noinline)) int outer_fn(int x) { return helper(x) + known_fn(x); }\n"
	"int main(int argc, char **argv) { (void)argv; printf(\"%d\\n\", outer_fn(argc)); "
	"return 0; }\n";

/* ------------------------------------------------------------------------------------------ */
/* Helpers */

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc != 0)
		fail_msg("command failed (%d): %s", rc, cmd);
}

static void identity_of(const char *path, struct sysom_build_id *id)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(sysom_object_identity(fd, id), 0);
	close(fd);
}

/* A fresh repository directory under the test's temporary directory. */
static struct symrepo *repo_new(char *root, size_t rootlen, uint32_t max_open)
{
	struct symrepo_options o;
	struct symrepo *r = NULL;

	snprintf(root, rootlen, "%s/repo%u", tmpdir, repo_counter++);
	symrepo_options_default(&o, root);
	o.max_open_files = max_open;
	assert_int_equal(symrepo_open(&o, &r), 0);
	return r;
}

static struct symrepo *repo_reopen(const char *root)
{
	struct symrepo_options o;
	struct symrepo *r = NULL;

	symrepo_options_default(&o, root);
	assert_int_equal(symrepo_open(&o, &r), 0);
	return r;
}

static int copy_bytes(const char *src, const char *dst, off_t limit)
{
	char buf[65536];
	int in, out, rc = 0;
	ssize_t n;
	off_t done = 0;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (out < 0) {
		close(in);
		return -errno;
	}
	while ((limit < 0 || done < limit) && (n = read(in, buf, sizeof(buf))) > 0) {
		if (limit >= 0 && done + n > limit)
			n = (ssize_t)(limit - done);
		if (write(out, buf, (size_t)n) != n) {
			rc = -EIO;
			break;
		}
		done += n;
	}
	close(in);
	close(out);
	return rc;
}

/* Copies `src` (its first `limit` bytes when limit >= 0) to a new repository temp file. */
static void tmp_copy(struct symrepo *r, const char *src, off_t limit, char *out, size_t outlen)
{
	assert_int_equal(symrepo_tmp_path(r, out, outlen), 0);
	assert_int_equal(copy_bytes(src, out, limit), 0);
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static bool same_content(const char *a, const char *b)
{
	char cmd[2 * PATH_LEN + 32];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* Regular files below `dir` (recursively). */
static unsigned count_files(const char *dir)
{
	char path[PATH_LEN];
	struct dirent *de;
	struct stat st;
	unsigned n = 0;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode))
			n += count_files(path);
		else
			n++;
	}
	closedir(d);
	return n;
}

static unsigned count_in(const char *root, const char *sub)
{
	char path[PATH_LEN];

	if (snprintf(path, sizeof(path), "%s/%s", root, sub) >= (int)sizeof(path))
		return 0;
	return count_files(path);
}

/* Looks up `vaddr` in the repository's symbol file of `id`; copies the outermost name. */
static int lookup_name(struct symrepo *r, const struct sysom_build_id *id, uint64_t vaddr,
		       char *name, size_t namelen, bool *has_line)
{
	struct symfile_frame frames[16];
	struct symfile *f;
	int err = 0, n;

	f = symrepo_symbols_acquire(r, id, &err);
	if (!f)
		return err;
	n = symfile_lookup(f, vaddr, frames, 16);
	if (n > 0) {
		snprintf(name, namelen, "%s", frames[n - 1].name);
		if (has_line)
			*has_line = frames[0].file != NULL && frames[0].line > 0;
	}
	symrepo_symbols_release(r, f);
	return n;
}

static uint32_t sym_line_rows(struct symrepo *r, const struct sysom_build_id *id)
{
	struct symfile_info info;
	struct symfile *f;
	int err = 0;

	f = symrepo_symbols_acquire(r, id, &err);
	assert_non_null(f);
	symfile_info_get(f, &info);
	symrepo_symbols_release(r, f);
	return info.line_rows;
}

static uint64_t nm_address(const char *path, const char *symbol)
{
	char cmd[PATH_LEN + 128], line[256];
	unsigned long long v = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm '%s' | awk '$3 == \"%s\" {print $1}'", path, symbol);
	p = popen(cmd, "r");
	assert_non_null(p);
	if (fgets(line, sizeof(line), p))
		v = strtoull(line, NULL, 16);
	pclose(p);
	assert_true(v != 0);
	return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Setup: compile the test programs */

static int setup(void **state)
{
	char src[PATH_LEN];
	FILE *f;

	(void)state;
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(src, sizeof(src), "%s/prog.c", tmpdir);
	f = fopen(src, "w");
	if (!f)
		return -1;
	fputs(prog_source, f);
	fclose(f);
	for (int i = 0; i < NPROGS; i++) {
		snprintf(prog[i], sizeof(prog[i]), "%s/prog%d", tmpdir, i);
		run("gcc -g -O1 -Wl,--build-id -DVARIANT=%d -o '%s' '%s'", i + 2, prog[i], src);
		identity_of(prog[i], &prog_id[i]);
		if (prog_id[i].kind != SYSOM_OBJECT_ELF)
			return -1;
	}
	snprintf(prog_debug, sizeof(prog_debug), "%s/prog0.debug", tmpdir);
	snprintf(prog_stripped, sizeof(prog_stripped), "%s/prog0.stripped", tmpdir);
	run("objcopy --only-keep-debug '%s' '%s'", prog[0], prog_debug);
	run("strip -g -o '%s' '%s'", prog_stripped, prog[0]);
	snprintf(prog_nobid, sizeof(prog_nobid), "%s/prog_nobid", tmpdir);
	run("gcc -g -O1 -Wl,--build-id=none -DVARIANT=9 -o '%s' '%s'", prog_nobid, src);
	identity_of(prog_nobid, &nobid_id);
	if (nobid_id.kind != SYSOM_OBJECT_FILE_HASH)
		return -1;
	known_fn_vaddr = nm_address(prog[0], "known_fn");
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_LEN];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Tests */

static void test_install_has_path(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], path[PATH_LEN], want[PATH_LEN + 512], hex[129];
	char err[512];
	char name[256];
	struct symrepo *r;
	bool line = false;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	tmp_copy(r, prog[0], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_false(exists(tmp));
	assert_true(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	assert_true(symrepo_has(r, &prog_id[0], SYMREPO_SYMBOLS));
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_DEBUGINFO));

	sysom_build_id_hex(&prog_id[0], hex, sizeof(hex));
	snprintf(want, sizeof(want), "%s/.build-id/%.2s/%s.executable", root, hex, hex + 2);
	assert_int_equal(symrepo_path(r, &prog_id[0], SYMREPO_EXECUTABLE, path, sizeof(path)), 0);
	assert_string_equal(path, want);
	assert_true(same_content(path, prog[0]));
	snprintf(want, sizeof(want), "%s/.build-id/%.2s/%s.sym", root, hex, hex + 2);
	assert_int_equal(symrepo_path(r, &prog_id[0], SYMREPO_SYMBOLS, path, sizeof(path)), 0);
	assert_string_equal(path, want);
	assert_int_equal(symrepo_path(r, &prog_id[0], SYMREPO_SYMBOLS, path, 10), -ENAMETOOLONG);

	/* The symbol file serves the function, with its line (the ELF carries DWARF). */
	assert_true(lookup_name(r, &prog_id[0], known_fn_vaddr, name, sizeof(name), &line) > 0);
	assert_string_equal(name, "known_fn");
	assert_true(line);
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), 0);
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_EXECUTABLE, err, sizeof(err)), 0);
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_DEBUGINFO, err, sizeof(err)), -ENOENT);
	/* Nothing left behind: no temporary file, no lock file. */
	assert_int_equal(count_in(root, "tmp"), 1); /* this handle's own lock file */
	assert_int_equal(count_in(root, "locks"), 0);
	symrepo_close(r);
	assert_int_equal(count_in(root, "tmp"), 0);
}

static void test_identity_mismatch(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], outside[PATH_LEN], err[512];
	struct symrepo *r;
	struct stat st;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	/* Another program's bytes under prog0's build ID. */
	tmp_copy(r, prog[1], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_non_null(strstr(err, "build ID"));
	assert_false(exists(tmp));
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	assert_false(symrepo_has(r, &prog_id[1], SYMREPO_EXECUTABLE));

	/* An upload cut short: half of the right file. */
	assert_int_equal(stat(prog[0], &st), 0);
	tmp_copy(r, prog[0], st.st_size / 2, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_false(exists(tmp));
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));

	/* A debug file of another build, and a debug file for a content-hash identity. */
	tmp_copy(r, prog[1], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_DEBUGINFO, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_false(exists(tmp));
	tmp_copy(r, prog_nobid, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &nobid_id, SYMREPO_DEBUGINFO, tmp, err, sizeof(err)),
			 -EINVAL);
	assert_false(exists(tmp));

	/* A symbol file that is not one. */
	tmp_copy(r, prog[0], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_SYMBOLS, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_false(exists(tmp));

	/* A path outside the repository's temporary directory is refused and left alone. */
	snprintf(outside, sizeof(outside), "%s/outside-copy", tmpdir);
	assert_int_equal(copy_bytes(prog[0], outside, -1), 0);
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, outside, err,
					 sizeof(err)), -EINVAL);
	assert_true(exists(outside));
	unlink(outside);
	assert_int_equal(count_in(root, ".build-id"), 0);
	symrepo_close(r);
}

static void test_second_install_eexist(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], err[512];
	struct symrepo *r;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	tmp_copy(r, prog[1], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[1], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	tmp_copy(r, prog[1], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[1], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -EEXIST);
	assert_false(exists(tmp));
	/* Also for a file that is already there but whose symbol file went missing: healed. */
	char sym[PATH_LEN];
	assert_int_equal(symrepo_path(r, &prog_id[1], SYMREPO_SYMBOLS, sym, sizeof(sym)), 0);
	assert_int_equal(unlink(sym), 0);
	tmp_copy(r, prog[1], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[1], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -EEXIST);
	assert_true(symrepo_has(r, &prog_id[1], SYMREPO_SYMBOLS));
	assert_int_equal(count_in(root, "tmp"), 1);
	symrepo_close(r);
}

static void test_debug_file(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], err[512], name[256];
	struct symrepo *r;
	bool line = true;

	(void)state;
	/* Executable without DWARF first, then its debug file: rebuilt with lines. */
	r = repo_new(root, sizeof(root), 0);
	tmp_copy(r, prog_stripped, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	assert_int_equal(sym_line_rows(r, &prog_id[0]), 0);
	assert_true(lookup_name(r, &prog_id[0], known_fn_vaddr, name, sizeof(name), &line) > 0);
	assert_string_equal(name, "known_fn");
	assert_false(line);
	tmp_copy(r, prog_debug, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_DEBUGINFO, tmp, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_true(sym_line_rows(r, &prog_id[0]) > 0);
	assert_true(lookup_name(r, &prog_id[0], known_fn_vaddr, name, sizeof(name), &line) > 0);
	assert_true(line);
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), 0);
	symrepo_close(r);

	/* Debug file first: nothing to build from yet; the executable then builds with both. */
	r = repo_new(root, sizeof(root), 0);
	tmp_copy(r, prog_debug, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_DEBUGINFO, tmp, err, sizeof(err)), 0);
	assert_true(symrepo_has(r, &prog_id[0], SYMREPO_DEBUGINFO));
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_SYMBOLS));
	tmp_copy(r, prog_stripped, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &prog_id[0], SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	assert_true(sym_line_rows(r, &prog_id[0]) > 0);
	symrepo_close(r);
}

static void test_add_files(void **state)
{
	char root[PATH_LEN], err[512];
	struct symrepo_add_result res;
	struct sysom_build_id id;
	struct symrepo *r;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	assert_int_equal(symrepo_add_files_ex(r, prog_stripped, prog_debug, &res, err, sizeof(err)), 0);
	assert_memory_equal(&res.id, &prog_id[0], sizeof(res.id));
	assert_true(res.executable_installed && res.debug_installed && res.symbols_built);
	assert_true(res.stats.line_rows > 0);
	assert_true(res.stats.output_bytes > 0);
	assert_int_equal(symrepo_add_files(r, prog_stripped, prog_debug, &id, err, sizeof(err)),
			 -EEXIST);
	assert_memory_equal(&id, &prog_id[0], sizeof(id));
	/* A debug file of another build is refused before anything is copied. */
	assert_int_equal(symrepo_add_files(r, prog[1], prog_debug, &id, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_false(symrepo_has(r, &prog_id[1], SYMREPO_EXECUTABLE));
	assert_int_equal(symrepo_add_files(r, "/nonexistent/file", NULL, &id, err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(count_in(root, "tmp"), 1);
	symrepo_close(r);
}

/* Races: threads (over two handles) and a forked process install the same Build ID. */
struct race_shared {
	pthread_barrier_t barrier;
	int child_rc;
};

struct race_thread {
	struct symrepo *r;
	struct race_shared *sh;
	const char *src;
	enum symrepo_kind kind;
	char tmp[PATH_LEN];
	char err[512];
	int rc;
};

static void *race_main(void *arg)
{
	struct race_thread *t = arg;

	pthread_barrier_wait(&t->sh->barrier);
	t->rc = symrepo_install(t->r, &prog_id[0], t->kind, t->tmp, t->err, sizeof(t->err));
	return NULL;
}

static void test_concurrent_installs(void **state)
{
	char root[PATH_LEN], path[PATH_LEN], err[512];
	struct race_thread th[RACE_THREADS];
	pthread_t tid[RACE_THREADS];
	struct race_shared *sh;
	pthread_barrierattr_t ba;
	struct symrepo *r1, *r2;
	int status, ok = 0, eexist = 0;
	pid_t child;

	(void)state;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	pthread_barrier_init(&sh->barrier, &ba, RACE_THREADS + 1);
	sh->child_rc = 1;
	r1 = repo_new(root, sizeof(root), 0);
	r2 = repo_reopen(root);
	for (int i = 0; i < RACE_THREADS; i++) {
		th[i].r = i % 2 ? r2 : r1;
		th[i].sh = sh;
		th[i].kind = SYMREPO_EXECUTABLE;
		tmp_copy(th[i].r, prog[0], -1, th[i].tmp, sizeof(th[i].tmp));
	}

	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		struct symrepo_options o;
		struct symrepo *cr = NULL;
		char tmp[PATH_LEN], cerr[512];
		int rc = -1;

		alarm(60); /* never outlive a parent that failed before the barrier */
		symrepo_options_default(&o, root);
		if (symrepo_open(&o, &cr) == 0 && symrepo_tmp_path(cr, tmp, sizeof(tmp)) == 0 &&
		    copy_bytes(prog[0], tmp, -1) == 0) {
			pthread_barrier_wait(&sh->barrier);
			rc = symrepo_install(cr, &prog_id[0], SYMREPO_EXECUTABLE, tmp, cerr,
					     sizeof(cerr));
		} else {
			pthread_barrier_wait(&sh->barrier);
		}
		sh->child_rc = rc;
		symrepo_close(cr);
		_exit(0);
	}
	for (int i = 0; i < RACE_THREADS; i++)
		assert_int_equal(pthread_create(&tid[i], NULL, race_main, &th[i]), 0);
	for (int i = 0; i < RACE_THREADS; i++)
		pthread_join(tid[i], NULL);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	for (int i = 0; i < RACE_THREADS; i++) {
		ok += th[i].rc == 0;
		eexist += th[i].rc == -EEXIST;
		assert_false(exists(th[i].tmp));
	}
	ok += sh->child_rc == 0;
	eexist += sh->child_rc == -EEXIST;
	assert_int_equal(ok, 1);
	assert_int_equal(eexist, RACE_THREADS);

	/* The file in place is complete and correct, its symbol file good, nothing left over. */
	assert_int_equal(symrepo_path(r1, &prog_id[0], SYMREPO_EXECUTABLE, path, sizeof(path)), 0);
	assert_true(same_content(path, prog[0]));
	assert_int_equal(symrepo_check(r1, &prog_id[0], SYMREPO_EXECUTABLE, err, sizeof(err)), 0);
	assert_int_equal(symrepo_check(r1, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), 0);
	assert_int_equal(count_in(root, "locks"), 0);
	assert_int_equal(count_in(root, "tmp"), 2); /* the two handles' lock files */
	symrepo_close(r2);
	symrepo_close(r1);
	pthread_barrier_destroy(&sh->barrier);
	munmap(sh, sizeof(*sh));
}

/* An executable and its debug file arriving at once: the final symbol file has both. */
static void test_concurrent_executable_and_debug(void **state)
{
	char root[PATH_LEN], err[512];
	struct race_thread th[2];
	pthread_t tid[2];
	struct race_shared sh;
	struct symrepo *r;

	(void)state;
	for (int round = 0; round < 8; round++) {
		r = repo_new(root, sizeof(root), 0);
		pthread_barrier_init(&sh.barrier, NULL, 2);
		for (int i = 0; i < 2; i++) {
			th[i].r = r;
			th[i].sh = &sh;
			th[i].kind = i ? SYMREPO_DEBUGINFO : SYMREPO_EXECUTABLE;
			tmp_copy(r, i ? prog_debug : prog_stripped, -1, th[i].tmp, sizeof(th[i].tmp));
			assert_int_equal(pthread_create(&tid[i], NULL, race_main, &th[i]), 0);
		}
		for (int i = 0; i < 2; i++) {
			pthread_join(tid[i], NULL);
			assert_int_equal(th[i].rc, 0);
		}
		assert_true(sym_line_rows(r, &prog_id[0]) > 0);
		assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), 0);
		pthread_barrier_destroy(&sh.barrier);
		symrepo_close(r);
	}
}

/* True when /proc/locks shows a process blocked on a flock of inode `ino`. */
static bool flock_waiter_on(ino_t ino)
{
	char line[512], pat[64];
	bool found = false;
	FILE *f = fopen("/proc/locks", "r");

	if (!f)
		return false;
	snprintf(pat, sizeof(pat), ":%lu ", (unsigned long)ino);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "->") && strstr(line, "FLOCK") && strstr(line, pat);
	fclose(f);
	return found;
}

/* Another process holding a Build ID's lock (the holder's protocol: unlink, then close) keeps
 * an install of that Build ID waiting; the waiter then retries on the new lock file. */
static void test_lock_excludes(void **state)
{
	char root[PATH_LEN], lock[PATH_LEN + 256], hex[129], err[512];
	struct race_thread th;
	struct race_shared sh;
	struct symrepo *r;
	struct stat st;
	pthread_t tid;
	int fd, polls = 0;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	sysom_build_id_hex(&prog_id[0], hex, sizeof(hex));
	snprintf(lock, sizeof(lock), "%s/locks/%s.lock", root, hex);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	assert_int_equal(fstat(fd, &st), 0);

	pthread_barrier_init(&sh.barrier, NULL, 2);
	th = (struct race_thread){ .r = r, .sh = &sh, .kind = SYMREPO_EXECUTABLE };
	tmp_copy(r, prog[0], -1, th.tmp, sizeof(th.tmp));
	assert_int_equal(pthread_create(&tid, NULL, race_main, &th), 0);
	pthread_barrier_wait(&sh.barrier);
	/* Wait (up to 10 s) until the kernel shows the install blocked on our lock. */
	while (!flock_waiter_on(st.st_ino) && polls++ < 10000)
		usleep(1000);
	assert_true(flock_waiter_on(st.st_ino));
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	assert_true(exists(th.tmp));
	assert_int_equal(unlink(lock), 0);
	close(fd);
	pthread_join(tid, NULL);
	assert_int_equal(th.rc, 0);
	assert_true(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), 0);
	assert_int_equal(count_in(root, "locks"), 0);
	pthread_barrier_destroy(&sh.barrier);
	symrepo_close(r);
}

/* A process that dies mid-upload leaves a half file in its temporary directory. */
static void crash_mid_upload(const char *root)
{
	pid_t child = fork();
	int status;

	assert_true(child >= 0);
	if (child == 0) {
		struct symrepo_options o;
		struct symrepo *cr = NULL;
		char tmp[PATH_LEN];

		symrepo_options_default(&o, root);
		if (symrepo_open(&o, &cr) || symrepo_tmp_path(cr, tmp, sizeof(tmp)) ||
		    copy_bytes(prog[0], tmp, 3000))
			_exit(1);
		_exit(0); /* no symrepo_close: as if killed */
	}
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_crash_leftovers(void **state)
{
	char root[PATH_LEN], live_tmp[PATH_LEN], err[512];
	struct symrepo_gc_stats st;
	struct symrepo *live, *r;

	(void)state;
	live = repo_new(root, sizeof(root), 0);
	/* A live handle's upload in progress must survive other handles' cleanup. */
	tmp_copy(live, prog[0], 3000, live_tmp, sizeof(live_tmp));
	crash_mid_upload(root);
	assert_int_equal(count_in(root, "tmp"), 4); /* 2 lock files, 2 half files */
	r = repo_reopen(root);                     /* open removes the dead one's */
	assert_int_equal(count_in(root, "tmp"), 3); /* 2 live lock files + the live upload */
	assert_true(exists(live_tmp));
	crash_mid_upload(root);
	memset(&st, 0xff, sizeof(st));
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.tmp_removed, 1);
	assert_int_equal(st.build_ids, 0);
	assert_true(exists(live_tmp));
	/* The half upload is never installed. */
	assert_int_equal(symrepo_install(live, &prog_id[0], SYMREPO_EXECUTABLE, live_tmp, err,
					 sizeof(err)), -SYSOM_ECORRUPT);
	assert_false(symrepo_has(r, &prog_id[0], SYMREPO_EXECUTABLE));
	symrepo_close(live);
	symrepo_close(r);
	assert_int_equal(count_in(root, "tmp"), 0);
}

static void truncate_half(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(truncate(path, st.st_size / 2), 0);
}

static void test_corrupt_symbols_and_gc(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], sym[PATH_LEN], exe[PATH_LEN], dbg[PATH_LEN];
	char marker[PATH_LEN], err[512], name[256];
	struct symrepo_gc_stats st;
	struct symfile *f;
	struct symrepo *r, *other;
	int e = 0;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	for (int i = 0; i < 2; i++) {
		tmp_copy(r, i ? prog[1] : prog_stripped, -1, tmp, sizeof(tmp));
		assert_int_equal(symrepo_install(r, &prog_id[i], SYMREPO_EXECUTABLE, tmp, err,
						 sizeof(err)), 0);
	}
	assert_int_equal(symrepo_path(r, &prog_id[0], SYMREPO_SYMBOLS, sym, sizeof(sym)), 0);
	/* A truncated symbol file (another process's view: a fresh handle) is never served. */
	truncate_half(sym);
	other = repo_reopen(root);
	f = symrepo_symbols_acquire(other, &prog_id[0], &e);
	assert_null(f);
	assert_int_equal(e, -SYSOM_ECORRUPT);
	assert_int_equal(symrepo_check(other, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	/* gc rebuilds it; the handle that refused it serves the new one. */
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.symbols_rebuilt, 1);
	assert_int_equal(st.corrupt_removed, 0);
	assert_int_equal(st.build_ids, 2);
	assert_true(lookup_name(other, &prog_id[0], known_fn_vaddr, name, sizeof(name), NULL) > 0);
	assert_string_equal(name, "known_fn");

	/* A crash between installing the debug file and rebuilding: the marker says so. */
	assert_int_equal(symrepo_path(r, &prog_id[0], SYMREPO_DEBUGINFO, dbg, sizeof(dbg)), 0);
	assert_int_equal(copy_bytes(prog_debug, dbg, -1), 0);
	snprintf(marker, sizeof(marker), "%.*s.rebuild", (int)(strlen(sym) - 4), sym);
	close(open(marker, O_WRONLY | O_CREAT, 0640));
	assert_int_equal(symrepo_check(r, &prog_id[0], SYMREPO_SYMBOLS, err, sizeof(err)), -ESTALE);
	assert_int_equal(sym_line_rows(r, &prog_id[0]), 0);
	/* ... and a symbol file missing altogether (crash before the first build). */
	char sym1[PATH_LEN];
	assert_int_equal(symrepo_path(r, &prog_id[1], SYMREPO_SYMBOLS, sym1, sizeof(sym1)), 0);
	assert_int_equal(unlink(sym1), 0);
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.symbols_rebuilt, 2);
	assert_false(exists(marker));
	assert_true(symrepo_has(r, &prog_id[1], SYMREPO_SYMBOLS));
	assert_true(sym_line_rows(r, &prog_id[0]) > 0);

	/* An executable whose bytes no longer match its name is removed; a corrupt symbol file
	 * with nothing to rebuild it from is removed too (never served). */
	assert_int_equal(symrepo_path(r, &prog_id[1], SYMREPO_EXECUTABLE, exe, sizeof(exe)), 0);
	assert_int_equal(unlink(exe), 0);
	assert_int_equal(copy_bytes(prog[2], exe, -1), 0);
	truncate_half(sym1);
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.corrupt_removed, 2);
	assert_int_equal(st.symbols_rebuilt, 0);
	assert_int_equal(st.build_ids, 1);
	assert_false(exists(exe));
	assert_false(exists(sym1));
	f = symrepo_symbols_acquire(r, &prog_id[1], &e);
	assert_null(f);
	assert_int_equal(e, -ENOENT);
	/* A clean repository: gc changes nothing. */
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.symbols_rebuilt + st.corrupt_removed + st.tmp_removed, 0);
	assert_int_equal(st.build_ids, 1);
	symrepo_close(other);
	symrepo_close(r);
}

/* Synthetic symbol files: `count` ids with distinct function names. */
static void synth_id(unsigned i, struct sysom_build_id *id)
{
	memset(id, 0, sizeof(*id));
	id->kind = SYSOM_OBJECT_ELF;
	id->len = 20;
	for (unsigned k = 0; k < 20; k++)
		id->bytes[k] = (uint8_t)(i * 131 + k * 7 + (i >> 8) * 31 + 1);
	id->bytes[0] = (uint8_t)i;
	id->bytes[1] = (uint8_t)(i >> 8);
}

static void synth_install(struct symrepo *r, unsigned i)
{
	struct symfile_symbol syms[LRU_SYMBOLS];
	char names[LRU_SYMBOLS][32], tmp[PATH_LEN], err[512];
	struct symfile_segment seg = { .file_offset = 0x1000, .vaddr = 0x401000, .size = 0x10000 };
	struct sysom_build_id id;

	synth_id(i, &id);
	for (unsigned k = 0; k < LRU_SYMBOLS; k++) {
		snprintf(names[k], sizeof(names[k]), "fn_%u_%u", i, k);
		syms[k].start = 0x401000 + k * 0x100;
		syms[k].size = 0x80;
		syms[k].name = names[k];
	}
	assert_int_equal(symrepo_tmp_path(r, tmp, sizeof(tmp)), 0);
	assert_int_equal(symfile_write_table(&id, &seg, 1, syms, LRU_SYMBOLS, tmp, err, sizeof(err)), 0);
	assert_int_equal(symrepo_install(r, &id, SYMREPO_SYMBOLS, tmp, err, sizeof(err)), 0);
}

/* Mappings of this process backed by files under `root`. */
static unsigned mapped_under(const char *root)
{
	char line[8192];
	unsigned n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, root))
			n++;
	fclose(f);
	return n;
}

static bool synth_lookup_ok(struct symfile *f, unsigned i, unsigned k)
{
	struct symfile_frame fr[4];
	char want[32];
	int n;

	snprintf(want, sizeof(want), "fn_%u_%u", i, k);
	n = symfile_lookup(f, 0x401000 + k * 0x100 + 0x10, fr, 4);
	return n == 1 && !strcmp(fr[0].name, want);
}

static void test_lru_bound(void **state)
{
	char root[PATH_LEN];
	struct symrepo_cache_stats cs;
	struct sysom_build_id id0, id;
	struct symfile *held, *f;
	struct symrepo *r;
	unsigned maps_with_all;
	int e;

	(void)state;
	r = repo_new(root, sizeof(root), LRU_MAX);
	for (unsigned i = 0; i < LRU_IDS; i++)
		synth_install(r, i);
	synth_id(0, &id0);
	held = symrepo_symbols_acquire(r, &id0, &e);
	assert_non_null(held);
	for (unsigned pass = 0; pass < 3; pass++) {
		for (unsigned i = 1; i < LRU_IDS; i++) {
			synth_id(i, &id);
			f = symrepo_symbols_acquire(r, &id, &e);
			assert_non_null(f);
			assert_true(synth_lookup_ok(f, i, i % LRU_SYMBOLS));
			symrepo_symbols_release(r, f);
			symrepo_cache_stats_get(r, &cs);
			assert_true(cs.cached <= LRU_MAX);
			assert_true(cs.detached <= 1);
		}
	}
	/* The handle held across all those evictions is still valid, and evicted. */
	symrepo_cache_stats_get(r, &cs);
	assert_int_equal(cs.detached, 1);
	assert_int_equal(cs.acquired, 1);
	assert_true(cs.evictions >= 3 * (LRU_IDS - LRU_MAX));
	assert_true(synth_lookup_ok(held, 0, 7));
	maps_with_all = mapped_under(root);
	assert_true(maps_with_all >= 1 && maps_with_all <= LRU_MAX + 1);
	/* A second acquire of an evicted-but-held id maps a fresh copy (the held one stays). */
	f = symrepo_symbols_acquire(r, &id0, &e);
	assert_non_null(f);
	assert_ptr_not_equal(f, held);
	assert_true(synth_lookup_ok(f, 0, 3));
	symrepo_symbols_release(r, f);
	symrepo_symbols_release(r, held);
	symrepo_cache_stats_get(r, &cs);
	assert_int_equal(cs.detached, 0);
	assert_int_equal(cs.acquired, 0);
	assert_true(cs.cached <= LRU_MAX);
	assert_true(mapped_under(root) <= LRU_MAX);
	/* Hits do not reopen. */
	synth_id(5, &id);
	f = symrepo_symbols_acquire(r, &id, &e);
	symrepo_symbols_release(r, f);
	symrepo_cache_stats_get(r, &cs);
	uint64_t misses = cs.misses;
	for (int k = 0; k < 100; k++) {
		f = symrepo_symbols_acquire(r, &id, &e);
		assert_non_null(f);
		symrepo_symbols_release(r, f);
	}
	symrepo_cache_stats_get(r, &cs);
	assert_int_equal(cs.misses, misses);
	/* Unknown ids. */
	synth_id(LRU_IDS + 5, &id);
	assert_null(symrepo_symbols_acquire(r, &id, &e));
	assert_int_equal(e, -ENOENT);
	symrepo_close(r);
}

/* Threads acquiring, looking up and releasing random ids through a small cache. */
struct lru_thread {
	struct symrepo *r;
	unsigned seed;
	unsigned bad;
};

static void *lru_main(void *arg)
{
	struct lru_thread *t = arg;
	struct symfile *held[3] = { NULL, NULL, NULL };
	unsigned held_i[3] = { 0, 0, 0 };
	struct sysom_build_id id;
	int e;

	for (unsigned n = 0; n < 3000; n++) {
		unsigned i = (unsigned)rand_r(&t->seed) % LRU_IDS, slot = n % 3;

		if (held[slot]) {
			if (!synth_lookup_ok(held[slot], held_i[slot], n % LRU_SYMBOLS))
				t->bad++;
			symrepo_symbols_release(t->r, held[slot]);
		}
		synth_id(i, &id);
		held[slot] = symrepo_symbols_acquire(t->r, &id, &e);
		held_i[slot] = i;
		if (!held[slot] || !synth_lookup_ok(held[slot], i, n % LRU_SYMBOLS))
			t->bad++;
	}
	for (unsigned s = 0; s < 3; s++)
		symrepo_symbols_release(t->r, held[s]);
	return NULL;
}

static void test_lru_threads(void **state)
{
	char root[PATH_LEN];
	struct lru_thread th[4];
	pthread_t tid[4];
	struct symrepo_cache_stats cs;
	struct symrepo *r;

	(void)state;
	r = repo_new(root, sizeof(root), LRU_MAX);
	for (unsigned i = 0; i < LRU_IDS; i++)
		synth_install(r, i);
	for (unsigned i = 0; i < 4; i++) {
		th[i] = (struct lru_thread){ .r = r, .seed = 17 + i };
		assert_int_equal(pthread_create(&tid[i], NULL, lru_main, &th[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(tid[i], NULL);
		assert_int_equal(th[i].bad, 0);
	}
	symrepo_cache_stats_get(r, &cs);
	assert_int_equal(cs.acquired, 0);
	assert_int_equal(cs.detached, 0);
	assert_true(cs.cached <= LRU_MAX);
	assert_true(cs.evictions > 0);
	assert_true(mapped_under(root) <= LRU_MAX);
	symrepo_close(r);
}

static void test_file_hash_identity(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], path[PATH_LEN], hex[129], want[PATH_LEN + 512], err[512];
	char text[PATH_LEN], name[256];
	struct symrepo_add_result res;
	struct sysom_build_id wrong, tid;
	struct symrepo *r;
	FILE *f;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	/* Wrong content for the hash: refused. */
	tmp_copy(r, prog[0], -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &nobid_id, SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);
	assert_non_null(strstr(err, "content hash"));
	assert_false(exists(tmp));
	/* A 16-byte GNU build ID with the same bytes is another identity (another tree). */
	wrong = nobid_id;
	wrong.kind = SYSOM_OBJECT_ELF;
	tmp_copy(r, prog_nobid, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &wrong, SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -SYSOM_ECORRUPT);

	tmp_copy(r, prog_nobid, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &nobid_id, SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	sysom_build_id_hex(&nobid_id, hex, sizeof(hex));
	snprintf(want, sizeof(want), "%s/.file-hash/%.2s/%s.executable", root, hex, hex + 2);
	assert_int_equal(symrepo_path(r, &nobid_id, SYMREPO_EXECUTABLE, path, sizeof(path)), 0);
	assert_string_equal(path, want);
	assert_true(same_content(path, prog_nobid));
	assert_true(symrepo_has(r, &nobid_id, SYMREPO_EXECUTABLE));
	assert_false(symrepo_has(r, &wrong, SYMREPO_EXECUTABLE));
	assert_int_equal(symrepo_check(r, &nobid_id, SYMREPO_EXECUTABLE, err, sizeof(err)), 0);
	tmp_copy(r, prog_nobid, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &nobid_id, SYMREPO_EXECUTABLE, tmp, err, sizeof(err)),
			 -EEXIST);
	/* Its symbol file names the content hash and serves its functions. */
	assert_true(symrepo_has(r, &nobid_id, SYMREPO_SYMBOLS));
	assert_int_equal(symrepo_check(r, &nobid_id, SYMREPO_SYMBOLS, err, sizeof(err)), 0);
	assert_true(lookup_name(r, &nobid_id, nm_address(prog_nobid, "outer_fn"), name, sizeof(name),
				NULL) > 0);
	assert_string_equal(name, "outer_fn");

	/* A file that is not ELF at all: held under its hash, no symbol file to build. */
	snprintf(text, sizeof(text), "%s/script.py", tmpdir);
	f = fopen(text, "w");
	assert_non_null(f);
	fputs("print('not an ELF file')\n", f);
	fclose(f);
	assert_int_equal(symrepo_add_files_ex(r, text, NULL, &res, err, sizeof(err)), 0);
	assert_int_equal(res.id.kind, SYSOM_OBJECT_FILE_HASH);
	assert_true(res.executable_installed);
	assert_false(res.symbols_built);
	assert_false(symrepo_has(r, &res.id, SYMREPO_SYMBOLS));
	tid = res.id;
	/* gc keeps both and does not count the non-ELF file as a failure. */
	struct symrepo_gc_stats st;
	assert_int_equal(symrepo_gc(r, &st, err, sizeof(err)), 0);
	assert_int_equal(st.build_ids, 2);
	assert_int_equal(st.corrupt_removed, 0);
	assert_int_equal(st.symbols_failed, 0);
	assert_true(symrepo_has(r, &tid, SYMREPO_EXECUTABLE));
	unlink(text);
	symrepo_close(r);
}

struct seen {
	unsigned n, exe, dbg, sym;
	struct sysom_build_id last;
};

static int count_visit(void *ctx, const struct sysom_build_id *id, bool executable,
		       bool debuginfo, bool symbols)
{
	struct seen *s = ctx;

	s->n++;
	s->exe += executable;
	s->dbg += debuginfo;
	s->sym += symbols;
	s->last = *id;
	return s->n == 1000 ? -ECANCELED : 0;
}

static void test_for_each(void **state)
{
	char root[PATH_LEN], tmp[PATH_LEN], err[512];
	struct seen s = { 0 };
	struct symrepo *r;

	(void)state;
	r = repo_new(root, sizeof(root), 0);
	assert_int_equal(symrepo_add_files(r, prog_stripped, prog_debug, NULL, err, sizeof(err)), 0);
	tmp_copy(r, prog_nobid, -1, tmp, sizeof(tmp));
	assert_int_equal(symrepo_install(r, &nobid_id, SYMREPO_EXECUTABLE, tmp, err, sizeof(err)), 0);
	for (unsigned i = 0; i < 20; i++)
		synth_install(r, i);
	/* Foreign names in the tree are ignored. */
	char junk[PATH_LEN + 64];
	snprintf(junk, sizeof(junk), "%s/.build-id/README", root);
	close(open(junk, O_WRONLY | O_CREAT, 0640));
	assert_int_equal(symrepo_for_each(r, count_visit, &s), 0);
	assert_int_equal(s.n, 22);
	assert_int_equal(s.exe, 2);
	assert_int_equal(s.dbg, 1);
	assert_int_equal(s.sym, 22);
	/* The walk stops at a negative return and returns it. */
	for (unsigned i = 20; i < 1100; i++)
		synth_install(r, i);
	memset(&s, 0, sizeof(s));
	assert_int_equal(symrepo_for_each(r, count_visit, &s), -ECANCELED);
	assert_int_equal(s.n, 1000);
	symrepo_close(r);
}

static void test_open_errors(void **state)
{
	struct symrepo_options o;
	struct symrepo *r = NULL;
	char longroot[3200];

	(void)state;
	symrepo_options_default(&o, NULL);
	assert_int_equal(symrepo_open(&o, &r), -EINVAL);
	memset(longroot, 'a', sizeof(longroot) - 1);
	longroot[0] = '/';
	longroot[sizeof(longroot) - 1] = '\0';
	symrepo_options_default(&o, longroot);
	assert_int_equal(symrepo_open(&o, &r), -ENAMETOOLONG);
	symrepo_options_default(&o, "/proc/h-repo-cannot-create");
	assert_true(symrepo_open(&o, &r) < 0);
	o.root = tmpdir;
	o.max_open_files = 1u << 30;
	assert_int_equal(symrepo_open(&o, &r), -EINVAL);
	assert_null(r);
	symrepo_close(NULL);
	symrepo_symbols_release(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_install_has_path),
		cmocka_unit_test(test_identity_mismatch),
		cmocka_unit_test(test_second_install_eexist),
		cmocka_unit_test(test_debug_file),
		cmocka_unit_test(test_add_files),
		cmocka_unit_test(test_concurrent_installs),
		cmocka_unit_test(test_concurrent_executable_and_debug),
		cmocka_unit_test(test_lock_excludes),
		cmocka_unit_test(test_crash_leftovers),
		cmocka_unit_test(test_corrupt_symbols_and_gc),
		cmocka_unit_test(test_lru_bound),
		cmocka_unit_test(test_lru_threads),
		cmocka_unit_test(test_file_hash_identity),
		cmocka_unit_test(test_for_each),
		cmocka_unit_test(test_open_errors),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
