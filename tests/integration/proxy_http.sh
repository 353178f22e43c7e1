#!/usr/bin/env bash
# proxy_http: sluice-proxy as an HTTP forward proxy and CONNECT proxy in the lab, with curl as the client
# from a session namespace: allowed and denied GET/POST/CONNECT, redirects passed through, every
# malformed-request case, SSRF spellings of forbidden addresses, upstream failures, and the audit log
# checked field by field.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need curl

lab_internet_up >/dev/null
lab_session s1 >/dev/null
# s2 has the same name rules plus, in its organisation layer (a project file may not open a forbidden
# range), a CIDR rule opening the private address intranet.test resolves to; the lab's internet answers
# on that address (inside the lab's own namespaces, like every other lab address).
lab_session s2 >/dev/null
read -r s2a s2g s2a6 s2g6 _ < <(lab_session_info s2)
LAB_INTRANET4=10.255.255.2
lab_dns_add intranet.test "$LAB_INTRANET4"
lab_inet_addr "$LAB_INTRANET4"
ip route add "$LAB_INTRANET4/32" via "$LAB_INET4" || lab_bail "route to $LAB_INTRANET4"
mkdir -p "$LAB_DIR/proxy"
printf '{"allow": [{"host": "intranet.test", "ports": [80]}, {"host": "allowed.test", "ports": [80]}]}\n' >"$LAB_DIR/proxy/intranet-name.json"
printf '{"allow": [{"cidr": "10.255.255.0/24", "ports": [80]}]}\n' >"$LAB_DIR/proxy/intranet-cidr.json"
PROXY_EXTRA_SESSIONS=",{\"id\": \"s2\", \"addr4\": \"$s2a\", \"gw4\": \"$s2g\", \"addr6\": \"$s2a6\", \"gw6\": \"$s2g6\",
  \"policy\": {\"files\": [\"$LAB_DIR/proxy/intranet-name.json\"], \"org_files\": [\"$LAB_DIR/proxy/intranet-cidr.json\"]}}"
PROXY_EXTRA_LISTEN=",{\"kind\": \"http\", \"address\": \"$s2g:3128\"}"
proxy_start s1 '{
  "allow": [
    {"host": "allowed.test", "ports": [80, 443, 8080, 9090]},
    {"host": "registry.test", "ports": [80, 443]},
    {"host": "private.test", "ports": [80]},
    {"host": "intranet.test", "ports": [80]},
    {"host": "meta.test", "ports": [80]},
    {"host": "nxdomain.test", "ports": [80]},
    {"host": "closed.test", "ports": [81]},
    {"host": "*.allowed.test", "ports": [80], "methods": ["GET", "HEAD"]}
  ],
  "deny": ["evil.allowed.test"]
}'
lab_dns_add closed.test "$LAB_ALLOWED4"

CURL=(lab_exec s1 curl -sS -m 10 --noproxy '' -x "$PROXY_URL")

# ---- allowed and denied requests
body=$("${CURL[@]}" http://allowed.test/hello?x=1)
check_match "allowed GET reaches the origin" '"target": ?"/hello\?x=1"' "$body"
check_match "origin sees an origin-form target and our Host" '"host": ?"allowed.test"' "$body"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -d 'a=1&b=2' http://allowed.test/post)
check_eq "allowed POST" 200 "$code"
body=$("${CURL[@]}" --data-binary @<(head -c 3000000 /dev/zero) -H 'Expect:' http://allowed.test/upload)
check_match "3 MB POST body streamed completely" '"body_length": ?3000000' "$body"
body=$("${CURL[@]}" -H 'Transfer-Encoding: chunked' --data-binary @<(head -c 200000 /dev/zero) http://allowed.test/chunked)
check_match "chunked POST body passed through" '"body_length": ?200000' "$body"
n=$("${CURL[@]}" -o /dev/null -w '%{size_download}' http://allowed.test/bytes/5000000)
check_eq "5 MB response streamed" 5000000 "$n"
# Bodies of 256 KiB and more pass through a pipe (splice); the bytes, the framing and keep-alive must not change.
sha() { "$LAB_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import fakenet; print(fakenet.bytes_sha256(int(sys.argv[2])))' "$LAB_LIB_DIR" "$1"; }
got=$("${CURL[@]}" http://allowed.test/bytes/20000001 | sha256sum | cut -d' ' -f1)
check_eq "20 MB Content-Length response (splice path): every byte" "$(sha 20000001)" "$got"
got=$("${CURL[@]}" http://allowed.test/chunked/20000001 | sha256sum | cut -d' ' -f1)
check_eq "20 MB chunked response: every byte, framing removed by curl" "$(sha 20000001)" "$got"
# Chunk framing the proxy refuses in the middle of a spliced chunked body (after 3 MB in 64 KiB chunks): the
# client gets the body before it and none of it, then the close; the audit record says why. The CRLF that ends
# the last good chunk goes too when it arrived in a read of its own (the framer saw it valid and moved it),
# and stays when it was peeked with the bad line (refused together): the two counts are both right, and no
# byte of the bad line is in either (a test that expected one of them failed now and then).
framed=$("$LAB_PYTHON" -c '
n, s = 3000000, 0
while n > 0:
    c = min(n, 65536)
    s, n = s + len(b"%x\r\n" % c) + c + 2, n - c
print(s - 2)')
"${CURL[@]}" --raw -o "$LAB_DIR/bad.out" http://allowed.test/badchunk/3000000 2>/dev/null
got=$(wc -c <"$LAB_DIR/bad.out")
[ "$got" = $((framed + 2)) ] && [ "$(tail -c 2 "$LAB_DIR/bad.out" | od -An -tx1 | tr -d ' ')" = 0d0a ] && got=$framed
check_eq "bad chunk framing after 3 MB (splice path): every byte before it, none of it" "$framed" "$got"
check_eq "bad chunk framing: the client got the chunks' data" "$(sha 3000000)" \
	"$("$LAB_PYTHON" -c '
import hashlib, sys
b, h = open(sys.argv[1], "rb").read(), hashlib.sha256()
b = b if b.endswith(b"\r\n") else b + b"\r\n"
while b:
    i = b.index(b"\r\n")
    n = int(b[:i], 16)
    h.update(b[i + 2:i + 2 + n])
    b = b[i + 4 + n:]
print(h.hexdigest())' "$LAB_DIR/bad.out")"
out=$("${CURL[@]}" -o /dev/null -o /dev/null -w '%{size_download} %{num_connects}\n' \
	http://allowed.test/bytes/3000000 http://allowed.test/bytes/1000 | tr '\n' ' ')
check_eq "keep-alive after a spliced body: second response on the same connection" "3000000 1 1000 0 " "$out"
out=$("${CURL[@]}" -D - -o /dev/null http://evil.test/)
check_match "denied host: 403" '^HTTP/1.1 403' "$out"
check_match "denial carries X-Sluice-Decision" 'X-Sluice-Decision: deny' "$out"
body=$("${CURL[@]}" http://evil.test/)
check_match "403 body names the host and how to allow it" 'host: +evil.test' "$body"
check_match "403 body says how to allow" 'allow evil.test:80' "$body"
out=$("${CURL[@]}" -D - -o /dev/null http://evil.allowed.test/)
check_match "deny rule beats wildcard allow, rule quoted" 'X-Sluice-Decision: deny; rule=.*policy-s1.json:[0-9]+:[0-9]+' "$out"
body=$("${CURL[@]}" http://evil.allowed.test/)
check_match "403 body of an explicit deny names the deciding rule file:line:col" \
	"rule: +$LAB_DIR/proxy/policy-s1.json:[0-9]+:[0-9]+" "$body"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -X DELETE http://x.allowed.test/)
check_eq "method not allowed by the rule: 403" 403 "$code"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://allowed.test:8443/)
check_eq "port not allowed: 403" 403 "$code"

# ---- keep-alive: several requests on one connection, each decided on its own
out=$("${CURL[@]}" -v http://allowed.test/a http://allowed.test/b http://evil.test/c 2>&1)
check_match "keep-alive: connection reused" 'Re-using existing connection' "$out"
check_eq "keep-alive: two allowed, one denied" "2 1" \
	"$(grep -c '^< HTTP/1.1 200' <<<"$out") $(grep -c '^< HTTP/1.1 403' <<<"$out")"

# ---- pipelined requests in one write: answered in order, the denied one between (an allowed response
# is sent at the end of the engine's loop iteration, our own 403 at once: the order must hold)
out=$(lab_exec s1 "$LAB_PYTHON" - "$PROXY_GW" <<'PY'
import re, socket, sys
s = socket.create_connection((sys.argv[1], 3128), timeout=5)
req = lambda host, path: ("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, path, host)).encode()
s.sendall(req("allowed.test", "/p1") + req("evil.test", "/p2") + req("allowed.test", "/p3") + req("allowed.test", "/p4"))
buf, out = b"", []
while len(out) < 4:
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            sys.exit("closed after %d responses" % len(out))
        buf += c
    head, buf = buf.split(b"\r\n\r\n", 1)
    n = int(re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head).group(1))
    while len(buf) < n:
        buf += s.recv(4096)
    body, buf = buf[:n], buf[n:]
    t = re.search(rb'"target": ?"([^"]*)"', body)
    out.append(head.split(b" ")[1].decode() + (":" + t.group(1).decode() if t else ""))
print(" ".join(out))
PY
)
check_eq "pipelined requests: answered in order, the denied one in its place" "200:/p1 403 200:/p3 200:/p4" "$out"

# ---- a kept-alive upstream that closes as it is reused: the request (no body) is retried once
lab_bg oneshot -n inet "$LAB_PYTHON" "$SLUICE_SOURCE_DIR/tests/lib/oneshot-server.py" 9090
lab_wait_port inet "$LAB_ALLOWED4" 9090 5
out=$("${CURL[@]}" -v http://allowed.test:9090/one http://allowed.test:9090/two 2>&1)
check_eq "upstream closed a reused connection: both requests answered" 2 "$(grep -c '^oneshot$' <<<"$out")"

# ---- hop-by-hop fields (RFC 9110 7.6.1) and those named by Connection are removed; end-to-end ones pass
body=$("${CURL[@]}" -H 'Connection: X-Foo' -H 'X-Foo: 1' -H 'Proxy-Authorization: x' -H 'Keep-Alive: 5' \
	-H 'TE: trailers' -H 'Proxy-Connection: keep-alive' -H 'X-End-To-End: kept' http://allowed.test/hop)
names=$("$LAB_PYTHON" -c 'import json,sys; print(" ".join(sorted(k.lower() for k, v in json.loads(sys.stdin.read())["headers"])))' <<<"$body")
check_match "hop-by-hop: the end-to-end header reaches the origin" '(^| )x-end-to-end( |$)' "$names"
for h in connection x-foo proxy-authorization keep-alive te proxy-connection; do
	check_not "hop-by-hop: $h is not forwarded to the origin" grep -qw -- "$h" <<<"${names// /$'\n'}"
done

# ---- a CIDR rule opens a private range: the same name is refused without it (s1) and allowed with it
CURL2=(lab_exec s2 curl -sS -m 10 --noproxy '' -x "http://$s2g:3128")
lab_dns_mark
out=$("${CURL[@]}" -D - http://intranet.test/ 2>&1)
check_match "private address without a CIDR rule -> 403" '^HTTP/1.1 403' "$out"
check_match "the 403 names the forbidden address" "address $LAB_INTRANET4 is in a forbidden range" "$out"
body=$("${CURL2[@]}" http://intranet.test/cidr 2>&1)
check_match "private address with a {\"cidr\": ...} rule -> reaches the origin" '"target": ?"/cidr"' "$body"
check_match "the origin was reached on the private address" "\"addr\": ?\"$LAB_INTRANET4\"" "$body"
# ... and again: each session resolved the name once and keeps its addresses for the TTL (the lab's 60 s;
# addr_cache.c), per session, and checks them again at every use
out=$("${CURL[@]}" -D - http://intranet.test/ 2>&1)
check_match "address cache: s1's kept address is checked again: still 403" '^HTTP/1.1 403' "$out"
body=$("${CURL2[@]}" http://intranet.test/again 2>&1)
check_match "address cache: s2 reaches the origin again" '"target": ?"/again"' "$body"
sleep 0.2
check_eq "address cache: the upstream was asked once per session and family (2 sessions x A, AAAA)" 4 \
	"$(lab_dns_queries | grep -cx intranet.test)"

# ---- idle upstream connections are kept per session across client connections (up_pool.c): one curl
# (one client connection) per request, one upstream connection, which the origin sees as one client port
cport() { "$LAB_PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.read() or "{}").get("client", {}).get("port", ""))'; }
p1=$("${CURL[@]}" http://allowed.test/pool1 | cport)
p2=$("${CURL[@]}" http://allowed.test/pool2 | cport)
p3=$("${CURL[@]}" http://allowed.test/pool3 | cport)
check "pool: three client connections of s1 went over one upstream connection ($p1 $p2 $p3)" \
	test -n "$p1" -a "$p1" = "$p2" -a "$p2" = "$p3"
r=$(audit_find 'r["host"]=="allowed.test" and r["event"]=="close"')
check_eq "pool: the close record of a request on a kept connection names its address" "$LAB_ALLOWED4:80" "$(jget "$r" address)"
check "pool: ... and counts its bytes" test "$(jget "$r" bytes_in)" -gt 100 -a "$(jget "$r" bytes_out)" -gt 20
q1=$("${CURL2[@]}" http://allowed.test/pool-s2 | cport)
q2=$("${CURL2[@]}" http://allowed.test/pool-s2 | cport)
check "pool: s2 never takes s1's connection ($q1 vs $p1)" test -n "$q1" -a "$q1" != "$p1"
check_eq "pool: s2 keeps its own" "$q1" "$q2"
check_eq "pool: s1 still has its own" "$p1" "$("${CURL[@]}" http://allowed.test/pool4 | cport)"
# a response followed by bytes nobody asked for (a smuggled second response): that connection is never used again
pe=$("${CURL[@]}" http://allowed.test/extra | cport)
body=$("${CURL[@]}" -i http://allowed.test/after-extra)
check_not "pool: the bytes after a response never reach the next client" grep -q smuggled <<<"$body"
check "pool: the connection that sent them was not kept" test -n "$pe" -a "$(cport <<<"${body#*$'\r\n\r\n'}")" != "$pe"
pc=$("${CURL[@]}" http://allowed.test/close | cport)
check "pool: a connection the origin closes is not kept" test -n "$pc" -a "$("${CURL[@]}" http://allowed.test/pool5 | cport)" != "$pc"
# the origin reads the next request on a kept connection and closes it unanswered (its idle timeout raced
# the request): sent again, once, on a new connection
pd=$("${CURL[@]}" http://allowed.test/dropnext | cport)
body=$("${CURL[@]}" http://allowed.test/after-drop)
check_match "pool: a kept connection closed unanswered: the request is retried and answered" '"target": ?"/after-drop"' "$body"
check "pool: ... on a new connection" test -n "$pd" -a "$(cport <<<"$body")" != "$pd"
# ... but not a POST (not idempotent: the origin may have acted on it before closing): a 502, not sent twice
"${CURL[@]}" -o /dev/null http://allowed.test/dropnext
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -X POST -H 'Content-Length: 0' http://allowed.test/after-drop-post)
check "pool: a POST on a kept connection closed unanswered is not retried (502)" test "$code" = 502
check_not "pool: ... and never reached the origin a second time" grep -q after-drop-post "$LAB_DIR/log/http-inet.jsonl"

# one client connection, requests to two hosts in turn: the upstream of the first host waits in the pool
# while the second is served, and the third request (the first host again) takes it back
ports=$("${CURL[@]}" http://x.allowed.test/h1 http://allowed.test/h2 http://x.allowed.test/h3 | "$LAB_PYTHON" -c '
import json, sys
d, t, out = json.JSONDecoder(), sys.stdin.read(), []
i = 0
while i < len(t):
    if t[i].isspace():
        i += 1
        continue
    o, i = d.raw_decode(t, i)
    out.append(str(o["client"]["port"]))
print(" ".join(out))')
read -r h1 h2 h3 <<<"$ports"
check "pool: a client connection's upstream for another host is kept for the session ($ports)" \
	test -n "$h3" -a "$h1" = "$h3" -a "$h1" != "$h2"
# an HTTP/1.0 client (ab, old tools): its request goes upstream as HTTP/1.1 (the proxy's own version), so
# the upstream connection is kept for the next one; a chunked answer reaches it unframed, up to the close
b1=$("${CURL[@]}" -0 http://allowed.test/v10a)
check_match "HTTP/1.0 client: the origin gets HTTP/1.1" '"version": ?"HTTP/1.1"' "$b1"
check_eq "HTTP/1.0 clients: one upstream connection for two" "$(cport <<<"$b1")" "$("${CURL[@]}" -0 http://allowed.test/v10b | cport)"
http10() {
	lab_exec s1 "$LAB_PYTHON" - "$PROXY_GW" "$1" <<-'PY'
		import hashlib, socket, sys
		s = socket.create_connection((sys.argv[1], 3128), timeout=10)
		s.sendall(b"GET http://allowed.test%s HTTP/1.0\r\n\r\n" % sys.argv[2].encode())
		data = b""
		while True:
		    c = s.recv(65536)
		    if not c:
		        break
		    data += c
		head, _, body = data.partition(b"\r\n\r\n")
		print(head.split(b"\r\n")[0].decode(), "te" if b"transfer-encoding" in head.lower() else "no-te",
		      len(body), hashlib.sha256(body).hexdigest())
	PY
}
check_eq "HTTP/1.0 client: a 3 MB chunked answer unframed, every byte, ended by the close" \
	"HTTP/1.1 200 OK no-te 3000000 $(sha 3000000)" "$(http10 /chunked/3000000)"
check_match "HTTP/1.0 client: a small chunked answer unframed" '^HTTP/1.1 200 OK no-te [0-9]+ ' "$(http10 /chunked)"

# ---- redirects are passed to the client, never followed
out=$("${CURL[@]}" -D - -o /dev/null http://allowed.test/redirect/evil.test/x)
check_match "redirect passed through" '^HTTP/1.1 30[12]' "$out"
check_match "redirect Location kept" 'Location: http://evil.test/x' "$out"
check_not "the redirect target was not contacted" grep -q '"host": "evil.test"' "$LAB_DIR/log/http-inet.jsonl"

# ---- CONNECT
body=$("${CURL[@]}" --cacert "$LAB_CA" https://allowed.test/tls)
check_match "CONNECT to an allowed host: TLS works end to end" '"tls_sni": ?"allowed.test"' "$body"
n=$("${CURL[@]}" --cacert "$LAB_CA" -o /dev/null -w '%{size_download}' https://allowed.test/bytes/20000000)
check_eq "CONNECT bulk 20 MB (splice path)" 20000000 "$n"
lab_dns_mark
out=$("${CURL[@]}" --cacert "$LAB_CA" -D - -o /dev/null https://evil.test/ 2>&1)
check_match "CONNECT to a denied host: 403" '403' "$out"
sleep 0.2
check_not "a denied CONNECT name is never resolved" grep -qx 'evil.test' <(lab_dns_queries)
code=$(raw_http s1 'CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n')
check_eq "CONNECT without a port: 400" 400 "$code"
code=$(raw_http s1 'CONNECT allowed.test:0 HTTP/1.1\r\nHost: allowed.test:0\r\n\r\n')
check_eq "CONNECT to port 0: 400" 400 "$code"
code=$(raw_http s1 'CONNECT user@allowed.test:443 HTTP/1.1\r\n\r\n')
check_eq "CONNECT with userinfo: 400" 400 "$code"

# Plain HTTP inside a CONNECT tunnel (the sixth review): the tunnel's bytes were passed as they were, so a
# request naming another host in its Host header (or its absolute-form target) reached whatever the server
# at the allowed name's address hosts under that name, as TLS with another SNI would (domain fronting).
# Now each request in such a tunnel is read and decided like a forward proxy's, and must name the tunnel's host.
out=$("${CURL[@]}" -p http://allowed.test/tunnel-ok)
check_match "curl -p (CONNECT allowed.test:80, then GET): works" '"target": *"/tunnel-ok"' "$out"
out=$("${CURL[@]}" -p -D - -o /dev/null -H 'Host: evil.test' http://allowed.test/tunnel-front)
check_match "CONNECT allowed.test:80, then a GET with Host: evil.test: 400" '^HTTP/1.1 400' "$out"
check_match "... it says so" 'names another host' "$("${CURL[@]}" -p -H 'Host: evil.test' http://allowed.test/tunnel-front)"
# the status codes of the responses to bytes (printf escapes) sent at once on a connection to the proxy
tunnel_statuses() {
	lab_exec s1 "$LAB_PYTHON" - "$PROXY_GW" "$1" <<-'PY'
	import re, socket, sys
	s = socket.create_connection((sys.argv[1], 3128), timeout=5)
	s.sendall(sys.argv[2].encode().decode('unicode_escape').encode('latin-1'))
	s.settimeout(2)
	data = b''
	try:
	    while True:
	        c = s.recv(65536)
	        if not c:
	            break
	        data += c
	except socket.timeout:
	    pass
	print(' '.join(m.decode() for m in re.findall(rb'(?:^|\n)HTTP/1\.1 (\d{3}) ', data)))
	PY
}
code=$(tunnel_statuses 'CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\nGET /tunnel-a HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET http://evil.test/tunnel-abs HTTP/1.1\r\nHost: evil.test\r\n\r\n')
check_eq "a kept-alive tunnel: the first request (allowed.test) 200, the next (absolute-form, evil.test) 400" "200 200 400" "$code"
check_not "... evil.test was never asked for through the tunnel" grep -q '"host": *"evil.test' <(lab_http_requests)
r=$(audit_find 'r.get("protocol") == "http" and "names another host" in (r.get("reason") or "")')
check_match "... the refused request in the tunnel is audited (protocol http, deny)" '"decision": "deny"' "$r"
# (the seventh review) an HTTP/0.9 request line has no version, so no "HTTP/": it passed as it was, and
# servers still answer it (nginx, the lab's Python server), nginx picking the virtual host an absolute-form
# target names (GET http://evil.test/x is served as evil.test). (The front reads a head to its end: an
# empty line ends this one.)
code=$(tunnel_statuses 'CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\nGET http://evil.test/tunnel-http09\r\n\r\n')
check_eq "CONNECT allowed.test:80, then an HTTP/0.9 request line (GET http://evil.test/...): 400" "200 400" "$code"
check_not "... it never reached the internet" grep -q 'tunnel-http09' <(lab_http_requests)
# Python's http.server (the lab's internet) splits a request line on any white space: VT, a bare CR
code=$(tunnel_statuses 'CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\nGET\x0b/tunnel-vt\x0bHTTP/1.1\r\nHost: evil.test\r\n\r\n')
check_eq "CONNECT allowed.test:80, then GET<VT>/x<VT>HTTP/1.1 with Host: evil.test: 400" "200 400" "$code"
code=$(tunnel_statuses 'CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n POST\r/tunnel-cr\rHTTP/1.1\r\nHost: evil.test\r\nContent-Length: 0\r\n\r\n')
check_eq "CONNECT allowed.test:80, then ' POST<CR>/x<CR>HTTP/1.1' with Host: evil.test: 400" "200 400" "$code"
check_not "... neither reached the internet" grep -q 'tunnel-vt\|tunnel-cr' <(lab_http_requests)

# ---- malformed requests: 400 / 414 / 431 / 501 / 505
declare -A bad=(
	['both Content-Length and Transfer-Encoding']='POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n'
	['differing duplicate Content-Length']='POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd'
	['obs-fold']='GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-A: 1\r\n  folded\r\n\r\n'
	['bare LF']='GET http://allowed.test/ HTTP/1.1\nHost: allowed.test\n\n'
	['NUL in the authority']='GET http://allowed.test\x00.evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
	['control byte in the authority']='GET http://allowed\x01.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
	['userinfo in the URI']='GET http://user:pw@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
	['Host disagrees with the URI']='GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n'
	['two Host headers']='GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nHost: allowed.test\r\n\r\n'
	['bad port']='GET http://allowed.test:99999/ HTTP/1.1\r\nHost: allowed.test:99999\r\n\r\n'
	['empty port']='GET http://allowed.test:/ HTTP/1.1\r\nHost: allowed.test:\r\n\r\n'
	['non-numeric port']='GET http://allowed.test:8o/ HTTP/1.1\r\nHost: allowed.test:8o\r\n\r\n'
	['space before colon']='GET http://allowed.test/ HTTP/1.1\r\nHost : allowed.test\r\n\r\n'
	['origin-form target to a forward proxy']='GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
	['percent-encoded host']='GET http://allowed%2etest/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
	['missing Host in HTTP/1.1']='GET http://allowed.test/ HTTP/1.1\r\n\r\n'
	['garbage request line']='HELLO\r\n\r\n'
)
for k in "${!bad[@]}"; do
	check_eq "malformed: $k -> 400" 400 "$(raw_http s1 "${bad[$k]}")"
done
check_eq "unsupported Transfer-Encoding -> 501" 501 \
	"$(raw_http s1 'POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: gzip\r\n\r\n')"
check_eq "HTTP/2.0 request line -> 505" 505 "$(raw_http s1 'GET http://allowed.test/ HTTP/2.0\r\nHost: allowed.test\r\n\r\n')"
long=$(printf 'a%.0s' $(seq 1 9000))
check_eq "request line over 8 KiB -> 414" 414 "$(raw_http s1 "GET http://allowed.test/$long HTTP/1.1\r\nHost: allowed.test\r\n\r\n")"
hdrs=$(for i in $(seq 1 120); do printf 'X-H%d: v\\r\\n' "$i"; done)
check_eq "more than 100 header fields -> 431" 431 "$(raw_http s1 "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n$hdrs\r\n")"
big=$(printf 'b%.0s' $(seq 1 7000))
hdrs=$(for i in $(seq 1 10); do printf 'X-H%d: %s\\r\\n' "$i" "$big"; done)
check_eq "head over 64 KiB -> 431" 431 "$(raw_http s1 "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n$hdrs\r\n")"
check_match "the proxy survived every malformed request" '200' \
	"$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://allowed.test/)"

# ---- SSRF: forbidden addresses in every spelling, and allowed names resolving to them
for h in 127.1 0x7f.1 2130706433 127.0.0.1 '[::ffff:127.0.0.1]' '[::1]' 169.254.169.254 10.255.255.1 0177.0.0.1; do
	code=$(raw_http s1 "GET http://$h/ HTTP/1.1\r\nHost: $h\r\n\r\n")
	check_eq "SSRF literal $h -> 403" 403 "$code"
done
check_eq "allowed name resolving to a private address -> 403" 403 \
	"$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://private.test/)"
check_eq "allowed name resolving to the metadata address -> 403" 403 \
	"$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://meta.test/latest/meta-data/)"
code=$(raw_http s1 'CONNECT 127.1:22 HTTP/1.1\r\nHost: 127.1:22\r\n\r\n')
check_eq "CONNECT to 127.1:22 -> 403" 403 "$code"
check_eq "SSRF: public literal address with no CIDR rule -> 403" 403 \
	"$(raw_http s1 "GET http://$LAB_ALLOWED4/ HTTP/1.1\r\nHost: $LAB_ALLOWED4\r\n\r\n")"

# ---- upstream failures
out=$("${CURL[@]}" -D - http://nxdomain.test/ 2>&1)
check_match "unresolvable name -> 502 with the reason" '502' "$out"
check_match "502 says the name does not exist" 'NXDOMAIN' "$out"
out=$("${CURL[@]}" -D - http://closed.test:81/ 2>&1)
check_match "refused connection -> 502 with the reason" 'refused' "$out"

# ---- the audit log, field by field
r=$(audit_wait 'r["protocol"]=="http" and r["host"]=="allowed.test" and r["method"]=="POST" and r["bytes_out"]>3000000')
check_match "audit: the 3 MB POST has a line" 'allowed.test' "$r"
check_eq "audit: session" s1 "$(jget "$r" session)"
check_eq "audit: uid" 1000 "$(jget "$r" uid)"
check_eq "audit: command (escaped quotes survive)" 'test "s1"' "$(jget "$r" command)"
check_eq "audit: port" 80 "$(jget "$r" port)"
check_eq "audit: decision" allow "$(jget "$r" decision)"
check_match "audit: rule file:line:col" 'policy-s1.json:[0-9]+:[0-9]+$' "$(jget "$r" rule)"
check_eq "audit: resolved address" "$LAB_ALLOWED4:80" "$(jget "$r" address)"
check_eq "audit: status" 200 "$(jget "$r" status)"
check_match "audit: bytes in" '^[1-9][0-9]*$' "$(jget "$r" bytes_in)"
check_match "audit: RFC 3339 UTC time with ms" '^20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{3}Z$' "$(jget "$r" time)"
check_match "audit: duration" '^[0-9]+$' "$(jget "$r" duration_ms)"
# the 20 MB responses: body and head (under 1000 bytes) / body, chunk framing (~2.8 KB) and head
r=$(audit_find 'r["protocol"]=="http" and r["method"]=="GET" and 20000001 < r["bytes_in"] < 20001000')
check_eq "audit: a spliced Content-Length body counts in bytes_in" 200 "$(jget "$r" status)"
r=$(audit_find 'r["protocol"]=="http" and r["method"]=="GET" and 20002000 < r["bytes_in"] < 20010000')
check_eq "audit: a chunked body counts with its framing" 200 "$(jget "$r" status)"
r=$(audit_find 'r["protocol"]=="http" and 3000000 < r["bytes_in"] < 3001000 and "chunk" in (r.get("error") or "")')
check_eq "audit: bad chunk framing closes the exchange, with why" "200 malformed chunked response body: malformed chunk size" \
	"$(jget "$r" status) $(jget "$r" error)"
r=$(audit_find 'r["protocol"]=="connect" and r["host"]=="allowed.test" and r["bytes_in"]>20000000')
check_match "audit: the CONNECT bulk transfer is logged at close with its bytes" '"status": 200' "$r"
r=$(audit_find 'r["protocol"]=="connect" and r["host"]=="evil.test"')
check_eq "audit: denied CONNECT" deny "$(jget "$r" decision)"
r=$(audit_find 'r["host"]=="127.0.0.1" and r["protocol"]=="http"')
check_eq "audit: SSRF literal logged under its address" deny "$(jget "$r" decision)"
r=$(audit_find 'r["host"]=="private.test"')
check_eq "audit: private resolution logged with the address" "10.255.255.1" "$(jget "$r" address)"
check "every audit line is valid JSON without raw control bytes" "$LAB_PYTHON" -c '
import json, sys
for line in open(sys.argv[1], "rb"):
    assert all(b >= 0x20 for b in line[:-1]), line
    json.loads(line)' "$PROXY_AUDIT"

# ---- SIGHUP reopens the log
mv "$PROXY_AUDIT" "$PROXY_AUDIT.1"
touch "$PROXY_AUDIT" && chmod 0666 "$PROXY_AUDIT"
# (the request goes once the engine says it reopened the log, and its record is waited for: fixed pauses of
# 0.2 s let a loaded machine send it before the reopen, or look before the record was written)
reopened() { grep -c 'SIGHUP: audit log reopened' "$(lab_log proxy)"; }
hups=$(reopened)
kill -HUP "$(lab_pid proxy)"
for _ in $(seq 100); do [ "$(reopened)" -gt "$hups" ] && break; sleep 0.05; done
"${CURL[@]}" -o /dev/null http://allowed.test/after-hup
for _ in $(seq 100); do grep -q 'allowed.test' "$PROXY_AUDIT" && break; sleep 0.05; done
check_match "after SIGHUP new lines go to the new file" 'after-hup|allowed.test' "$(cat "$PROXY_AUDIT")"

out=$("$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$PROXY_AUDIT.1" "$PROXY_AUDIT")
check_match "the hash chain runs intact across the rotation (sluicectl log verify)" 'chain intact' "$out"

check "the proxy dropped root" test "$(awk '/^Uid:/ {print $2}' "/proc/$(lab_pid proxy)/status")" = "$(id -u nobody)"
lab_stop proxy
check_eq "the proxy exits cleanly on SIGTERM" 0 "$LAB_STOP_STATUS"
done_testing
