"""testing.waits.wait_for: what it returns, which failures it asks again after, and what its timeout says."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.testing.waits import NOT_READY, wait_for


def test_the_first_truthy_answer_is_returned_after_transient_failures_passed_as_retry_on() -> None:
    answers: list[object] = [KuduServiceUnavailable("starting"), ConnectionRefusedError(), KeyError("x"), 0, {"ok": 1}]

    def pred() -> object:
        got = answers.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got

    assert wait_for(pred, 5.0, "the answer", every_s=0.001, retry_on=NOT_READY) == {"ok": 1}
    assert answers == []


def test_a_failure_not_in_retry_on_ends_the_wait_at_once() -> None:
    calls = []

    def pred() -> None:
        calls.append(1)
        raise KeyError("missing")

    with pytest.raises(KeyError):
        wait_for(pred, 5.0, "the key")
    assert calls == [1]


def test_the_timeout_names_what_was_awaited_and_the_last_answer() -> None:
    def pred() -> None:
        raise KuduServiceUnavailable("still electing")

    with pytest.raises(AssertionError, match=r"waiting for a leader \(last: KuduServiceUnavailable\('still electing'"):
        wait_for(pred, 0.05, "a leader", every_s=0.01, retry_on=NOT_READY)
