"""The shipped Grafana dashboard (deploy/grafana/sluice.json) and the
recording rules it draws (deploy/prometheus/sluice-recording.yaml) work.

The dashboard is Grafana's published dashboard model: decoded with the types
of Grafana's Foundation SDK (PyPI `grafana-foundation-sdk`), every field of
the file survives the round trip, and each query decodes as a Prometheus
query. A real Prometheus scraping a live stack (an Envoy with local, global
and shadow rules, a concurrency limit and a cost from the response, through
the documented `stats_tags`; a limiter with `--introspection`) under limited
traffic returns, for every panel query and every recording rule, series with
the labels the panel shows; queries the stack cannot feed are listed in
`NOT_PRODUCED` with the reason.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

import support
from support import ROOT, concurrent_requests, limiter_cluster, request, sluice_config, wait_until
from test_alerts import PROMETHEUS, RECORDING, RULES, Prometheus, stats_config, unhealthy

DASHBOARD = ROOT / "deploy" / "grafana" / "sluice.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries() -> list[tuple[str, str]]:
    """Each panel's title and query, with `$rule` at its "All" value."""
    return [(panel["title"], target["expr"].replace("$rule", ".*"))
            for panel in dashboard()["panels"] for target in panel["targets"]]


def recorded() -> list[str]:
    groups = yaml.safe_load(RECORDING.read_text())["groups"]
    return [rule["record"] for group in groups for rule in group["rules"]]


def dropped(original, decoded, path="") -> list[str]:
    """The paths of `original` that `decoded` lost or changed (defaults it
    added are fine)."""
    if isinstance(original, dict) and isinstance(decoded, dict):
        return [p for key, value in original.items()
                for p in ([f"{path}/{key}"] if key not in decoded else dropped(value, decoded[key], f"{path}/{key}"))]
    if isinstance(original, list) and isinstance(decoded, list) and len(original) == len(decoded):
        return [p for i, (a, b) in enumerate(zip(original, decoded)) for p in dropped(a, b, f"{path}[{i}]")]
    return [] if original == decoded else [path]


def test_the_dashboard_is_grafanas_dashboard_model():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import prometheus, table, timeseries
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    original = dashboard()
    model = Dashboard.from_json(original)
    assert dropped(original, json.loads(JSONEncoder().encode(model))) == []
    options = {"timeseries": timeseries.Options, "table": table.Options}
    for panel in model.panels:
        assert isinstance(panel.options, options[panel.type_val]), panel.title
        assert all(isinstance(t, prometheus.Dataquery) for t in panel.targets), panel.title


def test_every_panel_reads_the_datasource_variable_and_rules_filter_by_the_rule_variable():
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert variables["rule"]["query"]["query"] == "label_values(sluice_denied, sluice_rule)"
    for panel in board["panels"]:
        assert panel["datasource"] == DATASOURCE
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE
            assert ("sluice_rule" in target["expr"]) == ('sluice_rule=~"$rule"' in target["expr"]), target["expr"]


def test_every_recording_rule_is_drawn_by_a_panel_or_another_rule():
    groups = yaml.safe_load(RECORDING.read_text())["groups"]
    exprs = [expr for _, expr in queries()] + [rule["expr"] for group in groups for rule in group["rules"]]
    used = {name for expr in exprs for name in re.findall(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+", expr)}
    assert used == set(recorded())


# ---------------------------------------------------------------- a live scrape

# A flood from user "flood" (the local rules refuse it) and one from team
# "noisy" (the global rule refuses it), four calm users: each rule keys on
# one of the two headers and skips requests without it.
RULES_LIVE = [
    {"name": "local-per-user", "key": ["header:x-user"],
     "limits": [{"algorithm": "fixed_window", "requests": 3, "window": "1h"}]},
    {"name": "global-per-team", "key": ["header:x-team"],
     "limits": [{"algorithm": "fixed_window", "requests": 3, "window": "1h", "scope": "global"}]},
    {"name": "shadow-per-user", "key": ["header:x-user"], "mode": "shadow",
     "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "1h"}]},
    {"name": "inflight", "key": ["const:all"], "limits": [{"concurrency": 64}]},
    {"name": "tokens", "key": ["header:x-user"], "cost": {"estimate": 1, "response": "header:x-cost"},
     "limits": [{"algorithm": "fixed_window", "requests": 1000, "window": "1h"}]},
]
ALL_RULES = {rule["name"] for rule in RULES_LIVE}
# the rules with a local limit, the concurrency limit (its permit slots) among them
LOCAL_RULES = {"local-per-user", "shadow-per-user", "tokens", "inflight"}

# The label each query's series are told apart by, and the values the live
# stack gives it (None: a single series without labels).
EXPECTED: dict[str, tuple[str | None, set[str]]] = {
    "sluice_rule:sluice_allowed:rate5m": ("sluice_rule", ALL_RULES),
    "sluice_rule:sluice_denied:rate5m": ("sluice_rule", ALL_RULES),
    "sluice_rule:sluice_shadow_denied:rate5m": ("sluice_rule", ALL_RULES),
    "sluice_rule:sluice_denial_ratio:rate5m": ("sluice_rule", ALL_RULES),
    "domain_result:sluice_limiter_decisions:rate5m": ("result", {"allowed", "denied"}),
    "sluice_limiter:check_duration_seconds:p99_5m": (None, set()),
    "sluice_reason:sluice_limiter_failed:rate5m": ("sluice_reason", {"unreachable", "timeout", "status", "unreadable"}),
    "sum(rate(sluice_failure_mode_allowed[5m]))": (None, set()),
    "sum(rate(sluice_limiter_errors[5m]))": (None, set()),
    "sluice_limiter:store_up:min": (None, set()),
    "sluice_limiter:store_errors:rate5m": (None, set()),
    "instance:sluice_limiter_store_occupancy:ratio": ("job", {"limiter"}),
    "sluice_rule:sluice_table_full:rate5m": ("sluice_rule", LOCAL_RULES),
    "max by (sluice_rule) (sluice_table_full_workers)": ("sluice_rule", LOCAL_RULES),
    "sluice_rule:sluice_permits_in_use:sum": ("sluice_rule", {"inflight"}),
    "sluice_rule:sluice_cost_charged:rate5m": ("sluice_rule", {"tokens"}),
    "sluice_rule:sluice_cost_refunded:rate5m": ("sluice_rule", {"tokens"}),
    "sum(rate(sluice_limiter_blocks_started_total[5m]))": (None, set()),
    "sum(rate(sluice_limiter_blocked_total[5m]))": (None, set()),
    "topk(20, max by (domain, key) (sluice_limiter_top_limited_key_refusals))": ("key", {"global-per-team/0/noisy"}),
}
# Queries the live stack cannot feed, and why (none today).
NOT_PRODUCED: dict[str, str] = {}


def plain(expr: str) -> str:
    """A query without its `{sluice_rule=~".*"}` selector, as EXPECTED names it."""
    return expr.replace('{sluice_rule=~".*"}', "")


def test_every_query_is_expected_or_listed_as_not_produced():
    assert {plain(expr) for _, expr in queries()} | set(recorded()) == set(EXPECTED) | set(NOT_PRODUCED)


def labels_of(prometheus: Prometheus, expr: str) -> tuple[str | None, set[str]]:
    result = prometheus.api("query", query=expr)["result"]
    label, _ = EXPECTED[plain(expr)]
    if label is None:
        return None, {json.dumps({k: v for k, v in s["metric"].items() if k != "__name__"}) for s in result}
    return label, {s["metric"].get(label, "") for s in result}


def expected_labels(expr: str) -> tuple[str | None, set[str]]:
    label, values = EXPECTED[plain(expr)]
    return (None, {"{}"}) if label is None else (label, values)


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (make prometheus)")
def test_every_panel_and_recording_rule_returns_series_on_a_live_limited_stack(processes, tmp_path):
    limiter = processes.limiter(extra_args=["--introspection", "--introspection-keys", "clear"])
    limiter_config = {"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
                      "failure_mode": "deny"}
    envoy = support.start_envoy(tmp_path, [support.wasm_filter(sluice_config(RULES_LIVE, limiter=limiter_config))],
                                bootstrap_extra=stats_config(),
                                clusters=[limiter_cluster("sluice_limiter", [limiter.port])])
    prometheus = None
    try:
        assert concurrent_requests(envoy.port, 4, 40, headers={"x-user": "flood"}) == {200: 3, 429: 37}
        assert concurrent_requests(envoy.port, 4, 40, headers={"x-team": "noisy"}) == {200: 3, 429: 37}
        for user in ("calm1", "calm2", "calm3", "calm4"):
            assert request(envoy.port, "/", headers={"x-user": user}).status == 200
        wait_until(lambda: limiter.metric("sluice_limiter_top_limited_key_refusals") > 0, what="the flood on top")
        prometheus = Prometheus(tmp_path, {"limiter": (limiter.port, "/metrics"),
                                           "envoy": (envoy.admin_port, "/stats/prometheus")},
                                rule_files=[RULES, RECORDING])
        wait_until(lambda: prometheus.value("up") == ["1", "1"], what="both targets up")
        # rates need two scrapes; recording rules one evaluation after them
        wait_until(lambda: prometheus.value("sluice_rule:sluice_denial_ratio:rate5m") != [],
                   what="the denial ratio recorded")
        checked = [expr for _, expr in queries() if plain(expr) not in NOT_PRODUCED] + \
            [name for name in recorded() if name not in NOT_PRODUCED]
        try:
            wait_until(lambda: all(labels_of(prometheus, e) == expected_labels(e) for e in checked),
                       what="every query's series", timeout=20)
        except TimeoutError:
            pass  # the assertion below names the queries that differ
        assert {e: labels_of(prometheus, e) for e in checked} == {e: expected_labels(e) for e in checked}
        # the counts behind them: each flood's refusals; the shadow rule counts
        # the requests the local rule admitted (the flood's 3), 2 over its 1
        assert prometheus.value('sluice_denied{sluice_rule="local-per-user"}') == ["37"]
        assert prometheus.value('sluice_denied{sluice_rule="global-per-team"}') == ["37"]
        assert prometheus.value('sluice_shadow_denied{sluice_rule="shadow-per-user"}') == ["2"]
        # the top key's refusals are the limiter's refusals (the filter's over-limit
        # cache answers the rest of the flood)
        denied = prometheus.value('sluice_limiter_decisions_total{domain="test",result="denied"}')
        assert prometheus.value("sluice_limiter_top_limited_key_refusals") == denied
        assert denied != ["0"]
        # the rule variable's values: every rule
        assert prometheus.api("label/sluice_rule/values", **{"match[]": "sluice_denied"}) == sorted(ALL_RULES)
        assert unhealthy(prometheus.rules()) == {}
    finally:
        if prometheus:
            prometheus.process.stop()
        envoy.stop()
