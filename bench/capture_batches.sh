#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Captures real agent batches for bench/ingest_load.c: runs the real sysom-agent against a
# server address where nothing listens, so every sealed batch stays in its spool, while a
# workload keeps the node busy. The spool files (64-byte spool header + the zstd wire batch,
# docs/spool-format.md) are what ingest_load reads.
#
#   bench/capture_batches.sh BUILD_DIR OUT_DIR [BATCH_INTERVAL_S] [SECONDS] [WORKLOAD]
#
# WORKLOAD gpu (default): a GPU training node: the simulated 8-rank job (tests/fixtures/simjob,
#   fake NCCL/CUDA, the NCCL profiler plugin and the CUPTI library loaded as in production:
#   NCCL calls, communicators, launches, GPU kernel and NCCL profiler rows) beside the chain
#   workload (CPU stacks). Its iterations are set by $CAPTURE_SIMJOB_ARGS (default
#   "--cpu-us 1000 --kernel-us 3000": about 1,000 NCCL calls per second on the node, within
#   what real data-parallel and tensor-parallel jobs issue).
# WORKLOAD cpu: a node without a training job: CPU stacks and OS signals of the chain workload.
#
# Defaults: 30 s windows (the agent's default) for 65 s, which seals two full windows and the
# partial one at shutdown. Needs root (the agent loads BPF programs).
set -euo pipefail
build=$(cd "${1:?usage: capture_batches.sh BUILD_DIR OUT_DIR [BATCH_INTERVAL_S] [SECONDS]}" && pwd)
out=${2:?usage: capture_batches.sh BUILD_DIR OUT_DIR [BATCH_INTERVAL_S] [SECONDS]}
interval=${3:-30}
seconds=${4:-65}
workload=${5:-gpu}
case $workload in gpu|cpu) ;; *) echo "capture_batches.sh: WORKLOAD is gpu or cpu" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "capture_batches.sh: the agent loads BPF programs: run as root" >&2; exit 1; }

simjob_dir=$build/tests/fixtures/simjob
for f in "$build/sysom-agent" "$build/tests/fixtures/chain_workload"; do
	[ -x "$f" ] || { echo "capture_batches.sh: missing $f: build first" >&2; exit 1; }
done
work=$(mktemp -d /tmp/sysom-capture.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# The agent's 5 s drain, or a quarter of a shorter window.
drain=$(awk -v i="$interval" 'BEGIN { print (i >= 20 ? 5 : i / 4) }')
# Port 1 on loopback: connection refused, so uploads fail fast and batches stay spooled.
"$build/sysom-agent" --server http://127.0.0.1:1 --spool-dir "$work/spool" --socket "$work/agent.sock" \
	--batch-interval "${interval}s" --drain-interval "${drain}s" --duration "${seconds}s" --backoff-max 60s --shutdown-timeout 1s \
	--symbol-upload=false --gpu-libraries "$simjob_dir/libnccl.so.2:$simjob_dir/libcuda.so.1" \
	>"$work/agent.log" 2>&1 &
agent=$!
pids+=("$agent")
for _ in $(seq 300); do
	grep -q "attached to" "$work/agent.log" && break
	kill -0 "$agent" 2>/dev/null || break
	sleep 0.1
done
grep -q "attached to" "$work/agent.log" || { echo "agent did not attach:" >&2; cat "$work/agent.log" >&2; exit 1; }

"$build/tests/fixtures/chain_workload" "$seconds" --mode mixed --threads 1 --quiet >/dev/null 2>&1 &
pids+=("$!")
if [ "$workload" = gpu ] && [ -x "$simjob_dir/simjob" ]; then
	# shellcheck disable=SC2086 # word splitting of the arguments is intended
	env SYSOM_SOCKET_PATH="$work/agent.sock" \
		NCCL_PROFILER_PLUGIN="$build/lib/libnccl-profiler-sysom.so" \
		CUDA_INJECTION64_PATH="$build/lib/libsysom-cupti.so" \
		SYSOM_CUPTI_LIBRARY="$simjob_dir/libcupti.so" \
		"$simjob_dir/simjob" --ranks 8 --seconds "$seconds" \
		${CAPTURE_SIMJOB_ARGS:---cpu-us 1000 --kernel-us 3000} >"$work/simjob.log" 2>&1 &
	pids+=("$!")
elif [ "$workload" = gpu ]; then
	echo "capture_batches.sh: $simjob_dir/simjob not built: batches without NCCL/GPU records" >&2
fi
wait "$agent" || true
mkdir -p "$out"
# The last batch is the partial window sealed at shutdown: left out when there are others.
files=()
for f in "$work"/spool/*.batch; do
	[ -f "$f" ] && files+=("$f")
done
[ ${#files[@]} -gt 1 ] && unset 'files[-1]'
n=0
for f in "${files[@]}"; do
	cp "$f" "$out/"
	n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "capture_batches.sh: the agent spooled no batch; its log:" >&2; cat "$work/agent.log" >&2; exit 1; }
echo "captured $n $workload batches of ${interval} s windows in $out"
