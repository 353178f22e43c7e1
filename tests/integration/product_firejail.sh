#!/usr/bin/env bash
# product_firejail: `sluice run --sandbox-type firejail --allow-network` as root. firejail refuses to
# sandbox inside a PID namespace (product_ctl.sh checks that sluice then refuses), so this test runs in
# throwaway network+mount namespaces only (no lab; nothing leaves them): the embedded netd wires a
# session, firejail sandboxes the command in it (container=firejail), the command sees the session's
# eth0, resolv.conf and proxy variables, its request reaches sluice's proxy, and no name is left under
# /run/netns. Without --allow-network firejail gives the command only lo.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
[ "$(id -u)" = 0 ] || skip_all "needs root (firejail --netns, netd)"
command -v firejail >/dev/null || skip_all "firejail is not installed (tools/debian-packages.txt, test group)"
SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
T=$(mktemp -d /var/tmp/sluice-fjtest.XXXXXX)
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
mkdir -p "$T/proj" "$T/home" "$T/run"

# in_ns SCRIPT: runs SCRIPT with bash in fresh network and mount namespaces: lo up, and a route to
# 198.18.0.0/15 (a benchmark range) over a veth pair whose far end has no address, so packets go nowhere;
# 198.18.0.53 is the resolver the embedded proxy engine is given (a private /etc/resolv.conf): it needs
# one to start, and no request in this test reaches it.
printf 'nameserver 198.18.0.53\n' >"$T/resolv.conf"
in_ns() {
	unshare --net --mount --propagation private bash -c 'ip link set lo up && ip link add d0 type veth peer name d1 && ip link set d1 up &&
		ip addr add 198.18.0.1/15 dev d0 && ip link set d0 up && mount --bind "$0/resolv.conf" /etc/resolv.conf &&
		mount -t tmpfs t "$0/run" && '"$1" "$T"
}
run_fj() {
	in_ns 'cd "$0/proj" && exec env -i HOME="$0/home" PATH=/usr/bin:/bin SLUICE_RUN_DIR="$0/run" '"$SLUICE"' run \
		--sandbox-type firejail '"$1"
}
out=$(run_fj '--allow-network --allow allowed.test --audit-log "$0/audit.log" -- sh -c "
	echo container=\$container; cat /etc/resolv.conf; echo proxy=\$HTTP_PROXY; cut -d: -f1 /proc/net/dev;
	curl -sS -m 10 -o /dev/null -w code=%{http_code} http://denied.test/; echo; ls /run/netns; exit 7"' 2>"$T/err")
rc=$?
err=$(cat "$T/err")
check_eq "the command's status passes through" 7 "$rc"
check_match "firejail sandboxed the command" '^container=firejail' "$out"
check_match "resolv.conf names the session's gateway" 'nameserver [0-9.]+' "$out"
check_match "HTTP_PROXY points at the gateway's proxy" 'proxy=http://[0-9.]+:3128' "$out"
check_match "the command sees the session's eth0" 'eth0' "$out"
check_match "its request to a host outside the policy was refused by the proxy (403)" 'code=403' "$out"
check_match "... and the denial summary gives the flag to allow it" '--allow denied\.test:80' "$err"
check_match "... and it is in the audit log" '"host":"denied.test"' "$(cat "$T/audit.log")"
check_eq "no sluice name is left in the host's /run/netns" "" "$(ls /run/netns 2>/dev/null | grep '^sluice-')"

out=$(run_fj '-- sh -c "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d \" \""' 2>&1)
check_eq "without --allow-network: only lo" "lo" "$out"
done_testing
