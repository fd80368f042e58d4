"""The cluster CA and node certificates: creation, CSR signing, renewal decisions, and clear errors for bad PEMs."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.security import ca, tls

NOW = time.time()


def test_a_signed_csr_names_the_service_user_and_the_hosts_and_verifies_against_the_ca() -> None:
    authority = ca.CertAuthority.create(NOW)
    key = ca.key_to_pem(ca.generate_key())
    csr = ca.make_csr(key, "whatever-the-node-claims", ["127.0.0.1", "ts-1.example"])
    cert_pem = authority.sign(csr, "kudu", ["127.0.0.1", "ts-1.example"], NOW, 3600)
    cert = ca.load_certificate(cert_pem)
    assert ca.common_name(cert) == "kudu"  # the CA's choice, not the CSR's subject
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(v) for v in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["ts-1.example"]
    assert authority.issued(cert_pem)
    assert not ca.CertAuthority.create(NOW).issued(cert_pem)
    assert abs(ca.not_after(cert_pem) - (NOW + 3600)) < 2
    # The CA persists as PEM and comes back the same.
    again = ca.CertAuthority(authority.cert_pem, authority.key_pem)
    assert again.issued(cert_pem) and again.cert_der == authority.cert_der


def test_a_certificate_never_outlives_its_ca() -> None:
    authority = ca.CertAuthority.create(NOW, validity_s=100)
    csr = ca.make_csr(ca.key_to_pem(ca.generate_key()), "kudu", [])
    cert_pem = authority.sign(csr, "kudu", [], NOW, 10**6)
    assert ca.not_after(cert_pem) <= NOW + 101


def test_renewal_is_due_without_a_certificate_or_near_its_expiry() -> None:
    authority = ca.CertAuthority.create(NOW)
    cert_pem = authority.sign(ca.make_csr(ca.key_to_pem(ca.generate_key()), "kudu", []), "kudu", [], NOW, 1000)
    assert ca.renewal_due(None, NOW)
    assert not ca.renewal_due(cert_pem, NOW, renew_before_s=500)
    assert ca.renewal_due(cert_pem, NOW + 600, renew_before_s=500)


def test_bad_inputs_are_refused_naming_what_was_wrong(tmp_path: Path) -> None:
    authority = ca.CertAuthority.create(NOW)
    with pytest.raises(KuduInvalidArgument, match="not a PEM CSR"):
        authority.sign(
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", "k", [], NOW, 1
        )
    with pytest.raises(KuduInvalidArgument, match=r"CA certificate: not a PEM X\.509"):
        ca.CertAuthority(b"garbage", authority.key_pem)
    other = ca.CertAuthority.create(NOW)
    with pytest.raises(KuduInvalidArgument, match="does not belong to the certificate"):
        ca.CertAuthority(authority.cert_pem, other.key_pem)
    leaf = ca.self_signed("kudu", [], NOW)
    with pytest.raises(KuduInvalidArgument, match="not a CA certificate"):
        ca.CertAuthority(leaf.cert_pem, leaf.key_pem)
    with pytest.raises(KuduInvalidArgument, match="bad certificate common name"):
        authority.sign(ca.make_csr(ca.key_to_pem(ca.generate_key()), "kudu", []), "", [], NOW, 1)
    # Operator-given files: unreadable, not matching, or not signed by the given CA.
    key = ca.key_to_pem(ca.generate_key())
    signed = authority.sign(ca.make_csr(key, "kudu", []), "kudu", [], NOW, 3600)
    files = {}
    for name, data in (("cert", signed), ("key", key), ("ca", authority.cert_pem), ("other", other.cert_pem)):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_bytes(data)
    own, ca_pem = ca.load_pem_files(str(files["cert"]), str(files["key"]), str(files["ca"]))
    assert own.cert_pem == signed and ca_pem == authority.cert_pem
    with pytest.raises(KuduInvalidArgument, match=r"--rpc-private-key-file .*missing.pem: cannot read it"):
        ca.load_pem_files(str(files["cert"]), str(tmp_path / "missing.pem"), str(files["ca"]))
    with pytest.raises(KuduInvalidArgument, match="is not signed by a certificate of --rpc-ca-certificate-file"):
        ca.load_pem_files(str(files["cert"]), str(files["key"]), str(files["other"]))
    with pytest.raises(KuduInvalidArgument, match=r"--rpc-private-key-file .*not a PEM private key"):
        ca.load_pem_files(str(files["cert"]), str(files["ca"]), str(files["ca"]))
    with pytest.raises(KuduInvalidArgument, match="trusted certificate"):
        tls.trusted_bundle([str(tmp_path / "nope.pem")])
    assert tls.trusted_bundle([authority.cert_pem.decode(), str(files["other"])]).count(b"BEGIN CERTIFICATE") == 2


def test_contexts_refuse_tls_1_1_and_negotiate_h2_only() -> None:
    own = ca.self_signed("kudu", ["127.0.0.1"], NOW)
    server = tls.server_context(own, None)
    client = tls.client_context(None)
    for ctx in (server, client):
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.server_context(own, None, tls.TlsOptions(min_protocol="TLSv1.3")).minimum_version == (
        ssl.TLSVersion.TLSv1_3
    )
    with pytest.raises(KuduInvalidArgument, match=r"TLS minimum protocol .TLSv1\.1."):
        tls.TlsOptions(min_protocol="TLSv1.1")
    with pytest.raises(KuduInvalidArgument, match="OpenSSL accepts none of them"):
        tls.server_context(own, None, tls.TlsOptions(ciphers="NOT-A-CIPHER"))
    # Every TLS 1.2 suite left has forward secrecy and an AEAD cipher.
    for c in server.get_ciphers():
        if c["protocol"] == "TLSv1.2":
            assert c["kea"] == "kx-ecdhe" and c["aead"], c["name"]
    with pytest.raises(KuduInvalidArgument, match="cannot be used for TLS"):
        tls.server_context(ca.CertKey(own.cert_pem, ca.key_to_pem(ca.generate_key())), None)


def test_client_policies_decide_per_peer() -> None:
    ctx = tls.client_context(None)
    optional = tls.ClientTls(tls.POLICY_OPTIONAL, ctx)
    assert not optional.wants_tls("127.0.0.1:1", "127.0.0.1")  # loopback stays cleartext, as Kudu's default
    assert optional.wants_tls("10.0.0.1:1", "10.0.0.1")
    assert optional.tls_failed("10.0.0.1:1", "10.0.0.1")  # falls back to cleartext ...
    assert not optional.wants_tls("10.0.0.1:1", "10.0.0.1")
    optional.require_tls_for("127.0.0.1:1")  # ... unless the server refused cleartext
    assert optional.wants_tls("127.0.0.1:1", "127.0.0.1")
    assert not optional.tls_failed("127.0.0.1:1", "127.0.0.1")
    remote = tls.ClientTls(tls.POLICY_REQUIRED_REMOTE, ctx)
    assert not remote.wants_tls("[::1]:1", "::1") and remote.wants_tls("h:1", "db.example")
    assert not remote.tls_failed("h:1", "db.example")
    required = tls.ClientTls(tls.POLICY_REQUIRED, ctx)
    assert required.wants_tls("localhost:1", "localhost") and not required.tls_failed("localhost:1", "localhost")
    with pytest.raises(KuduInvalidArgument, match="encryption policy 'sometimes'"):
        tls.ClientTls("sometimes", ctx)
    server = tls.ServerTls("required", tls.server_context(ca.self_signed("kudu", [], NOW), None))
    assert (server.accepts(0x16), server.accepts(ord("P"))) == ("tls", "refuse")
    server.mode = "optional"
    assert server.accepts(ord("P")) == "clear"
    with pytest.raises(KuduInvalidArgument, match="needs a server TLS context"):
        tls.ServerTls("optional")
