#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Workload identity end to end (wire 1.5 IDENTITIES): two real processes placed in real cgroups
# this test creates, one shaped like a Kubernetes container of the systemd cgroup driver
# (kubepods.slice/.../kubepods-besteffort-pod<UID>.slice/cri-containerd-<64 hex>.scope), one
# in a plain systemd-style scope; a kubelet-style pod log directory names the pod. The server
# must store both identities, filter the flame graph and the process list by pod, namespace,
# container and unit to exactly the process inside, and show the identity in its answers.
. "$(dirname "$0")/lib.sh"
require_root

# A hierarchy where this test may create cgroups and move processes: cgroup v2, else the
# name=systemd v1 hierarchy (hybrid hosts), else the unified v2 mount of a hybrid host.
CGROOT=
for d in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
	if [ "$d" = /sys/fs/cgroup ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then continue; fi
	[ -e "$d/cgroup.procs" ] && CGROOT=$d && break
done
[ -n "$CGROOT" ] || skip_all "no writable cgroup hierarchy"

UID_POD=$(python3 -c 'import uuid; print(uuid.uuid4())')
CID=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
NS=sysom-e2e
POD=trainer-$$-0
SLICE=$CGROOT/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${UID_POD//-/_}.slice
POD_CG=$SLICE/cri-containerd-$CID.scope
# A second pod, in another namespace, runs the simulated 2-rank training job, whose launcher
# names no job (no TORCHELASTIC_RUN_ID, MASTER_ADDR): the agent names it after the pod,
# "<namespace>:<pod name without its per-pod segments>" (docs/architecture.md).
UID_POD2=$(python3 -c 'import uuid; print(uuid.uuid4())')
CID2=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
NS2=sysom-e2e-jobs
POD2=ranks-$$-0
SLICE2=$CGROOT/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${UID_POD2//-/_}.slice
POD2_CG=$SLICE2/cri-containerd-$CID2.scope
SIMJOB=$BUILD/tests/fixtures/simjob/simjob
# A Slurm step's cgroup (v1 layout, recognised on any hierarchy): a second job whose launcher
# names none either is named after its Slurm job and step, "slurm-<job>.<step>".
SLURM_JOB=$$
SLURM_CG=$CGROOT/slurm/uid_0/job_$SLURM_JOB/step_0
UNIT=sysom-e2e-other-$$.scope
OTHER_CG=$CGROOT/sysom-e2e.slice/$UNIT
cleanup_cgroups() {
	rmdir "$POD_CG" "$SLICE" "$POD2_CG" "$SLICE2" "$CGROOT/kubepods.slice/kubepods-besteffort.slice" \
		"$CGROOT/kubepods.slice" "$OTHER_CG" "$CGROOT/sysom-e2e.slice" "$SLURM_CG" \
		"$CGROOT/slurm/uid_0/job_$SLURM_JOB" "$CGROOT/slurm/uid_0" "$CGROOT/slurm" 2>/dev/null
}
trap 'cleanup_cgroups; e2e_cleanup' EXIT
mkdir -p "$POD_CG" "$POD2_CG" "$OTHER_CG" "$SLURM_CG" || skip_all "cannot create cgroups under $CGROOT"
mkdir -p "$E2E_TMP/pods/${NS}_${POD}_${UID_POD}/trainer" "$E2E_TMP/pods/${NS2}_${POD2}_${UID_POD2}/ranks"
# The kubelet's container log links (the first pod's container is named "trainer-main"; the
# second pod's link dangles, as after a log rotation: its name still counts).
mkdir -p "$E2E_TMP/containers"
touch "$E2E_TMP/pods/${NS}_${POD}_${UID_POD}/trainer/0.log"
ln -s "$E2E_TMP/pods/${NS}_${POD}_${UID_POD}/trainer/0.log" "$E2E_TMP/containers/${POD}_${NS}_trainer-main-${CID}.log"
ln -s "$E2E_TMP/pods/${NS2}_${POD2}_${UID_POD2}/ranks/9.log" "$E2E_TMP/containers/${POD2}_${NS2}_ranks-${CID2}.log"
diag "cgroups under $CGROOT: pod $UID_POD container ${CID:0:12}, unit $UNIT"

# The second process runs the same program under another name (another comm).
cp "$WORKLOAD_BIN" "$E2E_TMP/other_workload"

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 --pod-log-root "$E2E_TMP/pods" \
	--container-log-root "$E2E_TMP/containers" || exit 1
# Each shell moves itself into its cgroup, then becomes the workload: the process really runs
# there from its first instruction.
bash -c "echo \$\$ > '$POD_CG/cgroup.procs' && exec '$WORKLOAD_BIN' 4 --quiet" &
P1=$!
bash -c "echo \$\$ > '$OTHER_CG/cgroup.procs' && exec '$E2E_TMP/other_workload' 4 --quiet" &
P2=$!
if [ -x "$SIMJOB" ]; then
	bash -c "echo \$\$ > '$POD2_CG/cgroup.procs' && exec '$SIMJOB' --ranks 2 --seconds 6 --cpu-us 2000 --kernel-us 3000 --fault rank=1,kind=delay,amount=20000,after=1 --print-env --no-job-id" \
		>"$E2E_TMP/job.log" 2>&1 &
	P3=$!
	bash -c "echo \$\$ > '$SLURM_CG/cgroup.procs' && exec '$SIMJOB' --ranks 2 --seconds 3 --cpu-us 1000 --kernel-us 1000 --no-job-id" \
		>"$E2E_TMP/slurmjob.log" 2>&1 &
	P4=$!
fi
sleep 1
check "the pod's process runs in the container cgroup" grep -q "cri-containerd-$CID.scope" /proc/$P1/cgroup
wait $P1
check "workload in the pod exits 0" test $? -eq 0
wait $P2
check "workload in the unit exits 0" test $? -eq 0
if [ -n "${P3:-}" ]; then
	wait $P3
	check "simjob (2 ranks) in the second pod exits 0" test $? -eq 0
	wait $P4
	check "simjob (2 ranks) in the Slurm step exits 0" test $? -eq 0
fi
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

RANGE=(--from -10m --to now)
folded() { ctl flamegraph "${RANGE[@]}" --format folded --limit 100000 "$@"; }
folded >"$E2E_TMP/all.folded"
check "unfiltered: both workloads have samples" \
	bash -c "grep -q '^chain_workload' '$E2E_TMP/all.folded' && grep -q '^other_workload' '$E2E_TMP/all.folded'"
for f in "--pod $POD" "--pod $UID_POD" "--namespace $NS" "--container ${CID:0:12}" "--container $CID" "--container trainer-main" "--container trainer"; do
	# shellcheck disable=SC2086
	folded $f >"$E2E_TMP/f.folded"
	if [ "$f" = "--container trainer" ]; then
		# A name matches whole: "trainer" is not "trainer-main".
		check "flamegraph $f: no container is known by that name (empty)" test ! -s "$E2E_TMP/f.folded"
		continue
	fi
	# (its shell, in the cgroup until it execs, may be sampled under its own name, "bash")
	check "flamegraph $f: only the pod's process" \
		bash -c "grep -q '^chain_workload' '$E2E_TMP/f.folded' && ! grep -qvE '^(chain_workload|bash);' '$E2E_TMP/f.folded'"
done
folded --unit "$UNIT" >"$E2E_TMP/u.folded"
check "flamegraph --unit: only the unit's process" \
	bash -c "grep -q '^other_workload' '$E2E_TMP/u.folded' && ! grep -qvE '^(other_workload|bash);' '$E2E_TMP/u.folded'"
folded --pod no-such-pod >"$E2E_TMP/none.folded"
check "flamegraph of an unknown pod is empty" test ! -s "$E2E_TMP/none.folded"
check "slurm_job=abc is refused (400)" \
	test "$(curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL/api/v1/flamegraph?slurm_job=abc")" = 400

curl -s "$SERVER_URL/api/v1/processes?from=-10m&pod=$POD" >"$E2E_TMP/procs.json"
# Each pid is listed per incarnation (the shell before its exec is one too): all of them, and
# only them, are the pod's.
check "processes?pod= lists exactly the pod's process with its identity" python3 - "$E2E_TMP/procs.json" "$P1" "$CID" "$UID_POD" "$NS" "$POD" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ps = d["processes"]
assert ps and all(p["pid"] == int(sys.argv[2]) for p in ps), ps
for p in ps:
    i = p["identity"]
    assert i["runtime"] == "containerd" and i["container_id"] == sys.argv[3], i
    assert i["pod_uid"] == sys.argv[4] and i["namespace"] == sys.argv[5] and i["pod"] == sys.argv[6], i
    assert i["container"] == "trainer-main", i
    assert i["unit"] == "cri-containerd-%s.scope" % sys.argv[3] and i["slurm_job"] is None, i
EOF
curl -s "$SERVER_URL/api/v1/processes?from=-10m&unit=$UNIT" >"$E2E_TMP/procs2.json"
check "processes?unit= lists the unit's process, in no pod" python3 - "$E2E_TMP/procs2.json" "$P2" "$UNIT" <<'EOF'
import json, sys
ps = json.load(open(sys.argv[1]))["processes"]
assert ps and all(p["pid"] == int(sys.argv[2]) for p in ps), ps
for p in ps:
    i = p["identity"]
    assert i["unit"] == sys.argv[3] and i["pod_uid"] == "" and i["container_id"] == "" and i["runtime"] == "", i
EOF
if [ -n "${P3:-}" ]; then
	JOB="$NS2:ranks"
	curl -s "$SERVER_URL/api/v1/jobs/$JOB" >"$E2E_TMP/job.json"
	check "a job named by no variable is named by its pod ($JOB, source cgroup)" python3 - "$E2E_TMP/job.json" <<'EOF'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
assert ranks and all(r["source"] == "cgroup" and r["job_id_source"] == "pod name" for r in ranks), ranks
EOF
	check "the job's ranks answer names each rank's pod ($NS2/$POD2)" python3 - "$E2E_TMP/job.json" "$NS2" "$POD2" "$CID2" <<'EOF'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
# A rank's incarnation the agent met only after it exited ("[exited]": nothing left to read)
# has no identity; every other one names the pod, and each rank has one.
assert sorted(set(r["rank"] for r in ranks if r["identity"])) == [0, 1], ranks
for r in ranks:
    i = r["identity"]
    assert i or r["comm"] == "[exited]", r
    assert not i or (i["namespace"] == sys.argv[2] and i["pod"] == sys.argv[3] and i["container_id"] == sys.argv[4]), i
    assert not i or i["container"] == "ranks", i
EOF
	curl -s "$SERVER_URL/api/v1/jobs/$JOB/stragglers?from=-10m" >"$E2E_TMP/strag.json"
	check "the straggling rank's evidence names its pod" python3 - "$E2E_TMP/strag.json" "$NS2" "$POD2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = [e for e in d["stragglers"] if e["rank"] == 1]
assert s and all(e["pod"] == {"namespace": sys.argv[2], "name": sys.argv[3]} for e in s), d["stragglers"]
EOF
	curl -s "$SERVER_URL/api/v1/jobs/slurm-$SLURM_JOB.0" >"$E2E_TMP/slurmjob.json"
	check "a job named by no variable in a Slurm step is slurm-$SLURM_JOB.0 (source cgroup)" python3 - "$E2E_TMP/slurmjob.json" "$SLURM_JOB" <<'EOF'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
assert sorted(set(r["rank"] for r in ranks)) == [0, 1], ranks
assert all(r["source"] == "cgroup" and r["job_id_source"] == "slurm cgroup" for r in ranks), ranks
assert all(not r["identity"] or (r["identity"]["slurm_job"] == int(sys.argv[2]) and r["identity"]["slurm_step"] == "0") for r in ranks), ranks
EOF
	ctl jobs --namespace "$NS2" --format json >"$E2E_TMP/jobs-ns2.json"
	ctl jobs --pod "$POD" --format json >"$E2E_TMP/jobs-pod1.json"
	check "sysomctl jobs --namespace lists the job of that namespace, --pod of another pod none" \
		python3 -c "import json,sys; a = [j['job'] for j in json.load(open('$E2E_TMP/jobs-ns2.json'))['jobs']]; b = json.load(open('$E2E_TMP/jobs-pod1.json'))['jobs']; sys.exit(not (a == ['$JOB'] and b == []))"
else
	diag "simjob not built: the job ranks' identity is not checked"
fi
ctl processes "${RANGE[@]}" --namespace "$NS" >"$E2E_TMP/ctl-procs.txt"
check "sysomctl processes --namespace shows the pod and its container name" grep -q "$NS/$POD/trainer-main" "$E2E_TMP/ctl-procs.txt"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "metrics: the container link directory was read, at most once a second (counter 69)" python3 - "$E2E_TMP/metrics.txt" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"^sysom_agent_container_log_scans_total(?:\{[^}]*\})? (\d+)$", t, re.M)
# Both links exist before the agent starts: its first read names this test's containers; a
# machine running other containers (without links here) reads again at most once a second of
# the agent's ~11 s, never once per process.
assert m and 1 <= int(m.group(1)) <= 15, m and m.group(0)
EOF
finish
