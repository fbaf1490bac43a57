"""sluice-limiter as a drop-in for envoyproxy/ratelimit's container: started
as `ratelimit` (Envoy Gateway's ratelimit deployment runs `/bin/ratelimit`)
with the environment Envoy Gateway gives it, it reads the peer's variables:
its runtime directory, Redis, the gRPC port over mutual TLS, the plain HTTP
probe port (`/healthcheck`) and the Prometheus port; Envoy's own ratelimit
filter is limited by it; a variable Sluice cannot honour refuses to start."""

from __future__ import annotations

import os
import re
import subprocess

from support import LIMITER_BIN, ROOT, free_port, request, wait_until
from support.processes import Process
from support.rls import header_action, start_rls_envoy
from support.tls import CA, upstream_tls

DESCRIPTORS = """\
domain: eg
descriptors:
  - key: x-user
    rate_limit:
      unit: hour
      requests_per_unit: 3
"""


def gateway_env(tmp_path, redis_port: int, ca, server) -> dict[str, str]:
    """Envoy Gateway's environment for its ratelimit container
    (internal/infrastructure/kubernetes/ratelimit/testdata/deployments/default.yaml),
    with a file configuration instead of xDS and ports chosen at run time."""
    config = tmp_path / "data" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "eg.yaml").write_text(DESCRIPTORS)
    return {
        "PATH": os.environ.get("PATH", ""),
        "RUNTIME_ROOT": str(tmp_path / "data"),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "RUNTIME_IGNOREDOTFILES": "true",
        "RUNTIME_WATCH_ROOT": "false",
        "LOG_LEVEL": "info",
        "USE_STATSD": "false",
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": str(server.cert),
        "GRPC_SERVER_TLS_KEY": str(server.key),
        "GRPC_SERVER_TLS_CA_CERT": str(ca.cert),
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis_port}",
        "USE_PROMETHEUS": "true",
        "PROMETHEUS_ADDR": f"127.0.0.1:{free_port()}",
        "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
        "HOST": "127.0.0.1",
        "PORT": str(free_port()),
        "GRPC_HOST": "127.0.0.1",
        "GRPC_PORT": str(free_port()),
    }


def as_ratelimit(tmp_path):
    """The limiter's binary under the name Envoy Gateway runs."""
    link = tmp_path / "bin" / "ratelimit"
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(LIMITER_BIN)
    return link


def test_envoy_gateways_environment_serves_envoys_ratelimit_filter(processes, tmp_path):
    redis = processes.redis()
    ca = CA(tmp_path, "ca")
    server, client = ca.issue("server"), ca.issue("client")
    env = gateway_env(tmp_path, redis.port, ca, server)
    limiter = Process([str(as_ratelimit(tmp_path))], tmp_path / "ratelimit.log", env=env)
    try:
        port, metrics = int(env["PORT"]), int(env["PROMETHEUS_ADDR"].rsplit(":", 1)[1])
        wait_until(lambda: request(port, "/healthcheck").status == 200, what="/healthcheck in plain HTTP")
        e = start_rls_envoy(tmp_path, "eg", [int(env["GRPC_PORT"])], [[header_action("x-user", "x-user")]],
                            failure_mode_deny=True, transport_socket=upstream_tls(ca, client))
        try:
            codes = [request(e.port, "/", headers={"x-user": "a"}).status for _ in range(5)]
            assert codes == [200, 200, 200, 429, 429]
        finally:
            e.stop()
        scrape = request(metrics, "/metrics")
        assert scrape.status == 200
        text = scrape.body.decode()
        assert 'sluice_limiter_rls_calls_total{domain="eg",result="ok"} 3' in text
        assert 'sluice_limiter_rls_calls_total{domain="eg",result="over_limit"} 2' in text
        # The scrape port serves metrics and probes only.
        assert request(metrics, "/v1/check", method="POST", body="{}").status == 404
        # The counters are in Redis, under the limiter's keys.
        keys = redis.cli("--scan").split()
        assert keys == ["sluice:{rls:eg/x-user=a|fixed_window|3600000}"], keys
        log = limiter.log()
        assert "USE_STATSD" not in log and "PROMETHEUS_MAPPER_YAML ignored" in log, log
    finally:
        limiter.stop()


def test_a_variable_sluice_cannot_honour_refuses_to_start(tmp_path):
    env = {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "REDIS_PERSECOND": "true",
           "RUNTIME_ROOT": str(tmp_path)}
    out = subprocess.run([str(as_ratelimit(tmp_path))], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.startswith("sluice-limiter (envoyproxy/ratelimit environment): REDIS_PERSECOND: not supported")


def test_the_migration_guide_names_every_variable_as_the_limiter_treats_it():
    """docs/guides/migrating.md's three tables (honoured, ignored, refused)
    name exactly the variables `ratelimit_env.rs` reads, each in the table
    of what the code does with it (`ratelimit_env.rs` and its `xds.rs`)."""
    source = "".join((ROOT / "crates/limiter/src" / f).read_text().split("#[cfg(test)]")[0]
                     for f in ("ratelimit_env.rs", "ratelimit_env/xds.rs"))

    def names(text: str) -> set[str]:
        return set(re.findall(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|HOST|PORT)"', text))

    def block(start: str, end: str) -> str:
        return source[source.index(start):source.index(end, source.index(start))]

    ignored = names(block("const IGNORED", "];")) | {"USE_STATSD"}
    refused = (names(block("const REFUSED_WHEN_TRUE", "];")) | names(block("const REFUSED_WHEN_SET", "];"))
               | {"BACKEND_TYPE", "REDIS_SOCKET_TYPE", "CONFIG_TYPE"})
    read = names(source) - {"SLUICE_RATELIMIT_ENV", "GRPC_XDS_SOTW"}
    guide = (ROOT / "docs/guides/migrating.md").read_text()
    sections = dict(re.findall(r"^### (\w+).*?\n(.*?)(?=^#|\Z)", guide, flags=re.S | re.M))

    def rows(section: str) -> set[str]:
        return {v for line in sections[section].splitlines() if line.startswith("| `")
                for v in re.findall(r"`([A-Z][A-Z0-9_]+)`", re.sub(r"\([^)]*\)", "", line.split(" | ")[0]))}

    assert rows("Ignored") == ignored
    assert rows("Refused") == refused
    assert rows("Honoured") | rows("Ignored") | rows("Refused") >= read
    assert rows("Honoured") == read - ignored - (refused - {"BACKEND_TYPE", "REDIS_SOCKET_TYPE", "CONFIG_TYPE"})


def test_command_line_flags_are_added_to_the_environments(tmp_path):
    env = {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "RUNTIME_ROOT": str(tmp_path)}
    program = str(as_ratelimit(tmp_path))
    out = subprocess.run([program, "--version"], env=env, capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout.split()[0]) == (0, "sluice-limiter"), out
    out = subprocess.run([program, "--listen", "127.0.0.1:9"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "the argument '--listen <LISTEN>' cannot be used multiple times" in out.stderr
