#!/usr/bin/env bash
# Transparent mode in the lab (docs/proxy.md, "Transparent mode"): sluiced redirects a transparent session's
# TCP 80/443 to the engine, which reads the Host header or the TLS SNI, decides, resolves the name itself and
# dials the address it resolved, never the one the client aimed at. Programs that ignore proxy variables
# work; denied names, hellos without SNI, non-TLS bytes, split and truncated hellos are refused; QUIC is
# dropped; a session without the option is not redirected.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl nft openssl "$LAB_PYTHON"

B=$SLUICE_BUILD_DIR
SLUICED=$B/netd/sluiced
CLIENT=$B/tests/integration/netd-testclient
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
GW4=100.64.0.1
export SLUICE_RUN_DIR=$RUN

lab_internet_up
lab_forward on # only sluice's rules stand between a session and the internet
mkdir -p "$LAB_DIR/etc-sluice"

TPOL=$LAB_DIR/tmp/transparent.json PPOL=$LAB_DIR/tmp/plain.json
echo '{ "options": {"transparent": true}, "allow": ["allowed.test"] }' >"$TPOL"
echo '{ "allow": ["allowed.test"] }' >"$PPOL"
chmod 0644 "$TPOL" "$PPOL"

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
audit_has() { grep -q -- "$1" "$AUDIT"; }

check "sluiced starts" start_sluiced
check "a transparent session opens" session t1 "$TPOL"
check "a plain session opens" session p1 "$PPOL"
T1=$(reply t1 id) P1=$(reply p1 id)
nft list map inet sluice tredir >"$LAB_DIR/tmp/tredir"
sed 's/^/# /' "$LAB_DIR/tmp/tredir"
check "the redirect map holds the transparent session's ports" \
	sh -c "grep -q '\"sl-$T1\" . 80 : 3129' '$LAB_DIR/tmp/tredir' && grep -q '\"sl-$T1\" . 443 : 3129' '$LAB_DIR/tmp/tredir'"
check_not "the plain session has no redirect" grep -q "sl-$P1" "$LAB_DIR/tmp/tredir"

# A program that ignores proxy variables, aiming at evil.test's address: the engine reads the name and dials
# allowed.test's address, which the web server reports as the address it was reached on.
out=$(lab_exec t1 curl -sS -m 10 --noproxy '*' --cacert "$LAB_CA" --resolve "allowed.test:443:$LAB_EVIL4" \
	https://allowed.test/tp-https 2>&1)
check_match "HTTPS to allowed.test works without a proxy setting" '"target": *"/tp-https"' "$out"
check_match "... through the address the engine resolved, not the one the client aimed at" \
	"\"addr\": *\"$LAB_ALLOWED4\"" "$out"
check "the audit line says tls-sni, allow, allowed.test:443" eventually audit_has \
	"\"session\":\"$T1\".*\"protocol\":\"tls-sni\",\"host\":\"allowed.test\",\"port\":443,.*\"decision\":\"allow\""

out=$(lab_exec t1 curl -sS -m 10 --noproxy '*' --resolve "allowed.test:80:$LAB_EVIL4" http://allowed.test/tp-http 2>&1)
check_match "plain HTTP to allowed.test works without a proxy setting" '"target": *"/tp-http"' "$out"
check_match "... through the resolved address" "\"addr\": *\"$LAB_ALLOWED4\"" "$out"
check "the audit line says http, allow, allowed.test:80" eventually audit_has \
	"\"session\":\"$T1\",.*\"protocol\":\"http\",\"host\":\"allowed.test\",\"port\":80,\"method\":\"GET\",\"decision\":\"allow\""

out=$(lab_exec t1 curl -sS -m 10 --noproxy '*' --cacert "$LAB_CA" --resolve "allowed.test:443:[$LAB_EVIL6]" \
	https://allowed.test/tp6-https 2>&1)
check_match "over IPv6 too: HTTPS to allowed.test works without a proxy setting" '"target": *"/tp6-https"' "$out"
check_match "... through an address the engine resolved for allowed.test" \
	"\"addr\": *\"($LAB_ALLOWED4|$LAB_ALLOWED6)\"" "$out"
out=$(lab_exec t1 curl -sS -m 10 --noproxy '*' --resolve "allowed.test:80:[$LAB_EVIL6]" http://allowed.test/tp6-http 2>&1)
check_match "over IPv6 too: plain HTTP to allowed.test works" '"target": *"/tp6-http"' "$out"
check_not "HTTPS to evil.test is refused" lab_exec t1 curl -sS -m 10 --noproxy '*' --cacert "$LAB_CA" \
	--resolve "evil.test:443:$LAB_EVIL4" https://evil.test/x
check "... and audited as a tls-sni denial" eventually audit_has \
	"\"protocol\":\"tls-sni\",\"host\":\"evil.test\",\"port\":443,.*\"decision\":\"deny\""
check_eq "plain HTTP to evil.test gets a 403" "403" \
	"$(lab_exec t1 curl -s -o /dev/null -w '%{http_code}' -m 10 --noproxy '*' --resolve "evil.test:80:$LAB_EVIL4" \
		http://evil.test/x)"
check_not "neither reached the internet" grep -q "evil.test" <(lab_http_requests)

# hostile and broken hellos, raw
hello() { # hello MODE: a real ClientHello for allowed.test (python's ssl), sent as MODE says; prints what came back
	lab_exec t1 "$LAB_PYTHON" - "$1" "$LAB_ALLOWED4" <<-'PY'
		import socket, ssl, sys, time
		mode, addr = sys.argv[1], sys.argv[2]
		def client_hello(sni):
		    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
		    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
		    obj = ctx.wrap_bio(i, o, server_hostname=sni)
		    try: obj.do_handshake()
		    except ssl.SSLWantReadError: pass
		    return o.read()
		def split(rec, n):  # the handshake message of one record re-framed as n records
		    body = rec[5:]; step = -(-len(body) // n); out = b""
		    for k in range(0, len(body), step): out += rec[:3] + len(body[k:k + step]).to_bytes(2, "big") + body[k:k + step]
		    return out
		ch = client_hello("allowed.test")
		data = {"split2": split(ch, 2), "split5": split(ch, 5), "nosni": client_hello(None),
		        "garbage": b"SSH-2.0-OpenSSH_9.6\r\n", "truncated": ch[:40],
		        "ip": client_hello(addr)}[mode]
		s = socket.create_connection((addr, 443), timeout=20)
		s.sendall(data)
		try:
		    r = s.recv(5)
		    print("alert" if r[:1] == b"\x15" else "handshake" if r[:1] == b"\x16" else "closed" if not r else "other")
		except socket.timeout:
		    print("timeout")
	PY
}
check_eq "a ClientHello split over 2 records is reassembled and passed" handshake "$(hello split2)"
check_eq "a ClientHello split over 5 records is refused" alert "$(hello split5)"
check "... audited" eventually audit_has '"protocol":"tls-sni".*"decision":"deny".*split over too many records'
check_eq "a ClientHello without SNI is refused" alert "$(hello nosni)"
check "... audited" eventually audit_has '"protocol":"tls-sni".*"decision":"deny".*without a server name'
check_eq "bytes that are not TLS on port 443 are refused" alert "$(hello garbage)"
check_eq "an IP address as the server name is refused" alert "$(hello ip)"
t0=$(_lab_now_ms)
check_eq "a truncated ClientHello is refused when the header timeout ends" alert "$(hello truncated)"
check "... after the header timeout (10 s), not at once" test $(($(_lab_now_ms) - t0)) -ge 9000
check "... audited" eventually audit_has '"protocol":"tls-sni".*"decision":"deny".*no complete ClientHello within'

# QUIC: UDP 443 from a session is dropped (nothing routes a session's packets) and audited as a drop
lab_bg quic -n inet "$LAB_PYTHON" -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 443))
print("bound", flush=True)
while True:
    d, a = s.recvfrom(2048); open(sys.argv[1], "a").write("got %d\n" % len(d))' "$LAB_DIR/tmp/quic.got"
# (it listens before the datagrams go, or "never reaches the internet" below would prove nothing: a fixed
# 0.3 s could end before a loaded machine had started python)
for _ in $(seq 100); do grep -q '^bound' "$(lab_log quic)" 2>/dev/null && break; sleep 0.05; done
check "(test) the internet's UDP 443 listens" grep -q '^bound' "$(lab_log quic)"
lab_exec t1 "$LAB_PYTHON" -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3): s.sendto(b'\xc0' + b'\0' * 1199, ('$LAB_ALLOWED4', 443))"
check "QUIC (UDP 443) from a session is dropped and audited" eventually audit_has \
	"\"session\":\"$T1\".*\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":443,\"method\":\"udp\""
check_not "... and never reaches the internet" test -s "$LAB_DIR/tmp/quic.got"

# a session without the option is not redirected: its direct connections are dropped
check_not "the plain session's direct HTTPS is dropped" lab_exec p1 curl -s -m 3 --noproxy '*' --cacert "$LAB_CA" \
	--resolve "allowed.test:443:$LAB_ALLOWED4" https://allowed.test/
check_not "the plain session cannot use the transparent port on the gateway" \
	lab_exec p1 curl -s -m 3 --noproxy '*' "http://$GW4:3129/"
out=$(lab_exec p1 curl -s -m 10 -x "http://$GW4:3128" --cacert "$LAB_CA" https://allowed.test/p1)
check_match "the plain session still works through the proxy" '"target": *"/p1"' "$out"

# Domain fronting through CONNECT: the tunnel is for allowed.test, the ClientHello names evil.test
front=$(echo | lab_exec p1 timeout 10 openssl s_client -proxy "$GW4:3128" -connect allowed.test:443 \
	-servername evil.test -CAfile "$LAB_CA" 2>&1)
check_match "openssl s_client with SNI evil.test through CONNECT allowed.test:443 gets no certificate" \
	"no peer certificate available" "$front"
check_match "... it is refused with an access_denied alert" "alert access denied" "$front"
check "... audited as a connect denial naming the fronting" eventually audit_has \
	"\"protocol\":\"connect\",\"host\":\"allowed.test\",\"port\":443,\"method\":\"CONNECT\",\"decision\":\"deny\".*domain fronting: the ClientHello names .*evil.test"
check_not "curl --connect-to (CONNECT allowed.test, SNI evil.test) is refused" lab_exec p1 curl -sS -m 10 \
	-x "http://$GW4:3128" --cacert "$LAB_CA" --connect-to evil.test:443:allowed.test:443 https://evil.test/front
check_not "... and never reached the internet" grep -q '/front' <(lab_http_requests)
ok=$(echo | lab_exec p1 timeout 10 openssl s_client -proxy "$GW4:3128" -connect allowed.test:443 \
	-servername allowed.test -CAfile "$LAB_CA" 2>&1)
check_match "the same CONNECT with the matching SNI works" "Verification: OK" "$ok"

done_testing
