#!/usr/bin/env bash
# Issue 22, item 4: bind sources are resolved once into a descriptor, checked on it and mounted from
# it. A source that is (or leads into) a masked path is refused under every spelling: a symlink, the
# path itself, a file inside it, a hard link to a masked file, a configured plugin path; carve-outs are
# never reached through a symlink; and a source flipped between a directory and a symlink into a
# secret while sessions start is never mounted as the secret. As root and unprivileged.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

for m in $MODES; do
	H=$(home "$m")
	P=$(newdir "$m")
	cd "$P" || exit 1
	own() { [ "$m" = root ] || chown -hR "$TU:$TU" "$@"; }
	mkdir -p "$H/.ssh" "$H/.aws" "$P/safe"
	echo "SECRET-ssh-$m" >"$H/.ssh/id_test"
	echo "SECRET-aws-$m" >"$H/.aws/credentials"
	echo "SECRET-netrc-$m" >"$H/.netrc"
	echo "harmless" >"$P/safe/file"
	ln -sfn "$H/.ssh" "$P/to-ssh"
	ln -sfn "$H/.aws/credentials" "$P/to-aws-file"
	ln -f "$H/.netrc" "$P/netrc-hardlink"
	own "$H/.ssh" "$H/.aws" "$H/.netrc" "$P"

	# every spelling of a secret as a bind source is refused, and says why
	for src in "$P/to-ssh" "$H/.ssh" "$H/.ssh/id_test" "$P/to-aws-file" "$P/netrc-hardlink" "$H/.aws/../.ssh"; do
		for opt in --ro-bind --bind; do
			out=$(sb "$m" "$opt" "$src:/mnt/x" -- sh -c 'cat /mnt/x /mnt/x/* 2>/dev/null; echo ran' 2>&1)
			code=$?
			check_eq "$m: $opt ${src#"$SB_T"/} is refused (125)" 125 "$code"
			check_not "$m: ... and no secret was shown" grep -q SECRET <<<"$out"
		done
	done
	check_match "$m: the refusal names the masked path" "masks \\(a secret\\)" \
		"$(sb "$m" --ro-bind "$P/to-ssh:/mnt/x" -- true 2>&1)"
	check_match "$m: ... and the organisation setting that allows it" "allow_masked_binds" \
		"$(sb "$m" --ro-bind "$P/to-ssh:/mnt/x" -- true 2>&1)"
	check_eq "$m: an ordinary bind still works" "harmless" "$(sb "$m" --ro-bind "$P/safe:/mnt/x" -- cat /mnt/x/file)"
	check_eq "$m: ... also through a symlink that stays out of the secrets" "harmless" \
		"$(ln -sfn "$P/safe" "$P/to-safe" && own "$P/to-safe"; sb "$m" --ro-bind "$P/to-safe:/mnt/x" -- cat /mnt/x/file)"
	check_eq "$m: --bind SRC without DST lands where SRC really is" "harmless" \
		"$(sb "$m" --ro-bind "$P/to-safe" -- cat "$P/safe/file")"
	check_eq "$m: the project inside a masked directory is refused (125)" 125 \
		"$(rc sb "$m" --project "$H/.ssh" -- true)"
	check_eq "$m: the organisation can allow a masked bind" "SECRET-ssh-$m" \
		"$(org_sb '{"sandbox": {"allow_masked_binds": true}}' "$m" --ro-bind "$H/.ssh:/mnt/x" -- cat /mnt/x/id_test 2>/dev/null)"

	# configured paths: a plugin path that is a symlink into a secret; a carve-out reached via a symlink
	mkdir -p "$H/.config/sluice" "$H/real-cache"
	ln -sfn "$H/.aws" "$H/plugin-link"
	ln -sfn "$H/real-cache" "$H/cache-link"
	own "$H/.config" "$H/real-cache" "$H/plugin-link" "$H/cache-link"
	echo "{ \"sandbox\": { \"plugin_paths\": [\"$H/plugin-link\"] } }" >"$H/.config/sluice/policy.json"
	out=$(sb "$m" --profile plugin -- sh -c "cat $H/plugin-link/credentials $H/.aws/credentials 2>/dev/null; echo ran" 2>&1)
	check_eq "$m: a plugin path leading into a masked directory is refused (125)" 125 "$?"
	check_not "$m: ... and nothing of it was shown" grep -q SECRET <<<"$out"
	echo "{ \"sandbox\": { \"writable_paths\": [\"$H/cache-link/sub\"] } }" >"$H/.config/sluice/policy.json"
	out=$(sb "$m" -- true 2>&1)
	check_eq "$m: a carve-out reached through a symlink is refused (125)" 125 "$?"
	check_match "$m: ... saying so" "symlink" "$out"
	echo "{ \"sandbox\": { \"writable_paths\": [\"$H/real-cache/sub\"] } }" >"$H/.config/sluice/policy.json"
	check "$m: ... its real path works" sb "$m" -- sh -c "echo c > $H/real-cache/sub/f"
	rm -rf "$H/.config/sluice"

	# The race: the source flips between a directory and a symlink to ~/.ssh while sessions start.
	# Each session either gets the harmless directory or is refused; none ever sees the secret.
	mkdir -p "$P/flipdir"; echo harmless >"$P/flipdir/file"; own "$P/flipdir"
	( cd "$P" && while :; do
		ln -sfn "$H/.ssh" flip.new && mv -fT flip.new flip
		ln -sfn "$P/flipdir" flip.new && mv -fT flip.new flip
	done ) &
	flipper=$!
	leaks=0 mounted=0 refused=0
	for _ in $(seq 40); do
		out=$(sb "$m" --ro-bind "$P/flip:/mnt/x" -- sh -c 'cat /mnt/x/* 2>/dev/null' 2>&1)
		case $? in
		0) mounted=$((mounted + 1)) ;;
		125) refused=$((refused + 1)) ;;
		esac
		grep -q SECRET <<<"$out" && leaks=$((leaks + 1))
	done
	kill "$flipper"; wait "$flipper" 2>/dev/null
	diag "$m: race: $mounted mounted the directory, $refused refused, $leaks showed the secret"
	check_eq "$m: race: no launch out of 40 mounted the secret" 0 "$leaks"
	check "$m: race: the flip was exercised (some launches mounted, some were refused)" \
		test "$mounted" -gt 0 -a "$refused" -gt 0
	cd / || exit 1
done
check_eq "no session directory left (root)" 0 "$(session_dirs root)"
check_eq "no session directory left (user)" 0 "$(session_dirs user)"
done_testing
