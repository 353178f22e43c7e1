#!/usr/bin/env python3
"""perf-areas.py PERF_DATA [REQUESTS HZ]: where the CPU of a `perf record -g` profile goes, by command and by
kernel area, from each sample's call chain (tools/bench-machine.sh runs it on its profiles). Every sample
falls in exactly one area, the first of AREAS (in that order) whose function is on its chain, so the
areas of a command add up to its total; samples in user space go to "user: DSO". With REQUESTS (the
requests served while perf recorded) and HZ (perf record -F) it prints CPU microseconds per request too.
cpu-clock sampling cannot fire with interrupts off: such time lands where they come back on (a spin
unlock), which the chain still places in its area."""
import collections
import subprocess
import sys

# (area, functions): a sample whose chain holds one of the functions is in the area; first match wins,
# so nested work goes to the most specific area listed first.
AREAS = [
    ("netfilter (nf_hook_slow, conntrack)", ("nf_hook_slow", "nf_conntrack_in", "nft_do_chain")),
    ("wake-up of a peer (try_to_wake_up)", ("try_to_wake_up", "ttwu_do_activate")),
    ("epoll callback (ep_poll_callback)", ("ep_poll_callback",)),
    ("context switch (schedule)", ("__schedule", "schedule", "finish_task_switch")),
    ("wake-up of a reader (sock_def_readable)", ("sock_def_readable", "__wake_up_sync_key", "__wake_up_common")),
    ("softirq: TCP receive (tcp_v4_rcv)", ("tcp_v4_rcv", "tcp_v6_rcv")),
    ("softirq: IP forward (ip_forward)", ("ip_forward", "ip6_forward")),
    ("softirq: IP receive, veth, backlog", ("net_rx_action", "__netif_receive_skb_one_core", "ip_rcv")),
    ("device xmit (veth_xmit, qdisc)", ("__dev_queue_xmit", "veth_xmit")),
    ("TCP send (tcp_sendmsg)", ("tcp_sendmsg", "tcp_sendmsg_locked")),
    ("TCP receive copy (tcp_recvmsg)", ("tcp_recvmsg", "tcp_recvmsg_locked")),
    ("epoll_wait", ("do_epoll_wait", "__x64_sys_epoll_wait", "__x64_sys_epoll_pwait")),
    ("epoll_ctl", ("do_epoll_ctl", "__x64_sys_epoll_ctl")),
    ("file write (audit log)", ("ext4_file_write_iter", "generic_perform_write", "shmem_file_write_iter")),
    ("syscall entry/exit, fd lookup, other", ("do_syscall_64", "entry_SYSCALL_64_after_hwframe", "syscall_exit_to_user_mode")),
    ("interrupts, timers", ("asm_sysvec_apic_timer_interrupt", "hrtimer_interrupt", "irq_exit_rcu")),
]


def main():
    data = sys.argv[1]
    reqs = float(sys.argv[2]) if len(sys.argv) > 3 and sys.argv[2] else 0
    hz = float(sys.argv[3]) if reqs else 0
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"], capture_output=True, text=True,
                         errors="replace").stdout
    area = collections.defaultdict(collections.Counter)
    scall = collections.defaultdict(collections.Counter)
    total = collections.Counter()
    for block in out.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        comm = lines[0].split()[0]
        frames = []
        for l in lines[1:]:
            parts = l.strip().split(None, 1)
            if len(parts) < 2:
                continue
            sym, _, dso = parts[1].rpartition(" (")
            frames.append((sym.split("+")[0], dso.rstrip(")")))
        if not frames:
            continue
        total[comm] += 1
        leaf_sym, leaf_dso = frames[0]
        if "kernel" not in leaf_dso:
            area[comm]["user: " + leaf_dso.rsplit("/", 1)[-1]] += 1
            continue
        names = {s for s, _ in frames}
        for a, fns in AREAS:
            if any(f in names for f in fns):
                area[comm][a] += 1
                break
        else:
            area[comm]["kernel, other"] += 1
        sc = None
        for i, (s, _) in enumerate(frames):
            if s == "do_syscall_64":
                sc = frames[i - 1][0] if i > 0 else "do_syscall_64"
                break
        scall[comm][sc or "(not in a system call)"] += 1
    every = sum(total.values())

    def us(n):
        return f"  {n / hz / reqs * 1e6:6.2f} us/request" if reqs else ""

    if reqs:
        print(f"all: {every} samples,{us(every)}")
    for comm in sorted(total, key=lambda c: -total[c]):
        print(f"{comm}: {total[comm]} samples, {100 * total[comm] / every:.1f}% of all{us(total[comm])}")
        for a, n in area[comm].most_common():
            print(f"  {a:44} {100 * n / total[comm]:5.1f}%{us(n)}")
        print("  by system call (kernel samples; do_writev is writev, ksys_write write, ...):")
        for s, n in scall[comm].most_common(8):
            print(f"    {s:42} {100 * n / total[comm]:5.1f}%{us(n)}")


if __name__ == "__main__":
    main()
