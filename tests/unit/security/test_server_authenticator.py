"""The servers' authenticator: every branch (token, JWT, certificate, none), its cache and its refusals."""

from __future__ import annotations

import base64

import pytest

from kudu_async.common.errors import KuduNotAuthorized, KuduServiceUnavailable
from kudu_async.security.authn import ServerAuthenticator, bearer_header, kudu_token_header
from kudu_async.security.identity import Identity, TlsPeer
from kudu_async.security.jwt_auth import JwtVerifier
from kudu_async.security.tokens import TokenSigner, TokenVerifier
from kudu_async.testing.jwks import TestIssuer

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def issuer() -> TestIssuer:
    return TestIssuer()


def _setup(
    issuer: TestIssuer, mode: str = "optional", jwt_users: list[str] | None = None
) -> tuple[ServerAuthenticator, TokenSigner, Clock]:
    clock = Clock()
    signer = TokenSigner(rotation_s=100.0, max_validity_s=50.0, propagation_s=10.0)
    signer.add(signer.new_key(T0))
    verifier = TokenVerifier(signer.verification_keys(T0))
    jv = JwtVerifier(issuer=issuer.issuer, audience=issuer.audience)
    jv.set_jwks(issuer.jwks())
    auth = ServerAuthenticator(mode=mode, token_verifier=verifier, jwt_verifier=jv, jwt_users=jwt_users, clock=clock)
    return auth, signer, clock


def test_each_kind_of_credential(issuer: TestIssuer) -> None:
    auth, signer, _ = _setup(issuer)
    token = signer.sign("authn", {"user": "bob"}, T0, 30.0)
    assert auth.authenticate(kudu_token_header(token), "x", None) == Identity("bob", "token")
    assert auth.authenticate(bearer_header(issuer.mint("carol", now=T0)), "x", None) == Identity("carol", "jwt")
    assert auth.authenticate(None, "x", TlsPeer(b"der", "dave")) == Identity("dave", "cert")
    assert auth.authenticate(None, "eve", None) == Identity("eve", "none")
    # Credentials win over the certificate; bad credentials are refused even with one.
    with pytest.raises(KuduNotAuthorized, match="unknown authorization scheme 'Basic'"):
        auth.authenticate(b"Basic Zm9v", "eve", TlsPeer(b"der", "dave"))


def test_required_refuses_a_caller_without_credentials(issuer: TestIssuer) -> None:
    auth, _, _ = _setup(issuer, mode="required")
    with pytest.raises(KuduNotAuthorized, match="authentication required: eve sent no credentials"):
        auth.authenticate(None, "eve", None)
    with pytest.raises(KuduNotAuthorized, match="authentication required"):
        auth.authenticate(None, "eve", TlsPeer(None, None))  # encrypted, no client certificate
    assert auth.authenticate(None, "x", TlsPeer(b"der", "dave")).authn == "cert"
    disabled, _, _ = _setup(issuer, mode="disabled")
    assert disabled.authenticate(b"KuduToken garbage", "eve", None) == Identity("eve", "none")


def test_bad_tokens(issuer: TestIssuer) -> None:
    auth, signer, clock = _setup(issuer)
    token = signer.sign("authn", {"user": "bob"}, T0, 30.0)
    tampered = bytearray(token)
    tampered[-1] ^= 1
    with pytest.raises(KuduNotAuthorized, match="invalid signature"):
        auth.authenticate(kudu_token_header(bytes(tampered)), "x", None)
    with pytest.raises(KuduNotAuthorized, match="not valid base64"):
        auth.authenticate(b"KuduToken !!!", "x", None)
    authz = signer.sign("authz", {"user": "bob"}, T0, 30.0)
    with pytest.raises(KuduNotAuthorized, match="expected an authn token"):
        auth.authenticate(kudu_token_header(authz), "x", None)
    clock.now = T0 + 31
    with pytest.raises(KuduNotAuthorized, match="authn token expired"):
        auth.authenticate(kudu_token_header(token), "x", None)


def test_a_token_of_a_key_not_yet_received_asks_for_a_retry(issuer: TestIssuer) -> None:
    auth, _, _ = _setup(issuer)
    newer = TokenSigner(rotation_s=100.0, max_validity_s=50.0)
    for _ in range(3):
        newer.add(newer.new_key(T0))
    tok = newer.sign("authn", {"user": "bob"}, T0 + 210, 30.0)  # key seq 2: unknown here
    with pytest.raises(KuduServiceUnavailable, match="retry"):
        auth.authenticate(kudu_token_header(tok), "x", None)
    # A token of a key the verifier dropped (keys leave when they expire) is an expired one: the client renews.
    assert auth.token_verifier is not None
    old = TokenSigner(rotation_s=100.0, max_validity_s=50.0)
    old.add(old.new_key(T0))
    token = old.sign("authn", {"user": "bob"}, T0, 30.0)
    auth.token_verifier.add(newer.verification_keys(T0))
    auth.token_verifier.drop_expired(T0 + 200)  # key 0 gone, 1 and 2 stay
    with pytest.raises(KuduNotAuthorized, match="authn token expired"):
        auth.authenticate(kudu_token_header(token), "x", None)


def test_tservers_take_jwts_of_service_users_only(issuer: TestIssuer) -> None:
    auth, _, _ = _setup(issuer, jwt_users=["kudu"])
    assert auth.authenticate(bearer_header(issuer.mint("kudu", now=T0)), "kudu", None) == Identity("kudu", "jwt")
    with pytest.raises(KuduNotAuthorized, match="JWT of user 'alice' not accepted here"):
        auth.authenticate(bearer_header(issuer.mint("alice", now=T0)), "alice", None)
    no_jwt = ServerAuthenticator(token_verifier=TokenVerifier())
    with pytest.raises(KuduNotAuthorized, match="JWT authentication is not enabled"):
        no_jwt.authenticate(bearer_header(issuer.mint("alice", now=T0)), "alice", None)


def test_verified_credentials_are_cached_until_they_expire(issuer: TestIssuer) -> None:
    auth, _, clock = _setup(issuer)
    header = bearer_header(issuer.mint("carol", now=T0, ttl_s=10))
    for _ in range(5):
        assert auth.authenticate(header, "", None).user == "carol"
    assert (auth.misses, auth.hits) == (1, 4)
    clock.now = T0 + 10
    with pytest.raises(KuduNotAuthorized, match="JWT expired"):
        auth.authenticate(header, "", None)
    # Bounded: the least recently used entry goes.
    auth.cache_entries = 2
    clock.now = T0
    headers = [bearer_header(issuer.mint(f"u{i}", now=T0)) for i in range(3)]
    for h in headers:
        auth.authenticate(h, "", None)
    assert len(auth._cache) == 2 and headers[0] not in auth._cache
    auth.forget()
    assert not auth._cache


def test_token_header_round_trip() -> None:
    assert kudu_token_header(b"\x00\x01") == b"KuduToken " + base64.b64encode(b"\x00\x01")
