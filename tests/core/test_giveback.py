"""The rule of a late give-back (``_core/giveback.py``): done after three answers in a row, with
a back-off while the server stays silent. No server."""

from __future__ import annotations

import pytest

from fencelock._core.giveback import ANSWERS, BACKOFF, MAX_BACKOFF, LateGiveBack
from fencelock._core.kinds import LeaseSpec, Mutex
from fencelock._core.lease import LOCK_WORDS
from fencelock._keys import DEFAULT_PREFIX


def late() -> LateGiveBack:
    return LateGiveBack(LeaseSpec.of(Mutex(), "n", DEFAULT_PREFIX, 30.0, LOCK_WORDS), "h", 0, 0.0)


def test_three_answers_in_a_row_end_it_each_next_try_going_at_once() -> None:
    give_back = late()
    assert ANSWERS == 3
    assert not give_back.answered(1.0)
    assert give_back.due == 1.0
    assert not give_back.answered(2.0)
    assert give_back.answered(3.0)


def test_a_silence_between_two_answers_starts_the_count_again() -> None:
    give_back = late()
    assert not give_back.answered(1.0)
    assert not give_back.answered(1.5)
    give_back.unanswered(2.0, 0.5)
    assert not give_back.answered(3.0)
    assert not give_back.answered(3.5)
    assert give_back.answered(4.0)


def test_silences_back_off_with_jitter_up_to_the_maximum() -> None:
    give_back = late()
    waits = []
    for n in range(12):
        give_back.unanswered(10.0 * n, 1.0)  # the longest draw: the cap itself
        waits.append(give_back.due - 10.0 * n)
    assert waits[0] == pytest.approx(BACKOFF)
    assert waits[1] == pytest.approx(2 * BACKOFF)
    assert max(waits) == pytest.approx(MAX_BACKOFF) == waits[-1]
    give_back.unanswered(200.0, 0.0)
    assert give_back.due == 200.0  # (a draw of 0: at once)
    assert not give_back.answered(201.0)  # an answer resets the back-off
    give_back.unanswered(202.0, 1.0)
    assert give_back.due == pytest.approx(202.0 + BACKOFF)
