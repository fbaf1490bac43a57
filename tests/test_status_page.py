"""The limiter's status page (`GET /status`, with `--introspection`) renders
in a real browser (headless Chromium, Debian's package) what the API says.

A flood of checks from one key, a few refusals of another (a key that is
markup, shown as text) and calm traffic from many: the rendered page lists
the flooding key first, and every top key's refusals equal to `/v1/top`'s. Exactness: the traffic has ended before
the browser loads the page and the summary's windows (`--top-window-s`,
an hour) do not turn within the test, so `/v1/top` answers the same before
and after the render (the test checks both). The page also shows the
descriptors' limits and the store's health, refreshes itself every 5
seconds (counted over 12 s of Chromium's virtual time), loads nothing but
from the limiter (its Content-Security-Policy), and is kept as a screenshot.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from support import free_port, request, run_load

CHROMIUM = shutil.which("chromium")
DESCRIPTORS = """\
domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10, name: per-ip}
"""
FLOOD, MILD = 2_000, 7
# A key that is markup: the page shows it as text.
MILD_KEY = "<b>mild</b>"


class Rendered(HTMLParser):
    """What the rendered DOM shows: the health, each domain's limits rows'
    cells and top keys' rows (cells), and the error line."""

    def __init__(self):
        super().__init__()
        self.domain = None
        self.cells: list[str] | None = None
        self.row_kind = None
        self.text_of: str | None = None
        self.health = ""
        self.error_hidden = False
        self.top: dict[str, list[list[str]]] = {}
        self.limits: dict[str, list[list[str]]] = {}
        self.refreshes = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.refreshes = int(a.get("data-refreshes", "0"))
        elif tag == "section":
            self.domain = a.get("data-domain")
        elif tag == "tr" and self.domain is not None:
            self.row_kind = "top" if a.get("class") == "top-key" else "limits"
            self.cells = []
        elif tag in ("td", "th") and self.cells is not None:
            self.cells.append("")
            self.text_of = "cell"
        elif tag == "span" and a.get("id") == "health":
            self.text_of = "health"
        elif a.get("id") == "error":
            self.error_hidden = "hidden" in a

    def handle_endtag(self, tag):
        if tag == "tr" and self.cells is not None:
            if self.cells and not any(c == "#" or c == "descriptors" for c in self.cells):
                (self.top if self.row_kind == "top" else self.limits).setdefault(self.domain, []).append(self.cells)
            self.cells = None
        if tag in ("td", "th", "span"):
            self.text_of = None

    def handle_data(self, data):
        if self.text_of == "cell" and self.cells:
            self.cells[-1] += data
        elif self.text_of == "health":
            self.health += data


def chromium(url: str, tmp_path, *args: str, budget_ms: int = 4000) -> subprocess.CompletedProcess:
    """Chromium run on `url` for `budget_ms` of virtual time (timers run as
    if that much time passed; waits on the network do not count)."""
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args, url],
        capture_output=True, text=True, timeout=120)


def top(port: int, domain: str) -> dict:
    r = request(port, f"/v1/top?domain={domain}&n=20")
    assert r.status == 200
    return json.loads(r.body)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make chromium)")
def test_the_status_page_names_the_flooding_key_first_with_the_apis_figures(processes, tmp_path):
    descriptors = tmp_path / "descriptors.yaml"
    descriptors.write_text(DESCRIPTORS)
    limiter = processes.limiter(extra_args=[
        "--introspection", "--introspection-keys", "clear", "--top-window-s", "3600",
        "--descriptors", str(descriptors), "--grpc-listen", f"127.0.0.1:{free_port()}"])
    url = f"http://127.0.0.1:{limiter.port}/v1/check"
    check = ('{"domain":"api","limits":[{"key":"%s","algorithm":"fixed_window",'
             '"requests":5,"window_ms":3600000}]}')
    assert run_load(url, connections=4, requests=FLOOD, body=check % "flood-client").count(200) == FLOOD
    assert run_load(url, connections=1, requests=MILD, body=check % MILD_KEY).count(200) == MILD
    assert run_load(url, connections=4, requests=200, body=check % "calm-{n}").count(200) == 200

    before = top(limiter.port, "api")
    assert before == {"domain": "api", "keys": [
        {"key": "flood-client", "limit": "fixed_window|3600000", "refusals": FLOOD - 5, "error": 0},
        {"key": MILD_KEY, "limit": "fixed_window|3600000", "refusals": MILD - 5, "error": 0}]}

    page = request(limiter.port, "/status")
    assert page.status == 200
    assert page.header("content-type") == "text/html; charset=utf-8"
    assert "default-src 'none'" in page.header("content-security-policy")
    assert b"http://" not in page.body and b"https://" not in page.body

    dump = chromium(f"http://127.0.0.1:{limiter.port}/status", tmp_path, "--dump-dom")
    assert dump.returncode == 0, dump.stderr[-2000:]
    rendered = Rendered()
    rendered.feed(dump.stdout)
    after = top(limiter.port, "api")
    assert after == before

    assert (rendered.health, rendered.error_hidden, rendered.refreshes) == ("up", True, 1)
    assert rendered.top == {"api": [[str(i + 1), k["key"], k["limit"], str(k["refusals"]), str(k["error"])]
                                    for i, k in enumerate(after["keys"])]}
    assert rendered.top["api"][0][1:4] == ["flood-client", "fixed_window|3600000", "1995"]
    assert rendered.top["api"][1][1] == "<b>mild</b>"
    assert rendered.limits == {"shop": [["remote_address", "per-ip", "10 / second", "enforce"]]}

    # it refreshes by itself every 5 s: at 0, 5 and 10 s of 12 s
    later = Rendered()
    later.feed(chromium(f"http://127.0.0.1:{limiter.port}/status", tmp_path, "--dump-dom", budget_ms=12_000).stdout)
    assert (later.refreshes, later.top) == (3, rendered.top)

    screenshot = tmp_path / "status.png"
    shot = chromium(f"http://127.0.0.1:{limiter.port}/status", tmp_path, f"--screenshot={screenshot}",
                    "--window-size=1200,900")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"status page screenshot: {screenshot}")


def test_without_introspection_the_page_is_404(processes):
    limiter = processes.limiter()
    r = request(limiter.port, "/status")
    assert (r.status, json.loads(r.body)) == (
        404, {"error": "introspection is off (start sluice-limiter with --introspection)"})
