#!/usr/bin/env bash
# The README's first command: installs missing Debian packages (tools/deps.sh), builds sluice quietly
# (meson + ninja in ./build, or $SLUICE_BUILD_DIR), then runs the showcase, tools/demo-lab.sh, as root
# inside a throwaway lab of network namespaces with a fake internet: nothing touches the machine's own
# network, and nothing is left behind but the build directory. Takes a few seconds once built.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "tools/demo.sh: the demo builds a throwaway lab of network namespaces, which needs root:" >&2
	echo "  sudo $0" >&2
	exit 1
fi
"$src/tools/deps.sh"
build=${SLUICE_BUILD_DIR:-$src/build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf 'Building sluice in %s ...' "$build"
if [ ! -f "$build/build.ninja" ] && ! meson setup "$build" "$src" >"$log" 2>&1; then
	printf ' failed:\n'
	tail -n 30 "$log"
	exit 1
fi
if ! ninja -C "$build" >"$log" 2>&1; then
	printf ' failed:\n'
	tail -n 40 "$log"
	exit 1
fi
printf ' done.\n'
SLUICE_BUILD_DIR=$build SLUICE_SOURCE_DIR=$src "$src/tools/demo-lab.sh"
