#!/usr/bin/env bash
# Issue 18, item 2: --allow-kvm. Without the flag the sandbox has no /dev/kvm (ENOENT); with it, a
# minimal KVM guest (tests/vm/kvm_probe.c: a VM, a vCPU, real-mode `out` and `hlt`) runs inside, and
# qemu-system-x86_64 -accel kvm boots Debian's kernel with a tiny busybox initramfs that prints a line
# on its serial console and powers off. A root launch's command runs as a per-session unprivileged
# uid: its /dev/kvm is a node of its own, owned by that uid; an unprivileged user needs the right to
# open the host's node (the test user has none: refused with a clear line).
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

PROBE="$SLUICE_BUILD_DIR/tests/vm/kvm_probe"
[ -x "$PROBE" ] || skip_all "kvm_probe not built (x86_64 only)"
[ -c /dev/kvm ] || skip_all "no /dev/kvm on this machine"
KERNEL=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$KERNEL" ] || skip_all "no kernel in /boot (linux-image-amd64)"
command -v qemu-system-x86_64 >/dev/null || skip_all "qemu-system-x86_64 missing (qemu-system-x86)"

P=$(newdir root)
cd "$P" || exit 1

# ---- the minimal guest
out=$(sb root --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "root, no --allow-kvm: the probe cannot open /dev/kvm (status 2)" 2 "$r"
check_match "... because there is none (ENOENT)" "open /dev/kvm: ENOENT" "$out"

out=$(sb root --allow-kvm --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "root, --allow-kvm: a VM and a vCPU run (status 0)" 0 "$r"
check_match "... the guest's out to port 0x10 reached us with its value" "io-out port=0x10 value=42" "$out"
check_match "... then its hlt" "^hlt" "$out"
[ "$r" = 0 ] || diag "$out"

out=$(sb root --allow-kvm -- stat -c '%F %a %u' /dev/kvm 2>&1)
check_eq "root: /dev/kvm is a node of the session's uid (uid 0 of its namespace), mode 600" \
	"character special file 600 0" "$out"
out=$(sb root --allow-kvm -- sh -c 'ls /dev/kvm >/dev/null && echo present; ls /dev' 2>&1)
check_not "... and no other new device node" grep -qE '^(mem|kmem|port|sda|vda|nvme)' <<<"$out"

out=$(sb user --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "user, no --allow-kvm: no /dev/kvm (status 2)" 2 "$r"
check_match "... ENOENT" "open /dev/kvm: ENOENT" "$out"
out=$(sb user --allow-kvm --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "user without access to the host's /dev/kvm: --allow-kvm refused (125)" 125 "$r"
check_match "... with a line that says what to do" "cannot open /dev/kvm.*group" "$out"

# ---- qemu with KVM inside the sandbox: a tiny busybox initramfs that prints a line and powers off
CACHE="$SLUICE_BUILD_DIR/tests/vm-cache"
mkdir -p "$CACHE"
INITRD="$CACHE/busybox-hello.cpio"
if [ ! -s "$INITRD" ]; then
	IR=$(mktemp -d "$SB_T/ir.XXXXXX")
	mkdir -p "$IR/bin"
	cp /bin/busybox "$IR/bin/busybox"
	ln -s busybox "$IR/bin/sh"
	printf '#!/bin/sh\n/bin/busybox echo sluice-kvm-guest-ok\n/bin/busybox reboot -f\n' >"$IR/init"
	chmod 755 "$IR/init"
	(cd "$IR" && find . | cpio -o -H newc --quiet >"$INITRD.tmp") && mv "$INITRD.tmp" "$INITRD"
fi
chmod 644 "$INITRD"
QEMU=(qemu-system-x86_64 -accel kvm -M microvm -cpu host -m 128M -nodefaults -no-user-config -display none
	-no-reboot -serial stdio -kernel "$KERNEL" -initrd "$INITRD" -append "console=ttyS0 reboot=t panic=-1")
out=$(timeout 60 "$SLUICE" run --quiet --allow-kvm --ro-bind "$KERNEL" --ro-bind "$INITRD" -- "${QEMU[@]}" 2>&1 </dev/null)
r=$?
check_eq "qemu -accel kvm boots inside --allow-kvm and exits (status 0)" 0 "$r"
check_match "... the guest's serial console says it ran" "sluice-kvm-guest-ok" "$out"
[ "$r" = 0 ] || diag "$(tail -20 <<<"$out")"
out=$(timeout 60 "$SLUICE" run --quiet --ro-bind "$KERNEL" --ro-bind "$INITRD" -- "${QEMU[@]}" 2>&1 </dev/null)
r=$?
check "without --allow-kvm qemu cannot use KVM (fails)" test "$r" != 0
check_not "... and no guest ran" grep -q sluice-kvm-guest-ok <<<"$out"

check_eq "no session directory left (root)" 0 "$(session_dirs root)"
check_eq "no session directory left (user)" 0 "$(session_dirs user)"
done_testing
