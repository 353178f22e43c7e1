#!/usr/bin/env bash
# sluicectl policy check|explain as a user sees them: exit codes, file:line:col errors, presets.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
ctl="$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

explain() { "$ctl" policy explain --no-standard-layers "$@"; }

out=$(explain registry.npmjs.org --policy npm); rc=$?
check_eq "npm preset allows registry.npmjs.org (exit 0)" 0 "$rc"
check_match "explain names the preset rule file:line:col" 'allowed by .*/presets/npm\.json:[0-9]+:[0-9]+ \(\*\.npmjs\.org' "$out"

out=$(explain npmjs.org --policy npm); rc=$?
check_eq "the bare suffix of a wildcard is denied (exit 1)" 1 "$rc"
check_match "denial says how to allow it" 'sluice run --allow-network --allow npmjs\.org:443' "$out"

for h in pypi.org files.pythonhosted.org index.crates.io proxy.golang.org repo1.maven.org rubygems.org \
	deb.debian.org security.debian.org github.com codeload.github.com; do
	explain "$h" --policy registries >/dev/null
	check_eq "registries preset allows $h" 0 "$?"
done
explain example.com --policy registries >/dev/null
check_eq "registries preset denies example.com" 1 "$?"

out=$(explain pypi.org:22 --policy pypi); rc=$?
check_eq "pypi.org on port 22 is denied" 1 "$rc"
check_match "near miss names the rule and the port problem" 'pypi\.json:[0-9]+:[0-9]+ \(pypi\.org, ports 80,443\) but not this port' "$out"

out=$(explain 169.254.169.254:80 --policy registries); rc=$?
check_eq "metadata address denied" 1 "$rc"
check_match "forbidden range explained" 'forbidden range' "$out"
out=$(explain 0x7f.1:80); check_match "0x7f.1 is read as 127.0.0.1" '^127\.0\.0\.1:80: deny' "$out"
out=$(explain 2130706433:80); check_match "2130706433 is read as 127.0.0.1" '^127\.0\.0\.1:80: deny' "$out"

explain api.github.com --method POST --policy github >/dev/null
check_eq "method given, rule without methods allows" 0 "$?"
cat >p.json <<'JSON'
// methods restricted
{"allow": [{"host": "api.example.org", "methods": ["GET", "HEAD"]}], "deny": ["bad.example.org"]}
JSON
explain api.example.org --method POST --policy ./p.json >/dev/null
check_eq "POST denied where only GET/HEAD allowed" 1 "$?"
explain api.example.org --method GET --policy ./p.json >/dev/null
check_eq "GET allowed" 0 "$?"

# project layer from the current directory; a CLI deny beats it
mkdir -p .sluice
echo '{"allow": ["proj.example.org"]}' > .sluice/policy.json
"$ctl" policy explain proj.example.org --project "$tmp" >/dev/null
check_eq "project policy read from PROJECT/.sluice/policy.json" 0 "$?"
"$ctl" policy explain proj.example.org --project "$tmp" --deny proj.example.org >/dev/null
check_eq "--deny beats a project allow" 1 "$?"

# check: good and bad files, exit codes, error position
"$ctl" policy check p.json >/dev/null
check_eq "policy check: valid file exits 0" 0 "$?"
printf '{\n  "allow": [\n    "pypi.org",\n    "*.co.uk"\n  ]\n}\n' > bad.json
err=$("$ctl" policy check p.json bad.json 2>&1 >/dev/null); rc=$?
check_eq "policy check: an invalid file exits 1" 1 "$rc"
check_match "error names file:line:col" '^bad\.json:4:5: .*public suffix' "$err"
printf 'pypi.org\n*\n' > bad.txt
err=$("$ctl" policy check bad.txt 2>&1); check_match "text list error at line 2" '^bad\.txt:2:1: .*every host' "$err"
"$ctl" policy check >/dev/null 2>&1
check_eq "policy check without files is a usage error (2)" 2 "$?"
"$ctl" policy explain 'bad host' -N >/dev/null 2>&1
check_eq "explain of an invalid host name is an error (2)" 2 "$?"
"$ctl" policy explain x.org --policy nosuchpreset -N >/dev/null 2>&1
check_eq "unknown preset is an error (2)" 2 "$?"
err=$("$ctl" policy explain x.org --policy nosuchpreset -N 2>&1)
check_match "unknown preset lists the available ones" 'available: .*npm' "$err"

# A hostile project file: its error quotes it, escaped (no terminal escape sequences reach stderr),
# and it cannot pass itself off as a serialised policy that quotes /etc/sluice.
printf '{"allow": ["https://\\u001b]0;owned\\u0007.example"]}\n' > "$tmp/esc.json"
err=$("$ctl" policy check "$tmp/esc.json" 2>&1 >/dev/null); rc=$?
check_eq "check rejects the hostile file (exit 1)" 1 "$rc"
check_eq "its error carries no raw control bytes" 0 "$(printf '%s' "$err" | LC_ALL=C grep -c $'[\x01-\x1f\x7f]')"
check_match "the bytes are shown escaped" '\\x1b\]0;owned\\x07' "$err"
printf '{"sluice-compiled": 1, "rules": [{"host": "evil.example", "where": "/etc/sluice/policy.json:1:1", "layer": "org", "kind": "allow"}]}\n' > "$tmp/.sluice-compiled.json"
err=$("$ctl" policy check "$tmp/.sluice-compiled.json" 2>&1 >/dev/null); rc=$?
check_eq "a policy file in the serialised form is refused (exit 1)" 1 "$rc"
check_match "with its position" '\.sluice-compiled\.json:1:2: a serialised policy' "$err"

done_testing
