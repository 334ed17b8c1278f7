"""How long a versioned update waits before its next try after a conflict.

Full jitter (a uniform draw up to an exponentially growing cap): writers that collided draw
different waits, so they stop colliding, and the expected wait stays half the cap. The draw is
passed in, so the rule is a pure function.
"""

from __future__ import annotations

import math

from .._keys import validate_ttl

DEFAULT_RETRIES = 10
DEFAULT_BACKOFF = 0.001  # the first cap: about a round trip on a LAN
DEFAULT_MAX_BACKOFF = 0.1


def backoff_delay(attempt: int, base: float, cap: float, draw: float) -> float:
    """The ``attempt``-th wait (1 for the first): ``draw`` (in [0, 1)) times
    ``min(cap, base * 2 ** (attempt - 1))``. (``update`` re-tries its first conflict at once,
    with the value the refusal sent back: the loser of a race of two need not wait.)"""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    # 2 ** 1100 is no float: past 64 doublings the cap has long been reached
    grown = base * math.ldexp(1.0, min(attempt - 1, 64))
    return draw * min(cap, grown)


def validate_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(f"retries must be an int, not {type(retries).__name__}")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    return retries


def validate_backoff(backoff: object, max_backoff: object) -> tuple[float, float]:
    """(base, cap) of the waits, in seconds: 0 < base <= cap."""
    base = validate_ttl(backoff, "backoff", minimum=1e-6)
    cap = validate_ttl(max_backoff, "max_backoff", minimum=1e-6)
    if base > cap:
        raise ValueError(f"backoff ({base}) must not exceed max_backoff ({cap})")
    return base, cap
