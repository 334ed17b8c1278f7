"""The part of redis-py's asyncio client that fencelock uses, over the simulated network
(``world.py``): what the real topologies (``AsyncOneServer``, ``AsyncQuorum``), the real
``AsyncRequester`` and the real ``AsyncWaiter`` call, answering as redis-py answers.

- ``SimRedis.execute_command`` and ``pipeline().execute(raise_on_error=False)``: replies through
  redis-py's own response callbacks (RESP3, as redis-py 8 speaks by default), an error reply
  raised (or, in a pipeline, in its place), a lost connection a ``ConnectionError``;
- ``connection_pool.get_connection()`` and its connection's ``send_command`` /
  ``read_response``: the raw replies Redlock's fan-out reads;
- ``pubsub()``: ``subscribe``/``ssubscribe``, ``ping``, ``unsubscribe``, ``get_message`` and
  ``aclose`` as redis-py's ``PubSub`` behaves: commands are written and not waited for, every
  reply and message comes through ``get_message`` in order, a reset is a ``ConnectionError`` on
  the next read, and the next command connects again, subscribing every channel first.

Each call that waits for the server waits on a future the world resolves when the scheduler
delivers the reply: the only place this process can be held up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .protocol import Push, Reply

if TYPE_CHECKING:
    from .world import Node, Process, World

CALLBACKS = redis.asyncio.Redis().response_callbacks  # redis-py's, as a default client has them


def _parsed(command: tuple[Any, ...], reply: Reply) -> Any:
    if isinstance(reply, ResponseError):
        return reply
    callback = CALLBACKS.get(str(command[0]))
    return reply if callback is None else callback(reply)


class SimRedis:
    """One process's client of one node (its pooled connections share one connection id at the
    server: nothing there depends on which one a request took)."""

    def __init__(self, world: World, process: Process, node: Node) -> None:
        self.world, self.process, self.node = world, process, node
        self.conn: Hashable = (process.name, "req")
        self.connection_pool = SimPool(self)
        self._pubsubs = 0

    async def request(self, commands: list[tuple[Any, ...]]) -> list[Reply]:
        """Send ``commands`` (one write) and wait for their replies."""
        future = asyncio.get_running_loop().create_future()
        self.world.send(self.process, self.node, self.conn, commands, future)
        try:
            return await future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            self.world.orphan(future)
            raise

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        [reply] = await self.request([args])
        if isinstance(reply, ResponseError):
            raise reply
        return _parsed(args, reply)

    def pipeline(self, transaction: bool = False) -> SimPipeline:
        assert not transaction
        return SimPipeline(self)

    def pubsub(self) -> SimPubSub:
        self._pubsubs += 1
        return SimPubSub(self, self._pubsubs)

    async def aclose(self) -> None:
        return None


class SimPipeline:
    def __init__(self, redis: SimRedis) -> None:
        self.redis = redis
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> SimPipeline:
        self.commands.append(args)
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        assert not raise_on_error
        replies = await self.redis.request(self.commands)
        return [_parsed(c, r) for c, r in zip(self.commands, replies, strict=True)]


class SimPool:
    """What Redlock's fan-out and the topologies' bookkeeping ask of a connection pool."""

    max_connections = 2**31

    def __init__(self, redis: SimRedis) -> None:
        self.redis = redis
        self.connection_kwargs = {"host": redis.node.name, "port": 0}

    async def get_connection(self, *args: Any, **kwargs: Any) -> SimConnection:
        return SimConnection(self.redis)

    async def release(self, connection: SimConnection) -> None:
        return None

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        return None


class SimConnection:
    def __init__(self, redis: SimRedis) -> None:
        self.redis = redis
        self.future: asyncio.Future[list[Reply]] | None = None

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.future = asyncio.get_running_loop().create_future()
        self.redis.world.send(
            self.redis.process, self.redis.node, self.redis.conn, [args], self.future
        )

    async def read_response(self, *args: Any, **kwargs: Any) -> Reply:
        assert self.future is not None
        try:
            [reply] = await self.future
        except asyncio.CancelledError:
            self.redis.world.orphan(self.future)
            raise
        if isinstance(reply, ResponseError):
            raise reply
        return reply


class SimPubSub:
    """A pub/sub connection, as redis-py's ``PubSub`` (decode_responses=False) behaves."""

    def __init__(self, redis: SimRedis, number: int) -> None:
        self.redis = redis
        self.number = number
        self.connections = 0
        self.conn: Hashable | None = None  # the connection at the server (None: not connected)
        self.channels: dict[bytes, None] = {}
        self.shard_channels: dict[bytes, None] = {}
        self.leaving: set[bytes] = set()  # unsubscribed, until the server confirms it
        self.inbox: deque[Reply] = deque()
        self.reading: asyncio.Future[None] | None = None
        self.broken = False  # the connection was lost: the next read says so

    # -- what the world calls ---------------------------------------------------------------

    def deliver(self, item: Reply) -> None:
        self.inbox.append(item)
        if self.reading is not None and not self.reading.done():
            self.reading.set_result(None)

    def lost(self) -> None:
        self.conn = None
        self.inbox.clear()
        if self.reading is not None and not self.reading.done():
            self.reading.set_exception(RedisConnectionError("Connection reset by peer"))
        else:
            self.broken = True

    # -- redis-py's PubSub --------------------------------------------------------------------

    def _connect(self) -> Hashable:
        """Connect if need be: a new connection subscribes every channel first (redis-py's
        ``on_connect``)."""
        if self.conn is None:
            self.broken = False
            self.connections += 1
            redis = self.redis
            conn = (redis.process.name, "pubsub", self.number, self.connections)
            redis.world.connect_listener(redis.node, conn, self)
            self.conn = conn
            self.leaving.clear()
            if self.channels:
                self._send(("SUBSCRIBE", *self.channels))
            if self.shard_channels:
                self._send(("SSUBSCRIBE", *self.shard_channels))
        return self.conn

    def _send(self, command: tuple[Any, ...]) -> None:
        conn = self._connect()
        redis = self.redis
        redis.world.send(redis.process, redis.node, conn, [command], None, fifo=True)

    async def subscribe(self, *channels: Any) -> None:
        self._send(("SUBSCRIBE", *channels))
        self._joined(self.channels, channels)

    async def ssubscribe(self, *channels: Any) -> None:
        self._send(("SSUBSCRIBE", *channels))
        self._joined(self.shard_channels, channels)

    def _joined(self, subscribed: dict[bytes, None], channels: tuple[Any, ...]) -> None:
        # (after the send, as redis-py: a reconnection meanwhile must not subscribe twice)
        names = [_encoded(c) for c in channels]
        subscribed.update(dict.fromkeys(names))
        self.leaving.difference_update(names)

    async def unsubscribe(self, *channels: Any) -> None:
        self._send(("UNSUBSCRIBE", *channels))
        self.leaving.update(_encoded(c) for c in channels)

    async def sunsubscribe(self, *channels: Any) -> None:
        self._send(("SUNSUBSCRIBE", *channels))
        self.leaving.update(_encoded(c) for c in channels)

    async def ping(self, message: Any = None) -> None:
        self._send(("PING",) if message is None else ("PING", message))

    async def get_message(
        self, ignore_subscribe_messages: bool = False, timeout: float | None = 0.0
    ) -> dict[str, Any] | None:
        if self.broken:
            self.broken, self.conn = False, None
            raise RedisConnectionError("Connection reset by peer")
        if self.conn is None:
            self._connect()
        if not self.inbox:
            self.reading = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait((self.reading,), timeout=timeout)
                if self.reading.done() and self.reading.exception() is not None:
                    raise self.reading.exception()  # type: ignore[misc]
            finally:
                self.reading.cancel()
                self.reading = None
            if not self.inbox:
                return None
        return self._message(self.inbox.popleft())

    def _message(self, response: Reply) -> dict[str, Any] | None:
        """As redis-py's ``handle_message``."""
        if isinstance(response, ResponseError):
            raise response
        if isinstance(response, bytes):
            response = Push([b"pong", response if response != b"PONG" else b""])
        assert isinstance(response, list)
        kind = response[0].decode() if isinstance(response[0], bytes) else str(response[0])
        if kind == "pong":
            return {"type": kind, "pattern": None, "channel": None, "data": response[1]}
        channel = response[1]
        if kind in ("unsubscribe", "sunsubscribe") and channel in self.leaving:
            self.leaving.discard(channel)  # type: ignore[arg-type]
            (self.channels if kind == "unsubscribe" else self.shard_channels).pop(channel, None)  # type: ignore[arg-type]
        return {"type": kind, "pattern": None, "channel": response[1], "data": response[2]}

    async def aclose(self) -> None:
        if self.conn is not None:
            self.redis.world.close_listener(self.redis.node, self.conn)
        self.conn = None
        self.channels, self.shard_channels = {}, {}


def _encoded(channel: Any) -> bytes:
    return channel if isinstance(channel, bytes) else str(channel).encode()
