#!/usr/bin/env bash
# proxy_config: sluice-proxy --check on valid and broken configurations: every error names the file,
# the place in the config and what to do; nothing is bound or started. Unprivileged.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
bin=$SLUICE_BUILD_DIR/proxy/sluice-proxy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# cfg NAME JSON-BODY: writes $tmp/NAME.json
cfg() { printf '%s\n' "$2" >"$tmp/$1.json"; }
good_session='{"id": "s1", "uid": 1000, "command": "npm ci", "addr4": "100.64.0.2", "gw4": "100.64.0.1",
  "policy": {"presets": ["npm"], "allow": ["example.com:443"], "deny": ["evil.example.com"]}}'
cfg good "{ // comments are allowed
  \"audit_log\": \"$tmp/audit.log\", \"upstream_dns\": \"192.0.2.53\",
  \"listen\": [{\"kind\": \"http\", \"address\": \"100.64.0.1:3128\"}, {\"kind\": \"dns\", \"address\": \"[2001:db8::1]:53\"}],
  \"sessions\": [$good_session]}"
out=$("$bin" --config "$tmp/good.json" --check 2>&1)
check_eq "a valid config passes --check" 0 "$?"
check_match "--check says so" 'configuration is valid' "$out"

expect_error() { # DESC NAME REGEX
	local out rc
	out=$("$bin" --config "$tmp/$2.json" --check 2>&1)
	rc=$?
	check "$1: fails" test "$rc" -ne 0
	check_match "$1: says where and why" "$3" "$out"
}
cfg noaudit "{\"upstream_dns\": \"192.0.2.53\", \"listen\": [], \"sessions\": []}"
expect_error "missing audit log" noaudit 'noaudit.json: audit_log: missing'
cfg baddns "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"dns.example\", \"listen\": [], \"sessions\": []}"
expect_error "upstream resolver by name" baddns 'upstream_dns: missing or not an address'
cfg badkind "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"sessions\": [],
  \"listen\": [{\"kind\": \"socks\", \"address\": \"100.64.0.1:1080\"}]}"
expect_error "unknown listener kind" badkind 'listen\[0\]: unknown kind "socks"'
cfg badaddr "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"sessions\": [],
  \"listen\": [{\"kind\": \"http\", \"address\": \"100.64.0.1\"}]}"
expect_error "listener without a port" badaddr 'listen\[0\]: bad address'
many=$(for i in $(seq 1 65); do printf '{"kind": "http", "address": "100.64.0.%d:3128"},' "$i"; done)
cfg toomany "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"sessions\": [], \"listen\": [${many%,}]}"
expect_error "65 listeners (they were cut to 64 silently)" toomany 'listen: 65 listeners; at most 64'
cfg badsess "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"listen\": [],
  \"sessions\": [{\"id\": \"s1\", \"addr4\": \"100.64.0.300\", \"policy\": {}}]}"
expect_error "bad session address" badsess 'sessions\[0\]: "100.64.0.300" is not an IP address'
cfg badpol "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"listen\": [],
  \"sessions\": [{\"id\": \"s1\", \"addr4\": \"100.64.0.2\", \"policy\": {\"allow\": [\"*\"]}}]}"
expect_error "unsafe pattern" badpol 'sessions\[0\]: policy: '
cfg dup "{\"audit_log\": \"$tmp/a.log\", \"upstream_dns\": \"192.0.2.53\", \"listen\": [],
  \"sessions\": [$good_session, $good_session]}"
expect_error "duplicate session" dup 'sessions\[1\]: cannot add the session'
cfg noaudir "{\"audit_log\": \"$tmp/nodir/a.log\", \"upstream_dns\": \"192.0.2.53\", \"listen\": [], \"sessions\": []}"
expect_error "audit log directory missing" noaudir 'cannot open audit log .*nodir/a.log'
printf '{ "audit_log": ' >"$tmp/trunc.json"
expect_error "truncated JSON" trunc 'trunc.json: cannot read or parse'
done_testing
