#!/usr/bin/env bash
# Issue 22, item 5: --disk. What a session writes outside the project and binds (overlay changes,
# /tmp, /var/tmp, /run, /dev/shm, the base home) lives in one tmpfs limited in bytes and inodes:
# writing past it gets ENOSPC inside, a flood of files stops at the inode limit, nothing reaches the
# host's disk, the exit summary says the limit was reached, --apply still carries the changes out.
# As root and unprivileged.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

for m in $MODES; do
	P=$(newdir "$m")
	SIG=$(newdir "$m")
	cd "$P" || exit 1
	own() { [ "$m" = root ] || chown -R "$TU:$TU" "$@"; }
	echo keep >"$P/keep"; echo doomed >"$P/doomed"; own "$P"

	# bytes: the overlay (project) and /tmp share the limit
	out=$(sb "$m" --disk 16M -- sh -c 'head -c 64M /dev/zero > big 2>/dev/null; echo "rc=$?"; stat -c "size=%s" big' 2>&1)
	check_match "$m: writing 64M with --disk 16M fails inside" "rc=1" "$out"
	check_match "$m: ... with ENOSPC" "No space left on device" "$(sb "$m" --disk 16M -- sh -c 'head -c 64M /dev/zero > big' 2>&1)"
	size=$(sed -n 's/^size=//p' <<<"$out")
	check "$m: ... and the file stopped at the limit ($size bytes)" test "${size:-0}" -le $((16 << 20))
	check_match "$m: the exit summary says the limit was reached" "disk limit was reached \\(full: 16 MiB" "$out"
	check_match "$m: /tmp and the overlay share it" "rc=1" \
		"$(sb "$m" --disk 16M -- sh -c 'head -c 10M /dev/zero > /tmp/a; head -c 10M /dev/zero > b 2>/dev/null; echo "rc=$?"' 2>&1)"
	check_not "$m: a session within its limit gets no summary line" grep -q "disk limit" <<<"$(sb "$m" --disk 16M -- sh -c 'head -c 1M /dev/zero > /tmp/a' 2>&1)"

	# inodes: one per 4 KiB
	out=$(sb "$m" --disk 8M -- sh -c 'i=0; while [ $i -lt 100000 ] && true > /tmp/f$i 2>/dev/null; do i=$((i+1)); done; echo "files=$i"' 2>&1)
	n=$(sed -n 's/^files=//p' <<<"$out")
	check "$m: a flood of files stops at the inode limit ($n of 100000)" test "${n:-100000}" -le 2048
	check_match "$m: ... and the summary says so" "disk limit was reached \\(out of files" "$out"

	# the host's disk: the session directory stays small while the session sits at its limit
	rm -f "$SIG/full" "$SIG/done"
	sb "$m" --disk 32M --bind "$SIG:/sig" -- sh -c 'head -c 64M /dev/zero > big 2>/dev/null; touch /sig/full; while ! test -e /sig/done; do sleep 0.05; done' >/dev/null 2>&1 &
	lp=$!
	for _ in $(seq 200); do [ -e "$SIG/full" ] && break; sleep 0.05; done
	if [ "$m" = root ]; then base="$ROOT_RT/sluice"; else base="/var/tmp/sluice-$TU_UID"; fi
	used=$(du -sk "$base" 2>/dev/null | cut -f1)
	touch "$SIG/done"; wait "$lp"
	check "$m: the host's session directory holds nothing of the 32M written (${used:-?} KiB)" test "${used:-99999}" -lt 1024
	check_not "$m: ... and the project got nothing" test -e "$P/big"

	# --apply carries the changes out of the scratch space (files, deletions, directories)
	check "$m: --apply with --disk" sb "$m" --disk 16M --apply -- sh -c 'echo new > new; rm doomed; mkdir -p d/e; echo x > d/e/f'
	check_eq "$m: ... the project has the changes" "new x" "$(cat "$P/new" "$P/d/e/f" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
	check_not "$m: ... and the deletion" test -e "$P/doomed"
	out=$(sb "$m" --disk 16M --save -- sh -c 'echo saved > saved' 2>&1)
	d=$(grep -o 'changes: [^ ]*changes.patch' <<<"$out" | cut -d' ' -f2)
	check_match "$m: ... holding the new file" "saved" "$(cat "$d" 2>/dev/null)"
	rm -rf "$(dirname "${d:-/nonexistent/x}")"

	# the default and bad input
	check_eq "$m: without --disk: 2G (this machine has more than 4G)" 2147483648 \
		"$(( $(sb "$m" -- stat -f -c '%b*%S' /tmp) ))"
	out=$(sb "$m" --disk 10 -- true 2>&1)
	check_eq "$m: --disk 10 is refused (125)" 125 "$?"
	check_match "$m: ... with what to do" "at least 1M" "$out"
	out=$(org_sb '{"sandbox": {"limits": {"disk": "8M"}}}' "$m" --disk 16M -- true 2>&1)
	check_eq "$m: --disk above the organisation's maximum is refused (125)" 125 "$?"
	check_eq "$m: the organisation's limit applies by default" 8388608 \
		"$(( $(org_sb '{"sandbox": {"limits": {"disk": "8M"}}}' "$m" -- stat -f -c '%b*%S' /tmp) ))"
	check_eq "$m: no session directory left" 0 "$(session_dirs "$m")"
done
done_testing
