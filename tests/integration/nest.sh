#!/usr/bin/env bash
# nest: `sluice run --allow-containers` in the lab (root launch, embedded netd): rootless Podman and Buildah
# inside the local sandbox. `podman build` from a Containerfile and `podman run` work, with storage inside the
# session and no host container socket; a nested container with --network host goes through the proxy (allowed
# host reached, denied host refused and audited); one on Podman's own rootless network (slirp4netns) reaches
# nothing around the proxy (nftables drops it, audited); the status passes through; nothing is left after a
# normal exit or kill -9 of the launcher. Without the flag, podman says which flag it needs. An unprivileged
# user gets the same (without network: that needs sluiced).
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/ctr-image.sh"
lab_enter "$@"
_lab_need curl jq podman

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
lab_internet_up >/dev/null
lab_forward on

P=$LAB_DIR/proj
mkdir -p "$P"
chmod 755 "$LAB_DIR" "$P"
cp "$(cni_image_tar)" "$P/rootfs.tar" || lab_bail "cannot make the test image's root file system"
printf 'FROM scratch\nADD rootfs.tar /\nRUN echo built-inside >/built\n' >"$P/Containerfile"
AUDIT=$LAB_DIR/audit.log
sb() { (cd "$P" && exec env -i PATH=/usr/bin:/bin HOME="$LAB_DIR/home" "$SLUICE" run "$@"); }
mkdir -p "$LAB_DIR/home"
GET='curl -sS -m 5 -o /dev/null -w %{http_code}'
leftovers() {
	ls /run/sluice/sessions 2>/dev/null | grep -v '^\.' | sed 's/^/dir /'
	ip -o link show | awk -F': ' '{ print $2 }' | grep -v -e '^lo$' -e '^inet' -e '^lan' -e '^veth-' | grep -v '@if' | sed 's/^/link /'
	grep -e /run/sluice -e sluice-containers -e /var/tmp/containers /proc/self/mountinfo | sed 's/^/mount /'
	ps -eo stat=,comm= | awk '$1 !~ /^Z/ { print $2 }' |
		grep -x -e podman -e conmon -e crun -e sleep -e slirp4netns -e catatonit | sed 's/^/process /'
}
base=$(leftovers)

# 1. Without the flag: podman names it.
out=$(sb -- podman ps 2>&1)
check_eq "without --allow-containers podman fails (125)" 125 "$?"
check_match "... with a message that names --allow-containers" 'sluice run --allow-containers' "$out"
out=$(sb -- buildah --version 2>&1)
check_match "... buildah too" 'buildah: containers are off.*--allow-containers' "$out"
check_eq "... and /dev/fuse, /dev/net/tun and /sys are not there" "0" \
	"$(sb -- sh -c 'ls -d /dev/fuse /dev/net/tun /sys/kernel 2>/dev/null | wc -l')"
check_eq "with the flag they are" "3" "$(sb --allow-containers -- sh -c 'ls -d /dev/fuse /dev/net/tun /sys/kernel 2>/dev/null | wc -l')"
check_match "... and /sys is read-only" 'Read-only' "$(sb --allow-containers -- sh -c 'touch /sys/x' 2>&1)"
check_eq "... and a sysfs of the session's network namespace: no host interface (sl-*, lan) in /sys/class/net" "lo" \
	"$(sb --allow-containers -- sh -c 'ls /sys/class/net | tr "\n" " " | sed "s/ \$//"')"
check_eq "... nor the host's debugfs or tracefs mounted in it" "" \
	"$(sb --allow-containers -- sh -c 'grep -o " /sys/[^ ]*" /proc/self/mountinfo | grep -v -x -e " /sys" -e " /sys/fs/cgroup"')"

# 2. Build and run inside, with the session's network.
# shellcheck disable=SC2016
out=$(sb --allow-containers --allow-network --allow allowed.test --audit-log "$AUDIT" -- sh -c '
	podman build -q -t localhost/inner:1 . >/dev/null 2>build.err || { cat build.err; exit 90; }
	podman run --rm localhost/inner:1 cat /built
	podman run --rm --network host localhost/inner:1 sh -c "'"$GET"' http://allowed.test/; echo; '"$GET"' http://other.test/; echo"
	podman info --format "store={{.Store.GraphRoot}}"
	podman run --rm localhost/inner:1 sh -c "curl -sS -m 3 --noproxy \"*\" -o /dev/null http://'"$LAB_ALLOWED4"'/ 2>/dev/null && echo raw-connected || echo raw-blocked"
	podman run --rm localhost/inner:1 sh -c "exit 5"; echo inner-status=$?
	ls /var/run/docker.sock /run/podman/podman.sock /run/docker.sock 2>&1 | grep -c "No such file"
	exit 7' 2>"$LAB_DIR/err2")
rc=$?
check_eq "the status passes through" 7 "$rc"
check_match "podman build from a Containerfile works inside" '^built-inside' "$out"
check_match "a --network host container reaches allowed.test through the proxy (200)" $'^200$' "$out"
check_match "... and is refused other.test (403)" $'^403$' "$out"
check_match "a container on Podman's own network gets nothing around the proxy" 'raw-blocked' "$out"
check_match "a nested container's status reaches the command" 'inner-status=5' "$out"
check_match "no host container socket is there" '^3$' "$out"
check_match "the denial is in the audit log" '"host":"other.test"' "$(grep '"decision":"deny"' "$AUDIT")"
check_match "the dropped direct connection is in the audit log" "\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":80" \
	"$(cat "$AUDIT")"
[ "$rc" = 7 ] || diag "$(cat "$LAB_DIR/err2")"
check_eq "nothing is left after a normal exit" "$base" "$(leftovers)"
check_match "the nested store is in the sandbox's own /var/tmp (gone with the session)" '^store=/var/tmp/containers/storage$' "$out"

# 3. kill -9 of the launcher while a nested container runs.
(cd "$P" && exec env -i PATH=/usr/bin:/bin HOME="$LAB_DIR/home" "$SLUICE" run --allow-containers -- sh -c \
	'podman build -q -t localhost/inner:1 . >/dev/null 2>&1; podman run --rm localhost/inner:1 sleep 30') \
	>/dev/null 2>&1 &
lpid=$!
for _ in $(seq 150); do pgrep -xf 'sleep 30' >/dev/null && break; sleep 0.1; done
check "the nested container runs" pgrep -xf 'sleep 30'
kill -9 "$lpid"
wait "$lpid" 2>/dev/null
for _ in $(seq 50); do [ -z "$(leftovers | grep -v '^dir ')" ] && break; sleep 0.1; done
check_eq "after kill -9 of the launcher no process, link or mount is left" "" "$(leftovers | grep -v '^dir ')"

# 4. An unprivileged user: rootless Podman inside its sandbox too, with its network through sluiced.
TU=$(test_user_name nest)
test_useradd "$TU" "$LAB_DIR/uhome" || lab_bail "useradd $TU failed (10 s)"
lab_defer "userdel $TU >/dev/null 2>&1; rm -rf /var/tmp/sluice-$(id -u "$TU")"
mkdir -p "$LAB_DIR/uhome" "$LAB_DIR/uproj"
cp -a "$P/rootfs.tar" "$P/Containerfile" "$LAB_DIR/uproj/"
chown -R "$TU:" "$LAB_DIR/uhome" "$LAB_DIR/uproj"
out=$(cd "$LAB_DIR/uproj" && setpriv --reuid="$TU" --regid="$TU" --clear-groups env -i PATH=/usr/bin:/bin \
	HOME="$LAB_DIR/uhome" "$SLUICE" run --allow-containers -- sh -c \
	'podman build -q -t localhost/inner:1 . >/dev/null 2>&1 && podman run --rm localhost/inner:1 cat /built' 2>&1)
check_eq "an unprivileged user builds and runs a container inside" built-inside "$(grep -v 'level=warn' <<<"$out")"
check_eq "... and the user's own container storage is untouched" "" "$(ls -A "$LAB_DIR/uhome" 2>/dev/null)"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
AUDIT=$LAB_DIR/sluiced-audit.log
check "sluiced starts" start_sluiced
# shellcheck disable=SC2016
out=$(cd "$LAB_DIR/uproj" && setpriv --reuid="$TU" --regid="$TU" --clear-groups env -i PATH=/usr/bin:/bin \
	HOME="$LAB_DIR/uhome" "$SLUICE" run --allow-containers --allow-network --allow allowed.test -- sh -c '
	podman build -q -t localhost/inner:1 . >/dev/null 2>&1
	podman run --rm --network host localhost/inner:1 sh -c "'"$GET"' http://allowed.test/; echo; '"$GET"' http://other.test/; echo"
	podman run --rm localhost/inner:1 sh -c "curl -sS -m 3 --noproxy \"*\" -o /dev/null http://'"$LAB_ALLOWED4"'/ 2>/dev/null && echo raw-connected || echo raw-blocked"' 2>&1)
check_match "the user's nested container reaches allowed.test through sluiced's proxy" $'^200$' "$out"
check_match "... is refused other.test" $'^403$' "$out"
check_match "... and gets nothing around the proxy" 'raw-blocked' "$out"
check "... which sluiced logged as a drop" eventually grep -q "\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\"" "$AUDIT"

done_testing
