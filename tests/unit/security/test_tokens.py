"""Token-signing keys, rotation and token verification: every way a token can be wrong is refused."""

from __future__ import annotations

import msgpack
import pytest

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotAuthorized
from kudu_async.security.tokens import (
    TokenSigner,
    TokenSigningKey,
    TokenVerificationKey,
    TokenVerifier,
    UnknownSigningKey,
    sign_token,
)

T0 = 1_800_000_000.0


def _signer_with_key(now: float = T0) -> TokenSigner:
    s = TokenSigner(rotation_s=100.0, max_validity_s=50.0, propagation_s=10.0)
    assert s.next_key_needed(now)
    s.add(s.new_key(now))
    return s


def test_signed_token_verifies_with_its_claims() -> None:
    s = _signer_with_key()
    tok = s.sign("authn", {"user": "alice"}, T0 + 1, 30.0)
    v = TokenVerifier(s.verification_keys(T0))
    got = v.verify(tok, "authn", T0 + 2)
    assert got.claims == {"user": "alice"}
    assert got.expire_unix == T0 + 31
    assert got.key_seq == 0


def test_expired_tampered_wrong_kind_and_unknown_key_are_refused() -> None:
    s = _signer_with_key()
    tok = s.sign("authn", {"user": "alice"}, T0, 30.0)
    v = TokenVerifier(s.verification_keys(T0))
    with pytest.raises(KuduNotAuthorized, match="expired"):
        v.verify(tok, "authn", T0 + 30)
    with pytest.raises(KuduNotAuthorized, match="expected an authz token"):
        v.verify(tok, "authz", T0 + 1)
    payload, seq, sig = msgpack.unpackb(tok)
    forged = msgpack.packb([payload.replace(b"alice", b"admin"), seq, sig])
    with pytest.raises(KuduNotAuthorized, match="invalid signature"):
        v.verify(forged, "authn", T0 + 1)
    with pytest.raises(UnknownSigningKey, match="unknown token-signing key 0"):
        TokenVerifier().verify(tok, "authn", T0 + 1)
    with pytest.raises(KuduNotAuthorized, match="malformed"):
        v.verify(b"\x93junk", "authn", T0 + 1)
    with pytest.raises(KuduNotAuthorized, match="more than"):
        v.verify(b"x" * 20_000, "authn", T0 + 1)
    other = TokenSigningKey.generate(0, T0, T0 + 100)
    with pytest.raises(KuduNotAuthorized, match="invalid signature"):
        v.verify(sign_token(other, "authn", {"user": "alice"}, T0, 30.0), "authn", T0 + 1)


def test_rotation_pre_publishes_the_next_key_and_old_tokens_stay_valid() -> None:
    s = _signer_with_key()
    assert s.next_key_needed(T0 + 1)  # nothing waits to take over
    nxt = s.new_key(T0 + 1)
    assert nxt.seq == 1 and nxt.activate_unix == T0 + 100
    s.add(nxt)
    assert not s.next_key_needed(T0 + 1)
    old_tok = s.sign("authn", {"user": "a"}, T0 + 99, 50.0)
    v = TokenVerifier(s.verification_keys(T0 + 1))  # the node learned both keys before key 1 signs
    assert s.signing_key(T0 + 100) is not None and s.signing_key(T0 + 100).seq == 1  # type: ignore[union-attr]
    new_tok = s.sign("authn", {"user": "b"}, T0 + 101, 50.0)
    assert v.verify(new_tok, "authn", T0 + 102).key_seq == 1
    assert v.verify(old_tok, "authn", T0 + 140).key_seq == 0
    # A token never outlives the key that signed it.
    assert v.verify(s.sign("authz", {}, T0 + 101, 10_000.0), "authz", T0 + 102).expire_unix == nxt.expire_unix


def test_a_late_rotation_waits_for_propagation() -> None:
    s = _signer_with_key()
    k = s.new_key(T0 + 120)  # the master was away: key 0 is past its rotation but still valid
    assert k.activate_unix == T0 + 130


def test_records_round_trip_and_bad_records_are_refused() -> None:
    k = TokenSigningKey.generate(3, T0, T0 + 10)
    assert TokenSigningKey.from_record(msgpack.unpackb(msgpack.packb(k.to_record()))) == k
    pub = k.verification_key()
    assert TokenVerificationKey.from_record(pub.to_record()) == pub
    with pytest.raises(KuduInvalidArgument, match="lacks"):
        TokenVerificationKey.from_record({"seq": 1})
    with pytest.raises(KuduInvalidArgument, match="32 raw"):
        TokenVerificationKey.from_record({"seq": 1, "public": b"x", "activate": 0, "expire": 1})
    with pytest.raises(KuduInvalidArgument, match="expire after"):
        TokenSigningKey.generate(0, T0, T0)


def test_no_active_key_cannot_sign() -> None:
    with pytest.raises(KuduIllegalState, match="no token-signing key"):
        TokenSigner().sign("authn", {}, T0, 1.0)
