"""The part of redis-py's asyncio client that fencelock uses, over the simulated network
(``world.py``): what the real routes (``AsyncOneServerRoute``, ``AsyncQuorumRoute``), the real
``AsyncRequester`` and the real ``AsyncWaiter`` call, answering as redis-py answers.

- ``connection_pool``: what fencelock's requester reads to make connections of its own, and
  those connections (``SimConnection``): one write of RESP commands, the raw replies read one at
  a time, a lost connection a ``ConnectionError``;
- ``pubsub()``: ``subscribe``/``ssubscribe``, ``ping``, ``unsubscribe``, ``parse_response``,
  ``handle_message`` and ``aclose`` as redis-py's ``PubSub`` behaves: commands are written and
  not waited for, every reply and message comes through ``parse_response`` in order, a reset is
  a ``ConnectionError`` on the next read, and the next command connects again, subscribing
  every channel first.

Each call that waits for the server waits on a future the world resolves when the scheduler
delivers the reply: the only place this process can be held up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .protocol import Push, Reply

if TYPE_CHECKING:
    from .world import Node, Process, World


class SimRedis:
    """One process's client of one node (its connections share one connection id at the
    server: nothing there depends on which one a request took)."""

    def __init__(self, world: World, process: Process, node: Node) -> None:
        self.world, self.process, self.node = world, process, node
        self.conn: Hashable = (process.name, "req")
        self.connection_pool = SimPool(self)
        self._pubsubs = 0

    def pubsub(self) -> SimPubSub:
        self._pubsubs += 1
        return SimPubSub(self, self._pubsubs)

    async def aclose(self) -> None:
        return None


class SimPool:
    """What fencelock's requester reads of a pool to make connections of its own (redis-py's
    ``connection_class``, ``connection_kwargs``, ``max_connections``), and what a topology's
    close calls."""

    max_connections = 2**31
    connection_class: type[SimConnection]

    def __init__(self, redis: SimRedis) -> None:
        self.connection_class = SimConnection
        self.connection_kwargs: dict[str, Any] = {"sim": redis}

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Parser:
    """What redis-py's ``Connection.can_read`` asks of its parser: whether an idle connection
    has something to read (a simulated connection never has: a reply not read is dropped with
    its connection)."""

    async def can_read(self) -> bool:
        return False


class SimConnection:
    """One of fencelock's own connections to a simulated node, as redis-py's asyncio
    ``Connection`` behaves for the requester: ``connect`` (refused when the node is down),
    ``send_packed_command`` (one write of RESP commands), ``read_response`` (the replies in
    order, raw as its parser gives them; an error reply raised), ``disconnect`` (a reply still
    to come goes nowhere). A cancelled read leaves the reply to be read later, as redis-py's
    parser keeps what it read."""

    def __init__(self, sim: SimRedis, **settings: Any) -> None:
        self.redis = sim
        self.socket_connect_timeout = settings.get("socket_connect_timeout")
        self.is_connected = False
        self._parser = _Parser()
        self._pending: asyncio.Future[list[Reply]] | None = None
        self._replies: deque[Reply] = deque()

    async def connect(self) -> None:
        node = self.redis.node
        if not node.up:
            raise RedisConnectionError(f"Error connecting to {node.name}: connection refused")
        self.is_connected = True

    async def disconnect(self, nowait: bool = False) -> None:
        self.is_connected = False
        self._replies.clear()
        if self._pending is not None:
            self.redis.world.orphan(self._pending)
            self._pending.cancel()
            self._pending = None

    async def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None:
        assert self.is_connected and self._pending is None and not self._replies
        self._pending = asyncio.get_running_loop().create_future()
        redis = self.redis
        commands = _unpacked(b"".join(command))
        try:
            redis.world.send(redis.process, redis.node, redis.conn, commands, self._pending)
        except RedisConnectionError:
            self._pending = None
            self.is_connected = False
            raise

    async def read_response(self, disconnect_on_error: bool = True, **kwargs: Any) -> Reply:
        if not self._replies:
            assert self._pending is not None
            # (shielded: a cancelled read leaves the reply to a later one)
            replies = await asyncio.shield(self._pending)
            self._pending = None
            self._replies.extend(replies)
        reply = self._replies.popleft()
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def _host_error(self) -> str:
        return self.redis.node.name


def _unpacked(data: bytes) -> list[tuple[Any, ...]]:
    """The commands of one RESP write (arrays of bulk strings, as the requester packs them),
    each word a ``str`` where it is text (as the library passed it), else ``bytes``."""
    commands: list[tuple[Any, ...]] = []
    at = 0
    while at < len(data):
        assert data[at : at + 1] == b"*"
        end = data.index(b"\r\n", at)
        count, at = int(data[at + 1 : end]), end + 2
        words: list[Any] = []
        for _ in range(count):
            assert data[at : at + 1] == b"$"
            end = data.index(b"\r\n", at)
            size, at = int(data[at + 1 : end]), end + 2
            word = data[at : at + size]
            at += size + 2
            try:
                words.append(word.decode())
            except UnicodeDecodeError:
                words.append(word)
        commands.append(tuple(words))
    return commands


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

    @property
    def subscribed(self) -> bool:
        """Whether any channel is subscribed (redis-py: until its unsubscription is read)."""
        return bool(self.channels or self.shard_channels)

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

    async def parse_response(self, block: bool = True, timeout: float | None = 0.0) -> Reply:
        """The next reply or message as the parser reads it (None: none within ``timeout``; an
        error reply raised)."""
        if self.broken:
            self.broken, self.conn = False, None
            raise RedisConnectionError("Connection reset by peer")
        if self.conn is None:
            self._connect()
        if not self.inbox:
            self.reading = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait((self.reading,), timeout=None if block else timeout)
                if self.reading.done() and self.reading.exception() is not None:
                    raise self.reading.exception()  # type: ignore[misc]
            finally:
                self.reading.cancel()
                self.reading = None
            if not self.inbox:
                return None
        response = self.inbox.popleft()
        if isinstance(response, ResponseError):
            raise response
        return response

    async def handle_message(
        self, response: Reply, ignore_subscribe_messages: bool = False
    ) -> dict[str, Any] | None:
        """As redis-py's: a dict of the reply, and the channels unsubscribed forgotten."""
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
