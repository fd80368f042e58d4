"""kudu-python's client-wide constants and ``TimeDelta``, and the security options its
``connect``/``Client`` take: checked, and turned into the client's TLS policy."""

from __future__ import annotations

import importlib.util
from typing import Any

from kudu_async.common.errors import KuduInvalidArgument, KuduNotSupported
from kudu_async.security import tls

# Decimal columns need no optional native support here; pandas is optional (Scanner.to_pandas needs it).
CLIENT_SUPPORTS_DECIMAL = True
CLIENT_SUPPORTS_PANDAS = importlib.util.find_spec("pandas") is not None

# Range bound types (Partitioning.add_range_partition, TableAlterer.add/drop_range_partition).
INCLUSIVE_BOUND = "inclusive"
EXCLUSIVE_BOUND = "exclusive"

# Encryption policies of connect()/Client(), as kudu-python's: OPTIONAL encrypts when the server can (not
# on loopback unless the server requires it), REQUIRED_REMOTE refuses a remote server without TLS,
# REQUIRED refuses any server without TLS.
ENCRYPTION_OPTIONAL = tls.POLICY_OPTIONAL
ENCRYPTION_REQUIRED_REMOTE = tls.POLICY_REQUIRED_REMOTE
ENCRYPTION_REQUIRED = tls.POLICY_REQUIRED
_ENCRYPTION_POLICIES = (ENCRYPTION_OPTIONAL, ENCRYPTION_REQUIRED_REMOTE, ENCRYPTION_REQUIRED)


def check_security(
    encryption_policy: Any = ENCRYPTION_OPTIONAL,
    require_authentication: bool = False,
    sasl_protocol_name: str | None = None,
    jwt: str | None = None,
    trusted_certificates: Any = None,
) -> None:
    """Refuse, naming it, any security option the client cannot honour: a connection that was asked to be
    encrypted or authenticated must not go out in the clear. ``jwt`` and ``require_authentication`` are
    honoured (``client/authn.py``); their values are checked there."""
    if encryption_policy not in _ENCRYPTION_POLICIES:
        raise KuduInvalidArgument(
            f"encryption_policy must be one of {', '.join(_ENCRYPTION_POLICIES)}, not {encryption_policy!r}"
        )
    if trusted_certificates:
        tls.trusted_bundle(_certificate_list(trusted_certificates))
    if sasl_protocol_name:
        raise KuduNotSupported("sasl_protocol_name: Kerberos (SASL) is not supported by kudu_async; use a JWT")
    if not isinstance(require_authentication, bool):
        raise KuduInvalidArgument(f"require_authentication must be True or False, not {require_authentication!r}")
    if jwt is not None and not isinstance(jwt, str):
        raise KuduInvalidArgument(f"jwt must be a string, not {type(jwt).__name__}")


def _certificate_list(trusted_certificates: Any) -> list[str | bytes]:
    if isinstance(trusted_certificates, str | bytes):
        return [trusted_certificates]
    try:
        items = list(trusted_certificates)
    except TypeError:
        raise KuduInvalidArgument(
            f"trusted_certificates must be PEM text, a file path or a list of them, not {trusted_certificates!r:.60}"
        ) from None
    for item in items:
        if not isinstance(item, str | bytes):
            raise KuduInvalidArgument(f"trusted_certificates: {item!r:.60} is neither PEM text nor a file path")
    return items


def client_tls(
    encryption_policy: str = ENCRYPTION_OPTIONAL, trusted_certificates: Any = None, client_certificate: Any = None
) -> tls.ClientTls:
    """The client's TLS policy. With ``trusted_certificates`` (the cluster's CA certificate, e.g. from the
    master's /ipki-ca-cert, as PEM text or file paths) every server's certificate must verify against
    them; without, connections are encrypted but the servers are not proved. ``client_certificate``
    (``(certificate, key)``, PEM text or paths; signed by a CA the servers trust, its subject's CN the
    user) authenticates the client on every connection, which is then always TLS, loopback too."""
    if encryption_policy not in _ENCRYPTION_POLICIES:
        raise KuduInvalidArgument(
            f"encryption_policy must be one of {', '.join(_ENCRYPTION_POLICIES)}, not {encryption_policy!r}"
        )
    trusted = tls.trusted_bundle(_certificate_list(trusted_certificates)) if trusted_certificates else None
    if client_certificate is None:
        return tls.ClientTls(encryption_policy, tls.client_context(trusted))
    if not isinstance(client_certificate, tuple | list) or len(client_certificate) != 2:
        raise KuduInvalidArgument("client_certificate must be a (certificate, private key) pair of PEM texts or paths")
    own = tls.user_certificate(client_certificate[0], client_certificate[1])
    return tls.ClientTls(
        encryption_policy, tls.client_context(trusted, own), encrypt_loopback=True, presents_certificate=True
    )


class TimeDelta:
    """A span of time with nanosecond resolution (kudu-python's wrapper of Kudu's MonoDelta). Build one with
    ``kudu.timedelta(...)`` or the ``from_*`` constructors."""

    __slots__ = ("_nanos",)

    def __init__(self) -> None:
        self._nanos: int | None = None  # None: not set, as a default-constructed MonoDelta

    @staticmethod
    def _of(nanos: int) -> TimeDelta:
        t = TimeDelta()
        t._nanos = int(nanos)
        return t

    @staticmethod
    def from_seconds(seconds: float) -> TimeDelta:
        return TimeDelta._of(round(seconds * 1_000_000_000))

    @staticmethod
    def from_millis(ms: int) -> TimeDelta:
        return TimeDelta._of(int(ms) * 1_000_000)

    @staticmethod
    def from_micros(us: int) -> TimeDelta:
        return TimeDelta._of(int(us) * 1_000)

    @staticmethod
    def from_nanos(seconds: int) -> TimeDelta:  # kudu-python names the nanoseconds 'seconds'
        return TimeDelta._of(int(seconds))

    def _n(self) -> int:
        if self._nanos is None:
            raise KuduInvalidArgument("this TimeDelta was never set (build one with kudu.timedelta)")
        return self._nanos

    def to_seconds(self) -> float:
        return self._n() / 1e9

    def to_millis(self) -> int:
        return self._n() // 1_000_000

    def to_micros(self) -> int:
        return self._n() // 1_000

    def to_nanos(self) -> int:
        return self._n()

    def __repr__(self) -> str:
        if self._nanos is None:
            return "kudu.TimeDelta()"
        return f"kudu.TimeDelta({self._nanos / 1e9:.3f}s)"

    def _key(self, other: object) -> tuple[int, int]:
        if not isinstance(other, TimeDelta):
            raise TypeError(f"a TimeDelta compares with a TimeDelta, not {type(other).__name__}")
        return self._n(), other._n()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TimeDelta):
            return NotImplemented
        return self._nanos == other._nanos

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __lt__(self, other: TimeDelta) -> bool:
        a, b = self._key(other)
        return a < b

    def __le__(self, other: TimeDelta) -> bool:
        a, b = self._key(other)
        return a <= b

    def __gt__(self, other: TimeDelta) -> bool:
        a, b = self._key(other)
        return a > b

    def __ge__(self, other: TimeDelta) -> bool:
        a, b = self._key(other)
        return a >= b


def timedelta(seconds: float = 0, millis: int = 0, micros: int = 0, nanos: int = 0) -> TimeDelta:
    """kudu-python's ``kudu.timedelta``: the sum of the parts as one TimeDelta."""
    return TimeDelta.from_nanos(round(seconds * 1_000_000_000) + millis * 1_000_000 + micros * 1_000 + nanos)
