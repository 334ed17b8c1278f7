"""The wait between the tries of a versioned update (_core/backoff.py): no server."""

from __future__ import annotations

import pytest

from fencelock._core.backoff import backoff_delay, validate_backoff, validate_retries


def test_the_cap_doubles_per_attempt_up_to_the_maximum() -> None:
    caps = [backoff_delay(attempt, 0.001, 0.01, 1.0) for attempt in range(1, 7)]
    assert caps == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.01, 0.01])


def test_the_wait_is_the_draw_times_the_cap() -> None:
    assert backoff_delay(3, 0.001, 1.0, 0.0) == 0.0
    assert backoff_delay(3, 0.001, 1.0, 0.5) == pytest.approx(0.002)


def test_a_huge_attempt_number_stays_at_the_maximum() -> None:
    assert backoff_delay(10_000, 0.001, 0.1, 1.0) == 0.1


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="attempt"):
        backoff_delay(0, 0.001, 0.1, 0.5)


@pytest.mark.parametrize(
    ("retries", "error"),
    [(-1, ValueError), (True, TypeError), (1.5, TypeError), ("3", TypeError)],
)
def test_retries_are_checked(retries: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="retries"):
        validate_retries(retries)


def test_backoff_must_not_exceed_its_maximum() -> None:
    assert validate_backoff(0.001, 0.1) == (0.001, 0.1)
    with pytest.raises(ValueError, match="max_backoff"):
        validate_backoff(0.2, 0.1)
    with pytest.raises(ValueError, match="backoff"):
        validate_backoff(0, 0.1)
    with pytest.raises(TypeError, match="max_backoff"):
        validate_backoff(0.001, None)
