"""What a tablet server reports of tablets that have no running replica."""

from __future__ import annotations

from types import SimpleNamespace

from kudu_async.tserver.tablet_manager import TabletManager


def test_a_tablet_being_copied_in_is_reported_as_copying() -> None:
    """The master tells a copy on its way from one that keeps failing (a learner stuck for good)."""
    tm = object.__new__(TabletManager)
    tm.replicas, tm.failed_to_open = {}, {}
    tm.raft = SimpleNamespace(tombstoned={"t1", "t2"}, opening=set())  # type: ignore[assignment]
    tm._copying = {"t1": None}  # type: ignore[dict-item]  # the copy tombstoned the old replica first
    states = {r["tablet_id"]: r["state"] for r in tm.reports(None)}
    assert states == {"t1": "COPYING", "t2": "TOMBSTONED"}
