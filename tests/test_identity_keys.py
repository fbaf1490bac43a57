"""Keys from who is asking, through Envoy's own filters in front of Sluice:
claims of a JWT that `jwt_authn` verified, dynamic metadata set by
`header_to_metadata`, filter state set by `set_filter_state`, route names,
and the client certificate of an mTLS connection."""

from __future__ import annotations

import http.client
import json

import support
from support import sluice_config, wait_until
from support.jwt import SECRET, jwt_authn, token
from support.tls import CA, client_context, downstream_tls

def start(tmp_path, filters: list[dict], config: dict, **kwargs):
    return support.start_envoy(tmp_path, [*filters, support.wasm_filter(config)], **kwargs)


def statuses(port: int, n: int, headers: dict) -> list[int]:
    return [support.request(port, "/", headers=headers).status for _ in range(n)]


def bearer(claims: dict, secret: bytes = SECRET) -> dict:
    return {"authorization": f"Bearer {token(claims, secret)}"}


def per(key: list, requests: int = 2, **top) -> dict:
    return sluice_config([{"name": "who", "key": key,
                           "limits": [{"algorithm": "fixed_window", "requests": requests, "window": "1h"}]}],
                         **top)


def test_jwt_claims_key_each_subject_and_tenant(tmp_path):
    e = start(tmp_path, [jwt_authn()], per(["jwt:sub"]))
    try:
        alice, bob = bearer({"sub": "alice"}), bearer({"sub": "bob"})
        assert statuses(e.port, 3, alice) == [200, 200, 429]
        assert statuses(e.port, 2, bob) == [200, 200]
        # A token without the claim: the rule cannot key it, skips and counts it.
        assert statuses(e.port, 4, bearer({"name": "no subject"})) == [200] * 4
        wait_until(lambda: e.sluice_stat("sluice.who.skipped") >= 4, what="skipped counted")
        # A forged token never reaches Sluice: jwt_authn answers 401.
        wait_until(lambda: e.sluice_stat("sluice.who.denied") == 1, what="the denial counted")
        assert statuses(e.port, 2, bearer({"sub": "alice"}, secret=b"not the key")) == [401, 401]
        assert statuses(e.port, 1, bearer({"sub": "carol"})) == [200]
        wait_until(lambda: e.sluice_stat("sluice.who.allowed") == 5, what="allowed counted")
        assert e.sluice_stat("sluice.who.denied") == 1
    finally:
        e.stop()


def test_a_nested_claim_under_the_configured_payload_name(tmp_path):
    e = start(tmp_path, [jwt_authn("claims")],
              per(["jwt:org.tenant"], requests=3, jwt_payload_in_metadata="claims"))
    try:
        acme = [bearer({"sub": f"u{i}", "org": {"tenant": "acme"}}) for i in range(4)]
        assert [statuses(e.port, 1, h)[0] for h in acme] == [200, 200, 200, 429]
        assert statuses(e.port, 1, bearer({"sub": "x", "org": {"tenant": "globex"}})) == [200]
    finally:
        e.stop()


def test_dynamic_metadata_and_filter_state_from_other_filters(tmp_path):
    header_to_metadata = {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [{"header": "x-tenant", "remove": True, "on_header_present": {
                "metadata_namespace": "example.tenancy", "key": "tenant", "type": "STRING"}}],
        },
    }
    set_filter_state = {
        "name": "envoy.filters.http.set_filter_state",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config",
            "on_request_headers": [{"object_key": "example.plan", "factory_key": "envoy.string",
                                    "format_string": {"text_format_source": {"inline_string": "%REQ(x-plan)%"}}}],
        },
    }
    e = start(tmp_path, [header_to_metadata, set_filter_state],
              per(["metadata:example.tenancy:tenant", "filter_state:example.plan"]))
    try:
        assert statuses(e.port, 3, {"x-tenant": "acme", "x-plan": "gold"}) == [200, 200, 429]
        assert statuses(e.port, 2, {"x-tenant": "acme", "x-plan": "free"}) == [200, 200]
        assert statuses(e.port, 2, {"x-tenant": "globex", "x-plan": "gold"}) == [200, 200]
        # No metadata (the header is absent): skipped.
        assert statuses(e.port, 3, {"x-plan": "gold"}) == [200] * 3
    finally:
        e.stop()


def test_route_names_key_apart(tmp_path):
    routes = {"route_config": {"name": "local", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
        {"name": "search", "match": {"prefix": "/search"},
         "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}},
        {"name": "orders", "match": {"prefix": "/"},
         "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}]}]}}
    e = start(tmp_path, [], per(["route"]), hcm_extra=routes)
    try:
        assert [support.request(e.port, "/search").status for _ in range(3)] == [200, 200, 429]
        assert [support.request(e.port, "/orders/1").status for _ in range(3)] == [200, 200, 429]
    finally:
        e.stop()


def mtls_status(port: int, context) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_client_certificates_key_by_their_spiffe_id(tmp_path):
    ca = CA(tmp_path)
    server = ca.issue("server", "IP:127.0.0.1,DNS:localhost")
    frontend = ca.issue("frontend", "URI:spiffe://cluster.local/ns/shop/sa/frontend")
    batch = ca.issue("batch", "URI:spiffe://cluster.local/ns/shop/sa/batch")
    e = start(tmp_path, [], per(["peer:uri_san"]), downstream_tls=downstream_tls(ca, server))
    try:
        as_frontend = client_context(ca, frontend)
        as_frontend.check_hostname = False
        as_batch = client_context(ca, batch)
        as_batch.check_hostname = False
        assert [mtls_status(e.port, as_frontend) for _ in range(3)] == [200, 200, 429]
        assert [mtls_status(e.port, as_batch) for _ in range(2)] == [200, 200]
    finally:
        e.stop()


def test_an_api_key_inside_authorization(tmp_path):
    # The key is what follows "Bearer " (a value without it: skipped).
    config = sluice_config([
        {"name": "api-key", "key": [{"part": "header:authorization", "regex": "Bearer ([A-Za-z0-9-]+)"}],
         "limits": [{"algorithm": "fixed_window", "requests": 2, "window": "1h"}]}])
    e = start(tmp_path, [], config)
    try:
        assert statuses(e.port, 3, {"authorization": "Bearer key-1"}) == [200, 200, 429]
        assert statuses(e.port, 1, {"authorization": "Bearer key-2"}) == [200]
        assert statuses(e.port, 3, {"authorization": "Basic abc"}) == [200] * 3
    finally:
        e.stop()


def test_a_default_for_requests_without_the_claim(tmp_path):
    # A token-less request counts as the tenant "anonymous".
    e = start(tmp_path, [jwt_authn()], per([{"part": "jwt:tenant", "default": "anonymous"}]))
    try:
        assert statuses(e.port, 3, {}) == [200, 200, 429]
        assert statuses(e.port, 2, bearer({"sub": "a", "tenant": "acme"})) == [200, 200]
        assert statuses(e.port, 1, bearer({"sub": "b"})) == [429]
    finally:
        e.stop()


def test_match_on_a_claim_a_path_pattern_and_not(tmp_path):
    # Free-plan tokens on /api/v<N>/ paths, except requests marked internal.
    config = sluice_config([{
        "name": "free", "key": ["jwt:sub"],
        "match": {"path_regex": "/api/v[0-9]+/.*", "parts": [{"part": "jwt:plan", "exact": "free"}],
                  "not": {"headers": [{"name": "x-internal", "present": True}]}},
        "limits": [{"algorithm": "fixed_window", "requests": 1, "window": "1h"}]}])
    e = start(tmp_path, [jwt_authn()], config)
    try:
        free, paid = bearer({"sub": "f", "plan": "free"}), bearer({"sub": "p", "plan": "paid"})

        def on(path, headers, n=2):
            return [support.request(e.port, path, headers=headers).status for _ in range(n)]
        assert on("/api/v2/items", free) == [200, 429]
        assert on("/api/v2/items", paid) == [200, 200]
        assert on("/web/items", bearer({"sub": "f2", "plan": "free"})) == [200, 200]
        assert on("/api/v2/items", {**free, "x-internal": "1"}) == [200, 200]
    finally:
        e.stop()
