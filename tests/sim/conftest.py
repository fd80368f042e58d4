"""Skip the long (``slow``) sweep unless it is asked for with ``-m slow`` or RAFT_SIM_SLOW=1."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.option.markexpr or "") or os.environ.get("RAFT_SIM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="long sweep: run with -m slow or scripts/raft_sim.py")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
