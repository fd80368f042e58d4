"""TLS for RPC and admin HTTP: ``ssl.SSLContext`` builders and the per-connection encryption decisions.

Sans-IO apart from loading a certificate chain (the ``ssl`` module reads chains from files only, so
``load_cert_key`` writes them to a private temporary directory for the moment of loading). The
policies here decide, from the configuration and the peer's address, whether a connection is to be
encrypted; the RPC shells (rpc/server.py, rpc/client.py) act on those decisions at connect time only.

Verification follows Kudu without Kerberos: a node or client that trusts a CA verifies its peer's
certificate chain against it (and a server asks clients for a certificate, verifying it when given: the
servers' mutual TLS); with nothing to trust, TLS still encrypts but proves nothing about the peer.
Host names are not checked (a node is known by its certificate's subject, the service user, as Kudu
knows it by its Kerberos principal), so a cluster reached through any address verifies the same.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.security.ca import CertKey, check_key_matches, load_certificate, load_certificates, load_private_key
from kudu_async.security.identity import TlsPeer

ALPN_H2 = "h2"
ENCRYPTION_MODES = ("disabled", "optional", "required")
# Client policies (kudu-python's names for connect(encryption_policy=...)).
POLICY_OPTIONAL = "optional"
POLICY_REQUIRED_REMOTE = "required_remote"
POLICY_REQUIRED = "required"
CLIENT_POLICIES = (POLICY_OPTIONAL, POLICY_REQUIRED_REMOTE, POLICY_REQUIRED)
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.2 suites: forward secrecy (ECDHE) and AEAD only. TLS 1.3 suites are OpenSSL's (all AEAD); the
# ``ssl`` module does not let them be narrowed.
DEFAULT_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# The first byte of a TLS handshake record (a ClientHello); an h2c client starts with b"PRI".
TLS_HANDSHAKE_BYTE = 0x16


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """Protocol floor and TLS 1.2 cipher list (Kudu's --rpc-tls-min-protocol and --rpc-tls-ciphers)."""

    min_protocol: str = "TLSv1.2"
    ciphers: str = DEFAULT_CIPHERS

    def __post_init__(self) -> None:
        if self.min_protocol not in TLS_VERSIONS:
            raise KuduInvalidArgument(
                f"TLS minimum protocol {self.min_protocol!r}: expected one of {', '.join(TLS_VERSIONS)}"
            )


def _base(ctx: ssl.SSLContext, opts: TlsOptions) -> ssl.SSLContext:
    ctx.minimum_version = TLS_VERSIONS[opts.min_protocol]
    try:
        ctx.set_ciphers(opts.ciphers)
    except ssl.SSLError:
        raise KuduInvalidArgument(f"TLS ciphers {opts.ciphers!r}: OpenSSL accepts none of them") from None
    ctx.set_alpn_protocols([ALPN_H2])
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


def load_cert_key(ctx: ssl.SSLContext, own: CertKey) -> None:
    """Install a certificate and key given as PEM bytes (through files only this process can read)."""
    with tempfile.TemporaryDirectory(prefix="kudu-tls-") as d:
        cert_path, key_path = Path(d, "cert.pem"), Path(d, "key.pem")
        for path, data in ((cert_path, own.cert_pem), (key_path, own.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise KuduInvalidArgument(f"certificate and key cannot be used for TLS: {e.reason or e}") from None


def _trust(ctx: ssl.SSLContext, trusted_pem: bytes) -> None:
    load_certificates(trusted_pem, "trusted CA certificates")  # a clear error before OpenSSL's
    ctx.load_verify_locations(cadata=trusted_pem.decode("ascii"))


def server_context(own: CertKey, trusted_pem: bytes | None, opts: TlsOptions = TlsOptions()) -> ssl.SSLContext:
    """A server's context: presents ``own``; with a trusted CA, asks clients for a certificate and
    verifies the one given (clients without one still connect: users authenticate otherwise)."""
    ctx = _base(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), opts)
    load_cert_key(ctx, own)
    if trusted_pem:
        _trust(ctx, trusted_pem)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(
    trusted_pem: bytes | None, own: CertKey | None = None, opts: TlsOptions = TlsOptions()
) -> ssl.SSLContext:
    """A client's context: verifies the server's chain against ``trusted_pem`` when given (else encrypts
    without verifying); presents ``own`` (a node's CA-signed certificate) for mutual TLS."""
    ctx = _base(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), opts)
    ctx.check_hostname = False
    if trusted_pem:
        _trust(ctx, trusted_pem)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if own is not None:
        load_cert_key(ctx, own)
    return ctx


def http_server_context(own: CertKey, opts: TlsOptions = TlsOptions()) -> ssl.SSLContext:
    """The admin HTTP server's context (HTTP/1.1: no ALPN h2, no client certificates)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[opts.min_protocol]
    ctx.set_ciphers(opts.ciphers)
    load_cert_key(ctx, own)
    return ctx


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) stays on this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def peer_of(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> TlsPeer | None:
    """The TLS side of an accepted connection: None on cleartext; else the client's certificate when it
    presented one that verified against the trusted CA (the handshake fails for one that does not)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return TlsPeer()
    cn = None
    info = ssl_object.getpeercert() or {}
    subject = cast(tuple[tuple[tuple[str, str], ...], ...], info.get("subject", ()))
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                cn = value
    return TlsPeer(der, cn)


@dataclass(slots=True)
class ServerTls:
    """What the RPC server accepts: ``mode`` is --rpc-encryption; ``context`` is swapped when the node
    gets a new certificate (later connections use it)."""

    mode: str
    context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        if self.mode not in ENCRYPTION_MODES:
            raise KuduInvalidArgument(f"rpc encryption {self.mode!r}: expected one of {', '.join(ENCRYPTION_MODES)}")
        if self.mode != "disabled" and self.context is None:
            raise KuduInvalidArgument(f"rpc encryption {self.mode!r} needs a server TLS context")

    def accepts(self, first_byte: int) -> str:
        """Decide for a connection by its first byte: "tls", "clear" or "refuse" (cleartext under required)."""
        if first_byte == TLS_HANDSHAKE_BYTE:
            return "tls" if self.mode != "disabled" else "clear"
        return "refuse" if self.mode == "required" else "clear"


@dataclass(slots=True)
class ClientTls:
    """When a client encrypts. ``policy``: "optional" encrypts remote connections (loopback ones too
    with ``encrypt_loopback``) and falls back to cleartext to a server without TLS; "required_remote"
    insists on TLS for remote peers; "required" for every peer. Under any policy a peer that refused
    cleartext (``require_tls_for``) is reached over TLS from then on."""

    policy: str
    context: ssl.SSLContext
    encrypt_loopback: bool = False
    # The context presents a user's certificate: it is the client's credential (authn "cert").
    presents_certificate: bool = False
    _tls_only: set[str] = field(default_factory=set)
    _clear_only: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.policy not in CLIENT_POLICIES:
            raise KuduInvalidArgument(
                f"encryption policy {self.policy!r}: expected one of {', '.join(CLIENT_POLICIES)}"
            )

    def required(self, host: str) -> bool:
        """TLS or no connection at all."""
        return self.policy == POLICY_REQUIRED or (self.policy == POLICY_REQUIRED_REMOTE and not is_loopback(host))

    def wants_tls(self, addr: str, host: str) -> bool:
        if self.required(host) or addr in self._tls_only:
            return True
        if addr in self._clear_only:
            return False
        return self.encrypt_loopback or not is_loopback(host)

    def require_tls_for(self, addr: str) -> None:
        self._tls_only.add(addr)
        self._clear_only.discard(addr)

    def tls_failed(self, addr: str, host: str) -> bool:
        """A TLS handshake with ``addr`` failed: whether to try cleartext (only under "optional", and only
        for a peer that never refused cleartext)."""
        if self.required(host) or addr in self._tls_only:
            return False
        self._clear_only.add(addr)
        return True


def pem_or_file(item: str | bytes, what: str) -> bytes:
    """PEM given as text or bytes, or the path of a PEM file."""
    if isinstance(item, bytes):
        return item
    if "-----BEGIN" in item:
        return item.encode("ascii")
    try:
        return Path(item).read_bytes()
    except OSError as e:
        raise KuduInvalidArgument(
            f"{what} {item!r}: neither PEM text nor a readable file ({e.strerror or e})"
        ) from None


def user_certificate(cert: str | bytes, key: str | bytes) -> CertKey:
    """A user's certificate and private key (PEM text or paths), checked to belong together."""
    cert_pem = pem_or_file(cert, "client certificate")
    key_pem = pem_or_file(key, "client certificate key")
    check_key_matches(load_certificate(cert_pem, "client certificate"), load_private_key(key_pem), "client certificate")
    return CertKey(cert_pem, key_pem)


def trusted_bundle(items: Sequence[str | bytes]) -> bytes:
    """Join trusted CA certificates given as PEM text or paths of PEM files into one checked bundle."""
    parts: list[bytes] = []
    for item in items:
        data = pem_or_file(item, "trusted certificate")
        load_certificates(data, f"trusted certificate {item!r:.60}")
        parts.append(data if data.endswith(b"\n") else data + b"\n")
    return b"".join(parts)
