/* SPDX-License-Identifier: Apache-2.0 */
/* Unwind-table build benchmark: our CFI compiler against the straightforward libdw way
 * (dwarf_cfi_addrframe at every row) on the same files in one run (each file in a fresh
 * process, first build included in the median); table size per FDE.
 * usage: cfi_bench [--rounds N] FILE... */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "agent/sampling/cfi.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Baseline: the same rows through libdw — open the CFI, then for every row boundary of our
 * table ask dwarf_cfi_addrframe for the frame and read its CFA and RBP/RA rules (which
 * replays the FDE's program up to that pc each time). Returns the number of frames libdw
 * described whose CFA disagrees with ours (a cross-check), or -1.
 */
static long baseline(const char *path, const struct cfi_table *t, uint64_t *frames)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long disagree = 0;

	if (fd < 0)
		return -1;
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	Dwarf_CFI *cfi = elf ? dwarf_getcfi_elf(elf) : NULL;
	*frames = 0;
	for (uint32_t i = 0; cfi && i < t->nrows; i++) {
		const struct unwind_row *r = &t->rows[i];
		if (UNWIND_ROW_CFA(r) == UNWIND_CFA_NONE)
			continue;
		Dwarf_Frame *frame;
		if (dwarf_cfi_addrframe(cfi, t->base + r->pc, &frame) != 0) {
			disagree++;
			continue;
		}
		Dwarf_Op *ops, mem[3];
		size_t nops;
		(*frames)++;
		if (dwarf_frame_cfa(frame, &ops, &nops) == 0 && UNWIND_ROW_CFA(r) == UNWIND_CFA_RSP &&
		    !(nops == 1 && ops[0].atom == DW_OP_bregx && ops[0].number == 7 &&
		      ops[0].number2 == (Dwarf_Word)r->cfa_offset8 * 8))
			disagree++;
		(void)dwarf_frame_register(frame, 6, mem, &ops, &nops);
		(void)dwarf_frame_register(frame, 16, mem, &ops, &nops);
		free(frame);
	}
	if (elf)
		elf_end(elf); /* frees the CFI too */
	close(fd);
	return cfi ? disagree : -1;
}

struct totals {
	uint64_t bytes, fdes;
	double ms, base_ms;
};

int main(int argc, char **argv)
{
	int rounds = 5, first = 1;

	if (argc > 2 && strcmp(argv[1], "--rounds") == 0) {
		rounds = atoi(argv[2]);
		first = 3;
	}
	if (first >= argc || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "usage: cfi_bench [--rounds N] FILE...\n");
		return 2;
	}
	elf_version(EV_CURRENT);
	printf("| file | FDEs | CFI rows → table rows (with gaps) | table | bytes/FDE | complex CFA rows | build ms "
	       "(median of %d) | libdw baseline ms | ratio | libdw disagreements |\n", rounds);
	printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	uint64_t total_bytes = 0, total_fdes = 0;
	double total_ms = 0, total_base_ms = 0;
	for (int f = first; f < argc; f++) {
		/* Each file in a fresh process: the allocator's state (glibc raises its mmap
		 * threshold after large frees) would otherwise make results depend on order. */
		int pipefd[2];
		if (pipe(pipefd) != 0)
			return 1;
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid > 0) {
			struct totals tot;
			int status;
			close(pipefd[1]);
			ssize_t got = read(pipefd[0], &tot, sizeof(tot));
			close(pipefd[0]);
			waitpid(pid, &status, 0);
			if (got != (ssize_t)sizeof(tot) || !WIFEXITED(status) || WEXITSTATUS(status))
				return 1;
			total_bytes += tot.bytes;
			total_fdes += tot.fdes;
			total_ms += tot.ms;
			total_base_ms += tot.base_ms;
			continue;
		}
		close(pipefd[0]);
		double *ours = calloc((size_t)rounds, sizeof(double));
		double *base = calloc((size_t)rounds, sizeof(double));
		struct cfi_table t = { 0 };
		char err[256] = "";
		long disagree = 0;
		uint64_t frames = 0;

		if (!ours || !base)
			return 1;
		for (int r = 0; r < rounds; r++) {
			cfi_table_free(&t);
			double t0 = now_s();
			int rc = cfi_table_build_path(argv[f], &t, err, sizeof(err));
			ours[r] = (now_s() - t0) * 1e3;
			if (rc) {
				fprintf(stderr, "%s: %s\n", argv[f], err);
				return 1;
			}
		}
		for (int r = 0; r < rounds; r++) {
			double t0 = now_s();
			disagree = baseline(argv[f], &t, &frames);
			base[r] = (now_s() - t0) * 1e3;
		}
		qsort(ours, (size_t)rounds, sizeof(double), bench_dbl_cmp);
		qsort(base, (size_t)rounds, sizeof(double), bench_dbl_cmp);
		double mo = ours[rounds / 2], mb = base[rounds / 2];
		uint64_t bytes = (uint64_t)t.nrows * sizeof(struct unwind_row);
		const char *name = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
		printf("| %s | %" PRIu64 " | %" PRIu64 " → %u | %.1f KiB | %.1f | %" PRIu64
		       " | %.2f | %.2f | %.1fx | %ld of %" PRIu64 " |\n",
		       name, t.stats.fdes, t.stats.rows_raw, t.nrows, (double)bytes / 1024.0,
		       t.stats.fdes ? (double)bytes / (double)t.stats.fdes : 0.0,
		       t.stats.complex_cfa_rows, mo, mb, mo > 0 ? mb / mo : 0.0, disagree, frames);
		struct totals tot = { bytes, t.stats.fdes, mo, mb };
		fflush(stdout);
		if (write(pipefd[1], &tot, sizeof(tot)) != (ssize_t)sizeof(tot))
			_exit(1);
		cfi_table_free(&t);
		free(ours);
		free(base);
		_exit(0);
	}
	printf("| **all** | %" PRIu64 " | | %.1f MiB | %.1f | | %.1f | %.1f | %.1fx | |\n",
	       total_fdes, (double)total_bytes / 1048576.0,
	       total_fdes ? (double)total_bytes / (double)total_fdes : 0.0, total_ms, total_base_ms,
	       total_ms > 0 ? total_base_ms / total_ms : 0.0);
	return 0;
}
