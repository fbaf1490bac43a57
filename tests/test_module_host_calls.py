"""The host calls the built module (`build/sluice.wasm`) makes per request,
driven in Node's V8 by `bench/v8host.js` (a proxy-wasm host with in-memory
calls): the same lists as the driver's native test
(`crates/filter/src/driver/tests/host_calls.rs`), here through the host
layer (`src/host`) and the proxy-wasm SDK, where a call the native test
cannot see would be added. Skipped without `node`.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from support import ROOT, SLUICE_WASM

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

GCRA = {"algorithm": "gcra", "requests": 1000, "window": "1s"}


def calls(tmp_path, config: dict, making: str | None = None) -> list[str]:
    """The host calls of one request (after 1,000) under `config`; with
    `making`, of the first after them that makes that call, and what its
    root does for it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    which = ["--calls-with", making] if making else ["--calls"]
    out = subprocess.run([NODE, str(ROOT / "bench" / "v8host.js"), str(SLUICE_WASM), "--config", str(path),
                          *which], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def local(limit: dict = GCRA, **top) -> dict:
    return {"domain": "t", **top, "rules": [{"name": "r", "key": ["client_ip"], "limits": [limit]}]}


def global_(sync: dict | None = None) -> dict:
    """One global limit keyed by client address, asked of a limiter the V8
    host answers at once (every limit allows, leases granted as asked)."""
    limit = {**GCRA, "scope": "global", **({"sync": sync} if sync else {})}
    return local(limit, limiter={"cluster": "limiter", "authority": "limiter", "timeout": "50ms"})


def test_a_request_under_one_local_limit(tmp_path):
    assert calls(tmp_path, local()) == ["property", "get", "now", "set", "add_header", "add_header"]


def test_a_request_keyed_by_a_trusted_x_forwarded_for_entry(tmp_path):
    # The bench's local-gcra row.
    assert calls(tmp_path, local(client_ip={"xff_trusted_hops": 1})) == [
        "header", "property", "get", "now", "set", "add_header", "add_header"]


def test_behind_an_envoy_declared_to_append_no_property_is_read(tmp_path):
    # The request's one x-forwarded-for entry is the proxy's, as sent.
    config = local(client_ip={"xff_trusted_hops": 1, "envoy_xff": "as_sent"})
    assert calls(tmp_path, config) == ["header", "get", "now", "set", "add_header", "add_header"]


def test_without_headers_the_response_makes_no_call(tmp_path):
    assert calls(tmp_path, local(headers="none")) == ["property", "get", "now", "set"]


def test_a_denied_request(tmp_path):
    once = {"algorithm": "gcra", "requests": 1, "window": "1h"}
    assert calls(tmp_path, local(once)) == [
        "property", "get", "now",  # no write: the state is unchanged
        "set_property", "set_property",  # the outcome and rule, for the access log
        "header",  # content-type: a gRPC request gets a gRPC denial
        "send_local_response"]


def test_a_request_under_one_global_limit(tmp_path):
    assert calls(tmp_path, global_()) == [
        "property", "now",
        "get",  # the over-limit cache
        "http_call",
        # The answer comes to the root context: the SDK moves to the
        # request's own before handing it over.
        "set_effective_context",
        "header", "buffer",  # the answer's :status and body
        "continue_stream", "add_header", "add_header"]


def test_a_request_that_starts_a_lease_renewal_and_the_root_that_sends_it(tmp_path):
    assert calls(tmp_path, global_({"mode": "lease", "max_share": "10%"}), making="enqueue") == [
        "property", "now", "get", "set",  # spent from the lease, the renewal asked for
        "enqueue",  # the root woken
        "dequeue", "dequeue",  # its queue emptied
        "set_effective_context", "http_call",  # the renewal, the root's call
        "set_effective_context",  # the answer (the SDK's move to the root)
        "header", "buffer",  # its :status and body
        "get", "set",  # the grant installed
        "add_header", "add_header"]


def test_a_request_under_a_leased_limit_once_its_lease_runs(tmp_path):
    # A local limit's calls: the lease's read and compare-and-swap write.
    assert calls(tmp_path, global_({"mode": "lease", "max_share": "10%"})) == [
        "property", "now", "get", "set", "add_header", "add_header"]


@pytest.mark.skipif(shutil.which("wasm-opt") is None, reason="binaryen is not installed")
def test_the_memory_lines_of_a_request_are_counted_by_where_they_are():
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import memlines

    local_lines = memlines.lines(SLUICE_WASM)
    assert local_lines["lines"] == local_lines["stack"] + local_lines["data"] + local_lines["heap"]
    # A request has a stack, reads the configuration's and the SDK's
    # statics and its own heap records.
    assert min(local_lines["stack"], local_lines["data"], local_lines["heap"]) > 0



# The module code a request runs (`bench/codelines.py`: wasm instructions of
# the stretches it enters), per configuration shape. Envoy pays for that
# code beyond its CPU in isolation (bench/README.md, the local bullet): a
# change that grows one past its budget fails here, and one that shrinks it
# lowers the budget. The bench's rows: keyed behind one trusted proxy.
BEHIND_ONE_PROXY = {"client_ip": {"xff_trusted_hops": 1}}
CODE_BUDGETS = {
    "local": (lambda: local(**BEHIND_ONE_PROXY), 11_200),
    # The check's call and the limiter's answer, through the root.
    "global": (lambda: {**global_(), **BEHIND_ONE_PROXY}, 16_400),
    # A request served from the lease (no renewal due).
    "leased": (lambda: {**global_({"mode": "lease", "max_share": "10%"}), **BEHIND_ONE_PROXY}, 10_500),
    # The request that starts a renewal, and its root's call and answer
    # (once per 50 to 60 requests at the bench's share).
    "renewal": (lambda: {**global_({"mode": "lease", "max_share": "10%"}), **BEHIND_ONE_PROXY}, 17_200, "enqueue"),
}


@pytest.mark.skipif(shutil.which("wasm2wat") is None, reason="wabt is not installed")
@pytest.mark.parametrize("shape", CODE_BUDGETS)
def test_the_code_a_request_runs_stays_within_its_budget(tmp_path, shape):
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import codelines

    config, budget, *making = CODE_BUDGETS[shape]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config()))
    by_function = codelines.run(SLUICE_WASM, path, *making)
    run = sum(by_function.values())
    # The SDK's context bookkeeping alone is over 2,000 (the no-op filter's).
    assert 2_000 < run <= budget, f"a {shape} request runs {run} instructions of the module"


def example_configs() -> dict[str, dict]:
    """The filter configurations of the examples in `envoy/`, by file."""
    import yaml

    found = {}

    def walk(node, name):
        if isinstance(node, dict):
            if node.get("@type", "").endswith("StringValue") and "rules" in node.get("value", ""):
                found[name] = json.loads(node["value"])
            for value in node.values():
                walk(value, name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for path in sorted((ROOT / "envoy").glob("envoy*.yaml")):
        walk(yaml.safe_load(path.read_text()), path.name)
    return found


PUSHED = {
    "local": local,
    "coalesced": lambda: global_({"mode": "coalesce"}),
    "leased": lambda: global_({"mode": "lease", "max_share": "10%"}),
    **{name: (lambda c=config: c) for name, config in example_configs().items()},
}


@pytest.mark.parametrize("shape", PUSHED)
def test_configuration_pushes_leave_the_modules_memory_where_it_was(tmp_path, shape):
    """5,000 pushes (a new root configured, the one it replaces deleted,
    then ten requests under the new one) grow the module's memory by not
    one page: a root's state is freed with it (with the replaced roots
    kept, `envoy/envoy.yaml`'s configuration grows it by 27 MB)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PUSHED[shape]()))
    out = subprocess.run([NODE, str(ROOT / "bench" / "v8host.js"), str(SLUICE_WASM), "--config", str(path),
                          "--pushes", "5000"], capture_output=True, text=True, timeout=300, check=True)
    memory = json.loads(out.stdout)
    assert memory["pushes"] == 5000 and memory["after"] == memory["before"], memory
