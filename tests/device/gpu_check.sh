#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The device check: sysom on a real GPU with a real PyTorch + NCCL + CUDA training job.
# Not part of `make test` (CI has no GPU); run by hand on a GPU machine, from the repository root:
#   tests/device/bundle.sh build .dev          # here: the release build and its libraries
#   tests/device/gpu_check.sh .dev OUTDIR [SECONDS]   # there
# It measures the job's throughput without sysom, with the agent alone and with the agent + the
# CUPTI library + the NCCL profiler plugin, checks what the server then answers (jobs, ranks,
# NCCL calls, GPU kernel time, launch stacks, Python frames, symbols), records what NVML says
# (nvml_facts.py), and leaves summary.txt and results.tar.gz (logs and API answers) in OUTDIR.
set -uo pipefail
bundle=$(realpath "${1:?bundle dir}")
out=$(realpath -m "${2:?out dir}")
secs=${3:-20}
here=$(dirname "$(realpath "$0")")
work=/tmp/sysom-devcheck
rm -rf "$work"
mkdir -p "$work/res" "$out"
sum=$out/summary.txt
: >"$sum"
say() { echo "$*" | tee -a "$sum"; }
run_env() { env LD_LIBRARY_PATH="$bundle/deps" "$@"; }
PY=${PYTHON:-python3}

say "== machine"
say "kernel $(uname -r); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
say "btf: $(ls -la /sys/kernel/btf/vmlinux 2>&1 | cut -c1-80)"
say "perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>&1) bpffs=$(mount | grep -c bpf)"
nvidia-smi -L 2>&1 | tee -a "$sum"
nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE,POWER >"$work/res/nvidia-smi.txt" 2>&1
say "python: $($PY -c 'import sys,torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1 | tail -1)"
libcuda=$($PY -c 'import ctypes,torch; torch.zeros(1).cuda(); import re; print([l.split()[-1] for l in open("/proc/self/maps") if re.search(r"libcuda\.so", l)][0])' 2>/dev/null)
libnccl=$($PY -c 'import torch,re; torch.cuda.nccl.version(); print([l.split()[-1] for l in open("/proc/self/maps") if re.search(r"libnccl\.so", l)][0])' 2>/dev/null)
libcupti=$(find /opt /usr/local /usr/lib -name 'libcupti.so*' -type f 2>/dev/null | sort | head -1)
say "libcuda: ${libcuda:-not found}; libnccl: ${libnccl:-not found}; libcupti: ${libcupti:-not found}"
for f in "$bundle"/bin/* "$bundle"/lib/*.so; do
	miss=$(run_env ldd "$f" 2>&1 | grep -c "not found")
	[ "$miss" -gt 0 ] && say "MISSING libraries for $f: $(run_env ldd "$f" | grep 'not found' | tr '\n' ' ')"
done
run_env "$bundle/bin/sysom-agent" --version 2>&1 | tee -a "$sum"

say "== NVML (nvidia-ml-py)"
$PY "$here/nvml_facts.py" >"$out/nvml.json" 2>&1
say "nvml_facts: rc=$? $(wc -c <"$out/nvml.json") bytes"
if [ -x "$bundle/bin/sysom-nvml-probe" ]; then
	run_env "$bundle/bin/sysom-nvml-probe" >"$out/nvml_probe.json" 2>&1
	say "sysom-nvml-probe: rc=$? $(head -c 300 "$out/nvml_probe.json" | tr '\n' ' ')"
fi

job() { # job NAME SECONDS ENV...: runs the training job, prints its JSON line
	local name=$1 s=$2
	shift 2
	env TORCHELASTIC_RUN_ID="$name" RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 \
		MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 "$@" \
		timeout $((s + 120)) $PY "$here/gpu_train.py" "$s" >"$work/res/$name.out" 2>"$work/res/$name.err"
	local rc=$?
	say "job $name rc=$rc: $(tail -1 "$work/res/$name.out")"
	[ $rc -ne 0 ] && tail -5 "$work/res/$name.err" | tee -a "$sum"
}

say "== baseline without sysom"
job base1 "$secs"

say "== server and agent"
mkdir -p "$work/data" "$work/spool"
run_env "$bundle/bin/sysom-server" --listen 127.0.0.1:0 --data-dir "$work/data" \
	--port-file "$work/port" >"$work/res/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 60); do [ -s "$work/port" ] && break; sleep 0.5; done
url=http://127.0.0.1:$(cat "$work/port")
say "server at $url"
run_env "$bundle/bin/sysom-agent" --server "$url" --check >"$work/res/agent-check.txt" 2>&1
say "agent --check rc=$?"; head -40 "$work/res/agent-check.txt" >>"$sum"
run_env "$bundle/bin/sysom-agent" --server "$url" --spool-dir "$work/spool" \
	--socket "$work/agent.sock" --drain-interval 0.5s --batch-interval 2s \
	--symbol-upload-rate 0 >"$work/res/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 60); do grep -q "attached to" "$work/res/agent.log" && break; sleep 0.5; done
say "agent: $(grep -c 'attached to' "$work/res/agent.log") 'attached to' lines; alive=$(kill -0 $agent_pid 2>/dev/null && echo yes || echo no)"

say "== with the agent + CUPTI library + NCCL profiler plugin"
job full1 "$secs" SYSOM_SOCKET_PATH="$work/agent.sock" \
	NCCL_PROFILER_PLUGIN="$bundle/lib/libnccl-profiler-sysom.so" \
	CUDA_INJECTION64_PATH="$bundle/lib/libsysom-cupti.so" SYSOM_CUPTI_LIBRARY="$libcupti" \
	SYSOM_NCCL_WINDOW_MS=500 SYSOM_CUPTI_WINDOW_MS=500
# second: the first job with the agent paid for its symbol uploads (once per library)
say "== with the agent alone"
job agent1 "$secs" SYSOM_SOCKET_PATH="$work/agent.sock"
sleep 8 # two batch intervals: the last windows reach the server

api() { curl -s -m 30 "$url$1" >"$work/res/$2"; say "GET $1 -> $(wc -c <"$work/res/$2") bytes"; }
api /api/v1/jobs jobs.json
for j in agent1 full1; do
	api "/api/v1/jobs/$j" "job-$j.json"
	api "/api/v1/jobs/$j/collectives?limit=200" "coll-$j.json"
	api "/api/v1/jobs/$j/gpu" "gpu-$j.json"
	api "/api/v1/jobs/$j/stragglers" "strag-$j.json"
	api "/api/v1/flamegraph?job=$j&kind=cpu&from=-1h&to=now&format=folded" "cpu-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=gpu-launch&from=-1h&to=now&format=folded" "launch-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=gpu-time&from=-1h&to=now&format=folded" "gputime-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=off-cpu&from=-1h&to=now&format=folded" "offcpu-$j.folded"
done
curl -s -m 10 "$url/metrics" >"$work/res/metrics.txt"
$PY - "$work/res" <<'EOF' 2>&1 | tee -a "$sum"
import json, os, sys
r = sys.argv[1]
def load(n):
    try:
        return json.load(open(os.path.join(r, n)))
    except Exception as e:
        return {"_error": str(e)}
def folded(n):
    rows = []
    try:
        for line in open(os.path.join(r, n)):
            stack, _, v = line.rstrip("\n").rpartition(" ")
            rows.append((stack, int(v)))
    except Exception:
        pass
    return rows
for j in ("agent1", "full1"):
    print("--", j)
    print("job:", json.dumps(load("job-%s.json" % j))[:600])
    print("collectives:", json.dumps(load("coll-%s.json" % j))[:500])
    print("gpu:", json.dumps(load("gpu-%s.json" % j))[:700])
    cpu = folded("cpu-%s.folded" % j)
    tot = sum(v for _, v in cpu) or 1
    for fn in ("prep_batch", "train_step", "train_loop", "allreduce_grads", "forward",
               "[python unresolved]", "libtorch", "libcuda", "0x"):
        print("cpu share containing %-20r %.3f" % (fn, sum(v for s, v in cpu if fn in s) / tot))
    print("cpu samples:", tot, "stacks:", len(cpu))
    for s, v in sorted(cpu, key=lambda x: -x[1])[:3]:
        print("  top cpu stack (%d): %s" % (v, s[-400:]))
    for kind in ("launch", "gputime", "offcpu"):
        f = folded("%s-%s.folded" % (kind, j))
        t = sum(v for _, v in f)
        print("%s: %d stacks, total %d" % (kind, len(f), t))
        for s, v in sorted(f, key=lambda x: -x[1])[:2]:
            print("  top %s (%d): %s" % (kind, v, s[-400:]))
EOF

kill -TERM $agent_pid; wait $agent_pid; say "agent exit rc=$?"
say "== baseline again"
job base2 "$secs"
kill -TERM $server_pid; wait $server_pid; say "server exit rc=$?"

$PY - "$work/res" <<'EOF' 2>&1 | tee -a "$sum"
import json, sys, os
r = sys.argv[1]
def sps(n):
    try:
        return json.loads(open(os.path.join(r, n + ".out")).read().strip().splitlines()[-1])["steps_per_s"]
    except Exception:
        return None
b = [x for x in (sps("base1"), sps("base2")) if x]
if b:
    base = sum(b) / len(b)
    print("throughput steps/s: base1 %s base2 %s" % (sps("base1"), sps("base2")))
    for n in ("agent1", "full1"):
        v = sps(n)
        if v:
            print("%s: %.2f steps/s = %.4f of baseline (cost %.2f%%)" % (n, v, v / base, 100 * (1 - v / base)))
EOF
grep -E "error|warn|fail" -i "$work/res/agent.log" | sort | uniq -c | sort -rn | head -25 >>"$sum"
tar -czf "$out/results.tar.gz" -C "$work" res
say "done"
