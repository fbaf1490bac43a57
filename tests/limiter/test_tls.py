"""TLS and mutual TLS on sluice-limiter's listeners (--tls-cert, --tls-key,
--tls-client-ca), with Envoy's clusters speaking TLS to them: the Sluice
filter over the HTTP API and over RLS gRPC, Envoy's own ratelimit filter;
refused client certificates and plain-text clients; TCP probes counted apart
from failed handshakes; the certificate rotated without a restart."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess

import pytest

from support import LIMITER_BIN, free_port, limiter_cluster, request, sluice_config, wait_until
from support.rls import header_action, start_rls_envoy
from support.tls import CA, client_context, upstream_tls

# Envoy's ratelimit filter sends (x-user); the Sluice filter (generic_key: the rule's name, x-user)
DESCRIPTORS = """\
domain: test
descriptors:
  - key: x-user
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: generic_key
    value: per-user
    descriptors:
      - key: x-user
        rate_limit:
          unit: hour
          requests_per_unit: 3
"""

GLOBAL_RULE = [{"name": "per-user", "key": ["header:x-user"],
                "limits": [{"scope": "global", "algorithm": "fixed_window", "requests": 3, "window": "1h"}]}]
RLS_RULE = [{"name": "per-user", "key": ["header:x-user"], "limits": [{"scope": "global"}]}]


def http_config():
    return sluice_config(GLOBAL_RULE, limiter={"cluster": "sluice_limiter", "authority": "sluice-limiter",
                                               "timeout": "5s", "failure_mode": "deny"})


def rls_config():
    return sluice_config(RLS_RULE, limiter={"cluster": "rls", "protocol": "rls", "timeout": "5s",
                                            "failure_mode": "deny"})


class Pki:
    """A CA with a server and a client certificate, and a CA of strangers."""

    def __init__(self, workdir):
        self.ca = CA(workdir, "ca")
        self.server = self.ca.issue("server")
        self.client = self.ca.issue("client")
        self.stranger = CA(workdir, "stranger").issue("client")

    def flags(self, mtls: bool) -> list[str]:
        flags = ["--tls-cert", str(self.server.cert), "--tls-key", str(self.server.key)]
        return flags + (["--tls-client-ca", str(self.ca.cert)] if mtls else [])

    def context(self, mtls: bool) -> ssl.SSLContext:
        return client_context(self.ca, self.client if mtls else None)


@pytest.fixture
def pki(tmp_path):
    return Pki(tmp_path)


def tls_limiter(processes, tmp_path, pki, mtls, extra=()):
    """A limiter with TLS on both listeners; (limiter, its gRPC port)."""
    descriptors = tmp_path / f"descriptors-{free_port()}.yaml"
    descriptors.write_text(DESCRIPTORS)
    grpc = free_port()
    limiter = processes.limiter(tls=pki.context(mtls), extra_args=[
        *pki.flags(mtls), "--grpc-listen", f"127.0.0.1:{grpc}", "--descriptors", str(descriptors), *extra])
    return limiter, grpc


def statuses(envoy, n: int, user: str = "a") -> list[int]:
    return [request(envoy.port, "/", headers={"x-user": user}).status for _ in range(n)]


def handshake_failures(limiter, listener: str) -> float:
    return limiter.metric(f'sluice_limiter_tls_handshake_failures_total{{listener="{listener}"}}')


def closed_before_hello(limiter, listener: str) -> float:
    return limiter.metric(f'sluice_limiter_tls_closed_before_hello_total{{listener="{listener}"}}')


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_the_sluice_filter_over_the_http_api_and_over_rls(envoy, processes, tmp_path, pki, mtls):
    limiter, grpc = tls_limiter(processes, tmp_path, pki, mtls)
    socket_ = upstream_tls(pki.ca, pki.client if mtls else None)
    over_http = envoy(http_config(), clusters=[limiter_cluster("sluice_limiter", [limiter.port], socket_)])
    assert statuses(over_http, 5) == [200, 200, 200, 429, 429]
    # the fifth is denied by the filter's over-limit cache, without a call
    assert limiter.metric("sluice_limiter_checks_total") == 4
    over_rls = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc], socket_)])
    assert statuses(over_rls, 5) == [200, 200, 200, 429, 429]
    assert limiter.metric('sluice_limiter_rls_calls_total{domain="test",result="ok"}') == 3
    for e in (over_http, over_rls):
        assert e.sluice_stat("sluice.limiter_errors") == 0
    assert handshake_failures(limiter, "http") == handshake_failures(limiter, "grpc") == 0


def test_envoys_ratelimit_filter_over_mutual_tls(processes, tmp_path, pki):
    limiter, grpc = tls_limiter(processes, tmp_path, pki, mtls=True)
    e = start_rls_envoy(tmp_path, "test", [grpc], [[header_action("x-user", "x-user")]],
                        failure_mode_deny=True, transport_socket=upstream_tls(pki.ca, pki.client))
    try:
        assert statuses(e, 5) == [200, 200, 200, 429, 429]
    finally:
        e.stop()
    assert handshake_failures(limiter, "grpc") == 0


@pytest.mark.parametrize("client", ["absent", "stranger"])
def test_a_client_certificate_absent_or_from_another_ca_is_refused(envoy, processes, tmp_path, pki, client):
    limiter, grpc = tls_limiter(processes, tmp_path, pki, mtls=True)
    cert = None if client == "absent" else pki.stranger
    socket_ = upstream_tls(pki.ca, cert)
    over_http = envoy(http_config(), clusters=[limiter_cluster("sluice_limiter", [limiter.port], socket_)])
    over_rls = envoy(rls_config(), clusters=[limiter_cluster("rls", [grpc], socket_)])
    # failure_mode deny: every request gets the filter's denial
    assert statuses(over_http, 3) == [429] * 3
    assert statuses(over_rls, 3) == [429] * 3
    for e in (over_http, over_rls):
        # the filter's counters are published in the background
        wait_until(lambda e=e: e.sluice_stat("sluice.limiter_errors") == 3, what="limiter errors counted")
    assert limiter.metric("sluice_limiter_checks_total") == 0
    assert limiter.metric("sluice_limiter_rls_calls_total") == 0
    wait_until(lambda: handshake_failures(limiter, "http") >= 1 and handshake_failures(limiter, "grpc") >= 1,
               what="refused handshakes counted")
    # Python's client too, and a client with the right certificate still gets through
    with pytest.raises((ssl.SSLError, ConnectionError)):
        request(limiter.port, "/healthz", tls=client_context(pki.ca, cert))
    assert request(limiter.port, "/healthz", tls=pki.context(mtls=True)).status == 200


def plain_reply(port: int, data: bytes) -> bytes:
    """Everything a plain-text client sending `data` reads before the
    connection closes (by a FIN or a reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        reply = b""
        try:
            while chunk := sock.recv(4096):
                reply += chunk
        except ConnectionResetError:
            pass
        return reply


def test_plain_text_and_silent_clients_are_refused_alone(processes, tmp_path, pki):
    limiter, grpc = tls_limiter(processes, tmp_path, pki, mtls=False, extra=["--request-timeout-ms", "500"])
    # closed without a byte: not even a TLS alert, which a plain-text client reads as an HTTP/0.9 body
    assert plain_reply(limiter.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n") == b""
    assert plain_reply(grpc, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == b""
    wait_until(lambda: handshake_failures(limiter, "http") == 1 and handshake_failures(limiter, "grpc") == 1,
               what="plain-text handshakes counted")
    # A client that opens TCP and says nothing holds its place for the request
    # timeout only, and the others are served meanwhile.
    silent = socket.create_connection(("127.0.0.1", limiter.port))
    assert request(limiter.port, "/healthz", tls=pki.context(mtls=False)).status == 200
    silent.settimeout(30)
    assert silent.recv(1) == b""
    silent.close()
    wait_until(lambda: handshake_failures(limiter, "http") == 2, what="silent handshake counted")
    assert closed_before_hello(limiter, "http") == closed_before_hello(limiter, "grpc") == 0


PROBES = 20


def test_tcp_probes_are_counted_apart_from_failed_handshakes(processes, tmp_path, pki):
    limiter, grpc = tls_limiter(processes, tmp_path, pki, mtls=True)
    # Kubernetes' tcpSocket probe: connect, then close without a byte
    for port in (limiter.port, grpc):
        for _ in range(PROBES):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    wait_until(lambda: closed_before_hello(limiter, "http") == PROBES
               and closed_before_hello(limiter, "grpc") == PROBES, what="probes counted")
    assert handshake_failures(limiter, "http") == handshake_failures(limiter, "grpc") == 0
    # handshakes that fail still count as failures: no client certificate, one from another CA
    for cert in (None, pki.stranger):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            request(limiter.port, "/healthz", tls=client_context(pki.ca, cert))
    wait_until(lambda: handshake_failures(limiter, "http") == 2, what="refused handshakes counted")
    assert closed_before_hello(limiter, "http") == PROBES
    assert handshake_failures(limiter, "grpc") == 0


def served_certificate(port: int, context: ssl.SSLContext) -> dict:
    """The certificate a new TLS connection to `port` is served."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with context.wrap_socket(sock, server_hostname="localhost") as tls:
            return tls.getpeercert()


def replace(src, dst):
    """Replaces `dst` with a copy of `src` in one rename."""
    tmp = dst.with_suffix(".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def test_a_rotated_certificate_is_served_without_a_restart(processes, tmp_path, pki):
    a, b = pki.ca.issue("server-a"), pki.ca.issue("server-b")
    cert, key = tmp_path / "served.crt", tmp_path / "served.key"
    replace(a.cert, cert)
    replace(a.key, key)
    context = pki.context(mtls=True)
    limiter = processes.limiter(tls=context, extra_args=[
        "--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(pki.ca.cert), "--tls-poll-ms", "50"])
    pid = limiter.process.pid
    first = served_certificate(limiter.port, context)
    assert dict(x[0] for x in first["subject"])["commonName"] == "server-a"
    held = socket.create_connection(("127.0.0.1", limiter.port))
    held = context.wrap_socket(held, server_hostname="localhost")

    replace(b.key, key)
    replace(b.cert, cert)
    wait_until(lambda: served_certificate(limiter.port, context)["serialNumber"] != first["serialNumber"],
               what="certificate B served")
    now = served_certificate(limiter.port, context)
    assert dict(x[0] for x in now["subject"])["commonName"] == "server-b"
    assert limiter.process.pid == pid
    # the connection opened before the rotation still works, with A
    assert dict(x[0] for x in held.getpeercert()["subject"])["commonName"] == "server-a"
    held.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert held.recv(64).startswith(b"HTTP/1.1 200")
    held.close()

    # A bad file is refused, counted, and B stays.
    errors = limiter.metric('sluice_limiter_tls_config_loads_total{result="error"}')
    cert.write_text("not a certificate\n")
    wait_until(lambda: limiter.metric('sluice_limiter_tls_config_loads_total{result="error"}') == errors + 1,
               what="bad certificate refused")
    assert served_certificate(limiter.port, context)["serialNumber"] == now["serialNumber"]
    assert "TLS files refused" in limiter.process.log()


def test_sighup_reloads_at_once(processes, tmp_path, pki):
    b = pki.ca.issue("server-b")
    cert, key = tmp_path / "served.crt", tmp_path / "served.key"
    replace(pki.server.cert, cert)
    replace(pki.server.key, key)
    context = pki.context(mtls=False)
    # polled once an hour: only the signal reloads within the test
    limiter = processes.limiter(tls=context, extra_args=[
        "--tls-cert", str(cert), "--tls-key", str(key), "--tls-poll-ms", "3600000"])
    replace(b.key, key)
    replace(b.cert, cert)
    limiter.process.send_signal(signal.SIGHUP)
    wait_until(lambda: limiter.metric('sluice_limiter_tls_config_loads_total{result="ok"}') == 2,
               what="reload on SIGHUP")
    served = served_certificate(limiter.port, context)
    assert dict(x[0] for x in served["subject"])["commonName"] == "server-b"
    assert "SIGHUP: reloading TLS certificates" in limiter.process.log()


def test_startup_with_a_bad_tls_file_fails_clearly(tmp_path, pki):
    bad = tmp_path / "bad.pem"
    bad.write_text("junk\n")
    cases = {
        ("--tls-cert", str(bad), "--tls-key", str(pki.server.key)): "--tls-cert: no PEM certificate",
        ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.client.key)): "--tls-cert and --tls-key",
        ("--tls-cert", str(pki.server.cert), "--tls-key", str(tmp_path / "none.key")): "--tls-key ",
    }
    for flags, message in cases.items():
        run = subprocess.run([str(LIMITER_BIN), "--listen", f"127.0.0.1:{free_port()}", *flags],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode == 1, run
        assert message in run.stdout + run.stderr, run
