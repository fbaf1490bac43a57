#!/usr/bin/env python3
"""The filter as an OCI image in the Wasm image layout that Istio's WasmPlugin
and Envoy Gateway's EnvoyExtensionPolicy pull, without a Docker daemon.

    scripts/oci.py build/sluice.wasm build/oci --tag 0.1.0 --tarball build/sluice-oci.tar

writes an OCI image-layout directory (`oci-layout`, `index.json`,
`blobs/sha256/...`) and the same as one tar file, and prints the manifest
digest (what `WasmPlugin.spec.sha256` and `url: oci://...@sha256:` pin).

The image is the *compat* variant of the Wasm image specification
(solo-io/wasm, spec-compat.md), the one format both Istio (pkg/wasm,
`extractOCIStandardImage`) and Envoy Gateway (internal/wasm) accept with a
single layer, and the one `docker build` of a `FROM scratch` image produces:

- an OCI image manifest (`application/vnd.oci.image.manifest.v1+json`) with
  the annotation `module.wasm.image/variant: compat` the specification asks
  for with OCI media types;
- a standard image config (`application/vnd.oci.image.config.v1+json`);
- exactly one layer, `application/vnd.oci.image.layer.v1.tar+gzip`: a tar
  holding the module as `plugin.wasm`, the name both fetchers look for.

The *oci* variant (`application/vnd.module.wasm.content.layer.v1+wasm`) is
not used: both fetchers require it to have two layers.

Reproducible: every timestamp is `SOURCE_DATE_EPOCH` (0 when unset), owners
and modes are fixed, JSON is written with sorted keys and no spaces, so the
same module gives the same digest on every build (with the same zlib).
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
PLUGIN_FILE = "plugin.wasm"
VARIANT_ANNOTATION = "module.wasm.image/variant"


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes, annotations: dict | None = None) -> dict:
    d = {"mediaType": media_type, "digest": sha256(data), "size": len(data)}
    if annotations:
        d["annotations"] = annotations
    return d


def tar_bytes(members: list[tuple[str, bytes | None]], mtime: int) -> bytes:
    """A tar of `members` (name, content; None for a directory), in the given
    order, owned by root, with fixed modes and times."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if content is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.mode = 0o644
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def gzip_bytes(data: bytes, mtime: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=mtime) as gz:
        gz.write(data)
    return out.getvalue()


def build(wasm: bytes, tag: str, version: str, epoch: int) -> tuple[dict[str, bytes], bytes, bytes]:
    """The blobs by digest, the manifest and `index.json`."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    layer_tar = tar_bytes([(PLUGIN_FILE, wasm)], epoch)
    layer = gzip_bytes(layer_tar, epoch)
    config = canonical_json({
        # As the Rust target, wasm32-unknown-unknown; the fetchers do not read it.
        "architecture": "wasm",
        "os": "unknown",
        "created": created,
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer_tar)]},
        "history": [{"created": created, "created_by": f"scripts/oci.py: {PLUGIN_FILE}"}],
    })
    manifest = canonical_json({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": descriptor(CONFIG_TYPE, config),
        "layers": [descriptor(LAYER_TYPE, layer)],
        "annotations": {
            VARIANT_ANNOTATION: "compat",
            "org.opencontainers.image.title": "sluice",
            "org.opencontainers.image.description": "Sluice rate limiting filter for Envoy (proxy-wasm)",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.created": created,
        },
    })
    index = canonical_json({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [descriptor(MANIFEST_TYPE, manifest, {"org.opencontainers.image.ref.name": tag})],
    })
    blobs = {sha256(b): b for b in (layer, config, manifest)}
    return blobs, manifest, index


def layout_files(blobs: dict[str, bytes], index: bytes) -> list[tuple[str, bytes | None]]:
    """The image-layout directory as (path, content) in sorted order; None is a directory."""
    files: list[tuple[str, bytes | None]] = [("blobs", None), ("blobs/sha256", None)]
    files += [(f"blobs/sha256/{d.split(':', 1)[1]}", blobs[d]) for d in sorted(blobs)]
    files += [("index.json", index), ("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))]
    return files


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wasm", type=Path, help="the module (build/sluice.wasm)")
    p.add_argument("out", type=Path, help="the image-layout directory to write (replaced)")
    p.add_argument("--tag", default="latest", help="the reference name in index.json")
    p.add_argument("--version", default="", help="org.opencontainers.image.version (default: the tag)")
    p.add_argument("--tarball", type=Path, help="also write the layout as this tar file")
    args = p.parse_args(argv)

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    wasm = args.wasm.read_bytes()
    if not wasm.startswith(b"\0asm"):
        print(f"{args.wasm}: not a WebAssembly module", file=sys.stderr)
        return 1
    blobs, manifest, index = build(wasm, args.tag, args.version or args.tag, epoch)
    files = layout_files(blobs, index)

    if args.out.exists():
        shutil.rmtree(args.out)
    for name, content in files:
        path = args.out / name
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_bytes(content)
    if args.tarball:
        args.tarball.parent.mkdir(parents=True, exist_ok=True)
        args.tarball.write_bytes(tar_bytes(files, epoch))

    print(f"{args.out}: OCI image layout, tag {args.tag}"
          + (f"; tarball {args.tarball}" if args.tarball else ""))
    print(f"manifest digest {sha256(manifest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
