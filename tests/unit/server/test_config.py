from pathlib import Path

import pytest

from kudu_async.common.errors import KuduConfigurationError
from kudu_async.server.config import build_arg_parser, load_config, parse_master_addresses


def test_role_defaults_follow_kudu_ports() -> None:
    m = load_config(["--role", "master", "--data-dir", "/d"], {})
    t = load_config(["--role", "tserver", "--data-dir", "/d"], {})
    assert (m.rpc_bind, m.http_bind) == ("127.0.0.1:7051", "127.0.0.1:8051")
    assert (t.rpc_bind, t.http_bind) == ("127.0.0.1:7050", "127.0.0.1:8050")


def test_cli_beats_env_beats_file(tmp_path: Path) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text('role = "tserver"\ndata_dir = "/from-file"\nlog_level = "ERROR"\nheartbeat_interval_ms = 7\n')
    c = load_config(
        ["--config", str(cfg), "--log-level", "DEBUG"], {"KUDU_LOG_LEVEL": "WARNING", "KUDU_HEARTBEAT_INTERVAL_MS": "9"}
    )
    assert c.log_level == "DEBUG" and c.sources["log_level"] == "cli"
    assert c.heartbeat_interval_ms == 9 and c.sources["heartbeat_interval_ms"] == "env"
    assert c.data_dir == "/from-file" and c.sources["data_dir"].startswith("file:")


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--role", "leader", "--data-dir", "/d"], {}, "--role"),
        (["--role", "master"], {}, "--data-dir"),
        (["--role", "master", "--data-dir", "/d", "--rpc-bind", "127.0.0.1:70000"], {}, "--rpc-bind"),
        (["--role", "master", "--data-dir", "/d", "--master-addresses", "a:1,b:2"], {}, "--master-addresses"),
        (["--role", "master", "--data-dir", "/d"], {"KUDU_HEARTBEAT_INTERVAL_MS": "soon"}, "KUDU_HEARTBEAT"),
        (["--role", "master", "--data-dir", "/d", "--shutdown-grace-ms", "-1"], {}, "--shutdown-grace-ms"),
        (["--role", "master", "--data-dir", "/d", "--enable-fault-injection", "maybe"], {}, "fault-injection"),
    ],
)
def test_bad_value_names_the_flag(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(KuduConfigurationError) as ei:
        load_config(argv, env)
    assert needle in str(ei.value)


def test_unknown_toml_key_is_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text('role = "master"\ndata_dir = "/d"\nrpc_port = 1\n')
    with pytest.raises(KuduConfigurationError, match="rpc_port"):
        load_config(["--config", str(cfg)], {})


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text("role = \n")
    with pytest.raises(KuduConfigurationError, match=r"n\.toml"):
        load_config(["--config", str(cfg)], {})


def test_help_lists_every_flag_with_default() -> None:
    text = build_arg_parser().format_help()
    for flag in ("--role", "--data-dir", "--rpc-bind", "--http-bind", "--master-addresses", "--config"):
        assert flag in text
    assert "default: 500" in text  # raft heartbeat


def test_master_addresses_get_default_port_and_reject_duplicates() -> None:
    assert parse_master_addresses("h1,h2:7151,[::1]:7251") == ["h1:7051", "h2:7151", "[::1]:7251"]
    with pytest.raises(ValueError, match="duplicate"):
        parse_master_addresses("h1,h1:7051")


def _ts(*extra: str) -> list[str]:
    return ["--role", "tserver", "--data-dir", "/d", *extra]


def test_memory_figures_derive_from_the_limit_unless_given() -> None:
    c = load_config(_ts("--memory-limit-mb", "1024"), {})
    assert c.memory_limit_mb == 1024 and c.sources["memory_limit_mb"] == "cli"
    assert c.memory_pressure_threshold_mb == 614 and c.sources["memory_pressure_threshold_mb"] == "derived"
    assert c.block_cache_capacity_mb == 256 and c.sources["block_cache_capacity_mb"] == "derived"
    big = load_config(_ts("--memory-limit-mb", "16384", "--memory-pressure-percentage", "50"), {})
    assert (big.block_cache_capacity_mb, big.memory_pressure_threshold_mb) == (512, 8192)
    given = load_config(_ts("--memory-limit-mb", "1024", "--block-cache-capacity-mb", "100"), {})
    assert given.block_cache_capacity_mb == 100
    off = load_config(_ts("--memory-limit-mb", "1024", "--block-cache-capacity-mb", "0"), {})
    assert off.block_cache_capacity_mb == 0
    pinned = load_config(_ts("--memory-limit-mb", "1024", "--memory-pressure-threshold-mb", "900"), {})
    assert pinned.memory_pressure_threshold_mb == 900


def test_auto_memory_limit_is_a_quarter_of_the_machine_or_cgroup(tmp_path: Path) -> None:
    from kudu_async.server.config import machine_memory_mb

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       8388608 kB\nMemFree: 1 kB\n")
    assert machine_memory_mb(str(meminfo), [str(tmp_path / "none")]) == 8192
    cg = tmp_path / "memory.max"
    cg.write_text(f"{2 << 30}\n")
    assert machine_memory_mb(str(meminfo), [str(cg)]) == 2048
    cg.write_text("max\n")
    assert machine_memory_mb(str(meminfo), [str(cg)]) == 8192
    c = load_config(_ts(), {})
    assert c.sources["memory_limit_mb"] == "auto" and c.memory_limit_mb == max(256, machine_memory_mb() // 4)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (_ts("--memory-limit-mb", "1024", "--block-cache-capacity-mb", "700"), ["--block-cache-capacity-mb=700"]),
        (
            _ts("--memory-limit-mb", "1024", "--memory-pressure-threshold-mb", "2000"),
            ["--memory-pressure-threshold-mb=2000", "--memory-limit-mb=1024"],
        ),
        (_ts("--memory-limit-soft-percentage", "0"), ["--memory-limit-soft-percentage"]),
        (_ts("--memory-pressure-percentage", "101"), ["--memory-pressure-percentage"]),
        (_ts("--memory-limit-mb", "-5"), ["--memory-limit-mb"]),
        (_ts("--block-cache-capacity-mb", "-2"), ["--block-cache-capacity-mb"]),
    ],
)
def test_memory_configurations_that_cannot_fit_are_refused(argv: list[str], needles: list[str]) -> None:
    with pytest.raises(KuduConfigurationError) as ei:
        load_config(argv, {})
    for needle in needles:
        assert needle in str(ei.value)
