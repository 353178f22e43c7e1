#!/usr/bin/env bash
# sluiced in the lab: a session reaches the proxy and DNS on its gateway and nothing else; spoofed sources
# are dropped; the proxy is unreachable from other interfaces; 50 concurrent sessions are unique and not
# cross-wired; named namespaces; unprivileged callers; protocol abuse; kill -9 + restart leaves no residue
# and the sessions fail closed; embedded mode. (Until the proxy engine is linked, sluiced serves the netd test
# listener, which answers "session=<id>" for the session it identified from the source address.)
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl nft "$LAB_PYTHON" setpriv

B=$SLUICE_BUILD_DIR
SLUICED=$B/netd/sluiced
CLIENT=$B/tests/integration/netd-testclient
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
GW4=100.64.0.1 GW6=2001:db8:100::1
export SLUICE_RUN_DIR=$RUN NETD_TEST_AUDIT_LOG=$AUDIT
# Requests go through the proxy to the lab's internet and the audit log names the session.

lab_internet_up
lab_lan_up
lab_forward on # only sluice's rules stand between a session and the rest

POLICY=$LAB_DIR/tmp/policy.json
echo '{ "allow": ["registry.test", "allowed.test"] }' >"$POLICY"
chmod 0644 "$POLICY"

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
end_session() {
	kill -TERM "${HOLD[$1]}" && wait "${HOLD[$1]}"
	unset "HOLD[$1]"
}
no_sl_links_but() { [ "$(ip -o link | grep -c ' sl-')" -eq "$1" ]; }
# in_ns NS CMD...: NS is a lab netns name or a namespace file path
in_ns() {
	local ns=$1
	shift
	case $ns in /*) nsenter --net="$ns" "$@" ;; *) lab_exec "$ns" "$@" ;; esac
}
# via_proxy NS GW ID: from NS the proxy on GW (IPv6 in brackets) answers, and the engine took the request
# for session ID (identified by source address)
via_proxy() {
	local ns=$1 gw=$2 id=$3
	in_ns "$ns" curl -s -m 5 --noproxy '' -x "http://$gw:3128" "http://allowed.test/netd-$id" |
		grep -q "\"target\": *\"/netd-$id\"" &&
		eventually grep -q "\"session\":\"$id\".*\"host\":\"allowed.test\"" "$AUDIT"
}

reaches() { lab_exec "$1" curl -s -o /dev/null -m 2 --connect-timeout 1 --noproxy '*' "$2"; }
# dnsq NS SERVER udp|tcp: the RCODE of an answer to "registry.test A", or "timeout"
dnsq() {
	lab_exec "$1" "$LAB_PYTHON" - "$2" "$3" <<-'PY'
		import socket, struct, sys
		srv, proto = sys.argv[1], sys.argv[2]
		fam = socket.AF_INET6 if ":" in srv else socket.AF_INET
		q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x08registry\x04test\x00\x00\x01\x00\x01"
		try:
		    if proto == "udp":
		        s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(1.5); s.sendto(q, (srv, 53)); r = s.recv(512)
		    else:
		        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(1.5); s.connect((srv, 53))
		        s.sendall(struct.pack(">H", len(q)) + q); r = s.recv(514)[2:]
		    print("rcode=%d" % (r[3] & 15) if r[:2] == q[:2] and r[2] & 0x80 else "bad")
		except OSError:
		    print("timeout")
	PY
}

check "sluiced starts" start_sluiced
check "session s1 opens" session s1
check "session s2 opens" session s2
ID1=$(reply s1 id) ID2=$(reply s2 id)
A1=$(reply s1 addr4) A2=$(reply s2 addr4) A1_6=$(reply s1 addr6)
check_eq "s1's gateway is the shared gateway" "$GW4" "$(reply s1 gw4)"
check_match "s1 gets an address from the pool" '^100\.64\.' "$A1"
check_match "s1 gets an IPv6 address from the pool" '^2001:db8:100::' "$A1_6"
check "s1's eth0 carries its address" lab_exec s1 sh -c "ip -o addr show dev eth0 | grep -q ' $A1/32'"
check "lo is up in s1" lab_exec s1 sh -c "ip -o link show lo | grep -q ',UP'"

# what a session may reach
check "s1 reaches the proxy on the gateway, identified as itself" via_proxy s1 "$GW4" "$ID1"
check "s1 reaches the proxy over IPv6" via_proxy s1 "[$GW6]" "$ID1"
check "s2 reaches the proxy, identified as itself" via_proxy s2 "$GW4" "$ID2"
check_eq "s1 reaches DNS on the gateway (UDP)" "rcode=0" "$(dnsq s1 "$GW4" udp)"
check_eq "s1 reaches DNS on the gateway (TCP)" "rcode=0" "$(dnsq s1 "$GW4" tcp)"
check_eq "s1 reaches DNS on the gateway (IPv6 UDP)" "rcode=0" "$(dnsq s1 "$GW6" udp)"
check_match "s1 reaches allowed.test through the SOCKS5 front on the gateway (socks5h)" '"target": *"/netd-socks"' \
	"$(lab_exec s1 curl -s -m 5 --noproxy '' --socks5-hostname "$GW4:1080" http://allowed.test/netd-socks)"
check_match "s1 reaches the SOCKS5 front over IPv6" '"target": *"/netd-socks6"' \
	"$(lab_exec s1 curl -s -m 5 --noproxy '' --socks5-hostname "[$GW6]:1080" http://allowed.test/netd-socks6)"
check "the SOCKS5 exchange is audited for s1" \
	eventually grep -q "\"session\":\"$ID1\".*\"protocol\":\"socks5\",\"host\":\"allowed.test\"" "$AUDIT"

# and nothing else
lab_bg hostsvc "$LAB_PYTHON" -m http.server --bind 0.0.0.0 8081
lab_bg hostsvc6 "$LAB_PYTHON" -m http.server --bind :: 8082
lab_bg s2svc -n s2 "$LAB_PYTHON" -m http.server --bind 0.0.0.0 8083
check "the host service answers locally" lab_wait_port host 127.0.0.1 8081
check "the service in s2 answers inside s2" lab_wait_port s2 "$A2" 8083
check_not "s1 cannot reach a host service on the gateway address" reaches s1 "http://$GW4:8081/"
check_not "s1 cannot reach a host service on the host's LAN address" reaches s1 "http://$LAB_LAN_HOST4:8081/"
check_not "s1 cannot reach a host service over IPv6" reaches s1 "http://[$GW6]:8082/"
check_not "s1 cannot reach another session" reaches s1 "http://$A2:8083/"
check_not "s1 cannot reach the LAN" reaches s1 "http://$LAB_LAN4/"
check_not "s1 cannot reach the internet directly" reaches s1 "http://$LAB_ALLOWED4/"
check_not "s1 cannot reach the internet directly (IPv6)" reaches s1 "http://[$LAB_ALLOWED6]/"
check_eq "s1 cannot use the internet's DNS server directly" "timeout" "$(dnsq s1 "$LAB_DNS" udp)"
check "the internet saw none of it" sh -c "! lab_http_requests inet 2>/dev/null | grep -q '$A1'"
# (NFLOG, sluiced and its engine write it asynchronously: waited for, not a fixed 0.3 s)
check "the drop of s1 -> internet is in the audit log" eventually grep -q \
	"\"session\":\"$ID1\".*\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":80" "$AUDIT"

# anti-spoofing: a source address that is not the session's own
lab_exec s1 ip addr add 100.64.200.200/32 dev eth0
lab_exec s1 ip addr add "$A2/32" dev eth0
check_not "a spoofed source cannot reach the proxy" \
	lab_exec s1 curl -s -o /dev/null -m 2 --connect-timeout 1 --interface 100.64.200.200 "http://$GW4:3128/"
check_not "s2's address used from s1 cannot reach the proxy" \
	lab_exec s1 curl -s -o /dev/null -m 2 --connect-timeout 1 --interface "$A2" "http://$GW4:3128/"
check "the spoofed packets were counted" sh -c "nft list chain inet sluice session_in | grep sluice-spoof | grep -vq 'packets 0 '"
lab_exec s1 ip addr del 100.64.200.200/32 dev eth0
lab_exec s1 ip addr del "$A2/32" dev eth0
# the same over IPv6: a forged source in the pool, and s2's own IPv6 address used from s1
A2_6=$(reply s2 addr6)
spoofed6() { nft list chain inet sluice session_in | grep sluice-spoof | grep 'ip6 saddr' | sed -n 's/.*packets \([0-9]*\).*/\1/p'; }
before6=$(spoofed6)
lab_exec s1 ip addr add 2001:db8:100::dead/128 dev eth0 nodad
lab_exec s1 ip addr add "$A2_6/128" dev eth0 nodad
check_not "a forged IPv6 source cannot reach the proxy" \
	lab_exec s1 curl -s -o /dev/null -m 2 --connect-timeout 1 --interface 2001:db8:100::dead "http://[$GW6]:3128/"
check_not "s2's IPv6 address used from s1 cannot reach the proxy" \
	lab_exec s1 curl -s -o /dev/null -m 2 --connect-timeout 1 --interface "$A2_6" "http://[$GW6]:3128/"
check "the forged IPv6 packets were counted by the IPv6 anti-spoofing rule" test "$(spoofed6)" -gt "${before6:-0}"
lab_exec s1 ip addr del 2001:db8:100::dead/128 dev eth0
lab_exec s1 ip addr del "$A2_6/128" dev eth0
check "s1's own IPv6 address still reaches the proxy" via_proxy s1 "[$GW6]" "$ID1"

# the proxy and DNS ports are closed to every other interface
check_not "the proxy is unreachable from the host itself" \
	curl -s -o /dev/null -m 2 --connect-timeout 1 "http://$GW4:3128/"
lab_exec lan ip route add "$GW4/32" via "$LAB_LAN_HOST4" 2>/dev/null
check_not "the proxy is unreachable from the LAN" reaches lan "http://$GW4:3128/"
check_eq "DNS on the gateway is unreachable from the LAN" "timeout" "$(dnsq lan "$GW4" udp)"

# the engine dies: sluiced restarts it and registers the live sessions again
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
check "the engine runs as an unprivileged user" test "$(stat -c %u "/proc/$EPID")" != 0
kill -9 "$EPID"
check "sluiced notices the engine's death" eventually grep -q "proxy engine .*exited" "$(lab_log sluiced)"
check "the restarted engine serves s1 again" eventually via_proxy s1 "$GW4" "$ID1"
check_not "and s1 still cannot reach the internet directly" reaches s1 "http://$LAB_ALLOWED4/"

# ending a session removes it
end_session s2
check "s2's link is gone after its launcher closed" eventually sh -c "! ip -o link | grep -q 'sl-$ID2'"
check "s2's elements are gone" eventually sh -c "! nft list set inet sluice src4 | grep -q 'sl-$ID2'"
check_not "s2 lost its network" lab_exec s2 ip link show eth0

# 50 concurrent sessions
mkdir -p "$LAB_DIR/ns50"
for i in $(seq 0 49); do ip netns add "m$i"; ln -s "/run/netns/m$i" "$LAB_DIR/ns50/n$i"; done
"$CLIENT" many 50 "$LAB_DIR/ns50" "$POLICY" </dev/null >"$LAB_DIR/state/many.out" 2>&1 &
MANY_PID=$!
for i in $(seq 200); do [ "$(grep -c '^setup_us=' "$LAB_DIR/state/many.out")" -ge 50 ] && break; sleep 0.05; done
check_eq "50 sessions opened" 50 "$(grep -c 'addr4=100' "$LAB_DIR/state/many.out")"
check_eq "50 unique ids" 50 "$(grep -o 'id=[0-9a-f]*' "$LAB_DIR/state/many.out" | sort -u | wc -l)"
check_eq "50 unique addresses" 50 "$(grep -o 'addr4=[0-9.]*' "$LAB_DIR/state/many.out" | sort -u | wc -l)"
bad=0
for i in $(seq 0 49); do
	line=$(grep " live=$i " "$LAB_DIR/state/many.out")
	id=${line#*id=} id=${id%% *} addr=${line##*addr4=}
	lab_exec "m$i" sh -c "ip -o addr show dev eth0 | grep -q ' $addr/32'" || { bad=$((bad + 1)); continue; }
	via_proxy "m$i" "$GW4" "$id" || bad=$((bad + 1))
done
check_eq "each of the 50 sessions has its own address and is identified as itself" 0 "$bad"
check_eq "sluicectl-style list shows 51 sessions" 51 "$("$CLIENT" list | wc -l)"
kill -TERM "$MANY_PID"
wait "$MANY_PID"
check "closing the 50 removed their links" eventually no_sl_links_but 1

# the same namespace attached again the moment its session ended: its old eth0 is still in it until the
# reaper has deleted the old link (which waits for a quiet moment), so the new setup waits for that
# deletion instead of failing on an eth0 that exists
ip netns add again
mkdir -p "$LAB_DIR/again"
for i in 0 1 2; do ln -s /run/netns/again "$LAB_DIR/again/n$i"; done
check "one namespace attached three times in a row, each right after the last session ended" \
	"$CLIENT" bench 0 3 "$LAB_DIR/again" "$POLICY"
check "its eth0 is gone with the last of them" eventually sh -c "! ip -n again link show eth0 2>/dev/null"
ip netns del again

# named namespaces for other backends
check "a named namespace is created" sh -c "'$CLIENT' create web1 '$POLICY' >'$LAB_DIR/state/web1.out'"
WID=$(sed -n 's/^id=//p' "$LAB_DIR/state/web1.out")
check_eq "its path is under /run/sluice/netns" "$RUN/netns/web1" "$(sed -n 's/^netns=//p' "$LAB_DIR/state/web1.out")"
check "a process joining it reaches the proxy" via_proxy "$RUN/netns/web1" "$GW4" "$WID"
check "it outlives the creating connection and is listed" sh -c "'$CLIENT' list | grep -q '^$WID .*$RUN/netns/web1'"
check_not "a second one with the same name is refused" "$CLIENT" create web1 "$POLICY"

# what a client passes as its namespace is checked
check_match "a regular file is refused as a namespace" "not a namespace" \
	"$("$CLIENT" attach "$POLICY" "$POLICY" 2>&1 </dev/null)"
check_match "a mount namespace is refused" "not a network namespace" \
	"$("$CLIENT" attach /proc/self/ns/mnt "$POLICY" 2>&1 </dev/null)"
check_match "sluiced's own namespace is refused, even for root" "host's own" \
	"$("$CLIENT" attach /proc/self/ns/net "$POLICY" 2>&1 </dev/null)"
check_match "a namespace that already has a session is refused" "already has session" \
	"$("$CLIENT" attach /run/netns/s1 "$POLICY" 2>&1 </dev/null)"
# a setup that fails half-way (its requests to the session side go in one batch): a namespace with a
# default route of its own refuses the session's; the error names the request, and nothing stays wired
ip netns add dr && ip -n dr link add d0 type veth peer name d1 && ip -n dr link set d0 up &&
	ip -n dr addr add 192.0.2.77/24 dev d0 && ip -n dr route add default via 192.0.2.1 ||
	lab_bail "making a namespace with a default route"
nsl=$(ip -o link | grep -c ' sl-')
check_match "a namespace with a default route already fails the session's, named" \
	"adding IPv4 routes on eth0: File exists" "$(timeout 10 "$CLIENT" attach /run/netns/dr "$POLICY" 2>&1 </dev/null)"
check "... its link is deleted" eventually no_sl_links_but "$nsl"
check_eq "... and its eth0 with it" "" "$(ip -n dr -o link show eth0 2>/dev/null)"
check_not "... and it is not listed" sh -c "'$CLIENT' list | grep -q ' test dr\$'"
ip -n dr route del default
"$CLIENT" attach /run/netns/dr "$POLICY" "test dr" </dev/null >"$LAB_DIR/state/dr.reply" 2>&1 &
HOLD[dr]=$!
lab_defer "kill -TERM ${HOLD[dr]} 2>/dev/null; wait ${HOLD[dr]} 2>/dev/null"
check "the same namespace is wired once the route is gone" eventually grep -q '^proxy_port=' "$LAB_DIR/state/dr.reply"
check "... and its session reaches the proxy" via_proxy dr "$GW4" "$(reply dr id)"
end_session dr
echo '{ "allow": ["*"] }' >"$LAB_DIR/tmp/bad.json"
check_match "sluiced re-validates the policy a client sends" "policy rejected: .*session policy" \
	"$(NETD_TEST_RAW_POLICY=1 "$CLIENT" attach /run/netns/m2 "$LAB_DIR/tmp/bad.json" 2>&1 </dev/null)"

# unprivileged callers
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
cp "$POLICY" "$LAB_DIR/tmp/upolicy.json" && chmod 0644 "$LAB_DIR/tmp/upolicy.json"
out=$($NOBODY "$CLIENT" attach /run/netns/m0 "$LAB_DIR/tmp/upolicy.json" 2>&1 </dev/null)
check_match "an unprivileged user cannot wire a namespace that is not theirs" "does not belong|Permission denied" "$out"
out=$($NOBODY "$CLIENT" attach /proc/self/ns/net "$LAB_DIR/tmp/upolicy.json" 2>&1 </dev/null)
check_match "nor the host's namespace" "host's own|does not belong" "$out"
UCURL="curl -s -m 5 --noproxy '' -x http://$GW4:3128 http://allowed.test/netd-userns" UWANT='"target": *"/netd-userns"'
$NOBODY unshare --user --map-root-user --net sh -c \
	"'$CLIENT' attach /proc/self/ns/net '$LAB_DIR/tmp/upolicy.json' userns-test >'$LAB_DIR/tmp/u.out' 2>&1 &
	 for i in \$(seq 100); do grep -q proxy_port= '$LAB_DIR/tmp/u.out' && break; sleep 0.05; done
	 $UCURL >'$LAB_DIR/tmp/u.curl'; kill \$!; wait" </dev/null
check_match "an unprivileged user wires their own namespace and reaches the proxy" "$UWANT" \
	"$(cat "$LAB_DIR/tmp/u.curl")"
check_eq "an unprivileged user lists only their own sessions (none left)" "" "$($NOBODY "$CLIENT" list)"
out=$($NOBODY "$CLIENT" end "$WID" 2>&1)
check_match "an unprivileged user cannot end root's session" "no such session of yours" "$out"
# an unprivileged user creates a named namespace (sluicectl netns create): sluiced made it, so it is
# trusted although no user namespace of theirs owns it; it is theirs to list and end, and no one else's
check "an unprivileged user creates a named namespace" \
	sh -c "$NOBODY '$CLIENT' create uweb '$LAB_DIR/tmp/upolicy.json' >'$LAB_DIR/tmp/uweb.out' 2>&1"
UWID=$(sed -n 's/^id=//p' "$LAB_DIR/tmp/uweb.out")
check_eq "its path is under /run/sluice/netns" "$RUN/netns/uweb" "$(sed -n 's/^netns=//p' "$LAB_DIR/tmp/uweb.out")"
check "a process joining it reaches the proxy, identified as that session" via_proxy "$RUN/netns/uweb" "$GW4" "$UWID"
check_match "the user lists it as theirs" "^$UWID .*$RUN/netns/uweb" "$($NOBODY "$CLIENT" list)"
out=$(setpriv --reuid=65533 --regid=65533 --clear-groups "$CLIENT" end "$UWID" 2>&1)
check_match "another unprivileged user cannot end it" "no such session of yours" "$out"
check "the user ends it" $NOBODY "$CLIENT" end "$UWID"
check "its namespace is removed" eventually test ! -e "$RUN/netns/uweb"

# protocol abuse: garbage, truncated and oversized records; the daemon drops the client and carries on
for payload in garbage short huge badtype; do
	"$LAB_PYTHON" - "$RUN/control.sock" "$payload" <<-'PY'
		import socket, struct, sys
		s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1])
		k = sys.argv[2]
		if k == "garbage": m = b"\xff" * 100
		elif k == "short": m = struct.pack("=IHHII", 64, 1, 0, 1, 0)
		elif k == "huge": m = struct.pack("=IHHII", 200000, 1, 0, 1, 0) + b"x" * 199984
		else: m = struct.pack("=IHHII", 16, 99, 0, 1, 0)
		try: s.send(m); s.recv(2048)
		except OSError: pass
	PY
done
check "sluiced still answers after malformed messages" sh -c "'$CLIENT' list >/dev/null"

# kill -9 mid-session, restart: zero residue, and the sessions fail closed meanwhile
check "session k1 opens" session k1
IDK=$(reply k1 id)
check "k1 reaches the proxy" via_proxy k1 "$GW4" "$IDK"
check "k1 has IPv6 elements before the kill (so their absence after it means something)" \
	sh -c "nft list set inet sluice src6 | grep -q 'sl-$IDK'"
NETNS_BEFORE=$(ip -all netns list | sort)
DPID=$(lab_pid sluiced)
kill -9 "$DPID"
# live() PID: running and not a zombie (killed processes stay zombies until the lab's pid 1 reaps them)
live() { [ -r "/proc/$1/stat" ] && ! awk '{ exit $3 != "Z" }' "/proc/$1/stat"; }
live_sluiced() { local p; for p in $(pgrep -x sluiced); do live "$p" && return 0; done; return 1; }
no_live_sluiced() { ! live_sluiced; }
check "sluiced and its engine are gone after kill -9" eventually no_live_sluiced

check_not "with sluiced dead, k1 cannot reach the proxy (fail closed)" reaches k1 "http://$GW4:3128/"
check_not "with sluiced dead, k1 cannot reach the internet" reaches k1 "http://$LAB_ALLOWED4/"
lab_stop sluiced >/dev/null 2>&1
check "sluiced restarts" start_sluiced
check_eq "no sl-* link survives the restart" "" "$(ip -o link | grep ' sl-')"
nonempty_sets() {
	nft -j list table inet sluice | "$LAB_PYTHON" -c '
import json, sys
for o in json.load(sys.stdin)["nftables"]:
    for kind in ("set", "map"):
        if kind in o and o[kind].get("elem") and not o[kind]["name"].startswith("gateways"):
            print(o[kind]["name"], len(o[kind]["elem"]))'
}
check_eq "no session elements survive (src4, src6, svc4, svc6, every set or map but the gateways)" "" \
	"$(nonempty_sets)"
check_eq "no named namespace survives" "" "$(ls -A "$RUN/netns" 2>/dev/null)"
check_eq "no namespace bind mount survives" "" "$(grep " $RUN/netns/" /proc/self/mountinfo)"
check_eq "ip -all netns: the same namespaces as before the kill" "$NETNS_BEFORE" "$(ip -all netns list | sort)"
check_eq "only the new daemon's gateway lease is left" "1" "$(ls -A "$RUN/leases")"
check_not "k1 has lost its network" lab_exec k1 ip link show eth0
end_session k1
lab_stop sluiced
check_eq "after a clean stop no sluice table is left" "" "$(nft list ruleset | grep -v '^$')"
check_eq "after a clean stop /run/sluice is empty" "" "$(ls -A "$RUN")"
check_eq "after a clean stop no sl-* link is left" "" "$(ip -o link | grep ' sl-')"

# start-up refusals: a pool colliding with the host's routes, a second sluiced
out=$("$SLUICED" --run-dir "$RUN" --audit-log "$AUDIT" --pool4 192.0.2.0/24 --pool6 none 2>&1)
check_match "a pool that collides with a host route is refused, naming it" "collides with .*192\.0\.2\.0/24 on lan0" "$out"
check_eq "the refused start left no table" "" "$(nft list ruleset | grep -v '^$')"
check "sluiced starts again" start_sluiced
out=$("$SLUICED" --run-dir "$RUN" --audit-log "$AUDIT" --pool4 "$POOL4" --pool6 "$POOL6" 2>&1)
check_match "a second sluiced is refused" "another sluiced is already running" "$out"
lab_stop sluiced

# the engine forgets an ended session: in a /28 pool (13 session addresses) with 12 held, the next
# session gets the address the ended one had, and the engine identifies it as itself, never as the
# ended one
POOL4=100.64.9.0/28 POOL6=none
check "sluiced starts with a 13-session pool" start_sluiced
"$CLIENT" many 12 "$LAB_DIR/ns50" "$POLICY" </dev/null >"$LAB_DIR/state/many12.out" 2>&1 &
MANY_PID=$!
for i in $(seq 200); do [ "$(grep -c '^setup_us=' "$LAB_DIR/state/many12.out")" -ge 12 ] && break; sleep 0.05; done
check_eq "12 sessions hold 12 of the 13 addresses" 12 "$(grep -c 'addr4=100' "$LAB_DIR/state/many12.out")"
check "session r1 opens" session r1
IDR1=$(reply r1 id) AR1=$(reply r1 addr4)
check "r1 reaches the proxy, identified as itself" via_proxy r1 100.64.9.1 "$IDR1"
end_session r1
check "r1 ended" eventually sh -c "! '$CLIENT' list | grep -q '^$IDR1 '"
check "session r2 opens" session r2
IDR2=$(reply r2 id)
check_eq "r2 re-uses r1's address" "$AR1" "$(reply r2 addr4)"
r1_lines=$(grep -c "\"session\":\"$IDR1\"" "$AUDIT")
check "a connection from the re-used address is identified as r2, not the ended r1" \
	via_proxy r2 100.64.9.1 "$IDR2"
check_eq "nothing more was audited under r1's id" "$r1_lines" "$(grep -c "\"session\":\"$IDR1\"" "$AUDIT")"
# ... also after RECORDS (the launcher's end: the engine lets go of the session there, and the close sends no
# second removal), and when the engine restarted between the two (it got the session again, so the close
# must remove it again)
end_session r2
check "r2 ended" eventually sh -c "! '$CLIENT' list | grep -q '^$IDR2 '"
NETD_TEST_RECORDS=hold session r3
IDR3=$(reply r3 id) AR3=$(reply r3 addr4)
check "r3 reaches the proxy, identified as itself" via_proxy r3 100.64.9.1 "$IDR3"
kill -USR1 "${HOLD[r3]}"
check "r3's records came" eventually grep -q '^records=ok' "$LAB_DIR/state/r3.reply"
engines=$(grep -c "proxy engine .* running" "$(lab_log sluiced)")
kill -9 "$(pgrep -P "$(lab_pid sluiced)" | head -n 1)"
check "the engine restarted (it registered r3 again)" eventually \
	sh -c "[ \$(grep -c 'proxy engine .* running' '$(lab_log sluiced)') -gt $engines ]"
end_session r3
check "r3 ended" eventually sh -c "! '$CLIENT' list | grep -q '^$IDR3 '"
check "session r4 opens" session r4
IDR4=$(reply r4 id)
check_eq "r4 re-uses r3's address" "$AR3" "$(reply r4 addr4)"
check "a connection from it is identified as r4, not the ended r3" eventually via_proxy r4 100.64.9.1 "$IDR4"
end_session r4
check "r4 ended" eventually sh -c "! '$CLIENT' list | grep -q '^$IDR4 '"
NETD_TEST_RECORDS=1 session r5
IDR5=$(reply r5 id) AR5=$(reply r5 addr4)
end_session r5
check "r5 gave its records and ended" eventually sh -c "grep -q '^records=ok' '$LAB_DIR/state/r5.reply' && ! '$CLIENT' list | grep -q '^$IDR5 '"
check "session r6 opens" session r6
IDR6=$(reply r6 id)
check_eq "r6 re-uses r5's address" "$AR5" "$(reply r6 addr4)"
check "a connection from it is identified as r6, not the ended r5" via_proxy r6 100.64.9.1 "$IDR6"
end_session r6
kill -TERM "$MANY_PID"
wait "$MANY_PID"
lab_stop sluiced
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64

# embedded mode: no daemon, root caller
check "an embedded session opens without sluiced" session e1
IDE=$(reply e1 id)
check "the embedded session reaches its proxy" via_proxy e1 "$(reply e1 gw4)" "$IDE"
end_session e1
check "the embedded helper left no link" eventually no_sl_links_but 0
# the helper finishes its kernel clean-up after it let the client go (netd/embedded.c)
no_ruleset() { [ -z "$(nft list ruleset | grep -v '^$')" ]; }
check "the embedded helper left no nft table" eventually no_ruleset
out=$($NOBODY "$CLIENT" attach /run/netns/m1 "$LAB_DIR/tmp/upolicy.json" 2>&1 </dev/null)
check_match "an unprivileged user without sluiced is told how to start it" "systemctl start sluiced" "$out"

done_testing
