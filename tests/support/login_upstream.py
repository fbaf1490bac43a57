"""A fake login service: answers `401` to a request with `x-login: fail`,
`200` otherwise, and resets the connection (no response) for `x-login:
reset`. It counts, per `x-user`, the failed logins it answered (a request
whose body never came whole is no login): what a limit counted by outcome
must bound, observed where it matters."""

import http.server
import io
import socket
import threading

from .upstream import HttpUpstream


class LoginUpstream(HttpUpstream):
    """An HTTP/1.1 server on loopback; `failures[user]` and `successes[user]`
    count the logins it answered."""

    name = "login"

    def __init__(self):
        outer = self
        self.failures: dict[str, int] = {}
        self.successes: dict[str, int] = {}
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                user = self.headers.get("x-user", "")
                outcome = self.headers.get("x-login", "ok")
                length = int(self.headers.get("content-length", 0))
                if len(self.rfile.read(length)) < length:
                    # Envoy reset the stream before the whole body came (a
                    # request decided after its body and denied): no login.
                    self.close_connection = True
                    return
                if outcome == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.close_connection = True
                    self.connection.close()
                    self.wfile = io.BytesIO()  # nothing left to flush
                    return
                failed = outcome == "fail"
                outer._count(outer.failures if failed else outer.successes, user)
                body = b"wrong password\n" if failed else b"welcome\n"
                self.send_response(401 if failed else 200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args):
                pass

        self._serve(Handler)

    def _count(self, counts: dict[str, int], user: str):
        with self._lock:
            counts[user] = counts.get(user, 0) + 1
