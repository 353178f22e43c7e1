#!/usr/bin/env bash
# hardening_cli: every program sluice installs is a position-independent executable with full RELRO (read-only
# relocations and BIND_NOW: no writable GOT) and a non-executable stack, whatever static_libs links into it.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
command -v readelf >/dev/null || { echo "Bail out! readelf (binutils) is needed"; exit 1; }
for prog in sandbox/sluice netd/sluiced proxy/sluice-proxy tools/sluicectl/sluicectl; do
	bin=$SLUICE_BUILD_DIR/$prog
	check_match "$prog is a position-independent executable" 'DYN \(Position-Independent Executable' \
		"$(readelf -hW "$bin" | grep Type:)"
	check_eq "$prog has a GNU_RELRO segment" 1 "$(readelf -lW "$bin" | grep -c GNU_RELRO)"
	check_match "$prog binds now (full RELRO)" 'BIND_NOW|Flags:.* NOW' "$(readelf -dW "$bin" | grep -E '\(FLAGS')"
	check_eq "$prog's stack is not executable" "RW" "$(readelf -lW "$bin" | awk '/GNU_STACK/ {print $7}')"
done
done_testing
