"""Plugin start and configuration push: how long until Envoy answers.

- **Start:** from starting Envoy's process until its listener answers a
  request, with no filter, the no-op wasm filter and Sluice (one rule, and
  1,000 rules): every worker creates its VM and the filter configures
  itself before the listener takes connections.
- **Push:** a running Envoy reads its listener from a file (LDS, as the
  end-to-end tests push configurations); the file is replaced by one whose
  Sluice configuration differs in the matching rule's quota, and the time
  is taken until a request on a new connection is answered with the new
  quota in its `ratelimit-policy` header.

Timings are wall time on a shared machine: medians of several, alternated
(A B C A B C ...).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import report
import setups
import support

# One request's client, as in the load rows.
XFF = {"x-forwarded-for": "10.0.0.0"}
# How often a start or a push is polled, and for how long at most.
POLL_S = 0.001
TIMEOUT_S = 60.0
GCRA = {"algorithm": "gcra", **setups.ALLOW_LIMIT}


def sluice_rules(rules: int, requests: int = GCRA["requests"]) -> dict:
    """Sluice with `rules` rules, the last matching every request: the
    configuration of `local-gcra` (one rule) or `local-gcra-1000-rules`,
    its matching limit at `requests`."""
    limit = {**GCRA, "requests": requests}
    return setups.sluice_config(limit, before=setups.other_rules(rules - 1, GCRA))


def start_filters(sluice_wasm: Path, noop_wasm: Path) -> list[tuple[str, list]]:
    """(what, HTTP filters) of each start measured."""
    return [
        ("Envoy, no filter", []),
        ("no-op wasm filter", [support.wasm_filter("{}", noop_wasm, vm_id="noop", name="noop")]),
        ("Sluice, 1 rule", [support.wasm_filter(sluice_rules(1), sluice_wasm)]),
        (f"Sluice, {setups.MANY_RULES:,} rules", [support.wasm_filter(sluice_rules(setups.MANY_RULES), sluice_wasm)]),
    ]


def _answers(port: int, check=None) -> bool:
    """Whether the listener answers 200 (and `check` holds for the answer)."""
    try:
        r = support.request(port, "/", headers=XFF, timeout=1)
    except OSError:
        return False
    return r.status == 200 and (check is None or check(r))


def _wait_ms(t0: float, done, alive, what: str) -> float:
    """Polls `done` every POLL_S; milliseconds from `t0` until it holds."""
    while not done():
        if not alive():
            raise RuntimeError(f"envoy exited during {what}")
        if time.perf_counter() - t0 > TIMEOUT_S:
            raise TimeoutError(f"{what}: no answer after {TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)
    return (time.perf_counter() - t0) * 1000


def start_ms(envoy_bin: Path, workdir: Path, filters: list, concurrency: int) -> float:
    """Milliseconds from starting Envoy (static listener, no admin) until
    its listener answers 200; Envoy is stopped after."""
    port = support.free_port()
    rundir = Path(tempfile.mkdtemp(prefix="start-", dir=workdir))
    bootstrap = rundir / "bootstrap.json"
    bootstrap.write_text(json.dumps({"static_resources": {"listeners": [support.listener(port, filters)]}}))
    args = [str(envoy_bin), "-c", str(bootstrap), "--concurrency", str(concurrency), "--log-level", "warn",
            "--disable-hot-restart"]
    t0 = time.perf_counter()
    proc = support.Process(args, rundir / "envoy.log")
    try:
        return _wait_ms(t0, lambda: _answers(port), proc.alive, "start")
    except RuntimeError as e:
        raise RuntimeError(f"{e}:\n{proc.log()[-3000:]}") from None
    finally:
        proc.stop()


def push_ms(envoy: support.Envoy, sluice_wasm: Path, rules: int, requests: int) -> float:
    """Milliseconds from moving a new listener file into place until the
    listener answers with the matching rule's quota at `requests`; then
    waits for Envoy to finish the update (no listener warming or draining)."""
    staged = envoy.stage_listener([support.wasm_filter(sluice_rules(rules, requests), sluice_wasm)])
    quota = f'"{setups.RULE}";q={requests};'
    before = envoy.stat("listener_manager.lds.update_success")
    t0 = time.perf_counter()
    os.replace(staged, envoy.lds_path)
    ms = _wait_ms(t0, lambda: _answers(envoy.port, lambda r: quota in (r.header("ratelimit-policy") or "")),
                  envoy.process.alive, "push")

    def settled():
        s = envoy.stats()
        return (s.get("listener_manager.lds.update_success", 0) > before
                and s.get("listener_manager.total_listeners_warming", 1) == 0
                and s.get("listener_manager.total_listeners_draining", 1) == 0)
    support.wait_until(settled, what="listener update settled")
    return ms


def measure(a, workdir: Path, log) -> list[report.Timing]:
    """Starts (`a.starts` of each filter at each concurrency) and pushes
    (`a.pushes` of 1 rule and of MANY_RULES at each concurrency),
    interleaved; a measurement that fails is left out and logged."""
    out: list[report.Timing] = []
    for c in (1, 2):
        timings = [report.Timing("start", what, c) for what, _ in start_filters(a.sluice_wasm, a.noop_wasm)]
        for n in range(a.starts):
            for t, (_, filters) in zip(timings, start_filters(a.sluice_wasm, a.noop_wasm)):
                try:
                    t.ms.append(start_ms(a.envoy, workdir, filters, c))
                except (RuntimeError, TimeoutError, OSError) as e:
                    log(f"  start of {t.what} at concurrency {c} failed: {e}")
            log(f"  c{c} start {n + 1}/{a.starts}: " + ", ".join(f"{t.what} {t.ms[-1]:.0f} ms"
                                                               for t in timings if t.ms))
        out += timings
        if a.pushes > 0:
            out += pushes(a, workdir, c, log)
    return out


def pushes(a, workdir: Path, concurrency: int, log) -> list[report.Timing]:
    """`a.pushes` pushes of each configuration to one Envoy per rule count,
    alternating the matching rule's quota between two values."""
    out = []
    for rules in (1, setups.MANY_RULES):
        t = report.Timing("push", f"Sluice, {rules:,} rule{'s' if rules > 1 else ''}", concurrency)
        quotas = (GCRA["requests"], GCRA["requests"] - 1)
        try:
            envoy = support.start_envoy(workdir, [support.wasm_filter(sluice_rules(rules), a.sluice_wasm)],
                                        concurrency=concurrency, lds=True, envoy_bin=a.envoy, log_level="warn",
                                        component_log_level=None, drain_time_s=0, name=f"push-{rules}-c{concurrency}")
        except (RuntimeError, TimeoutError, OSError) as e:
            log(f"  push Envoy with {rules} rules at concurrency {concurrency} failed to start: {e}")
            continue
        try:
            for n in range(a.pushes):
                t.ms.append(push_ms(envoy, a.sluice_wasm, rules, quotas[(n + 1) % 2]))
        except (RuntimeError, TimeoutError, OSError) as e:
            log(f"  push of {t.what} at concurrency {concurrency} failed: {e}")
        finally:
            envoy.stop()
        if t.ms:
            log(f"  c{concurrency} push {t.what}: " + ", ".join(f"{ms:.1f}" for ms in t.ms) + " ms")
            out.append(t)
    return out
