"""What every fence shares, the Redis keys' (``fenced_set``) and the sinks' of
``fencelock.fences``: the token's validation, and the report of a stale write refused."""

from __future__ import annotations

import logging

from . import _events as events
from ._keys import nonempty_str
from .errors import StaleToken

MAX_TOKEN = 2**63 - 1

fence_logger = logging.getLogger("fencelock.fence")


def fencing_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    # A token no grant can have (Redis counts in signed 64 bits) would be stored as the
    # highest seen and refuse every real holder's write for good.
    if not 0 < token <= MAX_TOKEN:
        shown = token if token.bit_length() <= 64 else f"a {len(str(token))}-digit number"
        raise ValueError(f"token must be a fencing token from 1 to 2**63 - 1, got {shown}")
    return token


def resource_name(resource: object) -> str:
    """A sink's resource name: a non-empty ``str`` (``TypeError``/``ValueError`` otherwise)."""
    return nonempty_str("resource", resource)


def refused(stale: StaleToken) -> None:
    """A stale write refused: a holder acted on a lock it had lost (worth an alert: see
    docs/operations.md)."""
    if events.on:
        events.emit(events.StaleWriteRefused(stale.key, stale.token))
    fence_logger.warning(
        "fencelock: stale write to %r refused: token %d, but %d wrote it already",
        stale.key,
        stale.token,
        stale.seen,
        extra={
            "event": "stale_write_refused",
            "key": stale.key,
            "token": stale.token,
            "reason": f"token {stale.seen} wrote it already",
        },
    )
