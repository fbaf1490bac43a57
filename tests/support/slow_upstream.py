"""An upstream that holds each request a while and records, per key, how
many requests it held at once: what a concurrency limit in front of it
must bound, observed where it matters.

Each request is held `x-hold-ms` milliseconds (default `hold_ms`) and keyed
by its `x-user` header. A hold ends early when the client (Envoy) goes away.
"""

import http.server
import select
import threading
import time


class SlowUpstream:
    """An HTTP/1.1 server on loopback; `peak[key]` is the most requests of
    `key` it held at once, `inside[key]` how many it holds now."""

    def __init__(self, hold_ms: int = 50):
        outer = self
        self.hold_ms = hold_ms
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.served = 0
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                key = self.headers.get("x-user", "")
                hold = int(self.headers.get("x-hold-ms", outer.hold_ms)) / 1000
                outer._enter(key)
                try:
                    # Held until the time passes or the peer closes (readable at EOF).
                    deadline = time.monotonic() + hold
                    while (left := deadline - time.monotonic()) > 0:
                        readable, _, _ = select.select([self.connection], [], [], left)
                        if readable and not self.connection.recv(1, 2):  # MSG_PEEK
                            return
                finally:
                    outer._leave(key)
                body = b"ok\n"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.request_queue_size = 256
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _enter(self, key: str):
        with self._lock:
            n = self.inside.get(key, 0) + 1
            self.inside[key] = n
            self.peak[key] = max(self.peak.get(key, 0), n)

    def _leave(self, key: str):
        with self._lock:
            self.inside[key] -= 1
            self.served += 1

    def cluster(self, name: str = "slow") -> dict:
        """The Envoy cluster of this upstream."""
        return {"name": name, "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1",
                                                                 "port_value": self.port}}}}]}]}}

    @staticmethod
    def route_config(cluster: str = "slow", timeout: str = "15s") -> dict:
        """Routes every request to `cluster`, giving up after `timeout` (for `start_envoy(hcm_extra=...)`)."""
        return {"route_config": {"name": "slow", "virtual_hosts": [{
            "name": "all", "domains": ["*"],
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": timeout}}]}]}}

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
