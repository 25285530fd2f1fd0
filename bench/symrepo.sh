#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Symbol repository benchmarks against a release build: bench/symrepo.sh BUILD_DIR
# (1) lookups per second per core from mapped symbol files (libc, libnccl) beside baselines;
# (2) writer time and peak memory (libcublasLt, libnccl, libc) and `sysom-symrepo add` of them;
# (3) a synthetic repository of 1,000 vs 170,000 Build IDs: open+lookup cost and memory.
# Results are printed as Markdown tables and written to BUILD_DIR/bench-symrepo.md.
# Environment: SYMREPO_BENCH_IDS ("1000 170000"), SYMREPO_BENCH_FUNCTIONS (2000, mean per
# file), SYMREPO_BENCH_DIR (/tmp: needs ~0.19 MB per Build ID at 2000 functions),
# SYMREPO_BENCH_SECONDS (3 per lookup measurement), NCCL_LIB, CUBLASLT_LIB.
set -euo pipefail
build=${1:-build}
bin=$build/bench/symrepo_bench
cli=$build/sysom-symrepo
for b in "$bin" "$cli"; do
	[ -x "$b" ] || { echo "missing $b: build it first (make BUILD=$build $b)" >&2; exit 1; }
done
ids=${SYMREPO_BENCH_IDS:-1000 170000}
functions=${SYMREPO_BENCH_FUNCTIONS:-2000}
dir=${SYMREPO_BENCH_DIR:-/tmp}
seconds=${SYMREPO_BENCH_SECONDS:-3}
libc=$(ldd /bin/true | awk '$1 ~ /^libc\.so/ {print $3}')
nccl=${NCCL_LIB:-/usr/local/cuda/lib/libnccl.so.2}
cublaslt=${CUBLASLT_LIB:-/usr/local/cuda/lib/libcublasLt.so.13}
out=$build/bench-symrepo.md

existing() {
	local f
	for f in "$@"; do
		if [ -f "$f" ]; then echo "$f"; else echo "skipping $f: not found" >&2; fi
	done
}
mapfile -t lookup_libs < <(existing "$libc" "$nccl")
mapfile -t writer_libs < <(existing "$cublaslt" "$nccl" "$libc")

# `sysom-symrepo add` of one file into a fresh repository: wall time (copy, fsync, identity,
# symbol file) and the CLI's peak RSS.
cli_add() {
	local repo
	repo=$(mktemp -d "$dir/h-repo-bench-cli-XXXXXX")
	python3 - "$cli" "$repo" "$1" <<'EOF'
import resource, subprocess, sys, time
cli, repo, f = sys.argv[1:]
t = time.monotonic()
subprocess.run([cli, "--repo", repo, "add", f], check=True, stdout=subprocess.DEVNULL)
wall = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"| {f} | {wall:.2f} s | {rss:.1f} MiB |")
EOF
	rm -rf "$repo"
}

{
	echo "### Lookups per second per core (single thread, ${seconds} s of CPU per column)"
	echo
	"$bin" lookup --seconds "$seconds" "${lookup_libs[@]}"
	echo
	echo "### Writer time and peak memory (symfile_write in a child process)"
	echo
	"$bin" writer "${writer_libs[@]}"
	echo
	echo "### sysom-symrepo add (copy + fsync + identity check + symbol file)"
	echo
	echo "| input | wall | CLI peak RSS |"
	echo "|---|---:|---:|"
	for f in "${writer_libs[@]}"; do cli_add "$f"; done
	echo
	echo "### Synthetic repository (~$functions functions per Build ID)"
	echo
	args=()
	for n in $ids; do args+=(--ids "$n"); done
	"$bin" repo "${args[@]}" --functions "$functions" --dir "$dir"
} | tee "$out"
echo "tables written to $out"
