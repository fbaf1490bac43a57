"""A fake login service: answers `401` to a request with `x-login: fail`,
`200` otherwise, resets the connection (no response) for `x-login:
reset`, and holds the request until its client goes for `x-login: hold`. It counts, per `x-user`, the failed logins it answered (a request
whose body never came whole is no login): what a limit counted by outcome
must bound, observed where it matters."""

import http.server
import io
import select
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
                if outcome == "hold":
                    # Held until the peer (Envoy) goes away: no response.
                    while select.select([self.connection], [], [], 10)[0] and self.connection.recv(1, socket.MSG_PEEK):
                        pass
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


class GrpcLoginUpstream:
    """A gRPC login service on loopback (`/test.Echo/Say`, raw bytes):
    `x-login: fail` in the metadata answers `UNAUTHENTICATED` (16) at once
    (trailers only); `x-login: fail-late` answers with a message then a
    status of 16 in the trailers; others answer OK. `failures[user]` counts
    the failed logins it answered, by `x-user`."""

    name = "grpc_login"

    def __init__(self):
        import grpc
        from concurrent import futures

        outer = self
        self.failures: dict[str, int] = {}
        self._lock = threading.Lock()

        def say(_request: bytes, context) -> bytes:
            metadata = dict(context.invocation_metadata())
            outcome = metadata.get("x-login", "ok")
            if outcome.startswith("fail"):
                with outer._lock:
                    user = metadata.get("x-user", "")
                    outer.failures[user] = outer.failures.get(user, 0) + 1
                if outcome == "fail":
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong password")
                context.set_code(grpc.StatusCode.UNAUTHENTICATED)
                context.set_details("wrong password")
            return b""

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                if details.method != "/test.Echo/Say":
                    return None
                return grpc.unary_unary_rpc_method_handler(say)

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[Handler()])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def stop(self):
        self._server.stop(grace=None)
