"""Real processes for end-to-end tests: Envoy with the Sluice filter, the limiter, Redis.

Every process listens on loopback ports chosen at run time, is waited on until it
is ready (never a fixed sleep), and is stopped by the fixture that started it.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
ENVOY_BIN = Path(os.environ.get("SLUICE_ENVOY", ROOT / ".venv" / "bin" / "envoy"))
SLUICE_WASM = Path(os.environ.get("SLUICE_WASM", BUILD / "sluice.wasm"))
LIMITER_BIN = Path(os.environ.get("SLUICE_LIMITER", ROOT / "target" / "release" / "sluice-limiter"))
REDIS_BIN = shutil.which("redis-server") or "/usr/bin/redis-server"

READY_TIMEOUT = 30.0


def free_port(below: int = 65536) -> int:
    """A loopback port that is free right now (and lower than `below`)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port


def wait_until(predicate, timeout: float = READY_TIMEOUT, what: str = "condition", interval: float = 0.02):
    """Polls `predicate` until it returns a truthy value; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, http.client.HTTPException, ValueError) as e:
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what} (last error: {last_error})")


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    def header(self, name: str):
        return self.headers.get(name.lower())


def request(port: int, path: str = "/", method: str = "GET", headers: dict | None = None,
            body: bytes | None = None, host: str = "127.0.0.1", timeout: float = 10.0) -> Response:
    """One HTTP/1.1 request on a new connection."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def concurrent_requests(port: int, connections: int, total: int, path: str = "/",
                        headers: dict | None = None) -> dict:
    """Sends `total` requests over `connections` keep-alive connections at once.

    Returns a map status -> count. Every request gets an answer or the call fails.
    """
    counts: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(connections)
    per_conn = [total // connections + (1 if i < total % connections else 0) for i in range(connections)]
    errors: list[BaseException] = []

    def worker(n: int):
        local: dict[int, int] = {}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.connect()
            barrier.wait(timeout=30)
            for _ in range(n):
                conn.request("GET", path, headers=headers or {})
                resp = conn.getresponse()
                resp.read()
                local[resp.status] = local.get(resp.status, 0) + 1
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)
        finally:
            conn.close()
            with lock:
                for k, v in local.items():
                    counts[k] = counts.get(k, 0) + v

    threads = [threading.Thread(target=worker, args=(n,)) for n in per_conn]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return counts


class Process:
    """A child process with its log in a file; stopped on `stop()`."""

    def __init__(self, args: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)
        self._log.close()
        return self.proc.returncode


# ---------------------------------------------------------------- Envoy config


def wasm_filter(config: dict | str, wasm_path: Path = SLUICE_WASM, vm_id: str = "sluice",
                name: str = "sluice") -> dict:
    """The HTTP filter entry that loads a proxy-wasm module with a JSON configuration."""
    value = config if isinstance(config, str) else json.dumps(config)
    return {
        "name": name,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": name,
                "root_id": name,
                "vm_config": {
                    "vm_id": vm_id,
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": str(wasm_path)}},
                },
                "configuration": {
                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                    "value": value,
                },
            },
        },
    }


def listener(port: int, http_filters: list[dict], name: str = "main") -> dict:
    """A loopback listener whose routes answer 200 "ok" directly, after the filters."""
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{
            "filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "ingress",
                    "codec_type": "AUTO",
                    # the downstream address is the true peer; Sluice reads XFF itself
                    "use_remote_address": True,
                    "route_config": {
                        "name": "local",
                        "virtual_hosts": [{
                            "name": "all",
                            "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"},
                                        "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}],
                        }],
                    },
                    "http_filters": http_filters + [{
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    }],
                },
            }],
        }],
    }


def limiter_cluster(name: str, ports: list[int]) -> dict:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "0.25s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
                for p in ports
            ]}],
        },
    }


@dataclass
class Envoy:
    """A running Envoy whose listener comes from a file (LDS), so tests can push new filter configs."""

    workdir: Path
    port: int
    admin_port: int
    process: Process
    listener_version: int = 0

    @property
    def lds_path(self) -> Path:
        return self.workdir / "lds.json"

    def stats(self) -> dict:
        """Counters and gauges from the admin /stats endpoint."""
        resp = request(self.admin_port, "/stats")
        out = {}
        for line in resp.body.decode().splitlines():
            name, _, value = line.partition(": ")
            try:
                out[name] = int(value)
            except ValueError:
                continue
        return out

    def stat(self, name: str, default: int = 0) -> int:
        return self.stats().get(name, default)

    def sluice_stat(self, name: str) -> int:
        """A Sluice counter, whatever prefix Envoy gives custom wasm metrics."""
        stats = self.stats()
        for prefix in ("wasmcustom.", ""):
            if prefix + name in stats:
                return stats[prefix + name]
        return 0

    def write_listener(self, filter_config: dict | str, wasm_path: Path = SLUICE_WASM):
        filters = [wasm_filter(filter_config, wasm_path)]
        self.listener_version += 1
        resources = {
            "version_info": str(self.listener_version),
            "resources": [{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                           **listener(self.port, filters)}],
        }
        tmp = self.workdir / "lds.tmp.json"
        tmp.write_text(json.dumps(resources))
        os.replace(tmp, self.lds_path)

    def push_config(self, filter_config: dict | str, wasm_path: Path = SLUICE_WASM) -> bool:
        """Pushes a new filter configuration; True if Envoy took it, False if it refused it."""
        before_ok = self.stat("listener_manager.lds.update_success")
        before_rejected = self.stat("listener_manager.lds.update_rejected")
        self.write_listener(filter_config, wasm_path)

        def settled():
            s = self.stats()
            if s.get("listener_manager.lds.update_rejected", 0) > before_rejected:
                return "rejected"
            if s.get("listener_manager.lds.update_success", 0) > before_ok:
                return "accepted"
            return None

        result = wait_until(settled, what="listener update")
        if result == "accepted":
            self.wait_listener_ready()
        return result == "accepted"

    def wait_listener_ready(self):
        def ready():
            s = self.stats()
            if not (s.get("listener_manager.total_listeners_warming", 1) == 0
                    and s.get("listener_manager.total_listeners_active", 0) >= 1):
                return False
            # A TCP connect only: an HTTP request would count against the limits under test.
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        wait_until(ready, what="envoy listener")

    def log(self) -> str:
        return self.process.log()

    def stop(self):
        return self.process.stop()


def start_envoy(filter_config: dict | str, tmp_path: Path, concurrency: int = 2,
                clusters: list[dict] | None = None, wasm_path: Path = SLUICE_WASM,
                expect_ready: bool = True) -> Envoy:
    """Starts Envoy with the Sluice filter on a fresh loopback port."""
    workdir = Path(tempfile.mkdtemp(prefix="envoy-", dir=tmp_path))
    port, admin_port = free_port(), free_port()
    bootstrap = {
        "node": {"id": "sluice-test", "cluster": "sluice-test"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "dynamic_resources": {
            "lds_config": {
                "resource_api_version": "V3",
                "path_config_source": {"path": str(workdir / "lds.json"),
                                       "watched_directory": {"path": str(workdir)}},
            }
        },
        "static_resources": {"clusters": clusters or []},
    }
    (workdir / "bootstrap.json").write_text(json.dumps(bootstrap))
    env = Envoy(workdir, port, admin_port, None)  # type: ignore[arg-type]
    env.write_listener(filter_config, wasm_path)
    env.process = Process(
        [str(ENVOY_BIN), "-c", str(workdir / "bootstrap.json"), "--concurrency", str(concurrency),
         "--disable-hot-restart", "--drain-time-s", "1", "--log-level", "info", "--component-log-level", "wasm:debug"],
        workdir / "envoy.log",
    )

    def admin_up():
        if not env.process.alive():
            raise RuntimeError(f"envoy exited:\n{env.log()[-4000:]}")
        return request(admin_port, "/ready", timeout=2).status in (200, 503)

    wait_until(admin_up, what="envoy admin")
    if expect_ready:
        env.wait_listener_ready()
    return env


def sluice_config(rules: list[dict], **top) -> dict:
    """A filter configuration with sensible test defaults."""
    cfg = {"domain": "test", "headers": "both", "rules": rules}
    cfg.update(top)
    return cfg


# ---------------------------------------------------------------- limiter and Redis


def redis_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")


def redis_command(port: int, *args: str) -> bytes:
    """Sends one command in RESP and returns the raw reply (enough for tests)."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        return s.recv(65536)


class Redis:
    """A throwaway redis-server on a loopback port; no persistence."""

    def __init__(self, workdir: Path, port: int | None = None, cluster: bool = False):
        # a cluster node also listens on port + 10000 (the cluster bus)
        self.port = port or free_port(below=55000 if cluster else 65536)
        self.workdir = workdir
        self.cluster = cluster
        self.process: Process | None = None
        self.start()

    def start(self):
        args = [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf",
                     "--cluster-node-timeout", "2000"]
        self.process = Process(args, self.workdir / f"redis-{self.port}.log")
        wait_until(lambda: redis_ping(self.port), what=f"redis on {self.port}")

    def stop(self):
        if self.process:
            self.process.stop()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


def start_redis_cluster(workdir: Path, nodes: int = 3) -> list[Redis]:
    """A Redis Cluster of `nodes` masters on loopback, slots assigned, state ok."""
    servers = [Redis(workdir, cluster=True) for _ in range(nodes)]
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{r.port}" for r in servers],
                    "--cluster-replicas", "0", "--cluster-yes"],
                   check=True, capture_output=True, timeout=60)
    for r in servers:
        wait_until(lambda r=r: b"cluster_state:ok" in redis_command(r.port, "CLUSTER", "INFO"),
                   what="redis cluster state ok")
    return servers


class Limiter:
    """A running sluice-limiter."""

    def __init__(self, workdir: Path, store: str = "memory", port: int | None = None,
                 extra_args: list[str] | None = None, binary: Path = LIMITER_BIN):
        self.port = port or free_port()
        self.workdir = workdir
        self.binary = binary
        self.store = store
        self.extra_args = extra_args or []
        self.process: Process | None = None
        self.start()

    def start(self):
        self.process = Process(
            [str(self.binary), "--listen", f"127.0.0.1:{self.port}", "--store", self.store, *self.extra_args],
            self.workdir / f"limiter-{self.port}.log",
            env={**os.environ, "SLUICE_LOG": os.environ.get("SLUICE_LOG", "info")},
        )

        def up():
            if not self.process.alive():
                raise RuntimeError(f"limiter exited:\n{self.process.log()[-3000:]}")
            return request(self.port, "/healthz", timeout=2).status == 200

        wait_until(up, what="sluice-limiter")

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples whose name (before labels) is `name`."""
        text = request(self.port, "/metrics").body.decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            if sample.split("{", 1)[0] == name:
                total += float(value)
        return total

    def check(self, body: dict | bytes, content_type: str = "application/json") -> Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return request(self.port, "/v1/check", method="POST", body=data,
                       headers={"content-type": content_type})

    def stop(self):
        if self.process:
            self.process.stop()
