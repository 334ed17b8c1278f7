"""The fencing token of the run in progress, for code that runs under a lock it did not take
itself: a task of ``fencelock.celery``, a job of ``client.once_per``.

A context variable, so each thread and each asyncio task sees its own run's token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import LockError

_TOKEN: ContextVar[int] = ContextVar("fencelock_token")


def current_token() -> int:
    """The fencing token of the lock the current task or job runs under; ``LockError`` when it
    runs under none. Pass it to ``fenced_set`` (or your own store) with every write."""
    try:
        return _TOKEN.get()
    except LookupError:
        raise LockError(
            "no fencelock run in progress: current_token() is for the body of a task or job "
            "that fencelock runs under a lock (fencelock.celery, once_per)"
        ) from None


@contextmanager
def running(token: int) -> Iterator[None]:
    """``current_token()`` is ``token`` inside the block (and what it was before, after)."""
    reset = _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(reset)
