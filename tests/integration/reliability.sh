#!/usr/bin/env bash
# reliability: small versions of the load checks of tools/bench-load.sh, so a regression fails the suite:
# 1,000 concurrent CONNECT tunnels across 10 sessions all work and still work after being held; the engine's
# descriptors return to their baseline after the tunnels close and after 1,000 aborted connections (TCP
# resets at four stages); concurrent clients get N decisions and the audit log has exactly N new decision
# records (each that went on closed by its close record), whole, with the hash chain intact; a slowloris + connection flood from one session leaves another
# session served.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/load-lab.sh"
lab_enter "$@"
ulimit -n "$(ulimit -Hn)" || lab_bail "cannot raise the descriptor limit to its hard limit"

TUNNELS=${RELIABILITY_TUNNELS:-1000} SESSIONS=${RELIABILITY_SESSIONS:-10} ABORTS=${RELIABILITY_ABORTS:-1000}
lab_internet_up >/dev/null
load_up "$SESSIONS" '{"header_timeout_ms": 2000}'
# warm up (first connections allocate the engine's lazily made state), then the baseline
out=$(load_gen tunnels "$LOAD_SESSIONS" 20 $LOAD_TARGETS </dev/null)
check_eq "warm-up tunnels work" 20 "$(json_get "$(head -n 1 <<<"$out")" ok)"
base=$(load_wait_fds 0 1)
diag "engine descriptors at rest: $base"

# concurrent tunnels, held open. (A stall of the whole lab (SIGSTOP of the engine, the clients and the echo
# server for 2.6 s) while they are set up was checked here for a while: it still lost 15-19 % of the tunnels
# in some runs, "closed" by the proxy before its 200, on the merged tree and on the branch that added it;
# docs/reliability.md finding 7. Not a check until that is understood.)
coproc TUN { load_gen tunnels "$LOAD_SESSIONS" "$TUNNELS" $LOAD_TARGETS; }
tun_pid=$TUN_PID
exec {tun_out}<&"${TUN[0]}" {tun_in}>&"${TUN[1]}" # the coproc's variables go when it ends
read -r -t 120 first <&"$tun_out"
check_eq "$TUNNELS concurrent tunnels across $SESSIONS sessions are set up (echo checked)" "$TUNNELS" "$(json_get "$first" ok)"
diag "tunnels: $first"
fds=$(load_fds)
check "the engine holds two descriptors per tunnel" test "$fds" -ge $((base + 2 * TUNNELS))
echo go >&"$tun_in"
read -r -t 120 second <&"$tun_out"
check_eq "after being held, every tunnel still echoes" "$TUNNELS" "$(json_get "$second" alive)"
wait "$tun_pid" 2>/dev/null
after=$(load_wait_fds "$base" 20)
check_eq "descriptors back to the baseline after the tunnels closed" "$base" "$after"

# aborted connections
out=$(load_gen abort "$LOAD_SESSIONS" "$ABORTS" allowed.test:7001 </dev/null)
diag "aborts: $out"
check_eq "$ABORTS connections aborted (reset after connect, in a head, in a tunnel, while dialling)" "$ABORTS" \
	"$(json_get "$out" aborted)"
after=$(load_wait_fds "$base" 20)
check_eq "descriptors back to the baseline after $ABORTS aborted connections" "$base" "$after"
out=$(load_gen tunnels "$LOAD_SESSIONS" 10 $LOAD_TARGETS </dev/null)
check_eq "the engine still serves after the aborts" 10 "$(json_get "$(head -n 1 <<<"$out")" ok)"

# N decisions, N lines. (Counted from a log at rest: the tunnels above are closed, each with its close
# record, which is written when the engine closes the connection, after the client has gone; one written
# after the count began would read as a close without its decision.)
load_wait_fds "$base" 20 >/dev/null
sleep 0.5
before=$(load_audit_lines)
out=$(load_gen decisions "$LOAD_SESSIONS" 50 6 allowed.test:7002 </dev/null)
diag "decisions: $out"
n=$(json_get "$out" decisions)
check_eq "every request of 50 concurrent clients got its decision" 300 "$n"
lines=$(load_wait_lines $((before + n)) 10)
# each decision is one record that decides (event "decision", or "complete" for one refused at once), and
# each exchange that went on after its decision has one close record with the same flow id
audit_counts() {
	"$LAB_PYTHON" - "$LOAD_AUDIT" "$before" <<-'PY'
		import json, sys
		recs = [json.loads(l) for l in open(sys.argv[1]).readlines()[int(sys.argv[2]):]]
		decided = [r for r in recs if r.get("event") != "close"]
		opened = {r["flow"] for r in recs if r.get("event") == "decision"}
		closed = {r["flow"] for r in recs if r.get("event") == "close"}
		print(len(decided), len(opened), len(opened & closed), len(closed - opened))
	PY
}
# the close records come as the engine closes the exchanges, after the clients have their answers: wait
# (10 s at most) until every decision that went on has one, rather than a fixed 0.5 s
for _ in $(seq 100); do
	read -r decided opened paired strays <<<"$(audit_counts)"
	[ "$opened" = "$paired" ] && break
	sleep 0.1
done
check_eq "N decisions made, N decision records written" "$n" "$decided"
check_eq "every decision that went on has its close record" "$opened" "$paired"
check_eq "... and no close record without its decision" 0 "$strays"
check "no torn line: every audit line is whole JSON" "$LAB_PYTHON" -c '
import json, sys
for line in open(sys.argv[1]): json.loads(line)' "$LOAD_AUDIT"
check_match "the hash chain is intact" 'chain intact' "$("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$LOAD_AUDIT" 2>&1)"

# one session floods; another is still served
load_gen flood "$LOAD_S2" 4 100 8 </dev/null >"$LAB_DIR/state/flood" &
flood_pid=$!
sleep 1
out=$(load_gen latency "$LOAD_S1" 50 allowed.test:7003 </dev/null)
diag "latency of session 1 during the flood: $out"
check_eq "during a flood from session 2, session 1's 50 requests all succeed" 50 "$(json_get "$out" n)"
wait "$flood_pid"
fl=$(cat "$LAB_DIR/state/flood")
diag "flood: $fl"
check "the flood made connections" test "$(json_get "$fl" flood_conns)" -gt 100
after=$(load_wait_fds "$base" 20)
check_eq "descriptors back to the baseline after the flood" "$base" "$after"

lab_stop proxy
check_eq "the engine exits cleanly after it all" 0 "$LAB_STOP_STATUS"
done_testing
