# TAP helpers for shell tests (sourced). Each check is one TAP line; the script's exit status is non-zero
# if any check failed. `skip_all` turns into a failure when SLUICE_NO_SKIP is set (CI), so a missing
# capability can never hide behind a skip.
tap_n=0
tap_failed=0

# check DESC CMD...: runs CMD, "ok" when it exits 0. CMD's output goes to stderr (it is not TAP).
check() {
	local desc=$1; shift
	tap_n=$((tap_n + 1))
	if "$@" >&2; then
		echo "ok $tap_n - $desc"
	else
		echo "not ok $tap_n - $desc"
		tap_failed=$((tap_failed + 1))
	fi
}

# check_not DESC CMD...: "ok" when CMD fails. CMD's output goes to stderr.
check_not() {
	local desc=$1; shift
	tap_n=$((tap_n + 1))
	if "$@" >&2; then
		echo "not ok $tap_n - $desc"
		tap_failed=$((tap_failed + 1))
	else
		echo "ok $tap_n - $desc"
	fi
}

# check_eq DESC EXPECTED ACTUAL
check_eq() {
	tap_n=$((tap_n + 1))
	if [ "$2" = "$3" ]; then
		echo "ok $tap_n - $1"
	else
		echo "not ok $tap_n - $1"
		echo "#   expected: $2"
		echo "#   actual:   $3"
		tap_failed=$((tap_failed + 1))
	fi
}

# check_match DESC REGEX TEXT (grep -E)
check_match() {
	tap_n=$((tap_n + 1))
	if printf '%s' "$3" | grep -Eq -- "$2"; then
		echo "ok $tap_n - $1"
	else
		echo "not ok $tap_n - $1"
		echo "#   wanted /$2/ in:"
		printf '%s\n' "$3" | head -n 20 | sed 's/^/#     /'
		tap_failed=$((tap_failed + 1))
	fi
}

diag() { printf '%s\n' "$*" | sed 's/^/# /'; } # every line a comment

# skip_one DESC REASON: one check that cannot run here. Like skip_all, a failure under SLUICE_NO_SKIP.
skip_one() {
	tap_n=$((tap_n + 1))
	if [ -n "${SLUICE_NO_SKIP:-}" ]; then
		echo "not ok $tap_n - $1 (required capability missing: $2)"
		tap_failed=$((tap_failed + 1))
	else
		echo "ok $tap_n - $1 # SKIP $2"
	fi
}

# kvm_usable: this machine's /dev/kvm opens and makes a VM; otherwise prints why and fails.
kvm_usable() { python3 "$SLUICE_SOURCE_DIR/tests/lib/kvm-usable.py"; }

# skip_no_kvm DESC REASON: one check that needs KVM, on a machine where kvm_usable fails. Under
# SLUICE_NO_SKIP a skip too, not a failure, but only when tools/test.sh found the same before any test
# ran (SLUICE_HOST_NO_KVM=1): the harness vouches that the machine lacks KVM, so a test that misjudges
# it still fails CI. The machine's lack is not sluice's: the checks of what sluice does without KVM
# run either way.
skip_no_kvm() {
	if [ -n "${SLUICE_NO_SKIP:-}" ] && [ "${SLUICE_HOST_NO_KVM:-}" != 1 ]; then
		skip_one "$@"
		return
	fi
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $1 # SKIP no KVM on this machine: $2"
}

skip_all() {
	if [ -n "${SLUICE_NO_SKIP:-}" ]; then
		echo "not ok 1 - required capability missing: $*"
		echo "1..1"
		exit 1
	fi
	echo "1..0 # SKIP $*"
	exit 77
}

done_testing() {
	echo "1..$tap_n"
	[ "$tap_failed" -eq 0 ]
	exit $?
}

# Paths for tests: the build dir holds the binaries, the source dir the data.
: "${SLUICE_BUILD_DIR:?run through meson test}"
: "${SLUICE_SOURCE_DIR:?run through meson test}"

# test_user_name PREFIX: a user name no other run uses ($$ is 1 inside a lab's pid namespace, so a run
# killed before its cleanup would leave a user the next run's name collides with).
test_user_name() {
	printf '%s%04x%04x\n' "$1" "$RANDOM" "$RANDOM"
}

# test_useradd NAME HOME: a throw-away user for a test (no home made). useradd fails while another
# process holds /etc/passwd's lock (another test, a package install): tried again for up to ~10 s.
test_useradd() {
	local i
	for i in $(seq 40); do
		useradd -M -d "$2" -s /bin/sh "$1" >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	return 1
}
