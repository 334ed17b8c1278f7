"""The exceptions of ``fencelock.compat.redis_py``: each is redis-py's exception and fencelock's
matching one, so that both kinds of ``except`` clause keep catching it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis.exceptions as redis_errors

from .. import errors


class LockError(redis_errors.LockError, errors.LockError):
    """redis-py's ``LockError``; also a ``fencelock.LockError``."""


class LockNotOwnedError(redis_errors.LockNotOwnedError, LockError, errors.LockNotOwned):
    """redis-py's ``LockNotOwnedError``; also a ``fencelock.LockNotOwned``."""


class LockLostError(LockNotOwnedError, errors.LockLost):
    """The lease was lost while held (expired, or taken over): a ``LockNotOwnedError`` to
    redis-py code, a ``fencelock.LockLost`` to fencelock code."""


class LockTimeoutError(LockError, errors.LockTimeout):
    """``with lock:`` could not acquire it within ``blocking_timeout`` (redis-py raises a plain
    ``LockError`` there); also a ``fencelock.LockTimeout``."""


class LockConnectionError(redis_errors.ConnectionError, errors.LockConnectionError):
    """The server could not be reached or did not answer in time: redis-py's
    ``ConnectionError``; also a ``fencelock.LockConnectionError``."""


@contextlib.contextmanager
def translated(name: str) -> Iterator[None]:
    """fencelock's errors raised inside, as the exceptions above (chained to the original)."""
    try:
        yield
    except (redis_errors.LockError, LockConnectionError):
        raise  # one of ours already
    except errors.LockLost as exc:
        raise LockLostError(str(exc), lock_name=name) from exc
    except errors.LockNotOwned as exc:
        raise LockNotOwnedError(str(exc), lock_name=name) from exc
    except errors.LockTimeout as exc:
        raise LockTimeoutError(str(exc), lock_name=name) from exc
    except errors.LockConnectionError as exc:
        raise LockConnectionError(str(exc)) from exc
    except errors.LockError as exc:
        raise LockError(str(exc), lock_name=name) from exc
