#!/usr/bin/env bash
# Issue 22, item 6: a session cannot use up its user's per-user kernel limits. Inside, a command
# takes all it can of inotify instances, POSIX message queue bytes, pending signals and processes
# and holds them; meanwhile the same user (root, or the test user) outside must still get some.
# The session's own limits are visible in /proc/sys/user and its rlimits.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

TOOLS=$(newdir root)
cat >"$TOOLS/hog.py" <<'PY'
# hog.py WHAT [N]: takes as many of WHAT as the kernel gives (at most N), prints "held COUNT", and
# keeps them until stdin closes or 20 s pass. With N, prints "got COUNT" and exits at once.
import ctypes, os, select, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
what, limit = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 30
held = []
if what == "inotify":
    while len(held) < limit:
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            break
        held.append(fd)
elif what == "mqueue":
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    class Attr(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("cur", ctypes.c_long), ("pad", ctypes.c_long * 4)]
    rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(Attr)]
    a = Attr(0, 10, 8192, 0)
    while len(held) < limit:
        name = b"/sluice-hog-%d-%d" % (os.getpid(), len(held))
        q = rt.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(a))
        if q < 0:
            break
        rt.mq_unlink(name)
        held.append(q)
elif what == "sigpending":
    sig = signal.SIGRTMIN
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    class SigVal(ctypes.Union):
        _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
    while len(held) < limit:
        if libc.sigqueue(os.getpid(), sig, SigVal(1)) < 0:
            break
        held.append(1)
elif what == "nproc":
    while len(held) < limit:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            select.select([sys.stdin], [], [], 20)
            os._exit(0)
        held.append(pid)
if len(sys.argv) > 2:
    print("got", len(held), flush=True)
    sys.exit(0)
print("held", len(held), flush=True)
select.select([sys.stdin], [], [], 20)
PY
chmod -R a+rX "$TOOLS"

# hog_inside MODE WHAT [LAUNCHER-PREFIX...]: runs hog.py WHAT in a session in the background (its
# stdin a fifo kept open by this shell on fd 8, so call it in this shell, not in $(...)) and waits
# for its count, which it leaves in HELD.
hog_inside() {
	local mode=$1 what=$2
	shift 2
	rm -f "$SB_T/hog.fifo" "$SB_T/hog.out"
	mkfifo "$SB_T/hog.fifo"
	chmod 666 "$SB_T/hog.fifo"
	( bg_exec "$mode" "$@" "$SLUICE" run --ro-bind "$TOOLS" -- python3 "$TOOLS/hog.py" "$what" \
		<"$SB_T/hog.fifo" >"$SB_T/hog.out" 2>&1 ) &
	HOG_PID=$!
	exec 8>"$SB_T/hog.fifo"
	for _ in $(seq 200); do grep -q '^held' "$SB_T/hog.out" 2>/dev/null && break; sleep 0.1; done
	HELD=$(sed -n 's/^held //p' "$SB_T/hog.out")
}
hog_release() { exec 8>&-; wait "$HOG_PID" 2>/dev/null; }

# outside MODE WHAT N [PREFIX...]: the same user outside the sandbox takes N of WHAT; prints how many.
outside() {
	local mode=$1 what=$2 n=$3
	shift 3
	as "$mode" "$@" python3 "$TOOLS/hog.py" "$what" "$n" </dev/null | sed -n 's/^got //p'
}

for m in $MODES; do
	P=$(newdir "$m")
	cd "$P" || exit 1
	for what in inotify mqueue sigpending; do
		hog_inside "$m" "$what"
		check "$m: $what: the session took some ($HELD)" test "${HELD:-0}" -gt 0
		check_eq "$m: $what: while it holds them, the same user outside still gets 4" 4 "$(outside "$m" "$what" 4)"
		hog_release
	done
	check_eq "$m: inside, no new user namespace may be made (max_user_namespaces)" 0 \
		"$(sb "$m" -- cat /proc/sys/user/max_user_namespaces)"
	check_eq "$m: inside, half the user's inotify instances" "$(($(cat /proc/sys/user/max_inotify_instances) / 2))" \
		"$(sb "$m" -- cat /proc/sys/user/max_inotify_instances)"
	check_eq "$m: inside, half the user's inotify watches" "$(($(cat /proc/sys/user/max_inotify_watches) / 2))" \
		"$(sb "$m" -- cat /proc/sys/user/max_inotify_watches)"
	check_eq "$m: inside, half the pending-signal limit (RLIMIT_SIGPENDING)" "$(($(ulimit -i) / 2))" \
		"$(sb "$m" -- bash -c 'ulimit -i')"
	cd / || exit 1
done

# A root launch: the kernel charges per-user counts to the owner of the command's user namespace.
cd "$(newdir root)" || exit 1
st=$(command_status)
owner=$(sed -n 's/^UserNsOwner: //p' <<<"$st")
check "root: the command's user namespace belongs to an unprivileged uid (${owner:-?}), not root" \
	test -n "$owner" -a "${owner:-0}" != 0
check_eq "root: ... the uid the command runs as" "$owner" "$(awk '/^Uid:/ {print $2}' <<<"$st")"

# Processes: RLIMIT_NPROC is per user; the test user gets a small one so the test stays small.
P=$(newdir user)
cd "$P" || exit 1
hog_inside user nproc prlimit --nproc=200:200
check "user: nproc: the session forked some ($HELD) and stopped at half the user's 200" test "${HELD:-0}" -gt 0 -a "${HELD:-999}" -le 100
check_eq "user: nproc: while they live, the user outside still forks 20" 20 "$(outside user nproc 20 prlimit --nproc=200:200)"
hog_release
cd / || exit 1
check_eq "no session directory left (root)" 0 "$(session_dirs root)"
check_eq "no session directory left (user)" 0 "$(session_dirs user)"
done_testing
