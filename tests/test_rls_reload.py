"""Descriptors mounted as Kubernetes mounts a ConfigMap: each file a symlink
through `..data` to a timestamped directory, an update a swap of `..data`.
Through Envoy's own ratelimit filter calling `sluice-limiter --grpc-listen`."""

import hashlib
import os
import threading
from pathlib import Path

from support import free_port, load_through, request, wait_until
from support.rls import generic_key, header_action, start_rls_envoy
from support.windows import away_from_window_boundary

POLL_MS = 100
USER = [header_action("x-user", "user")]
LOADS = 'sluice_limiter_rls_config_loads_total{{result="{}"}}'
HASH = "sluice_limiter_rls_config_hash"
LAST_LOAD = "sluice_limiter_rls_config_last_load_timestamp_seconds"
# The counters are exact: a fixed window far longer than the test.
SWAP = """
domain: swap
descriptors:
  - key: user
    rate_limit: {{requests_per_unit: {requests}, window: 365d, algorithm: fixed_window}}
  - key: unrelated{n}
    rate_limit: {{unit: second, requests_per_unit: 1}}
"""
OTHER = "domain: other\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
BROKEN = "domain: swap\ndescriptors: [{key: }]\n"
# envoyproxy/ratelimit's test/config/merge_domain_key1.yaml and merge_domain_key2.yaml.
MERGE_KEY1 = """# Basic configuration which will be merged with `merge_domain2.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain2.yaml`
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
"""
MERGE_KEY2 = """# Basic configuration which will be merged with `merge_domain.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain.yaml`
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
"""


def config_hash(files: dict[str, str]) -> int:
    """`sluice_limiter_rls_config_hash` of these files: the first 32 bits of the SHA-256 of each
    file's name and text by name, each part preceded by its length (8 bytes, little-endian)."""
    h = hashlib.sha256()
    for name in sorted(files):
        for part in (name.encode(), files[name].encode()):
            h.update(len(part).to_bytes(8, "little") + part)
    return int.from_bytes(h.digest()[:4], "big")


class ConfigMap:
    """A ConfigMap volume written as the kubelet's atomic writer does."""

    def __init__(self, root: Path):
        self.root = root
        self.version = 0
        root.mkdir()

    def write(self, files: dict[str, str]):
        self.version += 1
        stamp = f"..2026_11_28_20_00_00.{self.version:09d}"
        (self.root / stamp).mkdir()
        for name, text in files.items():
            (self.root / stamp / name).write_text(text)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        os.symlink(stamp, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", data)
        for name in files:
            visible = self.root / name
            if not visible.is_symlink():
                os.symlink(Path("..data") / name, visible)
        for name in os.listdir(self.root):
            visible = self.root / name
            if not name.startswith("..") and name not in files:
                visible.unlink()
        if old:
            for f in (self.root / old).iterdir():
                f.unlink()
            (self.root / old).rmdir()


def test_a_configmap_swap_applies_a_new_limit_keeps_every_counter_and_a_broken_one_is_refused(
        processes, tmp_path):
    cm = ConfigMap(tmp_path / "config")
    first = {"swap.yaml": SWAP.format(requests=400, n=0)}
    cm.write(first)
    grpc = free_port()
    lim = processes.limiter(extra_args=["--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(cm.root),
                                        "--descriptors-poll-ms", str(POLL_MS), "--store-timeout-ms", "5000"])
    env = start_rls_envoy(tmp_path, "swap", [grpc], [USER], failure_mode_deny=True)
    try:
        assert lim.metric(LOADS.format("ok")) == 1
        assert lim.metric(LAST_LOAD) > 0
        assert lim.metric(HASH) == config_hash(first)

        counts = load_through([env], per_envoy=300, connections=32, headers={"x-user": "r"})
        assert counts == {200: 300}, counts

        # A new limit and a second domain: picked up without any file's own entry changing.
        swapped = {"swap.yaml": SWAP.format(requests=500, n=0), "other.yaml": OTHER}
        cm.write(swapped)
        wait_until(lambda: lim.metric(HASH) == config_hash(swapped), what="the swapped configuration in force")
        assert lim.metric(LOADS.format("ok")) == 2
        assert lim.metric(LOADS.format("error")) == 0

        # Swaps under load, the limit unchanged: not one count lost or doubled.
        stop = threading.Event()

        def churn():
            n = 1
            while not stop.is_set():
                cm.write({"swap.yaml": SWAP.format(requests=500, n=n), "other.yaml": OTHER})
                n += 1
                stop.wait(POLL_MS / 1000 / 2)

        t = threading.Thread(target=churn)
        t.start()
        try:
            counts = load_through([env], per_envoy=600, connections=32, headers={"x-user": "r"})
        finally:
            stop.set()
            t.join()
        assert counts == {200: 200, 429: 400}, counts
        final = {"swap.yaml": SWAP.format(requests=500, n=cm.version), "other.yaml": OTHER}
        cm.write(final)
        wait_until(lambda: lim.metric(HASH) == config_hash(final), what="the last swap in force")
        assert lim.metric(LOADS.format("ok")) >= 3
        assert lim.metric(LOADS.format("error")) == 0
        assert request(env.port, "/", headers={"x-user": "o"}).status == 200

        # A broken swap: refused and counted, the last good one still answers.
        cm.write({"swap.yaml": BROKEN, "other.yaml": OTHER})
        wait_until(lambda: lim.metric(LOADS.format("error")) == 1, what="the broken swap refused")
        assert lim.metric(HASH) == config_hash(final)
        counts = load_through([env], per_envoy=20, connections=32, headers={"x-user": "r"})
        assert counts == {429: 20}, counts
        counts = load_through([env], per_envoy=20, connections=32, headers={"x-user": "fresh"})
        assert counts == {200: 20}, counts
        assert lim.metric(LOADS.format("error")) == 1, "refused once, not at every poll"
        logged = [line.split(": ", 1)[1] for line in lim.process.log().splitlines() if "rls::reload:" in line]
        assert logged[0] == f"descriptors loaded path={cm.root} domains=1 hash={config_hash(first):08x}"
        assert f"descriptors loaded path={cm.root} files=2 domains=2 hash={config_hash(swapped):08x}" in logged
        assert logged[-1] == (f"descriptors refused, the configuration in force (hash) stays: {cm.root}/swap.yaml: "
                              f"descriptors[0].key: must not be empty hash={config_hash(final):08x}")
        assert lim.process.alive()
    finally:
        env.stop()



def test_a_domain_spanning_two_configmap_files_merges_on_redis(processes, tmp_path):
    cm = ConfigMap(tmp_path / "config")
    cm.write({"merge_domain_key1.yaml": MERGE_KEY1, "merge_domain_key2.yaml": MERGE_KEY2})
    redis = processes.redis()
    grpc = free_port()
    lim = processes.limiter(store=redis.url, extra_args=[
        "--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(cm.root), "--merge-domains",
        "--descriptors-poll-ms", str(POLL_MS), "--store-timeout-ms", "5000"])
    envs = [start_rls_envoy(tmp_path, "test-domain", [grpc], [[generic_key(f"value{i}", f"key{i}")]],
                            failure_mode_deny=True) for i in (1, 2)]
    try:
        assert lim.metric(LOADS.format("ok")) == 1
        away_from_window_boundary(60, 5)
        assert load_through(envs[:1], per_envoy=30, connections=32) == {200: 10, 429: 20}
        assert load_through(envs[1:], per_envoy=30, connections=32) == {200: 20, 429: 10}
    finally:
        for env in envs:
            env.stop()
