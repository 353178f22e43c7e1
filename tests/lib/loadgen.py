"""Load and fault generator for the reliability tests (tests/lib/load-lab.sh, tests/integration/reliability.sh,
tests/integration/faults.sh, tools/bench-load.sh). Runs inside a lab namespace; never aims anywhere but the
addresses it is given. One asyncio process holds thousands of sockets. Results go to stdout as one JSON object.

  echo PORT...                    TCP echo server on 0.0.0.0:PORT (many connections, epoll)
  badserver ADDR PORT MODE        a misbehaving web server: rst (half a response, then a TCP reset),
                                  garbage (a status line that is not HTTP), halfclose (reads until the
                                  peer's FIN, then answers with what it got and closes), hang (prints
                                  "head" for each request head it reads, never answers)
  slowdns ADDR UPSTREAM           a resolver on ADDR:53 (UDP) that relays to UPSTREAM but never answers names
                                  starting with "slow"
  refusedns ADDR UPSTREAM         a resolver on ADDR:53 (UDP) that relays to UPSTREAM but answers every AAAA
                                  query itself with an error, as some corporate resolvers do: NOTIMP for names
                                  whose first label starts with "notimp", REFUSED without the question (a bare
                                  header) for "bare", REFUSED with the question for all others; and, a
                                  hostile resolver, A queries for names starting with "smuggle" with an
                                  answer whose records read differently by RDLENGTH (A 127.0.0.1) and field
                                  by field as ldns reads them (A 9.9.9.9) (dns_smuggle_reply)
  tunnels SESSIONS N TARGET...    opens N CONNECT tunnels (round-robin over the sessions, echo-checked), prints
                                  {"ok","fail","errors","failed_at","setup_s"} (errors by "stage: error", the
                                  stage connect, head or echo; failed_at: [started s, failed after s] of the
                                  first 20 failures), then holds them until stdin has a line (or closes),
                                  checks every one echoes again, prints {"alive"} and closes
  late [--socks5=PORT] SESSIONS N TARGET...
                                  connections whose client sends nothing until told: each line "connect" on
                                  stdin opens N more (round-robin over the sessions), prints {"connected"}; a
                                  line "send" sends a CONNECT on each (TARGETs round-robin; --socks5: a SOCKS5
                                  greeting and CONNECT to GW:PORT), checks the answer and an echo, prints
                                  {"ok","fail","errors"} (errors by "stage: error") and closes
  abort SESSIONS N TARGET         N connections aborted with a TCP reset at different stages
  latency SESSION N TARGET        N sequential CONNECT + one echo round trip; prints p50/p99/max in ms
  gets SESSION HOST               sequential small GETs of http://HOST/ through the proxy, a new connection each,
                                  until a line on stdin (EOF too); prints n, errors and p50/p99/max in ms (a
                                  pause of the engine's loop shows as one slow GET: slow_policy.sh)
  flood SESSION SECONDS [SLOW [WORKERS]]
                                  slowloris (SLOW held half-heads, a byte a second) plus a connection flood
                                  (WORKERS loops of open/close and denied CONNECTs) from one session, for
                                  SECONDS or until a line on stdin
  decisions SESSIONS CLIENTS R TARGET
                                  CLIENTS concurrent clients, R requests each (allowed CONNECT with an echo,
                                  denied CONNECT, allowed GET); prints how many decisions came back
  lookups SESSION N CONC DOMAIN   N rounds, CONC at a time, each for its own name under DOMAIN (first labels
                                  "nK", "bareK", "notimpK" in turn): a GET http://NAME/ through the proxy (the
                                  engine resolves NAME, A and AAAA), and A and AAAA queries to the DNS proxy on
                                  GW:53; prints counts of what came back (get_200, a_ok, aaaa_error, ...)

SESSIONS is a file of lines "SRC GW" (a session's address and its gateway, the proxy on GW:3128); SESSION is
"SRC@GW". TARGET is host:port (several: chosen round-robin).
"""
import asyncio
import json
import os
import resource
import socket
import struct
import sys
import threading
import time

PORT = 3128


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 17
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def read_sessions(path):
    out = []
    for line in open(path):
        f = line.split()
        if len(f) >= 2:
            out.append((f[0], f[1]))
    return out


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def rst(writer):
    """Closes with a TCP reset (SO_LINGER 0)."""
    try:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


async def open_from(src, gw, timeout=10):
    return await asyncio.wait_for(asyncio.open_connection(gw, PORT, local_addr=(src, 0)), timeout)


async def connect_tunnel(src, gw, target, timeout=10):
    """A CONNECT tunnel through the proxy; returns (reader, writer, status)."""
    r, w = await open_from(src, gw, timeout)
    w.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.") else 0
    return r, w, status


async def echo_round(r, w, token, timeout=10):
    w.write(token)
    got = await asyncio.wait_for(r.readexactly(len(token)), timeout)
    return got == token


def err_name(e):
    if isinstance(e, asyncio.TimeoutError):
        return "timeout"
    if isinstance(e, asyncio.IncompleteReadError):
        return "closed"
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    return type(e).__name__


# ------------------------------------------------------------------------------------------------ servers

async def echo_server(ports):
    async def handle(r, w):
        try:
            while True:
                data = await r.read(65536)
                if not data:
                    break
                w.write(data)
                await w.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            w.transport.abort()

    servers = [await asyncio.start_server(handle, "0.0.0.0", int(p), backlog=4096, reuse_address=True)
               for p in ports]
    print("echo: listening on", " ".join(ports), flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


async def bad_server(addr, port, mode):
    async def handle(r, w):
        try:
            if mode == "halfclose":
                # what a client sends through a tunnel, until its FIN; then the answer
                data = await r.read()
                w.write(b"got %d bytes after your FIN\n" % len(data))
                await w.drain()
                w.close()
                return
            await r.readuntil(b"\r\n\r\n")
            if mode == "hang":
                # a request in flight for as long as the client waits
                print("head", flush=True)
                await r.read()
                w.close()
                return
            if mode == "rst":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: text/plain\r\n\r\n"
                        + b"x" * 1000)
                await w.drain()
                await asyncio.sleep(0.2)
                rst(w)
            elif mode == "garbage":
                w.write(b"HTXP/9.9 \x01\x02 garbage\r\nwhat: ever\r\n\r\nbody")
                await w.drain()
                await asyncio.sleep(0.2)
                w.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            w.transport.abort()

    srv = await asyncio.start_server(handle, addr, int(port), backlog=128, reuse_address=True)
    print("badserver %s on %s:%s" % (mode, addr, port), flush=True)
    await srv.serve_forever()


def dns_question_end(msg):
    """Offset just past the (first) question of a DNS message, or None."""
    i = 12
    while i < len(msg):
        n = msg[i]
        if n == 0:
            return i + 5 if i + 5 <= len(msg) else None
        if n & 0xC0:
            return None
        i += 1 + n
    return None


def dns_error_reply(query, rcode, with_question):
    """An answer to QUERY with RCODE and no records: the query's header (QR, RA set, RD and opcode kept) and,
    with_question, its question."""
    end = dns_question_end(query)
    flags = struct.unpack("!H", query[2:4])[0]
    flags = (flags & 0x7900) | 0x8080 | rcode  # QR, opcode, RD; RA; rcode
    qd = 1 if with_question and end else 0
    return query[:2] + struct.pack("!HHHHH", flags, qd, 0, 0, 0) + (query[12:end] if qd else b"")


def dns_smuggle_reply(query, end):
    """An answer to QUERY (its question ends at END) whose two records read differently to a client that
    goes by RDLENGTH and to one that reads rdata field by field and goes on where the last field ended (ldns
    1.8): a CNAME whose rdata name is, by its RDLENGTH of 1, only a label's length byte. By RDLENGTH the
    second record is "A 127.0.0.1"; field by field the label swallows those 16 bytes and the second record is
    "A 9.9.9.9"."""
    flags = (struct.unpack("!H", query[2:4])[0] & 0x7900) | 0x8080
    cname = b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 60, 1) + bytes([16])
    strict_a = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1])
    ldns_a = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([9, 9, 9, 9])
    return (query[:2] + struct.pack("!HHHHH", flags, 1, 2, 0, 0) + query[12:end] + cname + strict_a + b"\0"
            + ldns_a)


async def dns_relay(addr, upstream, local_answer):
    """A UDP resolver on ADDR:53 that relays to UPSTREAM (ip:port), except for queries local_answer(query)
    answers itself (bytes) or drops (False). Replies are matched by id and question, so that clients whose ids
    collide still get their own answers."""
    loop = asyncio.get_running_loop()
    host, port = upstream.rsplit(":", 1)
    up = (host, int(port))

    class Relay(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.t = transport
            self.pending = {}

        def datagram_received(self, data, peer):
            end = dns_question_end(data)
            if end is None:
                return
            key = data[:2] + data[12:end].lower()
            if peer == up:
                waiting = self.pending.get(key)
                if waiting:
                    self.t.sendto(data, waiting.pop(0))
                    if not waiting:
                        del self.pending[key]
                return
            ans = local_answer(data, end)
            if ans is False:
                return
            if ans:
                self.t.sendto(ans, peer)
                return
            self.pending.setdefault(key, []).append(peer)
            self.t.sendto(data, up)

    await loop.create_datagram_endpoint(Relay, local_addr=(addr, 53))


async def slow_dns(addr, upstream):
    """A resolver that relays to UPSTREAM (ip:port) but never answers names whose first label starts with
    "slow" (a resolver that hangs on some names, as an overloaded or broken one does)."""
    await dns_relay(addr, upstream, lambda q, end: False if q[13:17].lower() == b"slow" else None)
    print("slowdns on %s:53, relaying to %s" % (addr, upstream), flush=True)
    await asyncio.Event().wait()


async def refuse_dns(addr, upstream):
    """A resolver that relays to UPSTREAM but answers AAAA queries with an error itself (see the docstring)."""
    def local(q, end):
        label = q[13:13 + q[12]].lower()
        qtype = struct.unpack("!H", q[end - 4:end - 2])[0]
        if qtype == 1 and label.startswith(b"smuggle"):
            return dns_smuggle_reply(q, end)
        if qtype != 28:
            return None
        if label.startswith(b"notimp"):
            return dns_error_reply(q, 4, True)
        return dns_error_reply(q, 5, not label.startswith(b"bare"))

    await dns_relay(addr, upstream, local)
    print("refusedns on %s:53, relaying to %s" % (addr, upstream), flush=True)
    await asyncio.Event().wait()


# ------------------------------------------------------------------------------------------------ clients

class Stage(Exception):
    """An error of tunnel_over with the stage it happened at."""

    def __init__(self, stage, err):
        super().__init__(stage)
        self.stage, self.err = stage, err


def stage_error(stage, e):
    """ "stage: error" of a failed tunnel."""
    if isinstance(e, Stage):
        stage, e = e.stage, e.err
    return "%s: %s" % (stage, err_name(e) if not isinstance(e, RuntimeError) else e)


async def echo_checked(r, w, i):
    """One echo round through tunnel i; raises Stage("echo", ...) on failure, returns "echo"."""
    try:
        if not await echo_round(r, w, b"tunnel %08d\n" % i):
            raise RuntimeError("echo mismatch")
    except Exception as e:  # noqa: BLE001
        raise Stage("echo", e) from e
    return "echo"


async def tunnel_over(r, w, target, i):
    """Sends CONNECT TARGET (bytes) on a connection to the proxy, checks the 200 and one echo round; raises
    Stage (head or echo) on failure, returns the stage reached ("echo")."""
    try:
        w.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("status %r" % head[9:12].decode("ascii", "replace"))
    except Exception as e:  # noqa: BLE001
        raise Stage("head", e) from e
    return await echo_checked(r, w, i)


async def socks5_over(r, w, target, i):
    """tunnel_over for the SOCKS5 front: greeting, CONNECT to the name, the success reply, one echo."""
    host, port = target.rsplit(b":", 1)
    try:
        w.write(b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack("!H", int(port)))
        got = await asyncio.wait_for(r.readexactly(12), 10)
        if got[:2] != b"\x05\x00" or got[2:4] != b"\x05\x00":
            raise RuntimeError("reply %s" % got[:4].hex())
    except Exception as e:  # noqa: BLE001
        raise Stage("head", e) from e
    return await echo_checked(r, w, i)


async def late(sessions, n, targets, socks_port=None):
    """Connections whose client sends its head only when told: each line "connect" on stdin opens N more
    (round-robin over the sessions) and prints {"connected"} (all so far); "send" sends a CONNECT on each
    (with socks_port: to the SOCKS5 front on that port, a SOCKS5 greeting and CONNECT), checks the answer and
    an echo, prints {"ok","fail","errors"} and closes them all (as does EOF)."""
    conns, loop = [], asyncio.get_running_loop()
    sem = asyncio.Semaphore(256)
    over = socks5_over if socks_port else tunnel_over

    async def one(i):
        src, gw = sessions[i % len(sessions)]
        async with sem:
            try:
                if socks_port:
                    r, w = await asyncio.wait_for(asyncio.open_connection(gw, socks_port, local_addr=(src, 0)), 10)
                else:
                    r, w = await open_from(src, gw)
                conns.append((i, r, w))
            except Exception as e:  # noqa: BLE001
                conns.append((i, None, e))

    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line == "connect":
            base = len(conns)
            await asyncio.gather(*(one(base + k) for k in range(n)))
            emit({"connected": sum(1 for c in conns if c[1] is not None)})
            continue
        break
    ok, errors = 0, {}

    async def send(i, r, w):  # (all at once: each is connected already)
        nonlocal ok
        try:
            if r is None:
                raise Stage("connect", w)
            await over(r, w, targets[i % len(targets)].encode(), i)
            ok += 1
        except Exception as e:  # noqa: BLE001
            key = stage_error("head", e)
            errors[key] = errors.get(key, 0) + 1
        if r is not None:
            w.transport.abort()

    if line == "send":
        await asyncio.gather(*(send(i, r, w) for i, r, w in conns))
        emit({"ok": ok, "fail": len(conns) - ok, "errors": errors})


async def tunnels(sessions, n, targets):
    sem = asyncio.Semaphore(256)  # setups in flight (the SYN backlog and the proxy's accept loop)
    held, errors, failed_at = [], {}, []
    fail = 0

    async def one(i):
        nonlocal fail
        src, gw = sessions[i % len(sessions)]
        target = targets[i % len(targets)].encode()
        async with sem:
            stage, t = "connect", time.monotonic()
            try:
                r, w = await open_from(src, gw)
                stage = "head"
                stage = await tunnel_over(r, w, target, i)
                held.append((i, r, w))
            except Exception as e:  # noqa: BLE001 (counted and reported: stage, error, when, after how long)
                fail += 1
                key = stage_error(stage, e)
                errors[key] = errors.get(key, 0) + 1
                if len(failed_at) < 20:
                    failed_at.append([round(t - t0, 2), round(time.monotonic() - t, 2)])

    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    emit({"ok": len(held), "fail": fail, "errors": errors, "failed_at": failed_at,
          "setup_s": round(time.monotonic() - t0, 2)})
    # hold until told (a line or EOF on stdin), then check every tunnel still works
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    sem2 = asyncio.Semaphore(1024)
    alive = 0

    async def again(i, r, w):
        nonlocal alive
        async with sem2:
            try:
                if await echo_round(r, w, b"again  %08d\n" % i):
                    alive += 1
            except Exception:  # noqa: BLE001
                pass
            w.transport.abort()

    await asyncio.gather(*(again(i, r, w) for i, r, w in held))
    emit({"alive": alive})


async def abort(sessions, n, target):
    """Aborts (TCP reset) at four stages: right after connect, inside a head, inside a tunnel, and while the
    proxy is dialling/answering a CONNECT."""
    sem = asyncio.Semaphore(128)
    stages = {"connect": 0, "head": 0, "tunnel": 0, "dial": 0}
    failed = {}

    async def one(i):
        src, gw = sessions[i % len(sessions)]
        stage = ("connect", "head", "tunnel", "dial")[i % 4]
        async with sem:
            try:
                if stage == "tunnel":
                    r, w, status = await connect_tunnel(src, gw, target)
                    if status == 200:
                        w.write(b"half a message")
                        await w.drain()
                else:
                    r, w = await open_from(src, gw)
                    if stage == "head":
                        w.write(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allo")
                        await w.drain()
                    elif stage == "dial":
                        w.write(b"CONNECT %s HTTP/1.1\r\n\r\n" % target.encode())
                        await w.drain()
                rst(w)
                stages[stage] += 1
            except Exception as e:  # noqa: BLE001
                failed[err_name(e)] = failed.get(err_name(e), 0) + 1

    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    emit({"aborted": sum(stages.values()), "stages": stages, "errors": failed,
          "seconds": round(time.monotonic() - t0, 2)})


def pct(vals, p):
    s = sorted(vals)
    if not s:
        return None
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


async def latency(session, n, target):
    src, gw = session.split("@")
    times, errors = [], {}
    for i in range(n):
        t = time.perf_counter()
        try:
            r, w, status = await connect_tunnel(src, gw, target, timeout=10)
            if status != 200 or not await echo_round(r, w, b"ping %d\n" % i):
                raise RuntimeError("status %d" % status)
            times.append((time.perf_counter() - t) * 1000.0)
            w.transport.abort()
        except Exception as e:  # noqa: BLE001
            errors[err_name(e)] = errors.get(err_name(e), 0) + 1
    emit({"n": len(times), "p50_ms": round(pct(times, 50) or 0, 3), "p99_ms": round(pct(times, 99) or 0, 3),
          "max_ms": round(max(times) if times else 0, 3), "errors": errors})


async def gets(session, host):
    src, gw = session.split("@")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), loop.call_soon_threadsafe(stop.set)),
                     daemon=True).start()
    times, errors = [], {}
    while not stop.is_set():
        t = time.perf_counter()
        try:
            r, w = await open_from(src, gw)
            w.write(b"GET http://%s/small HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" %
                    (host.encode(), host.encode()))
            data = await asyncio.wait_for(r.read(), 30)
            w.transport.abort()
            if not data.startswith(b"HTTP/1.1 200"):
                raise RuntimeError("status %r" % data[:12])
            times.append((time.perf_counter() - t) * 1000.0)
        except Exception as e:  # noqa: BLE001
            errors[err_name(e)] = errors.get(err_name(e), 0) + 1
            await asyncio.sleep(0.01)
    emit({"n": len(times), "p50_ms": round(pct(times, 50) or 0, 3), "p99_ms": round(pct(times, 99) or 0, 3),
          "max_ms": round(max(times) if times else 0, 3), "errors": errors})


async def flood(session, seconds, slow=400, workers=32):
    src, gw = session.split("@")
    end = time.monotonic() + seconds
    loop = asyncio.get_running_loop()

    def stop_on_stdin():  # a line on stdin ends the flood early (EOF does not: stdin may be /dev/null)
        if not sys.stdin.readline():
            return

        def stop():
            nonlocal end
            end = 0
        loop.call_soon_threadsafe(stop)

    threading.Thread(target=stop_on_stdin, daemon=True).start()
    stat = {"slowloris_opened": 0, "slowloris_408": 0, "flood_conns": 0, "denied_403": 0, "refused_503": 0,
            "other": 0}

    async def slowloris():
        while time.monotonic() < end:
            try:
                r, w = await open_from(src, gw)
                stat["slowloris_opened"] += 1
                w.write(b"GET http://allowed.test/ HTTP/1.1\r\n")
                while time.monotonic() < end:
                    w.write(b"X")
                    await w.drain()
                    try:
                        data = await asyncio.wait_for(r.read(4096), 1.0)
                    except asyncio.TimeoutError:
                        continue
                    if data.startswith(b"HTTP/1.1 408"):
                        stat["slowloris_408"] += 1
                    elif data.startswith(b"HTTP/1.1 503"):
                        stat["refused_503"] += 1
                    break
                w.transport.abort()
            except Exception:  # noqa: BLE001
                stat["other"] += 1
                await asyncio.sleep(0.1)

    async def flooder(k):
        while time.monotonic() < end:
            try:
                r, w = await open_from(src, gw)
                stat["flood_conns"] += 1
                if k % 2:
                    w.transport.abort()  # open and close at once
                    continue
                w.write(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
                head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
                if head.startswith(b"HTTP/1.1 403"):
                    stat["denied_403"] += 1
                elif head.startswith(b"HTTP/1.1 503"):
                    stat["refused_503"] += 1
                else:
                    stat["other"] += 1
                w.transport.abort()
            except Exception:  # noqa: BLE001
                stat["other"] += 1
                await asyncio.sleep(0.01)

    await asyncio.gather(*(slowloris() for _ in range(slow)), *(flooder(k) for k in range(workers)))
    emit(stat)


async def decisions(sessions, clients, reqs, target):
    """Each request is one decision the proxy must log: an allowed tunnel (logged when it ends), a denied
    CONNECT (403) and an allowed plain GET. Counts the answers that came back."""
    got = {"tunnel_200": 0, "denied_403": 0, "get_200": 0, "other": 0}

    async def client(c):
        src, gw = sessions[c % len(sessions)]
        for k in range(reqs):
            kind = (c + k) % 3
            try:
                if kind == 0:
                    r, w, status = await connect_tunnel(src, gw, target)
                    if status == 200 and await echo_round(r, w, b"decision %d %d\n" % (c, k)):
                        got["tunnel_200"] += 1
                    else:
                        got["other"] += 1
                    w.close()
                elif kind == 1:
                    r, w, status = await connect_tunnel(src, gw, "evil.test:443")
                    got["denied_403" if status == 403 else "other"] += 1
                    w.close()
                else:
                    r, w = await open_from(src, gw)
                    w.write(b"GET http://allowed.test/decision-%d-%d HTTP/1.1\r\nHost: allowed.test\r\n"
                            b"Connection: close\r\n\r\n" % (c, k))
                    data = await asyncio.wait_for(r.read(), 20)
                    got["get_200" if data.startswith(b"HTTP/1.1 200") else "other"] += 1
                    w.close()
            except Exception:  # noqa: BLE001
                got["other"] += 1

    t0 = time.monotonic()
    await asyncio.gather(*(client(c) for c in range(clients)))
    got["decisions"] = got["tunnel_200"] + got["denied_403"] + got["get_200"]
    got["seconds"] = round(time.monotonic() - t0, 2)
    emit(got)


async def dns_query(src, gw, name, qtype, timeout=5):
    """One UDP query to the DNS proxy on GW:53 from SRC; returns (rcode, answer count) or None (no answer)."""
    loop = asyncio.get_running_loop()
    qid = os.urandom(2)
    wire = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    msg = qid + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + wire + struct.pack("!HH", qtype, 1)
    got = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data, peer):
            if data[:2] == qid and not got.done():
                got.set_result(data)

    t, _ = await loop.create_datagram_endpoint(Client, local_addr=(src, 0), remote_addr=(gw, 53))
    try:
        t.sendto(msg)
        data = await asyncio.wait_for(got, timeout)
        return data[3] & 15, struct.unpack("!H", data[6:8])[0]
    except asyncio.TimeoutError:
        return None
    finally:
        t.close()


async def lookups(session, n, conc, domain):
    src, gw = session.split("@")
    got = {"get_200": 0, "get_other": {}, "a_ok": 0, "a_bad": {}, "aaaa_error": 0, "aaaa_other": {}}
    sem = asyncio.Semaphore(conc)

    def bump(d, k):
        d[k] = d.get(k, 0) + 1

    async def one(k):
        name = "%s%d.%s" % (("n", "bare", "notimp")[k % 3], k, domain)
        async with sem:
            try:
                r, w = await open_from(src, gw)
                w.write(b"GET http://%s/lookup-%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                        % (name.encode(), k, name.encode()))
                head = await asyncio.wait_for(r.readuntil(b"\r\n"), 20)
                status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "none"
                w.close()
            except Exception as e:  # noqa: BLE001
                status = err_name(e)
            if status == "200":
                got["get_200"] += 1
            else:
                bump(got["get_other"], status)
            a = await dns_query(src, gw, name, 1)
            if a and a[0] == 0 and a[1] > 0:
                got["a_ok"] += 1
            else:
                bump(got["a_bad"], "none" if a is None else "rcode %d an %d" % a)
            aaaa = await dns_query(src, gw, name, 28)
            if aaaa and aaaa[0] in (4, 5) and aaaa[1] == 0:
                got["aaaa_error"] += 1
            else:
                bump(got["aaaa_other"], "none" if aaaa is None else "rcode %d an %d" % aaaa)

    t0 = time.monotonic()
    await asyncio.gather(*(one(k) for k in range(n)))
    got["seconds"] = round(time.monotonic() - t0, 2)
    emit(got)


def main():
    raise_nofile()
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "echo":
        coro = echo_server(args)
    elif cmd == "badserver":
        coro = bad_server(args[0], args[1], args[2])
    elif cmd == "slowdns":
        coro = slow_dns(args[0], args[1])
    elif cmd == "tunnels":
        coro = tunnels(read_sessions(args[0]), int(args[1]), args[2:])
    elif cmd == "late":
        socks = int(args.pop(0).split("=", 1)[1]) if args[0].startswith("--socks5=") else None
        coro = late(read_sessions(args[0]), int(args[1]), args[2:], socks)
    elif cmd == "abort":
        coro = abort(read_sessions(args[0]), int(args[1]), args[2])
    elif cmd == "latency":
        coro = latency(args[0], int(args[1]), args[2])
    elif cmd == "gets":
        coro = gets(args[0], args[1])
    elif cmd == "flood":
        coro = flood(args[0], float(args[1]), *(int(a) for a in args[2:4]))
    elif cmd == "decisions":
        coro = decisions(read_sessions(args[0]), int(args[1]), int(args[2]), args[3])
    elif cmd == "refusedns":
        coro = refuse_dns(args[0], args[1])
    elif cmd == "lookups":
        coro = lookups(args[0], int(args[1]), int(args[2]), args[3])
    else:
        sys.exit("loadgen: unknown command %r (see the docstring)" % cmd)
    asyncio.run(coro)


if __name__ == "__main__":
    main()
