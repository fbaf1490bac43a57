#!/usr/bin/env python3
"""Sluice measured side by side with Envoy's own rate limiting, in one run.

Drives one Envoy per configuration with wrk in rounds, configurations
interleaved; each round starts its Envoys afresh (all of one concurrency at
once, on their own loopback ports) and stops them after. Reports medians.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
# tests/support: paths, processes and Envoy, shared with the end-to-end tests
sys.path.insert(0, str(BENCH.parent / "tests"))

import criterion  # noqa: E402
import load  # noqa: E402
import report  # noqa: E402
import servers  # noqa: E402
import setups  # noqa: E402
import startup  # noqa: E402
import support  # noqa: E402

ROOT = support.ROOT
# Sluice's workers flush their counters at least every 500 ms.
FLUSH_S = 0.6

# What each set runs unless told otherwise: the default set (`make bench`),
# the rows the targets need at one concurrency, and a short criterion run,
# in under 10 minutes on two cores; the full set (`make bench-full`), every
# row at both concurrencies, criterion at its longer measurement.
SETS = {
    "default": {"duration": 3, "rounds": 3, "concurrency": "1", "short_criterion": True},
    "full": {"duration": 4, "rounds": 5, "concurrency": "1,2", "short_criterion": False},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=sorted(SETS), default="default",
                   help="the rows tagged default in setups.py, at one concurrency, 3 rounds, a short "
                        "criterion run (`make bench`, the default); or every row (`make bench-full`)")
    p.add_argument("--duration", type=float, help="seconds per wrk run (default: 3, full 4)")
    p.add_argument("--rounds", type=int, help="rounds over all configurations (default: 3, full 5)")
    p.add_argument("--solo", type=float, default=1,
                   help="seconds of a one-connection run per row and round, for latency without "
                        "queueing (0: none)")
    p.add_argument("--warmup", type=float, default=1, help="seconds of load per configuration before the rounds")
    p.add_argument("--concurrency", help="Envoy --concurrency values, comma separated (default: 1, full 1,2)")
    p.add_argument("--starts", type=int, default=5,
                   help="Envoy starts per filter and concurrency for the plugin start times (0: none)")
    p.add_argument("--pushes", type=int, default=6,
                   help="configuration pushes per rule count and concurrency (0: none)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 s runs, 1 round, concurrency 1, short criterion, one start and two "
                        "pushes of each; output to a temp dir")
    p.add_argument("--only", default="",
                   help="comma-separated regular expressions: keep the rows of any set whose id matches one "
                        "(the reference rows envoy, noop-wasm and native are always kept)")
    p.add_argument("--list", action="store_true", help="list the rows and exit")
    p.add_argument("--out", type=Path, help="where RESULTS.md, results.json and the SVGs go (default bench/)")
    p.add_argument("--envoy", type=Path, default=support.ENVOY_BIN)
    p.add_argument("--wrk", default=os.environ.get("WRK", shutil.which("wrk") or "wrk"))
    p.add_argument("--limiter", type=Path, default=support.LIMITER_BIN)
    p.add_argument("--sluice-wasm", type=Path, default=support.SLUICE_WASM)
    p.add_argument("--noop-wasm", type=Path, default=support.NOOP_WASM)
    p.add_argument("--cargo", default=os.environ.get("CARGO", "cargo"))
    p.add_argument("--limitador", type=Path, default=os.environ.get("LIMITADOR") or None,
                   help="a Limitador binary (limitador-server) for the envoy-limitador row, never built here "
                        "(default $LIMITADOR; without it the row is skipped)")
    p.add_argument("--no-pin", action="store_true",
                   help="at --concurrency 1, do not give Envoy a CPU of its own (see README)")
    p.add_argument("--skip-criterion", action="store_true", help="do not run cargo bench -p sluice-core")
    p.add_argument("--skip-charts", action="store_true", help="do not draw the SVGs")
    a = p.parse_args(argv)
    chosen = SETS[a.set]
    a.short_criterion = a.quick or chosen["short_criterion"]
    if a.quick:
        a.duration, a.rounds, a.warmup, a.solo = 1, 1, 0.5, min(a.solo, 1)
        a.concurrency = a.concurrency or "1"
        a.starts, a.pushes = min(a.starts, 1), min(a.pushes, 2)
    a.duration = chosen["duration"] if a.duration is None else a.duration
    a.rounds = chosen["rounds"] if a.rounds is None else a.rounds
    a.concurrency = a.concurrency or chosen["concurrency"]
    a.concurrencies = [int(c) for c in a.concurrency.split(",") if c.strip()]
    if a.out is None:
        a.out = Path(tempfile.gettempdir()) / "sluice-bench-quick" if a.quick else BENCH
    return a


def select(rows, only: str, chosen: str = "full"):
    """The rows of the set `chosen`, or those of any set `only` names."""
    if not only:
        return [r for r in rows if r.default] if chosen == "default" else rows
    patterns = [re.compile(p) for p in only.split(",") if p]
    keep = {"envoy", "noop-wasm", "native"}
    return [r for r in rows if r.id in keep or any(p.search(r.id) for p in patterns)]


def machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu or platform.processor() or platform.machine()}, {platform.system()}"


def commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" (with uncommitted changes)" if dirty else "")


def envoy_version(envoy: Path) -> str:
    out = subprocess.run([str(envoy), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version:\s*\S+?/([\d.]+)/", out)
    return m.group(1) if m else out.strip()


def check_inputs(a, rows):
    missing = []
    need = {"envoy": a.envoy, "sluice wasm": a.sluice_wasm, "no-op wasm": a.noop_wasm}
    if any(r.store in ("memory", "redis") for r in rows):
        need["limiter"] = a.limiter
    if any(r.store in servers.LIMITADOR_STORES for r in rows):
        need["Limitador (LIMITADOR)"] = a.limitador
    for what, path in need.items():
        if not Path(path).exists():
            missing.append(f"{what}: {path}")
    if not shutil.which(a.wrk):
        missing.append(f"wrk: {a.wrk}")
    if missing:
        sys.exit("missing (run `make wasm limiter` and install wrk):\n  " + "\n  ".join(missing))


def placement(a, concurrency: int) -> tuple[str | None, str | None]:
    """(Envoy's CPUs, everyone else's) for one concurrency, as taskset lists.

    With one worker, Envoy gets CPU 0 to itself and wrk, the limiter and
    Redis share the others: the request path measured is Envoy's alone, not
    whatever the scheduler made of four busy processes on two cores. With
    more workers than that leaves, nothing is pinned."""
    cores = os.cpu_count() or 1
    if a.no_pin or cores < 2 or concurrency >= cores or not shutil.which("taskset"):
        return None, None
    return ",".join(str(c) for c in range(concurrency)), ",".join(str(c) for c in range(concurrency, cores))


def place_limiters(limiter_procs: list, cpus: str | None):
    """Restarts the limiters with one thread per CPU of `cpus` (their default
    when None), then moves them and Redis, every thread, onto `cpus` (all
    CPUs when None)."""
    threads = len(cpus.split(",")) if cpus else 0
    for item in limiter_procs:
        if isinstance(item, support.Limiter):
            item.stop()
            item.extra_args = [*getattr(item, "base_args", []), "--threads", str(threads)]
            item.start()
    if not shutil.which("taskset"):
        return
    cpus = cpus or f"0-{(os.cpu_count() or 1) - 1}"
    stores = ("memory", "redis", *servers.LIMITADOR_STORES)
    for pid in {p for store in stores for p in servers.store_pids(limiter_procs, store)}:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], capture_output=True)


def in_round(rows: list, rnd: int) -> list:
    """`rows` in their order in even rounds and reversed in odd ones (A B C,
    C B A, A B C …): a row's place in a round, and a machine growing busier
    or quieter across it, then favours no row over the rounds."""
    return rows if rnd % 2 == 0 else rows[::-1]


# The limiter's counters read around each run of a row that calls it.
LIMITER_COUNTERS = {"calls": "sluice_limiter_checks_total", "batches": "sluice_limiter_batches_total",
                    "batched": "sluice_limiter_batched_requests_total",
                    "leased": "sluice_limiter_leased_units_total",
                    "returned": "sluice_limiter_returned_units_total",
                    "rls_calls": "sluice_limiter_rls_calls_total"}


def limiter_counts(limiter_procs, store: str) -> dict[str, float]:
    """The counters of LIMITER_COUNTERS of the limiter serving `store`."""
    for item in limiter_procs:
        if isinstance(item, support.Limiter) and servers.serves(item, store):
            return {k: item.metric(name) for k, name in LIMITER_COUNTERS.items()}
    return {}


def grown(before: dict, after: dict) -> dict:
    """What counters grew by between two readings."""
    return {k: after[k] - before.get(k, 0) for k in after}


def describe(row, s) -> str:
    """A run's line in the log: throughput, latency, Envoy's CPU, and what
    the row's counters and limiter say."""
    line = (f"{s.rps:>10,.0f} req/s p50 {s.p50_us:>6.0f} µs p99 {s.p99_us:>6.0f} µs non-2xx {s.non_2xx} "
            f"Envoy CPU {s.envoy_cpu_us:5.1f} µs/req")
    if s.beside:
        line += (f"; beside {s.beside.rps:,.0f} req/s p50 {s.beside.p50_us:.0f} µs "
                 f"non-2xx {s.beside.non_2xx} errors {s.beside.socket_errors}")
    if s.counters:
        line += f"; Sluice {s.counters}"
    if s.limiter:
        per_request = 1 / max(1, s.requests)
        if row.rls:
            line += f"; RLS calls/req {s.limiter.get('rls_calls', 0) * per_request:.3f}"
        else:
            line += f"; limiter calls/req {s.limiter.get('calls', 0) * per_request:.3f}"
        if s.limiter.get("batches"):
            line += f", requests/batch {s.limiter['batched'] / s.limiter['batches']:.1f}"
        if s.limiter.get("leased") or s.limiter.get("returned"):
            line += (f", units leased/req {s.limiter.get('leased', 0) * per_request:.3f}"
                     f", returned/req {s.limiter.get('returned', 0) * per_request:.3f}")
    if s.socket_errors:
        line += f"; socket errors {s.socket_errors}"
    return line


def run_envoy_rows(a, rows, workdir, limiter_ports, limiter_procs, concurrency, log, failures):
    """All rows at one concurrency, in rounds: each round starts a fresh
    Envoy per row, warms each, runs each once and stops them.

    Fresh each round because two Envoys of one configuration differ in CPU
    per request by up to 5 µs for as long as they run (where the process's
    code and data happened to land): a row measured in one Envoy would carry
    its Envoy's offset into every round, which no pairing by round removes.

    A row whose Envoy does not start, or whose runs fail, is left out of the
    report and named in `failures`; the other rows go on.
    """
    samples: dict[str, list] = {r.id: [] for r in rows}
    solo: dict[str, list] = {r.id: [] for r in rows}

    envoy_cpus, other_cpus = placement(a, concurrency)
    place_limiters(limiter_procs, other_cpus)

    def measure(env, duration, connections=None):
        """One run of the row's load (and of the load beside it, if any);
        with one connection, the row's load alone."""
        alone = connections == 1
        counted = env.row.counters and not alone
        if counted:
            time.sleep(FLUSH_S)  # what earlier runs left in the workers' metric batches
            before = setups.sluice_counts(env.envoy)
        s = load.run(a.wrk, f"http://127.0.0.1:{env.port}/", duration, "keys.lua", env.row.load_args(),
                     cpus=other_cpus, envoy_pid=env.pid,
                     limiter_pids=servers.store_pids(limiter_procs, env.row.store),
                     connections=connections or env.row.connections or load.CONNECTIONS,
                     beside=None if alone else env.row.beside)
        if counted:
            time.sleep(FLUSH_S)
            after = setups.sluice_counts(env.envoy)
            s.counters = {k: after[k] - before[k] for k in after}
        return s

    def failed(env_or_row, what, e):
        row = getattr(env_or_row, "row", env_or_row)
        failures.append(f"`{row.id}` at concurrency {concurrency}: {what} failed: {str(e).strip()[:300]}")
        log(f"  {row.id}: {what} failed: {e}")

    def run_once(env, rnd: int):
        """One run of `env`'s row (and its one-connection run): (sample,
        one-connection sample or None), or None if it failed."""
        before = limiter_counts(limiter_procs, env.row.store) if env.row.store else {}
        try:
            s = measure(env, a.duration)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            failed(env, f"round {rnd + 1}", e)
            return None
        s.round = rnd + 1
        if env.row.store:
            s.limiter = grown(before, limiter_counts(limiter_procs, env.row.store))
        line = f"  c{concurrency} round {rnd + 1}/{a.rounds} {env.row.id:<24} {describe(env.row, s)}"
        one = None
        if a.solo > 0 and env.row.solo:
            try:
                one = measure(env, a.solo, connections=1)
                line += f"; 1 conn p50 {one.p50_us:.0f} µs p99 {one.p99_us:.0f} µs"
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                failed(env, f"round {rnd + 1}, one connection", e)
        log(line)
        return s, one

    broken: set[str] = set()

    def start_round(rnd: int) -> list:
        """A fresh Envoy per row, each warmed (rows that failed to start once
        are left out)."""
        started = []
        try:
            for r in rows:
                if r.id in broken:
                    continue
                try:
                    started.append(servers.start_envoy(r, concurrency, workdir, a.envoy, limiter_ports, envoy_cpus))
                except (RuntimeError, TimeoutError, OSError) as e:
                    broken.add(r.id)
                    failed(r, "start", e)
        except BaseException:
            for env in started:
                env.stop()
            raise
        log(f"concurrency {concurrency} round {rnd + 1}: {len(started)} Envoys up; warming")
        for env in started:
            if a.warmup > 0:
                try:
                    measure(env, a.warmup)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    failed(env, f"round {rnd + 1}, warm-up", e)
        return started

    for rnd in range(a.rounds):
        envoys = start_round(rnd)
        try:
            for env in in_round(envoys, rnd):
                sample = run_once(env, rnd)
                if sample is not None:
                    samples[env.row.id].append(sample[0])
                    if sample[1] is not None:
                        solo[env.row.id].append(sample[1])
        finally:
            for env in envoys:
                env.stop()
    out = {r.id: report.summarize(r, samples[r.id], solo=solo[r.id]) for r in rows if samples[r.id]}
    return out, samples


def run_limiter_rows(a, rows, limiter_ports, limiter_procs, log, failures):
    """The limiters alone (sluice-limiter, Limitador), rows interleaved over the rounds.

    Each service on one core of its own, wrk and Redis on the others: what
    one core of the service serves, not what the scheduler makes of wrk and
    the service on the same cores (wrk would take the CPU the faster service
    frees, and cap both at its own rate)."""
    samples: dict[str, list] = {r.id: [] for r in rows}

    server_cpus, client_cpus = placement(a, 1)
    place_limiters(limiter_procs, server_cpus)
    # Redis serves both services alike: beside wrk, off the core measured.
    for item in limiter_procs:
        if client_cpus and isinstance(item, support.Redis) and item.process is not None:
            subprocess.run(["taskset", "-a", "-p", "-c", client_cpus, str(item.process.proc.pid)],
                           capture_output=True)

    def measure(r, duration):
        url = f"http://127.0.0.1:{limiter_ports[servers.port_key(r)]}{r.check_path}"
        if r.rls:
            return load.run_grpc(url, duration, r.check_body, cpus=client_cpus,
                                 limiter_pids=servers.store_pids(limiter_procs, r.store))
        return load.run(a.wrk, url, duration, "check.lua",
                        env={"SLUICE_CHECK_PATH": r.check_path, "SLUICE_CHECK_BODY": r.check_body},
                        cpus=client_cpus, limiter_pids=servers.store_pids(limiter_procs, r.store))

    for rnd in range(-1 if a.warmup > 0 else 0, a.rounds):
        for r in in_round(rows, max(rnd, 0)):
            try:
                s = measure(r, a.warmup if rnd < 0 else a.duration)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                failures.append(f"`{r.id}`: {'warm-up' if rnd < 0 else f'round {rnd + 1}'} failed: {e}")
                log(f"  {r.id}: failed: {e}")
                continue
            if rnd < 0:
                continue
            s.round = rnd + 1
            samples[r.id].append(s)
            log(f"  limiter round {rnd + 1}/{a.rounds} {r.id:<24} {s.rps:>10,.0f} checks/s "
                f"p50 {s.p50_us:>6.0f} µs p99 {s.p99_us:>6.0f} µs non-2xx {s.non_2xx}")
    return {r.id: report.summarize(r, samples[r.id]) for r in rows if samples[r.id]}, samples


def trace_csv(a, *args: str) -> str:
    proc = subprocess.run([a.cargo, "run", "-q", "--release", "--manifest-path", str(BENCH / "trace/Cargo.toml"),
                           "--", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"trace program failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def raise_open_files():
    """Raises the soft limit of open files to the hard one: the held rows open
    1,000 connections, each an open file in wrk and in Envoy."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def _interrupt(*_):
    raise KeyboardInterrupt


def notes_for(rows, skipped, failures, load_at_start: float) -> list[str]:
    """The report's notes: the rows' limits and loads, what was left out."""
    notes = [
        f"Allow rows use {setups.ALLOW_LIMIT['requests']} requests per {setups.ALLOW_LIMIT['window']} "
        "per key (nothing is denied); the local flood row "
        f"{setups.DENY_LIMIT['requests']} per {setups.DENY_LIMIT['window']}; the over-limit cache row "
        f"{setups.CACHED_DENY_LIMIT['requests']} per {setups.CACHED_DENY_LIMIT['window']} in the limiter.",
        "Every request carries one X-Forwarded-For address (one key, or 10,000 in turn); Sluice trusts "
        "one hop (`xff_trusted_hops: 1`), Envoy's 10,000-key native row `xff_num_trusted_hops: 1`.",
        "Sluice rows use the default `headers: ietf` (RateLimit headers on every answer) unless "
        "the row says `headers none`.",
        "wrk shares the machine's cores with Envoy (and the limiter, and Redis): on 2 cores, "
        "`--concurrency 2` competes with the load generator.",
    ]
    if load_at_start > (os.cpu_count() or 1) / 2:
        notes.insert(0, f"The machine was busy when the run started (load average {load_at_start:.1f}): "
                        "trust the ratios, and the absolute numbers less.")
    if any(r.connections or r.beside for r in rows):
        notes.append(f"The delay rows with requests held: {setups.HELD_LIMIT['requests']:,} per "
                     f"{setups.HELD_LIMIT['window']} per key, `burst: {setups.HELD_LIMIT['burst']}`, "
                     f"`max_delay: {setups.HELD_LIMIT['max_delay']}`, `max_queued: {setups.HELD_MAX_QUEUED}`; "
                     "their counts are Sluice's counters of the rule, requests still held when wrk stops included.")
    if any(r.id.endswith("-rules") or r.id.endswith("-routes") for r in rows):
        notes.append("The many-rules rows put rules for other paths (`match: {path_prefix: /svc<i>/}`, each with "
                     "its own limit) ahead of the one rule the requests (path `/`) match; "
                     f"`envoy-{setups.MANY_RULES}-routes` gives Envoy's route table as many routes, the last one "
                     "matching.")
    if any(r.rls for r in rows):
        notes.append("The rate limit service rows ask over gRPC for one descriptor per request, "
                     f"`generic_key: {setups.RULE}`, `remote_address: <client>`, against the same GCRA limit in "
                     "the limiter's descriptor file (Limitador: a fixed window of the same rate per second, "
                     "memory or Redis storage, Redis uncached). Envoy's ratelimit filter needs a route action, "
                     "so its rows route to a cluster they never reach: the fault filter answers 200 locally "
                     "(`envoy-rls-route` is that answer alone).")
    if any(r.rlqs for r in rows):
        notes.append("The rate limit quota row (Envoy's `rate_limit_quota` filter) puts each client address in "
                     f"a bucket of {setups.RLQS_LIMIT:,} requests per hour in the limiter; Envoy admits by the "
                     "token bucket the limiter assigns and reports its usage every 5 s, no call per request.")
    notes += [f"Skipped: `{r.id}` (no Limitador binary: set LIMITADOR)" for r in skipped]
    return notes + [f"Left out: {f}" for f in failures]


def measure_all(a, rows, log, failures):
    """The load rows at each concurrency, the limiters alone, then the
    plugin starts and configuration pushes (with the limiters stopped);
    returns (Envoy summaries per concurrency, limiter summaries, raw
    samples, timings)."""
    by_conc: dict[int, dict] = {}
    raw: dict = {}
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        workdir = Path(tmp)
        stores = {r.store for r in rows if r.store}
        limiter_ports, limiter_procs = servers.start_limiters(
            workdir, a.limiter, stores, rls=any((r.rls or r.rlqs) and r.store in ("memory", "redis") for r in rows),
            limitador=a.limitador) if stores else ({}, [])
        try:
            for c in a.concurrencies:
                by_conc[c], raw[f"c{c}"] = run_envoy_rows(
                    a, [r for r in rows if r.kind == "envoy"], workdir, limiter_ports, limiter_procs, c, log,
                    failures)
            limiter, raw["limiter"] = run_limiter_rows(a, [r for r in rows if r.kind == "limiter"], limiter_ports,
                                                       limiter_procs, log, failures)
        finally:
            for item in limiter_procs:
                item.stop()
        timings = []
        if a.starts > 0 or a.pushes > 0:
            log("plugin start and configuration push")
            timings = startup.measure(a, workdir, log)
    return by_conc, limiter, raw, timings


def draw(charts, a, meta: dict, by_conc, limiter, log):
    """The SVGs: requests/s of the run, and the two trace charts."""
    charts.throughput(by_conc, limiter, a.out / "throughput.svg",
                      f"Sluice vs Envoy rate limiting — {meta['machine'].split(',')[0]}, Envoy {meta['Envoy']}, "
                      f"{meta['commit'].split(' ')[0]}")
    try:
        charts.algorithms(trace_csv(a), a.out / "algorithms.svg")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"algorithms chart left out: {e}")
    try:
        charts.shaping(trace_csv(a, "shaping"), a.out / "shaping.svg")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"shaping chart left out: {e}")


def main(argv=None) -> int:
    a = parse_args(argv)
    all_rows = setups.rows(a.sluice_wasm, a.noop_wasm)
    if a.list:
        for r in all_rows:
            print(f"{r.id:<28} {'default' if r.default else 'full':<8} {r.label}")
        return 0
    rows = select(all_rows, a.only, a.set)
    # Limitador is never built here: without a binary its rows are skipped, not failed.
    skipped = [r for r in rows if r.store in servers.LIMITADOR_STORES and not a.limitador]
    rows = [r for r in rows if r not in skipped]
    check_inputs(a, rows)
    raise_open_files()
    charts = None
    if not a.skip_charts:
        try:
            import charts  # matplotlib: checked before the long run, not after
        except ImportError as e:
            sys.exit(f"{e}: install bench/requirements.txt, or pass --skip-charts")
    a.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", flush=True)

    # SIGTERM (make interrupted, CI time-out) unwinds like Ctrl-C, so every
    # process started below is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    for r in skipped:
        log(f"{r.id}: skipped (no Limitador binary: set LIMITADOR or pass --limitador)")

    load_at_start = os.getloadavg()[0]
    meta = {
        "set": f"{a.set}" + (f", rows matching `{a.only}`" if a.only else "")
                + (" (`make bench`)" if a.set == "default" and not a.only else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "Envoy": envoy_version(a.envoy),
        "load generator": f"{load.version(a.wrk)}, `wrk -t{load.THREADS} -c{load.CONNECTIONS} "
                          f"-d{max(1, round(a.duration))}s --latency`, keep-alive, loopback"
                          + (f" ({setups.HELD:,} connections on the held key)"
                             if any(r.connections or r.beside for r in rows) else ""),
        "machine": machine(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "rounds": f"{a.rounds} × {max(1, round(a.duration))} s per configuration, after {a.warmup:g} s of warm-up",
        "wasm modules": report.module_sizes({"Sluice": a.sluice_wasm, "no-op filter": a.noop_wasm}
                                            | {f"baseline {n + 1}" if n else "baseline": w
                                               for n, w in enumerate(setups.baseline_wasms())}),
    }

    core = None
    if not a.skip_criterion:
        log("cargo bench -p sluice-core")
        try:
            core, raw = criterion.run(ROOT, a.cargo, short=a.short_criterion)
            (a.out / "criterion.txt").write_text(raw)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log(f"criterion benchmark failed, left out: {e}")

    failures: list[str] = []
    by_conc, limiter, raw_samples, timings = measure_all(a, rows, log, failures)
    meta["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta["wall time"] = f"{time.monotonic() - started:.0f} s"

    goals = report.targets(by_conc, limiter, timings)
    text = report.markdown(meta, by_conc, limiter, goals, core, notes_for(rows, skipped, failures, load_at_start),
                           timings=timings, traces=charts is not None)
    (a.out / "RESULTS.md").write_text(text)
    (a.out / "results.json").write_text(json.dumps({
        "meta": meta,
        "summaries": {f"c{c}": {k: vars(v) for k, v in rows_.items()} for c, rows_ in by_conc.items()}
        | {"limiter": {k: vars(v) for k, v in limiter.items()}},
        "samples": {g: {k: [s.to_dict() for s in v] for k, v in d.items()} for g, d in raw_samples.items()},
        "timings": [vars(t) for t in timings],
        "criterion": core,
    }, indent=1))
    if charts is not None:
        draw(charts, a, meta, by_conc, limiter, log)
    print()
    print(text)
    log(f"written to {a.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
