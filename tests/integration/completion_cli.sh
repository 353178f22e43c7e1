#!/usr/bin/env bash
# completion_cli: the bash completions (tools/completion/) complete sluice's and sluicectl's commands,
# options and option values, and hand the command after `--` to bash's own completion.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
BC=/usr/share/bash-completion/bash_completion
[ -r "$BC" ] || skip_all "bash-completion is not installed (tools/debian-packages.txt, test group)"
# shellcheck disable=SC1090
. "$BC"
. "$SLUICE_SOURCE_DIR/tools/completion/sluice"
. "$SLUICE_SOURCE_DIR/tools/completion/sluicectl"

# comp FUNC WORD...: the completions FUNC offers for the command line WORD... (the last word is completed)
comp() {
	local fn=$1
	shift
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMP_LINE="$*"
	COMP_POINT=${#COMP_LINE}
	COMPREPLY=()
	"$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	printf '%s\n' "${COMPREPLY[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//'
}

check_eq "sluice: subcommands" "--help --version netns run" "$(comp _sluice sluice '')"
check_eq "sluice run --pro: options" "--profile --project --project-mode" "$(comp _sluice sluice run --pro)"
check_eq "sluice run --sandbox-type: values" "container devcontainer firejail local vm" "$(comp _sluice sluice run --sandbox-type '')"
check_eq "sluice run --vm-accel: values" "kvm tcg" "$(comp _sluice sluice run --vm-accel '')"
check_eq "sluice run --profile: values" "base plugin unsafe" "$(comp _sluice sluice run --profile '')"
check_eq "sluice run --q: --quiet" "--quiet" "$(comp _sluice sluice run --q)"
check_eq "sluice run --lea: --learn" "--learn" "$(comp _sluice sluice run --lea)"
check_match "sluice run --policy: presets" "npm.*pypi" "$(comp _sluice sluice run --policy '')"
check_eq "sluice run -- mkd: the command is completed by bash" "mkdir" "$(comp _sluice sluice run -- mkdi)"
check_eq "sluice netns: create delete" "create delete" "$(comp _sluice sluice netns '')"
check_eq "sluicectl: commands" "--help approve asks deny log metrics netns policy session sessions version" "$(comp _sluicectl sluicectl '')"
check_eq "sluicectl approve ID --remember: layers" "org project user" "$(comp _sluicectl sluicectl approve 0123abcd --remember '')"
check_eq "sluicectl approve ID --: options" "--project --remember --subtree" "$(comp _sluicectl sluicectl approve 0123abcd --)"
check_eq "sluice run --ask: --ask --ask-timeout" "--ask --ask-timeout" "$(comp _sluice sluice run --ask)"
check_eq "sluicectl session: verbs" "discard end save" "$(comp _sluicectl sluicectl session '')"
check_eq "sluicectl netns create --: options" "--allow --help --json --name --policy" \
	"$(comp _sluicectl sluicectl netns create --)"
check_eq "sluicectl log --d: --denied" "--denied" "$(comp _sluicectl sluicectl log --d)"
check_eq "sluicectl policy: check explain" "check explain" "$(comp _sluicectl sluicectl policy '')"
done_testing
