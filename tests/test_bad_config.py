"""Bad configurations are refused by Envoy, with the field named, and Envoy keeps serving."""

import json

import pytest

from support import request, sluice_config

GOOD_RULE = {"name": "r", "key": ["const:x"], "limits": [{"algorithm": "gcra", "requests": 1, "window": "1h"}]}


def with_limit(**changes):
    limit = dict(GOOD_RULE["limits"][0], **changes)
    return json.dumps(sluice_config([dict(GOOD_RULE, limits=[limit])]))


BAD = {
    "unknown top-level field": (json.dumps({"domain": "d", "rules": [], "bogus_field": 1}), "bogus_field"),
    "unknown rule field": (json.dumps(sluice_config([dict(GOOD_RULE, colour="red")])), "colour"),
    "zero window": (with_limit(window="0s"), "window"),
    "malformed window": (with_limit(window="fast"), "window"),
    "zero requests": (with_limit(requests=0), "requests"),
    "negative requests": (with_limit(requests=-5), "requests"),
    "unknown algorithm": (with_limit(algorithm="leaky"), "algorithm"),
    "unknown key part": (json.dumps(sluice_config([dict(GOOD_RULE, key=["cookie:x"])])), "key"),
    "missing domain": (json.dumps({"rules": []}), "domain"),
    "bad headers mode": (json.dumps(sluice_config([], headers="fancy")), "headers"),
    "global limit without limiter": (with_limit(scope="global"), "limiter"),
    "malformed json": ('{"domain": "d", "rules": [', "configuration"),
    "not an object": ("[1, 2, 3]", "configuration"),
}


@pytest.fixture
def running(envoy):
    e = envoy(sluice_config([GOOD_RULE]))
    assert request(e.port, "/").status == 200  # spends the one request of the good rule
    return e


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_configuration_is_refused_with_the_field_named(running, case):
    config, field = BAD[case]
    assert not running.push_config(config), f"Envoy accepted a bad configuration ({case})"
    log = running.log()
    lines = [line for line in log.splitlines() if "sluice" in line and "invalid configuration" in line]
    assert lines, f"no 'invalid configuration' line in the log:\n{log[-3000:]}"
    assert field in lines[-1], f"the log line does not name {field!r}: {lines[-1]}"
    # Envoy is alive, still serving the old configuration with its counters
    assert running.process.alive()
    assert request(running.port, "/").status == 429
    assert running.sluice_stat("sluice.config_errors") >= 1


def test_empty_rules_list_is_fine(running):
    assert running.push_config(json.dumps({"domain": "d", "rules": []}))
    assert request(running.port, "/").status == 200
