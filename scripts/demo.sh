#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The end-to-end demo behind `make demo`: a server on 127.0.0.1 with its embedded store in a
# temporary directory, the agent (as root) shipping to it, a CPU-bound workload and a simulated
# 8-rank training job whose processes load the NCCL profiler plugin and the CUPTI library, then
# the flame graph summary and the job's GPU view. Finishes on its own and cleans up.
# Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${SYSOM_DEMO_SECONDS:-15}

if [ "$(id -u)" != 0 ]; then
	echo "The agent loads eBPF programs, which needs root: re-running with sudo."
	exec sudo --preserve-env=SYSOM_DEMO_SECONDS "$0" "$@"
fi

work=$(mktemp -d /tmp/sysom-demo.XXXXXX)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Output is cut with `sed -n 1,Np`, not `head`: head exits early, the writer gets SIGPIPE, and
# with pipefail the demo would stop there.
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Starting sysom-server on 127.0.0.1 (embedded SQLite store in $work/data)"
"$build/sysom-server" --listen 127.0.0.1:0 --data-dir "$work/data" --port-file "$work/port" \
	>"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/server.log"; echo "server did not start"; exit 1; }
url=http://127.0.0.1:$(cat "$work/port")
sed 's/^/   /' "$work/server.log"

step "Checking this node (sysom-agent --check)"
"$build/sysom-agent" --check --server "$url" --spool-dir "$work/spool" | sed 's/^/   /'

simjob_dir=$build/tests/fixtures/simjob
gpu_args=()
have_job=false
if [ -x "$simjob_dir/simjob" ] && [ -e "$build/lib/libnccl-profiler-sysom.so" ] &&
	[ -e "$build/lib/libsysom-cupti.so" ] && [ -e "$simjob_dir/libcupti.so" ]; then
	have_job=true
	gpu_args=(--gpu-libraries "$simjob_dir/libnccl.so.2:$simjob_dir/libcuda.so.1" --gpu-launch-duty 1)
fi

step "Starting sysom-agent: 99 Hz on every CPU, 50% of ticks, batches every 5 s"
# The production defaults are 10% of ticks and 30 s batches; the demo is short, so it
# samples more and ships more often to have a fuller picture in ${seconds} s.
"$build/sysom-agent" --server "$url" --spool-dir "$work/spool" --sample-rate 0.5 \
	--batch-interval 5s --drain-interval 1s --socket "$work/agent.sock" "${gpu_args[@]}" \
	>"$work/agent.log" 2>&1 &
agent=$!
pids+=($agent)
for _ in $(seq 100); do grep -q "attached to" "$work/agent.log" && break; sleep 0.1; done
grep -q "attached to" "$work/agent.log" || { cat "$work/agent.log"; exit 1; }
sed 's/^/   /' "$work/agent.log"

step "Running a CPU-bound workload for ${seconds} s (2 threads: compute + read() system calls)"
"$build/tests/fixtures/chain_workload" "$seconds" --mode mixed --threads 2 --quiet &
workload=$!
wait "$workload"
echo "   workload pid $workload finished"

if $have_job; then
	step "A simulated 8-rank training job with the in-process GPU timing (rank 3's GPU 2x slower)"
	echo "   fake NCCL/CUDA (tests/fixtures/simjob) loading the real libnccl-profiler-sysom.so"
	echo "   (NCCL_PROFILER_PLUGIN) and libsysom-cupti.so (CUDA_INJECTION64_PATH) over a fake CUPTI"
	job_id=demo-$$
	# The server's monitor diagnoses the job as its batches arrive; on this small machine the
	# straggler is intermittent (scheduling noise hides it in some instances), so the demo asks
	# it to open incidents for intermittent stragglers too (per-job settings).
	curl -sf -X PUT --data '{"alert_intermittent": true}' \
		"$url/api/v1/jobs/$job_id/settings" >/dev/null
	SYSOM_SOCKET_PATH=$work/agent.sock NCCL_PROFILER_PLUGIN=$build/lib/libnccl-profiler-sysom.so \
		CUDA_INJECTION64_PATH=$build/lib/libsysom-cupti.so \
		SYSOM_CUPTI_LIBRARY=$simjob_dir/libcupti.so \
		"$simjob_dir/simjob" --ranks 8 --iterations 200 --cpu-us 2000 --kernel-us 3000 \
		--job-id "$job_id" --fault rank=3,kind=gpu,amount=2 --print-env >"$work/job.log" 2>&1 ||
		{ cat "$work/job.log"; exit 1; }
	grep -E "^rank [0-9]+ iterations" "$work/job.log" | sed -n "1,3p" | sed 's/^/   /'
	echo "   ... job $job_id finished"
fi

step "Waiting for the agent to upload the workload's symbols (Build ID keyed, once per node)"
build_id=$(readelf -n "$build/tests/fixtures/chain_workload" | awk '/Build ID/ {print $3}')
for _ in $(seq 300); do
	curl -sf "$url/api/v1/symbols/$build_id" | grep -q '"executable":{' && break
	sleep 0.1
done
grep "uploaded symbols of" "$work/agent.log" | sed -e 's/^.*info: /   /' | sed -n "1,8p"
echo "   ($(grep -c "uploaded symbols of" "$work/agent.log") objects uploaded: the libraries that appeared in stacks)"

step "Stopping the agent (SIGTERM: final drain, last batch flushed)"
kill -TERM "$agent"
wait "$agent" || true
grep -E "batch [0-9]+:|kernel symbols|stopped" "$work/agent.log" | sed -e 's/^.*sysom-agent //' -e 's/^/   /'

step "Flame graph of the workload: sysomctl flamegraph --pid $workload --format top"
"$build/sysomctl" --server "$url" flamegraph --pid "$workload" --from -10m --to now \
	--format top --top 5 | sed 's/^/   /'

if $have_job; then
	step "The job's GPU view: sysomctl gpu --job $job_id"
	"$build/sysomctl" --server "$url" gpu --job "$job_id" --from -10m --to now | cut -c1-150 |
		sed 's/^/   /' | sed -n "1,32p"
	step "Who is slow, and why: sysomctl stragglers --job $job_id"
	"$build/sysomctl" --server "$url" stragglers --job "$job_id" --from -10m --to now |
		sed -n "1,8p" | cut -c1-160 | sed 's/^/   /'
	step "What the server diagnosed by itself as the batches arrived: sysomctl diagnose"
	"$build/sysomctl" --server "$url" diagnose --job "$job_id" --from -10m --to now |
		sed -n "1,6p" | cut -c1-200 | sed 's/^/   /'
	diag_id=$("$build/sysomctl" --server "$url" diagnose --job "$job_id" --from -10m --to now \
		--format json | python3 -c 'import json,sys; d=json.load(sys.stdin)["diagnoses"]; print(d[0]["id"] if d else "")')
	if [ -n "$diag_id" ]; then
		step "Its report: sysomctl diagnose --id $diag_id (GET /api/v1/diagnoses/$diag_id?format=text)"
		"$build/sysomctl" --server "$url" diagnose --id "$diag_id" | sed -n "1,40p" |
			cut -c1-200 | sed 's/^/   /'
	fi
	step "Which rank did the others wait for: sysomctl collectives --job $job_id --op AllReduce"
	"$build/sysomctl" --server "$url" collectives --job "$job_id" --op AllReduce --from -10m \
		--to now --limit 5 | sed 's/^/   /'
	step "GPU kernel time by launching stack: sysomctl flamegraph --kind gpu-time (folded)"
	"$build/sysomctl" --server "$url" flamegraph --kind gpu-time --from -10m --to now \
		--format folded | sort -t' ' -k2 -nr | sed -n "1,4p" | cut -c1-200 | sed 's/^/   /'
fi

step "Whole node, folded (first lines): sysomctl flamegraph --format folded"
"$build/sysomctl" --server "$url" flamegraph --from -10m --to now --format folded |
	sed -n "1,5p" | cut -c1-220 | sed 's/^/   /'

step "Where to look next"
cat <<EOF
   sysomctl --server URL nodes                          nodes and their agents
   sysomctl --server URL processes --from -1h           what ran, with sample counts
   sysomctl --server URL flamegraph --comm NAME         one program's stacks (top summary)
   sysomctl --server URL jobs / gpu --job J             training jobs; per-rank GPU time
   sysomctl --server URL collectives --job J            who entered each collective last
   sysomctl --server URL diagnose [--id N]              incidents the server found (and alerted)
   sysomctl ... flamegraph --format folded | flamegraph.pl > cpu.svg   an SVG flame graph
   curl URL/api/v1/flamegraph?format=json&pid=N        the same as JSON (docs/http-api.md)
   curl URL/metrics                                     Prometheus metrics of the server
   sysom-agent --check                                  is this node ready to profile?
   deploy/                                              systemd units and config examples
   sysom-symrepo --repo DATA/symbols info BUILDID       what the symbol repository holds
   DEBUGINFOD_URLS=URL debuginfod-find debuginfo ID     the server is a debuginfod server too
   Kernel frames end in _[k], inlined ones in _[i]; code with no symbols at all shows as
   file+0xoffset, never as a neighbouring function's name (docs/architecture.md).
EOF
