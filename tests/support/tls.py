"""Throwaway certificates for TLS tests, made with the `openssl` CLI.

`CA(dir)` makes a certificate authority (P-256, valid two days); its `issue`
signs a leaf certificate for the names given (server and client use).
`client_context` is the Python side of a TLS connection trusting a CA, and
`upstream_tls` Envoy's side (a cluster's `transport_socket`).
Nothing here is meant to be secret: the keys live in the test's directory.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


def _run(*args: str, cwd: Path):
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@dataclass
class Leaf:
    cert: Path
    key: Path


class CA:
    """A certificate authority in `workdir/name`."""

    def __init__(self, workdir: Path, name: str = "ca"):
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert = self.dir / "ca.crt"
        self.key = self.dir / "ca.key"
        _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(self.key), "-out", str(self.cert), "-days", "2", "-subj", f"/CN=sluice test {name}",
             cwd=self.dir)
        self._serial = 0

    def issue(self, name: str, sans: str = "IP:127.0.0.1,DNS:localhost") -> Leaf:
        """A certificate for `sans` (an openssl subjectAltName list), for servers and clients."""
        self._serial += 1
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        cert = self.dir / f"{name}.crt"
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n"
                       "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n")
        _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", f"/CN={name}", cwd=self.dir)
        _run("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key), "-set_serial",
             str(1000 + self._serial), "-out", str(cert), "-days", "2", "-extfile", str(ext), cwd=self.dir)
        # redis-server runs as this user and reads the key; keep it private all the same
        key.chmod(0o600)
        return Leaf(cert, key)


def client_context(ca: CA, cert: Leaf | None = None) -> ssl.SSLContext:
    """A client context trusting `ca` (and checking the name), presenting `cert` when given."""
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def upstream_tls(ca: CA, cert: Leaf | None = None, sni: str = "localhost") -> dict:
    """An Envoy cluster's `transport_socket`: TLS to `sni`, whose certificate
    must chain to `ca` and name `sni`; with `cert`, presented as the client's."""
    context: dict = {
        "alpn_protocols": ["h2"],
        "validation_context": {
            "trusted_ca": {"filename": str(ca.cert)},
            "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": sni}}],
        },
    }
    if cert is not None:
        context["tls_certificates"] = [{"certificate_chain": {"filename": str(cert.cert)},
                                        "private_key": {"filename": str(cert.key)}}]
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": sni,
            "common_tls_context": context,
        },
    }


def downstream_tls(ca: CA, cert: Leaf) -> dict:
    """An Envoy listener's `transport_socket`: TLS with `cert`, requiring a
    client certificate that chains to `ca`."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": True,
            "common_tls_context": {
                "tls_certificates": [{"certificate_chain": {"filename": str(cert.cert)},
                                      "private_key": {"filename": str(cert.key)}}],
                "validation_context": {"trusted_ca": {"filename": str(ca.cert)}},
            },
        },
    }
