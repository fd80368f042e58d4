"""Fixtures for storage tests: a small table schema (int64 key, int32, double, string)."""

from __future__ import annotations

import pytest

from kudu_async.common.schema import Schema
from tests.unit.tablet.tablet_testkit import make_schema


@pytest.fixture
def schema() -> Schema:
    return make_schema()
