"""Periods of ``once_per``: fixed-length windows of the Unix time, numbered.

Period ``n`` of a job is ``[offset + n * period, offset + (n + 1) * period)`` in seconds since the
epoch (UTC): ``period=86400, offset=7200`` makes days that start at 02:00 UTC. Every runner of a
fleet numbers the same instant alike (give or take their clocks' skew, see docs/scheduling.md).
"""

from __future__ import annotations

import math
from datetime import timedelta

from .._keys import MAX_TTL, _number, escape


def record_key(prefix: str, name: str) -> str:
    """The key of the last period done of ``once_per``'s job ``name``: a plain string key,
    fenced by the lock's tokens; beside the lock's keys (the same prefix and hash tag: the same
    ACL pattern, the same Cluster slot), and so its fence key too."""
    return f"{prefix}{{{escape(name)}}}:once_per"


def seconds(value: object, arg: str) -> float:
    """``value`` (a number of seconds or a ``timedelta``) in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else _number(arg, value)


def validate_period(period: object, offset: object) -> tuple[float, float]:
    """``period`` (> 0, at most a year) and ``offset`` (any finite number of seconds)."""
    length = seconds(period, "period")
    if not 0 < length <= MAX_TTL:
        raise ValueError(f"period must be more than 0 s and at most a year, got {length} s")
    shift = seconds(offset, "offset")
    if not math.isfinite(shift):
        raise ValueError(f"offset must be finite, got {shift}")
    return length, shift


def period_index(now: float, period: float, offset: float) -> int:
    """The number of the period ``now`` (seconds since the epoch) falls in."""
    return math.floor((now - offset) / period)


def is_done(recorded: bytes | None, index: int) -> bool:
    """Whether the period record ``recorded`` (the last period done, or None) covers ``index``:
    a period is done once it or a later one is recorded (a runner whose clock lags must not run
    an earlier period after a later one)."""
    return recorded is not None and int(recorded) >= index
