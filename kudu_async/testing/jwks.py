"""A JWT issuer for tests: a signing key made on the spot, its JWKS, and a function that mints tokens."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

DEFAULT_ISSUER = "https://issuer.test"
DEFAULT_AUDIENCE = "kudu"


class TestIssuer:
    """Signs JWTs with a fresh key of ``alg`` (EdDSA, ES256 or RS256) under key id ``kid``."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        alg: str = "EdDSA",
        kid: str = "test-key-1",
        issuer: str = DEFAULT_ISSUER,
        audience: str = DEFAULT_AUDIENCE,
    ) -> None:
        self.alg = alg
        self.kid = kid
        self.issuer = issuer
        self.audience = audience
        self._key: Any
        jwk: dict[str, Any]
        if alg == "EdDSA":
            self._key = ed25519.Ed25519PrivateKey.generate()
            jwk = json.loads(OKPAlgorithm.to_jwk(self._key.public_key()))
        elif alg == "ES256":
            self._key = ec.generate_private_key(ec.SECP256R1())
            jwk = json.loads(ECAlgorithm.to_jwk(self._key.public_key()))
        elif alg == "RS256":
            self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            jwk = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
        else:
            raise ValueError(f"unsupported test algorithm {alg!r}")
        jwk.update({"kid": kid, "alg": alg, "use": "sig"})
        self.jwk = jwk

    def jwks(self, *others: TestIssuer) -> bytes:
        """The JWKS document holding this issuer's public key (and those of ``others``)."""
        return json.dumps({"keys": [self.jwk, *(o.jwk for o in others)]}).encode()

    def mint(self, sub: str, *, ttl_s: float = 3600.0, now: float | None = None, **claims: Any) -> str:
        """A JWT for ``sub`` valid ``ttl_s`` from ``now``; ``claims`` add or override (``iss=None`` drops one)."""
        t = time.time() if now is None else now
        body: dict[str, Any] = {"sub": sub, "iss": self.issuer, "aud": self.audience, "iat": int(t), "exp": t + ttl_s}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self._key, algorithm=self.alg, headers={"kid": self.kid})
