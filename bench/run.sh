#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the benchmarks against a release build: bench/run.sh BUILD_DIR
# Results are printed as a Markdown table (copy them into docs/PERFORMANCE.md with the date).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ]; then
	exec sudo "$0" "$@"
fi
python3 "$here/overhead.py" "$build" --rounds "${BENCH_ROUNDS:-3}" --seconds "${BENCH_SECONDS:-30}" \
	--markdown "$build/bench-overhead.md"
echo "table written to $build/bench-overhead.md"
python3 "$here/agent_churn.py" "$build" --storm "${BENCH_CHURN_SECONDS:-150}" \
	--markdown "$build/bench-agent-churn.md"
echo "table written to $build/bench-agent-churn.md"
"$here/symrepo.sh" "$build"
libs=()
for f in /lib/x86_64-linux-gnu/libc.so.6 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
	/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0 /usr/local/cuda/lib/libnccl.so.2 \
	/usr/local/cuda/lib/libcublasLt.so.13; do
	[ -f "$f" ] && libs+=("$f")
done
"$build/bench/cfi_bench" --rounds 9 "${libs[@]}"
SYSOM_BUILD="$build" "$build/bench/unwind_bench" --seconds 10 --rounds 7
SYSOM_BUILD="$build" "$build/bench/gputrace_bench" --rounds 7 --calls 200000 --seconds 5
SYSOM_BUILD="$build" "$build/bench/loader_bench" --rounds 3 --ranks 4 --iterations 200
SYSOM_BUILD="$build" "$build/bench/nccl_profiler_bench" --rounds 31
"$build/bench/ossignals_bench" --trips 200000 --rounds 7
"$build/bench/offcpu_bench" --trips 200000 --rounds 7
SYSOM_ROOT="$(dirname "$here")" "$build/bench/pyoff_bench" --python /usr/bin/python3.11 --trips 20000 --rounds 7
# Python name cache: fixed code objects beside new ones compiled all the time (exec in a loop).
"$here/python_names.sh" "$build" --seconds "${BENCH_PYNAMES_SECONDS:-30}" \
	--markdown "$build/bench-python-names.md"
"$build/bench/analysis_bench" --rounds 5
"$build/bench/export_bench" --stacks 1000,10000,100000 --rounds 5
# Time from a rank stopping to the hang alert at the default intervals (RUNS jobs at once).
"$here/hang_latency.sh" "$build" "${BENCH_HANG_RUNS:-6}"
# The server under a fleet: real batches from the agent watching the simulated GPU job (30 s
# windows), then BENCH_LOAD_AGENTS simulated agents posting them for BENCH_LOAD_SECONDS.
# BENCH_LOAD_WORKLOAD=cpu captures a node without a training job instead.
load_batches=$(mktemp -d /tmp/sysom-load-batches.XXXXXX)
trap 'rm -rf "$load_batches"' EXIT
"$here/capture_batches.sh" "$build" "$load_batches" 30 65 "${BENCH_LOAD_WORKLOAD:-gpu}"
# Each agent holds a connection in the bench and one in the server; ingest_load raises its own
# limit (and the server's, which it starts), this covers shells with a low hard limit.
ulimit -n $((2 * ${BENCH_LOAD_AGENTS:-5000} + 1024)) 2>/dev/null || true
"$build/bench/ingest_load" --batches "$load_batches" --agents "${BENCH_LOAD_AGENTS:-5000}" \
	--seconds "${BENCH_LOAD_SECONDS:-600}" --markdown "$build/bench-ingest-load.md"
echo "ingest load row appended to $build/bench-ingest-load.md"
