#!/usr/bin/env bash
# Installs the Debian packages in tools/debian-packages.txt that are missing. Idempotent; needs root
# only when something is missing. `deps.sh` installs the build, test and demo groups; `deps.sh --bench`
# also the benchmark peers (squid, tinyproxy, ...), which are only needed by tools/bench-*.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
groups='build|test'
if [ "${1:-}" = "--bench" ]; then groups='build|test|bench'; shift; fi
# The list is split into groups by lines "@group NAME".
mapfile -t want < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/debian-packages.txt" |
	awk -v g="^($groups)\$" '$1 == "@group" { on = ($2 ~ g); next } on { print $1 }')
[ "$#" -gt 0 ] && want+=("$@")
# What installed packages provide counts as installed (nodesource's nodejs provides npm, and conflicts
# with Debian's npm package).
provided=" $(dpkg-query -W -f='${db:Status-Abbrev}|${Provides}\n' 2>/dev/null | awk -F'|' '$1 ~ /^ii/ { print $2 }' |
	tr ',' '\n' | sed -e 's/([^)]*)//g' -e 's/[[:space:]]//g' | sort -u | tr '\n' ' ') "
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && continue
	case $provided in *" $p "*) continue ;; esac
	missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "sluice: missing Debian packages: ${missing[*]}" >&2
	echo "sluice: run this script as root, or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "sluice: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Packages such as squid, tinyproxy and dnsmasq start a service in the root namespace when installed;
# a policy-rc.d that forbids it (when none exists) keeps the machine as it was.
rcd=/usr/sbin/policy-rc.d
if [ ! -e "$rcd" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$rcd" && chmod 0755 "$rcd"
	trap 'rm -f "$rcd"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
