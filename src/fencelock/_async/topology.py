"""A client's topology: its route (``routes.py``: where the keys live and how to reach them),
its protocol (``protocol.py``: what is sent, the only place that knows the script mode) and its
grants (``grants.py``: the engine's questions, over a one-or-majority decision), composed once
for every route. Besides those, it serves the primitives' and operators' own scripts (``run``,
``run_all``, ``view``, ``publish``, ``scan``) and the wait on a watched channel; what the route
is and can do is its ``traits``, one value.

What the layers above reach of it (``tests/integrations/test_code_shape.py`` counts them):
``grants`` (the engine's questions), ``protocol`` (what needs scripts: ``require_kind``,
``require_scripts``, ``running``), ``traits``, the scripts' runner (``run``, ``run_all``,
``view``, ``publish``, ``scan``) and the wake-ups (``watch``, ``wait``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.exceptions import RedisError

from .._core.inspection import NodeView, inspect_reply, majority_view
from .._core.natives import ScriptMode
from .._core.replies import translate_error
from .._core.routing import ONE
from .._core.stats import Counters
from .._keys import MAX_TTL
from .._scripts import INSPECT, Script
from ..errors import LockError
from .grants import AsyncGrants
from .protocol import AsyncProtocol
from .routes import AsyncRoute
from .transport import AsyncRequester
from .waiter import Watch


class AsyncTopology:
    """One client's route, protocol and grants (see the module's docstring). ``mode``: the
    client's script mode (shared with its renewal twin: what one learns, the other knows)."""

    def __init__(self, route: AsyncRoute, counters: Counters, mode: ScriptMode | None = None):
        settings = route.settings
        self.route = route
        self.counters = counters
        self.request_timeout = settings.request_timeout
        traits = self.traits = route.traits
        self.protocol = AsyncProtocol(
            route,
            ScriptMode("auto", traits.publish_command) if mode is None else mode,
            settings.request_timeout,
            one_server=settings.shape == ONE,
            quorum=traits.majority,
            min_replicas=settings.min_replicas,
            replica_timeout=settings.replica_timeout,
        )
        self.grants = AsyncGrants(self.protocol, route)
        # one operator's request's bound (inspect, SCAN, force_release): on a quorum a node's
        # own, so that a node down does not hold up the majority's answer
        self.read_timeout = route.node_timeout(MAX_TTL)

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        """Subscribe to a wake-up channel and yield what a message on it sets. The
        subscription is confirmed within ``timeout`` seconds (None: one request timeout);
        ``what``: the object that waits, for errors. A client that runs no scripts waits by
        re-trying instead (at the end of the holder's lease, or every ``max_poll``) where
        subscribing is refused: a watch never set."""
        return self.protocol.watch(self.route.watch(channel, what, timeout))

    async def wait(self, watch: Watch, timeout: float) -> bool:
        """Wait for a message on a watched channel, at most ``timeout`` seconds. A watch whose
        channel moved (``Watch.moved``: a Cluster's slot) first follows it (``route.follow``),
        and then returns at once: the caller re-checks (a release may have granted it the lock
        meanwhile)."""
        end = time.monotonic() + timeout
        woken = watch.moved or await self._listen(watch, timeout)
        if watch.moved:
            return await self.route.follow(watch, end - time.monotonic()) or woken
        return woken

    async def _listen(self, watch: Watch, timeout: float) -> bool:
        counters = self.counters
        counters.add(waiting=1)
        woken = False
        try:
            woken = await watch.event.wait(timeout)
        finally:
            counters.add(waiting=-1, wakeups=int(woken), polls=int(not woken))
        return woken

    # -- what the operators' tools and the primitives' own scripts need ------------------------

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        """``script``'s reply from the one server of ``keys``, within one request timeout; a
        failure raised as the ``LockError`` of ``what``."""
        if self.traits.majority:
            raise TypeError(f"{what}: Redlock mode has no one server to run it on")
        try:
            reply, _ = await self.protocol.script(script, keys, args, self.request_timeout, what)
        except RedisError as exc:
            raise translate_error(exc, what) from exc
        return reply

    async def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        """``script``'s reply from every server that may hold ``keys`` (one, or each Redlock
        node), each within one request's bound (``read``: a read, sent without WAIT). A server's
        failure is the ``LockError`` of ``what`` in the list, not raised."""
        if self.traits.majority:
            request = [script.evalsha(keys, args)]
            answers = await self.protocol.request_all(
                request, script.eval(keys, args), self.read_timeout, what or script.name
            )
            return [a if isinstance(a, LockError) else a[0] for a in answers]
        try:
            reply, _ = await self.protocol.script(
                script, keys, args, self.request_timeout, what, read=read
            )
        except RedisError as exc:
            return [translate_error(exc, what)]
        return [reply]

    async def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        """The grant at ``keys`` (inspect.lua's) as the servers show it (Redlock: a majority);
        None when not held."""
        replies = await self.run_all(INSPECT, keys, (listed,), what, read=True)
        if self.traits.majority:
            return majority_view(
                [r if isinstance(r, LockError) else inspect_reply(r) for r in replies]
            )
        [reply] = replies
        if isinstance(reply, LockError):
            raise reply
        view = inspect_reply(reply)
        return view if view.holder else None

    async def publish(self, channel: str, message: str) -> None:
        """Publish ``message`` on ``channel`` wherever its waiters listen, best effort, within
        one request's bound."""
        command = (self.traits.publish_command, channel, message)
        if self.traits.majority:
            await self.route.send_all(command, self.read_timeout)
            return
        try:
            await self.route.send([command], self.request_timeout, channel)
        except RedisError as exc:
            raise translate_error(exc, f"publish on {channel!r}") from exc

    def scan(self, match: str, count: int) -> AsyncIterator[bytes]:
        """Every key matching ``match`` on every server (SCAN, each call within one operator's
        request's bound)."""
        return self.route.scan(match, count, self.read_timeout)

    # -- resources -----------------------------------------------------------------------------

    def abandon(self) -> None:
        self.route.abandon()

    def pools(self) -> list[Any]:
        return self.route.pools()

    @property
    def requester(self) -> AsyncRequester:
        return self.route.requester

    async def close(self) -> None:
        await self.grants.detached.close()  # the give-backs first
        await self.route.close()
