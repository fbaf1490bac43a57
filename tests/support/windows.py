"""Windows aligned to the clock: waiting until a sequence of requests
fits in one, so that a test never straddles a boundary by chance."""

from __future__ import annotations

import time


def away_from_window_boundary(window_s: float, margin_s: float = 0.6) -> None:
    """Waits, if needed, until the wall clock is at least `margin_s` into an
    epoch-aligned window of `window_s` seconds and `margin_s` from its end."""
    into = time.time() % window_s
    if into < margin_s:
        time.sleep(margin_s - into)
    elif window_s - into < margin_s:
        time.sleep(window_s - into + margin_s)
