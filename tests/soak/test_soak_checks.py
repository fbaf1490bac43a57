"""The soak's verdict, from made-up figures (no processes): each check fails on what it guards against."""

from types import SimpleNamespace

import pytest

from soak.harness import ACCOUNT_ALLOWANCE
from soak.soak import Soak
from support.load import LoadReport


def report(sent=1000, answered=1000, timeouts=0, io_errors=0, max_us=50_000) -> LoadReport:
    return LoadReport(sent=sent, answered=answered, status={200: answered}, timeouts=timeouts, connect_errors=0,
                      io_errors=io_errors, elapsed_s=10.0, rate=100.0,
                      latency_us={"p50": 500, "p99": 9000, "p999": 20000, "max": max_us},
                      timeline=[{"t": 0.0, "answered": answered, "status": {200: answered}, "timeouts": timeouts,
                                 "errors": io_errors, "max_us": max_us}])


def soak(tmp_path, **change) -> Soak:
    s = Soak(seconds=600, rate=100, flood_rate=100, workdir=tmp_path, results=tmp_path / "RESULTS.md")
    s.t0 = 0.0
    s.commit = ("abc1234", False)
    s.cycles = 1
    s.traffic = report()
    s.floods = [report()]
    s.bursts = [{"key": "k", "t": 50.0, "sent": 120, "answered": 120, "admitted": ACCOUNT_ALLOWANCE,
                 "timeouts": 0, "errors": 0}]
    s.faults = [{"what": "kill", "start": 30.0, "end": 33.0}]
    # failures while the fault lasts and 1 s after it
    s.watch = SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (34.0, 20), (40.0, 20)])
    s.first_flood_end = 20.0
    s.sampler = SimpleNamespace(rows=[
        {"t": 0.0, "envoy0": 100_000, "envoy1": 100_000, "limiter0": 7_000, "limiter1": 7_000, "redis": 1_000,
         "redis_keys": 0},
        {"t": 21.0, "envoy0": 104_000, "envoy1": 104_000, "limiter0": 7_200, "limiter1": 7_200, "redis": 1_100,
         "redis_keys": 10},
        {"t": 600.0, "envoy0": 106_000, "envoy1": 50_000, "limiter0": 8_000, "limiter1": 7_000, "redis": 1_100,
         "redis_keys": 10},
    ])
    for name, value in change.items():
        setattr(s, name, value)
    return s


def failed(s: Soak) -> list[str]:
    return [name for name, ok, _ in s.checks() if not ok]


def test_a_clean_run_passes_and_writes_its_figures(tmp_path):
    s = soak(tmp_path)
    assert failed(s) == []
    assert s.report() == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "verdict: **PASS**" in text and "`abc1234`" in text
    assert "| envoy0 | 97.7 | 101.6 | 103.5 | 103.5 | flat |" in text
    assert [r["recovery_s"] for r in s.recoveries()] == [1.0]


@pytest.mark.parametrize("change,check", [
    ({"traffic": report(sent=1000, answered=999, io_errors=1)}, "every traffic request answered"),
    ({"traffic": report(sent=1000, answered=999, timeouts=1)}, "no traffic request past the timeout"),
    ({"traffic": report(max_us=1_300_000)}, "worst latency"),
    ({"floods": [report(sent=10, answered=9, timeouts=1)]}, "every flood request answered"),
    ({"bursts": [{"key": "k", "t": 50.0, "sent": 120, "answered": 120, "admitted": ACCOUNT_ALLOWANCE + 1,
                  "timeouts": 0, "errors": 0}]}, "no over-admission"),
    ({"bursts": []}, "no over-admission"),
    ({"watch": SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (45.0, 11)])}, "recovery after every fault"),
])
def test_each_check_fails_on_what_it_guards(tmp_path, change, check):
    s = soak(tmp_path, **change)
    assert [name for name in failed(s) if name.startswith(check)], failed(s)
    assert s.report() == 1
    assert "verdict: **FAIL**" in (tmp_path / "RESULTS.md").read_text()


def test_a_redis_faults_store_recovery_is_dated_from_redis_answering_again(tmp_path):
    s = soak(tmp_path, faults=[{"what": "stop Redis, start it", "start": 30.0, "end": 33.0, "healed": 33.1}])
    s.store_watch = SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (33.4, 20), (40.0, 20)])
    assert [round(r["store_s"], 2) for r in s.recoveries()] == [0.3]
    assert s.report() == 0
    assert "| 30 | stop Redis, start it | 3.0 s | 20 | 1.00 s | 0.30 s |" in (tmp_path / "RESULTS.md").read_text()


def test_memory_growing_past_the_margin_fails_only_for_processes_never_restarted(tmp_path):
    s = soak(tmp_path)
    s.sampler.rows[-1]["limiter0"] = 7_200 * 1.25 + 16 * 1024 + 1
    assert failed(s) == ["memory flat (envoy0, limiter0: never restarted)"]
    s = soak(tmp_path)
    s.sampler.rows[-1]["limiter1"] = 200_000  # restarted every cycle: reported, not judged
    assert failed(s) == []


# ---------------------------------------------------------------- the chaos soak (`make soak-long`)

from soak.chaos import Chaos  # noqa: E402
from soak.harness import write_section  # noqa: E402
from soak.steady import STEADY_PER_WINDOW, STEADY_QUOTA, Window, disturbed  # noqa: E402


def steady(windows: dict[str, dict[int, Window]]):
    clients = [SimpleNamespace(client=name, header="x-steady-g" if name.startswith("g") else "x-steady-l",
                               windows=w, start_of=lambda w: w * 10.0) for name, w in windows.items()]
    fake = SimpleNamespace(clients=clients, started=0.0, window=10.0, per_window=STEADY_PER_WINDOW)
    from soak.steady import SteadyClients
    fake.verdicts = lambda: SteadyClients.verdicts(fake)
    return fake


def exact() -> Window:
    return Window(admitted=STEADY_QUOTA, denied=STEADY_PER_WINDOW - STEADY_QUOTA)


def chaos(tmp_path, **change) -> Chaos:
    c = Chaos(seconds=120, rate=100, flood_rate=100, workdir=tmp_path, results=tmp_path / "RESULTS.md",
              figures=tmp_path / "chaos.json", chart=tmp_path / "chaos.svg")
    c.t0 = 0.0
    c.commit = ("abc1234", False)
    c.cycles = 1
    c.minutes = [(0.0, report()), (60.0, report())]
    c.floods = [report()]
    # Redis stopped at 30 s, answering again at 33.1 s; the limiters' last store error at 33.4 s
    c.faults = [{"what": "stop Redis, start it", "start": 30.0, "end": 33.0, "healed": 33.1, "store": True,
                 "redis": True}]
    c.watch = SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (33.8, 20), (40.0, 20)])
    c.store_watch = SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (33.4, 20), (40.0, 20)])
    c.steady = steady({"g0": {w: exact() for w in range(11)}, "l0": {w: exact() for w in range(11)}})
    c.sampler = SimpleNamespace(rows=[
        {"t": 0.0, "envoy0": 100_000, "envoy1": 100_000, "limiter0": 7_000, "limiter1": 7_000, "redis": 1_000,
         "redis_rss": 9_000, "redis_keys": 0},
        {"t": 120.0, "envoy0": 101_000, "envoy1": 101_000, "limiter0": 7_100, "limiter1": 7_100, "redis": 1_000,
         "redis_rss": 9_000, "redis_keys": 5},
    ])
    for name, value in change.items():
        setattr(c, name, value)
    return c


def chaos_failed(c: Chaos) -> list[str]:
    return [name for name, ok, _ in c.checks() if not ok]


def test_steady_windows_are_exact_with_exactly_the_quota_and_nothing_else():
    s = steady({"g0": {0: exact(), 1: Window(admitted=STEADY_QUOTA + 1, denied=STEADY_PER_WINDOW - STEADY_QUOTA - 1),
                       2: Window(admitted=STEADY_QUOTA, denied=STEADY_PER_WINDOW - STEADY_QUOTA - 1, other=1),
                       3: Window(admitted=3)}})  # the window the run stopped in: not judged
    assert [(v["window"], v["exact"]) for v in s.verdicts()] == [(0, True), (1, False), (2, False)]


def test_a_window_is_disturbed_by_a_store_fault_until_the_margin_after_it():
    faults = [{"start": 30.0, "end": 33.0, "store": True}, {"start": 60.0, "end": 75.0, "store": False}]
    win = {"start": 34.0, "end": 44.0}
    assert disturbed(win, faults, 0.0, margin=2.0)
    assert not disturbed({"start": 35.5, "end": 45.5}, faults, 0.0, margin=2.0)
    assert not disturbed({"start": 60.0, "end": 70.0}, faults, 0.0, margin=2.0)  # pushes, a flood: judged


def test_a_clean_chaos_run_passes_and_writes_its_section_per_minute(tmp_path):
    c = chaos(tmp_path)
    assert chaos_failed(c) == []
    (tmp_path / "RESULTS.md").write_text("<!-- begin soak -->\nthe 10-minute soak\n<!-- end soak -->\n")
    assert c.report() == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "the 10-minute soak" in text and "verdict: **PASS**" in text
    assert "| 30 | stop Redis, start it | 0.30 s | 0.70 s |" in text
    rows = c.per_minute()
    assert [r["minute"] for r in rows] == [0, 1]
    # windows ending in minute 0: 0-4; g0's window 3 (30-40 s) overlaps the Redis restart and its 2 s margin
    assert rows[0]["global_exact"] == [4, 4] and rows[0]["global_reached"] == [1, 1]
    assert rows[0]["local_exact"] == [5, 5]


@pytest.mark.parametrize("change,check", [
    ({"steady": steady({"g0": {0: exact()}, "l0": {0: exact(), 1: Window(admitted=STEADY_QUOTA + 1,
                                                                         denied=STEADY_PER_WINDOW - STEADY_QUOTA - 1)}})},
     "every local window exact"),
    ({"steady": steady({"g0": {0: exact(), 6: Window(admitted=STEADY_QUOTA - 1, denied=STEADY_PER_WINDOW - STEADY_QUOTA + 1)},
                      "l0": {0: exact()}})},
     "every global window exact"),
    ({"store_watch": SimpleNamespace(samples=[(29.0, 0), (31.0, 10), (45.0, 11)])}, "recovery after every"),
    ({"minutes": [(0.0, report(sent=1000, answered=999, timeouts=1))]}, "no traffic request past the timeout"),
])
def test_each_chaos_check_fails_on_what_it_guards(tmp_path, change, check):
    c = chaos(tmp_path, **change)
    assert [name for name in chaos_failed(c) if name.startswith(check)], chaos_failed(c)


def test_a_global_window_a_store_fault_reached_is_reported_not_judged(tmp_path):
    over = Window(admitted=STEADY_PER_WINDOW)  # failure_mode allow while Redis was away
    c = chaos(tmp_path, steady=steady({"g0": {0: exact(), 3: over}, "l0": {0: exact()}}))
    assert chaos_failed(c) == []
    assert "1 reached by a fault, admitted 25-25" in dict((n, d) for n, _, d in c.checks())[
        f"every global window exact ({STEADY_QUOTA} admitted) but those a store fault reached"]


def test_sections_replace_their_own_block_only(tmp_path):
    path = tmp_path / "R.md"
    write_section(path, "soak", "one")
    write_section(path, "chaos", "two")
    write_section(path, "soak", "three")
    assert path.read_text() == ("<!-- begin soak -->\nthree\n<!-- end soak -->\n\n"
                                "<!-- begin chaos -->\ntwo\n<!-- end chaos -->\n")


def test_local_clients_send_inside_the_epochs_windows_on_one_key():
    import threading
    from soak.steady import Client
    c = Client("l0", "x-steady-l", [1], started=1000.0, stop=threading.Event(), aligned=True)
    c.wall_offset = 1_700_000_003.5 - 1000.0  # the wall clock reads ...003.5 at `started`
    dues = [c.due(i) for i in range(2 * STEADY_PER_WINDOW)]
    assert {key for _, _, key in dues} == {"l0"}
    for w in {w for w, _, _ in dues}:
        times = [due for ww, due, _ in dues if ww == w]
        assert len(times) == STEADY_PER_WINDOW
        assert c.start_of(w) + 0.2 - 1e-6 <= min(times) and max(times) <= c.start_of(w) + 9.8 + 1e-6
        assert (c.start_of(w) + c.wall_offset) % 10 == 0  # a window of the epoch
    assert c.start_of(dues[0][0]) >= 1000.0  # the first whole window
