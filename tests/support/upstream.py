"""What the tests' HTTP upstreams share: a threaded HTTP/1.1 server on
loopback, its Envoy cluster, a route configuration sending every request to
it, and its stop."""

import http.server
import threading


class HttpUpstream:
    """Serves `handler` (a `BaseHTTPRequestHandler` class) on a free loopback
    port; `name` names its cluster and route configuration."""

    name = "upstream"

    def _serve(self, handler, backlog: int = 256):
        # The backlog is read when the socket listens: set it before.
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.request_queue_size = backlog
        self._server.server_bind()
        self._server.server_activate()
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def cluster(self, name: str | None = None) -> dict:
        """The Envoy cluster of this upstream."""
        name = name or self.name
        return {"name": name, "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1",
                                                                 "port_value": self.port}}}}]}]}}

    @classmethod
    def route_config(cls, cluster: str | None = None, timeout: str | None = None) -> dict:
        """Routes every request to `cluster` (this upstream's by default), giving
        up after `timeout` when given (for `start_envoy(hcm_extra=...)`)."""
        route = {"cluster": cluster or cls.name, **({"timeout": timeout} if timeout else {})}
        return {"route_config": {"name": cls.name, "virtual_hosts": [{
            "name": "all", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": route}]}]}}

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
