#!/usr/bin/env bash
# Issue 18, item 2: --allow-kvm. Without the flag the sandbox has no /dev/kvm (ENOENT); with it, a
# minimal KVM guest (tests/vm/kvm_probe.c: a VM, a vCPU, real-mode `out` and `hlt`) runs inside, and
# qemu-system-x86_64 -accel kvm runs a tiny guest that prints a line on its serial console and exits.
# A root launch's command runs as a per-session unprivileged uid: its /dev/kvm is a node of its own, owned by that uid; an unprivileged user needs the right to
# open the host's node (the test user has none: refused with a clear line).
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

PROBE="$SLUICE_BUILD_DIR/tests/vm/kvm_probe"
[ -x "$PROBE" ] || skip_all "kvm_probe not built (x86_64 only)"
# On a machine without KVM (no node, no module, or a container runtime that refuses the device) the
# checks that need it are skipped (skip_no_kvm: under CI only when tools/test.sh found the same), and
# what sluice does there is checked instead: --allow-kvm and --sandbox-type vm are refused, saying why.
if nokvm=$(kvm_usable); then nokvm=; else diag "no KVM here: $nokvm"; fi
command -v qemu-system-x86_64 >/dev/null || skip_all "qemu-system-x86_64 missing (qemu-system-x86)"

P=$(newdir root)
cd "$P" || exit 1

# ---- the minimal guest
out=$(sb root --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "root, no --allow-kvm: the probe cannot open /dev/kvm (status 2)" 2 "$r"
check_match "... because there is none (ENOENT)" "open /dev/kvm: ENOENT" "$out"

out=$(sb root --allow-kvm --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
if [ -z "$nokvm" ]; then
	check_eq "root, --allow-kvm: a VM and a vCPU run (status 0)" 0 "$r"
	check_match "... the guest's out to port 0x10 reached us with its value" "io-out port=0x10 value=42" "$out"
	check_match "... then its hlt" "^hlt" "$out"
	[ "$r" = 0 ] || diag "$out"

	out=$(sb root --allow-kvm -- stat -c '%F %a %u' /dev/kvm 2>&1)
	check_eq "root: /dev/kvm is a node of the session's uid (uid 0 of its namespace), mode 600" \
		"character special file 600 0" "$out"
	out=$(sb root --allow-kvm -- sh -c 'ls /dev/kvm >/dev/null && echo present; ls /dev' 2>&1)
	check_not "... and no other new device node" grep -qE '^(mem|kmem|port|sda|vda|nvme)' <<<"$out"
else
	check_eq "root, --allow-kvm on a machine without KVM: refused before the session (125)" 125 "$r"
	check_match "... with a line naming /dev/kvm and what is wrong" "^sluice: .*--allow-kvm: .*/dev/kvm: " "$out"
	for d in "root, --allow-kvm: a VM and a vCPU run" "root: /dev/kvm is a node of the session's uid, mode 600"; do
		skip_no_kvm "$d" "$nokvm"
	done
fi

out=$(sb user --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "user, no --allow-kvm: no /dev/kvm (status 2)" 2 "$r"
check_match "... ENOENT" "open /dev/kvm: ENOENT" "$out"
out=$(sb user --allow-kvm --ro-bind "$PROBE" -- "$PROBE" 2>&1); r=$?
check_eq "user without access to the host's /dev/kvm: --allow-kvm refused (125)" 125 "$r"
if [ -z "$nokvm" ]; then
	check_match "... with a line that says what to do" "cannot open /dev/kvm.*group" "$out"
else
	check_match "... with a line that says what is wrong" "--allow-kvm: .*/dev/kvm: .+ \((add the user|the kvm module|KVM is there)" "$out"
fi

# ---- qemu -accel kvm inside the sandbox. The guest is a tiny multiboot image made here (32-bit code
# that writes a line to the serial port and ends QEMU through isa-debug-exit, so QEMU exits 1), not
# Linux: on this machine KVM is nested without hardware help, and a Debian kernel did not finish
# booting in 150 s (measured 2026-11-27; the multiboot guest takes under 0.1 s). --sandbox-type vm
# (sandbox_vm.sh) boots Debian's kernel.
MB="$SB_T/mb/guest.bin"
mkdir -p "$SB_T/mb"
python3 - "$MB" <<'PY'
import struct, sys
magic, flags, base = 0x1BADB002, 0x00010000, 0x100000   # multiboot, "a.out kludge": load addresses below
hdr = struct.pack('<8I', magic, flags, (-(magic + flags)) & 0xffffffff, base, base, 0, 0, base + 0x20)
code = (b'\xbe' + struct.pack('<I', base + 0x38)   # mov esi, msg
        + b'\x66\xba\xf8\x03'                     # mov dx, 0x3f8 (COM1)
        + b'\xac\x84\xc0\x74\x03\xee\xeb\xf8'        # loop: lodsb; test al,al; jz done; out dx,al; jmp loop
        + b'\xb0\x00\xe6\xf4'                         # done: mov al,0; out 0xf4,al (isa-debug-exit)
        + b'\xf4\xeb\xfd')                             # hlt; jmp hlt
assert len(hdr) + len(code) == 0x38
open(sys.argv[1], 'wb').write(hdr + code + b'sluice-kvm-guest-ok\r\n\0')
PY
chmod -R a+rX "$SB_T/mb"
QEMU=(qemu-system-x86_64 -accel kvm -M microvm -cpu host,-arch-capabilities -m 16M -nodefaults -no-user-config
	-display none -no-reboot -serial stdio -device isa-debug-exit,iobase=0xf4,iosize=1 -kernel "$MB")
if [ -z "$nokvm" ]; then
	out=$(cd "$P" && timeout 60 "$SLUICE" run --quiet --allow-kvm --ro-bind "$SB_T/mb" -- "${QEMU[@]}" 2>&1 </dev/null)
	r=$?
	check_eq "qemu -accel kvm runs a guest inside --allow-kvm (its debug-exit: status 1)" 1 "$r"
	check_match "... the guest's serial console says it ran" "sluice-kvm-guest-ok" "$out"
	[ "$r" = 1 ] || diag "$(tail -20 <<<"$out")"
else
	skip_no_kvm "qemu -accel kvm runs a guest inside --allow-kvm" "$nokvm"
fi
out=$(cd "$P" && timeout 60 "$SLUICE" run --quiet --ro-bind "$SB_T/mb" -- "${QEMU[@]}" 2>&1 </dev/null)
r=$?
check "without --allow-kvm qemu cannot use KVM (fails)" test "$r" != 0
check_match "... because there is no /dev/kvm" "Could not access KVM kernel module: No such file or directory" "$out"
check_not "... and no guest ran" grep -q sluice-kvm-guest-ok <<<"$out"

# --sandbox-type vm fails closed without KVM: the test user cannot open /dev/kvm (or there is none).
out=$(sb user --sandbox-type vm -- true 2>&1); r=$?
check_eq "user without KVM: --sandbox-type vm refused (125), nothing emulated behind its back" 125 "$r"
want='cannot open /dev/kvm.*--vm-accel tcg'
[ -z "$nokvm" ] || want='--sandbox-type vm: .*/dev/kvm: .*--vm-accel tcg'
check_match "... naming the way out" "$want" "$out"
out=$(sb root --vm-accel tcg -- true 2>&1); r=$?
check_eq "--vm-accel without --sandbox-type vm: refused (125)" 125 "$r"
check_match "... with a line saying so" "--vm-accel goes with --sandbox-type vm" "$out"

check_eq "no session directory left (root)" 0 "$(session_dirs root)"
check_eq "no session directory left (user)" 0 "$(session_dirs user)"
done_testing
