#!/usr/bin/env bash
# ops_logrotate: the shipped logrotate file (tools/logrotate/sluice) rotates sluiced's audit log without
# losing a line: logrotate renames the log and creates a new one, its postrotate reloads sluiced (SIGHUP),
# sluiced hands the engine the new file, later sessions are logged there, and the hash chain runs across
# both files (`sluicectl log verify old new`). Runs the real logrotate against a copy of the file whose only
# change is the log's path; `systemctl` is a stand-in that answers for sluiced.service in the lab.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need logrotate curl jq

B=$SLUICE_BUILD_DIR
CTL=$B/tools/sluicectl/sluicectl
LOGDIR=$LAB_DIR/var-log-sluice
AUDIT=$LOGDIR/audit.log
export SLUICE_RUN_DIR=/run/sluice HOME=$LAB_DIR/home
mkdir -p "$HOME" "$LAB_DIR/etc-sluice" "$LAB_DIR/bin"
mkdir -m 0750 "$LOGDIR"
lab_internet_up

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
check "sluiced runs with its engine" start_sluiced
SLUICED_PID=$LAB_BG_PID

# A session through sluiced (not embedded: the control socket exists); prints the HTTP status.
fetch() {
	"$B/sandbox/sluice" run --allow-network --allow registry.test -- \
		curl -sS -o /dev/null -w '%{http_code}' http://registry.test/sluice-demo 2>&1
}
check_eq "a session before the rotation reaches the registry" 200 "$(fetch)"
check_match "... and is logged" '"host":"registry.test"' "$(cat "$AUDIT" 2>/dev/null)"
lines_before=$(wc -l <"$AUDIT")

# The shipped configuration, pointed at the lab's log; everything else (create, delaycompress, the
# postrotate script) as shipped.
conf=$LAB_DIR/logrotate.conf
sed "s|^/var/log/sluice/audit.log {|$AUDIT {|" "$SLUICE_SOURCE_DIR/tools/logrotate/sluice" >"$conf"
chmod 0644 "$conf"
check "the shipped file names /var/log/sluice/audit.log (and the copy the lab's log)" grep -q "^$AUDIT {" "$conf"
# systemctl stand-in: `is-active --quiet sluiced.service` and `reload sluiced.service` (which the real unit
# maps to `kill -HUP $MAINPID`); anything else fails, so a changed postrotate shows up here.
cat >"$LAB_DIR/bin/systemctl" <<EOF
#!/bin/sh
echo "systemctl \$*" >>"$LAB_DIR/log/systemctl.log"
case "\$*" in
"is-active --quiet sluiced.service") kill -0 $SLUICED_PID ;;
"reload sluiced.service") kill -HUP $SLUICED_PID ;;
*) exit 3 ;;
esac
EOF
chmod 0755 "$LAB_DIR/bin/systemctl"
hups_before=$(grep -c "SIGHUP: reopening the audit log" "$(lab_log sluiced)")
out=$(PATH=$LAB_DIR/bin:$PATH logrotate -f -s "$LAB_DIR/logrotate.state" "$conf" 2>&1)
check_eq "logrotate -f succeeds" 0 "$?"
[ -n "$out" ] && diag "logrotate: $out"
check "the old log was renamed to audit.log.1 (delaycompress: not compressed yet)" test -s "$AUDIT.1"
check_eq "logrotate created the new log 0640" 640 "$(stat -c %a "$AUDIT" 2>/dev/null)"
check_eq "the postrotate script reloaded sluiced" "systemctl is-active --quiet sluiced.service
systemctl reload sluiced.service" "$(cat "$LAB_DIR/log/systemctl.log" 2>/dev/null)"
for _ in $(seq 100); do
	[ "$(grep -c "SIGHUP: reopening the audit log" "$(lab_log sluiced)")" -gt "$hups_before" ] && break
	sleep 0.05
done
check "sluiced reopened its audit log" test "$(grep -c "SIGHUP: reopening the audit log" "$(lab_log sluiced)")" -gt "$hups_before"
sleep 0.2 # the engine gets the new fd over its socketpair

check_eq "a session after the rotation reaches the registry" 200 "$(fetch)"
for _ in $(seq 50); do [ -s "$AUDIT" ] && break; sleep 0.05; done
check_eq "the rotated file kept every earlier line" "$lines_before" "$(wc -l <"$AUDIT.1")"
check_match "the new session is logged in the new file" '"host":"registry.test"' "$(cat "$AUDIT" 2>/dev/null)"
first_prev=$(head -n 1 "$AUDIT" | jq -r .prev)
last_hash=$(tail -n 1 "$AUDIT.1" | jq -r .hash)
check_eq "the new file's first line continues the old file's chain" "$last_hash" "$first_prev"
verify() { "$CTL" log verify "$@" >"$LAB_DIR/verify.out" 2>&1; }
check "sluicectl log verify audit.log.1 audit.log: intact" verify "$AUDIT.1" "$AUDIT"
check_match "... every record checked" "^$(($(wc -l <"$AUDIT.1") + $(wc -l <"$AUDIT"))) records checked: chain intact" \
	"$(cat "$LAB_DIR/verify.out")"
check_not "the files in the wrong order do not verify" verify "$AUDIT" "$AUDIT.1"
done_testing
