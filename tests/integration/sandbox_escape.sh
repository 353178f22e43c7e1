#!/usr/bin/env bash
# The escape suite: small programs (tests/escape/) and shell run as the sandboxed command, each
# asserting the safe outcome, in the base and unsafe profiles, as root and unprivileged.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

# Host-side bait: a process; an abstract unix socket; an ssh-agent socket (SSH_AUTH_SOCK), the user
# bus and a gpg-agent socket under XDG_RUNTIME_DIR, placed in a directory the sandbox can see
# (bound read-only below: a read-only mount alone does not stop connect(2), the masks must).
sleep 120 &
host_pid=$!
SOCKDIR=$(newdir root)
mkdir -p "$SOCKDIR/rt/gnupg"
python3 - "$SOCKDIR" "sluice-test-$$" <<'PY' &
import os, socket, sys, time
keep = []
for p in ("agent.sock", "rt/bus", "rt/gnupg/S.gpg-agent"):
    s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(sys.argv[1], p)); s.listen(8)
    os.chmod(os.path.join(sys.argv[1], p), 0o666); keep.append(s)
b = socket.socket(socket.AF_UNIX); b.bind("\0" + sys.argv[2]); b.listen(8)
time.sleep(120)
PY
sock_pid=$!
chmod -R a+rwX "$SOCKDIR"
for _ in $(seq 50); do test -S "$SOCKDIR/rt/gnupg/S.gpg-agent" && break; sleep 0.1; done
SOCKS="$SOCKDIR/agent.sock $SOCKDIR/rt/bus $SOCKDIR/rt/gnupg/S.gpg-agent"
for s in $SOCKS; do
	check "(test) $s accepts connections on the host" \
		python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$s"
done

# setuid-root and file-capability copies of esc_privs, visible read-only to the sandbox.
PRIV=$(newdir root)
cp "$ESC/esc_privs" "$PRIV/suid"; chmod 4755 "$PRIV/suid"
cp "$ESC/esc_privs" "$PRIV/fcap"; setcap cap_sys_admin,cap_dac_override+ep "$PRIV/fcap" 2>/dev/null
check "(test) the file-capability copy carries capabilities" sh -c "getcap '$PRIV/fcap' | grep -q cap_sys_admin"

for m in $MODES; do
	P=$(newdir "$m")
	cd "$P" || exit 1
	for prof in base unsafe; do
		t="$m/$prof"
		run() { SB_ENV="SSH_AUTH_SOCK=$SOCKDIR/agent.sock XDG_RUNTIME_DIR=$SOCKDIR/rt" sb "$m" --profile "$prof" --ro-bind "$ESC" --ro-bind "$PRIV" --ro-bind "$SOCKDIR" "$@"; }
		out=$(run -- "$ESC/esc_syscalls" 2>&1)
		check "$t: blocked system calls fail with EPERM (io_uring, bpf, keyctl, mount API, new user ns, ...)" \
			test $? = 0
		check_not "$t: ... no blocked call went through" grep -q ESCAPE <<<"$out"
		check_match "$t: ... io_uring refused" "SAFE: io_uring_setup" "$out"
		if [ "$(uname -m)" = x86_64 ]; then
			# the same calls under their i386 (int $0x80) and x32 numbers: seccomp.c's architecture list
			out=$(run -- "$ESC/esc_compat" 2>&1)
			check "$t: denied calls through the x32 and i386 entry points fail too" test $? = 0
			check_not "$t: ... none went through" grep -q ESCAPE <<<"$out"
			check_match "$t: ... x32 keyctl gets EPERM from the filter" \
				'^SAFE: x32 keyctl .*\(Operation not permitted\)$' "$out"
			check_match "$t: ... x32 unshare(CLONE_NEWUSER) gets EPERM from the filter" \
				'^SAFE: x32 unshare.*\(Operation not permitted\)$' "$out"
			check_match "$t: ... i386: EPERM, or no i386 entry on this kernel" \
				"SAFE: i386 keyctl .*Operation not permitted|SAFE: i386: int .0x80 faults" "$out"
		fi
		check "$t: TIOCSTI and TIOCLINUX are refused" q run -- "$ESC/esc_ioctl"
		check "$t: ptrace/process_vm_readv of pid 1, killing pid 1, signalling a host pid fail" \
			q run -- "$ESC/esc_ptrace" "$host_pid"
		check_not "$t: the host process is not visible" run -- test -e "/proc/$host_pid"
		# shellcheck disable=SC2086
		check "$t: abstract, ssh-agent, user bus and gpg-agent sockets of the host are unreachable" \
			q run -- "$ESC/esc_unix" "@sluice-test-$$" $SOCKS
		check "$t: a setuid-root binary gives no privileges" q run -- "$PRIV/suid"
		check "$t: a binary with file capabilities gives none" q run -- "$PRIV/fcap"
		check_not "$t: su does not work" run -- su -c true root
		out=$(run -- sh -c 'for f in /etc/x /usr/x /x /proc/sys/kernel/hostname /proc/sysrq-trigger; do
			(echo 1 > $f) 2>/dev/null && echo "WROTE $f"; done; echo done' 2>&1)
		check_eq "$t: no write outside approved places (/etc, /usr, /, /proc/sys, sysrq)" "done" "$out"
		check_not "$t: cannot remount / read-write" run -- mount -o remount,rw /
		check_not "$t: cannot create a user namespace (unshare -U)" run -- unshare -U true
		check_not "$t: /dev/mem, /dev/kmsg and disks are absent" run -- sh -c 'ls /dev/mem /dev/kmsg /dev/vda /dev/sda 2>/dev/null | grep -q .'
	done
	cd / || exit 1
done
kill "$host_pid" "$sock_pid" 2>/dev/null
wait 2>/dev/null
done_testing
