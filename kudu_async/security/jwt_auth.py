"""JWT bearer tokens checked against a JSON Web Key Set (Kudu's ``--enable-jwt-token-auth``).

Sans-IO: ``JwtVerifier`` is given the JWKS document's bytes (the node's shell reads ``--jwks-file-path``
again when it changes, or fetches ``--jwks-url``) and, for each check, the time. PyJWT checks the
signature (with the algorithm the JWKS names for the token's ``kid``, never the one the token's header
asks for alone, so ``alg: none`` or an HMAC keyed with a public key cannot pass) and the audience and
issuer; expiry and not-before are checked here against the given time, so tests and the cache agree on
what "now" is.

Every refusal is a ``KuduNotAuthorized`` that says what was wrong: expired, not yet valid, bad signature,
unknown key id, wrong issuer or audience, no user claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jwt
from jwt import PyJWK

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized

# The asymmetric algorithms a JWKS key may name; symmetric ones (HS*) are refused: a JWKS is public.
ALLOWED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"})
# Larger tokens or key sets are not ours: refused before they are parsed.
MAX_JWT_BYTES = 16 * 1024
MAX_JWKS_BYTES = 1024 * 1024
MAX_JWKS_KEYS = 100
# Seconds of clock difference with the issuer tolerated on exp/nbf.
DEFAULT_LEEWAY_S = 0.0


@dataclass(frozen=True, slots=True)
class VerifiedJwt:
    user: str
    expire_unix: float | None
    claims: dict[str, Any]


def _key_algorithm(jwk: dict[str, Any]) -> str:
    """The algorithm a JWKS entry is for: its ``alg``, or the only one its key type allows."""
    alg = jwk.get("alg")
    if isinstance(alg, str):
        return alg
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "OKP" and crv == "Ed25519":
        return "EdDSA"
    if kty == "EC" and crv == "P-256":
        return "ES256"
    if kty == "EC" and crv == "P-384":
        return "ES384"
    if kty == "RSA":
        return "RS256"
    raise KuduInvalidArgument(f"JWKS key {jwk.get('kid')!r}: no 'alg' and key type {kty!r}/{crv!r} names none")


def parse_jwks(data: bytes) -> dict[str, tuple[str, PyJWK]]:
    """``kid -> (algorithm, key)`` of a JWKS document; a malformed document or key is an error naming it."""
    if len(data) > MAX_JWKS_BYTES:
        raise KuduInvalidArgument(f"JWKS is {len(data)} bytes, more than {MAX_JWKS_BYTES}")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise KuduInvalidArgument(f"JWKS is not JSON: {e}") from None
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list):
        raise KuduInvalidArgument("JWKS must be a JSON object with a 'keys' list")
    if len(keys) > MAX_JWKS_KEYS:
        raise KuduInvalidArgument(f"JWKS holds {len(keys)} keys, more than {MAX_JWKS_KEYS}")
    out: dict[str, tuple[str, PyJWK]] = {}
    for i, k in enumerate(keys):
        if not isinstance(k, dict) or not isinstance(k.get("kid"), str) or not k["kid"]:
            raise KuduInvalidArgument(f"JWKS key {i} has no 'kid'")
        if k.get("use", "sig") != "sig":
            continue
        alg = _key_algorithm(k)
        if alg not in ALLOWED_ALGORITHMS:
            raise KuduInvalidArgument(
                f"JWKS key {k['kid']!r}: algorithm {alg!r} is not one of {sorted(ALLOWED_ALGORITHMS)}"
            )
        try:
            out[k["kid"]] = (alg, PyJWK(k, alg))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as e:
            raise KuduInvalidArgument(f"JWKS key {k['kid']!r} is unusable: {e}") from None
    return out


class JwtVerifier:
    """The keys of one JWKS and the claims every token must satisfy."""

    def __init__(
        self,
        *,
        issuer: str = "",
        audience: str = "",
        username_claim: str = "sub",
        leeway_s: float = DEFAULT_LEEWAY_S,
    ) -> None:
        if not username_claim:
            raise KuduInvalidArgument("the JWT user name claim must not be empty")
        self.issuer = issuer
        self.audience = audience
        self.username_claim = username_claim
        self.leeway_s = leeway_s
        self._keys: dict[str, tuple[str, PyJWK]] = {}
        self.loaded = False

    def set_jwks(self, data: bytes) -> None:
        """Use the keys of this JWKS document from now on (the old ones are dropped)."""
        self._keys = parse_jwks(data)
        self.loaded = True

    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def verify(self, token: str, now: float) -> VerifiedJwt:
        """The token's user and expiry if it is signed by a JWKS key and its claims hold at ``now``."""
        if len(token) > MAX_JWT_BYTES:
            raise KuduNotAuthorized(f"JWT is {len(token)} bytes, more than {MAX_JWT_BYTES}")
        if not self.loaded:
            raise KuduNotAuthorized("JWT not accepted: this node has no JWKS loaded yet")
        claims = self._decode(token, *self._key_for(token))
        exp = _number(claims, "exp")
        if exp is None or now >= exp + self.leeway_s:
            raise KuduNotAuthorized(f"JWT expired {now - (exp or 0):.0f}s ago")
        nbf = _number(claims, "nbf")
        if nbf is not None and now < nbf - self.leeway_s:
            raise KuduNotAuthorized(f"JWT not valid for another {nbf - now:.0f}s (nbf)")
        user = claims.get(self.username_claim)
        if not isinstance(user, str) or not user:
            raise KuduNotAuthorized(f"JWT has no user name in its {self.username_claim!r} claim")
        return VerifiedJwt(user, exp, claims)

    def _key_for(self, token: str) -> tuple[str, str, PyJWK]:
        """(kid, algorithm, key) the JWKS holds for the key id the token names."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as e:
            raise KuduNotAuthorized(f"malformed JWT: {e}") from None
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise KuduNotAuthorized("JWT header has no 'kid' naming its signing key")
        entry = self._keys.get(kid)
        if entry is None:
            raise KuduNotAuthorized(f"JWT signed with unknown key id {kid!r}")
        alg, key = entry
        if header.get("alg") != alg:
            raise KuduNotAuthorized(f"JWT algorithm {header.get('alg')!r} does not match key {kid!r} ({alg})")
        return kid, alg, key

    def _decode(self, token: str, kid: str, alg: str, key: PyJWK) -> dict[str, Any]:
        """The claims, once the signature, issuer and audience are checked (times are checked by the caller)."""
        require = ["exp"]
        if self.issuer:
            require.append("iss")
        if self.audience:
            require.append("aud")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience or None,
                issuer=self.issuer or None,
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": bool(self.audience),
                    "verify_iss": bool(self.issuer),
                    "require": require,
                },
            )
        except jwt.InvalidSignatureError:
            raise KuduNotAuthorized(f"JWT has a bad signature (key {kid!r})") from None
        except jwt.InvalidAudienceError:
            raise KuduNotAuthorized(f"JWT has the wrong audience (expected {self.audience!r})") from None
        except jwt.InvalidIssuerError:
            raise KuduNotAuthorized(f"JWT has the wrong issuer (expected {self.issuer!r})") from None
        except jwt.MissingRequiredClaimError as e:
            raise KuduNotAuthorized(f"JWT lacks the {e.claim!r} claim") from None
        except jwt.InvalidTokenError as e:
            raise KuduNotAuthorized(f"JWT refused: {e}") from None
        return claims


def _number(claims: dict[str, Any], name: str) -> float | None:
    v = claims.get(name)
    if v is None:
        return None
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise KuduNotAuthorized(f"JWT {name!r} claim is not a number")
    return float(v)
