"""Wake-ups for blocked acquires: one pub/sub connection per client, shared by every waiter.

Failure timeline this guards against (the classic lost wake-up): a waiter tries, finds the lock
busy, and only then subscribes; the holder releases in between and its message goes to nobody, so
the waiter sleeps until its next poll. Here a waiter subscribes *and waits for the server's
confirmation* before its retry, so any release after that retry is delivered to it. Messages can
still be lost when the pub/sub connection drops; the caller's bounded fallback re-try covers that.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.exceptions

from .._backend import (
    AsyncBackground,
    AsyncEvent,
    AsyncPubSub,
    AsyncRedis,
    AsyncStateLock,
    async_sleep,
)
from ..errors import LockConnectionError

# How long the listener blocks in one read, which bounds how long close() waits for it.
_READ_TIMEOUT = 0.5


@dataclass
class WaitStats:
    """Counters the tests use to tell a pub/sub wake-up from a fallback re-try."""

    waiting: int = 0  # acquires blocked right now, waiting for a wake-up or their timer
    wakeups: int = 0  # waits ended by a release message
    polls: int = 0  # waits ended by their timer


class AsyncWaiter:
    def __init__(self, redis: AsyncRedis, confirm_timeout: float) -> None:
        self._redis = redis
        self._confirm_timeout = confirm_timeout
        self._guard = AsyncStateLock()
        self._pubsub: AsyncPubSub | None = None
        self._pid = os.getpid()
        self._listener = AsyncBackground("fencelock-waiter")
        self._closing = False
        # channel -> events of the waiters watching it
        self._watchers: dict[str, set[AsyncEvent]] = {}
        # channel -> events of SUBSCRIBEs sent and not yet confirmed, in the order sent. An
        # abandoned entry stays queued so that its confirmation is not taken for a later one.
        self._unconfirmed: dict[str, deque[AsyncEvent]] = {}
        self.stats = WaitStats()

    def _connection(self) -> AsyncPubSub:
        if self._pubsub is None or self._pid != os.getpid():
            # In a forked child the parent's pub/sub socket is shared with the parent: never
            # read from it (that would steal its messages) nor close it; start afresh.
            self._pid = os.getpid()
            self._pubsub = self._redis.pubsub()
            self._listener = AsyncBackground("fencelock-waiter")
            self._watchers.clear()
            self._unconfirmed.clear()
        return self._pubsub

    @asynccontextmanager
    async def watch(self, channel: str) -> AsyncIterator[AsyncEvent]:
        """Subscribe to ``channel`` (confirmed by the server) and yield an event that is set by
        every message on it while the block runs."""
        event, confirmed = AsyncEvent(), AsyncEvent()
        with self._guard:
            pubsub = self._connection()
            self._watchers.setdefault(channel, set()).add(event)
            self._unconfirmed.setdefault(channel, deque()).append(confirmed)
        try:
            try:
                await pubsub.subscribe(channel)
            except redis.exceptions.RedisError as exc:
                raise LockConnectionError(f"subscribe {channel!r}: {exc}") from exc
            # Subscribe first, then start the listener: redis-py refuses to read a pub/sub
            # connection that has never subscribed.
            if not self._listener.running():
                self._closing = False
                self._listener.start(self._listen)
            if not await confirmed.wait(self._confirm_timeout):
                raise LockConnectionError(f"subscribe {channel!r}: no confirmation in time")
            yield event
        finally:
            await self._unwatch(channel, event)

    async def wait(self, event: AsyncEvent, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds."""
        with self._guard:
            self.stats.waiting += 1
        woken = False
        try:
            woken = await event.wait(timeout)
        finally:
            with self._guard:
                self.stats.waiting -= 1
                if woken:
                    self.stats.wakeups += 1
                else:
                    self.stats.polls += 1
        return woken

    async def _unwatch(self, channel: str, event: AsyncEvent) -> None:
        with self._guard:
            watchers = self._watchers.get(channel)
            if watchers is None:
                return
            watchers.discard(event)
            if watchers:
                return
            del self._watchers[channel]
            pubsub = self._pubsub
        if pubsub is not None and self._pid == os.getpid():
            try:
                await pubsub.unsubscribe(channel)
            except redis.exceptions.RedisError:
                pass  # the connection is gone, and the subscription with it

    def _dispatch(self, message: dict[str, object]) -> None:
        kind, channel = message["type"], message["channel"]
        if isinstance(channel, bytes):
            channel = channel.decode()
        assert isinstance(channel, str)
        with self._guard:
            if kind in ("message", "smessage"):
                for event in self._watchers.get(channel, ()):
                    event.set()
            elif kind in ("subscribe", "ssubscribe"):
                pending = self._unconfirmed.get(channel)
                if pending:
                    pending.popleft().set()
                    if not pending:
                        del self._unconfirmed[channel]

    async def _listen(self) -> None:
        pubsub = self._pubsub
        assert pubsub is not None
        while not self._closing:
            try:
                message = await pubsub.get_message(timeout=_READ_TIMEOUT)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                # redis-py reconnects and re-subscribes on the next read; waiters re-try on
                # their own timers meanwhile, so wake them all to re-try now.
                with self._guard:
                    for events in self._watchers.values():
                        for event in events:
                            event.set()
                await async_sleep(_READ_TIMEOUT)
                continue
            if message is not None:
                self._dispatch(message)

    async def close(self) -> None:
        self._closing = True
        await self._listener.stop(2 * _READ_TIMEOUT)
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None and self._pid == os.getpid():
            try:
                await pubsub.aclose()
            except redis.exceptions.RedisError:
                pass
