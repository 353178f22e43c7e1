#!/usr/bin/env bash
# sluicectl log and log verify on a log written by an independent implementation of the chain format
# (Python's hashlib), then tampered with in each way a reviewer would try.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
ctl="$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp/audit.log" <<'PY'
import hashlib, json, sys
prev = "0" * 64
with open(sys.argv[1], "w") as f:
    for i in range(8):
        rec = {"time": "2026-11-22T00:00:%02d.000Z" % i, "session": "s%d" % (i % 2), "uid": 1000,
               "command": "npm ci", "protocol": "connect", "host": "h%d.test" % i, "port": 443,
               "method": "CONNECT", "decision": "deny" if i % 3 == 0 else "allow",
               "rule": "p.json:%d:5" % (i + 1), "reason": "bell\x07 here" if i == 3 else None,
               "address": "198.18.1.%d" % i, "status": 200, "bytes_out": 10 * i, "bytes_in": 100 * i,
               "duration_ms": i, "error": "direct flows not opened: sluiced takes none" if i == 5 else None}
        body = json.dumps(rec, separators=(",", ":"))[:-1]
        h = hashlib.sha256((prev + "\n" + body).encode()).hexdigest()
        f.write('%s,"prev":"%s","hash":"%s"}\n' % (body, prev, h))
        prev = h
PY
log="$tmp/audit.log"

out=$("$ctl" log verify "$log"); rc=$?
check_eq "intact log verifies (exit 0)" 0 "$rc"
check_match "verify counts the records" '^8 records checked: chain intact' "$out"

sed '3s/"allow"/"deny"/' "$log" > "$tmp/edited.log"
out=$("$ctl" log verify "$tmp/edited.log"); rc=$?
check_eq "an edited line fails verification" 1 "$rc"
check_match "the edited line is named" 'edited\.log:3: hash mismatch' "$out"

sed '5d' "$log" > "$tmp/removed.log"
out=$("$ctl" log verify "$tmp/removed.log"); rc=$?
check_eq "a removed line fails verification" 1 "$rc"
check_match "the gap is found where it is" 'removed\.log:5: chain broken' "$out"

{ sed -n '1,2p' "$log"; sed -n '4p' "$log"; sed -n '3p' "$log"; sed -n '5,$p' "$log"; } > "$tmp/reordered.log"
out=$("$ctl" log verify "$tmp/reordered.log"); rc=$?
check_eq "reordered lines fail verification" 1 "$rc"

head -c -10 "$log" > "$tmp/torn.log"
out=$("$ctl" log verify "$tmp/torn.log"); rc=$?
check_eq "a torn last line fails verification" 1 "$rc"
check_match "torn write reported" 'incomplete' "$out"

sed -n '1,4p' "$log" > "$tmp/part1.log"; sed -n '5,$p' "$log" > "$tmp/part2.log"
"$ctl" log verify "$tmp/part1.log" "$tmp/part2.log" >/dev/null
check_eq "a rotated pair verifies in order" 0 "$?"
"$ctl" log verify "$tmp/part2.log" "$tmp/part1.log" >/dev/null
check_eq "a rotated pair out of order does not" 1 "$?"

out=$("$ctl" log --file "$log" --denied)
check_eq "--denied shows only denials" 3 "$(printf '%s\n' "$out" | grep -c ' deny ')"
check_eq "--denied hides allows" 0 "$(printf '%s\n' "$out" | grep -c ' allow ')"
check_match "human format shows target and rule" 'h0\.test:443 .*\[p\.json:1:5\]' "$out"
check_match "control bytes are escaped, never printed raw" 'bell\\x07 here' "$out"
check_match "a complete record shows its error" '^2026-11-22T00:00:05\.000Z .* allow .*h5\.test:443 .*  direct flows not opened: sluiced takes none$' \
	"$("$ctl" log --file "$log")"
out=$("$ctl" log --file "$log" --session s1 --json)
check_eq "--session filters (4 of 8)" 4 "$(printf '%s\n' "$out" | wc -l)"
check "--json prints valid JSON lines" python3 -c 'import json,sys; [json.loads(l) for l in sys.stdin]' <<<"$out"
# A hostile writer (or an edited log) puts raw control bytes inside a JSON string, or hides them
# after a NUL: no output mode may pass them to the terminal.
printf '{"time":"t","session":"s1","decision":"deny","host":"x\033]0;owned\007.test\302\233","port":443}\n{"time":"t","session":"s1","decision":"deny","host":"y.test"}\000\033[2J\n' > "$tmp/hostile.log"
out=$("$ctl" log --file "$tmp/hostile.log" --json 2>/dev/null)
check_eq "--json never prints raw control bytes" 0 "$(printf '%s' "$out" | LC_ALL=C grep -c $'[\x01-\x1f\x7f]\|\xc2[\x80-\x9f]')"
check_match "--json escapes them inside the string" 'x\\u001b\]0;owned\\u0007\.test' "$out"
check "--json output stays valid JSON" python3 -c 'import json,sys; [json.loads(l) for l in sys.stdin]' <<<"$out"
out=$("$ctl" log --file "$tmp/hostile.log" 2>/dev/null)
check_eq "human format never prints raw control bytes" 0 "$(printf '%s' "$out" | LC_ALL=C grep -c $'[\x01-\x1f\x7f]')"
check_eq "a line with a NUL is not a record" 1 "$(printf '%s\n' "$out" | grep -c .)"
"$ctl" log --file "$tmp/nope.log" >/dev/null 2>&1
check_eq "a missing log is an error (exit 1)" 1 "$?"

# Decision and close records (docs/audit-log.md): a request's decision when it was made, its close when it
# ended, linked by flow; a decision whose close never came (the engine was killed) is not tampering.
python3 - "$tmp/events.log" <<'PY'
import hashlib, json, sys
prev = "0" * 64
def rec(ev, flow, host, dec, **kw):
    r = {"time": "2026-11-22T00:00:00.000Z", "event": ev, "flow": flow, "session": "s1", "uid": 0, "command": "sh",
         "protocol": "connect", "host": host, "port": 443, "method": "CONNECT", "decision": dec, "rule": "p.json:1:5",
         "reason": None, "address": None, "status": 0, "bytes_out": 0, "bytes_in": 0, "duration_ms": 0, "error": None}
    r.update(kw)
    return r
recs = [rec("decision", "00aa000000000001", "a.test", "allow"),
        rec("complete", "00aa000000000002", "evil.test", "deny", rule=None, reason="no rule allows it", status=403),
        rec("close", "00aa000000000001", "a.test", "allow", status=200, bytes_out=321, bytes_in=955, duration_ms=18,
            address="198.18.1.11:443"),
        rec("decision", "00aa000000000003", "b.test", "allow")]
with open(sys.argv[1], "w") as f:
    for r in recs:
        body = json.dumps(r, separators=(",", ":"))[:-1]
        h = hashlib.sha256((prev + "\n" + body).encode()).hexdigest()
        f.write('%s,"prev":"%s","hash":"%s"}\n' % (body, prev, h))
        prev = h
PY
out=$("$ctl" log verify "$tmp/events.log"); rc=$?
check_eq "a decision without its close record is not tampering (exit 0)" 0 "$rc"
check_match "verify says how many decisions have no close record" '^1 decision without a close record \(engine killed or restarted' "$out"
check_match "... and that the chain is intact" '^4 records checked: chain intact' "$out"
out=$("$ctl" log --file "$tmp/events.log" 2>"$tmp/events.err")
check_match "a decision shows what was decided, no bytes yet" 'allow  *connect  *CONNECT a\.test:443  \[p\.json:1:5\]$' "$(sed -n 1p <<<"$out")"
check_match "its close shows how it ended" 'closed connect  *CONNECT a\.test:443 200 up 321 down 955 in 18 ms$' "$(sed -n 3p <<<"$out")"
check_match "a request refused at once is one line with its status" 'deny  *connect  *CONNECT evil\.test:443 403 up 0 down 0  no rule allows it$' "$(sed -n 2p <<<"$out")"
check_match "sluicectl log says a decision has no close record" '1 request was decided without a close record' "$(cat "$tmp/events.err")"
out=$("$ctl" log --file "$tmp/events.log" --denied)
check_eq "--denied: the denial only, not the allowed request's close" 1 "$(printf '%s\n' "$out" | grep -c .)"

done_testing
