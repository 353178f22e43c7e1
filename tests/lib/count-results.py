#!/usr/bin/env python3
"""Counts meson test results in a testlog.json: prints 'passed failed skipped'."""
import json
import sys

passed = failed = skipped = 0
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        result = json.loads(line).get("result", "ERROR")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
print(passed, failed, skipped)
