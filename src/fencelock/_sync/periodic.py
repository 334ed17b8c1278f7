# GENERATED from src/fencelock/_async/periodic.py by tools/gen_sync.py: edit that file instead.
"""Once per period across a fleet (``client.once_per``): every runner ticks the job (cron on
every host, an APScheduler in every web worker), and each period one tick runs it.

A tick, in order:

1. numbers its period by the clock at the tick (``_core/periods.py``);
2. tries the lock once (``timeout``, default 0): held means another runner is at it, so skip;
3. reads the period record with ``fenced_get``, which also refuses every older token's write
   from then on; a record of this period (or a later one) means done, so skip;
4. runs the job, with the lock's token as ``current_token()`` and the lease renewed;
5. records the period with ``fenced_set``: a runner overtaken meanwhile (paused past its lease
   while a successor took the lock and read the record) is refused with ``StaleToken``, so it
   can never record a period over its successor's;
6. releases the lock. A job that raises (or a runner that dies) records nothing: the period is
   not done, and the next tick runs it.

``run_held`` takes steps 3 to 5 under a lock the caller took itself (with its own timeout,
``on_lost`` or label): ``fencelock run --once-per`` runs a command that way.

So a period is recorded once; a job is run twice in one period only when its runner lost the
lease mid-job (paused, partitioned), and the late runner's fenced writes are then refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._backend import sync_public_name
from .._context import running
from .._core.periods import is_done, period_index, record_key, validate_period
from .._keys import validate_name
from .._transport import SyncRedis, SyncRedisCluster
from ..errors import LockTimeout

if TYPE_CHECKING:
    from .client import LockClient
    from .lock import Lock

_F = TypeVar("_F", bound=Callable[..., Any])

logger = logging.getLogger("fencelock.schedule")


class OncePer:
    """A job guard: ``guard.run(fn, *args)`` (or ``guard`` as a decorator) runs ``fn`` if this
    tick is the first to take the period; else returns None without running it."""

    def __init__(
        self,
        client: LockClient,
        name: str,
        period: float | timedelta,
        *,
        ttl: float,
        offset: float | timedelta,
        timeout: float,
        redis: SyncRedis | SyncRedisCluster | None,
    ) -> None:
        self.name = validate_name(name)
        self.period, self.offset = validate_period(period, offset)
        client.lock(name, ttl, timeout=timeout)  # checks ttl and timeout now, not at a tick
        self.ttl = ttl
        self.timeout = timeout
        self.record_key = record_key(client.prefix, self.name)  # the last period done
        self._redis = redis  # (checked by the client)
        self._client = client

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} {self.name!r} period={self.period}>"

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``'s result if this tick runs the period, else None."""
        index = period_index(time.time(), self.period, self.offset)
        lock = self._client.lock(self.name, self.ttl, timeout=self.timeout, auto_renew=True)
        with ExitStack() as stack:
            try:
                stack.enter_context(lock)
            except LockTimeout:
                logger.debug(
                    "fencelock: %r period %d skipped: another runner has it", self.name, index
                )
                return None
            return self._tick(index, lock.token, fn, args, kwargs)

    def run_held(
        self, lock: Lock, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """As ``run``, under ``lock``: a lock on this name from this client, which the caller
        took (with its own timeout, ``on_lost`` or label; ``auto_renew=True`` for a long job)
        and releases afterwards. The period is numbered by the clock now, at the grant.
        ``LockNotOwned`` if ``lock`` is not held."""
        if lock.name != self.name:
            raise ValueError(f"run_held needs a lock on {self.name!r}, not on {lock.name!r}")
        index = period_index(time.time(), self.period, self.offset)
        return self._tick(index, lock.token, fn, args, kwargs)

    def _tick(
        self,
        index: int,
        token: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Steps 3 to 5 of a tick of period ``index``, under the grant of ``token``."""
        client = self._client
        recorded = client.fenced_get(self.record_key, token, redis=self._redis)
        if is_done(recorded, index):
            logger.debug("fencelock: %r period %d skipped: done already", self.name, index)
            return None
        with running(token):
            result = fn(*args, **kwargs)
        client.fenced_set(self.record_key, index, token, redis=self._redis)
        return result

    def __call__(self, fn: _F) -> _F:
        @wraps(fn)
        def tick(*args: Any, **kwargs: Any) -> Any:
            return self.run(fn, *args, **kwargs)

        return cast(_F, tick)
