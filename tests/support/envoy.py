"""Envoy on loopback: the configuration pieces and one starter.

Every Envoy serves the same direct response (200, "ok\\n") behind its HTTP
filters, with `use_remote_address: true`. Its listener is either read from a
file (LDS: `push_config` replaces the filter configuration of a running
Envoy, as the tests need) or static in the bootstrap (the benchmark's choice:
nothing watches a file while it measures).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
from pathlib import Path

from .client import request
from .paths import ENVOY_BIN, SLUICE_WASM
from .processes import READY_TIMEOUT, Process, free_port, pinned, wait_until


def wasm_filter(config: dict | str, wasm_path: Path = SLUICE_WASM, vm_id: str = "sluice",
                name: str = "sluice", allow_stop_iteration: bool = False) -> dict:
    """The HTTP filter entry that loads a proxy-wasm module with a JSON configuration;
    `allow_stop_iteration`: its `allow_on_headers_stop_iteration` (the headers of a
    request may wait in Envoy while the filter reads the body)."""
    value = config if isinstance(config, str) else json.dumps(config)
    stop = {"allow_on_headers_stop_iteration": True} if allow_stop_iteration else {}
    return {
        "name": name,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": name,
                "root_id": name,
                **stop,
                "vm_config": {
                    "vm_id": vm_id,
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": str(wasm_path)}},
                },
                "configuration": {
                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                    "value": value,
                },
            },
        },
    }


def sluice_config(rules: list[dict], domain: str = "test", headers: str | None = "both", **top) -> dict:
    """A Sluice filter configuration; `headers=None` leaves the default."""
    cfg: dict = {"domain": domain}
    if headers is not None:
        cfg["headers"] = headers
    cfg["rules"] = rules
    cfg.update(top)
    return cfg


def listener(port: int, http_filters: list[dict], name: str = "main", hcm_extra: dict | None = None,
             transport_socket: dict | None = None) -> dict:
    """A loopback listener whose routes answer 200 "ok" directly, after the filters.

    `hcm_extra` adds settings to the HTTP connection manager;
    `transport_socket` (e.g. `tls.downstream_tls`) makes it TLS."""
    tls = {"transport_socket": transport_socket} if transport_socket else {}
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{
            **tls,
            "filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "ingress",
                    "codec_type": "AUTO",
                    # the downstream address is the true peer; Sluice reads XFF itself
                    "use_remote_address": True,
                    "route_config": {
                        "name": "local",
                        "virtual_hosts": [{
                            "name": "all",
                            "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"},
                                        "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}],
                        }],
                    },
                    "http_filters": http_filters + [{
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    }],
                    **(hcm_extra or {}),
                },
            }],
        }],
    }


def limiter_cluster(name: str, ports: list[int], transport_socket: dict | None = None) -> dict:
    """A cluster of sluice-limiters on loopback, spoken to in HTTP/2 (over
    `transport_socket` when given, e.g. `tls.upstream_tls`)."""
    tls = {"transport_socket": transport_socket} if transport_socket else {}
    return {
        **tls,
        "name": name,
        "type": "STATIC",
        "connect_timeout": "0.25s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
                for p in ports
            ]}],
        },
    }


class Envoy:
    """A running Envoy (see `start_envoy`)."""

    def __init__(self, workdir: Path, port: int, admin_port: int, hcm_extra: dict | None = None,
                 transport_socket: dict | None = None):
        self.workdir = workdir
        self.port = port
        self.admin_port = admin_port
        self.hcm_extra = hcm_extra
        self.transport_socket = transport_socket
        self.process: Process | None = None
        self.listener_version = 0
        # hot restart (see `start_envoy(hot_restart=True)`): the command line
        # without its epoch, the current epoch, and the epochs replaced
        self.hot_restart_args: list[str] | None = None
        self.epoch = 0
        self.parents: list[Process] = []
        # the command line it was started with (see `cold_restart`)
        self.args: list[str] = []
        self.cpus: str | None = None

    @property
    def lds_path(self) -> Path:
        return self.workdir / "lds.json"

    def stats(self) -> dict:
        """Counters and gauges from the admin /stats endpoint."""
        resp = request(self.admin_port, "/stats")
        out = {}
        for line in resp.body.decode().splitlines():
            name, _, value = line.partition(": ")
            try:
                out[name] = int(value)
            except ValueError:
                continue
        return out

    def stat(self, name: str, default: int = 0) -> int:
        return self.stats().get(name, default)

    def sluice_stat(self, name: str) -> int:
        """A Sluice counter, whatever prefix Envoy gives custom wasm metrics."""
        stats = self.stats()
        for prefix in ("wasmcustom.", ""):
            if prefix + name in stats:
                return stats[prefix + name]
        return 0

    def write_listener(self, http_filters: list[dict]):
        """Writes the listener file Envoy watches (LDS)."""
        os.replace(self.stage_listener(http_filters), self.lds_path)

    def stage_listener(self, http_filters: list[dict]) -> Path:
        """Writes the next listener file beside the one Envoy watches and
        returns its path: moving it onto `lds_path` pushes it."""
        self.listener_version += 1
        resources = {
            "version_info": str(self.listener_version),
            "resources": [{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                           **listener(self.port, http_filters, hcm_extra=self.hcm_extra,
                                      transport_socket=self.transport_socket)}],
        }
        tmp = self.workdir / "lds.tmp.json"
        tmp.write_text(json.dumps(resources))
        return tmp

    def push_config(self, filter_config: dict | str) -> bool:
        """Pushes a new Sluice filter configuration; True if Envoy took it, False if it refused it."""
        before_ok = self.stat("listener_manager.lds.update_success")
        before_rejected = self.stat("listener_manager.lds.update_rejected")
        self.write_listener([wasm_filter(filter_config)])

        def settled():
            s = self.stats()
            if s.get("listener_manager.lds.update_rejected", 0) > before_rejected:
                return "rejected"
            if s.get("listener_manager.lds.update_success", 0) > before_ok:
                return "accepted"
            return None

        result = wait_until(settled, what="listener update")
        if result == "accepted":
            self.wait_listener_ready()
        return result == "accepted"

    def _alive(self):
        if self.process is not None and not self.process.alive():
            raise RuntimeError(f"envoy exited:\n{self.log()[-4000:]}")

    def wait_listener_ready(self):
        def ready():
            self._alive()
            s = self.stats()
            if not (s.get("listener_manager.total_listeners_warming", 1) == 0
                    and s.get("listener_manager.total_listeners_active", 0) >= 1):
                return False
            # A TCP connect only: an HTTP request would count against the limits under test.
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        wait_until(ready, what="envoy listener")

    def log(self) -> str:
        return self.process.log() if self.process else ""

    def server_info(self) -> dict:
        """The admin /server_info document (state, epoch, uptime ...)."""
        return json.loads(request(self.admin_port, "/server_info", timeout=2).body)

    def hot_restart(self, wait_parent_exit: bool = False) -> Process:
        """Starts the next epoch of this Envoy (Envoy's hot restart): it takes
        the listening sockets and the admin port over from the running one,
        which drains its connections for `--drain-time-s` and exits after
        `--parent-shutdown-time-s`. Returns once the new epoch is live and its
        listener accepts; with `wait_parent_exit`, also waits for the old
        epoch to exit. Needs `start_envoy(hot_restart=True)`."""
        if self.hot_restart_args is None or self.process is None:
            raise RuntimeError("this Envoy was started without hot restart")
        parent = self.process
        self.epoch += 1
        child = Process([*self.hot_restart_args, "--restart-epoch", str(self.epoch)],
                        self.workdir / f"envoy-epoch{self.epoch}.log")
        self.parents.append(parent)
        self.process = child

        def live():
            self._alive()
            info = self.server_info()
            return (info.get("command_line_options", {}).get("restart_epoch") == self.epoch
                    and info.get("state") == "LIVE")

        wait_until(live, what=f"envoy epoch {self.epoch}")
        self.wait_listener_ready()
        if wait_parent_exit:
            wait_until(lambda: not parent.alive(), timeout=READY_TIMEOUT + 60, what="old envoy epoch exiting")
        return child

    def cold_restart(self, sig=signal.SIGKILL) -> Process:
        """Stops every process of this Envoy with `sig` (default `kill -9`) and
        starts it again with its first command line (epoch 0, same ports);
        returns once its listener accepts."""
        for process in [*self.parents, self.process]:
            if process is not None:
                process.stop(sig)
        self.parents = []
        self.epoch = 0
        self.process = Process(self.args, self.workdir / "envoy-cold.log", cpus=self.cpus)
        wait_until(self._admin_up, what="envoy admin after a cold restart")
        self.wait_listener_ready()
        return self.process

    def _admin_up(self) -> bool:
        self._alive()
        return request(self.admin_port, "/ready", timeout=2).status in (200, 503)

    def pids(self) -> list[int]:
        """Every live process of this Envoy (old epochs still draining first)."""
        return [p.pid for p in [*self.parents, self.process] if p is not None and p.alive()]

    def stop(self):
        for parent in self.parents:
            parent.stop()
        return self.process.stop() if self.process else None


def start_envoy(workdir: Path, http_filters: list[dict], *, concurrency: int = 2,
                clusters: list[dict] | None = None, lds: bool = True, hcm_extra: dict | None = None,
                envoy_bin: Path = ENVOY_BIN, cpus: str | None = None, log_level: str = "info",
                component_log_level: str | None = "wasm:debug", drain_time_s: int | None = 1,
                name: str = "envoy", bootstrap_extra: dict | None = None, hot_restart: bool = False,
                parent_shutdown_time_s: int = 3, extra_args: list[str] | None = None,
                downstream_tls: dict | None = None) -> Envoy:
    """Starts Envoy with `http_filters` on fresh loopback ports, in a new
    directory under `workdir`, and waits until its listener accepts connections.

    `lds`: the listener comes from a file the Envoy watches (see
    `Envoy.push_config`); otherwise it is static in the bootstrap. `cpus`: a
    taskset CPU list to run on. The log settings and `drain_time_s` (None:
    Envoy's own default) go to Envoy's command line. `bootstrap_extra`: more
    top-level bootstrap fields (e.g. `stats_config`). `hot_restart`: leave
    Envoy's hot restart on, with a base id of its own, so `Envoy.hot_restart`
    can replace it; an old epoch exits `parent_shutdown_time_s` after its
    successor starts. `extra_args`: more of Envoy's command line.
    `downstream_tls`: the listener's `transport_socket` (`tls.downstream_tls`).
    """
    rundir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
    env = Envoy(rundir, free_port(), free_port(), hcm_extra, downstream_tls)
    bootstrap: dict = {
        "node": {"id": "sluice", "cluster": "sluice"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": env.admin_port}}},
        "static_resources": {"clusters": clusters or []},
        **(bootstrap_extra or {}),
    }
    if lds:
        bootstrap["dynamic_resources"] = {
            "lds_config": {
                "resource_api_version": "V3",
                "path_config_source": {"path": str(env.lds_path), "watched_directory": {"path": str(rundir)}},
            }
        }
        env.write_listener(http_filters)
    else:
        bootstrap["static_resources"]["listeners"] = [listener(env.port, http_filters, hcm_extra=hcm_extra,
                                                               transport_socket=downstream_tls)]
    (rundir / "bootstrap.json").write_text(json.dumps(bootstrap, indent=1))

    args = [str(envoy_bin), "-c", str(rundir / "bootstrap.json"), "--concurrency", str(concurrency),
            "--log-level", log_level, "--file-flush-interval-msec", "50"]
    if not hot_restart:
        args += ["--disable-hot-restart"]
    if drain_time_s is not None:
        args += ["--drain-time-s", str(drain_time_s)]
    if component_log_level:
        args += ["--component-log-level", component_log_level]
    args += extra_args or []
    if hot_restart:
        # The base id names the shared memory and domain sockets epochs meet on:
        # the admin port is free for this Envoy alone while it runs.
        args += ["--base-id", str(env.admin_port), "--parent-shutdown-time-s", str(parent_shutdown_time_s)]
        env.hot_restart_args = pinned(args, cpus)
        args = [*args, "--restart-epoch", "0"]
    env.args, env.cpus = args, cpus
    env.process = Process(args, rundir / "envoy.log", cpus=cpus)
    try:
        wait_until(env._admin_up, what=f"{name} admin")
        env.wait_listener_ready()
    except BaseException:
        env.stop()
        raise
    return env


def rlqs_filter(domain: str = "quota", header: str = "x-tenant", reporting_interval: str = "5s",
                expired: dict | None = None, cluster: str = "rlqs", no_assignment: str = "ALLOW_ALL") -> dict:
    """Envoy's `rate_limit_quota` filter: a bucket `{name: api, tenant: <header value>}` per value of
    `header` (requests without it are not limited), reported every `reporting_interval` (Envoy 1.40 reports every 5 s whatever it says) to the
    RLQS server of `cluster`; `no_assignment`: the blanket rule until the first assignment; `expired`: the
    `expired_assignment_behavior` (none: Envoy's default)."""
    header_input = {"@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
                    "header_name": header}
    settings = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings",
        "bucket_id_builder": {"bucket_id_builder": {
            "name": {"string_value": "api"},
            "tenant": {"custom_value": {"name": "tenant", "typed_config": header_input}},
        }},
        "reporting_interval": reporting_interval,
        "no_assignment_behavior": {"fallback_rate_limit": {"blanket_rule": no_assignment}},
    }
    if expired is not None:
        settings["expired_assignment_behavior"] = expired
    return {
        "name": "envoy.filters.http.rate_limit_quota",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig",
            "rlqs_server": {"envoy_grpc": {"cluster_name": cluster}},
            "domain": domain,
            "bucket_matchers": {"matcher_list": {"matchers": [{
                "predicate": {"single_predicate": {
                    "input": {"name": "tenant", "typed_config": header_input},
                    "value_match": {"safe_regex": {"google_re2": {}, "regex": ".+"}},
                }},
                "on_match": {"action": {"name": "rate_limit_quota", "typed_config": settings}},
            }]}},
        },
    }
