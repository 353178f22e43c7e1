"""A web server whose kept-alive connections die: each connection answers its first request (keep-alive,
Content-Length) and closes without answering the next one, as a server whose idle timeout races the
client's next request would. Used by tests/integration/proxy_http.sh. Usage: oneshot-server.py PORT"""
import socket
import sys
import threading


def serve(conn):
    data = b""
    answered = False
    with conn:
        while True:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            data = data.split(b"\r\n\r\n", 1)[1]
            if answered:
                return  # the race: close instead of answering the second request
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: keep-alive\r\n\r\noneshot\n")
            answered = True


srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1])))
srv.listen(64)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
