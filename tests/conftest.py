"""Shared fixtures: clusters of real node processes on 127.0.0.1, started and ended by the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kudu_async.testing import MiniCluster


@pytest.fixture
def mini_cluster_factory(tmp_path: Path) -> Iterator[type[MiniCluster]]:
    """Build clusters inside the test's tmp dir; every one is shut down when the test ends, pass or fail."""
    made: list[MiniCluster] = []

    def make(*args: object, **kwargs: object) -> MiniCluster:
        kwargs.setdefault("base_dir", tmp_path / f"cluster-{len(made)}")
        c = MiniCluster(*args, **kwargs)  # type: ignore[arg-type]
        made.append(c)
        return c.start()

    yield make  # type: ignore[misc]
    for c in made:
        c.shutdown()


@pytest.fixture
def cluster_1m3t(mini_cluster_factory: type[MiniCluster]) -> MiniCluster:
    return mini_cluster_factory(num_masters=1, num_tservers=3)
