#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two sysom-server replicas share one ClickHouse behind HAProxy (round robin per request, the
# reference deployment in docs/operations.md); one agent and a simulated 4-rank job with rank 2
# late before every all-reduce post through the balancer, so each replica stores part of the
# job's batches. Checked: the replicas list each other and agree on the job's owner; every
# query answers the same on both; the owner alone analyses the job (one incident, the alert
# fired by the owner only, the other forwarding its share of the batches to it). Then the
# owner is killed (SIGKILL) mid-ingest: the survivor takes the job over within a minute and
# alerts on it, and once the agent has stopped, the survivor holds every sample the agent
# shipped (nothing acknowledged was lost, nothing was stored twice).
. "$(dirname "$0")/lib.sh"
require_root
[ -x /usr/sbin/clickhouse-server ] || skip_all "clickhouse-server is not installed (make deps)"
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$HAPROXY" ] || skip_all "haproxy is not installed (make deps)"
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
[ -x "$SIMJOB_DIR/simjob" ] && [ -e "$PLUGIN" ] || skip_all "simjob not built (needs nccl.h and cuda.h)"

CHDIR=$E2E_TMP/clickhouse
ch_stop() { "$ROOT/tests/tools/clickhouse-private.sh" stop "$CHDIR"; }
trap 'ch_stop; e2e_cleanup' EXIT
CH=$("$ROOT/tests/tools/clickhouse-private.sh" start "$CHDIR") || { echo "clickhouse did not start" >&2; exit 1; }
diag "clickhouse at $CH"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
TOKEN=$E2E_TMP/shared.token
head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$TOKEN"
chmod 600 "$TOKEN"
CTL_OPTS=(--token-file "$TOKEN")
AUTH="Authorization: Bearer $(cat "$TOKEN")"
get() { curl -sf -H "$AUTH" "$1"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# ---- two replicas on one database ------------------------------------------------------------
declare -A URL PID
for r in a b; do
	port=$(free_port)
	start_server "r$r" --listen "127.0.0.1:$port" --clickhouse-url "${CH}?database=e2e_replicas" \
		--replica-url "http://127.0.0.1:$port" --replica-heartbeat 1s --analysis-interval 1s \
		--symbols-dir "$E2E_TMP/symbols" --token-file "$TOKEN" || exit 1
	URL[$r]=$SERVER_URL
	PID[$r]=$SERVER_PID
done
replicas_of() { get "${URL[$1]}/api/v1/cluster" | json "len(d['replicas'])"; }
both_see_two() { [ "$(replicas_of a)" = 2 ] && [ "$(replicas_of b)" = 2 ]; }
check "each replica lists both (heartbeats in ClickHouse)" wait_until 20 both_see_two

LB_PORT=$(free_port)
cat >"$E2E_TMP/haproxy.cfg" <<EOF
global
	maxconn 512
defaults
	mode http
	timeout connect 1s
	timeout client 60s
	timeout server 60s
	retries 2
	option redispatch
	retry-on conn-failure
	option http-server-close
frontend sysom
	bind 127.0.0.1:$LB_PORT
	use_backend symbols if { path_beg /api/v1/symbols/ }
	default_backend replicas
# The chunks of one symbol file upload to one replica (its partial file is that replica's).
backend symbols
	balance uri
	hash-type consistent
	option httpchk GET /healthz
	server a ${URL[a]#http://} check inter 500ms fall 2 rise 2
	server b ${URL[b]#http://} check inter 500ms fall 2 rise 2
backend replicas
	balance roundrobin
	option httpchk GET /healthz
	server a ${URL[a]#http://} check inter 500ms fall 2 rise 2
	server b ${URL[b]#http://} check inter 500ms fall 2 rise 2
EOF
"$HAPROXY" -f "$E2E_TMP/haproxy.cfg" -db >>"$E2E_TMP/haproxy.log" 2>&1 &
E2E_PIDS+=("$!")
LB=http://127.0.0.1:$LB_PORT
check "haproxy answers in front of the replicas" wait_until 10 curl -sf -o /dev/null "$LB/healthz"

# ---- a job through the balancer --------------------------------------------------------------
JOB=e2e-replicas-$$
curl -sf -X PUT -H "$AUTH" --data '{"lookback_s": 30, "resolve_after_s": 60}' \
	"$LB/api/v1/jobs/$JOB/settings" >/dev/null
start_agent agent "$LB" --token-file "$TOKEN" --sample-rate 1 \
	--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" || exit 1
SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN SYSOM_NCCL_WINDOW_MS=250 \
	timeout 300 "$SIMJOB_DIR/simjob" --ranks 4 --job-id "$JOB" --seconds 90 --cpu-us 1000 \
	--kernel-us 1000 --fault rank=2,kind=delay,amount=4000 >"$E2E_TMP/job.log" 2>&1 &
JOB_PID=$!
JOB_STARTED=$SECONDS
E2E_PIDS+=("$JOB_PID")

owner_of() { get "${URL[$1]}/api/v1/cluster?job=$JOB" | json "d['job']['owner_url']"; }
check "both replicas name the same owner of the job" \
	bash -c "[ -n \"\$(curl -sf -H '$AUTH' '${URL[a]}/api/v1/cluster?job=$JOB')\" ] && \
	[ \"\$(curl -sf -H '$AUTH' '${URL[a]}/api/v1/cluster?job=$JOB' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"job\"][\"owner\"])')\" = \
	  \"\$(curl -sf -H '$AUTH' '${URL[b]}/api/v1/cluster?job=$JOB' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"job\"][\"owner\"])')\" ]"
OWNER_URL=$(owner_of a)
if [ "$OWNER_URL" = "${URL[a]}" ]; then OWNER=a OTHER=b; else OWNER=b OTHER=a; fi
diag "the job's owner is replica $OWNER ($OWNER_URL)"

stragglers() { # stragglers REPLICA: open straggler incidents of rank 2
	get "${URL[$1]}/api/v1/diagnoses?job=$JOB&from=-1h&to=now" |
		json "sum(1 for x in d['diagnoses'] if x['kind'] == 'straggler' and x.get('rank') == 2 and x['status'] == 'open')"
}
has_straggler() { [ "$(stragglers "$OWNER")" -ge 1 ] 2>/dev/null; }
check "the owner opened a straggler incident for rank 2" wait_until 60 has_straggler
metric() { # metric REPLICA NAME: its value in /metrics (0 when absent)
	get "${URL[$1]}/metrics" | awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'
}
check "exactly one straggler incident, the same from either replica" \
	bash -c "[ \"\$(curl -sf -H '$AUTH' '${URL[a]}/api/v1/diagnoses?job=$JOB&from=-1h&to=now' | python3 -c 'import json,sys; print(sum(1 for x in json.load(sys.stdin)[\"diagnoses\"] if x[\"kind\"] == \"straggler\" and x.get(\"rank\") == 2))')\" = 1 ] && \
	[ \"\$(curl -sf -H '$AUTH' '${URL[b]}/api/v1/diagnoses?job=$JOB&from=-1h&to=now' | python3 -c 'import json,sys; print(sum(1 for x in json.load(sys.stdin)[\"diagnoses\"] if x[\"kind\"] == \"straggler\" and x.get(\"rank\") == 2))')\" = 1 ]"
OWNER_FIRED=$(metric "$OWNER" sysom_alerts_fired_total)
OTHER_FIRED=$(metric "$OTHER" sysom_alerts_fired_total)
diag "alerts fired: owner $OWNER_FIRED, other $OTHER_FIRED"
check "the owner fired the alert; the other replica fired none" \
	test "$OWNER_FIRED" -ge 1 -a "$OTHER_FIRED" -eq 0
check "the other replica evaluated nothing of the job" test "$(metric "$OTHER" sysom_analysis_jobs_owned)" -eq 0
forwarded() { [ "$(metric "$OTHER" sysom_cluster_forwarded_total)" -ge 3 ]; }
check "the other replica forwards its share of the job's batches to the owner" wait_until 30 forwarded
diag "the other replica forwarded $(metric "$OTHER" sysom_cluster_forwarded_total) batches; the owner was fed $(metric "$OWNER" sysom_cluster_fed_total)"
check "no forward failed" test "$(metric "$OTHER" sysom_cluster_forward_errors_total)" -eq 0

# Every query answers the same on both replicas, over the job's first 15 s or more.
while [ $((SECONDS - JOB_STARTED)) -lt 25 ]; do sleep 1; done
# Up to 10 s ago: the batches of those windows have all arrived (2-s batches), so both
# replicas answer over the same rows although the job is still running.
T_TO=$(($(date +%s) - 8))
# Symbol files arrive while the job runs (one replica installs each in the shared repository;
# the other looks again for a file it lacked within SYMBOLIZER_MISSING_RECHECK_MS, 10 s): the
# answers agree once no upload is under way, so a difference is asked again twice.
for attempt in 1 2 3; do
	for r in a b; do
		SERVER_URL=${URL[$r]}
		ctl flamegraph --job "$JOB" --from -1h --to "$T_TO" --format folded | sort >"$E2E_TMP/$r.folded"
		get "${URL[$r]}/api/v1/jobs/$JOB/stragglers?from=-1h&to=$T_TO" | strip_analysis >"$E2E_TMP/$r.stragglers.json"
		# last_seen moves on with every batch.
		get "${URL[$r]}/api/v1/jobs/$JOB" | sed 's/"last_seen":"[^"]*"//g' >"$E2E_TMP/$r.job.json"
	done
	cmp -s "$E2E_TMP/a.folded" "$E2E_TMP/b.folded" && break
	diag "attempt $attempt: the flame graphs differ in $(diff "$E2E_TMP/a.folded" "$E2E_TMP/b.folded" | grep -c '^[<>]') lines"
	sleep 11
done
check "the job's flame graph is the same on both replicas ($(wc -l <"$E2E_TMP/a.folded") stacks)" \
	bash -c "[ -s '$E2E_TMP/a.folded' ] && cmp -s '$E2E_TMP/a.folded' '$E2E_TMP/b.folded'"
check "its straggler analysis is the same on both (rank 2 late)" \
	bash -c "grep -q '\"rank\": 2' '$E2E_TMP/a.stragglers.json' && cmp -s '$E2E_TMP/a.stragglers.json' '$E2E_TMP/b.stragglers.json'"
check "its ranks and communicators are the same on both" cmp -s "$E2E_TMP/a.job.json" "$E2E_TMP/b.job.json"

# ---- the owner dies mid-ingest ---------------------------------------------------------------
check "the job is still running when the owner is killed" kill -0 "$JOB_PID"
kill -KILL "${PID[$OWNER]}"
wait "${PID[$OWNER]}" 2>/dev/null
KILLED_AT=$SECONDS
survivor_owns() { get "${URL[$OTHER]}/api/v1/cluster?job=$JOB" | json "d['job']['self']" | grep -qx True; }
check "the survivor owns the job within a minute" wait_until 60 survivor_owns
diag "ownership moved $((SECONDS - KILLED_AT)) s after the kill"
check "the survivor lists one replica" test "$(replicas_of "$OTHER")" = 1
survivor_alerts() { [ "$(metric "$OTHER" sysom_alerts_fired_total)" -ge 1 ]; }
check "the survivor evaluates the job and fires its alert" wait_until 60 survivor_alerts
check "it counts the job as taken over" test "$(metric "$OTHER" sysom_analysis_jobs_taken_over_total)" -ge 1
check "the incident is still the one incident" test "$(stragglers "$OTHER")" -eq 1

wait "$JOB_PID"
check "the job exits 0" test $? -eq 0
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "the agent exits 0 after SIGTERM (its spool flushed through the survivor)" test $? -eq 0
LOGGED=$(agent_logged_samples "$E2E_TMP/agent.log")
SERVER_URL=${URL[$OTHER]}
STORED=$(stored_total)
diag "the agent shipped $LOGGED samples; the survivor holds $STORED"
check "nothing lost, nothing twice: the survivor holds exactly the samples the agent shipped" \
	test "$LOGGED" -gt 0 -a "$STORED" -eq "$LOGGED"
check "the agent's spool is empty" bash -c "! ls '$E2E_TMP/agent.spool'/*.batch >/dev/null 2>&1"
finish
