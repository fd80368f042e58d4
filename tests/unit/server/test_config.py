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
