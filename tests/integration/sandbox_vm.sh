#!/usr/bin/env bash
# Issue 18, item 4: `sluice run --sandbox-type vm` in the lab, as root (embedded netd). One VM runs the
# whole network script: the allowed host through the proxy (200), a denied host refused (403) and
# audited, a raw connection around the proxy dropped by nftables and audited as a drop; stdout and
# stderr arrive apart, the exit status passes through, a file written in the project comes back with
# --apply. A second VM is killed with its launcher (SIGKILL). After each: no QEMU process, no session
# network namespace, interface, mount or session directory left.
#
# The VMs run under --vm-accel tcg: this machine's KVM is nested without hardware help and a Debian
# kernel does not finish booting under it (sandbox_kvm.sh runs a KVM guest that needs no kernel).
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
lab_enter "$@"
_lab_need curl jq qemu-system-x86_64
ls /boot/vmlinuz-* >/dev/null 2>&1 || skip_all "no kernel in /boot (linux-image-amd64)"

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
lab_internet_up >/dev/null
lab_forward on

P=$LAB_DIR/proj
H=$LAB_DIR/home
mkdir -p "$P" "$H/.ssh"
echo not-for-the-vm >"$H/.ssh/id_test"
AUDIT=$LAB_DIR/audit.log
# The initramfs is built once per build directory.
CACHE=$SLUICE_BUILD_DIR/tests/vm-cache
mkdir -p "$CACHE" && chmod 0700 "$CACHE" # the launcher refuses a cache others could write
# sb ARGS...: sluice run --sandbox-type vm as root in the project (embedded netd: no sluiced in the lab)
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$CACHE" "$SLUICE" run --quiet \
	--sandbox-type vm --vm-accel tcg "$@"); }

# What the lab holds besides this test's own processes: interfaces, netns names, mounts.
links() { ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' '; }
state() { echo "links: $(links)"; echo "netns: $(ip netns list 2>/dev/null | awk '{print $1}' | sort | tr '\n' ' ')";
	echo "mounts: $(wc -l </proc/self/mountinfo)"; echo "sessions: $(ls /run/sluice/sessions 2>/dev/null | wc -l)"; }
qemus() { pgrep -x qemu-system-x86 || pgrep -f '^qemu-system-x86_64 '; }
gone() { [ -z "$(qemus)" ]; }
before=$(state)

GET='curl -sS -m 30 -o /dev/null -w'
out=$(sb --allow-network --allow allowed.test --audit-log "$AUDIT" --apply -- sh -c "
	$GET 'allowed=%{http_code}\n' http://allowed.test/
	$GET 'denied=%{http_code}\n' http://other.test/
	$GET 'raw=%{http_code}\n' --noproxy '*' --connect-timeout 5 http://$LAB_ALLOWED4/ 2>/dev/null || echo raw=refused
	ip -4 -o addr show dev eth0 | awk '{print \"addr=\" \$4}'
	echo written-in-the-vm >from-vm.txt
	touch /etc/sluice-vm-probe 2>/dev/null && echo rootwrite=yes || echo rootwrite=no
	cat \$HOME/.ssh/id_test 2>/dev/null || echo secret=hidden
	echo to-stderr >&2
	exit 42" 2>"$LAB_DIR/err")
rc=$?
err=$(cat "$LAB_DIR/err")
check_eq "the command's exit status passes through the VM" 42 "$rc"
check_match "the allowed host is reached through the proxy (200)" '^allowed=200$' "$out"
check_match "a denied host is refused by the proxy (403)" '^denied=403$' "$out"
check_match "a raw connection around the proxy goes nowhere" '^raw=(000|refused)$' "$out"
check_match "the guest's eth0 has the session's address (netd's /32)" '^addr=[0-9.]+/32$' "$out"
check_eq "stderr holds the command's stderr only (and the emulation warning)" "to-stderr" \
	"$(grep -v '^sluice: warning: --vm-accel tcg' <<<"$err")"
check_not "... and stdout has none of it" grep -q to-stderr <<<"$out"
[ "$rc" = 42 ] || diag "$out" "$err"
check_match "the guest cannot write the host's root (read-only share)" '^rootwrite=no$' "$out"
check "... and nothing reached the host" test ! -e /etc/sluice-vm-probe
check_match "a secret in the home is not visible in the guest" '^secret=hidden$' "$out"
check_not "... not even its content" grep -q not-for-the-vm <<<"$out"
check_eq "the file written in the project came back (--apply)" "written-in-the-vm" "$(cat "$P/from-vm.txt" 2>/dev/null)"
check_match "the denial is in the audit log" 'deny' \
	"$(jq -r 'select(.host == "other.test" and .protocol == "http") | .decision' "$AUDIT" 2>/dev/null)"
check_match "the allowed request too" 'allow' \
	"$(jq -r 'select(.host == "allowed.test" and .protocol == "http") | .decision' "$AUDIT" 2>/dev/null)"
dropped() { jq -r "select(.protocol == \"drop\" and .host == \"$LAB_ALLOWED4\") | .decision" "$AUDIT" 2>/dev/null | grep -q deny; }
check "the raw connection was dropped by nftables and audited" eventually dropped
check_eq "nothing left after a normal exit (interfaces, netns, mounts, session dirs)" "$before" "$(state)"
check_eq "... and no QEMU process" "" "$(qemus)"

# The cache is the user's alone: a directory or file another local user made, could write or pointed
# at with a symlink would let them choose the kernel and initramfs a root VM boots. Each is refused
# before any VM starts, with the path and what to do.
sbc() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$1" "$SLUICE" run --quiet \
	--sandbox-type vm --vm-accel tcg -- echo booted 2>&1); }
refused() { # NAME PATTERN OUTPUT RC
	check_match "$1" "$2" "$3"
	check_not "... and no VM booted (exit $4)" test "$4" = 0 -o -n "$(grep '^booted' <<<"$3")"
}
BAD=$LAB_DIR/theirs-cache
mkdir -m 0700 "$BAD" && chown 65534:65534 "$BAD"
o=$(sbc "$BAD"); rc=$?
refused "a cache directory another user owns is refused" \
	"unsafe cache directory $BAD: $BAD is owned by uid 65534, not by uid 0 or root .*set SLUICE_VM_CACHE" "$o" $rc
check_eq "... and nothing was written into it" "" "$(ls -A "$BAD")"
o=$(sbc "$BAD/sub"); rc=$?
refused "... as is one beneath it" "$BAD is owned by uid 65534" "$o" $rc
ln -s "$CACHE" "$LAB_DIR/cache-link"
o=$(sbc "$LAB_DIR/cache-link"); rc=$?
refused "a cache directory that is a symlink is refused" "cache-link is a symlink" "$o" $rc
OPEN=$LAB_DIR/open-cache
mkdir -m 0777 "$OPEN"
o=$(sbc "$OPEN"); rc=$?
refused "a cache directory others can write is refused" "$OPEN is writable by others" "$o" $rc
MINE=$LAB_DIR/my-cache
cp -a "$CACHE" "$MINE"
o=$(sbc "$MINE"); rc=$?
check_match "a copy of the cache of the user's own boots" '^booted' "$o"
INITRD=$(cd "$MINE" && ls initramfs-*.cpio | head -1)
chown 65534:65534 "$MINE/$INITRD"
o=$(sbc "$MINE"); rc=$?
refused "an initramfs in the cache owned by another user is refused" \
	"unsafe cache file $MINE/$INITRD: $INITRD is owned by uid 65534.*remove it" "$o" $rc
rm "$MINE/$INITRD" && ln -s "$CACHE/$INITRD" "$MINE/$INITRD"
o=$(sbc "$MINE"); rc=$?
refused "... and one that is a symlink" "$INITRD is a symlink" "$o" $rc
if VMLINUX=$(cd "$MINE" && ls vmlinux-*.elf 2>/dev/null | head -1) && [ -n "$VMLINUX" ]; then
	rm "$MINE/$INITRD" && cp -a "$CACHE/$INITRD" "$MINE/$INITRD" && chmod 0666 "$MINE/$VMLINUX"
	o=$(sbc "$MINE"); rc=$?
	refused "an uncompressed kernel in the cache others can write is refused" "$VMLINUX is writable by others" "$o" $rc
fi

# The sandbox's other mounts reach the guest as they are: a read-only project, a --ro-bind and a --bind
# directory (under the lab's /tmp, which the guest's fresh /tmp would otherwise hide).
RO=$(mktemp -d) RW=$(mktemp -d)
echo ro-data >"$RO/f"
out=$(sb --project-mode ro --ro-bind "$RO" --bind "$RW" -- sh -c "
	touch in-project 2>/dev/null && echo project=rw || echo project=ro
	cat $RO/f; touch $RO/g 2>/dev/null && echo robind=rw || echo robind=ro
	echo from-guest >$RW/h" 2>/dev/null)
check_match "--project-mode ro: the project is read-only in the guest" '^project=ro$' "$out"
check_match "--ro-bind: visible in the guest" '^ro-data$' "$out"
check_match "... read-only" '^robind=ro$' "$out"
check_eq "--bind: a file the guest writes reaches the host" "from-guest" "$(cat "$RW/h" 2>/dev/null)"
check "nothing was written to the read-only ones" test ! -e "$P/in-project" -a ! -e "$RO/g"

# The default accelerator, KVM: QEMU starts with -accel kvm and keeps running (the guest cannot finish
# booting on this machine, see above); --timeout ends the session (124) and takes QEMU with it. On a
# machine without KVM the default fails closed instead: refused before anything starts, naming the way out.
if nokvm=$(kvm_usable); then
	( cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$CACHE" "$SLUICE" run --quiet \
		--sandbox-type vm --timeout 4 -- true ) >/dev/null 2>"$LAB_DIR/err-kvm" &
	kpid=$!
	for _ in $(seq 100); do [ -n "$(qemus)" ] && break; sleep 0.1; done
	sleep 1.5
	check_match "KVM by default: QEMU runs with -accel kvm" ' -accel kvm ' "$(ps -o args= -p "$(qemus | head -1)" 2>/dev/null)"
	wait "$kpid"
	check_eq "... until --timeout ends the session (124)" 124 "$?"
	check "... and QEMU with it" eventually gone
else
	diag "no KVM here: $nokvm"
	out=$(cd "$P" && env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$CACHE" "$SLUICE" run --quiet \
		--sandbox-type vm --timeout 4 -- true 2>&1); r=$?
	check_eq "KVM by default, on a machine without it: refused (125), nothing emulated behind the user's back" 125 "$r"
	check_match "... naming /dev/kvm and the way out" '--sandbox-type vm: .*/dev/kvm: .*--vm-accel tcg' "$out"
	check "... and no QEMU started" gone
fi

# kill -9 of the launcher while the VM runs: the sandbox's pid 1 dies with it, and QEMU with the pid
# namespace; the embedded netd notices its launcher is gone and removes the session's network.
( cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$CACHE" "$SLUICE" run --quiet \
	--sandbox-type vm --vm-accel tcg --allow-network --allow allowed.test -- sleep 300 ) >/dev/null 2>&1 &
lpid=$!
for _ in $(seq 100); do [ -n "$(qemus)" ] && break; sleep 0.1; done
check "(test) QEMU runs" test -n "$(qemus)"
sleep 1
# QEMU's view is what the guest reaches through the root share (all of it, once the guest is root in the VM:
# it can mount the share again and read QEMU's /proc): neither the scratch space's root nor the masks' source
# may be in it (tests/lib/reach-probe.sh, looking at QEMU from here)
check_eq "QEMU's view (the guest's, over the root share) holds neither the scratch space's root nor the masks' source" \
	"reach: ok" "$(sh "$SLUICE_SOURCE_DIR/tests/lib/reach-probe.sh" pid "$(qemus | head -1)" masks)"
kill -KILL "$lpid"
wait "$lpid" 2>/dev/null
check "killing the launcher (SIGKILL) ends QEMU" eventually gone
# a later session reaps what the killed launcher could not (its session directory)
sb -- true >/dev/null 2>&1
settled() { [ "$(state)" = "$before" ]; }
check "... and nothing is left (interfaces, netns, mounts, session dirs)" eventually settled
settled || diag "before: $before" "after: $(state)"

# Through sluiced: `sluicectl sessions` names the session's sandbox type.
CTL=$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl
if check "sluiced starts" start_sluiced; then
	( cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_VM_CACHE="$CACHE" "$SLUICE" run --quiet \
		--sandbox-type vm --vm-accel tcg --allow-network --allow allowed.test -- sleep 300 ) >/dev/null 2>&1 &
	vpid=$!
	for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 1 ] && break; sleep 0.1; done
	check_eq "sluicectl sessions --json: the VM session's sandbox type" vm "$("$CTL" sessions --json | jq -r '.[0].sandbox')"
	check_match "... and the table's SANDBOX column" ' vm +sleep$' "$("$CTL" sessions | tail -1)"
	kill -TERM "$vpid"
	wait "$vpid" 2>/dev/null
	check "... it is gone when the launcher ends" eventually test "$("$CTL" sessions --json | jq length)" = 0
fi
done_testing
