#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sysom-agent start-up and control: config file and flags, clear exits when it cannot start
# (bad config, no BPF permission, unusable spool), --check verdicts, SIGHUP reload, SIGTERM.
. "$(dirname "$0")/lib.sh"
require_root

"$AGENT_BIN" --hz 5000 2>"$E2E_TMP/err.txt"
check "an out-of-range flag exits 2" test $? -eq 2
check "... naming the flag and the range" grep -q -- "--hz: '5000' is outside \[10, 999\]" "$E2E_TMP/err.txt"
printf 'hz = 49\nsample-rat = 0.5\n' >"$E2E_TMP/bad.conf"
"$AGENT_BIN" --config "$E2E_TMP/bad.conf" 2>"$E2E_TMP/err.txt"
check "an unknown key in the config file exits 2" test $? -eq 2
check "... naming file, line and key" grep -q "bad.conf:2: unknown key 'sample-rat'" "$E2E_TMP/err.txt"
"$AGENT_BIN" --config "$E2E_TMP/missing.conf" 2>"$E2E_TMP/err.txt"
check "a missing config file exits 2" test $? -eq 2
"$AGENT_BIN" --drain-interval 40s --batch-interval 30s 2>"$E2E_TMP/err.txt"
check "a drain interval longer than the batch interval is refused" grep -q "must not exceed" "$E2E_TMP/err.txt"
"$AGENT_BIN" --version >"$E2E_TMP/out.txt"
check "--version prints the version" grep -q "^sysom-agent " "$E2E_TMP/out.txt"

# No BPF permission: an unprivileged user with no capabilities.
chmod 711 "$E2E_TMP"
mkdir -p "$E2E_TMP/nobody-spool" && chown 65534:65534 "$E2E_TMP/nobody-spool"
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
	"$AGENT_BIN" --server http://127.0.0.1:9 --spool-dir "$E2E_TMP/nobody-spool/s" \
	>"$E2E_TMP/nobody.log" 2>&1
check "without BPF privileges the agent exits 1" test $? -eq 1
check "... saying what it needs" grep -q "CAP_BPF" "$E2E_TMP/nobody.log"
check "... without claiming to be attached" bash -c "! grep -q 'attached to' '$E2E_TMP/nobody.log'"

touch "$E2E_TMP/not-a-dir"
"$AGENT_BIN" --server http://127.0.0.1:9 --spool-dir "$E2E_TMP/not-a-dir/spool" >"$E2E_TMP/spool.log" 2>&1
check "an unusable spool directory exits 1" test $? -eq 1
check "... naming it" grep -q "cannot open the spool $E2E_TMP/not-a-dir/spool" "$E2E_TMP/spool.log"

start_server srv || exit 1
"$AGENT_BIN" --check --server "$SERVER_URL" --spool-dir "$E2E_TMP/check-spool" >"$E2E_TMP/check.txt" 2>&1
check "--check against a live server exits 0" test $? -eq 0
check "... with a verdict for each check" test "$(grep -cE '^(ok|warn|FAIL) ' "$E2E_TMP/check.txt")" -ge 8
check "... ending with 'all checks passed'" grep -q "^all checks passed" "$E2E_TMP/check.txt"
"$AGENT_BIN" --check --server http://127.0.0.1:9 --spool-dir "$E2E_TMP/check-spool" >"$E2E_TMP/check2.txt" 2>&1
check "--check with no server exits 1" test $? -eq 1
check "... with a FAIL line for the server" grep -q "^FAIL  server" "$E2E_TMP/check2.txt"

# Config file values apply, flags override them, SIGHUP reloads the file.
printf 'hz = 49\nsample-rate = 0.2\nlog-level = info\n' >"$E2E_TMP/agent.conf"
start_agent agent "$SERVER_URL" --config "$E2E_TMP/agent.conf" --hz 77 || exit 1
check "exactly one ready line" test "$(grep -c 'attached to' "$E2E_TMP/agent.log")" -eq 1
check "the flag overrides the file (77 Hz), the file sets the rest (20%)" \
	grep -q "at 77 Hz, sampling 20% of ticks" "$E2E_TMP/agent.log"
printf 'hz = 49\nsample-rate = 0.5\nlog-level = info\n' >"$E2E_TMP/agent.conf"
kill -HUP "$AGENT_PID"
check "SIGHUP reloads the file (flags still win)" \
	wait_until 10 grep -q "SIGHUP: configuration reloaded (77 Hz, 50% of ticks" "$E2E_TMP/agent.log"
printf 'hz = 49\nsample-rate = 7\n' >"$E2E_TMP/agent.conf"
kill -HUP "$AGENT_PID"
check "a bad reload is refused and the agent keeps running" \
	wait_until 10 grep -q "SIGHUP: configuration not reloaded" "$E2E_TMP/agent.log"
check "... still alive" kill -0 "$AGENT_PID"
stop_pid "$AGENT_PID"
check "SIGTERM: exit 0" test $? -eq 0
check "... after logging that it stopped" grep -q "info: stopped" "$E2E_TMP/agent.log"
stop_pid "$SERVER_PID"
finish
