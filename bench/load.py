"""The load generator: one wrk run and what it printed.

wrk drives the benchmark's load; the end-to-end tests count answers with
their own helpers instead (`tests/support/client.py`).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from support import pinned

LUA = Path(__file__).resolve().parent / "lua"

# wrk's settings for every run: one thread, 16 keep-alive connections.
THREADS = 1
CONNECTIONS = 16

_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


@dataclass
class Sample:
    """One wrk run: throughput, latency percentiles (microseconds) and answers."""

    rps: float
    p50_us: float
    p99_us: float
    requests: int
    non_2xx: int
    socket_errors: int
    # CPU time (user + system, all threads) per request, microseconds: of
    # Envoy, and of the limiter and Redis for the rows that call them.
    envoy_cpu_us: float = 0.0
    limiter_cpu_us: float = 0.0
    # The run of a second load sent at the same time (`Beside`), if any.
    beside: Sample | None = None
    # Sluice's counters of the row's rule over the run ("allowed", "delayed",
    # "denied"), for the rows that read them.
    counters: dict = field(default_factory=dict)
    # The limiter's counters over the run ("calls" to /v1/check, "batches"
    # among them, "batched" requests those carried), for the rows that call it.
    limiter: dict = field(default_factory=dict)
    # The round of the run (0: not part of a round).
    round: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Beside:
    """A second wrk run against the same URL at the same time as the measured
    one, for as long: `connections` connections sending `script` with
    `args` (e.g. a flood of one key beside requests on other keys)."""

    connections: int
    script: str
    args: list[str] = field(default_factory=list)


def _latency_us(text: str, percentile: str) -> float:
    m = re.search(rf"^\s*{re.escape(percentile)}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not m:
        raise ValueError(f"wrk output has no {percentile}% latency line:\n{text}")
    return float(m.group(1)) * _UNITS_US[m.group(2)]


def parse(text: str) -> Sample:
    """Parses `wrk --latency` output."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    total = re.search(r"^\s*(\d+) requests in ", text, re.M)
    if not rps or not total:
        raise ValueError(f"unexpected wrk output:\n{text}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return Sample(
        rps=float(rps.group(1)),
        p50_us=_latency_us(text, "50"),
        p99_us=_latency_us(text, "99"),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in errors.groups()) if errors else 0,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def command(wrk: str, url: str, duration: float, script: str, args: list[str] | None = None,
            connections: int = CONNECTIONS) -> list[str]:
    """The wrk command line of one run."""
    cmd = [wrk, f"-t{THREADS}", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency",
           "-s", str(LUA / script), url]
    return cmd + ["--", *args] if args else cmd


def run(wrk: str, url: str, duration: float, script: str, args: list[str] | None = None,
        env: dict | None = None, cpus: str | None = None, envoy_pid: int | None = None,
        limiter_pids: list[int] | None = None, connections: int = CONNECTIONS,
        beside: Beside | None = None) -> Sample:
    """Runs wrk for `duration` seconds against `url` with a Lua script of lua/,
    on `cpus` if given, and charges the CPU time Envoy (`envoy_pid`) and the
    limiter (`limiter_pids`) spent meanwhile to the requests wrk made.

    With `beside`, a second wrk runs at the same time against the same URL;
    its figures are the sample's `beside`, and the CPU time is charged to the
    requests of both."""
    cmds = [command(wrk, url, duration, script, args, connections)]
    if beside:
        cmds.append(command(wrk, url, duration, beside.script, beside.args, beside.connections))
    watched = ([envoy_pid] if envoy_pid else []) + list(limiter_pids or [])
    before = [cpu_seconds(p) for p in watched]
    procs = [subprocess.Popen(pinned(cmd, cpus), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})}) for cmd in cmds]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=duration + 60))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    spent = [cpu_seconds(p) - b for p, b in zip(watched, before)]
    for proc, (out, err) in zip(procs, outputs):
        if proc.returncode != 0:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {err}{out}")
    sample = parse(outputs[0][0])
    if beside:
        sample.beside = parse(outputs[1][0])
    served = sample.requests + (sample.beside.requests if sample.beside else 0)
    per_request = 1e6 / max(1, served)
    if envoy_pid:
        sample.envoy_cpu_us = spent.pop(0) * per_request
    sample.limiter_cpu_us = sum(spent) * per_request
    return sample


def run_grpc(url: str, duration: float, message_hex: str, cpus: str | None = None,
             limiter_pids: list[int] | None = None, connections: int = CONNECTIONS) -> Sample:
    """Unary gRPC calls of `message_hex` to `url`'s path for `duration` seconds
    with `sluice-load` (wrk speaks no HTTP/2), `connections` connections with
    one call in flight each, as wrk's; the CPU time of `limiter_pids` charged
    to the calls."""
    from support.load import LoadReport, load_args

    cmd = load_args(url, connections=connections, duration=duration, grpc=message_hex, timeout=5.0)
    before = [cpu_seconds(p) for p in limiter_pids or []]
    proc = subprocess.run(pinned(cmd, cpus), capture_output=True, text=True, timeout=duration + 60)
    spent = [cpu_seconds(p) - b for p, b in zip(limiter_pids or [], before)]
    if proc.returncode != 0:
        raise RuntimeError(f"sluice-load failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
    report = LoadReport.parse(proc.stdout)
    ok = report.count(200)
    sample = Sample(rps=ok / max(report.elapsed_s, 1e-9), p50_us=float(report.latency_us["p50"]),
                    p99_us=float(report.latency_us["p99"]), requests=report.answered,
                    non_2xx=report.answered - ok,
                    socket_errors=report.connect_errors + report.io_errors + report.timeouts)
    sample.limiter_cpu_us = sum(spent) * 1e6 / max(1, report.answered)
    return sample


def version(wrk: str) -> str:
    """wrk's version line."""
    proc = subprocess.run([wrk, "--version"], capture_output=True, text=True)
    return (proc.stdout + proc.stderr).splitlines()[0].split(" Copyright")[0].strip()
