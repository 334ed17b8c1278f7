"""The periods of once_per (_core/periods.py): numbering, records, arguments."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fencelock._core.periods import is_done, period_index, validate_period

DAY = 86400.0


def test_periods_are_numbered_from_the_epoch_plus_offset() -> None:
    assert period_index(0.0, DAY, 0.0) == 0
    assert period_index(DAY - 0.001, DAY, 0.0) == 0
    assert period_index(DAY, DAY, 0.0) == 1
    # days that start at 02:00 UTC: 01:59 still belongs to the day before
    two_am = 2 * 3600.0
    assert period_index(10 * DAY + two_am - 1, DAY, two_am) == 9
    assert period_index(10 * DAY + two_am, DAY, two_am) == 10
    assert period_index(-1.0, DAY, 0.0) == -1


def test_a_period_is_done_once_it_or_a_later_one_is_recorded() -> None:
    assert not is_done(None, 5)
    assert not is_done(b"4", 5)
    assert is_done(b"5", 5)
    assert is_done(b"6", 5)  # a runner whose clock lags must not run an older period
    assert is_done(b"-1", -1)


def test_period_arguments() -> None:
    assert validate_period(timedelta(hours=1), timedelta(minutes=5)) == (3600.0, 300.0)
    assert validate_period(60, -7.5) == (60.0, -7.5)
    for bad in (0, -1, 366 * DAY, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="period"):
            validate_period(bad, 0)
    with pytest.raises(TypeError, match="period"):
        validate_period("60", 0)
    with pytest.raises(TypeError, match="offset"):
        validate_period(60, None)
    with pytest.raises(ValueError, match="offset"):
        validate_period(60, float("-inf"))
