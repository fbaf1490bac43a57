"""Every Envoy configuration shipped in envoy/ passes `envoy --mode validate` with the built filter."""

import subprocess

import pytest

from support import ENVOY_BIN, ROOT, SLUICE_WASM

CONFIGS = sorted(p for p in (ROOT / "envoy").glob("envoy*.yaml"))


def test_there_are_configs():
    assert CONFIGS


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_envoy_validates(config, tmp_path):
    rendered = tmp_path / config.name
    # the shipped configs name the path the Docker image mounts the filter at
    rendered.write_text(config.read_text().replace("/etc/envoy/sluice.wasm", str(SLUICE_WASM)))
    result = subprocess.run(
        [str(ENVOY_BIN), "--mode", "validate", "-c", str(rendered), "--disable-hot-restart"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK" in result.stdout + result.stderr
