#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The device check: sysom on a real GPU with a real PyTorch + NCCL + CUDA training job.
# Not part of `make test` (CI has no GPU); run by hand on a GPU machine, from the repository root:
#   tests/device/bundle.sh build .dev          # here: the release build and its libraries
#   tests/device/gpu_check.sh .dev OUTDIR [SECONDS [ROUNDS]]   # there
#   (AGENT_ARGS="..." adds agent options, e.g. --unwind-table-memory 1G; SKIP_ISOLATION=1 skips
#   the plugin-alone and foreign-CUPTI jobs)
# It measures the job's throughput without sysom, with the agent alone and with the agent + the
# CUPTI library + the NCCL profiler plugin (ROUNDS times each, interleaved), runs the plugin
# alone and the CUPTI library against any CUPTI of another CUDA on the machine (it must refuse
# it, not crash), checks what the server then answers (jobs, ranks, NCCL calls, GPU kernel time,
# launch stacks, Python frames, symbols, stack completeness), records what NVML says
# (nvml_facts.py), and leaves summary.txt and results.tar.gz (logs and API answers) in OUTDIR.
set -uo pipefail
bundle=$(realpath "${1:?bundle dir}")
out=$(realpath -m "${2:?out dir}")
secs=${3:-20}
rounds=${4:-1}
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
cuptis=$(find /opt /usr/local /usr/lib -name 'libcupti.so*' -type f 2>/dev/null | sort)
say "libcuda: ${libcuda:-not found}; libnccl: ${libnccl:-not found}; CUPTI libraries: $(echo $cuptis)"
major=$($PY -c 'import torch; print(torch.version.cuda.split(".")[0])' 2>/dev/null)
other_cupti=$(echo "$cuptis" | grep -v -E "libcupti\.so\.${major:-none}(\.|$)" | head -1)
for f in "$bundle"/bin/* "$bundle"/lib/*.so; do
	miss=$(run_env ldd "$f" 2>&1 | grep -c "not found")
	[ "$miss" -gt 0 ] && say "MISSING libraries for $f: $(run_env ldd "$f" | grep 'not found' | tr '\n' ' ')"
done
run_env "$bundle/bin/sysom-agent" --version 2>&1 | tee -a "$sum"

say "== NVML (nvidia-ml-py)"
$PY "$here/nvml_facts.py" >"$out/nvml.json" 2>&1
say "nvml_facts: rc=$? $(wc -c <"$out/nvml.json") bytes"
if run_env "$bundle/bin/sysom-agent" --help 2>&1 | grep -q -- --probe-nvml; then
	# The agent's own NVML reader (3 samples, 1 s apart), to compare with nvml_facts.py.
	run_env "$bundle/bin/sysom-agent" --probe-nvml >"$out/nvml_probe.json" 2>"$work/res/nvml_probe.err"
	say "sysom-agent --probe-nvml: rc=$? $(wc -c <"$out/nvml_probe.json") bytes; $(head -c 400 "$work/res/nvml_probe.err" | tr '\n' ' ')"
	# The device file each GPU's processes hold open (the rank-to-GPU mapping's evidence).
	say "device files: $(grep -o '"index":[0-9]*\|"device_file":[^,]*' "$out/nvml_probe.json" | tr '\n' ' ')"
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
job base0 "$secs"

say "== server and agent"
mkdir -p "$work/data" "$work/spool"
# Started through env, not a shell function: $! must be the program (env execs it), or the
# SIGTERM below would end a subshell and leave the program running.
env LD_LIBRARY_PATH="$bundle/deps" "$bundle/bin/sysom-server" --listen 127.0.0.1:0 --data-dir "$work/data" \
	--port-file "$work/port" >"$work/res/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 60); do [ -s "$work/port" ] && break; sleep 0.5; done
url=http://127.0.0.1:$(cat "$work/port")
say "server at $url"
run_env "$bundle/bin/sysom-agent" --server "$url" --check >"$work/res/agent-check.txt" 2>&1
say "agent --check rc=$?"; head -40 "$work/res/agent-check.txt" >>"$sum"
start_agent() {
	# shellcheck disable=SC2086
	env LD_LIBRARY_PATH="$bundle/deps" "$bundle/bin/sysom-agent" --server "$url" --spool-dir "$work/spool" \
		--socket "$work/agent.sock" --drain-interval 0.5s --batch-interval 2s \
		--symbol-upload-rate 0 ${AGENT_ARGS:-} >>"$work/res/agent.log" 2>&1 &
	agent_pid=$!
	local before=$1
	for _ in $(seq 60); do [ "$(grep -c 'attached to' "$work/res/agent.log")" -gt "$before" ] && break; sleep 0.5; done
	say "agent: $(grep -c 'attached to' "$work/res/agent.log") 'attached to' lines; alive=$(kill -0 $agent_pid 2>/dev/null && echo yes || echo no)"
}
stop_agent() { kill -TERM $agent_pid; wait $agent_pid; say "agent exit rc=$?"; }
start_agent 0
full_env=(SYSOM_SOCKET_PATH="$work/agent.sock" NCCL_PROFILER_PLUGIN="$bundle/lib/libnccl-profiler-sysom.so"
	CUDA_INJECTION64_PATH="$bundle/lib/libsysom-cupti.so" SYSOM_NCCL_WINDOW_MS=500 SYSOM_CUPTI_WINDOW_MS=500)
if [ -z "${SKIP_ISOLATION:-}" ]; then
say "== the NCCL profiler plugin alone"
job plugin1 8 SYSOM_SOCKET_PATH="$work/agent.sock" NCCL_PROFILER_PLUGIN="$bundle/lib/libnccl-profiler-sysom.so" \
	SYSOM_NCCL_WINDOW_MS=500
if [ -n "$other_cupti" ]; then
	say "== the CUPTI library offered a CUPTI of another CUDA ($other_cupti): refused, no crash"
	job cuptiother 8 "${full_env[@]}" SYSOM_CUPTI_LIBRARY="$other_cupti"
	grep "sysom-cupti" "$work/res/cuptiother.err" | head -3 | tee -a "$sum"
fi
fi
# The first job with the agent pays for symbol uploads (once per library): warm-up, not measured.
say "== warm-up with the agent (symbol uploads)"
job full0 "$secs" "${full_env[@]}"
grep "sysom-cupti" "$work/res/full0.err" | head -3 | tee -a "$sum"
for r in $(seq "$rounds"); do
	say "== round $r: agent alone, agent + CUPTI + plugin, then the agent stopped"
	[ "$r" -gt 1 ] && start_agent "$(grep -c 'attached to' "$work/res/agent.log")"
	job "agent$r" "$secs" SYSOM_SOCKET_PATH="$work/agent.sock"
	job "full$r" "$secs" "${full_env[@]}"
	if [ "$r" -lt "$rounds" ]; then
		stop_agent
		job "base$r" "$secs"
	fi
done
sleep 8 # two batch intervals: the last windows reach the server

api() { curl -s -m 30 "$url$1" >"$work/res/$2"; say "GET $1 -> $(wc -c <"$work/res/$2") bytes"; }
api /api/v1/jobs jobs.json
for j in agent1 full1 plugin1; do
	api "/api/v1/jobs/$j" "job-$j.json"
	api "/api/v1/jobs/$j/collectives?limit=200" "coll-$j.json"
	api "/api/v1/jobs/$j/gpu" "gpu-$j.json"
	api "/api/v1/jobs/$j/stragglers" "strag-$j.json"
	api "/api/v1/flamegraph?job=$j&kind=cpu&from=-1h&to=now&format=folded" "cpu-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=gpu-launch&from=-1h&to=now&format=folded" "launch-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=gpu-time&from=-1h&to=now&format=folded" "gputime-$j.folded"
	api "/api/v1/flamegraph?job=$j&kind=off-cpu&from=-1h&to=now&format=folded" "offcpu-$j.folded"
done
api /api/v1/nodes nodes.json
node=$($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); n=d.get("nodes", d) if isinstance(d, dict) else d; print(n[0]["node_id"])' "$work/res/nodes.json" 2>/dev/null)
[ -n "$node" ] && api "/api/v1/nodes/$node/gpus" gpus.json && head -c 1500 "$work/res/gpus.json" >>"$sum" && echo >>"$sum"
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
for j in ("agent1", "full1", "plugin1"):
    print("--", j)
    print("job:", json.dumps(load("job-%s.json" % j))[:600])
    # The rank's GPU (wire 1.7): on a one-GPU machine every rank's gpu_device should be 0.
    print("ranks (rank, local rank, gpu_device):",
          [(x.get("rank"), x.get("local_rank"), x.get("gpu_device"))
           for x in load("job-%s.json" % j).get("ranks", [])])
    print("collectives:", json.dumps(load("coll-%s.json" % j))[:500])
    print("gpu:", json.dumps(load("gpu-%s.json" % j))[:700])
    cpu = folded("cpu-%s.folded" % j)
    tot = sum(v for _, v in cpu) or 1
    for fn in ("prep_batch", "train_step", "train_loop", "allreduce_grads", "forward",
               "[python unresolved]", "libtorch", "libcuda", "0x"):
        print("cpu share containing %-20r %.3f" % (fn, sum(v for s, v in cpu if fn in s) / tot))
    print("cpu samples:", tot, "stacks:", len(cpu))
    import collections, re
    stops = collections.Counter()
    for s, v in cpu:
        m = re.search(r"\[truncated: ([^\]]*)\]", s)
        stops[m.group(1) if m else "complete"] += v
    print("user stacks by stop:", ", ".join("%s %.3f" % (k, v / tot) for k, v in stops.most_common()))
    for s, v in sorted(cpu, key=lambda x: -x[1])[:3]:
        print("  top cpu stack (%d): %s" % (v, s[-400:]))
    for kind in ("launch", "gputime", "offcpu"):
        f = folded("%s-%s.folded" % (kind, j))
        t = sum(v for _, v in f)
        print("%s: %d stacks, total %d" % (kind, len(f), t))
        for s, v in sorted(f, key=lambda x: -x[1])[:2]:
            print("  top %s (%d): %s" % (kind, v, s[-400:]))
EOF

stop_agent
job "base$rounds" "$secs"
kill -TERM $server_pid; wait $server_pid; say "server exit rc=$?"

$PY - "$work/res" <<'EOF' 2>&1 | tee -a "$sum"
import json, sys, os
r = sys.argv[1]
def sps(n):
    try:
        return json.loads(open(os.path.join(r, n + ".out")).read().strip().splitlines()[-1])["steps_per_s"]
    except Exception:
        return None
names = sorted(f[:-4] for f in os.listdir(r) if f.endswith(".out"))
vals = {n: sps(n) for n in names}
print("throughput steps/s: " + ", ".join("%s %.2f" % (n, v) for n, v in vals.items() if v))
import statistics
def med(prefix, warmup):
    v = [x for n, x in vals.items() if x and n.startswith(prefix) and n[len(prefix):].isdigit()
         and not (warmup and n == prefix + "0")]
    return statistics.median(v) if v else None
base = med("base", False)
for kind in ("agent", "full"):
    v = med(kind, True)
    if v and base:
        print("%s (median of rounds): %.2f steps/s = %.4f of the baseline median %.2f (cost %.2f%%)" % (kind, v, v / base, base, 100 * (1 - v / base)))
EOF
grep -E "error|warn|fail" -i "$work/res/agent.log" | sort | uniq -c | sort -rn | head -25 >>"$sum"
tar -czf "$out/results.tar.gz" -C "$work" res
say "done"
