#!/usr/bin/env bash
# install_cli: `meson install --destdir` puts every part in place: the binaries (sluice, sluicectl,
# sluiced, sluice-proxy when built), the policy presets, the systemd unit, the man pages and the bash
# completions; and the installed sluicectl runs.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
B=$SLUICE_BUILD_DIR
D=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install.XXXXXX")
trap 'rm -rf "$D"' EXIT
out=$(meson install -C "$B" --destdir "$D" --no-rebuild --quiet 2>&1)
check_eq "meson install --destdir succeeds" 0 "$?" || printf '%s\n' "$out" | sed 's/^/# /'
files=$(cd "$D" && find . -type f -o -type l | sed 's|^\./|/|' | sort)
has() { grep -qE "$1" <<<"$files"; }
check "bin/sluice" has '/bin/sluice$'
check "bin/sluicectl" has '/bin/sluicectl$'
check "sbin/sluiced" has '/sbin/sluiced$'
if [ -x "$B/proxy/sluice-proxy" ]; then
	check "sluice-proxy" has '/s?bin/sluice-proxy$'
fi
check "presets: npm" has '/share/sluice/presets/npm\.json$'
check "presets: registries" has '/share/sluice/presets/registries\.json$'
check "systemd unit" has '/lib/systemd/system/sluiced\.service$'
check "man page sluice(1)" has '/share/man/man1/sluice\.1$'
check "man page sluicectl(1)" has '/share/man/man1/sluicectl\.1$'
check "man page sluiced(8)" has '/share/man/man8/sluiced\.8$'
check "man page sluice.policy(5)" has '/share/man/man5/sluice\.policy\.5$'
check "bash completion for sluice" has '/share/bash-completion/completions/sluice$'
check "bash completion for sluicectl" has '/share/bash-completion/completions/sluicectl$'
ctl=$(grep -E '/bin/sluicectl$' <<<"$files" | head -1)
check_match "the installed sluicectl runs" '^sluicectl [0-9]' "$("$D$ctl" version)"
unit=$(grep -E 'sluiced\.service$' <<<"$files" | head -1)
sluiced=$(grep -E '/sbin/sluiced$' <<<"$files" | head -1)
check_match "the unit starts sluiced where it was installed" "^ExecStart=$sluiced\$" "$(grep ^ExecStart "$D$unit")"
printf '%s\n' "$files" | sed 's/^/# installed: /'
done_testing
