"""Child processes on loopback: ports, readiness, Redis and sluice-limiter.

Every process listens on loopback ports chosen at run time, is waited on
until it is ready (never a fixed sleep), and is stopped by whoever started it.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .client import Response, request
from .paths import LIMITER_BIN, REDIS_BIN, REDIS_CLI

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


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """`cmd` run on the CPUs `cpus` (a taskset list such as "1"), or as is."""
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


class Process:
    """A child process with its log in a file, on the CPUs `cpus` if given; stopped on `stop()`."""

    def __init__(self, args: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None,
                 cpus: str | None = None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(pinned(args, cpus), stdout=self._log, stderr=subprocess.STDOUT, env=env,
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
    subprocess.run([REDIS_CLI, "--cluster", "create", *[f"127.0.0.1:{r.port}" for r in servers],
                    "--cluster-replicas", "0", "--cluster-yes"],
                   check=True, capture_output=True, timeout=60)
    for r in servers:
        wait_until(lambda r=r: b"cluster_state:ok" in redis_command(r.port, "CLUSTER", "INFO"),
                   what="redis cluster state ok")
    return servers


# ---------------------------------------------------------------- sluice-limiter


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
        """Sum of a Prometheus metric's samples whose name (before labels) is
        `name`; with labels (`name{a="b"}`), that one sample."""
        text = request(self.port, "/metrics").body.decode()
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
                       headers={"content-type": content_type})

    def stop(self):
        if self.process:
            self.process.stop()
