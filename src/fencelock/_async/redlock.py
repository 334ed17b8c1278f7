"""Redlock: several independent masters, and a majority decides (``_core/quorum.py``).

Every request goes to all nodes at once, each bounded by a per-node timeout; the grants
(``grants.py``) are the one server's, decided by a majority. A grant's fencing token is the
largest counter among the granting nodes, and is safe to use only once a majority's counters
were raised to it (fence_raise.lua): the asyncio API does that inside acquire, the sync API at
the first read of ``lock.token``. No local hand-off and no grant by a release script: one
script on one node cannot speak for a majority.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import RedisError

from .._core.inspection import NodeView, inspect_reply, majority_view
from .._core.kinds import Kind
from .._core.natives import ScriptMode
from .._core.quorum import node_timeout, quorum
from .._core.replies import translate_error
from .._core.stats import Counters
from .._keys import MAX_TTL
from .._scripts import INSPECT, Script
from .._transport import AsyncRedis
from ..errors import LockConnectionError, LockError
from .grants import AsyncGrants
from .protocol import AsyncProtocol
from .topology import AsyncTopology, scan_node, server_address
from .waiter import AsyncWaiter, Watch


class AsyncQuorum(AsyncTopology):
    local_handoff = False
    grants_by_release = False
    jitters = True
    one_counter = False

    def __init__(
        self,
        nodes: list[AsyncRedis],
        waiters: dict[object, AsyncWaiter],
        request_timeout: float,
        counters: Counters,
        node_timeout: float | None,
    ) -> None:
        super().__init__(request_timeout, counters, owned=nodes)
        self.nodes = nodes
        self.waiters = waiters
        # None: derived per lock from its ttl (_core/quorum.node_timeout)
        self.fixed_node_timeout = node_timeout
        mode = ScriptMode("auto", self.publish_command)
        self.protocol = AsyncProtocol(self, mode, request_timeout, one_server=False, quorum=True)
        self.grants = AsyncGrants(
            self.protocol, request_timeout, None, node_timeout=self.node_timeout
        )

    def node_timeout(self, ttl: float) -> float:
        """How long one node may take to answer a request about a lock of ``ttl``."""
        return self.fixed_node_timeout or node_timeout(ttl)

    @property
    def address(self) -> str:
        return "the Redlock nodes"

    @property
    def addresses(self) -> list[str]:
        return [server_address(node) for node in self.nodes]

    async def send(
        self,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        raise TypeError("Redlock mode has no one server to send a request to")

    async def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        nodes = [self.nodes[i] for i in only] if only else self.nodes
        return await self.requester.fan_out(nodes, command, timeout)

    async def fan_out(self, command: Sequence[Any], timeout: float, what: str) -> list[Any]:
        """Send ``command`` to every node at once; per node its reply, or the ``LockError`` it
        failed with (a node silent for ``timeout`` seconds counts as failed)."""
        replies = await self.send_all(command, timeout)
        return [translate_error(r, what) if isinstance(r, RedisError) else r for r in replies]

    @asynccontextmanager
    async def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> AsyncIterator[Watch]:
        """Subscribe on every node: a release message from any of them wakes the waiter."""
        self._loop.check()
        watch = Watch()
        async with contextlib.AsyncExitStack() as stack:
            for waiter in self.waiters.values():
                # a node that is down is skipped: the others, or the fallback re-try, wake us
                with contextlib.suppress(LockConnectionError):
                    await stack.enter_async_context(waiter.watch(channel, what, watch, timeout))
            yield watch

    def supports(self, kind: Kind) -> bool:
        return kind.on_quorum

    @property
    def read_timeout(self) -> float:
        # a node's own timeout: a node down must not hold up the majority's answer
        return self.node_timeout(MAX_TTL)

    async def run_all(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        what: str,
        *,
        read: bool = False,
    ) -> list[Any]:
        request = [script.evalsha(keys, args)]
        answers = await self.protocol.request_all(
            request, script.eval(keys, args), self.read_timeout, what or script.name
        )
        return [a if isinstance(a, LockError) else a[0] for a in answers]

    async def view(self, keys: Sequence[str], listed: int, what: str) -> NodeView | None:
        replies = await self.run_all(INSPECT, keys, (listed,), what, read=True)
        return majority_view([r if isinstance(r, LockError) else inspect_reply(r) for r in replies])

    async def publish(self, channel: str, message: str) -> None:
        await self.fan_out((self.publish_command, channel, message), self.read_timeout, channel)

    async def scan(self, match: str, count: int) -> AsyncIterator[bytes]:
        answered = 0
        failure: LockError | None = None
        for node in self.nodes:
            try:
                async for key in scan_node(self.requester, node, match, count, self.read_timeout):
                    yield key
                answered += 1
            except LockError as exc:
                failure = exc
        # a lock is held on a majority: with fewer nodes silent than a majority, one of its
        # nodes answered; with more, the listing could miss some
        if failure is not None and len(self.nodes) - answered >= quorum(len(self.nodes)):
            raise failure

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], what: str) -> Any:
        raise TypeError(f"{what}: Redlock mode has no one server to run it on")
