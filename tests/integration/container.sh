#!/usr/bin/env bash
# container: `sluice run --sandbox-type container --image IMAGE` and `--sandbox-type devcontainer` as root in
# the lab (embedded netd). The command runs in a Podman container in the session's network namespace: an
# allowed host is reached through the proxy, a denied one is refused and audited, a connection around the
# proxy is dropped by nftables and audited; the status passes through; the project is an overlay (--save keeps
# the changes); limits hold for the container; nothing is left (processes, netns, veth, mounts, session
# directory and its container store) after a normal exit nor after kill -9 of the launcher. The devcontainer
# part reads .devcontainer/devcontainer.json (image, build.dockerfile, workspaceFolder, containerEnv, mounts,
# postCreateCommand, remoteUser) and refuses bad files with file:line.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/ctr-image.sh"
# before the lab: a Podman graph mount an earlier run left on the test store in the host's namespace
[ "${LAB_INSIDE:-}" ] || ctr_image_release || true
lab_enter "$@"
_lab_need curl jq podman

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
ctr_image_ensure
# What an earlier run can leave in the namespace the test starts in: the overlay driver's bind mount of the
# store's graph onto itself, twice over (two runs). The lab's copy stands in for the host's here.
G=$SLUICE_BUILD_DIR/tests/ctr-image/graph/overlay
mount -n --bind "$G" "$G" && mount -n --bind "$G" "$G"
ctr_image_release >/dev/null
check_eq "a leftover Podman graph mount on the store is removed at start (rm -rf build works again)" "" \
	"$(ctr_image_mounts)"
check "... and the store still serves the test image" env CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF" \
	podman image exists "$CTR_IMAGE"
lab_internet_up >/dev/null
lab_forward on

P=$LAB_DIR/proj
mkdir -p "$P"
echo original >"$P/file"
AUDIT=$LAB_DIR/audit.log
# sb ARGS...: sluice run as root in the project, with the test image store as the user's
sb() { (cd "$P" && exec env -i PATH=/usr/bin:/bin HOME="$LAB_DIR" CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF" \
	"$SLUICE" run "$@"); }
ct() { sb --sandbox-type container --image "$CTR_IMAGE" "$@"; }
GET='curl -sS -m 5 -o /dev/null -w %{http_code}\n'
# leftovers: what a session may leave: session directories, sluice veths and netns, mounts of a session
# directory, Podman, conmon or container processes
leftovers() {
	ls /run/sluice/sessions 2>/dev/null | grep -v '^\.' | sed 's/^/dir /'
	ip -o link show | awk -F': ' '{ print $2 }' | grep -v -e '^lo$' -e '^inet' -e '^lan' -e '^veth-' | grep -v '@if' | sed 's/^/link /'
	ip netns list 2>/dev/null | grep -v -e '^inet' -e '^lan' | sed 's/^/netns /'
	grep -e /run/sluice/sessions /proc/self/mountinfo | sed 's/^/mount /'
	ps -eo stat=,comm= | awk '$1 !~ /^Z/ { print $2 }' | grep -x -e podman -e conmon -e crun -e sleep | sed 's/^/process /'
}
# reaped CMD...: runs CMD under a child subreaper that reaps every orphan, as init does on a real machine (the
# lab's pid 1 is this script, which reaps only its own jobs); writes CMD's pid to $LAB_DIR/pid.
reaped() {
	"$LAB_PYTHON" -c '
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(pid))
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
' "$LAB_DIR/pid" "$@"
}
base=$(leftovers)

# 1. The network session, the status and the overlay.
out=$(ct --allow-network --allow allowed.test --audit-log "$AUDIT" -- sh -c "
	$GET http://allowed.test/; $GET http://other.test/
	curl -sS -m 3 --noproxy '*' -o /dev/null http://$LAB_ALLOWED4/ 2>/dev/null && echo raw-connected || echo raw-blocked
	id -u; pwd; echo changed >file; cat file; exit 7" 2>"$LAB_DIR/err1")
rc=$?
check_eq "the container's status passes through" 7 "$rc"
check_match "allowed.test is reached through the proxy (200)" '^200' "$out"
check_match "other.test is refused by the proxy (403)" '403' "$out"
check_match "a direct connection around the proxy does not get through" 'raw-blocked' "$out"
check_match "the command runs as uid 0 of its container" ' 0 ' "$(tr '\n' ' ' <<<"$out")"
check_match "it starts in the project, at its own path" "$P" "$out"
check_match "it writes the project (overlay)" 'changed' "$out"
check_eq "... but the project is unchanged afterwards" original "$(cat "$P/file")"
check_match "the denial is in the audit log" '"host":"other.test"' "$(grep '"decision":"deny"' "$AUDIT")"
check_match "the drop of the direct connection is in the audit log" "\"protocol\":\"drop\",\"host\":\"$LAB_ALLOWED4\",\"port\":80" \
	"$(cat "$AUDIT")"
check_match "the summary names the denied host" 'other\.test:80' "$(cat "$LAB_DIR/err1")"
check_eq "nothing is left after a normal exit" "$base" "$(leftovers)"
[ "$base" = "$(leftovers)" ] || diag "$(leftovers)"

# 2. Without --allow-network: only lo. Nothing of the session's scratch space but the files Podman binds from it
# (/etc/hosts and the like) is reachable from the container (tests/lib/reach-probe.sh).
cp "$SLUICE_SOURCE_DIR/tests/lib/reach-probe.sh" "$P/reach-probe.sh"
out=$(ct -- sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "; sh reach-probe.sh container')
rm -f "$P/reach-probe.sh"
check_eq "without --allow-network the container has only lo" lo "$(head -n 1 <<<"$out")"
check_eq "neither the scratch space's root nor a process or fd of the sandbox is reachable from the container" \
	"reach: ok" "$(tail -n +2 <<<"$out")"

# 3. --save keeps the changes as in local mode.
out=$(ct --save -- sh -c 'echo saved >>file; echo new >added' 2>&1)
sdir=$(printf '%s\n' "$out" | sed -n 's/.*\(\/run\/sluice\/sessions\/[0-9a-f]*\).*/\1/p' | head -1)
check "--save keeps changes.patch" test -s "$sdir/changes.patch"
check_match "... with the change to file and the added file" '\+saved' "$(cat "$sdir/changes.patch" 2>/dev/null)"
check_match "... and the new file" 'added' "$(cat "$sdir/changes.patch" 2>/dev/null)"
check_eq "... and the project is unchanged" original "$(cat "$P/file")"
rm -rf "$sdir"

# 4. Limits hold for the container: it is in the session's cgroups.
rm -f "$LAB_DIR/pid"
(cd "$P" && reaped env -i PATH=/usr/bin:/bin HOME="$LAB_DIR" CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF" \
	"$SLUICE" run --sandbox-type container --image "$CTR_IMAGE" --memory 96M --pids 64 -- sleep 30 >/dev/null 2>&1) &
rpid=$!
# (30 s at most: it goes on as soon as the container runs, and podman's start stretches on a loaded machine)
for _ in $(seq 300); do spid=$(pgrep -xf "sleep 30" | head -1); [ -n "$spid" ] && break; sleep 0.1; done
lpid=$(cat "$LAB_DIR/pid")
mcg=$(awk -F: '$2 == "memory" { print $3 }' "/proc/$spid/cgroup" 2>/dev/null)
pcg=$(awk -F: '$2 == "pids" { print $3 }' "/proc/$spid/cgroup" 2>/dev/null)
check_match "the container's process is in the session's memory cgroup" '/sluice-[0-9a-f]+$' "$mcg"
check_eq "... whose limit is --memory" $((96 * 1024 * 1024)) "$(cat "/sys/fs/cgroup/memory$mcg/memory.limit_in_bytes" 2>/dev/null)"
check_eq "... and --pids holds too" 64 "$(cat "/sys/fs/cgroup/pids$pcg/pids.max" 2>/dev/null)"

# 5. kill -9 of the launcher: everything goes (the next launch reaps the session directory).
kill -9 "$lpid"
wait "$rpid" 2>/dev/null
for _ in $(seq 50); do [ -z "$(leftovers | grep -v '^dir ')" ] && break; sleep 0.1; done
check_eq "after kill -9 of the launcher no process, netns, link or mount is left" "" "$(leftovers | grep -v '^dir ')"
ct -- true
check_eq "... and the next launch removed its session directory" "$base" "$(leftovers)"

# 5b. --timeout ends the container too.
ct --timeout 2 -- sleep 30 >/dev/null 2>&1
check_eq "--timeout: 124" 124 "$?"
for _ in $(seq 100); do [ -z "$(leftovers | grep '^process ')" ] && break; sleep 0.1; done
check_eq "... and nothing is left" "$base" "$(leftovers)"

# 6. Setup failures fail closed.
out=$(sb --sandbox-type container --image localhost/no-such-image:1 -- true 2>&1)
check_eq "an image that is not there: 125" 125 "$?"
check_match "... and podman says so" 'no-such-image' "$out"
mkdir -p "$LAB_DIR/nopodman"
out=$(cd "$P" && env -i PATH="$LAB_DIR/nopodman" "$SLUICE" run --sandbox-type container --image "$CTR_IMAGE" -- true 2>&1)
check_eq "podman missing: 125" 125 "$?"
check_match "... with an install hint" 'podman is not installed.*apt install podman' "$out"
out=$(sb --sandbox-type container -- true 2>&1)
check_match "container without --image is refused" 'needs --image' "$out"
out=$(cd "$P" && setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin HOME=/nonexistent \
	"$SLUICE" run --sandbox-type container --image "$CTR_IMAGE" -- true 2>&1)
check_match "an unprivileged user is refused, pointed at --allow-containers" 'needs root.*--allow-containers' "$out"
check_eq "nothing is left after the failures" "$base" "$(leftovers)"

# 7. devcontainer: image, workspaceFolder, containerEnv, mounts, postCreateCommand, remoteUser.
mkdir -p "$P/.devcontainer" "$P/conf"
echo from-project >"$P/conf/settings"
cat >"$P/.devcontainer/devcontainer.json" <<EOF
// JSON with comments, as VS Code writes it
{
	"image": "$CTR_IMAGE",
	"workspaceFolder": "/workspaces/app",
	"containerEnv": { "GREETING": "hello from \${containerWorkspaceFolder}" },
	"mounts": [ "source=\${localWorkspaceFolder}/conf,target=/etc/app,type=bind",
		{ "type": "tmpfs", "target": "/scratch" } ],
	"postCreateCommand": "echo post-create-ran >/tmp/post",
	"remoteUser": "root", /* a trailing comma, too */
}
EOF
dc() { sb --sandbox-type devcontainer "$@"; }
out=$(dc --allow-network --allow allowed.test --audit-log "$AUDIT" -- sh -c "
	pwd; id -u; echo \"\$GREETING\"; cat /tmp/post /etc/app/settings; touch /etc/app/x 2>/dev/null || echo ro-mount
	touch /scratch/x && echo scratch-ok; cat file; $GET http://allowed.test/; $GET http://other.test/; exit 3" 2>"$LAB_DIR/err7")
check_eq "devcontainer: the status passes through" 3 "$?"
check_match "... the command starts in workspaceFolder" '^/workspaces/app' "$out"
check_match "... as remoteUser (root of the container)" ' 0 ' "$(tr '\n' ' ' <<<"$out")"
check_match "... with containerEnv (variables substituted)" 'hello from /workspaces/app' "$out"
check_match "... after postCreateCommand" 'post-create-ran' "$out"
check_match "... the project's bind is there, read-only" 'from-project.*ro-mount' "$(tr '\n' ' ' <<<"$out")"
check_match "... the tmpfs mount too" 'scratch-ok' "$out"
check_match "... the project is the workspace" 'original' "$out"
check_match "... allowed.test reached (200), other.test refused (403)" '200.403' "$(tr '\n' ' ' <<<"$out")"
check_eq "nothing is left after the devcontainer" "$base" "$(leftovers)"

# 8. build.dockerfile: built into the session's store from the local image. Its rootful RUN steps reach
# nothing of the scratch space (the store lives on it) either (tests/lib/reach-probe.sh).
cp "$SLUICE_SOURCE_DIR/tests/lib/reach-probe.sh" "$P/.devcontainer/reach-probe.sh"
cat >"$P/.devcontainer/Containerfile" <<EOF
FROM $CTR_IMAGE
COPY reach-probe.sh /reach-probe.sh
RUN echo built-by-sluice >/built && sh /reach-probe.sh container >/reach-build
USER 1000
EOF
printf '{ "build": { "dockerfile": "Containerfile" } }\n' >"$P/.devcontainer/devcontainer.json"
out=$(dc -- sh -c 'cat /built; id -u; cat /reach-build' 2>&1)
rm -f "$P/.devcontainer/reach-probe.sh"
check_eq "devcontainer with build.dockerfile: built and run (as the one mapped uid, whatever the image's USER)" \
	"built-by-sluice 0" "$(head -n 2 <<<"$out" | tr '\n' ' ' | sed 's/ $//')"
check_eq "... and its RUN step reached neither the scratch space's root nor a process or fd of the sandbox" \
	"reach: ok" "$(tail -n +3 <<<"$out")"
check_eq "... into the session's store: the user's store did not get it" 0 \
	"$(podman images --format '{{.Repository}}' 2>/dev/null | grep -c sluice-build)"

# 8b. A hostile Dockerfile: the rootful build must not reach the host's files through a RUN flag (a cache
# mount's id walks out of the cache directory: CVE-2024-9675 in Debian 12's Podman).
mkdir -p "$LAB_DIR/outside" && echo host-secret >"$LAB_DIR/outside/existing"
cat >"$P/.devcontainer/Containerfile" <<EOF
FROM $CTR_IMAGE
RUN --mount=type=cache,id=../../../../../../../../../../..$LAB_DIR/outside,target=/h sh -c 'cat /h/existing >&2; echo from-build >/h/planted'
EOF
out=$(dc -- true 2>&1)
check_eq "a RUN flag in build.dockerfile is refused (125)" 125 "$?"
check_match "... with file:line and why" 'Containerfile:2: RUN --mount=.*refused' "$out"
check_not "... and the build wrote nothing on the host" test -e "$LAB_DIR/outside/planted"
check_not "... nor read the host's file" grep -q host-secret <<<"$out"

# 9. Bad devcontainer files: file:line and 125.
printf '{\n  "image": "x",\n  "mounts": [ "source=/etc,target=/e,type=bind" ]\n}\n' >"$P/.devcontainer/devcontainer.json"
out=$(dc -- true 2>&1)
check_eq "a bind outside the project is refused (125)" 125 "$?"
check_match "... with file:line" 'devcontainer\.json:3: mounts: bind source /etc' "$out"
printf '{\n  "image": "x",\n  "containerEnv": { "T": "${localEnv:SECRET}" }\n}\n' >"$P/.devcontainer/devcontainer.json"
check_match "\${localEnv:...} is refused with file:line" 'devcontainer\.json:3: containerEnv: \$\{localEnv:SECRET\}' \
	"$(dc -- true 2>&1)"
printf '{\n  "image": "x",\n  "remoteUser": "vscode"\n}\n' >"$P/.devcontainer/devcontainer.json"
check_match "a remoteUser name is refused with file:line" 'devcontainer\.json:3: remoteUser: vscode: want a numeric' \
	"$(dc -- true 2>&1)"
printf '{\n  "image": "x",\n\n  "remoteUser": "1000"\n}\n' >"$P/.devcontainer/devcontainer.json"
check_match "a remoteUser other than root is refused with file:line" 'devcontainer\.json:4: remoteUser: 1000: only root' \
	"$(dc -- true 2>&1)"
ln -s /etc "$P/.devcontainer/etc-link"
printf '{\n  "build": {\n    "dockerfile": "Containerfile",\n    "context": "etc-link"\n  }\n}\n' >"$P/.devcontainer/devcontainer.json"
check_match "a build context that is a symlink out of the project is refused" \
	'devcontainer\.json:4: context: .*etc-link leads to /etc, outside the project' "$(dc -- true 2>&1)"
printf '{ "image": "%s", "mounts": [ "source=${localWorkspaceFolder}/.devcontainer/etc-link,target=/e,type=bind" ] }\n' \
	"$CTR_IMAGE" >"$P/.devcontainer/devcontainer.json"
out=$(dc -- ls /e/passwd 2>&1)
check_eq "a bind through a symlink out of the project fails closed (125)" 125 "$?"
check_match "... because no symlink is followed on its path" 'a symlink on the path' "$out"
printf '{\n  "image": "x",\n  "build": 3 x\n}\n' >"$P/.devcontainer/devcontainer.json"
check_match "invalid JSON: file:line:col" 'devcontainer\.json:3:[0-9]+: invalid JSON' "$(dc -- true 2>&1)"
rm "$P/.devcontainer/devcontainer.json"
ln -s /etc/hostname "$P/.devcontainer/devcontainer.json"
check_match "a devcontainer.json that is a symlink is refused" 'devcontainer\.json: .*a symlink' "$(dc -- true 2>&1)"
rm -rf "$P/.devcontainer"
check_match "no devcontainer.json: a clear error" 'devcontainer\.json: No such file.*--sandbox-type container' \
	"$(dc -- true 2>&1)"
check_eq "nothing is left after the refusals" "$base" "$(leftovers)"
# the lab's exit (lab_defer) runs it again: nothing of the store stays mounted whatever Podman did
ctr_image_release >/dev/null
check_eq "at the end no mount is left on the store" "" "$(ctr_image_mounts)"

done_testing
