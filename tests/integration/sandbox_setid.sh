#!/usr/bin/env bash
# Issue 22, item 2: no set-id or file-capability file made inside a session outlives it. Every way
# a program sets a file's mode is tried (chmod, fchmod, fchmodat, fchmodat2, open/O_TMPFILE/creat
# with a mode, mknod, install -m, cp -p, tar -xp, security.capability xattrs) in every place the
# session can write on the host (a read-write project, a --bind, a writable carve-out), as root and
# unprivileged; then the host is searched. A root launch runs the command as an unprivileged host
# uid (uid 0 only in its own user namespace) unless --keep-root-uid.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

# A setuid and a setgid file to copy from, and a tarball holding set-id members.
SRC=$(newdir root)
cp /bin/true "$SRC/suid"; chmod 4755 "$SRC/suid"
cp /bin/true "$SRC/sgid"; chmod 2755 "$SRC/sgid"
(cd "$SRC" && tar -cpf "$SRC/setid.tar" suid sgid)
chmod -R a+rX "$SRC"

# The attempts, as one script run inside (in the current directory, which is a writable place).
# Each prints its own outcome; what matters is what the host finds afterwards.
ATTEMPTS='
touch a b c; chmod u+s a; chmod g+s b; chmod 6755 c
python3 - <<PY
import ctypes, os, stat
libc = ctypes.CDLL(None, use_errno=True)
def tryit(name, fn):
    try:
        fn()
    except OSError as e:
        print(name, "refused:", e.strerror)
open("d", "w").close(); open("e", "w").close(); open("f", "w").close()
tryit("os.chmod", lambda: os.chmod("d", 0o4755))
fd = os.open("e", os.O_RDWR)
tryit("fchmod", lambda: os.fchmod(fd, 0o2755))
tryit("fchmodat", lambda: os.chmod("f", 0o4755, dir_fd=os.open(".", os.O_RDONLY)))
tryit("open O_CREAT 04755", lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY, 0o4755)))
tryit("open O_CREAT 02755", lambda: os.close(os.open("h", os.O_CREAT | os.O_WRONLY, 0o2755)))
def tmpfile():
    t = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755)
    # linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, "i", AT_SYMLINK_FOLLOW): gives it a name
    if libc.linkat(-100, b"/proc/self/fd/%d" % t, -100, b"i", 0x400) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
tryit("O_TMPFILE 04755", tmpfile)
tryit("mknod S_IFREG|04755", lambda: os.mknod("j", stat.S_IFREG | 0o4755))
open("k", "w").close()
r = libc.syscall(452, -100, b"k", 0o4755, 0)   # fchmodat2(AT_FDCWD, "k", 04755, 0)
print("fchmodat2:", r, os.strerror(ctypes.get_errno()) if r else "ok")
r = libc.syscall(85, b"l", 0o4755)              # creat("l", 04755)
print("creat:", r, os.strerror(ctypes.get_errno()) if r < 0 else "ok")
open("m", "w").close()
# a v2 file capability blob granting cap_setuid (bit 7) permitted and effective
blob = bytes([0, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
tryit("setxattr security.capability", lambda: os.setxattr("m", "security.capability", blob))
PY
install -m 4755 /bin/true n
cp -p @SRC@/suid o
mkdir tarx && tar -C tarx -xpf @SRC@/setid.tar
true'
ATTEMPTS=${ATTEMPTS//@SRC@/$SRC}

# setid_on_host DIR: every set-id file and every file with a security.capability xattr under DIR.
setid_on_host() {
	find "$1" -xdev -perm /6000 -type f 2>/dev/null
	getfattr -R -m '^security\.capability$' --absolute-names "$1" 2>/dev/null | sed -n 's/^# file: //p'
}

for m in $MODES; do
	H=$(home "$m")
	P=$(newdir "$m"); B=$(newdir "$m")
	cd "$P" || exit 1
	mkdir -p "$H/.config/sluice"
	echo '{ "sandbox": { "writable_paths": ["~/.cache/setid-carveout"] } }' >"$H/.config/sluice/policy.json"
	[ "$m" = root ] || chown -R "$TU:$TU" "$H/.config"

	out=$(sb "$m" --ro-bind "$SRC" --project-mode rw -- sh -c "$ATTEMPTS" 2>&1)
	check_eq "$m: rw project: no set-id or capability file reached the host" "" "$(setid_on_host "$P")"
	check_match "$m: ... chmod u+s was refused" "chmod: changing permissions of 'a'" "$out"
	check_match "$m: ... fchmodat2 was refused" "fchmodat2: -1 Operation not permitted" "$out"
	check_match "$m: ... O_CREAT with 04755 was refused" "open O_CREAT 04755 refused" "$out"
	check_match "$m: ... O_TMPFILE with 04755 was refused" "O_TMPFILE 04755 refused" "$out"
	check_match "$m: ... mknod of a set-id file was refused" "mknod S_IFREG\|04755 refused" "$out"
	check_match "$m: ... the capability xattr was refused" "setxattr security.capability refused" "$out"
	check_eq "$m: ... ordinary modes still work (chmod 755)" 0 \
		"$(rc sb "$m" --project-mode rw -- sh -c 'touch plain && chmod 755 plain && test -x plain')"
	check "$m: ... and a file made executable is still executable on the host" test -x "$P/plain"

	(cd "$B" && sb "$m" --ro-bind "$SRC" --bind "$B" -- sh -c "cd $B && { $ATTEMPTS; }" >/dev/null 2>&1)
	check "$m: --bind: the attempts ran there" test -e "$B/a"
	check_eq "$m: --bind: no set-id or capability file reached the host" "" "$(setid_on_host "$B")"

	C="$H/.cache/setid-carveout"
	sb "$m" --ro-bind "$SRC" -- sh -c "cd $C && { $ATTEMPTS; }" >/dev/null 2>&1
	check "$m: writable carve-out: the attempts ran there" test -e "$C/a"
	check_eq "$m: writable carve-out: no set-id or capability file reached the host" "" "$(setid_on_host "$C")"

	# The overlay: --apply already dropped set-id bits; the bits are now refused inside too.
	out=$(sb "$m" -- sh -c 'touch x; chmod u+s x; ls -l x' 2>&1)
	check_match "$m: overlay: chmod u+s is refused inside as well" "Operation not permitted" "$out"
	rm -rf "$H/.config/sluice"
	cd / || exit 1
done

# --- a root launch runs the command as an unprivileged host uid ---
P=$(newdir root)
cd "$P" || exit 1
check_eq "root: inside, the command is uid 0 (in its own user namespace)" "0 0" "$(sb root -- sh -c 'echo $(id -u) $(id -g)')"
st=$(command_status)
hostuid=$(awk '/^Uid:/ {print $2}' <<<"$st")
check "root: on the host, the command's uid is not 0 (uid ${hostuid:-?})" test -n "$hostuid" -a "${hostuid:-0}" != 0
check_eq "root: ... nor is its gid" 1 "$(awk '/^Gid:/ {print ($2 != 0)}' <<<"$st")"
check_eq "root: ... and it holds no supplementary group of root's" "" "$(awk '/^Groups:/ {$1=""; print}' <<<"$st" | tr -d ' ')"
check_eq "root: ... and no capability" "0000000000000000 0000000000000000" "$(awk '/^Cap(Prm|Eff):/ {printf "%s%s", sep, $2; sep=" "}' <<<"$st")"
sb root --project-mode rw -- sh -c 'echo w > written; mkdir wdir' >/dev/null 2>&1
check_eq "root: files it writes in a rw project are root's on the host (idmapped)" "0:0 0:0" \
	"$(stat -c %u:%g "$P/written" "$P/wdir" | tr '\n' ' ' | sed 's/ $//')"
echo secret >"$P/root-only"; chmod 600 "$P/root-only"
check_eq "root: root's 0600 project files stay readable (the project is idmapped)" "secret" "$(sb root -- cat "$P/root-only")"
R=$(newdir root); echo hidden >"$R/root-only"; chmod 600 "$R/root-only"; chmod 700 "$R"
check_not "root: unsafe: a root-only file elsewhere on the host is not readable" sb root --profile unsafe -- cat "$R/root-only"
check_eq "root: --keep-root-uid keeps host uid 0" 0 "$(command_status --keep-root-uid | awk '/^Uid:/ {print $2}')"
check_eq "root: --keep-root-uid still refuses set-id bits" 1 \
	"$(sb root --keep-root-uid --project-mode rw -- sh -c 'touch k; chmod u+s k' >/dev/null 2>&1; echo $?)"
check_eq "root: ... and none reached the host" "" "$(setid_on_host "$P")"
check_eq "unprivileged: --keep-root-uid is refused (it is for root launches)" 125 "$(rc sb user --keep-root-uid -- true)"
# the launcher reads its exited user-namespace child's /proc entry before reaping it (ns.c): an ignored
# SIGCHLD inherited from the caller (the kernel would reap the child at once) must not break the launch
check_eq "root: a launch whose caller ignores SIGCHLD still runs the command as the unprivileged uid" "0 ok" \
	"$(as root python3 -c 'import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])' \
		"$SLUICE" run -- sh -c 'echo $(id -u) $(test "$(cat /proc/self/uid_map | tr -s " " | cut -d" " -f3)" != 0 && echo ok)' 2>&1)"
check_eq "no session directory left (root)" 0 "$(session_dirs root)"
check_eq "no session directory left (user)" 0 "$(session_dirs user)"
cd / || exit 1
done_testing
