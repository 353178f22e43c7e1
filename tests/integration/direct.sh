#!/usr/bin/env bash
# Direct mode in the lab (docs/netd.md, docs/proxy.md "Direct mode"): with the policy option "direct", the
# addresses the DNS proxy relays for an allowed name go into the session's nftables set with the answer's
# TTL, and the session may open TCP flows to them without the proxy, on the ports a rule names for that
# name (ssh-like TCP to allowed.test:22, the lab's echo server). Everything else stays dropped: other ports,
# names without such a rule, names never resolved, sessions without the option. Elements expire with the
# TTL (a flow opened in time lives on); a CNAME target's addresses count for the name asked, but the target
# does not become an allowed name; replacing the policy with a narrower one flushes the elements and ends
# live direct flows the new policy does not allow.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need nft "$LAB_PYTHON" setpriv

B=$SLUICE_BUILD_DIR
SLUICED=$B/netd/sluiced
CLIENT=$B/tests/integration/netd-testclient
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
GW4=100.64.0.1
TTL=6 # the lab DNS answers with this TTL (the engine's floor is 5 s)
export SLUICE_RUN_DIR=$RUN LAB_DNS_TTL=$TTL

lab_internet_up
lab_forward on # only sluice's rules stand between a session and the internet
mkdir -p "$LAB_DIR/etc-sluice"
# alias.test is a CNAME for evil.test (dnsmasq answers the chain: CNAME, then evil.test's A record)
echo "cname=alias.test,evil.test" >>"$LAB_DIR/dns/wildcards.conf"
lab_dns_add '*.direct.test' "$LAB_OTHER4" # (restarts dnsmasq, which reads the cname)

DPOL=$LAB_DIR/tmp/direct.json PPOL=$LAB_DIR/tmp/plain.json NPOL=$LAB_DIR/tmp/narrow.json
echo '{ "options": {"direct": true}, "allow": ["allowed.test", "allowed.test:22", "alias.test:22", "other.test", "private.test:22"] }' >"$DPOL"
echo '{ "allow": ["allowed.test", "allowed.test:22", "alias.test:22", "other.test"] }' >"$PPOL"
echo '{ "options": {"direct": true}, "allow": ["allowed.test", "alias.test:22"] }' >"$NPOL"
chmod 0644 "$DPOL" "$PPOL" "$NPOL"

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
audit_has() { grep -q -- "$1" "$AUDIT"; }

# tcp NS ADDR PORT: one connection to the lab's echo server; prints "echo", "timeout" or the error
tcp() {
	lab_exec "$1" "$LAB_PYTHON" - "$2" "$3" <<-'PY'
		import socket, sys
		try:
		    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)  # v4 or v6
		    s.sendall(b"SSH-2.0-sluice-test\r\n")
		    print("echo" if s.recv(64).startswith(b"SSH-2.0") else "other")
		except socket.timeout:
		    print("timeout")
		except OSError as e:
		    print(type(e).__name__)
	PY
}
direct_set() { nft list set inet sluice direct4 2>&1; }
has_elem() { direct_set | grep -q "\"sl-$1\" . $2 . tcp . $3"; }

check "sluiced starts" start_sluiced
check "a direct-mode session opens" session d1 "$DPOL" "$NPOL"
check "a session without the option opens" session p1 "$PPOL"
D1=$(reply d1 id) P1=$(reply p1 id)

check_eq "before any DNS answer, TCP to allowed.test:22 is dropped" timeout "$(tcp d1 "$LAB_ALLOWED4" 22)"
check_eq "the direct session resolves allowed.test through the gateway" "$LAB_ALLOWED4" "$(gw_addrs d1 allowed.test)"
check "... which puts allowed.test's address on port 22 into the session's set" eventually has_elem "$D1" "$LAB_ALLOWED4" 22
direct_set | sed 's/^/# /'
check_match "... with the answer's TTL as its timeout" "\"sl-$D1\" . $LAB_ALLOWED4 . tcp . 22 timeout ${TTL}s" "$(direct_set)"
check_eq "ssh-like TCP to allowed.test:22 now works without the proxy" echo "$(tcp d1 "$LAB_ALLOWED4" 22)"
check_eq "TCP to allowed.test on a port no rule names (7) is dropped" timeout "$(tcp d1 "$LAB_ALLOWED4" 7)"
check_not "... and was never put into the set" has_elem "$D1" "$LAB_ALLOWED4" 7
check "the grant is audited as protocol direct, allow, allowed.test:22" eventually audit_has \
	"\"session\":\"$D1\".*\"protocol\":\"direct\",\"host\":\"allowed.test\",\"port\":22,.*\"decision\":\"allow\""
check_eq "over IPv6: allowed.test's AAAA record resolves" "$LAB_ALLOWED6" "$(gw_addrs d1 allowed.test AAAA)"
check "... and opens its IPv6 address on port 22" eventually sh -c "nft list set inet sluice direct6 | grep -q '\"sl-$D1\" . $LAB_ALLOWED6 . tcp . 22'"
check_eq "ssh-like TCP to [allowed.test]:22 over IPv6 works" echo "$(tcp d1 "$LAB_ALLOWED6" 22)"
check_eq "... and to the IPv6 address on port 7 is dropped" timeout "$(tcp d1 "$LAB_ALLOWED6" 7)"
check_eq "other.test (allowed, but no rule names port 22) resolves" "$LAB_OTHER4" "$(gw_addrs d1 other.test)"
check_eq "... but TCP to its address on 22 is dropped" timeout "$(tcp d1 "$LAB_OTHER4" 22)"
check_not "... no element for it" has_elem "$D1" "$LAB_OTHER4" 22
check_eq "evil.test (not allowed) is refused by the DNS proxy" "rcode=5" "$(gw_addrs d1 evil.test)"
check_eq "... and TCP to its address on 22 is dropped" timeout "$(tcp d1 "$LAB_EVIL4" 22)"
check "... and the drop is audited" eventually audit_has \
	"\"session\":\"$D1\".*\"protocol\":\"drop\",\"host\":\"$LAB_EVIL4\",\"port\":22"

check_eq "private.test (allowed on 22, but its address is private) gets an answer without it" "rcode=0" \
	"$(gw_addrs d1 private.test)"
check_not "... and its address is never opened" sh -c "nft list set inet sluice direct4 | grep -q '$LAB_PRIVATE4'"

# the session without the option: the same answer opens nothing
check_eq "the plain session resolves allowed.test too" "$LAB_ALLOWED4" "$(gw_addrs p1 allowed.test)"
check_eq "... but its TCP to allowed.test:22 is dropped" timeout "$(tcp p1 "$LAB_ALLOWED4" 22)"
check_not "... and it has no element at all" sh -c "nft list set inet sluice direct4 | grep -q 'sl-$P1'"

# a spoofed source on the session's interface does not get through, even towards an open element
lab_exec d1 ip addr add 100.64.99.99/32 dev eth0
out=$(lab_exec d1 "$LAB_PYTHON" -c "
import socket
s = socket.socket(); s.bind(('100.64.99.99', 0)); s.settimeout(3)
try:
    s.connect(('$LAB_ALLOWED4', 22)); print('connected')
except OSError as e: print(type(e).__name__)")
check_eq "a spoofed source address is dropped even towards an open element" "TimeoutError" "$out"
lab_exec d1 ip addr del 100.64.99.99/32 dev eth0

# CNAME: alias.test (allowed on 22) -> evil.test. Its addresses answer alias.test, so they open; evil.test
# itself stays a name the policy refuses.
check_eq "alias.test (a CNAME for evil.test) resolves to evil.test's address" "$LAB_EVIL4" "$(gw_addrs d1 alias.test)"
check "... which opens port 22 of that address, as an answer for alias.test" eventually has_elem "$D1" "$LAB_EVIL4" 22
check "... audited under the name asked, alias.test" eventually audit_has \
	"\"session\":\"$D1\".*\"protocol\":\"direct\",\"host\":\"alias.test\",\"port\":22,.*\"decision\":\"allow\""
check_eq "the CNAME target evil.test does not become an allowed name (DNS)" "rcode=5" "$(gw_addrs d1 evil.test)"
check_eq "... nor through the proxy" 403 "$(lab_exec d1 curl -s -o /dev/null -w '%{http_code}' -m 10 \
	-x "http://$GW4:3128" http://evil.test/)"
check_not "no direct grant was ever made for evil.test by name" \
	grep -q '"protocol":"direct","host":"evil.test"' "$AUDIT"

# TTL expiry: a flow opened in time lives on; after the TTL the element is gone and new flows are dropped
live_flow d1 "$LAB_ALLOWED4" 22 "$LAB_DIR/tmp/live1"
LIVE=$!
gw_addrs d1 allowed.test >/dev/null
check "a flow to allowed.test:22 is opened while the element lives" eventually test -e "$LAB_DIR/tmp/live1.up"
sleep $((TTL + 2))
check_not "after the TTL the element is gone" has_elem "$D1" "$LAB_ALLOWED4" 22
check_eq "... and a new TCP flow to allowed.test:22 is dropped" timeout "$(tcp d1 "$LAB_ALLOWED4" 22)"
touch "$LAB_DIR/tmp/live1.go"
wait "$LIVE"
out=$(cat "$LAB_DIR/tmp/live1.out")
check_eq "... while the flow opened in time still works" echo "$out"

# Replacing the policy with a narrower one (allowed.test without :22): the set is flushed, the live flow
# to allowed.test:22 ends, alias.test:22 (still allowed) is offered again, and new answers open nothing.
check_eq "allowed.test resolves again" "$LAB_ALLOWED4" "$(gw_addrs d1 allowed.test)"
check "its element is back" eventually has_elem "$D1" "$LAB_ALLOWED4" 22
rm -f "$LAB_DIR/tmp/live2.up" "$LAB_DIR/tmp/live2.go"
live_flow d1 "$LAB_ALLOWED4" 22 "$LAB_DIR/tmp/live2"
LIVE=$!
check "a live flow to allowed.test:22 is open" eventually test -e "$LAB_DIR/tmp/live2.up"
# tunnels through the proxy: one to a host the narrower policy still allows, one to a host it drops
tunnel() { # tunnel NAME HOST: CONNECT HOST:80 through the proxy, then after NAME.go one request through it
	lab_exec d1 "$LAB_PYTHON" - "$GW4" "$2" "$LAB_DIR/tmp/$1" >"$LAB_DIR/tmp/$1.out" 2>&1 <<-'PY' &
		import os, socket, sys, time
		gw, host, f = sys.argv[1], sys.argv[2], sys.argv[3]
		s = socket.create_connection((gw, 3128), timeout=5)
		s.sendall(b"CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n" % (host.encode(), host.encode()))
		head = b""
		while b"\r\n\r\n" not in head: head += s.recv(1)
		if b" 200" not in head.split(b"\r\n")[0]: print("refused"); sys.exit()
		open(f + ".up", "w").close()
		while not os.path.exists(f + ".go"): time.sleep(0.05)
		try:
		    s.sendall(b"GET /tunnel HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode())
		    r = s.recv(64); print("alive" if r.startswith(b"HTTP/1.1 200") else "closed")
		except OSError: print("closed")
	PY
}
tunnel tun-allowed allowed.test; TUN_A=$!
tunnel tun-other other.test; TUN_O=$!
check "a CONNECT tunnel to allowed.test:80 is open" eventually test -e "$LAB_DIR/tmp/tun-allowed.up"
check "a CONNECT tunnel to other.test:80 is open" eventually test -e "$LAB_DIR/tmp/tun-other.up"
# (resolved last, so that its element still has most of its TTL left when the policy changes)
check_eq "alias.test resolves again" "$LAB_EVIL4" "$(gw_addrs d1 alias.test)"
check "its element is back too" eventually has_elem "$D1" "$LAB_EVIL4" 22
kill -USR2 "${HOLD[d1]}"
check "the launcher's connection replaces the policy" eventually grep -q '^policy=replaced' "$LAB_DIR/state/d1.reply"
touch "$LAB_DIR/tmp/tun-allowed.go" "$LAB_DIR/tmp/tun-other.go"
wait "$TUN_A" "$TUN_O"
check_eq "the tunnel to allowed.test (still allowed) lives on" alive "$(cat "$LAB_DIR/tmp/tun-allowed.out")"
check_eq "the tunnel to other.test (no longer allowed) was closed" closed "$(cat "$LAB_DIR/tmp/tun-other.out")"
check "... and its audit record says why" eventually audit_has \
	"\"session\":\"$D1\".*\"protocol\":\"connect\",\"host\":\"other.test\",\"port\":80,.*new policy no longer allows other.test:80"
grep '^policy' "$LAB_DIR/state/d1.reply" | sed 's/^/# /'
check_not "allowed.test:22 is no longer in the set" has_elem "$D1" "$LAB_ALLOWED4" 22
check "alias.test's address on 22 (still allowed) is offered again" has_elem "$D1" "$LAB_EVIL4" 22
check_eq "... and TCP to it still works" echo "$(tcp d1 "$LAB_EVIL4" 22)"
touch "$LAB_DIR/tmp/live2.go"
wait "$LIVE"
out=$(cat "$LAB_DIR/tmp/live2.out")
check_eq "the live flow to allowed.test:22 ended" timeout "$out"
check_eq "a new flow to allowed.test:22 is dropped" timeout "$(tcp d1 "$LAB_ALLOWED4" 22)"
check_eq "allowed.test still resolves (the name is still allowed)" "$LAB_ALLOWED4" "$(gw_addrs d1 allowed.test)"
sleep 0.3
check_not "... but its answer opens no port any more" has_elem "$D1" "$LAB_ALLOWED4" 22
check "the revocation is audited" eventually audit_has \
	"\"session\":\"$D1\".*\"protocol\":\"direct\",\"host\":\"allowed.test\",\"port\":22,.*\"decision\":\"deny\""
cat >"$LAB_DIR/tmp/transparent.json" <<<'{ "options": {"direct": true, "transparent": true}, "allow": ["allowed.test"] }'
cp "$LAB_DIR/tmp/transparent.json" "$NPOL"
kill -USR2 "${HOLD[d1]}"
check "a policy that turns transparent mode on is refused for a live session" \
	eventually grep -q '^policy_error=.*transparent option cannot change' "$LAB_DIR/state/d1.reply"

# who may change a session's policy: root, the connection that attached it, and its user from outside the
# session; never a process inside the session's namespace (it could widen the session it runs in)
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
echo '{ "options": {"direct": true}, "allow": ["allowed.test"] }' >"$LAB_DIR/tmp/narrow2.json"
chmod 0644 "$LAB_DIR/tmp/narrow2.json"
check "an unprivileged user creates a named-namespace session in direct mode" \
	sh -c "$NOBODY '$CLIENT' create dweb '$DPOL' >'$LAB_DIR/tmp/dweb.out' 2>&1"
DWID=$(sed -n 's/^id=//p' "$LAB_DIR/tmp/dweb.out")
check_match "its user cannot replace its policy from inside the session's namespace" "inside the session cannot change" \
	"$(nsenter --net="$RUN/netns/dweb" $NOBODY "$CLIENT" policy "$DWID" "$LAB_DIR/tmp/narrow2.json" 2>&1)"
check_eq "its user can, from outside it" "policy=replaced" "$($NOBODY "$CLIENT" policy "$DWID" "$LAB_DIR/tmp/narrow2.json" 2>&1)"
check_match "nor can another user" "no such session of yours" \
	"$(setpriv --reuid=65533 --regid=65533 --clear-groups "$CLIENT" policy "$DWID" "$LAB_DIR/tmp/narrow2.json" 2>&1)"
check_eq "root can" "policy=replaced" "$("$CLIENT" policy "$DWID" "$LAB_DIR/tmp/narrow2.json" 2>&1)"
echo '{ "allow": ["*"] }' >"$LAB_DIR/tmp/bad.json"
check_match "sluiced compiles a new policy again and rejects an unsafe one" "policy rejected: .*session policy" \
	"$(NETD_TEST_RAW_POLICY=1 "$CLIENT" policy "$DWID" "$LAB_DIR/tmp/bad.json" 2>&1)"
check "the user ends the session" $NOBODY "$CLIENT" end "$DWID"

# the session ends: its elements go with it
kill -TERM "${HOLD[d1]}"
check "when the session ends, its direct elements are removed" eventually sh -c "! nft list set inet sluice direct4 | grep -q 'sl-$D1'"

done_testing
