#!/usr/bin/env bash
# The README's test command. Installs missing Debian packages, builds sluice three ways and runs every
# suite: a normal build (all suites), an ASan+UBSan build (all suites), and a clang libFuzzer build that
# fuzzes each target for a short bounded time. Ends with "N passed, N failed, N skipped"; exits non-zero
# if any test failed, or (under CI, or with SLUICE_NO_SKIP=1) if any test was skipped.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src" || exit 2
"$src/tools/deps.sh" || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

if [ -n "${CI:-}" ]; then export SLUICE_NO_SKIP=1; fi
# KVM (sandbox_kvm, sandbox_vm): a kernel with KVM whose /dev has no node (a container's /dev) gets the
# node udev would make, removed again at the end. Where KVM still does not work, the checks that need it
# are skipped and counted below, not failed (the machine's lack, not sluice's); the checks of what sluice
# does without KVM run either way.
made_kvm=
if [ ! -e /dev/kvm ] && [ "$(id -u)" = 0 ] && minor=$(awk '$2 == "kvm" { print $1 }' /proc/misc) && [ -n "$minor" ]; then
	if mknod -m 0600 /dev/kvm c 10 "$minor" 2>/dev/null; then
		made_kvm=1
		trap 'rm -f /dev/kvm' EXIT
		getent group kvm >/dev/null && chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
		echo "== the kernel has KVM but /dev has no kvm node: made it as udev would (c 10:$minor, $(stat -c "%a %U:%G" /dev/kvm)), removed at the end"
	fi
fi
if why=$(python3 "$src/tests/lib/kvm-usable.py"); then
	unset SLUICE_HOST_NO_KVM
else
	export SLUICE_HOST_NO_KVM=1
	echo "== no KVM on this machine ($why): the checks that need it are skipped, not failed"
	if [ -n "$made_kvm" ]; then rm -f /dev/kvm; made_kvm=; trap - EXIT; fi
fi
fuzz_seconds=${SLUICE_FUZZ_SECONDS:-10}
export SLUICE_FUZZ_SECONDS=$fuzz_seconds

total_pass=0 total_fail=0 total_skip=0
status=0

# setup DIR [meson options...]: (re)configures a build directory idempotently.
setup() {
	local dir=$1; shift
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1
	else
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1
	fi || { cat "$dir.setup.log" >&2; return 1; }
}

# run_suites DIR LABEL [meson test args...]: builds and tests, adding to the totals.
run_suites() {
	local dir=$1 label=$2; shift 2
	echo "== $label: building in $dir"
	if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
		tail -n 60 "$dir.build.log" >&2
		echo "== $label: build FAILED"
		total_fail=$((total_fail + 1)); status=1
		return
	fi
	echo "== $label: testing"
	meson test -C "$dir" --print-errorlogs --no-rebuild "$@"
	local rc=$?
	local counts
	counts=$(python3 "$src/tests/lib/count-results.py" "$dir/meson-logs/testlog.json") || counts="0 1 0"
	read -r p f s <<<"$counts"
	echo "== $label: $p passed, $f failed, $s skipped"
	total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
	if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then status=1; fi
}

setup build -Dbuildtype=debugoptimized && run_suites build "normal build" || { total_fail=$((total_fail + 1)); status=1; }
setup build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false &&
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	run_suites build-asan "ASan+UBSan build" || { total_fail=$((total_fail + 1)); status=1; }
CC=clang setup build-fuzz -Dbuildtype=debug -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false &&
	run_suites build-fuzz "libFuzzer build (${fuzz_seconds}s per target)" --suite fuzz ||
	{ total_fail=$((total_fail + 1)); status=1; }

if [ -n "${SLUICE_NO_SKIP:-}" ] && [ "$total_skip" -ne 0 ]; then
	echo "== $total_skip test(s) skipped, and skips are failures here (CI or SLUICE_NO_SKIP): see the logs above"
	status=1
fi
if [ -n "${SLUICE_HOST_NO_KVM:-}" ]; then
	nokvm=$(cat build*/meson-logs/testlog.txt 2>/dev/null | grep -c '# SKIP no KVM on this machine')
	echo "== $nokvm check(s) that need KVM were skipped: this machine has none (see the line at the start)"
	total_skip=$((total_skip + nokvm))
fi
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
exit $status
