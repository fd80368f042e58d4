"""``kudu master add|remove`` and ``kudu remote_replica unsafe_change_config``: Kudu's syntax, and bad
arguments refused with exit status 1 before anything is called."""

from __future__ import annotations

import pytest

from kudu_async.tools import cli


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["master", "add", "127.0.0.1:7051", "nohost:"], "<master_address>"),
        (["master", "add", "127.0.0.1:7051", "h:99999"], "<master_address>"),
        (["master", "add", "127.0.0.1:7051", "h:7051", "-wait_secs=0"], "-wait_secs must be positive"),
        (["master", "add", "127.0.0.1:7051"], "the following arguments are required: master_address"),
        (["master", "remove", "127.0.0.1:7051", ":1"], "<master_address>"),
        (["remote_replica", "unsafe_change_config", "ts:7050", "t1", "u1", "u1"], "named twice"),
        (["remote_replica", "unsafe_change_config", "ts:x", "t1", "u1"], "<tserver_address>"),
        (["remote_replica", "unsafe_change_config", "ts:7050", "t1"], "required: peer_uuids"),
    ],
)
def test_bad_arguments_exit_1_with_the_reason(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 1
    assert said in capsys.readouterr().err


def test_kudu_spellings_of_the_flags_are_taken(capsys: pytest.CaptureFixture[str]) -> None:
    for spelled in (["-wait_secs=0"], ["--wait-secs", "0"], ["--wait_secs=0"]):
        assert cli.main(["master", "add", "127.0.0.1:7051", "h:7051", *spelled]) == 1
        assert "-wait_secs must be positive" in capsys.readouterr().err
    assert cli.main(["master", "remove", "--help"]) == 0
    assert "-master_uuid" in capsys.readouterr().out
