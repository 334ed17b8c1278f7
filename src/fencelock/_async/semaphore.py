"""A semaphore: at most ``limit`` permits of a name held at once, across processes.

It is the lock with other scripts (scripts/semaphore*.lua): the lifecycle, the waits, the
watchdog, the loss signals and the fencing tokens are the lock's (lock.py). What differs:

* a permit is a holder entry with its own lease in a sorted set scored by its end on the
  server's clock; a crashed holder's permits come back when the lease ends, taken back inside
  every script of the semaphore (no sweeper);
* ``acquire(n)`` takes n permits at once, all or none; waiters are served first come, first
  served (a queued waiter is never passed, so a large request is not starved by small ones);
* the limit is stored with the semaphore: the first acquire stores the one given, and
  ``set_limit`` changes it for every client (see ``set_limit`` for holders above a lowered
  limit);
* each semaphore object holds one grant (of n permits) at a time, like a lock object; permits
  are not handed between the objects of a client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisError

from .._core.inspection import SemaphoreState, semaphore_state
from .._core.lease import LockSpec
from .._core.replies import new_waiter_id, translate_error
from ..keys import SemaphoreKeys
from ..labels import Label
from ..scripts import SEMAPHORE_LIMIT, SEMAPHORE_STATE, Script
from .lock import _DEFAULT, AsyncLock, Parts, _Default
from .topology import AsyncOneServer


def validate_permits(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 2**31:
        raise ValueError(f"{arg} must be from 1 to 2**31, got {value}")
    return value


class AsyncPermits(AsyncLock):
    """What a semaphore and the two sides of a read-write lock share: a lock object whose grant
    is ``n`` permits of ``limit``, on the keys of ``kind`` (keys.SemaphoreKeys)."""

    def __init__(
        self,
        client: object,
        parts: Parts,
        name: str,
        limit: int,
        ttl: float,
        *,
        kind: str = "sem",
        timeout: float | None,
        auto_renew: bool = False,
        on_lost: Callable[[AsyncLock], object] | None = None,
        on_lost_policy: str = "raise",
        label: Label | _Default = _DEFAULT,
    ) -> None:
        if not isinstance(parts.topology, AsyncOneServer):
            raise TypeError(
                "semaphores need one master or a Cluster: Redlock is for the mutex only "
                "(docs/semaphore.md says why)"
            )
        self.limit = validate_permits("limit", limit)
        super().__init__(
            client,
            parts,
            name,
            ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )
        self._keys = SemaphoreKeys.for_semaphore(self.name, parts.prefix, kind)
        self._owner = new_waiter_id()
        self._spec = self._spec_for(1)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} limit={self.limit} ttl={self.ttl}>"

    def _spec_for(self, permits: int) -> LockSpec:
        return LockSpec(
            self.name,
            self._keys,
            self.ttl,
            False,
            permits=permits,
            limit=self.limit,
            owner=self._owner,
        )

    async def acquire(  # type: ignore[override]  # (n permits first, then the lock's timeout)
        self, n: int = 1, timeout: float | _Default | None = _DEFAULT
    ) -> bool:
        """Take ``n`` permits, all or none. ``timeout``: as ``Lock.acquire``. ``LockError``
        when more are asked than the stored limit can ever give."""
        n = validate_permits("n", n)
        if self._grant() is None and n != self._spec.permits:
            self._spec = self._spec_for(n)
        return await super().acquire(timeout)

    @property
    def permits(self) -> int:
        """The permits the current (or last) grant asked for."""
        return self._spec.permits

    async def state(self) -> SemaphoreState:
        """The stored limit, the permits held and by whom (one read)."""
        topology = self._parts.topology
        assert isinstance(topology, AsyncOneServer)
        return await read_state(topology, self._keys)

    async def _script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """``script``'s reply from the semaphore's server, within one request timeout."""
        topology = self._parts.topology
        assert isinstance(topology, AsyncOneServer)
        try:
            reply, _ = await topology.script(script, keys, args, topology.request_timeout)
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc
        return reply

    async def holders(self) -> dict[tuple[str, str | None], int]:
        """Who holds permits now: (holder id, label) -> permits. The id is a digest of the
        holder token, as ``inspect`` shows it (the token itself would let anyone release the
        permits)."""
        return {(h.holder, h.label): h.permits for h in (await self.state()).holders}


class AsyncSemaphore(AsyncPermits):
    """At most ``limit`` permits of a name held at once (``LockClient.semaphore``)."""

    _noun = "semaphore"

    async def available(self) -> int:
        """Permits free now (the stored limit, or this object's if none is stored yet, less
        those held)."""
        state = await self.state()
        return max(0, (state.limit or self.limit) - state.used)

    async def set_limit(self, limit: int) -> None:
        """Store a new limit for every client of the semaphore. Raised, the queued waiters
        that now fit are granted at once; lowered, holders above it keep their permits until
        they release them (or their leases end), and nobody is granted until the permits held
        are under the new limit."""
        limit = validate_permits("limit", limit)
        topology = self._parts.topology
        args = (limit, self._keys.channel, topology.publish_command)
        await self._script(SEMAPHORE_LIMIT, self._spec.release_keys, args)
        self.limit = limit


async def read_state(topology: AsyncOneServer, keys: SemaphoreKeys) -> SemaphoreState:
    """What the server shows of the semaphore (or read-write lock) at ``keys``: one read-only
    script, sent without WAIT, within one request timeout."""
    names = (keys.lock, keys.state, keys.fence, keys.queue)
    try:
        reply = await topology.read(SEMAPHORE_STATE, names, (), topology.request_timeout)
    except RedisError as exc:
        raise translate_error(exc, keys.lock) from exc
    return semaphore_state(reply)
