#!/usr/bin/env bash
# https_inspect: HTTPS inspection (policy "inspect", docs/proxy.md) through `sluice run --allow-network` in
# the lab (embedded netd, whose engine trusts the lab's CA through SLUICE_TLS_TRUST): method and path rules
# allow and deny per request; git clone works and git push is refused with a clear message; a credential
# reaches its host without being readable inside the sandbox, and its placeholder sent elsewhere is refused;
# an upstream whose certificate is not trusted is refused; the session CA's key is nowhere inside; real
# clients (curl, git, python, node) use the sandbox's CA bundle.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq git openssl

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
lab_internet_up >/dev/null
lab_forward on

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
  "allow": ["allowed.test", "registry.test", "other.test", "evil.test:443,8443"],
  "inspect": [
    {"host": "allowed.test",
     "allow": ["GET,HEAD /pub/**", "GET /status/**", "POST /upload/*", "GET /headers"],
     "deny": ["GET /pub/secret/**"]},
    {"host": "registry.test",
     "credential": {"header": "Authorization: Bearer {secret}", "secret_file": "$H/api-token",
                    "placeholder_env": "API_TOKEN"}},
    {"host": "evil.test"}
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
