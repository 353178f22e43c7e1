#!/usr/bin/env bash
# sluice run: the filesystem view. Profiles, masked secrets under every path spelling, project
# modes with --save and --apply, binds, cache carve-outs, state not persisting between sessions,
# symlinks planted on mount paths, and no residue; as root and as an unprivileged user.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

mounts_before=$(wc -l </proc/self/mountinfo)
for m in $MODES; do
	H=$(home "$m")
	P=$(newdir "$m")
	cd "$P" || exit 1
	own() { [ "$m" = root ] || chown -R "$TU:$TU" "$@"; }
	echo original >"$P/keep.txt"
	echo doomed >"$P/doomed.txt"
	mkdir -p "$P/sub" && echo inner >"$P/sub/inner.txt"
	echo host-marker >"$H/marker"
	mkdir -p "$H/.ssh" "$H/.aws" "$H/dotfiles/gnupg" "$H/.config/gcloud" "$H/.azure"
	echo "SECRET-ssh-$m" >"$H/.ssh/id_test"
	echo "SECRET-aws-$m" >"$H/.aws/credentials"
	echo "SECRET-gpg-$m" >"$H/dotfiles/gnupg/key"
	echo "SECRET-gcloud-$m" >"$H/.config/gcloud/credentials.db"
	echo "SECRET-azure-$m" >"$H/.azure/msal_token_cache.json"
	ln -sfn "$H/dotfiles/gnupg" "$H/.gnupg"
	own "$P" "$H/marker" "$H/.ssh" "$H/.aws" "$H/dotfiles" "$H/.gnupg" "$H/.config" "$H/.azure"

	# --- base profile: system dirs read-only, empty writable home, project visible ---
	check_eq "$m: base: host files readable" "$(head -1 /etc/passwd)" "$(sb "$m" -- head -1 /etc/passwd)"
	check_not "$m: base: /usr is read-only" sb "$m" -- touch /usr/sluice-test
	check_not "$m: base: /etc is read-only" sb "$m" -- touch /etc/sluice-test
	check_not "$m: base: / is read-only" sb "$m" -- mkdir /sluice-test
	check_not "$m: base: the host home is not visible" sb "$m" -- test -e "$H/marker"
	check "$m: base: the home is a writable tmpfs" sb "$m" -- sh -c "echo x > $H/new && test -s $H/new"
	check_not "$m: base: other users' homes are not visible" sb "$m" -- test -e "$SB_T"/home-root/marker
	check "$m: base: the project is visible" sb "$m" -- grep -q original "$P/keep.txt"
	check "$m: base: /tmp, /var/tmp, /dev/shm are writable" sb "$m" -- sh -c 'touch /tmp/a /var/tmp/a /dev/shm/a'
	check "$m: /dev has the usual nodes" sb "$m" -- sh -c 'head -c1 /dev/urandom >/dev/null && echo >/dev/null && test -c /dev/zero && test -c /dev/full && test -e /dev/ptmx && test -d /dev/pts'
	check_not "$m: /dev has no disks" sb "$m" -- sh -c 'ls /dev | grep -Eq "^(sd|vd|nvme|mem|kmsg)"'

	# --- secrets: masked under every spelling, in unsafe (home visible) and with project = home ---
	for prof in unsafe homeproject; do
		if [ $prof = unsafe ]; then args="--profile unsafe"; else args="--project $H --project-mode ro"; fi
		check "$m: $prof: the host home marker is visible" sb "$m" $args -- grep -q host-marker "$H/marker"
		ln -sfn "$H/.ssh/id_test" "$P/link-to-key"; own "$P/link-to-key"
		out=$(sb "$m" $args --ro-bind "$P" -- sh -c "
			for f in '$H/.ssh/id_test' '$H//.ssh/./id_test' '$H/.ssh/../.ssh/id_test' \
				 '/proc/self/root$H/.ssh/id_test' '/proc/1/root$H/.ssh/id_test' '$P/link-to-key' \
				 '$H/.aws/credentials' '$H/.gnupg/key' '$H/dotfiles/gnupg/key' '/proc/self/cwd/../../../..$H/.ssh/id_test' \
				 '$H/.config/gcloud/credentials.db' '$H/.azure/msal_token_cache.json'; do
				cat \"\$f\" 2>/dev/null; done; ls -A '$H/.ssh' '$H/dotfiles/gnupg' '$H/.config/gcloud' '$H/.azure'; echo END" 2>&1)
		check_not "$m: $prof: no secret readable under any spelling (ssh, aws, gpg, gcloud, azure)" grep -q SECRET <<<"$out"
		check_match "$m: $prof: the masked directories look empty" "^END$" "$(tail -1 <<<"$out")"
		check_not "$m: $prof: the masks are read-only" sb "$m" $args -- sh -c "echo x > $H/.ssh/planted"
		check_not "$m: $prof: a mask cannot be unmounted" sb "$m" $args -- umount "$H/.ssh"
	done
	check_not "$m: unsafe: the host home is read-only" sb "$m" --profile unsafe -- touch "$H/new"
	check_not "$m: unsafe: /sys is read-only" sb "$m" --profile unsafe -- sh -c 'echo 1 > /sys/kernel/mm/ksm/run'
	check "$m: unsafe: /run is fresh" sb "$m" --profile unsafe -- sh -c '! test -e /run/sluice && ! test -e /run/dbus'

	# --- host sockets: agent, user bus, docker: masked or absent ---
	if [ "$m" = root ]; then
		python3 - "$H/agent.sock" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); time.sleep(20)
PY
		spid=$!
		for _ in $(seq 50); do test -S "$H/agent.sock" && break; sleep 0.1; done
		check "$m: (test) host socket is connectable on the host" python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$H/agent.sock"
		out=$(SB_ENV="SSH_AUTH_SOCK=$H/agent.sock" sb "$m" --profile unsafe --ro-bind "$ESC" -- "$ESC/esc_unix" "$H/agent.sock" 2>&1)
		check_match "$m: unsafe: SSH_AUTH_SOCK is masked" "SAFE: connect" "$out"
		kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; rm -f "$H/agent.sock"
		# a docker.sock in XDG_RUNTIME_DIR (rootless docker), in a directory the session can see
		RT=$(newdir root)
		python3 - "$RT/docker.sock" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); time.sleep(20)
PY
		spid=$!
		for _ in $(seq 50); do test -S "$RT/docker.sock" && break; sleep 0.1; done
		check "$m: (test) the docker.sock is connectable on the host" python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$RT/docker.sock"
		out=$(SB_ENV="XDG_RUNTIME_DIR=$RT" sb "$m" --profile unsafe --ro-bind "$RT" --ro-bind "$ESC" -- "$ESC/esc_unix" "$RT/docker.sock" 2>&1)
		check_match "$m: unsafe: \$XDG_RUNTIME_DIR/docker.sock is masked" "SAFE: connect" "$out"
		check_not "$m: ... and nothing connected" grep -q ESCAPE <<<"$out"
		kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; rm -rf "$RT"
	fi

	# --- project modes ---
	sb "$m" -- sh -c 'echo changed > keep.txt; echo new > new.txt; rm doomed.txt; mkdir d2; echo deep > d2/f' >/dev/null 2>&1
	check_eq "$m: overlay: the project on the host is unchanged" "original" "$(cat "$P/keep.txt")"
	check "$m: overlay: deletions stay inside" test -e "$P/doomed.txt"
	check_not "$m: overlay: new files stay inside" test -e "$P/new.txt"
	check_eq "$m: overlay: the session directory is removed" 0 "$(session_dirs "$m")"

	out=$(sb "$m" --save -- sh -c 'echo changed > keep.txt; echo new > new.txt; rm doomed.txt; mkdir d2; echo deep > d2/f' 2>&1)
	patch=$(grep -o '[^ ]*/changes.patch' <<<"$out" | head -1)
	check "$m: --save writes a patch" test -s "$patch"
	Q=$(newdir "$m"); cp -a "$P/." "$Q/"
	check "$m: --save: the patch applies with patch -p1" patch -s -p1 -d "$Q" -i "$patch"
	check_eq "$m: --save: the patch carries the changes" "changed new deep absent" \
		"$(cat "$Q/keep.txt") $(cat "$Q/new.txt") $(cat "$Q/d2/f") $(test -e "$Q/doomed.txt" && echo present || echo absent)"
	check_eq "$m: --save: the project itself is unchanged" "original" "$(cat "$P/keep.txt")"
	rm -rf "$(dirname "$patch")"

	cp /bin/true "$P/tool"; own "$P/tool"
	sb "$m" --apply -- sh -c 'echo changed > keep.txt; echo new > new.txt; rm doomed.txt; rm -r sub; mkdir sub; echo fresh > sub/other; cp tool tool2; chmod 4755 tool2' >/dev/null 2>&1
	check_eq "$m: --apply: modified, new and deleted files land on the project" "changed new absent" \
		"$(cat "$P/keep.txt") $(cat "$P/new.txt") $(test -e "$P/doomed.txt" && echo present || echo absent)"
	check_eq "$m: --apply: a replaced directory is opaque (old content gone)" "absent fresh" \
		"$(test -e "$P/sub/inner.txt" && echo present || echo absent) $(cat "$P/sub/other")"
	check_not "$m: --apply: no setuid bit is carried over" test -u "$P/tool2"
	check_eq "$m: --apply: the session directory is removed" 0 "$(session_dirs "$m")"

	check "$m: rw: writes land on the host" sb "$m" --project-mode rw -- sh -c 'echo rw > rw.txt'
	check_eq "$m: rw: content" "rw" "$(cat "$P/rw.txt" 2>/dev/null)"
	check_not "$m: ro: writes fail" sb "$m" --project-mode ro -- sh -c 'echo ro > ro.txt'
	check_eq "$m: --save with rw is refused" 125 "$(rc sb "$m" --project-mode rw --save -- true)"

	# --- binds ---
	B=$(newdir "$m"); echo bound >"$B/f"; own "$B/f"
	check_eq "$m: --ro-bind SRC:DST" "bound" "$(sb "$m" --ro-bind "$B:/srv/data" -- cat /srv/data/f)"
	check_not "$m: --ro-bind is read-only" sb "$m" --ro-bind "$B:/srv/data" -- touch /srv/data/g
	check "$m: --bind is writable" sb "$m" --bind "$B:/srv/data" -- sh -c 'echo w > /srv/data/g'
	check_eq "$m: --bind writes reach the host" "w" "$(cat "$B/g" 2>/dev/null)"
	check_eq "$m: --bind with a missing source -> 125" 125 "$(rc sb "$m" --bind /no/such/dir -- true)"
	check_eq "$m: --bind with .. in the destination -> 125" 125 "$(rc sb "$m" --bind "$B:/a/../etc" -- true)"

	# A symlink planted in a writable place (the rw project) must not redirect a mount target.
	O=$(newdir "$m")
	ln -sfn "$O" "$P/planted"; own "$P/planted"
	out=$(sb "$m" --project-mode rw --ro-bind "$B:$P/planted/x" -- true 2>&1)
	check_eq "$m: a mount target through a planted symlink is refused (125)" 125 "$?"
	check_match "$m: ... with a message naming the symlink" "symlink" "$out"
	check_not "$m: ... and nothing was created through it" test -e "$O/x"

	# --- cache carve-outs from the user's config ---
	mkdir -p "$H/.config/sluice"
	echo '{ "sandbox": { "writable_paths": ["~/.cache/testcache"] } }' >"$H/.config/sluice/policy.json"
	own "$H/.config"
	check "$m: writable_paths: the cache is writable" sb "$m" -- sh -c "echo c > $H/.cache/testcache/entry"
	check_eq "$m: writable_paths: it persists on the host" "c" "$(cat "$H/.cache/testcache/entry" 2>/dev/null)"
	echo '{ "sandbox": { "writable_paths": ["~/.ssh"] } }' >"$P/.sluice-tmp.json"
	mkdir -p "$P/.sluice"; mv "$P/.sluice-tmp.json" "$P/.sluice/policy.json"; own "$P/.sluice"
	out=$(sb "$m" -- true 2>&1)
	check_eq "$m: a project config may not add writable paths (125)" 125 "$?"
	check_match "$m: ... and says where to put it" "may not widen" "$out"
	echo '{ "sandbox": { "profile": "unsafe" } }' >"$P/.sluice/policy.json"
	check_eq "$m: a project config may not loosen the profile (125)" 125 "$(rc sb "$m" -- true)"
	echo '{ "sandbox": { "env": ["CFG_SECRET"] } }' >"$P/.sluice/policy.json"
	out=$(SB_ENV="CFG_SECRET=leaked" sb "$m" -- env 2>&1)
	check_eq "$m: a project config may not pass environment variables (125)" 125 "$?"
	check_not "$m: ... and the variable did not reach a command" grep -q CFG_SECRET=leaked <<<"$out"
	rm -rf "$P/.sluice"
	# the env whitelist of the user's config: the named variables pass, nothing else does
	echo '{ "sandbox": { "env": ["CFG_KEEP", "CFG_ALSO"] } }' >"$H/.config/sluice/policy.json"
	own "$H/.config"
	out=$(SB_ENV="CFG_KEEP=kept CFG_ALSO=too CFG_SECRET=s3cr3t" sb "$m" -- env 2>&1)
	check_match "$m: config env: a listed variable passes" '^CFG_KEEP=kept$' "$out"
	check_match "$m: config env: every listed variable passes" '^CFG_ALSO=too$' "$out"
	check_not "$m: config env: an unlisted one does not" grep -q CFG_SECRET <<<"$out"
	echo '{ "sandbox": { "env": "CFG_KEEP" } }' >"$H/.config/sluice/policy.json"
	out=$(sb "$m" -- true 2>&1)
	check_eq "$m: config env that is not a list is refused (125)" 125 "$?"
	check_match "$m: ... naming the file and key" 'policy.json.*env' "$out"
	echo '{ "sandbox": { "writable_paths": ["~/.cache/testcache"] } }' >"$H/.config/sluice/policy.json"
	echo '{ "sandbox": { "writable_paths": ["~/.ssh"] } }' >"$P/.sluice-tmp.json"
	mkdir -p "$P/.sluice"; mv "$P/.sluice-tmp.json" "$P/.sluice/policy.json"; own "$P/.sluice"
	echo '{ "sandbox": { "profile": 3 ' >"$P/.sluice/policy.json"
	out=$(sb "$m" -- true 2>&1)
	check_match "$m: a config syntax error names file:line:col" "policy.json:[0-9]+:[0-9]+" "$out"
	rm -rf "$P/.sluice" "$H/.config/sluice"

	# --- plugin profile: base plus the configured extra paths, read-only ---
	X=$(newdir "$m"); echo plugin-data >"$X/ext"; own "$X/ext"
	mkdir -p "$H/.config/sluice"
	echo "{ \"sandbox\": { \"plugin_paths\": [\"$X\", \"/no/such/plugin/dir\"] } }" >"$H/.config/sluice/policy.json"
	own "$H/.config"
	check_not "$m: base does not show plugin paths" sb "$m" -- test -e "$X/ext"
	check_eq "$m: plugin shows them" "plugin-data" "$(sb "$m" --profile plugin -- cat "$X/ext")"
	check_not "$m: plugin paths are read-only" sb "$m" --profile plugin -- touch "$X/new"
	check_not "$m: plugin keeps the home private" sb "$m" --profile plugin -- test -e "$H/marker"
	rm -rf "$H/.config/sluice"

	# --- nothing persists from one session to the next ---
	sb "$m" -- sh -c "echo p > /tmp/p; echo p > /var/tmp/p; echo p > /dev/shm/p; echo p > $H/p; echo p > $P/p" >/dev/null 2>&1
	check_not "$m: no state persists to the next session" sb "$m" -- sh -c "cat /tmp/p || cat /var/tmp/p || cat /dev/shm/p || cat $H/p || cat $P/p" 
	check_eq "$m: no session directory left" 0 "$(session_dirs "$m")"
	cd / || exit 1
done
check_eq "no mount left in the host namespace" "$mounts_before" "$(wc -l </proc/self/mountinfo)"
done_testing
