"""DDL in a loop while the leader master is killed every few seconds: nothing acknowledged is lost, nothing
is applied twice (the short CI run; scripts/stress/ddl_under_master_kills.py runs it as long as wanted)."""

from __future__ import annotations

import pytest

from kudu_async.testing.ddl_stress import DdlStressConfig, run_ddl_stress

pytestmark = pytest.mark.integration  # not 'slow': CI runs this short version


@pytest.mark.timeout(420)
async def test_ddl_under_leader_master_kills_loses_nothing_and_applies_nothing_twice(mini_cluster_factory) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    config = DdlStressConfig(
        duration_s=35.0,
        workers=3,
        tables_per_worker=3,
        hash_buckets=2,
        kill_every_s=(3.0, 5.0),
        restart_after_s=(0.3, 1.0),
        ddl_timeout_s=30.0,
        resend_probability=0.15,
        settle_timeout_s=120.0,
    )
    report = await run_ddl_stress(cluster, config, progress=print)
    print("\n" + "\n".join(report.lines()))
    assert report.violations == []
    # The run did what it is for: leaders died under DDL of every kind, and retries were answered.
    assert report.kills >= 5 and report.leader_changes >= report.kills - 1, report.lines()
    assert report.acknowledged["CreateTable"] >= 5 and report.acknowledged["DeleteTable"] >= 2, report.lines()
    assert report.acknowledged["AlterTable"] >= 5, report.lines()
    assert report.resends > 0 and report.dedup_answers > 0, report.lines()
    assert report.timed_out == report.resolved_after, report.lines()
    assert report.max_leaderless_s < 20.0, report.lines()
    assert all(m.is_running() for m in cluster.masters)
