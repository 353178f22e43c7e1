#!/usr/bin/env bash
# proxy_parent: sluice-proxy behind a parent proxy (docs/proxy.md, "Parent proxy"). Squid with Basic auth
# runs in the lab's internet namespace and is the host's only route to the internet hosts (the host keeps
# its link to Squid and the lab DNS, and a route to registry.test alone, which no_proxy reaches
# directly). Sessions reach allowed hosts through Squid over HTTP (absolute form), CONNECT, SOCKS5, and
# without a resolver of sluice's own; denied and SSRF destinations never reach Squid; bad credentials,
# missing credentials and a parent that is down give a clear 502 and an audit record; the password never
# reaches the audit log, the session or the origin. An inspected HTTPS session's upstream TLS goes through a
# CONNECT tunnel of the parent.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need curl squid openssl
[ -x /usr/lib/squid/basic_ncsa_auth ] || lab_bail "squid's basic_ncsa_auth helper is missing (apt-get install squid-openssl)"

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r _ s1g _ _ _ < <(lab_session_info s1)

# ---- the parent: Squid in the internet namespace, Basic auth, the only way to the internet hosts
SQ=$LAB_DIR/squid
mkdir -p "$SQ"
printf 'corp:%s\n' "$(openssl passwd -apr1 's3cr3t-parent-pw')" >"$SQ/passwd"
cat >"$SQ/squid.conf" <<-CONF
	http_port $LAB_INET4:3128
	pid_filename $SQ/squid.pid
	access_log stdio:$SQ/access.log
	cache_log $SQ/cache.log
	cache_store_log none
	cache deny all
	coredump_dir $SQ
	logfile_rotate 0
	shutdown_lifetime 0 seconds
	pinger_enable off
	dns_nameservers $LAB_DNS
	auth_param basic program /usr/lib/squid/basic_ncsa_auth $SQ/passwd
	auth_param basic realm lab-parent
	acl authed proxy_auth REQUIRED
	http_access deny !authed
	http_access allow authed
	http_access deny all
CONF
chown -R proxy: "$SQ" 2>/dev/null || chmod -R a+rwX "$SQ"
lab_bg squid -n inet /usr/sbin/squid -N -f "$SQ/squid.conf"
lab_wait_port inet "$LAB_INET4" 3128 10 || lab_bail "squid did not start: $(tail -n 5 "$SQ/cache.log" 2>/dev/null)"
# the host loses its route to the internet hosts; only registry.test stays reachable directly
ip route del 198.18.0.0/15 via "$LAB_INET4" || lab_bail "removing the host's route to the internet"
ip -6 route del 2001:db8:1::/48 via "$LAB_INET6" 2>/dev/null
ip route add "$LAB_REGISTRY4/32" via "$LAB_INET4" || lab_bail "route to registry.test"
check_not "the host cannot reach allowed.test directly" curl -s -m 2 --connect-timeout 1 --noproxy '*' "http://$LAB_ALLOWED4/"

install -m 600 /dev/null "$LAB_DIR/proxy-auth"
printf 'corp:s3cr3t-parent-pw\n' >"$LAB_DIR/proxy-auth"
install -m 600 /dev/null "$LAB_DIR/proxy-auth-bad"
printf 'corp:wrong-password\n' >"$LAB_DIR/proxy-auth-bad"
mkdir -p "$LAB_DIR/proxy"
POLICY='{"allow": [
    {"host": "allowed.test", "ports": [80, 443]},
    {"host": "registry.test", "ports": [80]},
    {"host": "private.test", "ports": [80]}
  ]}'
# s2 inspects allowed.test (HTTPS inspection, docs/proxy.md): its upstream TLS goes through a CONNECT
# tunnel of the parent; the engine trusts the lab's CA for the origin's certificate
lab_session s2 >/dev/null
read -r s2a s2g s2a6 s2g6 _ < <(lab_session_info s2)
export SLUICE_TLS_TRUST=$LAB_CA
printf '{"allow": [{"host": "allowed.test", "ports": [443]}], "inspect": [{"host": "allowed.test", "allow": ["GET /pub/**"]}]}\n' \
	>"$LAB_DIR/proxy/inspect-s2.json"
PROXY_EXTRA_SESSIONS=",{\"id\": \"s2\", \"uid\": 1000, \"command\": \"s2\", \"addr4\": \"$s2a\", \"gw4\": \"$s2g\",
  \"addr6\": \"$s2a6\", \"gw6\": \"$s2g6\", \"ca_cert\": \"$LAB_DIR/s2-ca.pem\",
  \"policy\": {\"files\": [\"$LAB_DIR/proxy/inspect-s2.json\"]}}"
PROXY_EXTRA_LISTEN=",{\"kind\": \"socks5\", \"address\": \"$s1g:1080\"},{\"kind\": \"http\", \"address\": \"$s2g:3128\"}"
parent_conf() { # parent_conf AUTH_FILE|"" [EXTRA_MEMBERS]: PROXY_EXTRA_CONFIG for the parent
	local auth=""
	[ -n "$1" ] && auth="\"auth_file\": \"$1\","
	PROXY_EXTRA_CONFIG="\"upstream_proxy\": {\"url\": \"http://$LAB_INET4:3128\", $auth ${2:-} \"no_proxy\": [\"registry.test\"]},"
}
parent_conf "$LAB_DIR/proxy-auth"
proxy_start s1 "$POLICY"
CURL=(lab_exec s1 curl -sS -m 10 --noproxy '' -x "$PROXY_URL")
squid_saw() { grep -c -- "$1" "$SQ/access.log" 2>/dev/null || true; }

# ---- through the parent
body=$("${CURL[@]}" http://allowed.test/via-parent)
check_match "HTTP GET to an allowed host goes through the parent" '"target": ?"/via-parent"' "$body"
req=$(lab_http_requests inet | grep '"/via-parent"' | tail -n 1)
check_match "... which the origin sees once" 'via-parent' "$req"
check_not "... coming from Squid, not from the host" grep -q "\"client\": *\"$LAB_HOST4\"" <<<"$req"
check_eq "Squid logged the absolute-form GET as authenticated (corp)" 1 "$(grep 'http://allowed.test/via-parent' "$SQ/access.log" | grep -c ' corp ')"
body=$("${CURL[@]}" --cacert "$LAB_CA" https://allowed.test/tls-via-parent)
check_match "CONNECT to an allowed host is chained through the parent" '"target": ?"/tls-via-parent"' "$body"
check_eq "Squid logged CONNECT allowed.test:443" 1 "$(squid_saw 'CONNECT allowed.test:443')"
n=$("${CURL[@]}" --cacert "$LAB_CA" -o /dev/null -w '%{size_download}' https://allowed.test/bytes/5000000)
check_eq "5 MB through the chained tunnel" 5000000 "$n"
body=$(lab_exec s1 curl -sS -m 10 --noproxy '' --socks5-hostname "$s1g:1080" http://allowed.test/socks-via-parent)
check_match "SOCKS5 to an allowed host goes through the parent" '"target": ?"/socks-via-parent"' "$body"
squid_connects=$(squid_saw 'CONNECT allowed.test:443')
body=$(lab_exec s2 curl -sS -m 10 --noproxy '' -x "http://$s2g:3128" --cacert "$LAB_DIR/s2-ca.pem" https://allowed.test/pub/inspected)
check_match "inspected HTTPS through the parent: an allowed path reaches the origin" '"target": ?"/pub/inspected"' "$body"
code=$(lab_exec s2 curl -sS -m 10 --noproxy '' -x "http://$s2g:3128" --cacert "$LAB_DIR/s2-ca.pem" -o /dev/null -w '%{http_code}' https://allowed.test/private)
check_eq "... and a path the HTTP rules refuse gets sluice's 403" 403 "$code"
# Squid logs a CONNECT when its tunnel closes: wait for both sessions' tunnels, then count
for _ in $(seq 50); do [ "$(squid_saw 'CONNECT allowed.test:443')" -ge $((squid_connects + 2)) ] && break; sleep 0.1; done
sleep 0.5
check_eq "... one CONNECT tunnel of the parent per inspected session (its first request uses the CONNECT's)" \
	$((squid_connects + 2)) "$(squid_saw 'CONNECT allowed.test:443')"
body=$("${CURL[@]}" http://registry.test/direct)
check_match "a no_proxy host is reached directly (the lab registry's own 404)" '"error": ?"Not found"' "$body"
check_eq "... and Squid never saw it" 0 "$(squid_saw registry.test)"

# ---- sluice decides first
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://evil.test/)
check_eq "a denied host is refused by sluice (403)" 403 "$code"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://private.test/)
check_eq "a name the policy allows that resolves to a private address is refused (403)" 403 "$code"
check_eq "Squid never saw evil.test nor private.test" 0 "$(squid_saw 'evil.test\|private.test')"
r=$(audit_find 'r["host"]=="private.test"')
check_match "the SSRF refusal says the parent could have connected to it" 'parent proxy' "$(jget "$r" reason)"
r=$(audit_find 'r["host"]=="allowed.test" and r.get("status")==200 and r["protocol"]=="connect"')
check_eq "audit: the chained tunnel's address is the parent's" "$LAB_INET4:3128" "$(jget "$r" address)"
check_eq "the parent's password is not in the audit log" 0 "$(grep -c 's3cr3t-parent-pw\|Y29ycDpzM2NyM3Qt' "$PROXY_AUDIT")"
check_eq "the origin never saw Proxy-Authorization" 0 "$(lab_http_requests inet | grep -ci 'proxy-authorization')"
# TRACE with Max-Forwards: 0 is answered by the parent itself, echoing the request it got: sluice's credentials
out=$("${CURL[@]}" -X TRACE -H 'Max-Forwards: 0' -w '\n%{http_code}' http://allowed.test/trace 2>&1)
check_match "TRACE through the credentialed parent is refused (405)" '405$' "$out"
check_not "... and no credential came back" grep -qi 's3cr3t-parent-pw\|Y29ycDpzM2NyM3Qt\|Proxy-Authorization' <<<"$out"
check_eq "... and Squid never saw it" 0 "$(squid_saw 'TRACE')"

# ---- failures: wrong credentials, none, the parent down
lab_stop proxy
parent_conf "$LAB_DIR/proxy-auth-bad"
PROXY_AUDIT=$LAB_DIR/audit-bad.log proxy_start s1 "$POLICY"
out=$("${CURL[@]}" -w '\n%{http_code}' http://allowed.test/bad-creds)
check_match "wrong credentials: HTTP gets 502" '502$' "$out"
check_match "... saying the parent refused sluice's credentials" "refused sluice's credentials \(407" "$out"
out=$("${CURL[@]}" -w '%{http_code}' -o /dev/null --cacert "$LAB_CA" https://allowed.test/ 2>&1)
check_match "wrong credentials: CONNECT gets 502" '502' "$out"
r=$(PROXY_AUDIT=$LAB_DIR/audit-bad.log audit_find 'r["protocol"]=="connect" and r.get("status")==502')
check_match "wrong credentials: the audit record says why" '407' "$(jget "$r" error)"
lab_stop proxy
parent_conf ""
PROXY_AUDIT=$LAB_DIR/audit-none.log proxy_start s1 "$POLICY"
out=$("${CURL[@]}" http://allowed.test/no-creds)
check_match "no credentials: 502 saying to set auth_file" 'set auth_file' "$out"
lab_stop proxy
lab_stop squid
parent_conf "$LAB_DIR/proxy-auth"
PROXY_AUDIT=$LAB_DIR/audit-down.log proxy_start s1 "$POLICY"
out=$("${CURL[@]}" -w '\n%{http_code}' http://allowed.test/down)
check_match "the parent down: 502" '502$' "$out"
check_match "... saying sluice cannot connect to the parent" 'cannot connect to the parent proxy' "$out"
lab_stop proxy

# ---- without a resolver of sluice's own: names are the parent's to resolve
lab_bg squid2 -n inet /usr/sbin/squid -N -f "$SQ/squid.conf"
lab_wait_port inet "$LAB_INET4" 3128 10 || lab_bail "squid did not restart"
parent_conf "$LAB_DIR/proxy-auth" '"resolve": false,'
PROXY_UPSTREAM_DNS=192.0.2.254:53 PROXY_AUDIT=$LAB_DIR/audit-nodns.log proxy_start s1 "$POLICY"
body=$("${CURL[@]}" http://allowed.test/no-resolver)
check_match "resolve false, no working resolver: the allowed host is reached through the parent" '"target": ?"/no-resolver"' "$body"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' http://evil.test/)
check_eq "... and a denied host is still refused" 403 "$code"
lab_stop proxy
check_eq "sluice-proxy exits cleanly" 0 "$LAB_STOP_STATUS"

# ---- sluiced: the organisation's SYSCONFDIR/upstream-proxy.json
CLIENT=$SLUICE_BUILD_DIR/tests/integration/netd-testclient
RUN=/run/sluice AUDIT=$LAB_DIR/audit-sluiced.log POLICY=$LAB_DIR/proxy/sluiced-policy.json
export SLUICE_RUN_DIR=$RUN
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
printf '{"allow": ["allowed.test"]}\n' >"$POLICY"
chmod 0644 "$POLICY"
mkdir -p "$LAB_DIR/etc-sluice"
install -m 640 /dev/null "$LAB_DIR/proxy-auth-open"
printf 'corp:s3cr3t-parent-pw\n' >"$LAB_DIR/proxy-auth-open"
printf '{"upstream_proxy": {"url": "http://%s:3128", "auth_file": "%s"}}\n' "$LAB_INET4" "$LAB_DIR/proxy-auth-open" \
	>"$LAB_DIR/etc-sluice/upstream-proxy.json"
out=$(timeout 20 "$SLUICE_BUILD_DIR/netd/sluiced" --run-dir "$RUN" --audit-log "$AUDIT" --pool4 100.64.0.0/16 \
	--pool6 2001:db8:100::/64 --upstream-dns "$LAB_DNS" --sysconfdir "$LAB_DIR/etc-sluice" 2>&1)
check_eq "sluiced refuses to start with a group-readable auth_file (exit 1)" 1 "$?"
check_match "... naming the file and what to do" 'upstream-proxy.json: .*chmod 600' "$out"
printf '{"upstream_proxy": {"url": "http://%s:3128", "auth_file": "%s"}}\n' "$LAB_INET4" "$LAB_DIR/proxy-auth" \
	>"$LAB_DIR/etc-sluice/upstream-proxy.json"
squid_lines=$(wc -l <"$SQ/access.log")
check "sluiced starts with the parent proxy configured" start_sluiced
check "a session opens" session p1
gw=$(reply p1 gw4)
body=$(lab_exec p1 curl -sS -m 10 --noproxy '' -x "http://$gw:3128" http://allowed.test/sluiced-via-parent)
check_match "a sluiced session reaches an allowed host through the parent" '"target": ?"/sluiced-via-parent"' "$body"
body=$(lab_exec p1 curl -sS -m 10 --noproxy '' -x "http://$gw:3128" --cacert "$LAB_CA" https://allowed.test/sluiced-tls)
check_match "... and CONNECT through it" '"target": ?"/sluiced-tls"' "$body"
check_eq "Squid saw both, authenticated" 2 \
	"$(tail -n +$((squid_lines + 1)) "$SQ/access.log" | grep 'sluiced-via-parent\|CONNECT allowed.test:443' | grep -c ' corp ')"
code=$(lab_exec p1 curl -sS -m 10 --noproxy '' -x "http://$gw:3128" -o /dev/null -w '%{http_code}' http://evil.test/)
check_eq "... and a denied host is refused" 403 "$code"
lab_stop sluiced

# ---- configuration errors are clear
cfg=$LAB_DIR/proxy/config-s1.json
sed -i 's#"url": "http://[^"]*"#"url": "https://u:p@corp.example:3128"#' "$cfg"
out=$("$PROXY_BIN" --config "$cfg" --check 2>&1)
check_match "an https:// parent URL is refused with a clear error" 'upstream_proxy: url: only http://HOST:PORT' "$out"
chmod 644 "$LAB_DIR/proxy-auth"
sed -i 's#"url": "[^"]*"#"url": "http://127.0.0.1:3128"#' "$cfg"
out=$("$PROXY_BIN" --config "$cfg" --check 2>&1)
check_match "a readable auth_file is refused" 'only its owner can read \(chmod 600\)' "$out"
done_testing
