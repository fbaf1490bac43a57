"""JSON Web Tokens signed with HS256 and Envoy's `jwt_authn` filter that
verifies them against a local JWKS: the tests' and the benchmark's source of
verified claims."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

SECRET = b"sluice-test-secret-0123456789abcdef"
ISSUER = "sluice-test"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(claims: dict, secret: bytes = SECRET, ttl: int = 3600) -> str:
    """A JWT signed with HS256, valid for `ttl` seconds (Envoy's jwt_authn
    verifies HMAC keys of a local JWKS)."""
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps({"iss": ISSUER, "exp": int(time.time()) + ttl, **claims}).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


def jwt_authn(payload_in_metadata: str = "jwt_payload") -> dict:
    """Envoy's jwt_authn: a token is optional, but one that is there must verify."""
    jwks = {"keys": [{"kty": "oct", "alg": "HS256", "kid": "k1", "k": b64(SECRET)}]}
    return {
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            "providers": {"test": {"issuer": ISSUER, "local_jwks": {"inline_string": json.dumps(jwks)},
                                   "payload_in_metadata": payload_in_metadata}},
            "rules": [{"match": {"prefix": "/"}, "requires": {"requires_any": {"requirements": [
                {"provider_name": "test"}, {"allow_missing": {}}]}}}],
        },
    }
