# SPDX-License-Identifier: Apache-2.0
# Shared helpers of the end-to-end tests: real sysom-server and sysom-agent on loopback, the
# chain_workload fixture as the "training job", TAP output (one line per check).
# Source it; it expects SYSOM_BUILD (a build dir) and SYSOM_ROOT (the repository).
set -u
BUILD=${SYSOM_BUILD:?SYSOM_BUILD must name a build directory}
ROOT=${SYSOM_ROOT:?SYSOM_ROOT must name the repository}
SERVER_BIN=$BUILD/sysom-server
AGENT_BIN=$BUILD/sysom-agent
CTL_BIN=$BUILD/sysomctl
WORKLOAD_BIN=$BUILD/tests/fixtures/chain_workload
E2E_TMP=$(mktemp -d /tmp/sysom-e2e.XXXXXX)
TAP_N=0
TAP_FAILED=0
declare -a E2E_PIDS=()
# Sanitizer builds: leaks of the daemons are reported at exit and fail their exit status.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}"

ok() {
	TAP_N=$((TAP_N + 1))
	echo "ok $TAP_N - $*"
}

not_ok() {
	TAP_N=$((TAP_N + 1))
	TAP_FAILED=$((TAP_FAILED + 1))
	echo "not ok $TAP_N - $*"
}

# check DESCRIPTION COMMAND...: one TAP line from the command's status.
check() {
	local desc=$1
	shift
	if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

# diag TEXT...: a TAP comment.
diag() {
	echo "# $*"
}

skip_all() {
	echo "1..0 # SKIP $*"
	exit 0
}

e2e_cleanup() {
	local pid
	for pid in "${E2E_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null
	done
	wait 2>/dev/null
	if [ "$TAP_FAILED" -gt 0 ] || [ -n "${E2E_KEEP:-}" ]; then
		diag "logs kept in $E2E_TMP"
		for f in "$E2E_TMP"/*.log; do
			[ -f "$f" ] || continue
			diag "---- $(basename "$f") (last 15 lines)"
			tail -15 "$f" | sed 's/^/#   /'
		done
	else
		rm -rf "$E2E_TMP"
	fi
}
trap e2e_cleanup EXIT

finish() {
	echo "1..$TAP_N"
	[ "$TAP_FAILED" -eq 0 ]
}

require_root() {
	[ "$(id -u)" = 0 ] || skip_all "the agent loads BPF programs: run as root"
	for b in "$SERVER_BIN" "$AGENT_BIN" "$CTL_BIN" "$WORKLOAD_BIN"; do
		[ -x "$b" ] || { echo "missing $b: build first" >&2; exit 1; }
	done
}

# wait_until SECONDS COMMAND...: polls (every 0.1 s) until the command succeeds.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.1
	done
}

# start_server NAME [ARGS...]: starts a server on 127.0.0.1 (an ephemeral port unless ARGS
# give --listen) with data dir $E2E_TMP/NAME.data; sets SERVER_PID, SERVER_PORT, SERVER_URL.
start_server() {
	local name=$1
	shift
	local listen=127.0.0.1:0
	local a
	for a in "$@"; do [[ $a == --listen* ]] && listen=""; done
	rm -f "$E2E_TMP/$name.port"
	mkdir -p "$E2E_TMP/$name.data"
	"$SERVER_BIN" ${listen:+--listen "$listen"} --data-dir "$E2E_TMP/$name.data" \
		--port-file "$E2E_TMP/$name.port" "$@" >>"$E2E_TMP/$name.log" 2>&1 &
	SERVER_PID=$!
	E2E_PIDS+=("$SERVER_PID")
	if ! wait_until 30 test -s "$E2E_TMP/$name.port"; then
		echo "server $name did not start; log:" >&2
		cat "$E2E_TMP/$name.log" >&2
		return 1
	fi
	SERVER_PORT=$(cat "$E2E_TMP/$name.port")
	SERVER_URL=http://127.0.0.1:$SERVER_PORT
}

# log_count_above FILE PATTERN N: whether more than N lines of FILE match PATTERN (for
# wait_until, which would expand a $(grep -c ...) argument only once).
log_count_above() {
	[ "$(grep -c -- "$2" "$1" 2>/dev/null)" -gt "$3" ]
}

# start_agent NAME SERVER_URL [ARGS...]: starts an agent with fast intervals and a spool in
# $E2E_TMP/NAME.spool; waits for its "attached" line (a new one when NAME ran before: the log
# is appended to); sets AGENT_PID.
start_agent() {
	local name=$1 url=$2 attached
	shift 2
	attached=$(grep -c "attached to" "$E2E_TMP/$name.log" 2>/dev/null)
	"$AGENT_BIN" --server "$url" --spool-dir "$E2E_TMP/$name.spool" --socket "$E2E_TMP/$name.sock" \
		--drain-interval 0.5s --batch-interval 2s --backoff-max 1s --shutdown-timeout 15s \
		"$@" >>"$E2E_TMP/$name.log" 2>&1 &
	AGENT_PID=$!
	E2E_PIDS+=("$AGENT_PID")
	if ! wait_until 30 log_count_above "$E2E_TMP/$name.log" "attached to" "${attached:-0}"; then
		echo "agent $name did not attach; log:" >&2
		cat "$E2E_TMP/$name.log" >&2
		return 1
	fi
}

# stop_pid PID: SIGTERM and wait; returns the exit status.
stop_pid() {
	kill -TERM "$1" 2>/dev/null
	wait "$1"
}

# agent_logged_samples LOG: total of "batch N: X samples" lines.
agent_logged_samples() {
	sed -n 's/.* batch [0-9]*: \([0-9]*\) samples.*/\1/p' "$1" | awk '{s += $1} END {print s + 0}'
}

# run_workload SECONDS ARGS...: runs the fixture, prints "PID CPU_SECONDS" when it ends.
run_workload() {
	python3 - "$WORKLOAD_BIN" "$@" <<'EOF'
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:] + ["--quiet"])
_, status, usage = os.wait4(p.pid, 0)
print(p.pid, usage.ru_utime + usage.ru_stime)
EOF
}

# Options placed before sysomctl's command (e.g. --token-file F).
CTL_OPTS=()
ctl() {
	"$CTL_BIN" --server "$SERVER_URL" "${CTL_OPTS[@]}" "$@"
}

# strip_analysis: an analysis answer (JSON on stdin) without what differs between two servers
# asked the same thing (each straggler's layer diagnosis, the query's own from/to), indented
# with sorted keys, to compare two servers' answers.
strip_analysis() {
	python3 -c 'import json, sys
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in ("diagnosis", "from", "to")}
    return [strip(v) for v in o] if isinstance(o, list) else o
print(json.dumps(strip(json.load(sys.stdin)), indent=1, sort_keys=True))'
}

# stored_total [FILTER ARGS...]: the server's sample total over the last day (JSON "total",
# which counts every sample even when the stack list is capped).
stored_total() {
	ctl flamegraph --from -1d --to now --format json "$@" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['total'])"
}

# metric_at_least FILE SERIES MIN: the Prometheus text in FILE has SERIES (name and labels,
# exactly as exposed) with a value of at least MIN (a number, not a first digit: 12 >= 5).
metric_at_least() {
	awk -v series="$2" -v min="$3" '
		index($0, series " ") == 1 { value = substr($0, length(series) + 2) + 0; found = 1 }
		END { exit !(found && value >= min) }' "$1"
}

# am_start NAME: starts a real Alertmanager (prometheus-alertmanager, else alertmanager) on a
# free 127.0.0.1 port with a route to a null receiver, storage in $E2E_TMP/NAME.am and
# clustering off; waits for /-/ready. Sets AM_PID, AM_PORT, AM_URL; returns 1 when there is no
# binary (make deps installs it) or it does not start.
am_start() {
	local name=$1 bin dir=$E2E_TMP/$1.am attempt deadline
	bin=$(command -v prometheus-alertmanager || command -v alertmanager) || {
		echo "no prometheus-alertmanager or alertmanager binary: run make deps" >&2
		return 1
	}
	mkdir -p "$dir/data"
	printf '%s\n' 'route:' '  receiver: "null"' '  group_wait: 1s' 'receivers:' \
		'  - name: "null"' >"$dir/alertmanager.yml"
	# The port is free when chosen; another process may take it first: then try another.
	for attempt in 1 2 3; do
		AM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
		AM_URL=http://127.0.0.1:$AM_PORT
		"$bin" --config.file="$dir/alertmanager.yml" --storage.path="$dir/data" \
			--web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address= \
			>>"$E2E_TMP/$name.log" 2>&1 &
		AM_PID=$!
		E2E_PIDS+=("$AM_PID")
		deadline=$((SECONDS + 20))
		while kill -0 "$AM_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
			curl -sf -o /dev/null "$AM_URL/-/ready" && return 0
			sleep 0.1
		done
		kill -KILL "$AM_PID" 2>/dev/null
		wait "$AM_PID" 2>/dev/null
	done
	echo "Alertmanager $name did not start; log:" >&2
	cat "$E2E_TMP/$name.log" >&2
	return 1
}

# am_stop: stops the Alertmanager am_start started (SIGTERM, waits); returns its exit status.
am_stop() {
	[ -n "${AM_PID:-}" ] || return 0
	stop_pid "$AM_PID"
	local rc=$?
	AM_PID=""
	return $rc
}
