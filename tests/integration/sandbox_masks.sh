#!/usr/bin/env bash
# Issue 22, item 3: the masks. The default list covers the common credential stores; a mask holds for
# a name created on the host after the session started (the unsafe profile's home, a bind that shows
# the home, a plugin path); the list is extended per layer, the organisation's masks cannot be taken
# off by a user or project file, a user file can unmask a default; --verbose lists what is masked.
# As root and unprivileged.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

# files under the home that must never be readable, and harmless ones beside them that must be
SECRETS=".npmrc .pypirc .cargo/credentials.toml .cargo/credentials .vault-token .terraform.d/credentials.tfrc.json
.docker/config.json .kube/config .netrc .git-credentials .config/gh/hosts.yml .ssh/id_ed25519 .aws/credentials
.gnupg/private .config/gcloud/adc.json .azure/tokens .m2/settings.xml .gem/credentials .pgpass"

for m in $MODES; do
	H=$(home "$m")
	P=$(newdir "$m")
	SIG=$(newdir "$m")
	cd "$P" || exit 1
	own() { [ "$m" = root ] || chown -R "$TU:$TU" "$@"; }
	for f in $SECRETS; do mkdir -p "$H/$(dirname "$f")"; echo "SECRET-$f" >"$H/$f"; done
	mkdir -p "$H/.config/nvim" "$H/.terraform.d/plugins"
	echo harmless-cargo >"$H/.cargo/config.toml"
	echo harmless-nvim >"$H/.config/nvim/init.vim"
	echo harmless-marker >"$H/marker"
	own "$H"
	readall="for f in $(echo $SECRETS); do cat \"$H/\$f\" \"/mnt/home/\$f\" 2>/dev/null; done"

	# --- the default list ---
	out=$(sb "$m" --profile unsafe -- sh -c "$readall; cat $H/.cargo/config.toml $H/.config/nvim/init.vim $H/marker")
	check_not "$m: unsafe: no credential store of the default list is readable" grep -q SECRET <<<"$out"
	check_match "$m: unsafe: the settings beside them are (~/.cargo/config.toml, ~/.config/nvim)" \
		"harmless-cargo.*harmless-nvim.*harmless-marker" "$(tr '\n' ' ' <<<"$out")"
	check "$m: unsafe: a masked directory is there, empty" sb "$m" --profile unsafe -- sh -c \
		"test -d $H/.ssh && test -z \"\$(ls -A $H/.ssh)\" && test -f $H/.npmrc && ! test -s $H/.npmrc"

	# --- names that appear on the host after the session started ---
	late() {
		rm -f "$SIG/go"
		rm -rf "$H/.aws" "$H/.config/gcloud" "$H/.netrc" "$H/.cargo/credentials.toml" "$H/.vault-token" "$H/.config/gh"
		( for _ in $(seq 100); do [ -e "$SIG/started" ] && break; sleep 0.05; done
		  mkdir -p "$H/.aws" "$H/.config/gcloud" "$H/.config/gh"
		  echo SECRET-late-aws >"$H/.aws/credentials"; echo SECRET-late-gcloud >"$H/.config/gcloud/adc.json"
		  echo SECRET-late-netrc >"$H/.netrc"; echo SECRET-late-cargo >"$H/.cargo/credentials.toml"
		  echo SECRET-late-vault >"$H/.vault-token"; echo SECRET-late-gh >"$H/.config/gh/hosts.yml"
		  echo harmless-late >"$H/.config/nvim/late.vim"; own "$H"; touch "$SIG/go" ) &
		rm -f "$SIG/started"
		sb "$m" "$@" -- sh -c "touch $SIG/started; while ! test -e $SIG/go; do sleep 0.05; done; $readall; cat $H/.config/nvim/late.vim /mnt/home/.config/nvim/late.vim 2>/dev/null; echo END" 2>&1
		wait
	}
	out=$(late --profile unsafe --ro-bind "$SIG")
	check_match "$m: unsafe: the session ran while the secrets were created" "END" "$out"
	check_not "$m: unsafe: a credential created on the host after the start is not readable (new dir, file in a masked dir's parent, new file)" \
		grep -q SECRET <<<"$out"
	check_match "$m: unsafe: a harmless file created later in a visible directory is" "harmless-late" "$out"

	# --- binds that show the home elsewhere ---
	out=$(late --ro-bind "$SIG" --ro-bind "$H:/mnt/home")
	check_match "$m: --ro-bind HOME:/mnt/home: the session ran" "END" "$out"
	check_not "$m: --ro-bind HOME:/mnt/home: no secret readable there, old or new" grep -q SECRET <<<"$out"
	check_eq "$m: --ro-bind HOME:/mnt/home: the rest is" "harmless-marker" \
		"$(sb "$m" --ro-bind "$H:/mnt/home" -- cat /mnt/home/marker)"
	check_eq "$m: --bind of a directory holding a mask keeps the rest writable" "rw" \
		"$(sb "$m" --bind "$H/.config:/mnt/cfg" -- sh -c 'echo rw > /mnt/cfg/nvim/w && cat /mnt/cfg/nvim/w; cat /mnt/cfg/gh/hosts.yml 2>/dev/null')"
	mkdir -p "$H/.config/sluice"
	echo "{ \"sandbox\": { \"plugin_paths\": [\"$H/.config\"] } }" >"$H/.config/sluice/policy.json"; own "$H"
	check_eq "$m: plugin path ~/.config: gh's token hidden, nvim's settings shown" "harmless-nvim" \
		"$(sb "$m" --profile plugin -- sh -c "cat $H/.config/gh/hosts.yml $H/.config/gcloud/adc.json 2>/dev/null; cat $H/.config/nvim/init.vim")"
	rm -f "$H/.config/sluice/policy.json"

	# --- layers: user adds and unmasks, the organisation enforces ---
	echo SECRET-mine >"$H/my-token"; echo SECRET-corp >"$H/corp-token"; own "$H"
	echo "{ \"sandbox\": { \"masks\": [\"~//./my-token/\"], \"unmask\": [\"~/.npmrc\"] } }" >"$H/.config/sluice/policy.json"; own "$H"
	check_eq "$m: a user mask hides ~/my-token; unmask shows ~/.npmrc" "SECRET-.npmrc" \
		"$(sb "$m" --profile unsafe -- sh -c "cat $H/my-token $H/.npmrc 2>/dev/null")"
	rm -f "$H/.config/sluice/policy.json"

	# --- the masks' source and the scratch space (tests/lib/reach-probe.sh) ---
	# A masked file of the project is a read-only clone of the masks' tmpfs, which sits in the scratch
	# space's root; the session directory lies beneath what the unsafe profile shows (root: its
	# XDG_RUNTIME_DIR under $SB_T) or beneath /var/tmp (the user's): neither root may show, in any profile.
	cp "$SLUICE_SOURCE_DIR/tests/lib/reach-probe.sh" "$P/reach-probe.sh"; echo SECRET-env >"$P/secret.env"; own "$P"
	echo "{ \"sandbox\": { \"masks\": [\"$P/secret.env\"] } }" >"$H/.config/sluice/policy.json"; own "$H"
	for prof in base unsafe; do
		check_eq "$m: $prof: neither the scratch space's root nor the masks' source is reachable (mountinfo, pid 1, fds)" \
			"reach: ok" "$(sb "$m" --profile "$prof" -- sh reach-probe.sh local masks 2>&1)"
	done
	rm -f "$H/.config/sluice/policy.json" "$P/secret.env" "$P/reach-probe.sh"
	org='{"sandbox": {"masks": ["~/corp-token", "~/.npmrc"]}}'
	check_eq "$m: an organisation mask hides ~/corp-token" "" \
		"$(org_sb "$org" "$m" --profile unsafe -- cat "$H/corp-token" 2>/dev/null)"
	echo "{ \"sandbox\": { \"unmask\": [\"~/corp-token\"] } }" >"$H/.config/sluice/policy.json"; own "$H"
	out=$(org_sb "$org" "$m" --profile unsafe -- cat "$H/corp-token" 2>&1)
	check_eq "$m: a user file cannot unmask the organisation's mask (125)" 125 "$?"
	check_match "$m: ... and says so" "masked by the organisation" "$out"
	check_not "$m: ... and nothing was shown" grep -q SECRET <<<"$out"
	rm -f "$H/.config/sluice/policy.json"
	mkdir -p "$P/.sluice"
	echo '{ "sandbox": { "unmask": ["~/corp-token", "~/.ssh"] } }' >"$P/.sluice/policy.json"; own "$P"
	out=$(org_sb "$org" "$m" --profile unsafe -- cat "$H/corp-token" "$H/.ssh/id_ed25519" 2>&1)
	check_eq "$m: a project file cannot unmask anything (125)" 125 "$?"
	check_match "$m: ... and says so" "project file may not widen" "$out"
	check_not "$m: ... and nothing was shown" grep -q SECRET <<<"$out"
	echo '{ "sandbox": { "masks": ["~/marker"] } }' >"$P/.sluice/policy.json"; own "$P"
	check_eq "$m: a project file may add a mask" "" "$(sb "$m" --profile unsafe -- cat "$H/marker" 2>/dev/null)"
	rm -rf "$P/.sluice"

	# --- --verbose lists the masks ---
	out=$(sb "$m" -v --profile unsafe -- true 2>&1)
	check_match "$m: --verbose lists what is masked" "masked: $H/.npmrc \\(file\\)" "$out"
	check_match "$m: ... also what is absent now" "masked: $H/.oci \\(absent now\\)" "$out"
	check_eq "$m: no session directory left" 0 "$(session_dirs "$m")"
done
done_testing
