#!/usr/bin/env python3
"""A log receiver for tests of sluiced --audit-ship: binds a Unix datagram socket and appends what it
receives to a file as one JSON object per datagram. Mode "syslog": {"raw": datagram text}. Mode
"journald": the native journal protocol (KEY=VALUE lines, or KEY\\n<u64 le length><bytes>\\n for binary
values; a datagram that is only an fd via SCM_RIGHTS carries a memfd with the same) -> {"fields": {...}}.

usage: logsink.py syslog|journald SOCKET OUTFILE"""
import array, json, os, socket, struct, sys


def parse_journal(data):
    fields, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            fields[k.decode()] = v.decode("utf-8", "replace")
            i = nl + 1
        else:
            (n,) = struct.unpack("<Q", data[nl + 1:nl + 9])
            fields[line.decode()] = data[nl + 9:nl + 9 + n].decode("utf-8", "replace")
            i = nl + 9 + n + 1
    return fields


def main():
    mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    os.chmod(path, 0o666)
    with open(out, "a", buffering=1) as f:
        while True:
            fds = array.array("i")
            data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(16 * fds.itemsize))
            for level, kind, blob in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(blob[: len(blob) - (len(blob) % fds.itemsize)])
            for fd in fds:
                with os.fdopen(fd, "rb") as m:
                    data += m.read()
            if mode == "syslog":
                f.write(json.dumps({"raw": data.decode("utf-8", "replace")}) + "\n")
            else:
                f.write(json.dumps({"fields": parse_journal(data)}) + "\n")


if __name__ == "__main__":
    main()
