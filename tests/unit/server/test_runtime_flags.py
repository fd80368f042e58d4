"""Runtime flags: which flags a running node may change, how a new value is checked, what GetFlags lists."""

from __future__ import annotations

from typing import Any

import pytest

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.server import messages as msg
from kudu_async.server.config import FLAGS, FLAGS_BY_NAME, RUNTIME, NodeConfig, load_config
from kudu_async.server.node import flag_infos, flag_text
from kudu_async.tools.cli.flags import node_address
from kudu_async.tools.cli.framework import UsageError

# The flags a running node re-reads (or is told of through NodeConfig.on_change), and where. A flag gains the
# runtime tag only with its entry here: the list is what a reviewer checks against the code.
RUNTIME_FLAGS = {
    "log_level": "server/node.py: the root logger's level, set through on_change",
    "shutdown_grace_ms": "server/node.py Node.stop reads it when the node stops",
    "graceful_shutdown_timeout_ms": "tserver/tablet_server.py before_graceful_stop reads it on SIGTERM",
    "scanner_ttl_ms": "tserver: ScannerManager.ttl_s through on_change; the reaper reads it every pass",
    "flush_threshold_mb": "tserver: the tablets' shared TabletOptions through on_change, read every maintenance pass",
    "flush_threshold_secs": "tserver: TabletOptions and MaintenanceManager.flush_age_s through on_change",
    "tserver_unresponsive_timeout_ms": "master: TSManager.unresponsive_timeout_s through on_change",
    "follower_unavailable_considered_failed_sec": "master: catalog_manager._rereplicate reads it every pass",
    "default_deleted_table_reserve_seconds": "master: catalog_manager reads it on every DeleteTable",
    "enable_table_write_limit": "master: read on every heartbeat answer, CreateTable and AlterTable",
    "table_disk_size_limit": "master: read on every CreateTable",
    "table_row_count_limit": "master: read on every CreateTable",
    "table_write_limit_ratio": "master: read on every heartbeat answer",
    "auto_rebalancing_enabled": "master: the auto-rebalancer reads it every round",
    "auto_rebalancing_interval_seconds": "master: the auto-rebalancer reads it every round",
    "auto_rebalancing_max_moves_per_server": "master: the auto-rebalancer reads it every round",
}


def _config(*argv: str) -> NodeConfig:
    return load_config(["--role", "tserver", "--data-dir", "/tmp/x", "--memory-limit-mb", "1024", *argv], environ={})


def test_the_runtime_tag_is_on_exactly_the_flags_the_code_rereads() -> None:
    assert {f.name for f in FLAGS if f.runtime} == set(RUNTIME_FLAGS)
    assert all(RUNTIME in FLAGS_BY_NAME[n].tags for n in RUNTIME_FLAGS)


def test_a_runtime_flag_is_set_checked_and_marked_as_set_at_runtime() -> None:
    cfg = _config()
    seen: list[Any] = []
    cfg.on_change("scanner_ttl_ms", seen.append)
    assert cfg.set_runtime("scanner_ttl_ms", "1500") == (60_000, 1500)
    assert cfg.scanner_ttl_ms == 1500 and seen == [1500]
    assert cfg.sources["scanner_ttl_ms"] == "runtime"
    assert cfg.set_runtime("log-level", "DEBUG") == ("INFO", "DEBUG")  # dashes are taken too


@pytest.mark.parametrize(
    ("name", "raw", "error", "words"),
    [
        ("scanner_ttl_ms", "soon", KuduInvalidArgument, "--scanner-ttl-ms (SetFlag): bad value 'soon'"),
        ("scanner_ttl_ms", "0", KuduInvalidArgument, "must be > 0"),
        ("log_level", "LOUD", KuduInvalidArgument, "expected one of DEBUG, INFO, WARNING, ERROR"),
        ("enable_table_write_limit", "maybe", KuduInvalidArgument, "expected true or false"),
        ("no_such_flag", "1", KuduNotFound, "no flag named 'no_such_flag'"),
        ("rpc_bind", "127.0.0.1:1", KuduIllegalState, "flag rpc_bind is not runtime-settable"),
    ],
)
def test_a_bad_change_is_refused_naming_the_flag_and_changes_nothing(
    name: str, raw: str, error: type[Exception], words: str
) -> None:
    cfg = _config()
    before = dict(cfg.values)
    called: list[Any] = []
    if name in FLAGS_BY_NAME:
        cfg.on_change(name, called.append)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        cfg.set_runtime(name, raw)
    assert cfg.values == before and not called


def test_force_sets_a_flag_that_is_not_runtime_settable() -> None:
    cfg = _config()
    assert cfg.set_runtime("heartbeat_interval_ms", "250", force=True) == (1000, 250)
    assert cfg.heartbeat_interval_ms == 250
    with pytest.raises(KuduInvalidArgument, match="must be > 0"):  # forced values are still checked
        cfg.set_runtime("heartbeat_interval_ms", "-1", force=True)


def test_a_watcher_that_refuses_keeps_the_old_value() -> None:
    cfg = _config()

    def refuse(v: Any) -> None:
        raise KuduInvalidArgument(f"cannot take {v}")

    cfg.on_change("shutdown_grace_ms", refuse)
    with pytest.raises(KuduInvalidArgument, match="cannot take 5"):
        cfg.set_runtime("shutdown_grace_ms", "5")
    assert cfg.shutdown_grace_ms == 3000
    with pytest.raises(KuduInvalidArgument, match="no flag named"):
        cfg.on_change("nope", refuse)


def _names(cfg: NodeConfig, **req: Any) -> list[str]:
    return [f.name for f in flag_infos(cfg, msg.GetFlagsRequest(**req))]


def test_get_flags_filters_as_kudus() -> None:
    cfg = _config("--scanner-ttl-ms", "5000")
    default_only = _names(cfg)
    assert "scanner_ttl_ms" in default_only and "role" in default_only
    assert "log_level" not in default_only  # at its default
    everything = _names(cfg, all_flags=True)
    assert everything == sorted(f.name for f in FLAGS)
    assert _names(cfg, all_flags=True, tags=["runtime"]) == sorted(RUNTIME_FLAGS)
    assert _names(cfg, tags=["runtime"]) == ["scanner_ttl_ms"]
    assert _names(cfg, flags=["log_level", "scanner-ttl-ms"]) == ["log_level", "scanner_ttl_ms"]
    info = flag_infos(cfg, msg.GetFlagsRequest(flags=["scanner_ttl_ms", "enable_test_kv"]))
    assert [(i.value, i.default, i.is_default, i.source, i.tags) for i in info] == [
        ("false", "false", True, "default", ["unsafe"]),
        ("5000", "60000", False, "cli", ["runtime"]),
    ]
    with pytest.raises(KuduNotFound, match="no flag named 'nope'"):
        flag_infos(cfg, msg.GetFlagsRequest(flags=["nope"]))
    with pytest.raises(KuduInvalidArgument, match="unknown flag tag 'stable'"):
        flag_infos(cfg, msg.GetFlagsRequest(tags=["stable"]))


def test_flag_text_is_gflags_form() -> None:
    assert [flag_text(v) for v in (True, False, None, 3, 0.5, "x")] == ["true", "false", "", "3", "0.5", "x"]


def test_node_address_defaults_the_port_per_role() -> None:
    assert node_address("h", "tserver") == "h:7050"
    assert node_address("h", "master") == "h:7051"
    assert node_address("h:1", "master") == "h:1"
    assert node_address("[::1]", "tserver") == "[::1]:7050"
    for bad in ("", "a,b", "h:x", "::1", "h:0"):
        with pytest.raises(UsageError):
            node_address(bad, "tserver")
