#!/usr/bin/env bash
# The README's first command: installs missing Debian packages, builds sluice, and runs the demo.
# (The full end-to-end demo lands with the launcher and proxy; today it shows the policy engine on
# the shipped examples: what a project may reach, what it may not, and why.)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
"$src/tools/deps.sh"
if [ ! -f build/build.ninja ]; then meson setup build >/dev/null; fi
ninja -C build >/dev/null
ctl="$src/build/tools/sluicectl"
export SLUICE_PRESET_DIR="$src/policy/presets"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@" || true; }

say "Validate the shipped example policies"
run "$ctl" policy check policy/examples/project-policy.json
run "$ctl" policy check --layer org policy/examples/org-policy.json
say "An unsafe policy is refused with file:line:col"
bad=$(mktemp --suffix=.json)
printf '{\n  "allow": [\n    "pypi.org",\n    "*.co.uk"\n  ]\n}\n' > "$bad"
run "$ctl" policy check "$bad"
rm -f "$bad"
say "What may a project with policy/examples/project-policy.json reach?"
for t in registry.npmjs.org:443 files.pythonhosted.org:443 telemetry.npmjs.org:443 evil.example.net:443 \
	169.254.169.254:80 0x7f.1:80; do
	run "$ctl" policy explain --no-standard-layers --policy policy/examples/project-policy.json "$t"
done
run "$ctl" policy explain --no-standard-layers --policy policy/examples/project-policy.json --method POST api.github.com
