#!/usr/bin/env bash
# sluiced's Prometheus metrics (docs/operations.md, "Metrics"): served on RUN_DIR/metrics.sock, on a
# loopback TCP address with --metrics-listen, and by `sluicectl metrics`; the counters move with traffic
# (sessions, setup latency, decisions by protocol/verdict/reason, DNS by verdict, bytes, tunnels open,
# teardown); label sets are bounded (no host or session label); only loopback addresses are accepted.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl nft "$LAB_PYTHON"

B=$SLUICE_BUILD_DIR
CLIENT=$B/tests/integration/netd-testclient
CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
GW4=100.64.0.1
export SLUICE_RUN_DIR=$RUN

lab_internet_up
POLICY=$LAB_DIR/tmp/policy.json
echo '{ "allow": ["allowed.test"] }' >"$POLICY"
chmod 0644 "$POLICY"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply

# metric NAME{LABELS}: its value from `sluicectl metrics` (empty when absent)
metric() { "$CTL" metrics | awk -v k="$1" '$1 == k { print $2 }'; }
# grows NAME BEFORE: the metric is now above BEFORE
grows() { local v; v=$(metric "$1"); [ -n "$v" ] && awk -v a="$v" -v b="$2" 'BEGIN { exit !(a > b) }'; }

check_not "--metrics-listen refuses a non-loopback address" "$B/netd/sluiced" --run-dir /run/sl-x \
	--audit-log "$LAB_DIR/x.log" --metrics-listen 198.18.0.1:9477
out=$("$B/netd/sluiced" --run-dir /run/sl-x --audit-log "$LAB_DIR/x.log" --metrics-listen 198.18.0.1:9477 2>&1)
check_match "... saying only loopback" 'only a loopback address' "$out"

check "sluiced starts with --metrics-listen 127.0.0.1:9477" start_sluiced -- --metrics-listen 127.0.0.1:9477
check_eq "no session yet" 0 "$(metric sluice_sessions_live)"
check "the Unix socket serves /metrics" sh -c "curl -sf --unix-socket $RUN/metrics.sock http://sluiced/metrics | grep -q '^sluice_sessions_live 0'"
check "the loopback TCP address serves /metrics" sh -c "curl -sf http://127.0.0.1:9477/metrics | grep -q '^# TYPE sluice_decisions_total counter'"
check_eq "another path is 404" 404 "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9477/x)"
check_eq "POST is refused (405)" 405 "$(curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:9477/metrics)"
check_eq "HEAD is answered without a body" "200 0" "$(curl -s -I -o /dev/null -w '%{http_code} %{size_download}' http://127.0.0.1:9477/metrics)"
check_eq "a head of 9 KiB is refused (431)" 431 "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 9000 /dev/zero | tr '\0' a)" http://127.0.0.1:9477/metrics)"

# Any local user can connect to --metrics-listen: 200 idle connections and one that sends a byte every
# 0.25 s (evhttp restarted its timeout at each byte) must not hold sluiced's descriptors, and a scrape
# still works meanwhile.
out=$("$LAB_PYTHON" - "$(lab_pid sluiced)" <<-'PY'
	import os, socket, sys, time
	fds = lambda: len(os.listdir("/proc/%s/fd" % sys.argv[1]))
	before = fds()
	held = [socket.create_connection(("127.0.0.1", 9477)) for _ in range(200)]
	slow = socket.create_connection(("127.0.0.1", 9477))
	time.sleep(0.5)
	grown = fds() - before
	s = socket.create_connection(("127.0.0.1", 9477), timeout=3)
	s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	got = b""
	while True:
	    b = s.recv(65536)
	    if not b:
	        break
	    got += b
	scrape = "ok" if b"\nsluice_sessions_live " in got else "failed"
	slow.settimeout(0.25)
	t, cut = time.time(), "never"
	while time.time() - t < 9:
	    try:
	        slow.send(b"x")
	        if slow.recv(1) == b"":
	            cut = "%.0f" % (time.time() - t)
	            break
	    except socket.timeout:
	        pass
	    except OSError:
	        cut = "%.0f" % (time.time() - t)
	        break
	print("grown=%s scrape=%s cut=%s" % ("<=64" if grown <= 66 else grown, scrape, cut))
PY
)
check_match "200 held connections take at most 64 of sluiced's descriptors; a scrape is served" 'grown=<=64 scrape=ok' "$out"
check_match "a connection that trickles bytes is closed at its 5 s deadline" 'cut=[3-6]$' "$out"
echo "# $out"
check_eq "the socket is not world-accessible" 660 "$(stat -c %a $RUN/metrics.sock)"

check "a session opens" session s1
check_eq "sessions_live is 1" 1 "$(metric sluice_sessions_live)"
check_eq "sessions_created_total is 1" 1 "$(metric sluice_sessions_created_total)"
check_eq "the setup latency histogram has one observation" 1 "$(metric sluice_session_setup_seconds_count)"
check_not "sluiced refuses a second session for the same namespace" sh -c \
	"'$CLIENT' attach /run/netns/s1 '$POLICY' again </dev/null 2>&1 | grep -q '^proxy_port='"
check_eq "... which counts as failed" 1 "$(metric sluice_sessions_failed_total)"

K='sluice_decisions_total{protocol="http",verdict="allow",reason="rule"}'
D='sluice_decisions_total{protocol="http",verdict="deny",reason="no_rule"}'
C='sluice_decisions_total{protocol="connect",verdict="allow",reason="rule"}'
a0=$(metric "$K") d0=$(metric "$D") up0=$(metric 'sluice_bytes_total{direction="up"}') dn0=$(metric 'sluice_bytes_total{direction="down"}')
lab_exec s1 curl -s -o /dev/null -m 10 -x "http://$GW4:3128" http://allowed.test/m1
lab_exec s1 curl -s -o /dev/null -m 10 -x "http://$GW4:3128" http://allowed.test/m2
lab_exec s1 curl -s -o /dev/null -m 10 -x "http://$GW4:3128" http://evil.test/m3
check "allowed HTTP decisions count (by the rule)" eventually grows "$K" "$a0"
check "denied HTTP decisions count (no rule)" eventually grows "$D" "$d0"
check "bytes up count" eventually grows 'sluice_bytes_total{direction="up"}' "$up0"
check "bytes down count" eventually grows 'sluice_bytes_total{direction="down"}' "$dn0"

q0=$(metric 'sluice_dns_queries_total{verdict="deny"}') qa0=$(metric 'sluice_dns_queries_total{verdict="allow"}')
lab_exec s1 "$LAB_PYTHON" - "$GW4" <<-'PY'
	import socket, struct, sys
	for i, name in enumerate(["allowed.test", "evil.test"]):
	    q = struct.pack(">HHHHHH", i + 1, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0\0\1\0\1"
	    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.sendto(q, (sys.argv[1], 53)); s.recv(4096)
PY
check "denied DNS queries count" eventually grows 'sluice_dns_queries_total{verdict="deny"}' "$q0"
check "allowed DNS queries count" eventually grows 'sluice_dns_queries_total{verdict="allow"}' "$qa0"

# a CONNECT tunnel held open: tunnels_open goes up, then back down when it closes
c0=$(metric "$C")
lab_bg tunnel -n s1 "$LAB_PYTHON" -c "
import socket, time
s = socket.create_connection(('$GW4', 3128), timeout=10)
s.sendall(b'CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n')
print(s.recv(100), flush=True)
time.sleep(30)"
check "a CONNECT decision counts" eventually grows "$C" "$c0"
check_eq "... and its tunnel is open" 1 "$(eventually sh -c "[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_tunnels_open\" {print \$2}')\" = 1 ]" && echo 1)"
lab_stop tunnel
check "... and closed again when it ends" eventually sh -c "[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_tunnels_open\" {print \$2}')\" = 0 ]"

check "no label names a host or a session" sh -c "! '$CTL' metrics | grep -E 'allowed\.test|evil\.test|$(reply s1 id)'"
check_eq "every label value is one of a fixed few" "" "$("$CTL" metrics | grep -v '^#' | grep -o '="[^"]*"' | sort -u |
	grep -vxE '="(http|connect|tls-sni|dns|direct|drop|socks5|other|allow|deny|ask|rule|no_rule|up|down|[0-9.e+]+|\+Inf)"')"

kill -TERM "${HOLD[s1]}" && wait "${HOLD[s1]}" 2>/dev/null
check "the session's end counts" eventually sh -c "[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_sessions_ended_total\" {print \$2}')\" -ge 1 ]"
check_eq "sessions_live is back to 0" 0 "$(metric sluice_sessions_live)"
check_eq "the teardown histogram has an observation" 1 "$(metric sluice_session_teardown_seconds_count)"
check_eq "no audit write errors" 0 "$(metric sluice_audit_write_errors_total)"
check_eq "the engine is up" 1 "$(metric sluice_engine_up)"

done_testing
