"""`make oci`'s image: an OCI image layout in the Wasm "compat" format that
Istio's WasmPlugin and Envoy Gateway pull, holding the built filter, with the
same digest on every build.

The checks read the layout the way those fetchers do: index.json to the
manifest, the manifest to its config and single layer, every digest and size
verified, the layer a gzipped tar whose `plugin.wasm` is the module.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support import ROOT, SLUICE_WASM

SCRIPT = ROOT / "scripts" / "oci.py"
DOCKERFILE = ROOT / "scripts" / "oci.Dockerfile"


def build(out: Path, tag: str = "0.1.0", env: dict | None = None) -> tuple[Path, Path, str]:
    """Runs scripts/oci.py; returns the layout directory, the tarball and the printed manifest digest."""
    layout, tarball = out / "oci", out / "sluice-oci.tar"
    res = subprocess.run([sys.executable, str(SCRIPT), str(SLUICE_WASM), str(layout), "--tag", tag,
                          "--tarball", str(tarball)],
                         capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    digest = res.stdout.split("manifest digest ", 1)[1].strip()
    return layout, tarball, digest


def blob(layout: Path, descriptor: dict) -> bytes:
    """The blob a descriptor names, checked against the descriptor's digest and size."""
    algo, hexdigest = descriptor["digest"].split(":", 1)
    assert algo == "sha256"
    data = (layout / "blobs" / "sha256" / hexdigest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hexdigest, descriptor
    assert len(data) == descriptor["size"], descriptor
    return data


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    if not SLUICE_WASM.exists():
        pytest.fail(f"{SLUICE_WASM} is missing: run `make wasm`")
    return build(tmp_path_factory.mktemp("oci"))


def test_the_layout_leads_from_index_to_the_module(image):
    layout, _, digest = image
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    [entry] = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
    assert entry["digest"] == digest

    manifest = json.loads(blob(layout, entry))
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["annotations"]["module.wasm.image/variant"] == "compat"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = json.loads(blob(layout, manifest["config"]))

    # Istio and Envoy Gateway: one layer, application/vnd.oci.image.layer.v1.tar+gzip,
    # a tar.gz holding plugin.wasm.
    [layer_desc] = manifest["layers"]
    assert layer_desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    layer_tar = gzip.decompress(blob(layout, layer_desc))
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        [member] = tar.getmembers()
        assert member.name == "plugin.wasm" and member.isfile()
        module = tar.extractfile(member).read()
    assert module == SLUICE_WASM.read_bytes(), "the layer is not the built build/sluice.wasm"

    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]}
    # nothing in the layout but what the index reaches
    blobs = {p.name for p in (layout / "blobs" / "sha256").iterdir()}
    assert blobs == {d["digest"].split(":")[1] for d in (entry, manifest["config"], layer_desc)}


def test_the_tarball_holds_the_same_layout(image):
    layout, tarball, _ = image
    with tarfile.open(tarball) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    on_disk = {str(p.relative_to(layout)): p.read_bytes() for p in layout.rglob("*") if p.is_file()}
    assert files == on_disk


def test_a_second_build_has_the_same_digest_and_bytes(image, tmp_path):
    _, tarball, digest = image
    _, tarball2, digest2 = build(tmp_path)
    assert digest2 == digest
    assert tarball2.read_bytes() == tarball.read_bytes()


def test_source_date_epoch_sets_the_timestamps(image, tmp_path):
    _, _, digest = image
    layout, _, other = build(tmp_path, env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert other != digest
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(blob(layout, index["manifests"][0]))
    assert manifest["annotations"]["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"


def test_the_dockerfile_builds_the_same_shape():
    text = DOCKERFILE.read_text()
    steps = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert steps == ["FROM scratch", "COPY sluice.wasm /plugin.wasm"]
