#!/usr/bin/env bash
# demo: the README's demo (tools/demo-lab.sh, what tools/demo.sh runs after building) shows what it
# claims: a default run has no network, an --allow-network run installs from the allowed registry while
# evil.test is refused (HTTP 403, DNS, direct connection), the audit log records it and verifies; it
# finishes in under 60 s and leaves nothing behind on the machine.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
[ "$(id -u)" = 0 ] || skip_all "the demo runs in a lab of network namespaces and needs root"
command -v jq >/dev/null || skip_all "needs jq (tools/deps.sh installs it)"

out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
machine_log=/var/log/sluice/audit.log
before_log=$(stat -c '%i %s %Y' "$machine_log" 2>/dev/null || echo absent)

t0=${EPOCHREALTIME/./}
out=$(SLUICE_DEMO_OUT=$out_dir SLUICE_DEMO_COLOR=0 timeout 120 "$SLUICE_SOURCE_DIR/tools/demo-lab.sh" 2>&1)
rc=$?
t1=${EPOCHREALTIME/./}
ms=$(((t1 - t0) / 1000))
diag "demo ran in $ms ms (exit $rc)"
check_eq "the demo exits 0 (every outcome it shows happened)" 0 "$rc"
[ "$rc" = 0 ] || printf '%s\n' "$out" | tail -n 60 | sed 's/^/#   /'
check "the demo finishes in under 60 s ($ms ms)" test "$ms" -lt 60000

# 1. no network by default: curl's own error, and a non-zero exit status
check_match "default run: the command was shown" '^\$ sluice run -- curl' "$out"
check_match "default run: curl could not reach the registry" 'curl: \(6\) Could not resolve host: registry.test' "$out"
check_match "default run: non-zero exit status reported" 'exit status [1-9][0-9]*: the session' "$out"

# 2. the install through the policy, and the three ways around it
check_match "the allow-network run was shown" '^\$ sluice run --allow-network --policy demo-policy.json' "$out"
if command -v npm >/dev/null && command -v node >/dev/null; then
	check_match "npm installed the package from registry.test" 'added 1 package' "$out"
	check_match "the installed package loads" 'require\("sluice-demo"\) -> sluice-demo from the sluice lab' "$out"
else
	check_match "the package was fetched with curl (npm is not installed)" 'installed: module.exports' "$out"
fi
check_match "evil.test: the proxy answered 403" '\(HTTP 403\)' "$out"
check_match "evil.test: the 403 names the host" 'host: +evil.test' "$out"
check_match "evil.test: the 403 says how to allow it" 'sluice run --allow evil.test:80' "$out"
check_match "evil.test around the proxy: the name does not resolve" 'curl: \(6\) Could not resolve host: evil.test' "$out"
check_match "a raw address around the proxy: the connection times out" 'curl: \(28\) .*198.18.1.13' "$out"
# The denial summary `sluice run` prints at exit (its --quiet silences it): when this build has it, the
# demo must show it.
if "$SLUICE_BUILD_DIR/sandbox/sluice" --help 2>&1 | grep -q -- '--quiet'; then
	check_match "the denial summary at exit names evil.test and how to allow it" \
		'--allow evil.test:80' "$(sed -n '/requests* w[ae][rs]e* denied/,$p' <<<"$out")"
	check_match "the denial summary counts the direct connection too" '198.18.1.13:80 +[0-9]+ x' "$out"
fi

# 3. the audit log, checked here independently of what the demo printed
log=$out_dir/audit.log
check "the demo handed over its audit log" test -s "$log"
check_match "sluicectl log was shown" '^\$ sluicectl log$' "$out"
check_match "sluicectl log verify: chain intact" 'records checked: chain intact' "$out"
check_match "sluicectl log verify: a forged copy is detected" 'hash mismatch: the line was edited' "$out"
verify_quiet() { "$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$@" >/dev/null; }
check "the audit log verifies here too" verify_quiet "$log"
q() { jq -r "$1" "$log" 2>/dev/null | sort -u | tr '\n' ' '; }
check_match "audit: registry.test allowed by demo-policy.json" 'demo-policy.json:[0-9]+:[0-9]+' \
	"$(q 'select(.host == "registry.test" and .decision == "allow" and .status == 200) | .rule')"
check_eq "audit: the POST to evil.test denied with 403, no rule" "POST 403 null " \
	"$(q 'select(.host == "evil.test" and .protocol == "http") | "\(.method) \(.status) \(.rule)"')"
check_eq "audit: evil.test's DNS queries refused (rcode 5)" "deny 5 " \
	"$(q 'select(.host == "evil.test" and .protocol == "dns") | "\(.decision) \(.status)"')"
check_eq "audit: the direct connection logged as a drop" "tcp 80 deny " \
	"$(q 'select(.protocol == "drop" and .host == "198.18.1.13") | "\(.method) \(.port) \(.decision)"')"
check_eq "audit: one session for all records" 1 "$(jq -r .session "$log" | sort -u | wc -l)"

# The fallback for machines without npm: curl makes npm's two requests.
out2=$(SLUICE_DEMO_INSTALLER=curl SLUICE_DEMO_COLOR=0 timeout 120 "$SLUICE_SOURCE_DIR/tools/demo-lab.sh" 2>&1)
check_eq "the demo's curl fallback exits 0" 0 "$?"
check_match "... says it does not use npm" 'curl fetches the packument and tarball' "$out2"
check_match "... and fetched the package" 'installed: module.exports = "sluice-demo from the sluice lab"' "$out2"

# No residue on the machine: the lab's namespaces took the session's links with them, and the
# machine's own audit log was not touched.
sid=$(jq -r .session "$log" | head -n 1)
link_exists() { ip link show "$1" >/dev/null 2>&1; }
check_not "no link sl-$sid left in the machine's network namespace" link_exists "sl-$sid"
check_eq "the machine's $machine_log is untouched" "$before_log" \
	"$(stat -c '%i %s %Y' "$machine_log" 2>/dev/null || echo absent)"
done_testing
