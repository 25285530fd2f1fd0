#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The simulated training job (tests/fixtures/simjob): 8 ranks run to completion, collectives
# really synchronize (a late rank slows every rank down), ranks get a torchrun environment, and
# the fake libnccl exports ncclX / pncclX at one address. No root, no GPU.
. "$(dirname "$0")/lib.sh"

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"

# run_simjob NAME ARGS...: runs simjob with a 60 s limit, output in $E2E_TMP/NAME.log.
run_simjob() {
	local name=$1
	shift
	timeout 60 "$SIMJOB" "$@" >"$E2E_TMP/$name.log" 2>&1
}

# rank_lines NAME ITERATIONS: exactly 8 distinct "rank R iterations ITERATIONS wall S" lines.
rank_lines() {
	[ "$(grep -cE "^rank [0-7] iterations $2 wall [0-9.]+$" "$E2E_TMP/$1.log")" -eq 8 ] &&
		[ "$(sed -n 's/^rank \([0-9]*\) iterations.*/\1/p' "$E2E_TMP/$1.log" | sort -u | wc -l)" -eq 8 ]
}

# min_wall NAME / max_wall NAME: the smallest / largest rank wall time.
min_wall() { awk '/^rank .* wall /{ if (m == "" || $NF < m) m = $NF } END { print m }' "$E2E_TMP/$1.log"; }
max_wall() { awk '/^rank .* wall /{ if ($NF > m) m = $NF } END { print m + 0 }' "$E2E_TMP/$1.log"; }

START=$SECONDS
run_simjob base --ranks 8 --iterations 20 --cpu-us 2000 --kernel-us 3000 --print-env
check "simjob --ranks 8 --iterations 20 exits 0" test $? -eq 0
check "8 rank lines with 20 iterations each" rank_lines base 20
BASE_MIN=$(min_wall base)
diag "no fault: rank wall times ${BASE_MIN}..$(max_wall base) s"

for v in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT \
	TORCHELASTIC_RUN_ID; do
	check "every rank has $v set" \
		test "$(grep -cE "^env rank [0-7] .* $v=[^ ]+" "$E2E_TMP/base.log")" -eq 8
done
check "RANK and LOCAL_RANK match the rank, WORLD_SIZE is 8, run id and address as torchrun" \
	test "$(grep -cE '^env rank ([0-7]) pid [0-9]+ RANK=\1 LOCAL_RANK=\1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=8 GROUP_RANK=0 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=[0-9]+ TORCHELASTIC_RUN_ID=simjob-[0-9]+$' "$E2E_TMP/base.log")" -eq 8

# A live rank's real environment, read from /proc while the job runs.
timeout 60 "$SIMJOB" --ranks 2 --seconds 3 --print-env >"$E2E_TMP/live.log" 2>&1 &
LIVE=$!
E2E_PIDS+=("$LIVE")
wait_until 10 grep -q '^env rank 1 pid' "$E2E_TMP/live.log"
RPID=$(sed -n 's/^env rank 1 pid \([0-9]*\) .*/\1/p' "$E2E_TMP/live.log")
tr '\0' '\n' <"/proc/${RPID:-0}/environ" >"$E2E_TMP/live.environ" 2>/dev/null
check "/proc/<pid>/environ of a running rank has RANK=1 WORLD_SIZE=2 and the NCCL id" \
	bash -c "grep -qx RANK=1 '$E2E_TMP/live.environ' && grep -qx WORLD_SIZE=2 '$E2E_TMP/live.environ' && grep -qE '^SIMJOB_NCCL_ID=[0-9a-f]{256}$' '$E2E_TMP/live.environ'"
wait "$LIVE"
check "simjob --seconds 3 exits 0 with 2 rank lines of equal iteration counts" \
	bash -c "test \$(grep -c '^rank [01] iterations' '$E2E_TMP/live.log') -eq 2 && test \$(sed -n 's/^rank [01] iterations \([0-9]*\) .*/\1/p' '$E2E_TMP/live.log' | sort -u | wc -l) -eq 1"

run_simjob delay --ranks 8 --iterations 20 --cpu-us 2000 --kernel-us 3000 \
	--fault rank=3,kind=delay,amount=20000
check "simjob with a delay fault on rank 3 exits 0" test $? -eq 0
check "8 rank lines with 20 iterations each (delay fault)" rank_lines delay 20
DELAY_MIN=$(min_wall delay)
diag "delay fault (20 ms on rank 3): rank wall times ${DELAY_MIN}..$(max_wall delay) s"
# EVERY rank takes at least rank 3's 20 iterations × 20 ms of sleep (× 0.8 = 0.32 s): all wait
# for the late one; and longer than the healthy run. Not "0.32 s more than the healthy run": with
# 8 ranks on 2 CPUs the others do their queued CPU work while rank 3 sleeps (a CI run: 0.37 s
# healthy, 0.57 s with the delay, 0.2 s more).
check "every rank's wall time covers the late rank's sleeps (≥ 0.32 s) and grew (collectives wait for it)" \
	python3 -c "import sys; sys.exit(not ($DELAY_MIN >= 0.32 and $DELAY_MIN - $BASE_MIN >= 0.1))"

NM=$(nm -D --defined-only "$SIMJOB_DIR/libnccl.so.2")
A1=$(echo "$NM" | awk '$3 == "ncclAllReduce" { print $1 }')
A2=$(echo "$NM" | awk '$3 == "pncclAllReduce" { print $1 }')
check "libnccl.so.2: ncclAllReduce (weak) and pncclAllReduce at the same address" \
	bash -c "[ -n '$A1' ] && [ '$A1' = '$A2' ] && echo '$NM' | grep -q ' W ncclAllReduce$'"
check "libnccl.so.2 has soname libnccl.so.2, libcuda.so.1 soname libcuda.so.1" \
	bash -c "readelf -d '$SIMJOB_DIR/libnccl.so.2' | grep -q 'Library soname: \[libnccl.so.2\]' && readelf -d '$SIMJOB_DIR/libcuda.so.1' | grep -q 'Library soname: \[libcuda.so.1\]'"
check "simjob resolves the fake libraries beside it, not the real ones" \
	bash -c "ldd '$SIMJOB' | grep -q \"libnccl.so.2 => $SIMJOB_DIR/libnccl.so.2\" && ldd '$SIMJOB' | grep -q \"libcuda.so.1 => $SIMJOB_DIR/libcuda.so.1\""
check "no shared-memory segment left behind" bash -c "! ls /dev/shm | grep -q '^simjob-nccl-'"
diag "took $((SECONDS - START)) s"
finish
