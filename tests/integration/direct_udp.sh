#!/usr/bin/env bash
# Direct mode over UDP in the lab (docs/policy.md "direct", docs/netd.md, docs/proxy.md "Direct mode"): a rule
# that names a UDP port of an allowed name ("allowed.test:7/udp") lets the session send UDP to the addresses
# the DNS proxy relayed for that name, on that port, for the answer's TTL, through the same per-session
# nftables sets as TCP (keyed by protocol). Everything else over UDP stays dropped and audited: before the
# name was resolved, a denied name, another UDP port of the allowed name, a name allowed for TCP only, a
# name the organisation's ceiling caps to TCP, new flows after the TTL; a policy change revokes the grant and
# ends the live UDP flow. sluiced runs with a test hook that makes it put grants in place 150 ms late: the
# engine holds a DNS answer until its grants are in, so a datagram sent the moment the answer arrives passes.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need nft jq "$LAB_PYTHON"

B=$SLUICE_BUILD_DIR
SLUICED=$B/netd/sluiced
CLIENT=$B/tests/integration/netd-testclient
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
GW4=100.64.0.1
TTL=6 # the lab DNS answers with this TTL (the engine's floor is 5 s)
export SLUICE_RUN_DIR=$RUN LAB_DNS_TTL=$TTL

lab_internet_up # UDP echo on 7 on every internet address (tests/lib/fakenet.py)
lab_forward on  # only sluice's rules stand between a session and the internet
# a second UDP echo, on 9: a port of allowed.test that answers, but that no rule names
lab_bg udp9 -n inet "$LAB_PYTHON" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9))
while True:
    d, a = s.recvfrom(2048); s.sendto(d, a)'

# The organisation's ceiling lets allowed.test use UDP and caps other.test to TCP: a user policy that names
# other.test:7/udp gets nothing over UDP.
mkdir -p "$LAB_DIR/etc-sluice"
cat >"$LAB_DIR/etc-sluice/policy.json" <<-'EOF'
	{ "ceiling": ["allowed.test:*", "other.test:*", "evil.test:*",
	              {"host": "allowed.test", "ports": "*", "protocol": "udp"}] }
EOF
chmod 0644 "$LAB_DIR/etc-sluice/policy.json"
UPOL=$LAB_DIR/tmp/udp.json TPOL=$LAB_DIR/tmp/tcp.json NPOL=$LAB_DIR/tmp/narrow.json
echo '{ "options": {"direct": true}, "allow": ["allowed.test", "allowed.test:7/udp", "other.test:7/udp"] }' >"$UPOL"
echo '{ "options": {"direct": true}, "allow": ["allowed.test", "allowed.test:7"] }' >"$TPOL"
echo '{ "options": {"direct": true}, "allow": ["allowed.test"] }' >"$NPOL"
chmod 0644 "$UPOL" "$TPOL" "$NPOL"

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
audit_has() { grep -q -- "$1" "$AUDIT"; }

# udp NS ADDR PORT: one datagram from a new socket (a new flow); prints "echo", "timeout" or the error
udp() {
	lab_exec "$1" "$LAB_PYTHON" - "$2" "$3" <<-'PY'
		import socket, sys
		s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
		s.settimeout(1)
		try:
		    s.sendto(b"sluice-udp", (sys.argv[1], int(sys.argv[2])))
		    print("echo" if s.recv(64) == b"sluice-udp" else "other")
		except socket.timeout:
		    print("timeout")
		except OSError as e:
		    print(type(e).__name__)
	PY
}
# tcp NS ADDR PORT: one connection to the echo server; prints "echo" or "timeout"
tcp() {
	lab_exec "$1" "$LAB_PYTHON" - "$2" "$3" <<-'PY'
		import socket, sys
		try:
		    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
		    s.sendall(b"sluice-tcp"); print("echo" if s.recv(64) == b"sluice-tcp" else "other")
		except OSError:
		    print("timeout")
	PY
}
# live NAME NS ADDR PORT: one UDP socket that exchanges a datagram, then another after NAME.go; prints the
# outcome of both to NAME.out
live() {
	rm -f "$LAB_DIR/tmp/$1.up" "$LAB_DIR/tmp/$1.go"
	lab_exec "$2" "$LAB_PYTHON" - "$3" "$4" "$LAB_DIR/tmp/$1" >"$LAB_DIR/tmp/$1.out" 2>&1 <<-'PY' &
		import os, socket, sys, time
		a, f = (sys.argv[1], int(sys.argv[2])), sys.argv[3]
		s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
		def one():
		    try:
		        s.sendto(b"sluice-live", a); return "echo" if s.recv(64) == b"sluice-live" else "other"
		    except OSError: return "timeout"
		first = one()
		open(f + ".up", "w").close()
		while not os.path.exists(f + ".go"): time.sleep(0.05)
		print(first, one())
	PY
}
# first NS: resolves allowed.test and at once sends a datagram to the answer's first address on 7; prints
# "echo" or "timeout"
first() {
	lab_exec "$1" "$LAB_PYTHON" - "$GW4" <<-'PY'
		import random, socket, struct, sys
		q = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
		q += b"\x07allowed\x04test\x00" + struct.pack(">HH", 1, 1)
		d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.settimeout(3)
		d.sendto(q, (sys.argv[1], 53)); a = d.recv(4096)
		s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
		s.sendto(b"first", (socket.inet_ntoa(a[-4:]), 7))
		try: print("echo" if s.recv(16) == b"first" else "other")
		except socket.timeout: print("timeout")
	PY
}
has_elem() { nft list set inet sluice direct4 2>&1 | grep -q "\"sl-$1\" . $2 . $3 . $4"; }

udp_echoes() { [ "$(udp "$@")" = echo ]; }
check "the lab's UDP echo answers on allowed.test:9 from the host (the server is up)" \
	eventually udp_echoes host "$LAB_ALLOWED4" 9
check "sluiced starts (putting direct grants in place 150 ms late)" start_sluiced SLUICED_TEST_DIRECT_DELAY_MS=150
check "a direct-mode session whose policy allows allowed.test:7/udp opens" session u1 "$UPOL" "$NPOL"
check "a direct-mode session whose policy allows allowed.test:7 (TCP only) opens" session t1 "$TPOL"
U1=$(reply u1 id) T1=$(reply t1 id)

check_eq "before any DNS answer, UDP to allowed.test:7 is dropped" timeout "$(udp u1 "$LAB_ALLOWED4" 7)"
check_eq "the session resolves allowed.test through the gateway" "$LAB_ALLOWED4" "$(gw_addrs u1 allowed.test)"
check "... which puts allowed.test's address, udp, port 7 into the session's set" \
	eventually has_elem "$U1" "$LAB_ALLOWED4" udp 7
nft list set inet sluice direct4 | grep "sl-$U1" | sed 's/^/# /'
check_match "... with the answer's TTL as its timeout" "\"sl-$U1\" . $LAB_ALLOWED4 . udp . 7 timeout ${TTL}s" \
	"$(nft list set inet sluice direct4)"
check_not "... and no TCP element for port 7" has_elem "$U1" "$LAB_ALLOWED4" tcp 7
check_eq "a UDP datagram to allowed.test:7 gets its echo, without the proxy" echo "$(udp u1 "$LAB_ALLOWED4" 7)"
nft delete element inet sluice direct4 "{ \"sl-$U1\" . $LAB_ALLOWED4 . udp . 7 }"
check_not "(the element is removed by hand)" has_elem "$U1" "$LAB_ALLOWED4" udp 7
check_eq "a datagram sent the moment a new answer arrives gets its echo (the answer waited for the grant)" echo \
	"$(first u1)"
check "the grant is audited as protocol direct, method udp" eventually audit_has \
	"\"session\":\"$U1\".*\"protocol\":\"direct\",\"host\":\"allowed.test\",\"port\":7,\"method\":\"udp\",\"decision\":\"allow\""
check_eq "over IPv6: allowed.test's AAAA record resolves" "$LAB_ALLOWED6" "$(gw_addrs u1 allowed.test AAAA)"
check "... and opens its IPv6 address on UDP 7" eventually sh -c \
	"nft list set inet sluice direct6 | grep -q '\"sl-$U1\" . $LAB_ALLOWED6 . udp . 7'"
check_eq "a UDP datagram to [allowed.test]:7 over IPv6 gets its echo" echo "$(udp u1 "$LAB_ALLOWED6" 7)"
check_eq "... and to evil.test's IPv6 address on 7 is dropped" timeout "$(udp u1 "$LAB_EVIL6" 7)"
check_eq "TCP to allowed.test:7 (the rule names UDP) is dropped" timeout "$(tcp u1 "$LAB_ALLOWED4" 7)"
check_eq "UDP to allowed.test on a port no rule names (9, which answers) is dropped" timeout \
	"$(udp u1 "$LAB_ALLOWED4" 9)"
check "... and the drop is audited as udp" eventually audit_has \
	"\"session\":\"$U1\".*\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":9,\"method\":\"udp\""
check_eq "evil.test (not allowed) is refused by the DNS proxy" "rcode=5" "$(gw_addrs u1 evil.test)"
check_eq "... and UDP to its address on 7 is dropped" timeout "$(udp u1 "$LAB_EVIL4" 7)"
check "... and audited as a udp drop" eventually audit_has \
	"\"session\":\"$U1\".*\"protocol\":\"drop\",\"host\":\"$LAB_EVIL4\",\"port\":7,\"method\":\"udp\""

# the organisation's ceiling allows other.test for TCP only
check_eq "other.test (the user allows it on UDP 7, the ceiling on TCP only) resolves" "$LAB_OTHER4" \
	"$(gw_addrs u1 other.test)"
check_eq "... but UDP to it on 7 is dropped" timeout "$(udp u1 "$LAB_OTHER4" 7)"
check_not "... and it never got an element" sh -c "nft list set inet sluice direct4 | grep -q '$LAB_OTHER4'"

# a session whose policy names allowed.test:7 for TCP: its TCP opens, its UDP does not
check_eq "the TCP-only session resolves allowed.test" "$LAB_ALLOWED4" "$(gw_addrs t1 allowed.test)"
check "... which opens TCP 7 for it" eventually has_elem "$T1" "$LAB_ALLOWED4" tcp 7
check_eq "... so TCP to allowed.test:7 echoes" echo "$(tcp t1 "$LAB_ALLOWED4" 7)"
check_eq "... but UDP to allowed.test:7 is dropped" timeout "$(udp t1 "$LAB_ALLOWED4" 7)"
check_not "... and it has no UDP element" has_elem "$T1" "$LAB_ALLOWED4" udp 7

# TTL expiry: a UDP flow that began in time lives on (conntrack, as for TCP); after the TTL the element is
# gone and a new flow is dropped
gw_addrs u1 allowed.test >/dev/null
check "allowed.test's UDP element is back after a new answer" eventually has_elem "$U1" "$LAB_ALLOWED4" udp 7
live live1 u1 "$LAB_ALLOWED4" 7
LIVE=$!
check "a UDP flow to allowed.test:7 is opened while the element lives" eventually test -e "$LAB_DIR/tmp/live1.up"
sleep $((TTL + 1))
check_not "after the TTL the element is gone" has_elem "$U1" "$LAB_ALLOWED4" udp 7
check_eq "... and a new UDP flow to allowed.test:7 is dropped" timeout "$(udp u1 "$LAB_ALLOWED4" 7)"
touch "$LAB_DIR/tmp/live1.go"
wait "$LIVE"
check_eq "... while the flow opened in time still gets its echoes" "echo echo" "$(cat "$LAB_DIR/tmp/live1.out")"

# a narrower policy (allowed.test without 7/udp) revokes the grant and ends the live UDP flow
check_eq "allowed.test resolves again" "$LAB_ALLOWED4" "$(gw_addrs u1 allowed.test)"
check "its UDP element is back" eventually has_elem "$U1" "$LAB_ALLOWED4" udp 7
live live2 u1 "$LAB_ALLOWED4" 7
LIVE=$!
check "a live UDP flow to allowed.test:7 is open" eventually test -e "$LAB_DIR/tmp/live2.up"
kill -USR2 "${HOLD[u1]}"
check "the launcher's connection replaces the policy" eventually grep -q '^policy=replaced' "$LAB_DIR/state/u1.reply"
check_not "allowed.test udp 7 is no longer in the set" has_elem "$U1" "$LAB_ALLOWED4" udp 7
check "the revocation is audited (direct, udp, deny)" eventually audit_has \
	"\"session\":\"$U1\".*\"protocol\":\"direct\",\"host\":\"allowed.test\",\"port\":7,\"method\":\"udp\",\"decision\":\"deny\""
touch "$LAB_DIR/tmp/live2.go"
wait "$LIVE"
check_eq "the live UDP flow ended with it" "echo timeout" "$(cat "$LAB_DIR/tmp/live2.out")"
check_eq "a new answer for allowed.test opens nothing now" "$LAB_ALLOWED4" "$(gw_addrs u1 allowed.test)"
check_eq "... and UDP to allowed.test:7 is dropped" timeout "$(udp u1 "$LAB_ALLOWED4" 7)"

# A flood of UDP to a destination no rule names: every datagram is dropped, and every drop is either an
# audit record (at most 1000 a second, 500 of them from one session's interface: netd/nflog.c) or counted
# in sluiced's "NFLOG: N dropped packets not audited (...)" line and in a "drop-summary" record of the
# flooding session in the audit log (docs/audit-log.md), which come within a second or two even when nothing
# follows the flood. The datagrams go out within one second, so the last second's excess is
# what an uncounted loss would hide. In the middle of the flood session t1 sends a few datagrams that are
# dropped too: the flood of u1 cannot keep them out of the audit log.
FLOOD=3000 FEW=5
log=$(lab_log sluiced)
reports=$(grep -c "NFLOG: [0-9]* dropped packets not audited" "$log")
summaries=$(grep -c '"protocol":"drop-summary"' "$AUDIT")
# SENDER ADDR N PORT PAUSE_EVERY DELAY: N datagrams to ADDR:PORT+i%100 from the start of a second plus DELAY s,
# pausing 20 ms after every PAUSE_EVERY
cat >"$LAB_DIR/tmp/sender.py" <<-'PY'
	import socket, sys, time
	addr, n, port, every, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
	while time.time() % 1 > 0.05:
	    time.sleep(0.005)
	time.sleep(delay)
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
	for i in range(n):
	    s.sendto(b"drop-me", (addr, port + i % 100))
	    if i % every == every - 1:
	        time.sleep(0.02)
	PY
# u1 floods through most of a second; t1 sends at its middle, when u1 has sent some 2000
lab_exec u1 "$LAB_PYTHON" "$LAB_DIR/tmp/sender.py" "$LAB_ALLOWED4" "$FLOOD" 41000 100 0 &
fpid=$!
lab_exec t1 "$LAB_PYTHON" "$LAB_DIR/tmp/sender.py" "$LAB_ALLOWED4" "$FEW" 42000 100 0.5
wait "$fpid"
T1=$(reply t1 id)
drops_of() { grep -c "\"session\":\"$1\".*\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":$2[0-9][0-9],\"method\":\"udp\"" "$AUDIT"; }
flood_reported() { grep "NFLOG: [0-9]* dropped packets not audited" "$log" | tail -n +$((reports + 1)) |
	sed -n 's/.*NFLOG: \([0-9]*\) dropped packets not audited.*/\1/p' | awk '{ n += $1 } END { if (NR) print n }'; }
# the counts of the flooding session's drop-summary records written since the flood began
flood_summarised() { grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)) | grep "\"session\":\"$U1\"" |
	sed -n 's/.*"reason":"\([0-9]*\) dropped packets not audited one by one.*/\1/p' | awk '{ n += $1 } END { if (NR) print n }'; }
for _ in $(seq 100); do r=$(flood_reported); [ -n "$r" ] && [ $(( $(drops_of "$U1" 410) + r )) -ge "$FLOOD" ] && break; sleep 0.05; done
sleep 1.2 # a second report, had the flood spilled into the next second
r=$(flood_reported) a=$(flood_summarised)
diag "UDP flood of $FLOOD datagrams: $(drops_of "$U1" 410) audited, ${r:-no} reported as not audited (${a:-no} in drop-summary records); the other session's $FEW: $(drops_of "$T1" 420) audited"
check "a UDP flood's drops are audited up to one session's share of the rate (at least 500 records)" \
	test "$(drops_of "$U1" 410)" -ge 500
check "... and every one of the $FLOOD is either audited or reported as not audited in sluiced's log" \
	test "$(( $(drops_of "$U1" 410) + ${r:-0} ))" -eq "$FLOOD"
check_match "... whose line says why" "NFLOG: [0-9]+ dropped packets not audited \([0-9]+ over the limit of 1000/s, 500/s from one interface, 0 lost by the kernel, 0 not taken by the engine\)" \
	"$(tail -n +$((reports + 1)) <(grep "NFLOG: [0-9]* dropped packets not audited" "$log") | head -1)"
check "... and in the audit log: the flooding session's drop-summary records count the same (sluiced's engine writes them)" \
	test "$(( $(drops_of "$U1" 410) + ${a:-0} ))" -eq "$FLOOD"
check_match "... whose reason says why, in a fixed wording" '^[0-9]+ dropped packets not audited one by one: [0-9]+ over the rate limit, 0 lost by the kernel, 0 not taken by the engine$' \
	"$(grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)) | head -1 | jq -r "select(.session == \"$U1\" and .host == null and .decision == \"deny\" and .event == \"complete\") | .reason")"
check_eq "... and no drop-summary of another session or of none (nothing lost, nothing else over the rate)" "" \
	"$(grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)) | grep -v "\"session\":\"$U1\"")"
check_eq "... and the log's hash chain takes them (sluicectl log verify)" 0 \
	"$("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$AUDIT" >/dev/null 2>&1; echo $?)"
check_eq "the drops of another session in the same second are all audited" "$FEW" "$(drops_of "$T1" 420)"

# The engine stalls (SIGSTOP) through a flood: its socket fills, the drops it cannot take are counted ("not
# taken by the engine"), and so are the summaries it cannot take, which sluiced offers again each second; once
# the engine runs again they reach the audit log, and still every datagram is audited or counted.
STALL=1500
summaries=$(grep -c '"protocol":"drop-summary"' "$AUDIT")
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
kill -STOP "$EPID"
lab_exec u1 "$LAB_PYTHON" "$LAB_DIR/tmp/sender.py" "$LAB_ALLOWED4" "$STALL" 43000 100 0
# sluiced hands drops to the engine without waiting: its loop is not held in a send to the stalled engine
# (each blocking send waited out the socket's 2 s timeout, so it answered nobody for seconds)
check "... while the engine stalls, sluiced still answers its control socket at once" \
	timeout 1.5 "$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" sessions
sleep 2.5 # a report, and a second offer of what the engine did not take
kill -CONT "$EPID"
all_summarised() { grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)) |
	sed -n 's/.*"reason":"\([0-9]*\) dropped packets not audited one by one.*/\1/p' | awk '{ n += $1 } END { print n + 0 }'; }
stall_counted() { [ $(( $(drops_of "$U1" 430) + $(all_summarised) )) -eq "$STALL" ]; }
check "a flood while the engine stalls: every datagram is audited or counted in a drop-summary once it runs again" \
	eventually stall_counted
diag "stalled engine: $(drops_of "$U1" 430) audited, $(all_summarised) in drop-summary records"
check_match "... the summary of no session counts what the engine's socket did not take" \
	'"session":null.*"reason":"[0-9]+ dropped packets not audited one by one: [0-9]+ over the rate limit, [0-9]+ lost by the kernel, [1-9][0-9]* not taken by the engine"' \
	"$(grep '"protocol":"drop-summary"' "$AUDIT" | tail -n +$((summaries + 1)))"
kill -TERM "${HOLD[u1]}" "${HOLD[t1]}"
check "when the sessions end, their elements are removed" eventually sh -c \
	"! nft list set inet sluice direct4 | grep -q -e 'sl-$U1' -e 'sl-$T1'"
wait "${HOLD[u1]}" "${HOLD[t1]}" 2>/dev/null
unset "HOLD[u1]" "HOLD[t1]"

# A sluiced slower than the engine waits (1 s against PROXY_DIRECT_HOLD_MS, 250 ms): the answer is not
# stuck, it goes at the hold's end; the datagram sent at once is dropped, one sent after the grant passes.
lab_stop sluiced
check "sluiced starts again, putting grants in place 1 s late" start_sluiced SLUICED_TEST_DIRECT_DELAY_MS=1000
check "a direct-mode session opens" session u2 "$UPOL"
out=$(lab_exec u2 "$LAB_PYTHON" - "$GW4" <<-'PY'
	import random, socket, struct, sys, time
	q = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
	q += b"\x07allowed\x04test\x00" + struct.pack(">HH", 1, 1)
	d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.settimeout(3)
	t0 = time.monotonic(); d.sendto(q, (sys.argv[1], 53)); a = d.recv(4096); ms = (time.monotonic() - t0) * 1000
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
	def one():
	    s.sendto(b"x", (socket.inet_ntoa(a[-4:]), 7))
	    try: s.recv(16); return "echo"
	    except socket.timeout: return "timeout"
	first = one()
	later = next((x for x in (one() for _ in range(8)) if x == "echo"), "timeout")
	print("held" if 200 <= ms < 900 else "answered after %.0f ms" % ms, first, later)
	PY
)
check_eq "the answer went after the hold (250 ms), before the grant; the first datagram was early, the retry passed" \
	"held timeout echo" "$out"
kill -TERM "${HOLD[u2]}"

done_testing
