"""The report: medians over rounds, ratios to the reference rows, targets."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from setups import LEASE_EVERY, MANY_RULES, SOME_RULES, baseline_rows

# The reference rows every Envoy row is compared with (columns "× ...").
REFERENCES = [("envoy", "× no filter"), ("noop-wasm", "× no-op wasm"), ("native", "× native")]


@dataclass
class Summary:
    """Medians over the rounds of one row at one concurrency."""

    row_id: str
    label: str
    rps: float
    p50_us: float
    p99_us: float
    requests: int
    denied_share: float  # non-2xx answers over all answers, all rounds
    socket_errors: int
    rounds: int
    expect: str
    extra: str = ""
    spread: float = 0.0  # (max - min) / median of requests/s over the rounds
    envoy_cpu_us: float = 0.0  # Envoy's CPU time per request (median over rounds)
    limiter_cpu_us: float = 0.0  # the limiter's (and Redis's) CPU time per request
    # Latency with one connection (one request at a time, no queueing):
    # medians over rounds of p50 and p99; 0 when not measured.
    solo_p50_us: float = 0.0
    solo_p99_us: float = 0.0
    # Sluice's decisions of the row's rule over all rounds, for rows that
    # count them: requests decided (allowed, held ones included, and denied),
    # held in delay mode, denied.
    decided: int = 0
    held: int = 0
    rule_denied: int = 0
    # The load sent beside the row's own, if any: median requests/s, share of
    # non-2xx answers and socket errors (timeouts included) over all rounds.
    beside_rps: float = 0.0
    beside_denied_share: float = 0.0
    beside_socket_errors: int = 0
    # The limiter's counters over all rounds, for rows that call it: calls to
    # /v1/check, the calls that carried a batch, and the requests those
    # carried, the units granted as leases and those given back;
    # `limiter_counted` says whether they were read at all.
    limiter_counted: bool = False
    limiter_calls: int = 0
    limiter_batches: int = 0
    limiter_batched: int = 0
    limiter_leased: int = 0
    limiter_returned: int = 0
    # RLS calls (`sluice_limiter_rls_calls_total`), for rows that call the
    # limiter over gRPC.
    limiter_rls_calls: int = 0
    # (round, requests/s) of each round measured: ratios between rows are
    # taken round by round too, for their spread.
    per_round: list = field(default_factory=list)
    # (round, Envoy CPU µs per request) of each round, for differences
    # between builds taken round by round.
    per_round_cpu: list = field(default_factory=list)

    @property
    def expectation_met(self) -> bool:
        if self.expect == "deny":
            return self.denied_share >= 0.9
        if self.expect == "undelayed" and (self.held or not self.decided):
            return False
        return self.denied_share == 0 and self.socket_errors == 0 and self.beside_socket_errors == 0

    def counts(self) -> str:
        """What Sluice decided and what the load beside the row's got, in words."""
        out = []
        if self.decided:
            out.append(f"held {100 * self.held / self.decided:.1f}%, denied "
                       f"{100 * self.rule_denied / self.decided:.1f}% of {self.decided:,} decisions")
        if self.beside_rps:
            out.append(f"held key beside: {self.beside_rps:,.0f} req/s served, "
                       f"{100 * self.beside_denied_share:.1f}% denied")
        return "; ".join(out)

    def calls(self) -> str:
        """The limiter's calls per request served, the requests per call of
        the calls that carried a batch, and the lease units granted and given
        back per request, in words."""
        if not self.limiter_counted:
            return ""
        per_request = 1 / max(1, self.requests)
        if self.limiter_rls_calls and not self.limiter_calls:
            return f"{self.limiter_rls_calls * per_request:.3f} RLS calls per request"
        out = f"{self.limiter_calls * per_request:.3f} limiter calls per request"
        if self.limiter_rls_calls:
            out += f", {self.limiter_rls_calls * per_request:.3f} RLS calls per request"
        if self.limiter_batches:
            out += f", {self.limiter_batched / self.limiter_batches:.1f} requests per batch"
        if self.limiter_leased or self.limiter_returned:
            out += (f", {self.limiter_leased * per_request:.3f} units leased and "
                    f"{self.limiter_returned * per_request:.3f} returned per request")
        return out


def summarize(row, samples: list, extra: str = "", solo: list | None = None) -> Summary:
    """Medians of `samples` (wrk runs at full load) and of `solo` (runs with
    one connection, for latency); totals of Sluice's counters and of the
    load beside the row's, where measured."""
    counted = [s.counters for s in samples if s.counters]
    limiter = [s.limiter for s in samples if s.limiter]
    beside = [s.beside for s in samples if s.beside]
    return Summary(
        row_id=row.id,
        label=row.label,
        rps=statistics.median(s.rps for s in samples),
        p50_us=statistics.median(s.p50_us for s in samples),
        p99_us=statistics.median(s.p99_us for s in samples),
        requests=sum(s.requests for s in samples),
        denied_share=(sum(s.non_2xx for s in samples) / max(1, sum(s.requests for s in samples))),
        socket_errors=sum(s.socket_errors for s in samples),
        rounds=len(samples),
        expect=row.expect,
        extra=extra,
        spread=_spread([s.rps for s in samples]),
        envoy_cpu_us=statistics.median(s.envoy_cpu_us for s in samples),
        limiter_cpu_us=statistics.median(s.limiter_cpu_us for s in samples),
        solo_p50_us=statistics.median(s.p50_us for s in solo) if solo else 0.0,
        solo_p99_us=statistics.median(s.p99_us for s in solo) if solo else 0.0,
        decided=sum(c.get("allowed", 0) + c.get("denied", 0) for c in counted),
        held=sum(c.get("delayed", 0) for c in counted),
        rule_denied=sum(c.get("denied", 0) for c in counted),
        beside_rps=statistics.median(b.rps for b in beside) if beside else 0.0,
        beside_denied_share=sum(b.non_2xx for b in beside) / max(1, sum(b.requests for b in beside)),
        beside_socket_errors=sum(b.socket_errors for b in beside),
        limiter_counted=bool(limiter),
        limiter_calls=round(sum(c.get("calls", 0) for c in limiter)),
        limiter_batches=round(sum(c.get("batches", 0) for c in limiter)),
        limiter_batched=round(sum(c.get("batched", 0) for c in limiter)),
        limiter_leased=round(sum(c.get("leased", 0) for c in limiter)),
        limiter_returned=round(sum(c.get("returned", 0) for c in limiter)),
        limiter_rls_calls=round(sum(c.get("rls_calls", 0) for c in limiter)),
        per_round=[(s.round, s.rps) for s in samples],
        per_round_cpu=[(s.round, s.envoy_cpu_us) for s in samples],
    )


def _spread(values: list[float]) -> float:
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


@dataclass
class Target:
    """A goal checked against the measurements (reported, never asserted)."""

    name: str
    concurrency: int | None
    measured: str
    met: bool | None  # None: a row it needs was not measured
    # What the same ratio is for a reference filter that does only the
    # unavoidable part of the work (its host calls, or its call-out).
    bound: str = ""
    # The ratio's lowest and highest over the rounds (rows paired round by
    # round), e.g. "0.91–0.99"; empty with fewer than two rounds.
    spread: str = ""


@dataclass
class Timing:
    """Wall times in milliseconds of one start or push measurement
    (`kind` "start" or "push") of `what` at Envoy `--concurrency`."""

    kind: str
    what: str
    concurrency: int
    ms: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.ms) if self.ms else 0.0


def _ratio(a: Summary | None, b: Summary | None) -> float | None:
    if a is None or b is None or b.rps == 0:
        return None
    return a.rps / b.rps


def _round_spread(a: Summary, b: Summary) -> str:
    """The lowest and highest of a / b over the rounds both were measured in."""
    theirs = dict(b.per_round)
    ratios = [rps / theirs[rnd] for rnd, rps in dict(a.per_round).items() if theirs.get(rnd)]
    return f"{min(ratios):.2f}–{max(ratios):.2f}" if len(ratios) > 1 else ""


def ratio_target(name: str, c: int | None, rows: dict[str, Summary], row: str, base: str, at_least: float,
                 bound_row: str = "", bound_what: str = "", bound_base: str = "") -> Target:
    """The target `row` / `base` ≥ `at_least` (requests/s of `rows`), with
    its spread over the rounds and the same ratio for `bound_row` (over
    `bound_base`, else `base`) if given."""
    a, b = rows.get(row), rows.get(base)
    r = _ratio(a, b)
    bound_ratio = _ratio(rows.get(bound_row), rows.get(bound_base or base)) if bound_row else None
    bound = f"{bound_ratio:.3f}× for {bound_what}" if bound_ratio is not None else ""
    if r is None:
        return Target(name, c, "not measured", None, bound)
    return Target(name, c, f"{r:.3f}× (target ≥ {at_least:.2f}×)", r >= at_least, bound, _round_spread(a, b))


# What the leased targets' bound row does.
LEASE_FLOOR = f"a local limit's host calls and a renewal per {LEASE_EVERY} requests alone"


def envoy_targets(c: int, rows: dict[str, Summary]) -> list[Target]:
    """The targets of one Envoy concurrency's rows."""
    out = [ratio_target("Sluice local GCRA, one key ≥ 0.93× no-op wasm", c, rows, "local-gcra", "noop-wasm", 0.93,
                        "host-calls", "Sluice's host calls alone")]
    g, n = rows.get("local-gcra"), rows.get("noop-wasm")
    if g and n and g.solo_p99_us and n.solo_p99_us:
        d = g.solo_p99_us - n.solo_p99_us
        out.append(Target("Sluice local GCRA p99 within 50 µs of no-op wasm (one connection)", c,
                          f"{d:+.0f} µs ({g.solo_p99_us:.0f} vs {n.solo_p99_us:.0f})", d <= 50))
    elif g and n:
        d = g.p99_us - n.p99_us
        out.append(Target("Sluice local GCRA p99 within 50 µs of no-op wasm (full load)", c,
                          f"{d:+.0f} µs ({g.p99_us:.0f} vs {n.p99_us:.0f})", d <= 50))
    else:
        out.append(Target("Sluice local GCRA p99 within 50 µs of no-op wasm", c, "not measured", None))
    many = f"{MANY_RULES:,} rules"
    ratios = [
        (f"{SOME_RULES} rules (one matching) ≥ 0.95× 1 rule", f"local-gcra-{SOME_RULES}-rules", "local-gcra", 0.95),
        (f"{many} (one matching) ≥ 0.95× 1 rule", f"local-gcra-{MANY_RULES}-rules", "local-gcra", 0.95,
         f"envoy-{MANY_RULES}-routes", f"Envoy's route table of {MANY_RULES:,} routes", "envoy"),
        ("10,000 keys ≥ 0.9× one key (GCRA)", "local-gcra-10k", "local-gcra", 0.9),
        ("deny path ≥ allow path (GCRA)", "local-deny", "local-gcra", 1.0,
         "deny-reply", "the two paths' host calls alone", "host-calls"),
        ("global, memory store ≥ 0.6× Sluice local", "global-memory", "local-gcra", 0.6,
         "call-out", "a bare call-out"),
        ("Sluice per request ≥ Envoy's ratelimit filter → Limitador, memory", "global-memory", "envoy-limitador",
         1.0, "call-out", "a bare call-out"),
        ("global coalesced ≥ 1.2× Envoy's ratelimit filter → Limitador, memory", "global-memory-coalesce",
         "envoy-limitador", 1.2),
        ("Sluice per request, Redis ≥ 1.3× Envoy's ratelimit filter → Limitador, Redis", "global-redis",
         "envoy-limitador-redis", 1.3),
        ("global coalesced ≥ 1.3× a call per request, one key, memory store", "global-memory-coalesce",
         "global-memory", 1.3),
        ("global coalesced ≥ 1.3× a call per request, one key, Redis store", "global-redis-coalesce",
         "global-redis", 1.3),
        ("global leased ≥ 0.95× Sluice local, one key, memory store", "global-memory-lease", "local-gcra", 0.95,
         "lease-calls", LEASE_FLOOR, "host-calls"),
        ("global leased ≥ 0.95× Sluice local, one key, Redis store", "global-redis-lease", "local-gcra", 0.95,
         "lease-calls", LEASE_FLOOR, "host-calls"),
        ("over-limit cache ≥ 0.9× Sluice local", "global-cached", "local-gcra", 0.9),
    ]
    for store, name in (("memory", "memory store"), ("redis", "Redis store")):
        for row, protocol in ((f"global-{store}", "HTTP"), (f"global-rls-{store}", "RLS")):
            ratios.append((f"Sluice per request ({protocol}) ≥ Envoy's ratelimit filter → sluice-limiter, {name}",
                           row, f"envoy-rls-{store}", 1.0))
    ratios.append(("requests not delayed, beside 1,000 held ≥ 0.95× without", "delay-others-held",
                   "delay-others", 0.95))
    return out + [ratio_target(name, c, rows, *args) for name, *args in ratios]


def targets(by_conc: dict[int, dict[str, Summary]], limiter: dict[str, Summary],
            timings: list[Timing] | None = None) -> list[Target]:
    """Every target, measured or not (`met` None), in the report's order."""
    out = [t for c in sorted(by_conc) for t in envoy_targets(c, by_conc[c])]
    out += [Target(f"`{p.row}` no slower than {p.build} (Envoy CPU per request, paired by round)", c,
                   f"{p.median:+.1f} µs (sign test p = {p.p:.2f})", p.median <= 0,
                   spread=f"{min(p.diffs):+.1f} to {max(p.diffs):+.1f} µs")
            for c in sorted(by_conc) for p in paired_baselines(by_conc[c])]
    mem = limiter.get("limiter-memory")
    out.append(Target("sluice-limiter memory store ≥ 50,000 checks/s", None,
                      f"{mem.rps:,.0f}/s" if mem else "not measured",
                      (mem.rps >= 50_000) if mem else None))
    out += [ratio_target(f"sluice-limiter ≥ 1.5× Limitador, HTTP checks/s, {name}", None, limiter, f"limiter-{store}",
                         f"limitador-{store}", 1.5) for store, name in (("memory", "memory"), ("redis", "Redis"))]
    out.append(ratio_target("sluice-limiter ≥ 1.5× Limitador, RLS gRPC checks/s, memory", None, limiter,
                            "limiter-rls-memory", "limitador-rls-memory", 1.5))
    for t in timings or []:
        if t.kind == "push" and t.what == f"Sluice, {MANY_RULES:,} rules" and t.ms:
            out.append(Target(f"a push of {MANY_RULES:,} rules applied < 50 ms", t.concurrency,
                              f"{t.median:.1f} ms (median of {len(t.ms)})", t.median < 50,
                              spread=f"{min(t.ms):.1f}–{max(t.ms):.1f} ms"))
    return out


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 10_000 else f"{v:.0f} µs"


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "n/a"}[met]


# Reference rows that each add one thing to the no-op wasm filter's request:
# (row, what it adds), for the floors reported under each Envoy table.
FLOORS = [("call-out", "a bare limiter call"),
          ("pause-resume", "pausing the request and resuming it from the root context")]


def floors(rows: dict[str, Summary]) -> list[str]:
    """What each reference of FLOORS measured costs Envoy per request beyond
    the no-op wasm filter, in words (nothing when either row is missing)."""
    base = rows.get("noop-wasm")
    if base is None:
        return []
    out = [f"{what}: {rows[row].envoy_cpu_us - base.envoy_cpu_us:+.1f} µs "
           f"({rows[row].envoy_cpu_us:.1f} vs {base.envoy_cpu_us:.1f})" for row, what in FLOORS if row in rows]
    return ["Envoy CPU per request beyond the no-op wasm filter: " + "; ".join(out) + "."] if out else []


@dataclass
class Paired:
    """A row against the same row with a build before: the differences in
    Envoy CPU per request round by round (this build's minus the other's;
    the rows of a round run one after the other), their median, in how
    many rounds this build was the cheaper and the sign test of that."""
    row: str
    build: str
    diffs: list[float]

    def __post_init__(self):
        self.median = statistics.median(self.diffs)
        self.cheaper = sum(d < 0 for d in self.diffs)
        self.p = sign_test(self.diffs)


def paired_baselines(rows: dict[str, Summary]) -> list[Paired]:
    """Each row measured with a build of SLUICE_BASELINE_WASM against the
    same row with the build under test."""
    out = []
    for base_id, row_id, wasm in baseline_rows():
        base, row = rows.get(base_id), rows.get(row_id)
        if base is None or row is None:
            continue
        theirs = dict(base.per_round_cpu)
        diffs = [us - theirs[rnd] for rnd, us in row.per_round_cpu if rnd in theirs]
        if diffs:
            out.append(Paired(row_id, wasm.name, diffs))
    return out


def sign_test(diffs: list[float]) -> float:
    """The two-sided sign test of round-by-round differences: how likely
    so lopsided a count of cheaper and dearer rounds is when neither build
    is the cheaper (rounds without a difference left out). Three rounds
    cannot go below 0.25."""
    signed = [d for d in diffs if d != 0]
    n, cheaper = len(signed), sum(d < 0 for d in signed)
    tail = sum(math.comb(n, k) for k in range(min(cheaper, n - cheaper) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def baselines(rows: dict[str, Summary]) -> list[str]:
    """[`paired_baselines`] in words: the median difference, in how many
    rounds this build was the cheaper, and the sign test of that count."""
    out = [f"`{p.row}` against {p.build}: {p.median:+.1f} µs of Envoy CPU per request (median of "
           f"{len(p.diffs)} rounds' differences; cheaper in {p.cheaper} of {len(p.diffs)}, sign test p = {p.p:.2f})"
           for p in paired_baselines(rows)]
    return ["This build against the builds before it, paired round by round: " + "; ".join(out) + "."] \
        if out else []


def envoy_table(rows: dict[str, Summary]) -> list[str]:
    solo = any(s.solo_p99_us for s in rows.values())
    head = "| configuration | req/s | spread | p50 | p99 | " + ("p50 / p99, 1 conn | " if solo else "") + \
        " | ".join(h for _, h in REFERENCES) + " | Envoy CPU/req | denied | check |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for s in rows.values():
        ratios = []
        for ref, _ in REFERENCES:
            r = _ratio(s, rows.get(ref))
            ratios.append(f"{r:.2f}" if r is not None else "–")
        denied = f"{100 * s.denied_share:.1f}%"
        wanted = {"deny": "denials", "undelayed": "none denied or held"}.get(s.expect, "none denied")
        check = "ok" if s.expectation_met else f"**expected {wanted}**"
        if s.socket_errors or s.beside_socket_errors:
            check += f" ({s.socket_errors + s.beside_socket_errors} socket errors)"
        extra = [x for x in (s.extra, s.calls(), s.counts()) if x]
        if s.limiter_cpu_us:
            extra.append(f"limiter CPU {s.limiter_cpu_us:.1f} µs/req")
        label = s.label + (f" ({'; '.join(extra)})" if extra else "")
        solo_cell = (f"{_us(s.solo_p50_us)} / {_us(s.solo_p99_us)} | " if s.solo_p99_us else "– | ") if solo else ""
        lines.append(f"| {label} | {s.rps:,.0f} | {100 * s.spread:.0f}% | {_us(s.p50_us)} | {_us(s.p99_us)} | "
                     + solo_cell + " | ".join(ratios) + f" | {s.envoy_cpu_us:.1f} µs | {denied} | {check} |")
    return lines


def limiter_table(rows: dict[str, Summary]) -> list[str]:
    lines = ["| service | checks/s | spread | p50 | p99 | CPU/check | errors |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in rows.values():
        errors = f"{100 * s.denied_share:.1f}% non-2xx" if s.denied_share else "none"
        if s.socket_errors:
            errors += f", {s.socket_errors} socket"
        lines.append(f"| {s.label} | {s.rps:,.0f} | {100 * s.spread:.0f}% | {_us(s.p50_us)} | {_us(s.p99_us)} | "
                     f"{s.limiter_cpu_us:.1f} µs | {errors} |")
    return lines


def targets_table(goals: list[Target]) -> list[str]:
    """The targets measured, with their spread over the rounds; those whose
    rows the run did not measure are counted, not listed."""
    measured = [t for t in goals if t.met is not None]
    out = ["## Targets", "",
           "`bound` is the same ratio for reference filters that do only what the target's "
           "rows cannot avoid: `host-calls` makes Sluice's host calls for an admitted request "
           "without its logic, `deny-reply` those of a denied request and its 429, "
           "`call-out` one limiter call per request and nothing else, `lease-calls` `host-calls`' "
           f"calls and a lease renewal's call from the root every {LEASE_EVERY} requests. `per round` is the "
           "lowest and highest of the ratio over the rounds, the two rows paired round by round "
           "(runs interleaved), or of the timings.", "",
           "| target | concurrency | measured | | per round | bound |",
           "| --- | --- | --- | --- | --- | --- |"]
    for t in measured:
        out.append(f"| {t.name} | {t.concurrency or '–'} | {t.measured} | {_mark(t.met)} | {t.spread or '–'} | "
                   f"{t.bound or '–'} |")
    if len(measured) < len(goals):
        out += ["", f"{len(goals) - len(measured)} targets need rows this run did not measure "
                "(`make bench-full` measures every row)."]
    return out + [""]


def module_sizes(modules: dict[str, Path]) -> str:
    """The size in bytes of each wasm module of the run (Envoy compiles each
    whole before its listener takes connections: most of a plugin's start)."""
    return ", ".join(f"{what} {path.name} {path.stat().st_size:,} B" for what, path in modules.items()
                     if path.is_file())


def timings_table(timings: list[Timing]) -> list[str]:
    """Plugin start and configuration push: medians and ranges in ms."""
    if not timings:
        return []
    base = {t.concurrency: t.median for t in timings if t.kind == "start" and t.what == "Envoy, no filter" and t.ms}
    out = ["## Plugin start and configuration push", "",
           "Wall time in milliseconds. **start**: from starting Envoy until its listener answers a request "
           "(every worker's VM created and configured), beyond that of Envoy without a filter in the last "
           "column. **push**: from a new listener file (LDS) replacing the old one, the Sluice configuration's "
           "matching rule given another quota, until a request on a new connection is answered with the new "
           "quota in `ratelimit-policy` (the wasm module is the same: its VMs are kept, the filter configures "
           "itself anew). See README.md, *Plugin start and configuration push*.", "",
           "| measurement | concurrency | median | min–max | runs | beyond no filter |",
           "| --- | --- | --- | --- | --- | --- |"]
    for t in timings:
        if not t.ms:
            continue
        beyond = f"{t.median - base[t.concurrency]:+.0f} ms" if t.kind == "start" and t.concurrency in base else "–"
        out.append(f"| {t.kind}: {t.what} | {t.concurrency} | {t.median:.1f} ms | {min(t.ms):.1f}–{max(t.ms):.1f} ms "
                   f"| {len(t.ms)} | {beyond} |")
    return out + [""]


def core_table(core: list[dict]) -> list[str]:
    out = ["## sluice-core decisions (criterion)", "",
           "Nanoseconds per decision on a warm key, allowed path, decode and encode "
           "included (`cargo bench -p sluice-core`).", "",
           "| benchmark | ns per decision | decisions/s on one core |", "| --- | --- | --- |"]
    for b in core:
        per_s = 1e9 / b["ns"] if b["ns"] else 0
        out.append(f"| {b['name']} | {b['ns']:.1f} | {per_s / 1e6:.1f} M |")
    return out + [""]


TRACES = ["## The algorithms on one bursty trace", "",
          "10 requests per 10 s under every algorithm (decisions of sluice-core; see README.md, "
          "*The algorithms chart*).", "",
          "![algorithms](algorithms.svg)", "",
          "## Reject, soft and delay on one bursty trace", "",
          "One GCRA limit that rejects, admits 50% above its quota, or holds requests up to 2 s "
          "(decisions of sluice-core; see README.md, *The shaping chart*).", "",
          "![shaping](shaping.svg)", ""]


def markdown(meta: dict, by_conc: dict[int, dict[str, Summary]], limiter: dict[str, Summary],
             goals: list[Target], core: list[dict] | None, notes: list[str], *,
             timings: list[Timing] | None = None, traces: bool = True) -> str:
    """RESULTS.md; `traces`: with the sections of the trace charts."""
    out = ["# Sluice benchmark results", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    out += ["", "Medians over the rounds; configurations interleaved, every other round reversed (A B C, C B A, ...), so that "
            "ratios hold on a noisy machine. `× no filter`, `× no-op wasm` and `× native` divide "
            "the row's requests/s by those of Envoy without filter, with the no-op wasm filter, "
            "and with its own `local_ratelimit` (one key). `denied` is the share of non-2xx "
            "answers; `check` says whether rows meant to deny nothing denied nothing and flood "
            "rows denied almost everything. `spread` is (max − min) / median of requests/s over "
            "the rounds: how much to trust a difference. `p50` and `p99` are wrk's latencies at "
            "full load (16 connections: mostly queueing, so they follow throughput); "
            "`1 conn` are those of a run with one connection, one request at a time: the "
            "latency a request pays. `Envoy CPU/req` is the CPU time of every Envoy thread over "
            "the requests served.", "",
            "![requests per second](throughput.svg)", ""]
    for c in sorted(by_conc):
        out += [f"## Envoy `--concurrency {c}`", ""] + envoy_table(by_conc[c]) + [""]
        for paragraph in floors(by_conc[c]) + baselines(by_conc[c]):
            out += [paragraph, ""]
    if limiter:
        out += ["## sluice-limiter alone", "",
                "`POST /v1/check`, one GCRA key that never runs out, HTTP/1.1 keep-alive; beside it "
                "Limitador's `POST /check_and_report` for the descriptor of its rate limit service rows, "
                "when a Limitador binary is given.", ""]
        out += limiter_table(limiter) + [""]
    out += timings_table(timings or [])
    out += targets_table(goals)
    if core is not None:
        out += core_table(core)
    if traces:
        out += TRACES
    if notes:
        out += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)
