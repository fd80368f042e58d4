"""JWTs against a JWKS: each way a token can be wrong is refused, naming what was wrong."""

from __future__ import annotations

import base64
import json

import jwt
import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized
from kudu_async.security.jwt_auth import JwtVerifier, parse_jwks
from kudu_async.testing.jwks import DEFAULT_AUDIENCE, DEFAULT_ISSUER, TestIssuer

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def issuer() -> TestIssuer:
    return TestIssuer()


def _verifier(issuer: TestIssuer, **kw: str) -> JwtVerifier:
    v = JwtVerifier(issuer=kw.get("iss", DEFAULT_ISSUER), audience=kw.get("aud", DEFAULT_AUDIENCE))
    v.set_jwks(issuer.jwks())
    return v


@pytest.mark.parametrize("alg", ["EdDSA", "ES256", "RS256"])
def test_a_valid_token_names_its_user(alg: str) -> None:
    iss = TestIssuer(alg=alg, kid=f"k-{alg}")
    v = _verifier(iss)
    got = v.verify(iss.mint("alice", now=T0, ttl_s=60), T0 + 1)
    assert got.user == "alice"
    assert got.expire_unix == T0 + 60


def test_expired_and_not_yet_valid(issuer: TestIssuer) -> None:
    v = _verifier(issuer)
    tok = issuer.mint("alice", now=T0, ttl_s=60)
    with pytest.raises(KuduNotAuthorized, match="expired"):
        v.verify(tok, T0 + 60)
    early = issuer.mint("alice", now=T0, ttl_s=60, nbf=T0 + 30)
    with pytest.raises(KuduNotAuthorized, match="not valid for another"):
        v.verify(early, T0 + 1)
    assert v.verify(early, T0 + 31).user == "alice"
    with pytest.raises(KuduNotAuthorized, match="'exp'"):
        v.verify(issuer.mint("alice", now=T0, exp=None), T0)


def test_tampered_payload_is_a_bad_signature(issuer: TestIssuer) -> None:
    v = _verifier(issuer)
    head, body, sig = issuer.mint("alice", now=T0).split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["sub"] = "root"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(KuduNotAuthorized, match="bad signature"):
        v.verify(f"{head}.{forged}.{sig}", T0)
    with pytest.raises(KuduNotAuthorized, match="malformed JWT"):
        v.verify("not-a-jwt", T0)


def test_other_keys_and_algorithms_are_refused(issuer: TestIssuer) -> None:
    v = _verifier(issuer)
    stranger = TestIssuer(kid="other-key")
    with pytest.raises(KuduNotAuthorized, match="unknown key id 'other-key'"):
        v.verify(stranger.mint("alice", now=T0), T0)
    # Same kid, another key: the signature does not match.
    impostor = TestIssuer(kid=issuer.kid)
    with pytest.raises(KuduNotAuthorized, match="bad signature"):
        v.verify(impostor.mint("alice", now=T0), T0)
    unsigned = jwt.encode({"sub": "alice", "exp": T0 + 60}, "", algorithm="none", headers={"kid": issuer.kid})
    with pytest.raises(KuduNotAuthorized, match="algorithm 'none' does not match"):
        v.verify(unsigned, T0)
    hmac = jwt.encode(
        {"sub": "alice", "exp": T0 + 60},
        "secret-of-32-bytes-at-the-least!",
        algorithm="HS256",
        headers={"kid": issuer.kid},
    )
    with pytest.raises(KuduNotAuthorized, match="algorithm 'HS256' does not match"):
        v.verify(hmac, T0)


def test_issuer_and_audience(issuer: TestIssuer) -> None:
    v = _verifier(issuer)
    with pytest.raises(KuduNotAuthorized, match="wrong issuer"):
        v.verify(issuer.mint("alice", now=T0, iss="https://evil.test"), T0)
    with pytest.raises(KuduNotAuthorized, match="wrong audience"):
        v.verify(issuer.mint("alice", now=T0, aud="someone-else"), T0)
    with pytest.raises(KuduNotAuthorized, match="lacks the 'aud' claim"):
        v.verify(issuer.mint("alice", now=T0, aud=None), T0)
    # Empty flags: not checked.
    lax = _verifier(issuer, iss="", aud="")
    assert lax.verify(issuer.mint("alice", now=T0, iss="x", aud="y"), T0).user == "alice"


def test_user_claim_is_configurable(issuer: TestIssuer) -> None:
    v = JwtVerifier(username_claim="preferred_username")
    v.set_jwks(issuer.jwks())
    assert v.verify(issuer.mint("alice", now=T0, preferred_username="al"), T0).user == "al"
    with pytest.raises(KuduNotAuthorized, match="no user name in its 'preferred_username' claim"):
        v.verify(issuer.mint("alice", now=T0), T0)


def test_no_jwks_yet_and_bad_jwks(issuer: TestIssuer) -> None:
    with pytest.raises(KuduNotAuthorized, match="no JWKS loaded"):
        JwtVerifier().verify(issuer.mint("alice"), T0)
    for doc, why in [
        (b"{", "not JSON"),
        (b"[]", "'keys' list"),
        (b'{"keys": [{"kty": "oct", "k": "AAAA"}]}', "no 'kid'"),
        (b'{"keys": [{"kid": "h", "kty": "oct", "k": "AAAA", "alg": "HS256"}]}', "'HS256' is not one of"),
        (b'{"keys": [{"kid": "x", "kty": "OKP", "crv": "Ed25519", "x": "!!"}]}', "unusable"),
    ]:
        with pytest.raises(KuduInvalidArgument, match=why):
            parse_jwks(doc)
    # A reload replaces the keys: a token of a dropped key is refused.
    v = _verifier(issuer)
    v.set_jwks(TestIssuer(kid="rotated").jwks())
    with pytest.raises(KuduNotAuthorized, match="unknown key id"):
        v.verify(issuer.mint("alice", now=T0), T0)
