"""Redlock's tallies (``fencelock._core.quorum``) beyond tests/core/test_core.py, without a
server."""

from __future__ import annotations

import pytest

from fencelock import LockConnectionError, LockError
from fencelock._core.quorum import Tally, first_answers, first_error, owned_by_quorum, tally

DOWN = LockConnectionError("down")


@pytest.mark.parametrize(
    ("answers", "outcome"),
    [
        ((3, 0, 2), True),  # a majority of five said yes
        ((2, 3, 0), False),
        ((0, 3, 2), False),  # enough said no that no majority can say yes
        ((2, 2, 0), False),  # four nodes: a majority is three, two noes rule it out
    ],
)
def test_tally_outcome(answers: tuple[int, int, int], outcome: bool) -> None:
    yes, no, failed = answers
    assert Tally(yes, no, failed).outcome(yes + no + failed, "release") is outcome


@pytest.mark.parametrize("answers", [(2, 2, 1), (1, 1, 3), (0, 0, 5), (2, 1, 1)])
def test_tally_without_enough_answers_is_an_outage(answers: tuple[int, int, int]) -> None:
    yes, no, failed = answers
    with pytest.raises(LockConnectionError, match="a majority is"):
        Tally(yes, no, failed).outcome(yes + no + failed, "extend")


def test_tally_counts_errors_as_failed() -> None:
    assert tally([True, False, DOWN, LockError("odd")]) == Tally(1, 1, 2)


def test_owned_by_quorum() -> None:
    assert owned_by_quorum([1, 1, 0], (1,), "release") is True
    assert owned_by_quorum([3, 1, DOWN], (1, 3), "release") is True  # any of the held answers
    assert owned_by_quorum([0, 0, 1], (1,), "release") is False
    with pytest.raises(LockConnectionError, match="1 of 3 nodes confirmed, 2 unreachable"):
        owned_by_quorum([1, DOWN, DOWN], (1,), "release")


def test_first_error_only_when_every_node_failed() -> None:
    wrong = LockError("a key holds a value of another Redis type")
    assert first_error([DOWN, [1, 2]]) is None  # one node answered
    assert first_error([]) is None
    assert first_error([DOWN, wrong, DOWN]) is wrong  # says more than "connection refused"
    assert first_error([DOWN, DOWN]) is DOWN


def test_a_second_round_fills_in_only_the_nodes_that_failed_the_first() -> None:
    down = LockConnectionError("node timeout")
    # node 0 released in the first round: its "not held" to the second must not count
    merged = first_answers([1, down, down], [0, 1, down])
    assert merged[:2] == [1, 1] and merged[2] is down
    assert owned_by_quorum(merged, (1,), "release") is True
    with pytest.raises(LockConnectionError):
        owned_by_quorum([1, down, down], (1,), "release")  # one round alone: undecided
