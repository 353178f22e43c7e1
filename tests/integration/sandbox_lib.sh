# Helpers for the sandbox integration tests (sourced after tests/lib/tap.sh). Every test runs the
# launcher twice: as root, and as a throwaway unprivileged user (user namespaces) created here and
# removed on exit. All state lives in a private temp dir; HOME is a fake home inside it.
SLUICE="$SLUICE_BUILD_DIR/sandbox/sluice"
ESC="$SLUICE_BUILD_DIR/tests/escape"
[ "$(id -u)" = 0 ] || skip_all "the sandbox tests create a test user and cgroups: run as root"
[ -x "$SLUICE" ] || skip_all "sluice not built"
command -v setpriv >/dev/null || skip_all "setpriv (util-linux) missing"

# Not under /tmp: the sandbox replaces /tmp, and the unsafe profile must see the fake homes.
SB_T=$(mktemp -d "${SLUICE_SBTEST_DIR:-/var/lib}/sluice-sbtest.XXXXXX")
chmod 755 "$SB_T"
TU=$(test_user_name sbt)
TU_HOME="$SB_T/home-user"
ROOT_HOME="$SB_T/home-root"
# root's session directories go under this private XDG_RUNTIME_DIR, not the machine's shared
# /run/sluice/sessions, so sessions of other runs never count as this test's leftovers
ROOT_RT="$SB_T/rt-root"
mkdir -p "$TU_HOME" "$ROOT_HOME" "$ROOT_RT"
chmod 700 "$ROOT_RT"
test_useradd "$TU" "$TU_HOME" || { echo "Bail out! useradd $TU failed (10 s)"; exit 1; }
chown "$TU:$TU" "$TU_HOME"
chmod 700 "$TU_HOME" "$ROOT_HOME"
TU_UID=$(id -u "$TU")

sb_cleanup() {
	# Processes of the test user (there should be none): by uid, never by name.
	local p
	for p in $(pgrep -u "$TU_UID" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	userdel "$TU" >/dev/null 2>&1
	rm -rf "$SB_T" "/var/tmp/sluice-$TU_UID"
}
trap sb_cleanup EXIT

# home MODE: the fake home of root or the test user.
home() { if [ "$1" = root ]; then echo "$ROOT_HOME"; else echo "$TU_HOME"; fi; }

# newdir MODE: a fresh directory owned by MODE's user.
newdir() {
	local d
	d=$(mktemp -d "$SB_T/p.XXXXXX")
	chmod 755 "$d"
	[ "$1" = root ] || chown "$TU:$TU" "$d"
	echo "$d"
}

# as MODE CMD...: runs CMD with a clean environment as root or as the test user, in the current
# directory. Extra variables: set SB_ENV="NAME=VALUE ..." for the call.
as() {
	local mode=$1; shift
	# shellcheck disable=SC2086
	if [ "$mode" = root ]; then
		env -i HOME="$ROOT_HOME" XDG_RUNTIME_DIR="$ROOT_RT" PATH=/usr/local/bin:/usr/bin:/bin USER=root LANG=C.UTF-8 ${SB_ENV:-} "$@"
	else
		setpriv --reuid="$TU_UID" --regid="$TU_UID" --clear-groups \
			env -i HOME="$TU_HOME" PATH=/usr/local/bin:/usr/bin:/bin USER="$TU" LANG=C.UTF-8 ${SB_ENV:-} "$@"
	fi
}

# bg_exec MODE CMD...: like `as`, but execs (use in a background subshell so $! is CMD's pid).
bg_exec() {
	local mode=$1; shift
	# shellcheck disable=SC2086
	if [ "$mode" = root ]; then
		exec env -i HOME="$ROOT_HOME" XDG_RUNTIME_DIR="$ROOT_RT" PATH=/usr/local/bin:/usr/bin:/bin USER=root LANG=C.UTF-8 ${SB_ENV:-} "$@"
	else
		exec setpriv --reuid="$TU_UID" --regid="$TU_UID" --clear-groups \
			env -i HOME="$TU_HOME" PATH=/usr/local/bin:/usr/bin:/bin USER="$TU" LANG=C.UTF-8 ${SB_ENV:-} "$@"
	fi
}

# sb MODE ARGS...: `sluice run ARGS...` as MODE.
sb() { local mode=$1; shift; as "$mode" "$SLUICE" run "$@"; }

# q CMD...: runs CMD with its output turned into TAP comments; returns CMD's status.
q() {
	local o r
	o=$("$@" 2>&1)
	r=$?
	[ -n "$o" ] && printf '%s\n' "$o" | sed 's/^/# /'
	return $r
}

# rc CMD...: prints CMD's exit status (output discarded).
rc() { "$@" >/dev/null 2>&1; echo $?; }

# session_dirs MODE: how many session directories exist (must be 0 between sessions).
session_dirs() {
	local d
	if [ "$1" = root ]; then d="$ROOT_RT/sluice"; else d="/var/tmp/sluice-$TU_UID"; fi
	find "$d" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l
}

MODES="root user"

# org_sb JSON MODE ARGS...: `sluice run ARGS...` as MODE with JSON as the organisation's policy file
# (/etc/sluice/policy.json), in a private mount namespace where /etc is an overlay: the machine's
# /etc is never touched.
org_sb() {
	local json=$1 mode=$2 o r
	shift 2
	o=$(mktemp -d "$SB_T/org.XXXXXX")
	mkdir -p "$o/upper/sluice" "$o/work"
	printf '%s\n' "$json" >"$o/upper/sluice/policy.json"
	chmod 755 "$o/upper/sluice"
	chmod 644 "$o/upper/sluice/policy.json"
	# shellcheck disable=SC2016
	unshare -m --propagation private bash -c \
		'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc && shift && exec "$@"' \
		bash "$o" bash -c "$(declare -p ROOT_HOME ROOT_RT TU_HOME TU_UID; declare -f as); SB_ENV='${SB_ENV:-}'; "'as "$@"' \
		bash "$mode" "$SLUICE" run "$@"
	r=$?
	rm -rf "$o"
	return $r
}

# command_status ARGS...: starts `sluice run ARGS... -- sleep 5` as root, prints the /proc status of
# the sleep (the command, child of the sandbox's pid 1) as the host sees it, plus a line
# "UserNsOwner: UID" (the owner of its user namespace, NS_GET_OWNER_UID), and ends the session.
command_status() {
	local lpid spid=""
	( bg_exec root "$SLUICE" run "$@" -- sleep 5 >/dev/null 2>&1 ) &
	lpid=$!
	for _ in $(seq 50); do
		spid=$(pgrep -P "$(pgrep -P "$lpid" | head -1)" -x sleep 2>/dev/null | head -1)
		[ -n "$spid" ] && break
		sleep 0.1
	done
	cat "/proc/$spid/status" 2>/dev/null
	python3 -c '
import fcntl, struct, sys
with open("/proc/%s/ns/user" % sys.argv[1]) as f:
    print("UserNsOwner:", struct.unpack("I", fcntl.ioctl(f, 0xb704, b"\0" * 4))[0])' "$spid" 2>/dev/null
	kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
}
