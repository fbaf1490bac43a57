"""Fixtures that start real processes and always stop them."""

import signal

import pytest

import support
from support.processes import kill_all


def _terminated(signum, _frame):
    # A terminated run (a CI timeout, `kill`) skips the fixtures'
    # finalizers: its children are killed here, then it ends as interrupted.
    kill_all()
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminated)


@pytest.fixture
def envoy_factory(tmp_path):
    """Starts Envoys with the Sluice filter; stops them all after the test."""
    started = []

    def start(filter_config, allow_stop_iteration=False, **kwargs):
        entry = support.wasm_filter(filter_config, allow_stop_iteration=allow_stop_iteration)
        env = support.start_envoy(tmp_path, [entry], **kwargs)
        started.append(env)
        return env

    yield start
    for env in started:
        env.stop()


@pytest.fixture
def envoy(envoy_factory):
    """A function that starts one Envoy with the given filter configuration."""
    return envoy_factory


@pytest.fixture
def processes(tmp_path):
    """Starts Redis servers and limiters; stops them all after the test."""

    class Started:
        def __init__(self):
            self.items = []

        def redis(self, **kwargs):
            r = support.Redis(tmp_path, **kwargs)
            self.items.append(r)
            return r

        def redis_cluster(self, nodes=3):
            servers = support.start_redis_cluster(tmp_path, nodes)
            self.items.extend(servers)
            return servers

        def limiter(self, **kwargs):
            lim = support.Limiter(tmp_path, **kwargs)
            self.items.append(lim)
            return lim

    started = Started()
    yield started
    for item in reversed(started.items):
        item.stop()
