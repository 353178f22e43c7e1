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
# The named namespaces (sluicectl netns create) are bind mounts the host must see: no unit setting that gives
# the service a file system namespace of its own (docs/operations.md says why).
check_eq "the unit gives sluiced no mount namespace of its own" "" \
	"$(grep -E '^(ProtectSystem|ProtectHome|PrivateTmp|PrivateDevices|PrivateMounts|ReadWritePaths|ReadOnlyPaths|InaccessiblePaths|TemporaryFileSystem|BindPaths|BindReadOnlyPaths|ProtectKernelTunables|ProtectKernelModules|ProtectKernelLogs|ProtectControlGroups|ProtectProc|ProcSubset|PrivateNetwork|PrivateIPC|MountFlags|RootDirectory|RootImage)=' "$D$unit")"
# systemd-analyze verify needs no running systemd; it warns (exit 0) about unknown keys, values and system
# call groups, so its output must be empty. ExecStart= must exist: point it at the installed binary.
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$D/verify"
	sed "s|^ExecStart=.*|ExecStart=$D$sluiced|" "$D$unit" >"$D/verify/sluiced.service"
	out=$(systemd-analyze verify --man=no "$D/verify/sluiced.service" 2>&1)
	check_eq "systemd-analyze verify: the unit is valid, without a warning" "0:" "$?:$out"
else
	skip_one "systemd-analyze verify of the unit" "no systemd-analyze (Debian package systemd)"
fi
printf '%s\n' "$files" | sed 's/^/# installed: /'
done_testing
