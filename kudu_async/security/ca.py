"""Keys, certificates and the cluster's certificate authority (Kudu's IPKI), over ``cryptography``.

Sans-IO: every function takes PEM bytes and the time (``now``, Unix seconds) as arguments and returns
PEM bytes; nothing here reads a clock or, except ``load_pem_files``, the disk. Keys are ECDSA P-256:
generated in about a millisecond (an RSA-2048 key takes ~50 ms) and with the cheapest handshakes at
the same strength. A bad certificate, key or CSR raises ``KuduInvalidArgument`` naming what it is and
what was wrong, so an operator who gave the wrong file learns which one.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kudu_async.common.errors import KuduInvalidArgument

# Kudu's defaults for --ipki-ca-cert-expiration-seconds and --ipki-server-cert-expiration-seconds.
DEFAULT_CA_VALIDITY_S = 10 * 365 * 24 * 3600
DEFAULT_SERVER_VALIDITY_S = 10 * 365 * 24 * 3600
# A node asks for a new certificate once its own has less than this left.
DEFAULT_RENEW_BEFORE_S = 30 * 24 * 3600
CA_COMMON_NAME = "kudu-ipki-ca"
# The user servers act as (Kudu's "kudu"); the CA names it as the subject of every node certificate.
SERVICE_USER = "kudu"
# Certificates are valid from a little before they were made: the clocks of the nodes differ.
CLOCK_SKEW_S = 300
MAX_HOSTS = 32


@dataclass(frozen=True, slots=True)
class CertKey:
    """A certificate with its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


def generate_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_certificate(pem: bytes, what: str = "certificate") -> x509.Certificate:
    """The first certificate of ``pem``; ``what`` names it in the error."""
    if not pem.strip():
        raise KuduInvalidArgument(f"{what}: empty, expected a PEM certificate")
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise KuduInvalidArgument(f"{what}: not a PEM X.509 certificate ({e})") from None


def load_certificates(pem: bytes, what: str = "certificates") -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (at least one)."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise KuduInvalidArgument(f"{what}: not PEM X.509 certificates ({e})") from None
    return certs


def load_private_key(pem: bytes, what: str = "private key") -> ec.EllipticCurvePrivateKey | object:
    """A PEM private key (unencrypted: the node must start unattended)."""
    if not pem.strip():
        raise KuduInvalidArgument(f"{what}: empty, expected a PEM private key")
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise KuduInvalidArgument(f"{what}: the key is encrypted with a password; give an unencrypted key") from None
    except (ValueError, Exception) as e:
        raise KuduInvalidArgument(f"{what}: not a PEM private key ({type(e).__name__}: {e})") from None


def _public_bytes(obj: object) -> bytes:
    pub = obj.public_key()  # type: ignore[attr-defined]
    der: bytes = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return der


def check_key_matches(cert: x509.Certificate, key: object, what: str) -> None:
    if _public_bytes(cert) != _public_bytes(key):
        raise KuduInvalidArgument(f"{what}: the private key does not belong to the certificate")


def common_name(cert: x509.Certificate) -> str | None:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    value = names[0].value
    return value if isinstance(value, str) else value.decode()


def cert_der(pem: bytes) -> bytes:
    return load_certificate(pem).public_bytes(serialization.Encoding.DER)


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    if len(hosts) > MAX_HOSTS:
        raise KuduInvalidArgument(f"at most {MAX_HOSTS} host names in a certificate, got {len(hosts)}")
    names: list[x509.GeneralName] = []
    for h in dict.fromkeys(hosts):
        if not h or not h.isprintable() or len(h) > 253:
            raise KuduInvalidArgument(f"bad host name {h!r} for a certificate")
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def _name(cn: str) -> x509.Name:
    if not cn or len(cn) > 64 or not cn.isprintable():
        raise KuduInvalidArgument(f"bad certificate common name {cn!r} (1-64 printable characters)")
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _leaf_extensions(builder: x509.CertificateBuilder, hosts: list[str]) -> x509.CertificateBuilder:
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    builder = builder.add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder


def self_signed(cn: str, hosts: list[str], now: float, validity_s: int = DEFAULT_SERVER_VALIDITY_S) -> CertKey:
    """A self-signed certificate for a node without a CA-signed one: enough to encrypt (Kudu does the
    same before a server has its IPKI certificate), proves nothing to a peer."""
    key = generate_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_utc(now - CLOCK_SKEW_S))
        .not_valid_after(_utc(now + validity_s))
    )
    cert = _leaf_extensions(builder, hosts).sign(key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), key_to_pem(key))


def make_csr(key_pem: bytes, cn: str, hosts: list[str]) -> bytes:
    """A certificate signing request for a node's key (what a node sends the master)."""
    key = load_private_key(key_pem)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise KuduInvalidArgument("a CSR needs an ECDSA key made by generate_key")
    builder = x509.CertificateSigningRequestBuilder().subject_name(_name(cn))
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def not_after(cert_pem: bytes) -> float:
    return load_certificate(cert_pem).not_valid_after_utc.timestamp()


def renewal_due(cert_pem: bytes | None, now: float, renew_before_s: float = DEFAULT_RENEW_BEFORE_S) -> bool:
    """Whether a node should ask for a new certificate: it has none, or it expires within ``renew_before_s``."""
    if cert_pem is None:
        return True
    return not_after(cert_pem) - now < renew_before_s


class CertAuthority:
    """The cluster's CA: signs nodes' CSRs. Holds the CA key; the master keeps it in its system catalog."""

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        cert = load_certificate(cert_pem, "CA certificate")
        key = load_private_key(key_pem, "CA private key")
        check_key_matches(cert, key, "CA certificate")
        try:
            bc = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            bc = None
        if bc is None or not bc.ca:
            raise KuduInvalidArgument("CA certificate: not a CA certificate (basicConstraints CA:TRUE missing)")
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise KuduInvalidArgument("CA private key: expected an ECDSA key")
        self.cert = cert
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        self.cert_der = cert.public_bytes(serialization.Encoding.DER)
        self.key_pem = key_pem
        self._key = key

    @classmethod
    def create(cls, now: float, validity_s: int = DEFAULT_CA_VALIDITY_S, cn: str = CA_COMMON_NAME) -> CertAuthority:
        key = generate_key()
        name = _name(cn)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_utc(now - CLOCK_SKEW_S))
            .not_valid_after(_utc(now + validity_s))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert.public_bytes(serialization.Encoding.PEM), key_to_pem(key))

    def sign(self, csr_pem: bytes, cn: str, hosts: list[str], now: float, validity_s: int) -> bytes:
        """Sign a node's CSR. The subject is ``cn`` (the authenticated service user, never what the CSR
        claims) and the SANs are ``hosts``; the certificate never outlives the CA's own."""
        if validity_s <= 0:
            raise KuduInvalidArgument(f"certificate validity must be > 0 seconds, got {validity_s}")
        try:
            csr = x509.load_pem_x509_csr(csr_pem)
        except ValueError as e:
            raise KuduInvalidArgument(f"certificate signing request: not a PEM CSR ({e})") from None
        if not csr.is_signature_valid:
            raise KuduInvalidArgument("certificate signing request: its signature does not verify")
        pub = csr.public_key()
        if not isinstance(pub, ec.EllipticCurvePublicKey):
            raise KuduInvalidArgument("certificate signing request: expected an ECDSA public key")
        end = min(now + validity_s, self.cert.not_valid_after_utc.timestamp())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.cert.subject)
            .public_key(pub)
            .serial_number(x509.random_serial_number())
            .not_valid_before(_utc(now - CLOCK_SKEW_S))
            .not_valid_after(_utc(end))
        )
        cert = _leaf_extensions(builder, hosts).sign(self._key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM)

    @staticmethod
    def chains_to(cert_pem: bytes, ca_pem: bytes) -> bool:
        """Whether ``cert_pem`` was signed by a certificate of ``ca_pem`` (a PEM bundle)."""
        cert = load_certificate(cert_pem)
        return any(_signed_by(cert, c) for c in load_certificates(ca_pem, "CA certificates"))

    def issued(self, cert_pem: bytes) -> bool:
        """Whether this CA signed ``cert_pem``."""
        cert = load_certificate(cert_pem)
        if cert.issuer != self.cert.subject:
            return False
        try:
            cert.verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True


def load_pem_files(cert_file: str, key_file: str, ca_file: str) -> tuple[CertKey, bytes]:
    """An operator's certificate, key and CA certificate (Kudu's --rpc-certificate-file,
    --rpc-private-key-file, --rpc-ca-certificate-file): checked to belong together before use."""
    contents: dict[str, bytes] = {}
    for flag, path in (
        ("--rpc-certificate-file", cert_file),
        ("--rpc-private-key-file", key_file),
        ("--rpc-ca-certificate-file", ca_file),
    ):
        try:
            contents[flag] = Path(path).read_bytes()
        except OSError as e:
            raise KuduInvalidArgument(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    cert = load_certificate(contents["--rpc-certificate-file"], f"--rpc-certificate-file {cert_file}")
    key = load_private_key(contents["--rpc-private-key-file"], f"--rpc-private-key-file {key_file}")
    check_key_matches(cert, key, f"--rpc-certificate-file {cert_file} with --rpc-private-key-file {key_file}")
    cas = load_certificates(contents["--rpc-ca-certificate-file"], f"--rpc-ca-certificate-file {ca_file}")
    if not any(_signed_by(cert, ca) for ca in cas):
        raise KuduInvalidArgument(
            f"--rpc-certificate-file {cert_file} is not signed by a certificate of --rpc-ca-certificate-file {ca_file}"
        )
    ca_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in cas)
    return CertKey(contents["--rpc-certificate-file"], contents["--rpc-private-key-file"]), ca_pem


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
