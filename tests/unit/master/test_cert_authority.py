"""The master's side of the IPKI: the CA from the catalog, and who may have a certificate signed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kudu_async.common.errors import KuduNotAuthorized, KuduServiceUnavailable
from kudu_async.master.catalog_manager import CatalogManager
from kudu_async.master.sys_catalog import SysCatalogStateMachine, encode_ops, put_ca
from kudu_async.security import ca
from kudu_async.security.acl import Acls
from kudu_async.security.identity import Identity
from kudu_async.server.config import load_config


class _Host:
    """What CatalogManager reads for the CA: the catalog, the flags, who the service user is."""

    def __init__(self, catalog: SysCatalogStateMachine) -> None:
        self.catalog = catalog
        self.config = load_config(["--role", "master", "--data-dir", "unused"], {})
        self.acls = Acls.open()


async def test_only_authenticated_callers_get_a_certificate_from_the_catalogs_ca(tmp_path: Path) -> None:
    catalog = SysCatalogStateMachine(tmp_path, None)
    cm = CatalogManager(_Host(catalog))  # type: ignore[arg-type]
    now = time.time()
    key = ca.key_to_pem(ca.generate_key())
    csr = ca.make_csr(key, "anyone", ["10.0.0.7"])
    service = Identity("kudu", "jwt")
    with pytest.raises(KuduServiceUnavailable, match="the cluster CA does not exist yet"):
        cm.sign_certificate(csr, service, ["10.0.0.7"], now, 3600)
    authority = ca.CertAuthority.create(now)
    result: Any = await catalog.apply(1, 1, encode_ops([put_ca(authority.cert_pem, authority.key_pem)]))
    assert result == {"index": 1}
    assert cm.cert_authority() is not None and cm.cert_authority().cert_pem == authority.cert_pem  # type: ignore[union-attr]
    cert = cm.sign_certificate(csr, service, ["10.0.0.7"], now, 3600)
    assert authority.issued(cert) and ca.common_name(ca.load_certificate(cert)) == ca.SERVICE_USER
    anonymous = Identity("kudu", "none")
    assert not cm.may_sign_certificate(anonymous)
    with pytest.raises(KuduNotAuthorized, match=r"kudu \(unauthenticated\) may not have a certificate signed"):
        cm.sign_certificate(csr, anonymous, ["10.0.0.7"], now, 3600)
    cm.sign_for_unauthenticated = True  # authentication disabled: nothing to prove, nothing to escalate to
    assert cm.may_sign_certificate(anonymous)
