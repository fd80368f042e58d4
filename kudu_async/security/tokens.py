"""Token-signing keys (Kudu's TSKs) and the tokens they sign: authn tokens and authz tokens.

The leader master signs; every node verifies with the public halves it got from the catalog or from
heartbeats, without calling the master. Keys are Ed25519 (``cryptography``): small, fast to verify, and
nothing to choose wrongly. A key is made one rotation period before it starts signing, so that every
node has its public half before the first token signed with it arrives; it verifies for as long as a
token it signed may live. Sans-IO: every call takes the time (seconds since the epoch) as an argument.

Wire form of a token: msgpack ``[payload, key_seq, signature]``, where ``payload`` is the msgpack of
``{"kind", "claims", "iat", "exp"}`` and the signature covers the payload bytes exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotAuthorized, KuduServiceUnavailable

TokenKind = Literal["authn", "authz"]
TOKEN_KINDS: tuple[TokenKind, ...] = ("authn", "authz")

# Kudu's defaults: --tsk_rotation_seconds (1 day), --authn_token_validity_seconds (7 days),
# --authz_token_validity_seconds (5 minutes).
DEFAULT_ROTATION_S = 86_400.0
DEFAULT_AUTHN_VALIDITY_S = 7 * 86_400.0
DEFAULT_AUTHZ_VALIDITY_S = 300.0
# Tokens are small; anything bigger is not one of ours and is refused before it is parsed.
MAX_TOKEN_BYTES = 16 * 1024
# Public keys a verifier keeps: a handful live at once (the signing one, the next, and the ones whose
# tokens may still be valid); more than this means a peer is sending junk.
MAX_VERIFICATION_KEYS = 64


class UnknownSigningKey(KuduNotAuthorized):
    """A token signed with a key newer than any this node knows: a caller may retry once keys arrive."""


@dataclass(frozen=True, slots=True)
class TokenVerificationKey:
    """The public half of a token-signing key, as distributed to every node."""

    seq: int
    public_raw: bytes
    activate_unix: float
    expire_unix: float

    def to_record(self) -> dict[str, Any]:
        return {"seq": self.seq, "public": self.public_raw, "activate": self.activate_unix, "expire": self.expire_unix}

    @classmethod
    def from_record(cls, rec: Any) -> TokenVerificationKey:
        try:
            seq, public, activate, expire = rec["seq"], rec["public"], rec["activate"], rec["expire"]
        except (TypeError, KeyError) as e:
            raise KuduInvalidArgument(f"token verification key record lacks {e}") from None
        if not isinstance(seq, int) or seq < 0:
            raise KuduInvalidArgument(f"token verification key seq must be a non-negative integer, got {seq!r}")
        if not isinstance(public, bytes) or len(public) != 32:
            raise KuduInvalidArgument(f"token verification key {seq}: public key must be 32 raw Ed25519 bytes")
        if not isinstance(activate, int | float) or not isinstance(expire, int | float) or expire <= activate:
            raise KuduInvalidArgument(f"token verification key {seq}: bad activate/expire times")
        return cls(seq, public, float(activate), float(expire))


@dataclass(frozen=True, slots=True)
class TokenSigningKey:
    """A token-signing key with its private half, as the masters keep it in the system catalog."""

    seq: int
    private_raw: bytes
    activate_unix: float
    expire_unix: float

    @classmethod
    def generate(cls, seq: int, activate_unix: float, expire_unix: float) -> TokenSigningKey:
        if expire_unix <= activate_unix:
            raise KuduInvalidArgument("a token-signing key must expire after it activates")
        raw = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return cls(seq, raw, activate_unix, expire_unix)

    def verification_key(self) -> TokenVerificationKey:
        pub = (
            Ed25519PrivateKey.from_private_bytes(self.private_raw)
            .public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        return TokenVerificationKey(self.seq, pub, self.activate_unix, self.expire_unix)

    def to_record(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "private": self.private_raw,
            "activate": self.activate_unix,
            "expire": self.expire_unix,
        }

    @classmethod
    def from_record(cls, rec: Any) -> TokenSigningKey:
        try:
            seq, private, activate, expire = rec["seq"], rec["private"], rec["activate"], rec["expire"]
        except (TypeError, KeyError) as e:
            raise KuduInvalidArgument(f"token-signing key record lacks {e}") from None
        if not isinstance(seq, int) or seq < 0 or not isinstance(private, bytes) or len(private) != 32:
            raise KuduInvalidArgument(f"token-signing key record {seq!r} is malformed")
        if not isinstance(activate, int | float) or not isinstance(expire, int | float) or expire <= activate:
            raise KuduInvalidArgument(f"token-signing key {seq}: bad activate/expire times")
        return cls(seq, private, float(activate), float(expire))


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    kind: TokenKind
    claims: dict[str, Any]
    issued_unix: float
    expire_unix: float
    key_seq: int


def sign_token(key: TokenSigningKey, kind: TokenKind, claims: dict[str, Any], now: float, validity_s: float) -> bytes:
    """A token of ``kind`` carrying ``claims``, valid from ``now`` for ``validity_s`` (never past the key)."""
    if kind not in TOKEN_KINDS:
        raise KuduInvalidArgument(f"unknown token kind {kind!r}")
    if not key.activate_unix <= now < key.expire_unix:
        raise KuduIllegalState(f"token-signing key {key.seq} is not active at {now:.0f}")
    exp = min(now + validity_s, key.expire_unix)
    payload = msgpack.packb({"kind": kind, "claims": claims, "iat": now, "exp": exp}, use_bin_type=True)
    sig = Ed25519PrivateKey.from_private_bytes(key.private_raw).sign(payload)
    return msgpack.packb([payload, key.seq, sig], use_bin_type=True)


class TokenVerifier:
    """The public keys a node knows and the check of a token against them."""

    def __init__(self, keys: Iterable[TokenVerificationKey] = ()) -> None:
        self._keys: dict[int, tuple[TokenVerificationKey, Ed25519PublicKey]] = {}
        self.add(keys)

    def add(self, keys: Iterable[TokenVerificationKey]) -> None:
        for k in keys:
            if k.seq not in self._keys:
                self._keys[k.seq] = (k, Ed25519PublicKey.from_public_bytes(k.public_raw))
        while len(self._keys) > MAX_VERIFICATION_KEYS:
            del self._keys[min(self._keys)]

    def drop_expired(self, now: float) -> None:
        for seq in [s for s, (k, _) in self._keys.items() if k.expire_unix <= now]:
            del self._keys[seq]

    @property
    def max_seq(self) -> int:
        return max(self._keys, default=-1)

    def keys(self) -> list[TokenVerificationKey]:
        return [k for k, _ in sorted(self._keys.values(), key=lambda kv: kv[0].seq)]

    def verify(self, token: bytes, kind: TokenKind, now: float) -> VerifiedToken:
        """The token's claims if it is well formed, signed by a known key, of ``kind`` and unexpired."""
        if len(token) > MAX_TOKEN_BYTES:
            raise KuduNotAuthorized(f"{kind} token is {len(token)} bytes, more than {MAX_TOKEN_BYTES}")
        try:
            payload, seq, sig = msgpack.unpackb(token, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise KuduNotAuthorized(f"malformed {kind} token: {e}") from None
        if not isinstance(payload, bytes) or not isinstance(seq, int) or not isinstance(sig, bytes):
            raise KuduNotAuthorized(f"malformed {kind} token")
        entry = self._keys.get(seq)
        if entry is None:
            if seq <= self.max_seq:
                # Older keys leave a verifier only when they expire, and every token expires with its key.
                raise KuduNotAuthorized(f"{kind} token expired (its token-signing key {seq} has)")
            raise UnknownSigningKey(f"{kind} token signed by unknown token-signing key {seq}")
        key, pub = entry
        try:
            pub.verify(sig, payload)
        except InvalidSignature:
            raise KuduNotAuthorized(f"{kind} token has an invalid signature") from None
        try:
            body = msgpack.unpackb(payload, raw=False)
            got_kind, claims, iat, exp = body["kind"], body["claims"], body["iat"], body["exp"]
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
            raise KuduNotAuthorized(f"malformed {kind} token payload: {e}") from None
        if got_kind != kind:
            raise KuduNotAuthorized(f"expected an {kind} token, got an {got_kind!r} token")
        if not isinstance(claims, dict) or not isinstance(exp, int | float) or not isinstance(iat, int | float):
            raise KuduNotAuthorized(f"malformed {kind} token payload")
        if now >= exp or now >= key.expire_unix:
            raise KuduNotAuthorized(f"{kind} token expired")
        return VerifiedToken(kind, claims, float(iat), float(exp), seq)

    def verify_or_retry(self, token: bytes, kind: TokenKind, now: float) -> VerifiedToken:
        """:meth:`verify` for a server answering a call: a token signed by a key newer than any this node
        knows is SERVICE_UNAVAILABLE (the key arrives with the next heartbeat; the caller retries), every
        other failure NOT_AUTHORIZED."""
        try:
            return self.verify(token, kind, now)
        except UnknownSigningKey as e:
            raise KuduServiceUnavailable(f"{e}; this node has not received it yet, retry") from None


class TokenSigner:
    """The leader master's keys and rotation policy.

    ``next_key_needed(now)`` says when a key must be made: the caller generates it with ``new_key``,
    persists it (the system catalog), and only then ``add``s it, so no token is ever signed by a key the
    other masters could lose. A key made while another signs activates when that one has signed for a
    rotation period, and never sooner than ``propagation_s`` from now (time for heartbeats to carry its
    public half to every node); it lives for a rotation period plus the longest token validity.
    """

    def __init__(
        self,
        rotation_s: float = DEFAULT_ROTATION_S,
        max_validity_s: float = DEFAULT_AUTHN_VALIDITY_S,
        propagation_s: float = 60.0,
    ) -> None:
        if rotation_s <= 0 or max_validity_s <= 0 or propagation_s < 0:
            raise KuduInvalidArgument("token rotation period and validity must be positive")
        self.rotation_s = rotation_s
        self.max_validity_s = max_validity_s
        self.propagation_s = propagation_s
        self._keys: dict[int, TokenSigningKey] = {}

    def add(self, key: TokenSigningKey) -> None:
        self._keys[key.seq] = key

    def keys(self) -> list[TokenSigningKey]:
        return [self._keys[s] for s in sorted(self._keys)]

    def verification_keys(self, now: float) -> list[TokenVerificationKey]:
        return [k.verification_key() for k in self.keys() if k.expire_unix > now]

    def drop_expired(self, now: float) -> list[int]:
        gone = [s for s, k in self._keys.items() if k.expire_unix <= now]
        for s in gone:
            del self._keys[s]
        return gone

    def signing_key(self, now: float) -> TokenSigningKey | None:
        """The newest key already active: it signs everything from now on."""
        active = [k for k in self._keys.values() if k.activate_unix <= now < k.expire_unix]
        return max(active, key=lambda k: k.seq) if active else None

    def next_key_needed(self, now: float) -> bool:
        """True when there is no key to sign with, or no key waiting to take over after this one."""
        if self.signing_key(now) is None:
            return True
        return not any(k.activate_unix > now for k in self._keys.values())

    def new_key(self, now: float) -> TokenSigningKey:
        """A key to persist and then ``add``: active now if none signs, else one rotation period after the newest."""
        seq = max(self._keys, default=-1) + 1
        current = self.signing_key(now)
        if current is None:
            activate = now
        else:
            newest = max(self._keys.values(), key=lambda k: k.activate_unix)
            activate = max(now + self.propagation_s, newest.activate_unix + self.rotation_s)
        return TokenSigningKey.generate(seq, activate, activate + self.rotation_s + self.max_validity_s)

    def sign(self, kind: TokenKind, claims: dict[str, Any], now: float, validity_s: float) -> bytes:
        key = self.signing_key(now)
        if key is None:
            raise KuduIllegalState("no token-signing key is active yet")
        return sign_token(key, kind, claims, now, validity_s)
