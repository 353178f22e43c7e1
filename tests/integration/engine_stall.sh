#!/usr/bin/env bash
# engine_stall: sluiced with its proxy engine stopped (SIGSTOP) and the engine's socket full of dropped
# packets' records (docs/netd.md, "Engine protocol"). Nothing sluiced sends the engine waits: what the
# socket does not take is queued, in order, and sent when the engine reads again. So sluiced keeps
# answering (`sluicectl sessions`, a session's teardown, a new session's setup), and once the engine runs
# again every queued message takes effect in order: a session removed during the stall is gone from the
# engine before its address serves a new session, a policy changed during the stall is in force. When
# the queue does not move for 2 s, new setups (and those waiting for the engine) and approvals fail with
# an error naming the engine; after 10 s the engine is killed and restarted, and the new one is given the live
# sessions as they are now (not the removed ones; the narrowed policy). Also: the count of drops the
# stalled engine did not take, offered again every second, reaches the audit log once the engine runs,
# with no further drop to carry it (netd/nflog.c's retry). Last, an engine that hangs with nothing queued for
# it: sluiced's metrics poll (every second, one at a time) is its liveness probe, and a poll not answered
# counts like a queue that does not move (2 s: setups fail; 10 s: restarted). And the other way: sluiced
# stopped, the engine's own reports to it (a DNS flood's direct grants) queue without holding its loop,
# which serves on; a request that would wait for an operator is denied at once (nobody would hear of it), a
# DNS answer's direct grant is not sent and its audit records say the flows were not opened, and when
# sluiced runs again it gets the reports that waited. Last, direct flows whose grants died with an engine: a
# restarted engine knows none of its predecessor's grants, so a later narrowing (or one in flight when it
# died) has sluiced end the session's direct flows itself.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq "$LAB_PYTHON"

B=$SLUICE_BUILD_DIR
CLIENT=$B/tests/integration/netd-testclient CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/28 # slots 2-14: thirteen sessions fill it, so a new session reuses the slot of one that ended
export SLUICE_RUN_DIR=$RUN
lab_internet_up >/dev/null
mkdir -p "$LAB_DIR/etc-sluice" "$LAB_DIR/tmp"
P=$LAB_DIR/tmp
echo '{"allow": ["allowed.test"]}' >"$P/a.json"              # A, and the fillers
echo '{"allow": ["other.test"]}' >"$P/b.json"                # B, which gets A's address
echo '{"allow": ["allowed.test", "other.test"]}' >"$P/c.json" # C, narrowed twice while the engine stalls
echo '{"allow": ["other.test"]}' >"$P/c2.json"
echo '{"allow": ["evil.test"]}' >"$P/c3.json"
echo '{"allow": ["allowed.test"], "options": {"ask": true, "ask_timeout": 60}}' >"$P/h.json" # H: other.test is held
# direct: each answer is a report; transparent: its TCP 80 and 443 go to the engine (a flow that is not direct)
echo '{"allow": ["other.test:22", "other.test:80"], "options": {"direct": true, "transparent": true}}' >"$P/d.json"
chmod 0644 "$P"/*.json
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply

LOG=$(lab_log sluiced)
code() { # code NS URL: the proxy's status for URL from session NS
	lab_exec "$1" curl -s -m 5 --noproxy '' -x "http://$(reply "$1" gw4):3128" -o /dev/null -w '%{http_code}' "$2"
}
# flood NS...: 1500 UDP datagrams from each session NS to its gateway's closed ports, within a second: each
# is dropped and logged, and 500 of each session's are handed to the engine (its share of the rate), which
# fills the stopped engine's socket
flood() {
	local ns pids=()
	for ns in "$@"; do
		lab_exec "$ns" "$LAB_PYTHON" -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(1500):
    s.sendto(b"drop-me", (sys.argv[1], 9000 + i % 100))' "$(reply "$ns" gw4)" &
		pids+=($!)
	done
	wait "${pids[@]}"
}
since() { tail -n +"$(($1 + 1))" "$LOG"; } # since N: sluiced's (and its engine's) log after its first N lines
lines() { wc -l <"$LOG"; }
logged() { since "$1" | grep -Eq -- "$2"; } # logged N ERE
gone() { ! "$CTL" sessions | grep -q "^$1 "; }
# attach NAME POLICY: a session NAME set up in the background (its client's output where `reply` reads it)
attach() {
	ip netns add "$1"
	"$CLIENT" attach "/run/netns/$1" "$2" "test $1" </dev/null >"$LAB_DIR/state/$1.reply" 2>&1 &
	HOLD[$1]=$!
	lab_defer "kill -TERM ${HOLD[$1]} 2>/dev/null; wait ${HOLD[$1]} 2>/dev/null"
}
out() { cat "$LAB_DIR/state/$1.reply"; }
answered() { grep -q -e '^proxy_port=' -e '^netd-testclient:' "$LAB_DIR/state/$1.reply"; }
setup_ms() { echo $(($(reply "$1" setup_us) / 1000)); }
sessions_answer() { timeout 1.5 "$CTL" sessions >/dev/null; }
metric() { timeout 1.5 "$CTL" metrics | sed -n "s/^$1 //p"; }

check "sluiced starts" start_sluiced
for s in a f1 f2 f3; do session "$s" "$P/a.json" || lab_bail "session $s did not open"; done
session c "$P/c.json" || lab_bail "session c did not open"
session h "$P/h.json" || lab_bail "session h did not open"
A=$(reply a id) C=$(reply c id) F1=$(reply f1 id) F2=$(reply f2 id) F3=$(reply f3 id)
for i in $(seq 7); do "$CTL" netns create --name "fill$i" --allow allowed.test >/dev/null || lab_bail "fill$i"; done
check_eq "the pool's thirteen slots are taken" 13 "$("$CTL" sessions | grep -c '^[0-9a-f]\{10\} ')"
check_eq "session A reaches allowed.test" 200 "$(code a http://allowed.test/)"
check_eq "session C reaches other.test" 200 "$(code c http://other.test/)"

# ---- a stall shorter than 2 s: everything queued meanwhile takes effect, in order ----
# (2 s from the engine's stop: sluiced's liveness poll, every second, counts from then even with nothing
# queued, so this part is quick: the flood fills the socket and A's end is queued at once)
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
n0=$(lines)
summaries=$(grep -c '"protocol":"drop-summary"' "$AUDIT")
not_taken() { grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)) |
	grep -Eq '"session":null.*"reason":"[0-9]+ dropped packets not audited one by one: [0-9]+ over the rate limit, [0-9]+ lost by the kernel, [1-9][0-9]* not taken by the engine"'; }
# quiet: no new NFLOG report for 1.5 s (every drop of the flood has been counted and reported)
quiet() { local n; n=$(grep -c 'NFLOG: ' "$LOG"); sleep 1.5; [ "$(grep -c 'NFLOG: ' "$LOG")" -eq "$n" ]; }
queued_is() { [ "$(metric sluice_engine_queued_messages)" = "$1" ]; }
queued_some() { [ "$(metric sluice_engine_queued_messages)" -gt 0 ]; }
t0=$(date +%s%N)
kill -STOP "$EPID"
flood f2 f3
n1=$(lines)
kill -TERM "${HOLD[a]}" # A ends: its removal is the first message the socket does not take
wait "${HOLD[a]}"
unset "HOLD[a]"
check "with the engine stopped and its socket full of drops, a session's removal is queued" eventually queued_some
check "... and the session ends at once (sluiced's loop does not wait for the engine)" eventually gone "$A"
check "sluicectl sessions answers at once" sessions_answer
"$CLIENT" policy "$C" "$P/c2.json" >"$P/c2.out" 2>&1 & # narrows C: in force once the engine takes it
cpid=$!
attach b "$P/b.json" # takes A's slot (the only free one) once A's link is gone
check "... and sluiced changes C's policy meanwhile" eventually logged "$n1" "session $C: policy replaced"
check "... and wires a new session B" eventually logged "$n1" 'session [0-9a-f]{10}: wired'
stalled_ms=$((($(date +%s%N) - t0) / 1000000))
check "(the engine resumes before the 2 s bound: ${stalled_ms} ms after it was stopped)" \
	test "$stalled_ms" -lt 1900
check_not "B has no answer while the engine is stopped (its reply waits for the engine's)" answered b
kill -CONT "$EPID"
check "B's setup is answered once the engine runs again" eventually answered b
out b | sed 's/^/# /'
B_ID=$(reply b id)
check_eq "... with A's address (the slot A's end freed)" "$(reply a addr4)" "$(reply b addr4)"
first_of() { since "$n1" | grep -e "session $A removed" -e "session $B_ID added" | head -1; }
check_match "the engine removed A before it added B" "session $A removed" "$(first_of)"
check_eq "B is served by its own policy: other.test" 200 "$(code b http://other.test/)"
check_eq "... and not by A's: allowed.test is refused" 403 "$(code b http://allowed.test/)"
wait "$cpid"
check_eq "C's policy change is answered once the engine applied it" "policy=replaced" "$(cat "$P/c2.out")"
check_eq "C's narrowed policy is in force: allowed.test is refused" 403 "$(code c http://allowed.test/)"
check_eq "... other.test still allowed" 200 "$(code c http://other.test/)"

# ---- a stall past the bounds: setups refused at 2 s, the engine restarted at 10 s ----
code h http://other.test/ >"$P/held.out" 2>&1 & # held for approval
held_id() { "$CTL" asks --json 2>/dev/null | jq -r '.[] | select(.host == "other.test") | .id'; }
is_held() { [ -n "$(held_id)" ]; }
check "a request of session H is held for approval" eventually is_held
HELD=$(held_id)
sleep 1 # a new second for the drops' rate
n2=$(lines)
summaries=$(grep -c '"protocol":"drop-summary"' "$AUDIT")
kill -STOP "$EPID"
flood f2 f3
# the clock starts before F1's end, the first message queued: sluiced's 2 s count from when it queued it,
# and a clock started after the client was reaped read up to a loaded machine's lag short of 2 s
t0=$(date +%s%N)
kill -TERM "${HOLD[f1]}" # ends: its removal is queued
wait "${HOLD[f1]}"
unset "HOLD[f1]"
"$CLIENT" policy "$C" "$P/c3.json" >"$P/c3.out" 2>&1 & # narrows C again
cpid=$!
attach d "$P/a.json" # set up while the queue has not moved for 2 s yet: waits for the engine
check "sluicectl sessions answers while the engine stalls" sessions_answer
check "the engine is stopped again, its socket full" eventually queued_some
check "... and its metrics count the messages waiting for the engine (F1's end, C's policy, D's setup)" \
	eventually queued_is 3
check "a setup that waits for the stalled engine fails when the queue has not moved for 2 s" eventually answered d
el=$((($(date +%s%N) - t0) / 1000000))
out d | sed 's/^/# /'
check_match "... naming the engine and saying to try again" \
	'proxy engine \(pid [0-9]+\) has taken no message from sluiced for 2\.[0-9] s .* try again' "$(out d)"
check "... within the bound (2 s after the first queued message, ${el} ms)" test "$el" -ge 1900 -a "$el" -lt 3500
attach e "$P/a.json"
check "a new setup while it stalls fails at once" eventually answered e
check_match "... with the same error" 'has taken no message from sluiced' "$(out e)"
check "... within a second ($(setup_ms e) ms)" test "$(setup_ms e)" -lt 1000
out=$(timeout 1.5 "$CTL" approve "$HELD" 2>&1)
check_eq "an approval while it stalls is refused at once (exit 1)" 1 "$?"
check_match "... saying why (the verdict would wait behind the stall)" 'has taken no message from sluiced.*try again' "$out"
t1=$(date +%s%N)
check "a session ends while it stalls (sluicectl session end answers at once)" \
	timeout 1.5 "$CTL" session end "$F2"
end_ms=$((($(date +%s%N) - t1) / 1000000))
check "... and is gone" gone "$F2"
check "sluicectl sessions still answers" sessions_answer
check "with the engine stopped, sluiced counts the drops it did not take" eventually logged "$n2" \
	'NFLOG: [0-9]+ dropped packets not audited .* [1-9][0-9]* not taken by the engine'
check "... and reports every drop of the flood while the engine is stopped (no report for 1.5 s)" eventually quiet
check_not "... whose summary the stopped engine could not take" not_taken
# wait_long CMD...: CMD succeeds within 30 s (the 10 s restart bound, a 100,000-host policy compiled twice
# under ASan on a loaded machine; it returns as soon as CMD does)
wait_long() { local i; for i in $(seq 600); do "$@" && return 0; sleep 0.05; done; return 1; }
check "after 10 s without progress the engine is killed" \
	wait_long logged "$n2" 'has taken no message from sluiced for 1[0-9]\.[0-9] s \(.*\): killing it'
check "... and a new one runs" eventually logged "$n2" 'proxy engine [0-9]+ running'
check_eq "... counted in the metrics" 1 "$(metric sluice_engine_stuck_restarts_total)"
check_eq "... with nothing queued any more" 0 "$(metric sluice_engine_queued_messages)"
# nflog.c offers the drops the engine did not take again every second: they reach the audit log although
# no drop followed the flood (fails without that retry: nothing else would report them again)
check "the count of drops the stalled engine did not take reaches the audit log, offered to the new engine" \
	eventually not_taken
n3=$(grep -n 'proxy engine [0-9]* running' "$LOG" | tail -1 | cut -d: -f1)
wait "$cpid"
check_eq "C's policy change is answered (the new engine has it)" "policy=replaced" "$(cat "$P/c3.out")"
for id in "$C" "$B_ID" "$F3" "$(reply h id)"; do
	check "the new engine is given live session $id" eventually logged "$n3" "session $id added"
done
check_not "... and not F1 nor F2, which ended while the old one stalled" logged "$n3" "session ($F1|$F2) added"
check_eq "C's policy as changed during the stall is in force: other.test refused" 403 "$(code c http://other.test/)"
check_eq "... evil.test allowed" 200 "$(code c http://evil.test/)"
check_eq "B is still served by its policy" 200 "$(code b http://other.test/)"
check "a new session opens again" session g "$P/a.json"
check_eq "... and is served" 200 "$(code g http://allowed.test/)"

# ---- an engine that hangs with nothing queued for it: sluiced's liveness poll notices ----
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
n4=$(lines)
t0=$(date +%s%N)
kill -STOP "$EPID"
attach x "$P/a.json" # its SESSION_ADD fits the socket: nothing is queued, the setup waits for the answer
check "with nothing queued, a setup that waits for a hung engine fails once the poll is not answered for 2 s" \
	wait_long answered x
el4=$((($(date +%s%N) - t0) / 1000000))
out x | sed 's/^/# /'
check_match "... naming the engine" 'proxy engine \(pid [0-9]+\) has not answered sluiced for 2\.[0-9] s.*try again' "$(out x)"
check "... 2-3 s after the engine stopped (the poll goes every second; ${el4} ms)" test "$el4" -ge 1900 -a "$el4" -lt 4000
check_eq "... with nothing queued" 0 "$(metric sluice_engine_queued_messages)"
check "after 10 s without an answer the hung engine is killed" \
	wait_long logged "$n4" 'proxy engine [0-9]+ has not answered sluiced for 1[0-9]\.[0-9] s: killing it'
check "... and a new one runs" eventually logged "$n4" 'proxy engine [0-9]+ running'
check_eq "... counted in the metrics" 2 "$(metric sluice_engine_stuck_restarts_total)"
check "a new session opens after it" session y "$P/a.json"
check_eq "... and is served" 200 "$(code y http://allowed.test/)"

# ---- sluiced stops reading: what the engine sends it queues, and the engine's loop goes on ----
kill -TERM "${HOLD[y]}" # (its slot, for the direct-mode session)
wait "${HOLD[y]}"
unset "HOLD[y]"
check "a direct-mode session opens" session dr "$P/d.json"
DR=$(reply dr id)
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
n5=$(lines)
# dns_flood NS N: N queries for other.test to the session's gateway, 2 a millisecond at most, not waiting for
# the answers: each answer is a DIRECT_ADD the engine sends sluiced (the engine relays 256 at once per
# session, and holds each answer up to 250 ms for sluiced's DIRECT_DONE)
dns_flood() {
	lab_exec "$1" "$LAB_PYTHON" - "$(reply "$1" gw4)" "$2" <<-'PY'
		import socket, struct, sys, time
		s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
		q = b"".join(bytes([len(l)]) + l.encode() for l in "other.test".split(".")) + b"\0" + struct.pack(">HH", 1, 1)
		for i in range(int(sys.argv[2])):
		    s.sendto(struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + q, (sys.argv[1], 53))
		    time.sleep(0.0005)
	PY
}
t0=$(date +%s%N)
kill -STOP "$(lab_pid sluiced)"
dns_flood dr 2500
sleep 2.2 # the engine's reports have waited for sluiced for more than 2 s
t1=$(date +%s%N)
check_eq "with sluiced stopped and the engine's reports piling up, the engine still serves (B: other.test)" \
	200 "$(code b http://other.test/)"
check_eq "... and a request that would be held for approval is denied (H: other.test)" 403 "$(code h http://other.test/)"
ms=$((($(date +%s%N) - t1) / 1000000))
check "... at once (both in ${ms} ms; it would wait 60 s for an operator who never hears of it)" test "$ms" -lt 3000
check "the engine says why" logged "$n5" 'engine: sluiced has taken none of its reports for [0-9.]+ s .*held requests are denied'
check "... and that it denied the held request" logged "$n5" 'the parent cannot be told of a held request; denied'
# a DNS answer now: its direct grant is not sent (the flows stay dropped), and the audit trail says so, in the
# grant's record and the query's (before, both said a plain allow)
dns_flood dr 1
not_opened() { # not_opened PROTOCOL: a record of DR's for other.test whose error says its flows were not opened
	grep -F "\"session\":\"$DR\"" "$AUDIT" | grep -F "\"protocol\":\"$1\"" |
		grep -Eq '"host":"other\.test",.*"decision":"allow",.*"error":"direct flows not opened: sluiced takes none of the engine.s reports'
}
check "an answer's direct grant while sluiced does not read: its audit record says the flows were not opened" \
	eventually not_opened direct
check "... and so does the DNS query's record" eventually not_opened dns
kill -CONT "$(lab_pid sluiced)"
stop_ms=$((($(date +%s%N) - t0) / 1000000))
check "sluiced, running again, takes the engine's reports" eventually logged "$n5" 'engine: sluiced reads its reports again'
check "... the direct grants of the answers it had not read among them (other.test:22 is open for DR)" \
	eventually sh -c "nft list set inet sluice direct4 | grep -q '\"sl-$DR\" . $LAB_OTHER4 . tcp . 22'"
check_eq "... and the engine was not restarted (sluiced read its answers before judging it)" \
	"$EPID" "$(pgrep -P "$(lab_pid sluiced)" | head -n 1)"
check_eq "... nor counted as stuck" 2 "$(metric sluice_engine_stuck_restarts_total)"
check "sluicectl sessions answers" sessions_answer

# ---- a session stops while the engine compiles its new policy, and another starts at once on its address ----
# (the removal waits in the engine behind that compile; the new session's add must wait for the removal:
# applied first, it found the address taken, EEXIST, and the setup failed)
"$LAB_PYTHON" -c 'import json; print(json.dumps({"allow": ["h%d.big.test" % i for i in range(100000)]}))' >"$P/big.json"
chmod 0644 "$P/big.json"
G=$(reply g id)
n6=$(lines)
"$CLIENT" policy "$G" "$P/big.json" >"$P/big.out" 2>&1 & # compiled by sluiced, then again by the engine
bpid=$!
t0=$(date +%s%N)
check "a session's policy change of 100,000 hosts goes to the engine" wait_long logged "$n6" "session $G: policy replaced \("
policy_ms=$((($(date +%s%N) - t0) / 1000000))
kill -TERM "${HOLD[g]}" # G ends while the engine compiles: its removal waits behind the compile
wait "${HOLD[g]}"
unset "HOLD[g]"
attach z "$P/b.json" # the only free slot: G's
check "a session started at once on G's address is set up" wait_long answered z
out z | sed 's/^/# /'
check_eq "... with G's address" "$(reply g addr4)" "$(reply z addr4)"
Z=$(reply z id)
order() { since "$n6" | grep -Eo -e "session $G: policy replaced$" -e "session $G removed" -e "session $Z added" | tr '\n' ,; }
check_eq "the engine applied G's policy, G's removal and Z's add in the order sluiced sent them" \
	"session $G: policy replaced,session $G removed,session $Z added," "$(order)"
check_eq "... and Z is served by its own policy" 200 "$(code z http://other.test/)"
wait "$bpid"
check_match "the policy change of G, which ended first, is answered: it never took effect" \
	'session ended before its new policy took effect' "$(cat "$P/big.out")"
# ---- an engine that dies takes its direct grants with it: a later narrowing still ends their flows ----
# (an engine revokes the flows of the grants it made when the policy narrows; a restarted one knows none of
# its predecessor's, so sluiced ends the session's direct flows itself: before, such a flow ran on)
lab_forward on # (direct flows are routed; only sluice's rules stand between a session and the internet)
echo '{"allow": ["other.test"], "options": {"direct": true, "transparent": true}}' >"$P/d2.json" # not port 22
chmod 0644 "$P/d2.json"
# open_flow NAME: a fresh DNS answer opens other.test:22 for DR for its whole TTL, and a flow goes through it
# (live_flow: $LIVE, $P/NAME.*)
open_flow() {
	dns_flood dr 1
	check "other.test:22 is open for DR" \
		eventually sh -c "nft list set inet sluice direct4 | grep -q '\"sl-$DR\" . $LAB_OTHER4 . tcp . 22'"
	live_flow dr "$LAB_OTHER4" 22 "$P/$1"
	LIVE=$!
	check "... and a direct flow from DR to other.test:22 is up" eventually test -e "$P/$1.up"
}
open_flow live1
live_flow dr "$LAB_OTHER4" 22 "$P/live0" # a second flow, through the same grant
LIVE0=$!
check "... and a second one" eventually test -e "$P/live0.up"
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
n7=$(lines)
kill -KILL "$EPID"
check "the engine that granted it is killed and a new one runs" eventually logged "$n7" 'proxy engine [0-9]+ running'
check "... which is given DR again" eventually logged "$n7" "session $DR added"
# a transparent-mode connection of DR's to other.test:80, served by the new engine (redirected, not direct),
# which sluiced must leave alone: with the kernel's loose pick-up of TCP connections off (this lab's
# namespace only), a deleted conntrack entry would end it (with it on, its next packet is redirected again)
sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0
lab_exec dr "$LAB_PYTHON" - "$LAB_OTHER4" "$P/tp" >"$P/tp.out" 2>&1 <<-'PY' &
	import os, socket, sys, time
	s = socket.create_connection((sys.argv[1], 80), timeout=5)
	def get(path):  # one request, its whole response (Content-Length); its status line
	    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: other.test\r\n\r\n")
	    r = b""
	    while b"\r\n\r\n" not in r:
	        b = s.recv(65536)
	        if not b: return "closed"
	        r += b
	    head, body = r.split(b"\r\n\r\n", 1)
	    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
	    while len(body) < n: body += s.recv(65536)
	    return head.split(b"\r\n")[0].decode()
	first = get(b"/bytes/10")
	open(sys.argv[2] + ".up", "w").close()
	while not os.path.exists(sys.argv[2] + ".go"): time.sleep(0.05)
	try: print(first, "|", get(b"/bytes/10"))
	except OSError as e: print(first, "|", type(e).__name__)
	PY
TP=$!
check "a transparent connection of DR's to other.test:80 is up" eventually test -e "$P/tp.up"
kill -HUP "$(lab_pid sluiced)" # every session's policy applied again: the same for DR, nothing narrows
check "a SIGHUP applies every session's policy again" eventually logged "$n7" 'organisation policy reloaded from'
touch "$P/live0.go"
wait "$LIVE0"
check_eq "... which leaves DR's direct flows alone (its policy is the same)" echo "$(cat "$P/live0.out")"
check_eq "DR's policy is narrowed (other.test without port 22)" "policy=replaced" \
	"$("$CLIENT" policy "$DR" "$P/d2.json" 2>&1)"
check "... and sluiced ends DR's direct flows, which no engine could revoke" \
	eventually logged "$n7" "session $DR: .*direct flows ended"
touch "$P/live1.go"
wait "$LIVE"
check_eq "the flow the dead engine's grant opened is over" timeout "$(cat "$P/live1.out")"
touch "$P/tp.go"
wait "$TP"
check_eq "... but not the transparent connection the new engine serves (not a direct flow)" \
	"HTTP/1.1 200 OK | HTTP/1.1 200 OK" "$(cat "$P/tp.out")"
sysctl -qw net.netfilter.nf_conntrack_tcp_loose=1
ended_re="\"session\":\"$DR\".*\"protocol\":\"direct\",.*\"decision\":\"deny\",.*engine that granted the session's"
ended_re+=" direct flows died.*all [1-9][0-9]* of them were ended"
check "... and the audit log says so (a direct deny record of DR's: all its direct flows were ended)" \
	eventually grep -Eq "$ended_re" "$AUDIT"
check "... its packets since are dropped and audited" eventually grep -q \
	"\"session\":\"$DR\".*\"protocol\":\"drop\",\"host\":\"$LAB_OTHER4\",\"port\":22" "$AUDIT"
# the engine dies while it applies a narrowing: the revocations it would send after it die with it
check_eq "DR's policy is widened again (other.test:22)" "policy=replaced" "$("$CLIENT" policy "$DR" "$P/d.json" 2>&1)"
open_flow live2
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
n8=$(lines)
kill -STOP "$EPID"
"$CLIENT" policy "$DR" "$P/d2.json" >"$P/d2.out" 2>&1 & # sent; the engine never answers it
cpid=$!
check "a narrowing of DR goes to the stopped engine" eventually logged "$n8" "session $DR: policy replaced \("
kill -KILL "$EPID"
wait "$cpid"
check_eq "the engine killed meanwhile, the narrowing is answered (the new engine gets it)" "policy=replaced" \
	"$(cat "$P/d2.out")"
check "... and sluiced ends DR's direct flows, whose revocations died with the engine" \
	eventually logged "$n8" "session $DR: .*direct flows ended"
touch "$P/live2.go"
wait "$LIVE"
check_eq "the flow is over" timeout "$(cat "$P/live2.out")"
check_eq "... audited by the new engine" 2 "$(grep -Ec "$ended_re" "$AUDIT")"

diag "a policy change of G went to the engine in ${policy_ms} ms; Z, started on its address, set up in $(setup_ms z) ms"
diag "sluiced stopped for ${stop_ms} ms: the engine served and denied the held request in ${ms} ms"
diag "stalled engine: a waiting setup refused after ${el} ms, a new one in $(setup_ms e) ms; a session ended in ${end_ms} ms; a hung engine with nothing queued: a setup refused after ${el4} ms"

done_testing
