#!/usr/bin/env python3
"""fakenet: the services of the test lab's fake internet (started by tests/lib/lab.sh inside a lab netns).

One process serves, on the wildcard address (IPv4 and IPv6):
  - HTTP echo (--http PORT, repeatable) and HTTPS echo (--https PORT, with --cert/--key): any method and
    target; the reply is a JSON description of the request (method, target, headers as a list, body length
    and sha256, client and local address, TLS SNI). Special paths: /status/NNN, /bytes/N, /redirect[/HOST[/PATH]]
    (or ?to=URL), /slow/MS, /chunked[/N], /badchunk/N (N bytes chunked, then a chunk size that is not hex,
    then the close), /close, /extra (a complete response followed by the bytes of a
    second one nobody asked for), /dropnext (a normal response; the next request on the same connection is
    read and the connection closed without an answer: a kept-alive connection the server gave up on).
    HTTP/1.1 with keep-alive.
  - a tiny npm registry for the host named by --npm-host (selected by the Host header): GET /<pkg> returns a
    packument, GET /<pkg>/-/<name>-1.0.0.tgz a real tarball whose dist.shasum (sha1) and dist.integrity
    (sha512) match.
  - on the same host, a PyPI simple index (PEP 503) of the --pypi-package names: GET /simple/ lists them,
    GET /simple/<name>/ links /packages/<wheel>#sha256=..., a real wheel (py3-none-any: a module, METADATA,
    WHEEL, RECORD) made here with zipfile, which pip downloads and installs.
  - TCP echo (--tcp-echo PORT) and UDP echo (--udp-echo PORT).
Every HTTP request is logged as one JSON line to --access-log *before* its reply is sent, so a test that got a
reply can read the log without racing, and a test can prove a request never reached the origin.
Python 3 standard library only. Not a security boundary: it only ever runs inside a test lab.
"""
import argparse
import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import random
import re
import signal
import socket
import socketserver
import ssl
import struct
import sys
import tarfile
import threading
import time
import urllib.parse
import zipfile

BLOCK = random.Random(0x51_1CE).randbytes(1 << 20)  # /bytes content: this 1 MiB block, repeated
MAX_BYTES = 1 << 40
MAX_SLOW_MS = 120_000
ECHO_WORDS = {"status", "bytes", "redirect", "slow", "chunked", "badchunk", "close", "echo"}
NPM_VERSION = "1.0.0"
NPM_MTIME = 499162500  # the fixed mtime `npm pack` uses (1985-10-26), keeps tarballs reproducible

log_lock = threading.Lock()
access_log = None  # file object, line-buffered; None = no access log


def errlog(msg):
    with log_lock:
        sys.stderr.write("%s fakenet: %s\n" % (time.strftime("%H:%M:%S"), msg))
        sys.stderr.flush()


def plain_addr(addr):
    """'::ffff:198.18.0.1' -> '198.18.0.1' (dual-stack sockets report IPv4 peers as mapped addresses)."""
    if addr.startswith("::ffff:") and "." in addr:
        return addr[7:]
    return addr


def bytes_sha256(n):
    h = hashlib.sha256()
    left = n
    while left > 0:
        k = min(left, len(BLOCK))
        h.update(BLOCK[:k])
        left -= k
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- npm registry

class NpmPackage:
    def __init__(self, name):
        self.name = name
        self.base = name.rsplit("/", 1)[-1]  # "@scope/x" -> "x"
        self.filename = "%s-%s.tgz" % (self.base, NPM_VERSION)
        manifest = {
            "name": name,
            "version": NPM_VERSION,
            "description": "%s: a package served by the sluice test lab" % name,
            "main": "index.js",
            "license": "MIT",
        }
        files = [
            ("package/package.json", (json.dumps(manifest, indent=2) + "\n").encode()),
            ("package/index.js", ("module.exports = %s;\n" % json.dumps(name + " from the sluice lab")).encode()),
        ]
        raw = io.BytesIO()
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for path, data in files:
                    info = tarfile.TarInfo(path)
                    info.size = len(data)
                    info.mtime = NPM_MTIME
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(data))
        self.tgz = raw.getvalue()
        self.shasum = hashlib.sha1(self.tgz).hexdigest()
        self.integrity = "sha512-" + base64.b64encode(hashlib.sha512(self.tgz).digest()).decode()
        self.manifest = manifest

    def tarball_path(self):
        return "/%s/-/%s" % (self.name, self.filename)

    def packument(self, origin):
        version = dict(self.manifest)
        version["_id"] = "%s@%s" % (self.name, NPM_VERSION)
        version["dist"] = {
            "tarball": origin + self.tarball_path(),
            "shasum": self.shasum,
            "integrity": self.integrity,
        }
        stamp = "1985-10-26T08:15:00.000Z"
        return {
            "_id": self.name,
            "name": self.name,
            "description": self.manifest["description"],
            "dist-tags": {"latest": NPM_VERSION},
            "versions": {NPM_VERSION: version},
            "time": {"created": stamp, "modified": stamp, NPM_VERSION: stamp},
            "license": "MIT",
        }


# ---------------------------------------------------------------------------------------------- PyPI index

def pypi_normalize(name):
    """PEP 503: the index's name of a project."""
    return re.sub(r"[-_.]+", "-", name).lower()


class PypiPackage:
    def __init__(self, name):
        self.name = name
        self.norm = pypi_normalize(name)
        dist = re.sub(r"[-_.]+", "_", name)
        self.module = dist.lower()
        self.filename = "%s-%s-py3-none-any.whl" % (dist, NPM_VERSION)
        info = "%s-%s.dist-info" % (dist, NPM_VERSION)
        files = [
            ("%s/__init__.py" % self.module, ("VALUE = %r\n" % (name + " from the sluice lab")).encode()),
            ("%s/METADATA" % info, ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s: a package "
                                    "served by the sluice test lab\n" % (name, NPM_VERSION, name)).encode()),
            ("%s/WHEEL" % info, b"Wheel-Version: 1.0\nGenerator: sluice-lab\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n"),
        ]
        record = "".join("%s,sha256=%s,%d\n" % (path, base64.urlsafe_b64encode(hashlib.sha256(data).digest())
                                                 .rstrip(b"=").decode(), len(data)) for path, data in files)
        files.append(("%s/RECORD" % info, (record + "%s/RECORD,,\n" % info).encode()))
        raw = io.BytesIO()
        with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for path, data in files:
                zi = zipfile.ZipInfo(path, date_time=(1985, 10, 26, 8, 15, 0))
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.external_attr = 0o644 << 16
                zf.writestr(zi, data)
        self.whl = raw.getvalue()
        self.sha256 = hashlib.sha256(self.whl).hexdigest()


# ------------------------------------------------------------------------------------------------ HTTP echo

class BadRequest(Exception):
    pass


class EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sluice-lab-fakenet"
    sys_version = ""
    timeout = 120  # idle keep-alive connections are closed after this many seconds

    def __getattr__(self, name):
        # Any method token (GET, POST, PROPFIND, CONNECT, ...) is echoed.
        if name.startswith("do_"):
            return self.serve
        raise AttributeError(name)

    def log_request(self, code="-", size="-"):
        pass  # requests go to the access log (log_access), written before the reply

    def log_message(self, fmt, *args):  # errors only
        errlog("%s %s: %s" % (self.server.lab_name, self.client_address[0], fmt % args))

    # -- request body: Content-Length or chunked, hashed while streaming (uploads may be large)
    def read_body(self):
        h = hashlib.sha256()
        n = 0
        te = self.headers.get("Transfer-Encoding")
        cl = self.headers.get_all("Content-Length") or []
        if te is not None:
            if te.strip().lower() != "chunked":
                raise BadRequest("unsupported Transfer-Encoding %r" % te)
            while True:
                line = self.rfile.readline(1025)
                if not line.endswith(b"\n"):
                    raise BadRequest("bad chunk size line")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise BadRequest("bad chunk size %r" % line[:40])
                if size < 0:
                    raise BadRequest("negative chunk size")
                if size == 0:
                    break
                left = size
                while left:
                    data = self.rfile.read(min(left, 65536))
                    if not data:
                        raise BadRequest("body ended inside a chunk")
                    h.update(data)
                    n += len(data)
                    left -= len(data)
                if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                    raise BadRequest("chunk not followed by CRLF")
            for _ in range(100):  # trailers
                line = self.rfile.readline(8193)
                if line in (b"\r\n", b"\n", b""):
                    break
            return n, h.hexdigest()
        if cl:
            if len(set(v.strip() for v in cl)) != 1 or not cl[0].strip().isdigit():
                raise BadRequest("bad Content-Length %r" % cl)
            left = int(cl[0])
            while left:
                data = self.rfile.read(min(left, 65536))
                if not data:
                    raise BadRequest("body shorter than Content-Length")
                h.update(data)
                n += len(data)
                left -= len(data)
        return n, h.hexdigest()

    def host_header(self):
        host = (self.headers.get("Host") or "").strip().lower()
        if host.startswith("["):
            return host[: host.find("]") + 1] if "]" in host else host
        return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

    def scheme(self):
        return "https" if self.server.lab_tls else "http"

    def describe(self, body_len, body_sha):
        local = self.connection.getsockname()
        if self.path.startswith("/"):  # origin-form
            path, _, query = self.path.partition("?")
        elif self.command == "CONNECT":  # authority-form: host:port, echoed as the path
            path, query = self.path, ""
        else:  # absolute-form (a proxy forwarded it as-is)
            split = urllib.parse.urlsplit(self.path)
            path, query = split.path or "/", split.query
        return {
            "server": self.server.lab_name,
            "scheme": self.scheme(),
            "tls_sni": getattr(self.connection, "lab_sni", None) if self.server.lab_tls else None,
            "local": {"addr": plain_addr(local[0]), "port": local[1]},
            "client": {"addr": plain_addr(self.client_address[0]), "port": self.client_address[1]},
            "method": self.command,
            "target": self.path,
            "path": path,
            "query": query,
            "version": self.request_version,
            "host": self.headers.get("Host"),
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_length": body_len,
            "body_sha256": body_sha,
        }

    def log_access(self, info, status, note=""):
        if access_log is None:
            return
        rec = {
            "time": round(time.time(), 3),
            "server": info["server"],
            "scheme": info["scheme"],
            "sni": info["tls_sni"],
            "client": info["client"]["addr"],
            "local": "%s:%d" % (info["local"]["addr"], info["local"]["port"]),
            "method": info["method"],
            "host": info["host"],
            "target": info["target"],
            "status": status,
            "body_length": info["body_length"],
        }
        if note:
            rec["note"] = note
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        with log_lock:
            access_log.write(line)
            access_log.flush()

    def send_body(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        no_body = self.command == "HEAD" or status in (204, 304)
        if status != 204 and status != 304:
            self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not no_body:
            self.wfile.write(body)

    def send_json(self, status, obj, extra=()):
        self.send_body(status, (json.dumps(obj, indent=1) + "\n").encode(), extra=extra)

    def serve(self):
        if getattr(self, "lab_drop_next", False):
            self.close_connection = True  # (see /dropnext) no answer at all
            return
        try:
            body_len, body_sha = self.read_body()
        except BadRequest as e:
            self.close_connection = True
            self.send_json(400, {"error": str(e)})
            return
        info = self.describe(body_len, body_sha)
        path = info["path"]
        host = self.host_header()
        npm = self.server.lab_npm
        if self.server.lab_pypi and host == self.server.lab_npm_host and self.command in ("GET", "HEAD") and \
                (path.startswith("/simple/") or path.startswith("/packages/")):
            self.serve_pypi(info, path, self.server.lab_pypi)
            return
        if npm and host == self.server.lab_npm_host and self.command in ("GET", "HEAD", "POST"):
            if self.serve_npm(info, path, npm):
                return
        parts = path.split("/")  # ['', word, arg, ...]
        word = parts[1] if len(parts) > 1 else ""
        arg = parts[2] if len(parts) > 2 else ""
        if word == "status" and arg.isdigit() and 200 <= int(arg) <= 599:
            status = int(arg)
            self.log_access(info, status)
            self.send_json(status, info)
        elif word == "bytes" and arg.isdigit():
            self.serve_bytes(info, min(int(arg), MAX_BYTES))
        elif word == "redirect":
            q = urllib.parse.parse_qs(info["query"])
            if "to" in q:
                location = q["to"][0]
            else:
                target = arg or "other.test"
                location = "%s://%s/%s" % (self.scheme(), target, "/".join(parts[3:]))
            self.log_access(info, 302)
            self.send_json(302, info, extra=[("Location", location)])
        elif word == "slow" and arg.isdigit():
            self.log_access(info, 200)
            time.sleep(min(int(arg), MAX_SLOW_MS) / 1000.0)
            self.send_json(200, info)
        elif word == "chunked":
            self.log_access(info, 200)
            if arg.isdigit():
                self.send_chunked(BLOCK, min(int(arg), MAX_BYTES), "application/octet-stream")
            else:
                data = (json.dumps(info, indent=1) + "\n").encode()
                self.send_chunked(data, len(data), "application/json")
        elif word == "badchunk" and arg.isdigit():
            self.log_access(info, 200)
            self.close_connection = True
            self.send_chunked(BLOCK, min(int(arg), MAX_BYTES), "application/octet-stream", bad=True)
        elif word == "close":
            self.log_access(info, 200)
            self.close_connection = True
            self.send_json(200, info)
        elif word == "extra":
            self.log_access(info, 200)
            self.send_json(200, info)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nX-Smuggled: 1\r\n\r\nsmuggled\n")
        elif word == "dropnext":
            self.log_access(info, 200)
            self.lab_drop_next = True
            self.send_json(200, info)
        else:
            self.log_access(info, 200)
            self.send_json(200, info)

    def serve_bytes(self, info, n):
        extra = [("X-Lab-Sha256", bytes_sha256(n))] if n <= (16 << 20) else []
        self.log_access(info, 200)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        view = memoryview(BLOCK)
        left = n
        while left > 0:
            k = min(left, len(BLOCK))
            self.wfile.write(view[:k])
            left -= k

    def send_chunked(self, data, n, ctype, bad=False):
        chunked = self.request_version == "HTTP/1.1"  # an HTTP/1.0 client gets the body until close
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        # Small bodies go in 16-byte chunks (many chunk boundaries to parse), large ones in 64 KiB chunks.
        # The sizes keep every chunk inside `data` (BLOCK is a multiple of 64 KiB), so no wrap-around.
        step = 16 if n < 4096 else 65536
        off = 0
        while off < n:
            start = off % len(data)
            chunk = data[start:start + min(step, n - off)]
            self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n" if chunked else chunk)
            off += len(chunk)
        if chunked:
            self.wfile.write(b"zz\r\n0\r\n\r\n" if bad else b"0\r\n\r\n")

    def serve_npm(self, info, path, npm):
        """Answers registry requests; returns False to fall through to the echo paths."""
        origin = "%s://%s" % (self.scheme(), (self.headers.get("Host") or self.server.lab_npm_host).strip())
        if path.startswith("/-/"):  # npm's service endpoints (audit, ping, ...): answer politely
            self.log_access(info, 200, "npm-service")
            self.send_json(200, {})
            return True
        if self.command == "POST":
            return False
        name = urllib.parse.unquote(path[1:])
        if "/-/" in name:  # tarball
            pkg_name, _, fname = name.partition("/-/")
            pkg = npm.get(pkg_name)
            if pkg is None or fname != pkg.filename:
                self.log_access(info, 404, "npm-tarball")
                self.send_json(404, {"error": "Not found"})
                return True
            self.log_access(info, 200, "npm-tarball")
            self.send_body(200, pkg.tgz, ctype="application/octet-stream")
            return True
        segs = name.split("/")
        is_pkg_path = (len(segs) == 1 and segs[0] and segs[0] not in ECHO_WORDS) or \
                      (len(segs) == 2 and segs[0].startswith("@") and segs[1])
        if not is_pkg_path:
            return False
        pkg = npm.get(name)
        if pkg is None:
            self.log_access(info, 404, "npm-packument")
            self.send_json(404, {"error": "Not found"})
            return True
        self.log_access(info, 200, "npm-packument")
        self.send_json(200, pkg.packument(origin))
        return True


    def serve_pypi(self, info, path, pypi):
        """The simple index (HTML, PEP 503) and the wheels."""
        if path.startswith("/packages/"):
            fname = path[len("/packages/"):]
            pkg = next((p for p in pypi.values() if p.filename == fname), None)
            if pkg is None:
                self.log_access(info, 404, "pypi-wheel")
                self.send_json(404, {"error": "Not found"})
                return
            self.log_access(info, 200, "pypi-wheel")
            self.send_body(200, pkg.whl, ctype="application/octet-stream")
            return
        name = path[len("/simple/"):].strip("/")
        if not name:
            links = "".join('<a href="/simple/%s/">%s</a>\n' % (p.norm, p.name) for p in pypi.values())
        else:
            pkg = pypi.get(pypi_normalize(name))
            if pkg is None:
                self.log_access(info, 404, "pypi-index")
                self.send_json(404, {"error": "Not found"})
                return
            links = '<a href="/packages/%s#sha256=%s">%s</a>\n' % (pkg.filename, pkg.sha256, pkg.filename)
        self.log_access(info, 200, "pypi-index")
        page = "<!DOCTYPE html>\n<html><body>\n%s</body></html>\n" % links
        self.send_body(200, page.encode(), ctype="text/html")


class LabHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, family, addr, name, tls_ctx, npm_host, npm, pypi=None):
        self.address_family = family
        self.lab_pypi = pypi or {}
        self.lab_name = name
        self.lab_tls = tls_ctx is not None
        self.lab_ctx = tls_ctx
        self.lab_npm_host = npm_host
        self.lab_npm = npm
        super().__init__(addr, EchoHandler)

    def server_bind(self):
        prepare_socket(self.socket, self.address_family)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "fakenet", self.server_address[1]

    def finish_request(self, request, client_address):
        if self.lab_ctx is None:
            return super().finish_request(request, client_address)
        # The TLS handshake runs here, in the connection's own thread, so a slow client never stalls accept().
        request.settimeout(30)
        try:
            tls = self.lab_ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            errlog("%s %s: TLS handshake failed: %s" % (self.lab_name, client_address[0], e))
            return
        try:
            tls.settimeout(None)
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            return  # a client going away is normal
        errlog("%s: error serving %s: %r" % (self.lab_name, client_address[0], exc))


def prepare_socket(sock, family):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)


# ------------------------------------------------------------------------------------------------ raw echo

class TCPEchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(300)
        try:
            while True:
                data = self.request.recv(65536)
                if not data:
                    break
                self.request.sendall(data)
        except OSError:
            pass


class LabTCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, family, addr):
        self.address_family = family
        super().__init__(addr, TCPEchoHandler)

    def server_bind(self):
        prepare_socket(self.socket, self.address_family)
        socketserver.TCPServer.server_bind(self)


# Linux socket options the socket module does not name.
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)


def udp_echo_socket(family, port):
    """A UDP socket that learns each datagram's destination address, so the echo is sent back *from* that
    address (the inet ns has many addresses; a reply from another one would be dropped by a connected client)."""
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
        sock.bind(("::", port))
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        sock.bind(("0.0.0.0", port))
    return sock


def udp_echo(sock):
    v6 = sock.family == socket.AF_INET6
    while True:
        try:
            data, anc, _flags, peer = sock.recvmsg(65535, 256)
            reply_anc = []
            for level, ctype, cdata in anc:
                if v6 and level == socket.IPPROTO_IPV6 and ctype == IPV6_PKTINFO and len(cdata) >= 20:
                    reply_anc = [(level, IPV6_PKTINFO, cdata[:16] + struct.pack("I", 0))]
                elif not v6 and level == socket.IPPROTO_IP and ctype == IP_PKTINFO and len(cdata) >= 12:
                    # struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }: reply from addr
                    reply_anc = [(level, IP_PKTINFO, struct.pack("i4s4s", 0, cdata[8:12], bytes(4)))]
            sock.sendmsg([data], reply_anc, 0, peer)
        except OSError as e:
            errlog("udp echo: %s" % e)


# ------------------------------------------------------------------------------------------------ main

def main():
    global access_log
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="fakenet", help="server name reported in every echo")
    ap.add_argument("--http", type=int, action="append", default=[], metavar="PORT")
    ap.add_argument("--https", type=int, action="append", default=[], metavar="PORT")
    ap.add_argument("--tcp-echo", type=int, action="append", default=[], metavar="PORT")
    ap.add_argument("--udp-echo", type=int, action="append", default=[], metavar="PORT")
    ap.add_argument("--cert", help="PEM certificate chain for --https")
    ap.add_argument("--key", help="PEM private key for --https")
    ap.add_argument("--npm-host", help="Host header value that selects the npm registry")
    ap.add_argument("--npm-package", action="append", default=[], metavar="NAME")
    ap.add_argument("--npm-dump", metavar="DIR", help="also write each tarball as DIR/<file>.tgz")
    ap.add_argument("--pypi-package", action="append", default=[], metavar="NAME",
                    help="a project of the PyPI simple index on the --npm-host host")
    ap.add_argument("--access-log", metavar="FILE")
    ap.add_argument("--ready", metavar="FILE", help="created once every port is listening")
    ap.add_argument("--ipv4-only", action="store_true", help="bind 0.0.0.0 instead of dual-stack ::")
    args = ap.parse_args()

    family, wildcard = (socket.AF_INET, "0.0.0.0") if args.ipv4_only else (socket.AF_INET6, "::")
    if args.access_log:
        access_log = open(args.access_log, "a", buffering=1)

    tls_ctx = None
    if args.https:
        if not args.cert or not args.key:
            ap.error("--https needs --cert and --key")
        tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_ctx.load_cert_chain(args.cert, args.key)
        tls_ctx.set_alpn_protocols(["http/1.1"])

        def remember_sni(sslsock, server_name, ctx):
            sslsock.lab_sni = server_name

        tls_ctx.sni_callback = remember_sni

    npm = {}
    for name in args.npm_package:
        npm[name] = NpmPackage(name)
        if args.npm_dump:
            with open(os.path.join(args.npm_dump, npm[name].filename), "wb") as f:
                f.write(npm[name].tgz)

    pypi = {}
    for name in args.pypi_package:
        pkg = PypiPackage(name)
        pypi[pkg.norm] = pkg

    servers = []
    for port in args.http:
        servers.append(LabHTTPServer(family, (wildcard, port), args.name, None, args.npm_host, npm, pypi))
    for port in args.https:
        servers.append(LabHTTPServer(family, (wildcard, port), args.name, tls_ctx, args.npm_host, npm, pypi))
    for port in args.tcp_echo:
        servers.append(LabTCPServer(family, (wildcard, port)))
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for port in args.udp_echo:
        for fam in (socket.AF_INET,) if args.ipv4_only else (socket.AF_INET, socket.AF_INET6):
            threads.append(threading.Thread(target=udp_echo, args=(udp_echo_socket(fam, port),), daemon=True))
    for t in threads:
        t.start()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    if args.ready:
        tmp = args.ready + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(tmp, args.ready)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
