"""The "Stop brute-force logins" guide, run as written: `envoy/envoy-login.yaml`
(its login routes and its Sluice configuration, unchanged) in a real Envoy.

Failed logins are counted per client address (5 per 10 minutes, then a
15-minute penalty box) and per username from the JSON body (10 per hour);
successful logins are never counted. The addresses come from the
X-Forwarded-For entry the guide trusts (`xff_trusted_hops: 1`).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from support import ENVOY_BIN, ROOT, SLUICE_WASM, Envoy, Process, free_port, request
from support.processes import wait_until

GUIDE_ENVOY = ROOT / "envoy" / "envoy-login.yaml"
GUIDE = ROOT / "docs" / "guides" / "stop-brute-force-logins.md"
BLOCK_S = 15 * 60
WINDOW_S = 10 * 60


def guide_config() -> dict:
    """The Sluice configuration of `envoy/envoy-login.yaml`."""
    boot = yaml.safe_load(GUIDE_ENVOY.read_text())
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    sluice = hcm["http_filters"][0]["typed_config"]["config"]
    return json.loads(sluice["configuration"]["value"])


@pytest.fixture
def login(tmp_path):
    """`envoy/envoy-login.yaml` as `scripts/run.sh` renders a checked-in
    configuration: this build's wasm, loopback ports chosen now."""
    port, service, admin = free_port(), free_port(), free_port()
    text = (GUIDE_ENVOY.read_text()
            .replace("/etc/envoy/sluice.wasm", str(SLUICE_WASM))
            .replace("address: 0.0.0.0, port_value: 10000", f"address: 127.0.0.1, port_value: {port}")
            .replace("address: 0.0.0.0, port_value: 9901", f"address: 127.0.0.1, port_value: {admin}")
            .replace("port_value: 10001", f"port_value: {service}"))
    config = tmp_path / "envoy-login.yaml"
    config.write_text(text)
    env = Envoy(tmp_path, port, admin)
    env.process = Process([str(ENVOY_BIN), "-c", str(config), "--concurrency", "2", "--disable-hot-restart",
                           "--base-id", str(admin)], tmp_path / "envoy.log")
    try:
        wait_until(lambda: request(port, "/").status == 200, what="the guide's Envoy")
        yield env
    finally:
        env.stop()


def attempt(env, address: str, user: str, good: bool = False, form: bool = False):
    """A login as JSON, or (`form`) as a login form posts it."""
    headers = {"x-forwarded-for": address,
               "content-type": "application/x-www-form-urlencoded" if form else "application/json"}
    if good:
        headers["x-password"] = "open-sesame"
    fields = {"username": user, "password": "guess"}
    body = (urllib.parse.urlencode(fields) if form else json.dumps(fields)).encode()
    return request(env.port, "/login", method="POST", headers=headers, body=body)


def fresh_address() -> str:
    n = uuid.uuid4().int
    return f"10.{n % 250 + 1}.{n // 250 % 250 + 1}.{n // 62500 % 250 + 1}"


def test_the_guide_uses_this_configuration():
    text = GUIDE.read_text()
    assert "envoy/envoy-login.yaml" in text
    cfg = guide_config()
    blocks = [b for b in text.split("```json\n")[1:]]
    configs = [json.loads(b.split("\n```", 1)[0]) for b in blocks]
    assert cfg in configs, "the guide's configuration and envoy/envoy-login.yaml differ"


def test_failed_logins_are_cut_off_after_exactly_five_and_the_address_is_boxed(login):
    a, b = fresh_address(), fresh_address()
    # Successful logins are never counted.
    assert [attempt(login, a, "alice", good=True).status for _ in range(8)] == [200] * 8
    statuses = [attempt(login, a, f"user-{i}").status for i in range(20)]
    assert statuses == [401] * 5 + [429] * 15
    # Boxed: even the right password is refused, for the block, not the window.
    boxed = attempt(login, a, "alice", good=True)
    assert boxed.status == 429
    assert WINDOW_S < int(boxed.headers["retry-after"]) <= BLOCK_S
    # Another address is untouched.
    assert attempt(login, b, "carol").status == 401
    assert attempt(login, b, "carol", good=True).status == 200
    assert login.sluice_stat("sluice.config_errors") == 0


def test_one_username_is_cut_off_after_ten_failures_from_any_address(login):
    user = f"bob-{uuid.uuid4().hex[:8]}"
    # Spelled in any case, posted as JSON or as a form, it is one user.
    spellings = [user, user.upper(), user.capitalize()]
    statuses = [attempt(login, fresh_address(), spellings[n % 3], form=n % 2 == 1).status for n in range(14)]
    assert statuses == [401] * 10 + [429] * 4
    # Its successful logins are refused too until the hour ends; other users are not.
    assert attempt(login, fresh_address(), user, good=True).status == 429
    assert attempt(login, fresh_address(), "dave", good=True).status == 200


def test_thirty_two_connections_of_failures_get_exactly_five_through(login):
    a = fresh_address()
    start = threading.Barrier(32)

    def client(i: int) -> list[int]:
        start.wait()
        return [attempt(login, a, f"eve-{i}-{j}").status for j in range(4)]

    with ThreadPoolExecutor(32) as pool:
        statuses = [s for out in pool.map(client, range(32)) for s in out]
    assert statuses.count(401) == 5
    assert statuses.count(429) == 123
