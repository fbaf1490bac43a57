"""The chaos soak's steady clients: a fixed set of clients that each must get
exactly their quota in every window, whatever else happens.

Each client sends `per_window` requests in every `window`-second window,
evenly spaced, and must get exactly `STEADY_QUOTA` admitted in each, the
rest denied.

- Global clients go through both Envoys in turn (one limiter check per
  request), on a key of their own that is fresh in each window
  (`g{i}-w{window}`): its limit (`STEADY_QUOTA` per hour) refills nothing
  within a window.
- Local clients go through Envoy 0 alone (its shared data holds their
  counters), each on one key for the whole run, against a fixed window of
  `STEADY_QUOTA` per `window` seconds: windows are aligned to the Unix
  epoch, and a client sends inside each from 0.2 s after its start to
  0.2 s before its end. (Fresh keys against an hour-long local limit would
  leave hundreds of spent buckets in the limit's `local_max_keys` slots,
  and a new key sharing a slot with a spent one is limited early: by
  design, see the bounded key space in docs/concepts/local-limits.md.)

`verdicts()` judges every finished window: exact, or why not.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field

STEADY_QUOTA = 10
STEADY_WINDOW_S = 10.0
STEADY_PER_WINDOW = 25
GLOBAL_HEADER = "x-steady-g"
LOCAL_HEADER = "x-steady-l"


@dataclass
class Window:
    """What one client's requests on one window's key got."""
    admitted: int = 0
    denied: int = 0
    other: int = 0  # other statuses, connection errors, timeouts
    latencies_ms: list[float] = field(default_factory=list)


class Client(threading.Thread):
    """One steady client: `per_window` requests per window on its own key, on
    keep-alive connections to `ports` (in turn)."""

    def __init__(self, name: str, header: str, ports: list[int], started: float, stop: threading.Event,
                 window: float = STEADY_WINDOW_S, per_window: int = STEADY_PER_WINDOW, timeout: float = 2.0,
                 aligned: bool = False):
        super().__init__(daemon=True, name=f"steady-{name}")
        self.client = name
        self.header = header
        self.ports = ports
        self.started = started
        self.stop_event = stop
        self.window = window
        self.per_window = per_window
        self.timeout = timeout
        # aligned: one key, windows of the Unix epoch (numbered from it); else a fresh key per window from `started`
        self.aligned = aligned
        self.wall_offset = time.time() - time.monotonic()
        self.windows: dict[int, Window] = {}
        self.conns: dict[int, http.client.HTTPConnection] = {}

    def send(self, port: int, key: str) -> tuple[int | None, float]:
        """One request: (status or None on an error, latency in ms)."""
        began = time.monotonic()
        for attempt in (0, 1):
            conn = self.conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=self.timeout)
            self.conns[port] = conn
            try:
                conn.request("GET", "/", headers={self.header: key})
                resp = conn.getresponse()
                resp.read()
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    self.conns.pop(port, None)
                return resp.status, (time.monotonic() - began) * 1000
            except (OSError, http.client.HTTPException):
                conn.close()
                self.conns.pop(port, None)
                # a keep-alive connection closed by a listener drain: once more on a new one
                if attempt == 1 or time.monotonic() - began > self.timeout:
                    return None, (time.monotonic() - began) * 1000
        return None, (time.monotonic() - began) * 1000

    def due(self, i: int) -> tuple[int, float, str]:
        """The window of request `i`, when it is due (time.monotonic()) and its key."""
        if not self.aligned:
            w = int(i // self.per_window)
            return w, self.started + i * self.window / self.per_window, f"{self.client}-w{w}"
        margin = 0.2
        first = int((self.started + self.wall_offset) // self.window) + 1  # the first whole window
        w = first + i // self.per_window
        step = (self.window - 2 * margin) / (self.per_window - 1)
        return w, w * self.window + margin + (i % self.per_window) * step - self.wall_offset, self.client

    def start_of(self, w: int) -> float:
        """When window `w` starts (time.monotonic())."""
        return w * self.window - self.wall_offset if self.aligned else self.started + w * self.window

    def run(self):
        i = 0
        while not self.stop_event.is_set():
            w, due, key = self.due(i)
            wait = due - time.monotonic()
            if wait > 0 and self.stop_event.wait(wait):
                break
            status, ms = self.send(self.ports[i % len(self.ports)], key)
            win = self.windows.setdefault(w, Window())
            if status == 200:
                win.admitted += 1
            elif status == 429:
                win.denied += 1
            else:
                win.other += 1
            win.latencies_ms.append(ms)
            i += 1
        for conn in self.conns.values():
            conn.close()


class SteadyClients:
    """`globals_` global and `locals_` local clients, from now until `stop()`."""

    def __init__(self, envoy_ports: list[int], globals_: int = 4, locals_: int = 4,
                 window: float = STEADY_WINDOW_S, per_window: int = STEADY_PER_WINDOW):
        self.started = time.monotonic()
        self.window = window
        self.per_window = per_window
        self._stop = threading.Event()
        self.clients = (
            [Client(f"g{i}", GLOBAL_HEADER, envoy_ports, self.started, self._stop, window, per_window)
             for i in range(globals_)]
            + [Client(f"l{i}", LOCAL_HEADER, envoy_ports[:1], self.started, self._stop, window, per_window,
                      aligned=True)
               for i in range(locals_)])
        for c in self.clients:
            c.start()

    def stop(self):
        self._stop.set()
        for c in self.clients:
            c.join()

    def verdicts(self, quota: int = STEADY_QUOTA) -> list[dict]:
        """Per client and finished window: its counts and `exact` (exactly
        `quota` admitted, every other request denied)."""
        out = []
        for c in self.clients:
            for w, win in sorted(c.windows.items()):
                sent = win.admitted + win.denied + win.other
                if sent < self.per_window:
                    continue  # the window the run stopped in
                out.append({"client": c.client, "scope": "global" if c.header == GLOBAL_HEADER else "local",
                            "window": w, "start": c.start_of(w), "end": c.start_of(w) + self.window,
                            "admitted": win.admitted, "denied": win.denied, "other": win.other,
                            "exact": win.admitted == quota and win.other == 0})
        return out


def disturbed(v: dict, faults: list[dict], t0: float, margin: float) -> bool:
    """Whether window verdict `v` overlaps a fault that reaches the global
    store (`store: True`), from its start to `margin` s after its end
    (`faults` in s since `t0`)."""
    for f in faults:
        if f.get("store") and t0 + f["start"] < v["end"] and v["start"] < t0 + f["end"] + margin:
            return True
    return False
