"""Redlock's tallies (``fencelock._core.quorum``) beyond tests/core/test_core.py, without a
server."""

from __future__ import annotations

import pytest

from fencelock import LockConnectionError, LockError
from fencelock._core.kinds import Released
from fencelock._core.quorum import Tally, first_error, owned_by_quorum, released, tally, two_rounds
from fencelock._core.replies import NoReply

DOWN = LockConnectionError("down")
RELEASED, NOT_HELD = Released.RELEASED, Released.NOT_HELD  # a node's answer to a release


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
    merged = two_rounds([RELEASED, down, down], [NOT_HELD, RELEASED, down], in_lease=True)
    assert merged[:2] == [RELEASED, RELEASED] and merged[2] is down
    assert released(merged, "release") is RELEASED
    with pytest.raises(LockConnectionError):
        released([RELEASED, down, down], "release")  # one round alone: undecided


def silent() -> LockConnectionError:
    """A node's failure to answer a request it was sent (it may have run it)."""
    error = LockConnectionError("release: TimeoutError: no reply")
    error.__cause__ = NoReply("no reply")
    return error


def test_not_held_after_no_answer_is_released_only_within_the_lease() -> None:
    """A node that got the first round and did not answer it may have applied it: its "not
    held" to the second is its own release's doing, if the release went out within the lease
    (issue 29); after it, another holder may have taken the node: "not held" it is."""
    first = [RELEASED, RELEASED, silent(), silent(), silent()]
    merged = two_rounds(first, [NOT_HELD] * 5, in_lease=True)
    assert merged == [RELEASED] * 5
    assert released(merged, "release") is RELEASED
    late = two_rounds(first, [NOT_HELD] * 5, in_lease=False)
    assert late == [RELEASED, RELEASED, NOT_HELD, NOT_HELD, NOT_HELD]
    assert released(late, "release") is NOT_HELD
    # a node the first round never reached (refused, unreachable) did not apply it
    unreached = two_rounds(
        [RELEASED, DOWN, DOWN, silent(), silent()], [NOT_HELD] * 5, in_lease=True
    )
    assert unreached == [RELEASED, NOT_HELD, NOT_HELD, RELEASED, RELEASED]
    assert released(unreached, "release") is RELEASED
    unreached = two_rounds([RELEASED, DOWN, DOWN, DOWN, silent()], [NOT_HELD] * 5, in_lease=True)
    assert unreached == [RELEASED, NOT_HELD, NOT_HELD, NOT_HELD, RELEASED]
    assert released(unreached, "release") is NOT_HELD
    # a second round that failed too, or that says "held", is taken as it is
    held = Released.STILL_HELD
    again = two_rounds([RELEASED, silent(), silent()], [NOT_HELD, DOWN, held], in_lease=True)
    assert again[0] is RELEASED and again[1] is DOWN and again[2] is held
