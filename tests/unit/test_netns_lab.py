"""The namespace lab of the multi-host test: it says why when it cannot run, and removes what it made
even when set-up fails halfway."""

from __future__ import annotations

import os
import shutil

import pytest

from kudu_async.testing import netns
from kudu_async.testing.netns import NetnsLab, NetnsUnavailable


def test_refuses_without_root_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsUnavailable, match="need root"), NetnsLab(["h0"]):
        pass


def test_a_failed_set_up_removes_what_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def ip(*args: str) -> None:
        calls.append(args)
        if args[:2] == ("link", "add") and "veth" in args:
            raise NetnsUnavailable("'ip link add' failed: Operation not permitted")

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: "/sbin/ip")
    monkeypatch.setattr(netns, "_ip", ip)
    lab = NetnsLab(["h0", "h1"], subnet=7)
    with pytest.raises(NetnsUnavailable, match="Operation not permitted"), lab:
        pass
    ns0 = f"kns{lab._tag}-0"
    assert ("link", "add", lab.bridge, "type", "bridge") in calls and ("netns", "add", ns0) in calls
    removed = [c for c in calls if c[1] == "del"]
    assert removed == [("netns", "del", ns0), ("link", "del", lab.bridge)]  # the namespace first, then the bridge
    assert lab.hosts == []
