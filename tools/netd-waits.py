#!/usr/bin/env python3
"""Where sluiced's main thread waited, from an off-CPU recording of bench-netd (not part of the test suite).

    PERF_EVENTS=sched:sched_switch PERF_OUT=/tmp/w LIVES="1 1000" RUNS=1 tools/bench-netd.sh build
    tools/netd-waits.py /tmp/w.1000

Runs `perf script` on the recording, takes the thread with the most context switches as sluiced's main
thread and the one that switched out inside rtnl_dellink as the reaper, and classifies every wait of the
main thread of MIN_MS (1) or more by its kernel stack: an RTNL wait counts as "behind the reaper" when the
reaper switched out inside rtnl_dellink between 50 ms before the wait and its end. A wait is measured from
one switch-out to the thread's next, so it includes the (short) run after it. Waits in epoll are left
out: they are sluiced idle or waiting for its client or engine."""
import collections
import re
import subprocess
import sys

RTNL_HANDLERS = ("rtnl_newlink", "inet6_rtm_newaddr", "inet_rtm_newaddr", "inet_rtm_newroute",
                 "inet6_rtm_newroute", "rtnetlink_rcv_msg")


def events(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "tid,time,event,trace,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    evs, cur = [], None
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+): sched:sched_switch: .*prev_state=(\S+)", line)
        if m:
            cur = {"tid": int(m.group(1)), "t": float(m.group(2)), "state": m.group(3), "stack": []}
            evs.append(cur)
        elif cur is not None and len(line.split()) >= 2:
            cur["stack"].append(line.split()[1])
    return evs


def classify(st, t0, t1, dels):
    if any(h in st for h in RTNL_HANDLERS) and any(f.startswith("__mutex_lock") for f in st):
        if any(t0 - 0.05 < d < t1 for d in dels):
            return "RTNL lock, behind the reaper's deletion"
        return "RTNL lock, another holder"
    if "expand_files" in st:
        return "fd table growth (synchronize_rcu)"
    if "__x64_sys_futex" in st:
        return "futex (a thread join or lock)"
    return "other: " + " < ".join([f for f in st if f not in ("__schedule", "schedule")][:3])


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: tools/netd-waits.py PERF_DATA [MIN_MS]")
    min_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    evs = events(sys.argv[1])
    if not evs:
        sys.exit("netd-waits: no sched_switch events in %s (record with PERF_EVENTS=sched:sched_switch)"
                 % sys.argv[1])
    main_tid = collections.Counter(e["tid"] for e in evs).most_common(1)[0][0]
    dels = [e["t"] for e in evs if "rtnl_dellink" in e["stack"] and e["tid"] != main_tid]
    mine = [e for e in evs if e["tid"] == main_tid]
    waits = collections.defaultdict(list)
    for a, b in zip(mine, mine[1:]):
        ms = (b["t"] - a["t"]) * 1000
        if a["state"] in ("D", "S") and ms >= min_ms and "do_epoll_wait" not in a["stack"]:
            waits[classify(a["stack"], a["t"], b["t"], dels)].append(ms)
    print("main thread %d; %d switch-outs of other threads inside rtnl_dellink" % (main_tid, len(dels)))
    for k, v in sorted(waits.items(), key=lambda kv: -sum(kv[1])):
        print("  %-45s n=%4d total %8.1f ms  longest %7.1f ms" % (k, len(v), sum(v), max(v)))
    if not waits:
        print("  no wait of %.1f ms or more outside epoll" % min_ms)


if __name__ == "__main__":
    main()
