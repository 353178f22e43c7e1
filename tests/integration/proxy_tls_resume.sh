#!/usr/bin/env bash
# proxy_tls_resume: HTTPS inspection's upstream TLS sessions are resumed within one session of the engine,
# never across sessions (inspect.c, "upstream TLS sessions"): one sluice-proxy with two inspecting sessions (s2, s3)
# and an origin that says whether each handshake resumed (openssl s_server -www: "New," or "Reused,").
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need curl openssl

lab_internet_up >/dev/null
lab_bg resume -n inet openssl s_server -quiet -accept 9445 -cert "$LAB_DIR/tls/server.pem" \
	-key "$LAB_DIR/tls/server.key" -www
lab_wait_port inet "$LAB_ALLOWED4" 9445 10 || lab_bail "the s_server on allowed.test:9445 did not start"
lab_session s1 >/dev/null
export SLUICE_TLS_TRUST=$LAB_CA
mkdir -p "$LAB_DIR/proxy"
printf '{"allow": [{"host": "allowed.test", "ports": [9445]}], "inspect": [{"host": "allowed.test", "allow": ["GET /**"]}]}\n' \
	>"$LAB_DIR/proxy/inspect.json"
# s2 and s3 inspect allowed.test, each with its own CA (s1, proxy_start's, has none)
PROXY_EXTRA_SESSIONS= PROXY_EXTRA_LISTEN=
for s in s2 s3; do
	lab_session $s >/dev/null
	read -r a g a6 g6 _ < <(lab_session_info $s)
	PROXY_EXTRA_SESSIONS+=",{\"id\": \"$s\", \"uid\": 1000, \"command\": \"$s\", \"addr4\": \"$a\", \"gw4\": \"$g\",
	  \"addr6\": \"$a6\", \"gw6\": \"$g6\", \"ca_cert\": \"$LAB_DIR/$s-ca.pem\",
	  \"policy\": {\"files\": [\"$LAB_DIR/proxy/inspect.json\"]}}"
	PROXY_EXTRA_LISTEN+=",{\"kind\": \"http\", \"address\": \"$g:3128\"}"
done
proxy_start s1 '{"allow": [{"host": "allowed.test", "ports": [80]}]}'
# resumed SESS N: "New, " or "Reused, ", as the origin saw session SESS's N-th tunnel (one curl, one CONNECT)
resumed() {
	local gw
	read -r _ gw _ _ _ < <(lab_session_info "$1")
	lab_exec "$1" curl -sS -m 10 --noproxy '' -x "http://$gw:3128" --cacert "$LAB_DIR/$1-ca.pem" \
		"https://allowed.test:9445/r$2" | grep -oE '^(New|Reused), ' | head -n 1
}
check_eq "s2's first tunnel: a full upstream handshake" "New, " "$(resumed s2 1)"
check_eq "s2's second tunnel resumes s2's upstream TLS session" "Reused, " "$(resumed s2 2)"
check_eq "s3's first tunnel to the same host and port: a full handshake, not s2's session" "New, " "$(resumed s3 1)"
check_eq "s3's second tunnel resumes s3's own" "Reused, " "$(resumed s3 2)"
check_eq "s2 still resumes its own after s3's" "Reused, " "$(resumed s2 3)"
done_testing
