"""The servers a run starts: one Envoy per row, the limiters, Redis, Limitador.

`setups` says what each row is; this module starts what it needs and says
which processes serve which store, so that their CPU time is charged to the
rows that use them.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

# tests/support: Envoy, process and HTTP helpers shared with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import support  # noqa: E402
from setups import LIMITADOR_LIMITS, LIMITER_CLUSTER, RLS_DESCRIPTORS, RLQS_TTL_MS, Row  # noqa: E402

# The stores a row may name: the limiter's, and Limitador's (never built here).
LIMITADOR_STORES = ("limitador", "limitador-redis")


@dataclass
class BenchEnvoy:
    """An Envoy started for one row at one concurrency."""

    row: Row
    envoy: support.Envoy

    @property
    def port(self) -> int:
        return self.envoy.port

    @property
    def pid(self) -> int:
        return self.envoy.process.proc.pid

    def stop(self):
        self.envoy.stop()


def start_envoy(row: Row, concurrency: int, workdir: Path, envoy_bin: Path,
                limiter_ports: dict[str, int], cpus: str | None = None) -> BenchEnvoy:
    """Starts Envoy for `row` on fresh loopback ports (static listener, logs at
    warning level so that logging costs nothing per request), on the CPUs
    `cpus` (a taskset list) if given."""
    clusters = []
    if row.store:
        clusters.append(support.limiter_cluster(LIMITER_CLUSTER, [limiter_ports[port_key(row)]]))
    clusters += row.clusters
    envoy = support.start_envoy(workdir, row.filters, concurrency=concurrency, clusters=clusters, lds=False,
                                hcm_extra=row.hcm_extra, envoy_bin=envoy_bin, cpus=cpus, log_level="warn",
                                component_log_level=None, drain_time_s=None,
                                name=f"envoy-{row.id}-c{concurrency}")
    return BenchEnvoy(row, envoy)


def port_key(row: Row) -> str:
    """The key of `start_limiters`'s ports the row calls: its store, with
    "-rls" for the gRPC port, "-rlqs" for the RLQS one."""
    return f"{row.store}-rls" if row.rls else f"{row.store}-rlqs" if row.rlqs else str(row.store)


def serves(item, store: str | None) -> bool:
    """Whether `item`, something `start_limiters` started, serves `store`
    ("memory": the memory limiter; "redis": the Redis limiter and Redis;
    "limitador": Limitador with memory storage; "limitador-redis":
    Limitador with Redis storage and Redis)."""
    if store is None:
        return False
    if store in LIMITADOR_STORES:
        if isinstance(item, Limitador):
            return item.store == store
        return store == "limitador-redis" and isinstance(item, support.Redis)
    if isinstance(item, Limitador):
        return False
    if isinstance(item, support.Limiter):
        return (item.store == "memory") == (store == "memory")
    return store != "memory"


def store_pids(started: list, store: str | None) -> list[int]:
    """Process ids of what serves `store` among what `start_limiters` started."""
    return [item.process.proc.pid for item in started if serves(item, store) and item.process is not None]


class Limitador:
    """A running Limitador (`limitador-server LIMITS_FILE STORAGE...`), serving
    RLS on `rls_port` and its HTTP API on `http_port`; never built by the
    project (LIMITADOR names it). `redis_url`: Redis storage (`redis URL`,
    no cache: a Redis call per check, as the limiter's Redis store), else
    memory storage."""

    def __init__(self, workdir: Path, binary: Path, redis_url: str | None = None):
        self.store = "limitador-redis" if redis_url else "limitador"
        limits = workdir / "limitador-limits.yaml"
        limits.write_text(LIMITADOR_LIMITS)
        self.rls_port, self.http_port = support.free_port(), support.free_port()
        storage = ["redis", redis_url] if redis_url else ["memory"]
        self.process = support.Process(
            [str(binary), "--rls-ip", "127.0.0.1", "--rls-port", str(self.rls_port),
             "--http-ip", "127.0.0.1", "--http-port", str(self.http_port), str(limits), *storage],
            workdir / f"{self.store}.log")

        def up():
            if not self.process.alive():
                raise RuntimeError(f"limitador exited:\n{self.process.log()[-3000:]}")
            for port in (self.rls_port, self.http_port):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    return False
            return True
        try:
            support.wait_until(up, what=self.store)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        self.process.stop()


def limiter_args(workdir: Path) -> list[str]:
    """The limiter's arguments to serve RLS and RLQS: a gRPC port of its own
    for each, the descriptor file (written into `workdir`), the RLQS
    assignments' time to live."""
    path = workdir / "rls-descriptors.yaml"
    path.write_text(RLS_DESCRIPTORS)
    return ["--grpc-listen", f"127.0.0.1:{support.free_port()}", "--descriptors", str(path),
            "--rlqs-listen", f"127.0.0.1:{support.free_port()}", "--rlqs-assignment-ttl-ms", str(RLQS_TTL_MS)]


def grpc_port(args: list[str], flag: str = "--grpc-listen") -> int:
    """The gRPC port in `limiter_args`'s arguments: RLS's, or `flag`'s."""
    return int(args[args.index(flag) + 1].rsplit(":", 1)[1])


def start_limiters(workdir: Path, limiter_bin: Path, stores: set[str], rls: bool = False,
                   limitador: Path | None = None) -> tuple[dict, list]:
    """Starts the limiter (and Redis) for each store named, also serving RLS
    and RLQS if `rls`, and Limitador for each Limitador store named; returns
    ({store: port, store-rls: RLS port, store-rlqs: RLQS port}, [things to
    stop, in stop order]); a Limitador store's port is its HTTP API's.
    The limiters' own arguments are kept in their `base_args`."""
    os.environ.setdefault("SLUICE_LOG", "warn")
    ports: dict[str, int] = {}
    started: list = []

    def limiter(store: str, key: str) -> support.Limiter:
        args = limiter_args(workdir) if rls else []
        lim = support.Limiter(workdir, store=store, binary=limiter_bin, extra_args=list(args))
        lim.base_args = args
        ports[key] = lim.port
        if rls:
            ports[f"{key}-rls"] = grpc_port(args)
            ports[f"{key}-rlqs"] = grpc_port(args, "--rlqs-listen")
        return lim

    def limitador_for(redis_url: str | None):
        if limitador is None:
            raise RuntimeError("a Limitador row needs a Limitador binary (LIMITADOR)")
        lim = Limitador(workdir, limitador, redis_url)
        started.insert(0, lim)  # stopped before the Redis it uses
        ports[lim.store], ports[f"{lim.store}-rls"] = lim.http_port, lim.rls_port

    try:
        if "memory" in stores:
            started.append(limiter("memory", "memory"))
        redis = None
        if "redis" in stores or "limitador-redis" in stores:
            redis = support.Redis(workdir)
            started.append(redis)
        if "redis" in stores:
            started.insert(0, limiter(redis.url, "redis"))
        if "limitador" in stores:
            limitador_for(None)
        if "limitador-redis" in stores:
            limitador_for(redis.url)
    except BaseException:
        for item in started:
            item.stop()
        raise
    return ports, started
