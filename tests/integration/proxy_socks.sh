#!/usr/bin/env bash
# proxy_socks: sluice-proxy's SOCKS5 front (docs/proxy.md, "SOCKS5") in the lab: curl with
# --socks5-hostname and --socks5 from a session namespace, and a raw client for what curl cannot send:
# allowed and denied names, SSRF (a name allowed by policy that resolves to a forbidden address, address
# literals), TLS through the tunnel and domain fronting refused, BIND / UDP ASSOCIATE / unknown address
# types / no acceptable method answered with the right codes, and the audit records.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need curl

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r _ s1g _ s1g6 _ < <(lab_session_info s1)
PROXY_EXTRA_LISTEN=",{\"kind\": \"socks5\", \"address\": \"$s1g:1080\"},{\"kind\": \"socks5\", \"address\": \"[$s1g6]:1080\"}"
proxy_start s1 '{
  "allow": [
    {"host": "allowed.test", "ports": [80, 443]},
    {"host": "private.test", "ports": [80]},
    {"host": "meta.test", "ports": [80]}
  ]
}'
lab_wait_port s1 "$s1g" 1080 "$PROXY_WAIT" || lab_bail "no SOCKS5 listener on $s1g:1080"

CURL=(lab_exec s1 curl -sS -m 10 --noproxy '' --socks5-hostname "$s1g:1080")

# ---- names, resolved by sluice (socks5h)
body=$("${CURL[@]}" http://allowed.test/hello)
check_match "socks5h: allowed name reaches the origin" '"host": ?"allowed.test"' "$body"
body=$("${CURL[@]}" --cacert "$LAB_CA" https://allowed.test/tls)
check_match "socks5h: TLS to an allowed name through the tunnel" '"host": ?"allowed.test"' "$body"
# plain HTTP in the tunnel names its host (the sixth review: a Host naming another was passed on)
out=$("${CURL[@]}" -D - -o /dev/null -H 'Host: evil.test' http://allowed.test/socks-front)
check_match "socks5h: plain HTTP naming another host in the tunnel: 400" '^HTTP/1.1 400' "$out"
check_not "... it never reached the internet" grep -q '/socks-front' <(lab_http_requests)
n=$("${CURL[@]}" --cacert "$LAB_CA" -o /dev/null -w '%{size_download}' https://allowed.test/bytes/20000000)
check_eq "socks5h: 20 MB through the tunnel" 20000000 "$n"
out=$("${CURL[@]}" http://evil.test/ 2>&1); rc=$?
check_not "socks5h: a denied name fails" test "$rc" -eq 0
check_match "socks5h: the client is told the reply code (2: not allowed by ruleset)" '\(2\)|not allowed' "$out"
out=$("${CURL[@]}" http://allowed.test:8080/ 2>&1); rc=$?
check_not "socks5h: an allowed name on a port the policy does not name fails" test "$rc" -eq 0
out=$("${CURL[@]}" http://private.test/ 2>&1); rc=$?
check_not "socks5h: a name allowed by policy that resolves to a private address is refused (SSRF)" test "$rc" -eq 0
out=$("${CURL[@]}" http://meta.test/ 2>&1); rc=$?
check_not "socks5h: a name that resolves to the metadata address is refused (SSRF)" test "$rc" -eq 0
out=$(lab_exec s1 curl -sS -m 10 --noproxy '' --socks5-hostname "[$s1g6]:1080" http://allowed.test/hello 2>&1)
check_match "socks5h over IPv6: allowed name reaches the origin" '"host": ?"allowed.test"' "$out"

# ---- addresses (socks5: the client resolved; the literal is decided as such)
out=$(lab_exec s1 curl -sS -m 10 --noproxy '' --socks5 "$s1g:1080" "http://$LAB_ALLOWED4/" 2>&1); rc=$?
check_not "socks5: an address literal the policy does not allow is refused" test "$rc" -eq 0
for a in 127.0.0.1 "$s1g" 169.254.169.254 10.255.255.1; do
	out=$(lab_exec s1 curl -sS -m 10 --noproxy '' --socks5 "$s1g:1080" "http://$a/" 2>&1); rc=$?
	check_not "socks5: $a is refused" test "$rc" -eq 0
done

# ---- a raw client: what curl does not send
# socks_raw GREETING_HEX REQUEST_HEX [TLS_SNI]: prints the method reply, the request reply code and, with
# TLS_SNI, "tls-ok" or "tls-refused" for a TLS handshake with that server name through the tunnel.
socks_raw() {
	lab_exec s1 "$LAB_PYTHON" - "$s1g" "$1" "${2:-}" "${3:-}" "$LAB_CA" <<-'PY'
		import socket, ssl, sys
		gw, greet, req, sni, ca = sys.argv[1:6]
		s = socket.create_connection((gw, 1080), timeout=5)
		def recvn(n):
		    d = b''
		    while len(d) < n:
		        c = s.recv(n - len(d))
		        if not c:
		            break
		        d += c
		    return d
		s.sendall(bytes.fromhex(greet))
		m = recvn(2)
		out = ['method=' + (m.hex() if m else 'closed')]
		if req and len(m) == 2 and m[1] == 0:
		    s.sendall(bytes.fromhex(req))
		    r = recvn(10)
		    out.append('rep=' + (('%02x' % r[1]) if len(r) >= 2 else 'closed'))
		    if sni and len(r) >= 2 and r[1] == 0:
		        ctx = ssl.create_default_context(cafile=ca)
		        ctx.check_hostname = False
		        ctx.verify_mode = ssl.CERT_NONE
		        try:
		            t = ctx.wrap_socket(s, server_hostname=sni)
		            out.append('tls-ok')
		        except (ssl.SSLError, OSError):
		            out.append('tls-refused')
		print(' '.join(out))
	PY
}
name_hex() { printf '%02x' "${#1}"; printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
allowed443="05010003$(name_hex allowed.test)01bb"
check_eq "raw: CONNECT to an allowed name" "method=0500 rep=00" "$(socks_raw 050100 "$allowed443")"
check_eq "raw: BIND gets COMMAND NOT SUPPORTED" "method=0500 rep=07" "$(socks_raw 050100 "05020003$(name_hex allowed.test)0050")"
check_eq "raw: UDP ASSOCIATE gets COMMAND NOT SUPPORTED" "method=0500 rep=07" "$(socks_raw 050100 05030001000000000000)"
check_eq "raw: an unknown address type gets ADDRESS TYPE NOT SUPPORTED" "method=0500 rep=08" "$(socks_raw 050100 05010009000000000050)"
check_eq "raw: a denied name gets NOT ALLOWED BY RULESET" "method=0500 rep=02" "$(socks_raw 050100 "05010003$(name_hex evil.test)0050")"
check_eq "raw: only username/password offered gets NO ACCEPTABLE METHODS" "method=05ff" "$(socks_raw 050102)"
check_eq "raw: SOCKS4 is closed without an answer" "method=closed" "$(socks_raw 040100500102030400)"
check_eq "raw: TLS naming the decided host passes" "method=0500 rep=00 tls-ok" "$(socks_raw 050100 "$allowed443" allowed.test)"
check_eq "raw: TLS naming another host (domain fronting) is refused" "method=0500 rep=00 tls-refused" \
	"$(socks_raw 050100 "$allowed443" evil.test)"

# ---- the audit log
r=$(audit_find 'r["protocol"]=="socks5" and r["host"]=="allowed.test" and r.get("bytes_in", 0) > 20000000')
check_eq "audit: the 20 MB tunnel's close record" allow "$(jget "$r" decision)"
check_match "audit: the deciding rule" 'policy-s1.json:[0-9]+:[0-9]+$' "$(jget "$r" rule)"
r=$(audit_find 'r["protocol"]=="socks5" and r["host"]=="evil.test"')
check_eq "audit: the denied name" deny "$(jget "$r" decision)"
r=$(audit_find 'r["protocol"]=="socks5" and r["host"]=="private.test"')
check_eq "audit: the SSRF refusal" deny "$(jget "$r" decision)"
r=$(audit_find 'r["protocol"]=="socks5" and "UDP" in (r.get("reason") or "")')
check_eq "audit: UDP ASSOCIATE refused and recorded" deny "$(jget "$r" decision)"
r=$(audit_find 'r["protocol"]=="socks5" and "fronting" in (r.get("reason") or "")')
check_eq "audit: domain fronting recorded" deny "$(jget "$r" decision)"
check_eq "audit: the chain verifies" 0 "$("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$PROXY_AUDIT" >/dev/null 2>&1; echo $?)"

lab_stop proxy
check_eq "sluice-proxy exits cleanly" 0 "$LAB_STOP_STATUS"
done_testing
