"""Fixtures that start real processes and always stop them."""

import pytest

import harness


@pytest.fixture
def envoy_factory(tmp_path):
    """Starts Envoys with the Sluice filter; stops them all after the test."""
    started = []

    def start(filter_config, **kwargs):
        env = harness.start_envoy(filter_config, tmp_path, **kwargs)
        started.append(env)
        return env

    yield start
    for env in started:
        env.stop()


@pytest.fixture
def envoy(envoy_factory):
    """A function that starts one Envoy with the given filter configuration."""
    return envoy_factory
