"""Requests held in delay mode when Envoy lets go of them: a configuration
pushed (the same VM, or a new one that replaces it), a graceful drain, a
hot restart, SIGTERM; and local limits across a hot or cold restart.

One Envoy worker holds 10 requests sent together on one key: a gcra limit
of 4 per second (burst 1) in delay mode with `max_delay: 2.5s` schedules
them 250 ms apart, 0 to 2.25 s. Each exit comes once 9 of them are held.
Every request must be answered (a 200 at its time, or its connection
closed by Envoy) and none later than `max_delay` + a margin.
"""

import http.client
import signal
import threading
import time

from support import request, run_all, sluice_config, start_envoy, wait_until, wasm_filter

STEP = 0.25
HELD = 9
MAX_DELAY = 2.5
MARGIN = 0.5
TOLERANCE = 0.05


def paced(extra_rule: bool = False) -> dict:
    rules = [{"name": "paced", "key": ["const:k"],
              "limits": [{"algorithm": "gcra", "requests": 4, "window": "1s", "burst": 1,
                          "on_exceed": "delay", "max_delay": f"{MAX_DELAY}s"}]}]
    if extra_rule:
        # a compatible push: the paced limit keeps its state
        rules.append({"name": "other", "key": ["const:o"],
                      "limits": [{"algorithm": "gcra", "requests": 5, "window": "1s"}]})
    return sluice_config(rules)


class Held:
    """HELD + 1 requests sent at once, one connection each; `outcomes` are
    (seconds since the first send, status or "closed"), by time."""

    def __init__(self, e):
        self.e = e
        conns = [http.client.HTTPConnection("127.0.0.1", e.port, timeout=30) for _ in range(HELD + 1)]
        for c in conns:
            c.connect()
        self.sent: list[float] = []
        self.done: list[tuple[float, object]] = []
        barrier = threading.Barrier(HELD + 1)

        def one(conn):
            barrier.wait(timeout=10)
            self.sent.append(time.monotonic())
            try:
                conn.request("GET", "/")
                resp = conn.getresponse()
                resp.read()
                self.done.append((time.monotonic(), resp.status))
            except (OSError, http.client.HTTPException):
                self.done.append((time.monotonic(), "closed"))
            finally:
                conn.close()

        self.thread = threading.Thread(target=lambda: run_all([lambda c=c: one(c) for c in conns]))
        self.thread.start()
        # the first is answered at once; the others are held (each one
        # either still held or answered: a poll may come after the next answer)
        wait_until(lambda: self.done and active_requests(e) + len(self.done) == HELD + 1,
                   what=f"{HELD} requests held")

    def outcomes(self) -> list[tuple[float, object]]:
        self.thread.join(timeout=MAX_DELAY + 10)
        assert not self.thread.is_alive(), "a request is still waiting"
        start = min(self.sent)
        return sorted((at - start, status) for at, status in self.done)

    def since_start(self, t: float) -> float:
        return t - min(self.sent)


def active_requests(e) -> int:
    return e.stats().get("http.ingress.downstream_rq_active", 0)


def assert_all_on_time(outcomes):
    """Every request a 200 at its time: k * 250 ms."""
    assert len(outcomes) == HELD + 1
    assert_on_time(outcomes)


def assert_on_time(outcomes):
    """The k-th outcome a 200 at k * 250 ms after the first."""
    for k, (at, status) in enumerate(outcomes):
        assert status == 200, outcomes
        assert abs(at - outcomes[0][0] - k * STEP) <= TOLERANCE, (k, outcomes)


def assert_counted(e, allowed: int, delayed: int):
    wait_until(lambda: (e.sluice_stat("sluice.paced.allowed"), e.sluice_stat("sluice.paced.delayed"))
               == (allowed, delayed), what=f"allowed {allowed}, delayed {delayed}")
    assert e.sluice_stat("sluice.paced.denied") == 0


def start(tmp_path, **kwargs):
    return start_envoy(tmp_path, [wasm_filter(paced())], concurrency=1, **kwargs)


# ---------------------------------------------------------------- configuration pushes

def test_a_push_within_the_drain_time_keeps_every_held_request(tmp_path):
    e = start(tmp_path, drain_time_s=5)
    try:
        held = Held(e)
        assert e.push_config(paced(extra_rule=True))
        assert_all_on_time(held.outcomes())
        assert_counted(e, allowed=HELD + 1, delayed=HELD)
    finally:
        e.stop()


def test_a_new_vm_leaves_the_old_one_to_serve_its_held_requests(tmp_path):
    # another vm_id: a second VM takes new requests, the old one keeps its
    # held requests and resumes them at their time until its listener drained
    e = start(tmp_path, drain_time_s=5)
    try:
        held = Held(e)
        e.write_listener([wasm_filter(paced(), vm_id="replacement")])
        wait_until(lambda: e.stat("listener_manager.lds.update_success") >= 2, what="the new listener")
        assert_all_on_time(held.outcomes())
        assert "replacement" in e.log()
        assert_counted(e, allowed=HELD + 1, delayed=HELD)
        assert request(e.port, "/").status == 200
    finally:
        e.stop()


def test_a_push_past_the_drain_time_closes_the_held_requests_and_gives_their_slots_back(tmp_path):
    # Envoy closes the replaced listener's connections when its drain time
    # (1 s) ends: requests still held then see their connection closed
    e = start(tmp_path, drain_time_s=1)
    try:
        held = Held(e)
        pushed = time.monotonic()
        assert e.push_config(paced(extra_rule=True))
        outcomes = held.outcomes()
        pushed = held.since_start(pushed)
        answered = [o for o in outcomes if o[1] == 200]
        closed = [at for at, status in outcomes if status == "closed"]
        assert len(answered) + len(closed) == HELD + 1, outcomes
        assert_on_time(answered)
        assert closed, outcomes
        # all at once, at the end of the drain, before their time and within max_delay
        assert max(closed) - min(closed) <= 0.2, outcomes
        assert pushed + 0.9 <= min(closed) and max(closed) <= MAX_DELAY + MARGIN, (pushed, outcomes)
        for k, at in enumerate(closed, start=len(answered)):
            assert at < answered[0][0] + k * STEP + TOLERANCE, outcomes
        # Without anything back, the next request would wait for the last
        # slot (2.25 s from the first answer); the closed requests gave at
        # least one slot back.
        asked = held.since_start(time.monotonic())
        r = request(e.port, "/")
        assert r.status == 200
        waited_ms = int(r.headers.get("x-sluice-delayed-ms", "0"))
        without_give_back_ms = (answered[0][0] + HELD * STEP - asked) * 1000
        assert waited_ms <= without_give_back_ms - STEP * 1000 + TOLERANCE * 1000, (waited_ms, asked, outcomes)
        print(f"[exits] push past the drain: {len(answered)} answered at their time, {len(closed)} closed at "
              f"{min(closed):.2f}s; the next request waited {waited_ms} ms ({without_give_back_ms:.0f} ms "
              f"without any slot back)")
        # every request counted when it was held, the closed ones too
        assert_counted(e, allowed=HELD + 2, delayed=HELD + (1 if waited_ms else 0))
    finally:
        e.stop()


# ---------------------------------------------------------------- drains and exits

def test_a_graceful_drain_keeps_every_held_request_then_envoy_quits(tmp_path):
    e = start(tmp_path, drain_time_s=5)
    try:
        held = Held(e)
        assert request(e.admin_port, "/drain_listeners?graceful", method="POST").status == 200
        assert_all_on_time(held.outcomes())
        assert_counted(e, allowed=HELD + 1, delayed=HELD)
        assert request(e.admin_port, "/quitquitquit", method="POST").status == 200
        wait_until(lambda: not e.process.alive(), what="envoy exiting")
    finally:
        e.stop()


def test_sigterm_closes_the_held_requests_at_once(tmp_path):
    e = start(tmp_path)
    try:
        held = Held(e)
        signalled = time.monotonic()
        e.process.send_signal(signal.SIGTERM)
        outcomes = held.outcomes()
        signalled = held.since_start(signalled)
        assert outcomes[0][1] == 200
        assert [status for _, status in outcomes[1:]] == ["closed"] * HELD, outcomes
        assert all(at - signalled <= MARGIN for at, _ in outcomes[1:]), (signalled, outcomes)
        wait_until(lambda: not e.process.alive(), what="envoy exiting")
    finally:
        e.stop()


def test_a_hot_restart_leaves_the_held_requests_to_the_old_epoch(tmp_path):
    # the old epoch drains for 1 s and lives 4 s: longer than any hold
    e = start(tmp_path, drain_time_s=1, hot_restart=True, parent_shutdown_time_s=4)
    try:
        held = Held(e)
        old = e.process
        t0 = time.monotonic()
        e.hot_restart()
        live = time.monotonic() - t0
        assert_all_on_time(held.outcomes())
        assert old.alive()
        # the new epoch's requests are decided by its own (fresh) shared data
        assert request(e.port, "/").status == 200
        wait_until(lambda: not old.alive(), what="the old epoch exiting by itself")
        print(f"[exits] hot restart: new epoch live in {live:.2f}s, the old one exited "
              f"{time.monotonic() - t0:.2f}s after the restart began")
    finally:
        e.stop()


# ---------------------------------------------------------------- local limits across restarts

SPENT = 5


def spend_local(e) -> list[int]:
    """The statuses of SPENT + 2 requests of one key with a local limit of SPENT per hour."""
    return [request(e.port, "/", headers={"x-user": "u"}).status for _ in range(SPENT + 2)]


def local_config() -> dict:
    return sluice_config([{"name": "hourly", "key": ["header:x-user"],
                           "limits": [{"algorithm": "fixed_window", "requests": SPENT, "window": "1h"}]}])


def test_local_limits_start_afresh_after_a_hot_or_cold_restart(tmp_path):
    e = start_envoy(tmp_path, [wasm_filter(local_config())], concurrency=1, hot_restart=True,
                    parent_shutdown_time_s=2)
    try:
        expected = [200] * SPENT + [429] * 2
        assert spend_local(e) == expected
        # hot restart: the new epoch's shared data is its own, the old one's
        # counts stay behind (while both run, the key is admitted in each)
        e.hot_restart()
        assert spend_local(e) == expected
        # cold restart: a new process, new shared data
        e.cold_restart()
        assert e.epoch == 0
        assert spend_local(e) == expected
    finally:
        e.stop()
