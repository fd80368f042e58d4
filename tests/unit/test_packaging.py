"""pyproject lists its packages by hand (so the Spark auto-registration module can be installed as a
top-level ``pyspark_*`` module); this keeps the list complete, and checks PySpark's discovery sees it."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kudu_async").rglob("__init__.py")
             if "autoreg" not in p.parts}
    assert set(conf["packages"]) == found | {"pyspark_kudu_async"}
    assert (ROOT / conf["package-dir"]["pyspark_kudu_async"] / "__init__.py").is_file()


def test_pyspark_discovery_sees_the_kudu_source() -> None:
    """PySpark registers the DefaultSource of every ``pyspark_*`` module pkgutil finds (scripts/setup.sh
    puts its directory on the venv's path, since an editable install hides it from pkgutil)."""
    names = [m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")]
    assert "pyspark_kudu_async" in names
    import pyspark_kudu_async

    assert pyspark_kudu_async.DefaultSource.name() == "kudu"
