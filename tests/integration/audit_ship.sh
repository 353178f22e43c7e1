#!/usr/bin/env bash
# sluiced --audit-ship (docs/operations.md, "Shipping the audit log"): every audit record also goes to
# syslog as RFC 5424 (to a Unix datagram socket, here a listener of the test) or to journald with
# structured fields (its native protocol, at /run/systemd/journal/socket as libsystemd has it: in the lab a listener binds
# it on a tmpfs over /run/systemd, so the host's is untouched). The file stays the record of truth: each
# shipped message carries the file's line as it is, the hash chain verifies, and a receiver that is gone
# costs nothing but a counted error.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl "$LAB_PYTHON"

B=$SLUICE_BUILD_DIR
CLIENT=$B/tests/integration/netd-testclient
CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
GW4=100.64.0.1
SINK=$SLUICE_SOURCE_DIR/tests/lib/logsink.py
export SLUICE_RUN_DIR=$RUN

lab_internet_up
POLICY=$LAB_DIR/tmp/policy.json
echo '{ "allow": ["allowed.test"] }' >"$POLICY"
chmod 0644 "$POLICY"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply
metric() { "$CTL" metrics | awk -v k="$1" '$1 == k { print $2 }'; }
traffic() { # traffic NS TAG: one allowed and one denied request through the proxy
	lab_exec "$1" curl -s -o /dev/null -m 10 -x "http://$GW4:3128" "http://allowed.test/$2"
	lab_exec "$1" curl -s -o /dev/null -m 10 -x "http://$GW4:3128" "http://evil.test/$2"
}
# py CODE ARGS...: a python check over the received messages and the audit file
py() { "$LAB_PYTHON" -c "$@"; }

out=$("$B/netd/sluiced" --run-dir /run/sl-x --audit-log "$LAB_DIR/x.log" --audit-ship kafka 2>&1)
check_match "--audit-ship refuses an unknown target" 'want syslog or journald' "$out"
out=$("$B/netd/sluiced" --run-dir /run/sl-x --audit-log "$LAB_DIR/x.log" --audit-ship journald --audit-ship-socket /x 2>&1)
check_match "--audit-ship-socket goes with syslog only" 'goes with --audit-ship syslog' "$out"

# ---- syslog (RFC 5424) ----
SYS=$LAB_DIR/syslog.sock SYSOUT=$LAB_DIR/syslog.jsonl
lab_bg syslog-sink "$LAB_PYTHON" "$SINK" syslog "$SYS" "$SYSOUT"
eventually test -S "$SYS"
check "sluiced starts with --audit-ship syslog" start_sluiced -- --audit-ship syslog --audit-ship-socket "$SYS"
check "a session opens" session s1
traffic s1 sys1
check "the denial reaches syslog" eventually grep -q 'evil.test' "$SYSOUT"
check "every record of the file reaches syslog, in order, the line itself as MSG" eventually py '
import json, re, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
msgs = [json.loads(l)["raw"] for l in open(sys.argv[2])]
rx = re.compile(r"^<(\d+)>1 (\S+) (\S+) sluiced (\d+) audit - \[sluice@32473((?: [a-z]+=\"(?:[^\"\\\]]|\\.)*\")*)\] (.*)$", re.S)
got = []
for m in msgs:
    r = rx.match(m)
    assert r, m
    got.append(r.group(6))
sys.exit(0 if got == lines and lines else 1)' "$AUDIT" "$SYSOUT"
check "... with severity (allow: info, deny: warning, facility authpriv) and structured data" py '
import json, re, sys
ok = set()
for l in open(sys.argv[1]):
    m = json.loads(l)["raw"]
    rec = json.loads(m[m.index("] {") + 2:])
    pri = int(m[1:m.index(">")])
    assert pri == (86 if rec["decision"] == "allow" else 84), (pri, rec["decision"])
    assert "session=\"%s\"" % rec["session"] in m and "decision=\"%s\"" % rec["decision"] in m
    assert m.split(" ")[1] == rec["time"]
    ok.add((rec["host"], rec["decision"]))
sys.exit(0 if ("allowed.test", "allow") in ok and ("evil.test", "deny") in ok else 1)' "$SYSOUT"
check "the shipped counter matches the file's records" eventually sh -c \
	"[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_audit_shipped_total\" {print \$2}')\" = \"\$(wc -l <'$AUDIT')\" ]"
lab_stop syslog-sink
n0=$(wc -l <"$AUDIT")
check_eq "with the receiver gone, sessions still work" 200 \
	"$(lab_exec s1 curl -s -o /dev/null -w '%{http_code}' -m 10 -x "http://$GW4:3128" http://allowed.test/gone)"
check "... and records still reach the file" eventually sh -c "[ \$(wc -l <'$AUDIT') -gt $n0 ]"
check "... and the lost sends are counted" eventually sh -c "[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_audit_ship_errors_total\" {print \$2}')\" -ge 1 ]"
check "the hash chain of the file verifies" "$CTL" log verify "$AUDIT"
kill -TERM "${HOLD[s1]}" && wait "${HOLD[s1]}" 2>/dev/null
unset "HOLD[s1]"
lab_stop sluiced

# ---- journald (the native protocol sd_journal_sendv speaks: structured fields) ----
mkdir -p /run/systemd && mount -n -t tmpfs -o mode=0755 lab-systemd /run/systemd && mkdir -p /run/systemd/journal ||
	lab_bail "cannot put a tmpfs over /run/systemd in the lab"
JOUT=$LAB_DIR/journal.jsonl
lab_bg journal-sink "$LAB_PYTHON" "$SINK" journald /run/systemd/journal/socket "$JOUT"
eventually test -S /run/systemd/journal/socket
: >"$AUDIT.before"; cp "$AUDIT" "$AUDIT.before"
check "sluiced starts with --audit-ship journald" start_sluiced -- --audit-ship journald
check "a session opens" session s2
traffic s2 j1
check "the denial reaches journald" eventually grep -q 'evil.test' "$JOUT"
check "each new record of the file reaches journald with its fields" eventually py '
import json, sys
old = sum(1 for _ in open(sys.argv[3]))
lines = [l.rstrip("\n") for l in open(sys.argv[1])][old:]
ents = [json.loads(l)["fields"] for l in open(sys.argv[2])]
assert [e["MESSAGE"] for e in ents] == lines and lines, (len(ents), len(lines))
for e in ents:
    rec = json.loads(e["MESSAGE"])
    assert e["SYSLOG_IDENTIFIER"] == "sluiced" and e["SLUICE_SESSION"] == rec["session"]
    assert e["SLUICE_HOST"] == rec["host"] and e["SLUICE_DECISION"] == rec["decision"]
    assert e["PRIORITY"] == ("6" if rec["decision"] == "allow" else "4")
    assert e.get("SLUICE_PORT") == str(rec["port"]) and e["SLUICE_PROTOCOL"] == rec["protocol"]
assert any(e["SLUICE_HOST"] == "evil.test" and e["SLUICE_DECISION"] == "deny" for e in ents)' "$AUDIT" "$JOUT" "$AUDIT.before"
check "the hash chain of the file verifies" "$CTL" log verify "$AUDIT"

# A session's command is its client's choice (control.sock is open to every local user): a newline in it
# must neither keep the session's records out of journald (their fields carried it raw, and the shipper
# refused every one of them) nor forge a line of sluiced's own log (stderr, which the journal splits).
FORGED=$'test s3\nsluiced: session forged: uid 0, sl-forged, approved \e[2J \302\233A'
SESSION_COMMAND=$FORGED check "a session whose command holds a newline and an escape opens" session s3
traffic s3 nl1
check "its records reach journald" eventually py '
import json, sys
ents = [json.loads(l)["fields"] for l in open(sys.argv[1])]
mine = [e for e in ents if e.get("SLUICE_COMMAND", "").startswith("test s3")]
assert any(e["SLUICE_HOST"] == "evil.test" for e in mine), len(mine)
assert all("\n" not in v and "\x1b" not in v for e in mine for v in e.values()), mine' "$JOUT"
check_not "sluiced's log has no line the command forged" grep -q '^sluiced: session forged' "$LAB_DIR/log/sluiced.log"
check "... but shows the command, escaped" grep -qF 'test s3\x0asluiced: session forged' "$LAB_DIR/log/sluiced.log"
json=$("$CTL" sessions --json)
check "sessions --json gives root's terminal no raw control byte (the C1 CSI escaped too)" sh -c \
	"printf '%s' \"\$1\" | LC_ALL=C grep -q \"\$(printf '[\\001-\\037\\177]\\|\\302[\\200-\\237]')\" && exit 1 || exit 0" - "$json"
check "... and is still the same JSON value" py '
import json, sys
sys.exit(0 if any(s["command"] == sys.argv[2] for s in json.loads(sys.argv[1])) else 1)' "$json" "$FORGED"
check "no record of the session failed to ship" sh -c "[ \"\$('$CTL' metrics | awk '\$1 == \"sluice_audit_ship_errors_total\" {print \$2}')\" = 0 ]"

# rotation (logrotate renames the file, sluiced reopens it on SIGHUP): shipping follows the new file
mv "$AUDIT" "$AUDIT.1"
kill -HUP "$(lab_pid sluiced)"
check "after rotation sluiced writes a new file" eventually sh -c \
	"ip netns exec s2 curl -s -o /dev/null -m 5 -x http://$GW4:3128 http://evil.test/rot; test -s '$AUDIT'"
check "... and each of its records is shipped too" eventually py '
import json, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1])]
msgs = {json.loads(l)["fields"]["MESSAGE"] for l in open(sys.argv[2])}
sys.exit(0 if lines and all(l in msgs for l in lines) else 1)' "$AUDIT" "$JOUT"
check "the chain verifies across the rotated pair" "$CTL" log verify "$AUDIT.1" "$AUDIT"

done_testing
