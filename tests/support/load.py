"""`sluice-load` from Python: load that accounts for every request.

`run_load` runs it to the end; `start_load` runs it in the background while a
test injects faults, and `.wait()` returns the same report. The report counts
requests by status, timeouts (no complete answer within `timeout`), errors,
latencies and a timeline (see crates/load).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from .paths import LOAD_BIN


@dataclass
class LoadReport:
    sent: int
    answered: int
    status: dict[int, int]
    timeouts: int
    connect_errors: int
    io_errors: int
    elapsed_s: float
    rate: float
    latency_us: dict[str, int]
    timeline: list[dict] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "LoadReport":
        raw = json.loads(text)
        timeline = [{**b, "status": {int(k): v for k, v in b["status"].items()}} for b in raw["timeline"]]
        return cls(sent=raw["sent"], answered=raw["answered"],
                   status={int(k): v for k, v in raw["status"].items()}, timeouts=raw["timeouts"],
                   connect_errors=raw["errors"]["connect"], io_errors=raw["errors"]["io"],
                   elapsed_s=raw["elapsed_s"], rate=raw["rate"], latency_us=raw["latency_us"], timeline=timeline)

    def count(self, status: int) -> int:
        return self.status.get(status, 0)

    @property
    def max_latency_s(self) -> float:
        return self.latency_us["max"] / 1e6


def load_args(urls: list[str] | str, *, connections: int = 8, duration: float | None = None,
              requests: int | None = None, rate: float | None = None, timeout: float = 5.0,
              headers: dict[str, str] | None = None, distinct: int | None = None, first: int = 0,
              interval: float = 1.0, threads: int = 1, body: str | None = None,
              grpc: str | None = None) -> list[str]:
    """The command line for one run (see `run_load`); `grpc`: gRPC unary
    calls of this message (protobuf, hex) to each URL's path, over HTTP/2."""
    args = [str(LOAD_BIN), "--connections", str(connections), "--timeout", str(timeout),
            "--first", str(first), "--interval", str(interval), "--threads", str(threads)]
    for url in [urls] if isinstance(urls, str) else urls:
        args += ["--url", url]
    if duration is not None:
        args += ["--duration", str(duration)]
    if requests is not None:
        args += ["--requests", str(requests)]
    if rate is not None:
        args += ["--rate", str(rate)]
    if distinct is not None:
        args += ["--distinct", str(distinct)]
    for name, value in (headers or {}).items():
        args += ["--header", f"{name}: {value}"]
    if body is not None:
        args += ["--body", body]
    if grpc is not None:
        args += ["--grpc", grpc]
    return args


class RunningLoad:
    """A load running in the background."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float | None = None) -> LoadReport:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise
        if self.proc.returncode != 0:
            raise RuntimeError(f"sluice-load failed ({self.proc.returncode}): {err}")
        return LoadReport.parse(out)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def start_load(urls: list[str] | str, **kwargs) -> RunningLoad:
    """Starts `sluice-load` in the background; `.wait()` returns its report."""
    return RunningLoad(load_args(urls, **kwargs))


def run_load(urls: list[str] | str, **kwargs) -> LoadReport:
    """Runs `sluice-load` to the end: `duration` seconds and/or `requests`
    requests over `connections` connections (spread over `urls`), at most
    `rate` per second. `headers` values may hold `{ip}` (a new client address
    per request, `distinct` of them before they repeat) and `{n}`."""
    return start_load(urls, **kwargs).wait()
