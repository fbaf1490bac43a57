"""Child processes on loopback: ports, readiness, Redis and sluice-limiter.

Every process listens on loopback ports chosen at run time, is waited on
until it is ready (never a fixed sleep), and is stopped by whoever started it.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import weakref
from pathlib import Path

from .client import Response, request
from .paths import LIMITER_BIN, REDIS_BIN, REDIS_CLI, SENTINEL_BIN

READY_TIMEOUT = 30.0


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Port 0 draws from the ephemeral range, which every outgoing connection also
# draws from: a port free there may be taken as a source port before the child
# binds it. Listeners get ports below that range, 10,000 below it so that a
# Redis Cluster node's bus port (port + 10,000) stays out of it too. A cursor
# walks the range so no port is handed out twice until it wraps.
_LISTEN_LOW = 10000
_LISTEN_HIGH = max(_LISTEN_LOW + 1000, _ephemeral_low() - 10000)
_cursor = random.Random(os.getpid()).randrange(_LISTEN_LOW, _LISTEN_HIGH)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(also: int = 0) -> int:
    """A loopback port outside the ephemeral range that is free right now (and so is port + `also`, if given)."""
    global _cursor
    span = _LISTEN_HIGH - _LISTEN_LOW
    for _ in range(span):
        port = _cursor
        _cursor = _LISTEN_LOW + (_cursor - _LISTEN_LOW + 1) % span
        if _bindable(port) and (not also or _bindable(port + also)):
            return port
    raise RuntimeError(f"no free loopback port in {_LISTEN_LOW}..{_LISTEN_HIGH}")


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


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """`cmd` run on the CPUs `cpus` (a taskset list such as "1"), or as is."""
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


# Children still running when the tests end unexpectedly (an interrupted or
# terminated run skips the fixtures' finalizers): killed on the way out.
_LIVE: "weakref.WeakSet[Process]" = weakref.WeakSet()


def kill_all() -> None:
    """Kills every child process started here that is still running."""
    for process in list(_LIVE):
        process.send_signal(signal.SIGKILL)


atexit.register(kill_all)


class Process:
    """A child process with its log in a file, on the CPUs `cpus` if given; stopped on `stop()`."""

    def __init__(self, args: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None,
                 cpus: str | None = None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(pinned(args, cpus), stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=cwd, start_new_session=True)
        _LIVE.add(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send_signal(self, sig) -> None:
        """Sends `sig` to the process group (SIGSTOP, SIGCONT, SIGKILL ...) and returns at once."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> int | None:
        """`kill -9`: no chance to finish anything; waits for the exit."""
        return self.stop(signal.SIGKILL)

    def rss_kb(self) -> int | None:
        """Resident memory in kB (VmRSS), or None once the process is gone."""
        return rss_kb(self.proc.pid)

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


def rss_kb(pid: int) -> int | None:
    """Resident memory of `pid` in kB (VmRSS from /proc), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# ---------------------------------------------------------------- Redis


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


class Service:
    """A server started as `self.process`: stopped, or paused and resumed."""

    process: "Process | None" = None

    def stop(self):
        if self.process:
            self.process.stop()

    def pause(self):
        """SIGSTOP: the server holds its connections open and answers nothing until `resume`."""
        if self.process:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        """SIGCONT after `pause`."""
        if self.process:
            self.process.send_signal(signal.SIGCONT)


class Redis(Service):
    """A throwaway redis-server on a loopback port; no persistence.

    `args` adds server options (say `["--requirepass", "pw"]`); `tls`
    (`RedisTls`) serves TLS only, on `port`; `password` (and `user`) is what
    the helpers authenticate with."""

    def __init__(self, workdir: Path, port: int | None = None, cluster: bool = False,
                 args: list[str] | None = None, tls: "RedisTls | None" = None,
                 password: str | None = None, user: str | None = None):
        # a cluster node also listens on port + 10000 (the cluster bus)
        self.port = port or free_port(also=10000 if cluster else 0)
        self.workdir = workdir
        self.cluster = cluster
        self.args = args or []
        self.tls = tls
        self.password = password
        self.user = user
        self.process: Process | None = None
        self.start()

    def server_args(self) -> list[str]:
        args = [REDIS_BIN, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert),
                     "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.tls.ca),
                     "--tls-auth-clients", "yes" if self.tls.auth_clients else "no"]
            if self.cluster:
                args += ["--tls-cluster", "yes", "--tls-replication", "yes"]
        else:
            args += ["--port", str(self.port)]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf",
                     "--cluster-node-timeout", "2000"]
        return args + self.args

    def start(self):
        self.process = Process(self.server_args(), self.workdir / f"redis-{self.port}.log")

        def up():
            if not self.process.alive():
                raise RuntimeError(f"redis exited:\n{self.process.log()[-2000:]}")
            if self.tls or self.password:
                return self.cli("PING").strip() == "PONG"
            return redis_ping(self.port)

        wait_until(up, what=f"redis on {self.port}")

    def cli_args(self) -> list[str]:
        """redis-cli's connection options for this server."""
        args = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.tls:
            args += ["--tls", "--cacert", str(self.tls.ca)]
            if self.tls.auth_clients:
                args += ["--cert", str(self.tls.cert), "--key", str(self.tls.key)]
        if self.user:
            args += ["--user", self.user]
        if self.password:
            args += ["--pass", self.password, "--no-auth-warning"]
        return args

    def cli(self, *command: str) -> str:
        """One command through redis-cli; its output."""
        out = subprocess.run([*self.cli_args(), *command], capture_output=True, text=True, timeout=10)
        return out.stdout

    def used_memory(self) -> int | None:
        """INFO memory's `used_memory` in bytes, or None when the server does not answer."""
        try:
            # a short deadline: a paused server must not stall whoever samples it
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
                reply = s.recv(65536).decode(errors="replace")
        except OSError:
            return None
        for line in reply.split("\r\n"):
            if line.startswith("used_memory:"):
                return int(line.split(":", 1)[1])
        return None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}"


class RedisTls:
    """A Redis server's TLS set-up: its certificate and key, the CA it
    trusts for clients, and whether it asks clients for a certificate."""

    def __init__(self, cert: Path, key: Path, ca: Path, auth_clients: bool = False):
        self.cert = cert
        self.key = key
        self.ca = ca
        self.auth_clients = auth_clients


class Sentinel(Service):
    """A redis-sentinel on a loopback port watching `master` at `primary_port`."""

    def __init__(self, workdir: Path, primary_port: int, master: str = "sluice", quorum: int = 2,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 5000):
        self.port = free_port()
        self.workdir = workdir
        self.conf = workdir / f"sentinel-{self.port}.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {master} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {master} {down_after_ms}\n"
            f"sentinel failover-timeout {master} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {master} 1\n")
        self.process: Process | None = None
        self.start()

    def start(self):
        binary = SENTINEL_BIN
        args = [binary, str(self.conf)] if binary else [REDIS_BIN, str(self.conf), "--sentinel"]
        self.process = Process(args, self.workdir / f"sentinel-{self.port}.log")
        wait_until(lambda: redis_ping(self.port), what=f"sentinel on {self.port}")

    def primary(self, master: str = "sluice") -> int | None:
        """The primary's port this sentinel names now."""
        reply = redis_command(self.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master).decode(errors="replace")
        lines = reply.split("\r\n")
        try:
            return int(lines[4])
        except (IndexError, ValueError):
            return None


def start_redis_cluster(workdir: Path, nodes: int = 3, tls: RedisTls | None = None) -> list[Redis]:
    """A Redis Cluster of `nodes` masters on loopback, slots assigned, state ok
    (over TLS only, bus included, with `tls`)."""
    servers = [Redis(workdir, cluster=True, tls=tls) for _ in range(nodes)]
    cli = servers[0].cli_args()[:1] + servers[0].cli_args()[5:]  # redis-cli and its TLS/auth options
    subprocess.run([*cli, "--cluster", "create", *[f"127.0.0.1:{r.port}" for r in servers],
                    "--cluster-replicas", "0", "--cluster-yes"],
                   check=True, capture_output=True, timeout=60)
    for r in servers:
        wait_until(lambda r=r: "cluster_state:ok" in r.cli("CLUSTER", "INFO"), what="redis cluster state ok")
    return servers


# ---------------------------------------------------------------- sluice-limiter


class Limiter(Service):
    """A running sluice-limiter."""

    def __init__(self, workdir: Path, store: str = "memory", port: int | None = None,
                 extra_args: list[str] | None = None, binary: Path = LIMITER_BIN,
                 env: dict | None = None, ready_path: str = "/healthz", tls: ssl.SSLContext | None = None):
        self.port = port or free_port()
        # the client side of the HTTP listener's TLS (--tls-cert), when it has it
        self.tls = tls
        self.workdir = workdir
        self.binary = binary
        self.store = store
        self.extra_args = extra_args or []
        self.env = env or {}
        self.ready_path = ready_path
        self.process: Process | None = None
        self.start()

    def start(self):
        self.process = Process(
            [str(self.binary), "--listen", f"127.0.0.1:{self.port}", "--store", self.store, *self.extra_args],
            self.workdir / f"limiter-{self.port}.log",
            env={**os.environ, "SLUICE_LOG": os.environ.get("SLUICE_LOG", "info"), **self.env},
        )

        def up():
            if not self.process.alive():
                raise RuntimeError(f"limiter exited:\n{self.process.log()[-3000:]}")
            return request(self.port, self.ready_path, timeout=2, tls=self.tls).status == 200

        wait_until(up, what="sluice-limiter")

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples whose name (before labels) is
        `name`; with labels (`name{a="b"}`), that one sample."""
        text = request(self.port, "/metrics", tls=self.tls).body.decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            if sample == name or ("{" not in name and sample.split("{", 1)[0] == name):
                total += float(value)
        return total

    def check(self, body: dict | bytes, content_type: str = "application/json") -> Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return request(self.port, "/v1/check", method="POST", body=data,
                       headers={"content-type": content_type}, tls=self.tls)

    def kill(self):
        """`kill -9` the limiter (restart it on the same port with `start`)."""
        if self.process:
            self.process.kill()
