# The filter as a Wasm image, for those who build images with Docker.
# `make oci` writes the same kind of image without a Docker daemon (and with
# a reproducible digest); this file is the equivalent for `docker build`.
# From the repository root, after `make wasm` (the context is build/):
#
#   docker build -f scripts/oci.Dockerfile -t REGISTRY/sluice:0.1.0 build/
#   docker push REGISTRY/sluice:0.1.0
#
# One layer holding the module as /plugin.wasm: the "compat" variant of the
# Wasm image specification, which Istio's WasmPlugin and Envoy Gateway's
# EnvoyExtensionPolicy both pull (see docs/guides/meshes.md, "The OCI image").
FROM scratch
COPY sluice.wasm /plugin.wasm
