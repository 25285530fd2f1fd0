#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Exports end to end: server + agent on loopback and the simulated 8-rank job traced with
# uprobes. `sysomctl flamegraph --format pprof` is decoded by an independent decoder (protoc
# from protobuf-compiler, with the schema in the tree) and must carry the same stacks and
# totals as the folded answer of the same query, with the job's functions and the Build ID
# of its binary; speedscope likewise; `sysomctl trace` holds one complete event per NCCL call
# of the job's collectives answer, a process per rank, and says when it is cut short.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
command -v protoc >/dev/null || skip_all "protoc (protobuf-compiler) not installed"
ITER=40
PROTO_DIR=$ROOT/server/query

api() { curl -sf "$SERVER_URL$1"; }
# pprof_text FILE: the decoded text of a gzipped pprof file.
pprof_text() {
	gzip -dc "$1" | protoc --proto_path="$PROTO_DIR" --decode=perftools.profiles.Profile profile.proto
}

# simjob's symbols are in the repository from the start (what `sysom-symrepo add` does for a
# build), so its frames have names however long the agent's own uploads take on a busy host.
mkdir -p "$E2E_TMP/srv.data"
"$BUILD/sysom-symrepo" --repo "$E2E_TMP/srv.data/symbols" add "$SIMJOB" >"$E2E_TMP/symrepo.log" 2>&1
check "sysom-symrepo add simjob exits 0" test $? -eq 0
start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 --gpu-launch-duty 1 || exit 1
timeout 120 "$SIMJOB" --ranks 8 --iterations $ITER --cpu-us 2000 --kernel-us 1000 --print-env \
	>"$E2E_TMP/job.log" 2>&1
check "simjob (8 ranks, $ITER iterations) exits 0" test $? -eq 0
JOB=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job.log" | head -1)
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

RANGE=(--job "$JOB" --from -10m --to now)
for kind in cpu gpu-launch; do
	ctl flamegraph --kind $kind "${RANGE[@]}" --format folded >"$E2E_TMP/$kind.folded"
	ctl flamegraph --kind $kind "${RANGE[@]}" --format json >"$E2E_TMP/$kind.json"
	ctl flamegraph --kind $kind "${RANGE[@]}" --format pprof -o "$E2E_TMP/$kind.pb.gz" 2>/dev/null
	check "$kind: sysomctl flamegraph --format pprof -o FILE exits 0" test $? -eq 0
	ctl flamegraph --kind $kind "${RANGE[@]}" --format speedscope -o "$E2E_TMP/$kind.speedscope.json" 2>/dev/null
	check "$kind: sysomctl flamegraph --format speedscope -o FILE exits 0" test $? -eq 0
	check "$kind: the folded profile has stacks" test -s "$E2E_TMP/$kind.folded"
	pprof_text "$E2E_TMP/$kind.pb.gz" >"$E2E_TMP/$kind.pprof.txt"
	check "$kind: the pprof file is gzip and protoc decodes it as perftools.profiles.Profile" \
		test "${PIPESTATUS[0]}" -eq 0 -a -s "$E2E_TMP/$kind.pprof.txt"
	read -r PTOTAL PSAMPLES PFUNCS PBUILDIDS < <(python3 "$ROOT/tests/e2e/exports.py" pprof \
		"$E2E_TMP/$kind.pprof.txt" "$E2E_TMP/$kind.folded" 2>"$E2E_TMP/$kind.pprof.diff")
	FTOTAL=$(awk '{ s += $NF } END { print s + 0 }' "$E2E_TMP/$kind.folded")
	diag "$kind: pprof $PSAMPLES samples, $PFUNCS functions, $PBUILDIDS mappings with a Build ID; total $PTOTAL, folded $FTOTAL"
	check "$kind: pprof stacks and counts are the folded ones (total $FTOTAL)" \
		bash -c "test ! -s '$E2E_TMP/$kind.pprof.diff' && test '$PTOTAL' = '$FTOTAL'"
	check "$kind: the JSON total equals the pprof total" \
		python3 -c "import json,sys; sys.exit(json.load(open('$E2E_TMP/$kind.json'))['total'] != $PTOTAL)"
	read -r STOTAL SSAMPLES SFRAMES < <(python3 "$ROOT/tests/e2e/exports.py" speedscope \
		"$E2E_TMP/$kind.speedscope.json" "$E2E_TMP/$kind.folded" 2>"$E2E_TMP/$kind.ss.diff")
	check "$kind: speedscope is well formed, its stacks and weights the folded ones" \
		bash -c "test ! -s '$E2E_TMP/$kind.ss.diff' && test '$STOTAL' = '$FTOTAL'"
	diag "$kind sizes (bytes): folded $(stat -c %s "$E2E_TMP/$kind.folded"), json $(stat -c %s "$E2E_TMP/$kind.json"), pprof $(stat -c %s "$E2E_TMP/$kind.pb.gz") (decoded $(gzip -dc "$E2E_TMP/$kind.pb.gz" | wc -c)), speedscope $(stat -c %s "$E2E_TMP/$kind.speedscope.json")"
done
python3 "$ROOT/tests/e2e/exports.py" pprof-names "$E2E_TMP/cpu.pprof.txt" >"$E2E_TMP/cpu.names"
check "the CPU pprof names the job's functions (rank_main, simjob_backward_cpu)" \
	bash -c "grep -qx rank_main '$E2E_TMP/cpu.names' && grep -qx simjob_backward_cpu '$E2E_TMP/cpu.names'"
python3 "$ROOT/tests/e2e/exports.py" pprof-names "$E2E_TMP/gpu-launch.pprof.txt" >"$E2E_TMP/gpu.names"
check "the GPU-launch pprof has the launched kernels as leaf functions ([gpu] ...)" \
	grep -q '^\[gpu\] ' "$E2E_TMP/gpu.names"
WANT_ID=$(readelf -n "$SIMJOB" | sed -n 's/.*Build ID: *//p')
GOT_ID=$(python3 "$ROOT/tests/e2e/exports.py" pprof-buildid "$E2E_TMP/cpu.pprof.txt" "$(readlink -f "$SIMJOB")")
check "simjob's mapping carries its Build ID ($WANT_ID)" test -n "$WANT_ID" -a "$GOT_ID" = "$WANT_ID"
check "the CPU profile's sample period is 1/99 Hz in ns, its range 10 minutes" \
	bash -c "grep -qx 'period: 10101010' '$E2E_TMP/cpu.pprof.txt' && grep -qx 'duration_nanos: 600000000000' '$E2E_TMP/cpu.pprof.txt'"

api "/api/v1/jobs/$JOB/collectives?from=-10m&to=now&limit=10000" >"$E2E_TMP/collectives.json"
ctl trace "$JOB" --from -10m --to now -o "$E2E_TMP/trace.json" 2>/dev/null
check "sysomctl trace JOB -o FILE exits 0" test $? -eq 0
read -r EVENTS PROCS TRUNC < <(python3 "$ROOT/tests/e2e/exports.py" trace "$E2E_TMP/trace.json" \
	"$E2E_TMP/collectives.json" 2>"$E2E_TMP/trace.diff")
diag "trace: $EVENTS complete events, $PROCS processes, truncated $TRUNC, $(stat -c %s "$E2E_TMP/trace.json") bytes"
check "the trace has one complete event per NCCL call of the collectives answer" \
	bash -c "test ! -s '$E2E_TMP/trace.diff' && test '$TRUNC' = false && test '${EVENTS:-0}' -ge $((8 * ITER))"
check "one trace process per rank (8)" test "$PROCS" = 8
check "the trace's processes are named by rank" \
	python3 -c "import json,sys; d=json.load(open('$E2E_TMP/trace.json')); n={e['args']['name'].split(' (')[0] for e in d['traceEvents'] if e['name']=='process_name'}; sys.exit(n != {'rank %d' % r for r in range(8)})"
ctl trace "$JOB" --from -10m --to now --limit 10 >"$E2E_TMP/trace10.json"
read -r EVENTS PROCS TRUNC < <(python3 "$ROOT/tests/e2e/exports.py" trace "$E2E_TMP/trace10.json" \
	"$E2E_TMP/collectives.json")
check "trace --limit 10: 10 events and truncated" test "$EVENTS" = 10 -a "$TRUNC" = true

stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
