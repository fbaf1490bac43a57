"""The documented alerts (deploy/prometheus/sluice-alerts.yaml) work.

Each alert fires on the series that should raise it and stays quiet on a
healthy stack under its threshold (promtool's unit tests,
deploy/prometheus/sluice-alerts.test.yaml), and each recording rule gives
its figure on given series (sluice-recording.test.yaml); the alerts docs name exactly the
file's alerts; and a real Prometheus scraping a live limiter and an Envoy
with the Sluice filter evaluates every rule without error, and raises the
alerts a refused descriptor file and an unreachable limiter should raise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse

import pytest
import yaml

import support
from support import ROOT, Process, free_port, limiter_cluster, request, sluice_config, wait_until
from support.docs import code_blocks

RULES_DIR = ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "sluice-alerts.yaml"
RULE_TESTS = RULES_DIR / "sluice-alerts.test.yaml"
RECORDING = RULES_DIR / "sluice-recording.yaml"
RECORDING_TESTS = RULES_DIR / "sluice-recording.test.yaml"
ALERTS_DOC = ROOT / "docs" / "operations" / "alerts.md"
METRICS_DOC = ROOT / "docs" / "operations" / "metrics.md"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_the_docs_describe_exactly_the_alerts_of_the_rules_file():
    documented = re.findall(r"^\| `(Sluice\w+)` \|", ALERTS_DOC.read_text(), flags=re.M)
    assert documented == [rule["alert"] for rule in alert_rules()]


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_stays_quiet():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if case["exp_alerts"] == []}
    alerts = {rule["alert"] for rule in alert_rules()}
    assert (firing, quiet) == (alerts, alerts)


def recording_rules() -> list[dict]:
    groups = yaml.safe_load(RECORDING.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_recording_rule_has_a_case_with_its_figure():
    tests = yaml.safe_load(RECORDING_TESTS.read_text())["tests"]
    checked = {case["expr"] for test in tests for case in test["promql_expr_test"] if case["exp_samples"]}
    assert checked == {rule["record"] for rule in recording_rules()}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (make prometheus)")
def test_promtool_checks_the_rules_and_each_alert_fires_or_stays_quiet():
    for rules, count, tests in ((RULES, len(alert_rules()), RULE_TESTS),
                                (RECORDING, len(recording_rules()), RECORDING_TESTS)):
        check = subprocess_run([PROMTOOL, "check", "rules", str(rules)])
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"SUCCESS: {count} rules found" in check.stdout
        run = subprocess_run([PROMTOOL, "test", "rules", tests.name], cwd=RULES_DIR)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "SUCCESS" in run.stdout


def subprocess_run(args, cwd=None):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------- a live scrape

DESCRIPTORS = "domain: test\ndescriptors:\n  - key: x-user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"


def stats_config() -> dict:
    """The `stats_config` of docs/operations/metrics.md, as documented."""
    for info, block in code_blocks(METRICS_DOC):
        if info == "yaml" and block.startswith("stats_config:"):
            return yaml.safe_load(block)
    raise AssertionError("docs/operations/metrics.md has no stats_config block")


class Prometheus:
    """A Prometheus on a loopback port, scraping `targets` ({job: (port, path)})
    every second and evaluating `rule_files` every second."""

    def __init__(self, workdir, targets: dict[str, tuple[int, str]], rule_files=(RULES,)):
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": job, "metrics_path": path,
                                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                               for job, (port, path) in targets.items()],
        }
        path = workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.process = Process([PROMETHEUS, f"--config.file={path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{self.port}"], workdir / "prometheus.log")
        try:
            wait_until(lambda: request(self.port, "/-/ready").status == 200, what="prometheus ready")
        except BaseException:
            self.process.stop()
            raise

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(request(self.port, f"/api/v1/{path}{query}").body)
        assert body["status"] == "success", body
        return body["data"]

    def rules(self) -> list[dict]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def firing(self, alert: str) -> list[dict]:
        """The labels of `alert`'s active alerts (pending or firing)."""
        rule = next(r for r in self.rules() if r["name"] == alert)
        return [a["labels"] for a in rule["alerts"] if a["state"] in ("pending", "firing")]

    def value(self, query: str) -> list[str]:
        return [sample["value"][1] for sample in self.api("query", query=query)["result"]]


def unhealthy(rules: list[dict]) -> dict[str, str]:
    return {r["name"]: f'{r["health"]}: {r.get("lastError", "")}' for r in rules if r["health"] != "ok"}


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (make prometheus)")
def test_every_rule_evaluates_on_a_live_scrape_and_the_alerts_fire(processes, tmp_path):
    descriptors = tmp_path / "descriptors.yaml"
    descriptors.write_text(DESCRIPTORS)
    limiter = processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{free_port()}",
                                            "--descriptors", str(descriptors), "--descriptors-poll-ms", "100"])
    # the filter's limiter cluster points at a port no one listens on: every call fails, unreachable
    rule = [{"name": "per-user", "key": ["header:x-user"],
             "limits": [{"scope": "global", "algorithm": "fixed_window", "requests": 3, "window": "1h"}]}]
    limiter_config = {"cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "1s",
                      "failure_mode": "allow"}
    cfg = sluice_config(rule, limiter=limiter_config)
    envoy = support.start_envoy(tmp_path, [support.wasm_filter(cfg)], bootstrap_extra=stats_config(),
                                clusters=[limiter_cluster("sluice_limiter", [free_port()])])
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, {"limiter": (limiter.port, "/metrics"),
                                           "envoy": (envoy.admin_port, "/stats/prometheus")})
        error_loads = 'sluice_limiter_rls_config_loads_total{result="error"}'
        # both scraped, the filter's failures one family by reason, the refusals counted from 0
        wait_until(lambda: prometheus.value("up") == ["1", "1"], what="both targets up")
        wait_until(lambda: prometheus.value(error_loads) == ["0"], what="the refusals' series at 0")
        assert sorted(prometheus.value("count by (sluice_reason) (sluice_limiter_failed)")) == ["1"] * 4
        wait_until(lambda: all(r["health"] != "unknown" for r in prometheus.rules()), what="every rule evaluated")
        assert unhealthy(prometheus.rules()) == {}

        # an unreachable limiter: admitted uncounted (failure_mode allow), one failure per call
        for _ in range(4):
            assert request(envoy.port, "/", headers={"x-user": "a"}).status == 200
        unreachable = 'sluice_limiter_failed{sluice_reason="unreachable"}'
        wait_until(lambda: prometheus.value(unreachable) == ["4"], what="four unreachable calls scraped")
        assert prometheus.value('sluice_limiter_failed{sluice_reason="timeout"}') == ["0"]
        wait_until(lambda: prometheus.firing("SluiceLimiterCallsFailing"), what="calls failing raised")
        assert prometheus.firing("SluiceLimiterCallsFailing") == [{"alertname": "SluiceLimiterCallsFailing",
                                                                   "sluice_reason": "unreachable"}]
        wait_until(lambda: prometheus.firing("SluiceFailingOpen"), what="failing open raised")

        # the first refused descriptor file
        assert prometheus.firing("SluiceDescriptorsRefused") == []
        descriptors.write_text("domain: test\ndescriptors: [{key: }]\n")
        wait_until(lambda: limiter.metric(error_loads) == 1, what="the descriptor file refused")
        wait_until(lambda: prometheus.firing("SluiceDescriptorsRefused"), what="descriptors refused raised")
        [labels] = prometheus.firing("SluiceDescriptorsRefused")
        assert (labels["alertname"], labels["job"], labels["result"]) == ("SluiceDescriptorsRefused", "limiter",
                                                                          "error")
        assert unhealthy(prometheus.rules()) == {}
    finally:
        if prometheus:
            prometheus.process.stop()
        envoy.stop()
