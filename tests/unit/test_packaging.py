"""pyproject lists its packages by hand (so the Spark auto-registration module can be installed as a
top-level ``pyspark_*`` module); this keeps the list complete, and checks PySpark's discovery sees it."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "kudu_async").rglob("__init__.py")
        if "autoreg" not in p.parts
    }
    assert set(conf["packages"]) == found | {"pyspark_kudu_async"}
    assert (ROOT / conf["package-dir"]["pyspark_kudu_async"] / "__init__.py").is_file()


def test_pyspark_discovery_sees_the_kudu_source() -> None:
    """PySpark registers the DefaultSource of every ``pyspark_*`` module pkgutil finds (scripts/setup.sh
    puts its directory on the venv's path, since an editable install hides it from pkgutil)."""
    names = [m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")]
    assert "pyspark_kudu_async" in names
    import pyspark_kudu_async

    assert pyspark_kudu_async.DefaultSource.name() == "kudu"


def test_top_level_names_load_on_first_use_and_all_of_them_resolve() -> None:
    import kudu_async as kudu
    from kudu_async import client, errors, schema

    assert set(kudu.__all__) == {"__version__", *client.__all__, *errors.__all__, *schema.__all__}
    kudu_python_top_level = (
        "CLOSEST_REPLICA FIRST_REPLICA FLUSH_AUTO_BACKGROUND FLUSH_AUTO_SYNC FLUSH_MANUAL LEADER_ONLY READ_AT_SNAPSHOT"
        " READ_LATEST READ_YOUR_WRITES Client KuduBadStatus KuduException KuduInvalidArgument KuduNotFound"
        " KuduNotSupported KuduTimedOut Partitioning RangePartition ScanToken Schema SchemaBuilder binary bool bool_"
        " connect date decimal double float float_ int8 int16 int32 int64 schema_builder string unixtime_micros varchar"
    )
    assert set(kudu_python_top_level.split()) <= set(kudu.__all__)
    for name in kudu.__all__:
        assert getattr(kudu, name) is not None, name
    from kudu_async.client.sync import connect
    from kudu_async.common.errors import KuduNotFound

    assert kudu.connect is connect and kudu.KuduNotFound is KuduNotFound
    assert kudu.bool.name == "bool" and kudu.float.name == "float"
    try:
        kudu.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


def test_unpickling_the_spark_writer_does_not_import_the_client() -> None:
    """PySpark unpickles the writer in a new process for the job's commit; that needs no client."""
    import subprocess
    import sys

    code = (
        "import pickle, sys\n"
        "from kudu_async.spark.source import KuduWriter, KuduCommitMessage\n"
        "w = pickle.loads(pickle.dumps(KuduWriter({'kudu.table': 't'}, 'insert')))\n"
        "w.commit([KuduCommitMessage(5)])\n"
        "heavy = sorted(m for m in ('kudu_async.client', 'kudu_async.rpc', 'pyarrow.compute', 'asyncio')"
        " if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (no packages under tests/): two files of one name make the
    whole run stop at collection, which only a full run finds."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, Path] = {}
    for p in sorted(tests.rglob("test_*.py")):
        assert p.name not in seen, f"{p} and {seen[p.name]} share a basename"
        seen[p.name] = p
