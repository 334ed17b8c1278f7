# GENERATED from src/fencelock/_async/waiter.py by tools/gen_sync.py: edit that file instead.
"""Wake-ups for blocked acquires: one pub/sub connection per client, shared by every waiter.

Failure timeline this guards against (the classic lost wake-up): a waiter tries, finds the lock
busy, and only then subscribes; the holder releases in between and its message goes to nobody, so
the waiter sleeps until its next poll. Here a waiter subscribes and then sends a PING carrying a
nonce on the same connection; the server answers in order, so when that PING's reply arrives the
subscription is active, and only then does the waiter re-try. Any release after that re-try
reaches it. (Matching SUBSCRIBE confirmations to waiters is not enough: a waiter cancelled before
its SUBSCRIBE went out would leave the next waiter matched to the wrong confirmation.)

Messages are lost when the pub/sub connection drops: the listener re-makes it (redis-py
re-subscribes every channel first), confirms that with a PING, and only then wakes every waiter
to re-try once (``_resubscribe``).

On a Cluster a channel lives where its slot lives, and the slot can move (a migration, a
failover): the node then ends the subscription itself (an unsolicited SUNSUBSCRIBE, which
redis-py only passes on), answers a new SSUBSCRIBE with MOVED, or is gone. Each of these marks
the watch ``moved``: it is subscribed nowhere, and its next wait subscribes it where the slot is
now, then re-tries (``AsyncClusterWaiters.follow``): a release may have granted it the lock
meanwhile, on the new master.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.exceptions
from redis.exceptions import AskError, ClusterCrossSlotError, RedisClusterException, RedisError

from .._backend import (
    SyncBackground,
    SyncEvent,
    SyncMutex,
    SyncStateLock,
    SyncWakeup,
    sync_checkpoint,
)
from .._core.replies import translate_error
from .._transport import (
    SyncClusterNode,
    SyncPubSub,
    SyncRedis,
    SyncRedisCluster,
    sync_node_client,
    sync_node_of,
)
from ..errors import LockConnectionError

if TYPE_CHECKING:
    from .transport import SyncRequester

logger = logging.getLogger("fencelock.waiter")

# What redis-py raises, instead of a ConnectionError, when the pub/sub connection is re-made or
# closed by the listener while a watcher uses it: redis.asyncio "read() called while another
# coroutine is already waiting for incoming data" (RuntimeError); in threads, a socket closed
# under a read or a write (ValueError "I/O operation on closed file", OSError EBADF); and a
# connection redis-py disconnected between its calls (AttributeError "'NoneType' object has no
# attribute 'readline'", its reader gone: seen once in a chaos run, redlock5/majority-loss).
_REMADE = (RuntimeError, ValueError, OSError, AttributeError)

# How long the listener blocks in one read or pause: how soon it notices, with nothing to read,
# that its client was dropped (close() wakes it instead: see _interrupt).
_READ_TIMEOUT = 0.5
# (Sharded) a refusal of an SSUBSCRIBE that means "not subscribed here": the slot is elsewhere
# (MOVED), or redis-py's re-subscription of every channel at once was refused (CROSSSLOT)
_NOT_HERE = (AskError, ClusterCrossSlotError)
# The replies that are messages published on a channel, as redis-py's parser reads them (bytes:
# fencelock's pub/sub connections never decode)
_MESSAGES = (b"message", b"smessage")


def _drop(pubsub: SyncPubSub | None, channels: list[str] | None) -> None:
    """Forget ``channels`` (None: all) in redis-py's list of shard channels, which it
    re-subscribes in one SSUBSCRIBE when it re-makes the connection (refused across slots)."""
    if pubsub is None:
        return
    if channels is None:
        pubsub.shard_channels.clear()
        pubsub.pending_unsubscribe_shard_channels.clear()
    for key in (k for c in channels or () for k in (c, c.encode())):
        pubsub.shard_channels.pop(key, None)
        pubsub.pending_unsubscribe_shard_channels.discard(key)


def _subscribing(what: str) -> str:
    return f"{what}, subscribing to its wake-ups"


@dataclass(eq=False, slots=True)
class Watch:
    """One waiter's subscription: set by every message on its channel (``event``: waited on
    by the one caller in the block that watches)."""

    event: SyncWakeup = field(default_factory=SyncWakeup)
    grant: str | None = None  # the last grant a release announced on the channel
    # the data of the message that set ``event`` since ``rearm`` (None: it was set otherwise,
    # by a re-subscription or a moved slot, or is not set)
    message: bytes | None = None
    # (Cluster) its channel's slot left the node it was subscribed on, or that node's
    # connection broke: subscribed nowhere until ``AsyncClusterWaiters.follow``
    moved: bool = False

    def rearm(self) -> None:
        """Clear ``event`` and its message, before a look: a message after it sets them."""
        self.event.clear()
        self.message = None


class Waiter:
    """The wake-up subscriptions of one client on one server (``sharded``: a Cluster node, where
    a release publishes with SPUBLISH)."""

    def __init__(self, redis: SyncRedis, confirm_timeout: float, sharded: bool = False) -> None:
        self.redis = redis
        self._confirm_timeout = confirm_timeout
        self._sharded = sharded
        # _guard protects the maps below (shared with the listener); _mutex orders the decision
        # to SUBSCRIBE/UNSUBSCRIBE a channel with sending it, so an UNSUBSCRIBE decided before a
        # new watcher arrived can never reach the server after that watcher's SUBSCRIBE.
        self._guard = SyncStateLock()
        self._mutex = SyncMutex()
        self._pubsub: SyncPubSub | None = None
        self._pid = os.getpid()
        self._listener = SyncBackground("fencelock-waiter")
        self._closing = False
        self._abandoned = False  # the client was dropped unclosed: the listener cleans up
        # set when the listener has something to do besides its read: a watcher subscribed (it
        # waits for one while nothing is subscribed), or close()
        self._wake = SyncEvent()
        self._nonces = itertools.count()
        self._watchers: dict[str, set[Watch]] = {}  # channel -> its watchers
        self._unwatched: set[str] = set()  # channels left by their last watcher, to UNSUBSCRIBE
        self._pings: dict[str, SyncEvent] = {}  # PING nonce -> set when its reply arrives
        # PING nonce -> the error reply that came instead of the confirmation (e.g. NOPERM)
        self._refusals: dict[str, RedisError] = {}
        # The connection broke: until a PING through the re-made one is answered, subscriptions
        # may be missing and messages lost (see _listen).
        self._broken = False
        self._resubscribed = SyncEvent()
        self._resync_nonce = ""  # the PING of the last re-subscription (see _resubscribe)
        self._resync_covers: list[str] = []  # the watchers' PINGs it answers for
        self.resyncs = 0  # breaks made up for (for the tests)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            # In a forked child the parent's pub/sub socket is shared with the parent: never
            # read from it (that would steal its messages) nor close it. Locks may have been
            # held by parent threads that do not exist here: start afresh.
            self._pid = os.getpid()
            self._pubsub = None
            self._listener = SyncBackground("fencelock-waiter")
            self._guard = SyncStateLock()
            self._mutex = SyncMutex()
            self._wake = SyncEvent()
            self._watchers.clear()
            self._unwatched.clear()
            self._pings.clear()
            self._refusals.clear()

    def _connection(self) -> SyncPubSub:
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
        return self._pubsub

    @contextmanager
    def watch(
        self, channel: str, what: str, watch: Watch | None = None, timeout: float | None = None
    ) -> Iterator[Watch]:
        """Subscribe to ``channel`` (active on the server before this returns) and yield a
        watch (``watch``, or a new one) that every message on it sets, until the block ends.
        The confirmation is awaited for at most ``timeout`` seconds (what is left of the
        caller's bound), and never longer than one request timeout. ``what``: the object that
        waits, for errors (the channel is a key: never shown)."""
        watch = Watch() if watch is None else watch
        self.subscribe(channel, what, watch, timeout)
        try:
            yield watch
        finally:
            self.unwatch(channel, watch)

    def subscribe(
        self, channel: str, what: str, watch: Watch, timeout: float | None = None
    ) -> bool:
        """Subscribe ``watch`` to ``channel``, active on the server when this returns True (see
        ``watch``); ``unwatch`` ends it. False: the node does not serve the channel's slot
        (sharded: it answered MOVED), and ``watch`` is not subscribed here. Raises
        ``LockError`` when the server cannot be reached or refuses (the watch not kept)."""
        ready = SyncEvent()
        nonce = f"fencelock-{os.getpid()}-{next(self._nonces)}"
        self._reset_after_fork()
        try:
            with self._mutex:
                with self._guard:
                    pubsub = self._connection()
                    self._watchers.setdefault(channel, set()).add(watch)
                    self._pings[nonce] = ready
                try:
                    if self._sharded:
                        pubsub.ssubscribe(channel)
                    else:
                        pubsub.subscribe(channel)
                    pubsub.ping(nonce)
                    sync_checkpoint()
                except redis.exceptions.RedisError as exc:
                    raise translate_error(exc, _subscribing(what)) from exc
                except _REMADE as exc:
                    raise LockConnectionError(f"{_subscribing(what)}: {exc}") from exc
                # Subscribe first, then start the listener: redis-py refuses to read a pub/sub
                # connection that has never subscribed.
                if not self._listener.running():
                    self._closing = False
                    self._listener.start(self._listen)
                self._wake.set()  # (a listener waiting for a subscription reads from now)
            limit = (
                self._confirm_timeout if timeout is None else min(timeout, self._confirm_timeout)
            )
            if not ready.wait(limit):
                raise LockConnectionError(f"{_subscribing(what)}: no confirmation in time")
            with self._guard:
                refusal = self._refusals.pop(nonce, None)
            if self._sharded and isinstance(refusal, _NOT_HERE):
                self._forget(channel, watch)
                return False
            if refusal is not None:
                raise translate_error(refusal, _subscribing(what)) from refusal
            return True
        except BaseException:
            self.unwatch(channel, watch)
            raise
        finally:
            with self._guard:
                self._pings.pop(nonce, None)
                self._refusals.pop(nonce, None)

    def unwatch(self, channel: str, watch: Watch) -> None:
        """End ``watch``'s subscription to ``channel`` (nothing if it has none here)."""
        with self._guard:
            watchers = self._watchers.get(channel)
            if watchers is None or watch not in watchers:
                return
            watchers.discard(watch)
            if watchers:
                return
            del self._watchers[channel]
            # The listener sends the UNSUBSCRIBE, before its next read: off the path of the
            # acquire that ends here (a round trip's worth of a hand-off). Meanwhile a message
            # on the channel goes to nobody: a waiter's own channel gets none once its queue
            # entry is gone, and a lock's channel is re-checked for new watchers first.
            self._unwatched.add(channel)

    def _forget(self, channel: str, *watches: Watch) -> None:
        """(Sharded) ``watches`` of ``channel`` are not subscribed here: its slot is elsewhere.
        Without watchers left, the channel is forgotten (``_drop``: in redis-py's list too, so
        that a re-made connection does not SSUBSCRIBE it here again), and it is never
        SUNSUBSCRIBEd here: this node would answer MOVED, an error reply that the listener
        cannot tell from a refusal of someone's SSUBSCRIBE."""
        with self._guard:
            watchers = self._watchers.get(channel, set())
            watchers.difference_update(watches)
            if watchers:
                return
            self._watchers.pop(channel, None)
            self._unwatched.discard(channel)
            _drop(self._pubsub, [channel])

    def _move_out(self, channel: str) -> None:
        """(Sharded) ``channel``'s slot left this node: its watches are woken, ``moved``, to
        subscribe where it is now and re-check."""
        with self._guard:
            watches = list(self._watchers.get(channel, ()))
        self._forget(channel, *watches)
        for watch in watches:
            watch.moved = True
            watch.event.set()

    def _unsubscribe_unwatched(self, pubsub: SyncPubSub) -> None:
        with self._mutex:  # a new watcher's SUBSCRIBE is sent before or after, not amid
            with self._guard:
                channels = [c for c in self._unwatched if c not in self._watchers]
                self._unwatched.clear()
            if channels and self._pid == os.getpid():
                # A failure means the connection is gone, and the subscriptions with it.
                with contextlib.suppress(redis.exceptions.RedisError, *_REMADE):
                    if self._sharded:
                        for channel in channels:  # (one per command: one slot per SUNSUBSCRIBE)
                            pubsub.sunsubscribe(channel)
                    else:
                        pubsub.unsubscribe(*channels)

    def _deliver(self, channel: bytes, data: bytes) -> None:
        """A message on ``channel`` (a wake-up): every watch of it is set, with the grant that
        ``data`` carries (``g...``: a release granted the lock to the waiter), if any."""
        grant = data.decode(errors="replace") if data[:1] == b"g" else None
        with self._guard:
            for watch in self._watchers.get(channel.decode(errors="replace"), ()):
                if not watch.event.is_set():
                    watch.message = data
                if grant is not None:
                    watch.grant = grant
                watch.event.set()

    def _dispatch(self, message: dict[str, object]) -> None:
        """Any other reply, as redis-py's ``handle_message`` made it: a PING's, or a
        subscription's."""
        kind, channel, data = message["type"], message["channel"], message["data"]
        if kind == "pong" and isinstance(data, bytes):
            with self._guard:
                ready = self._pings.pop(data.decode(errors="replace"), None)
            if ready is not None:
                ready.set()
        elif kind == "sunsubscribe" and isinstance(channel, bytes):
            # By the server (the slot moved), or the reply to the listener's SUNSUBSCRIBE sent
            # just before a new watcher's SSUBSCRIBE (following it costs one SSUBSCRIBE more).
            name = channel.decode(errors="replace")
            with self._guard:
                moved = name in self._watchers or name in self._unwatched
            if moved:
                self._move_out(name)

    def _listen(self) -> None:
        pubsub = self._pubsub
        assert pubsub is not None
        while not self._closing:
            if self._unwatched:
                self._unsubscribe_unwatched(pubsub)
            if self._broken:
                if self._sharded:
                    self._move_all_out()
                self._resubscribe(pubsub)
            if not pubsub.subscribed:  # nothing to read until a watcher subscribes, or close()
                self._pause(pubsub)
                continue
            try:
                reply = pubsub.parse_response(block=False, timeout=_READ_TIMEOUT)
                if reply is None:
                    continue
                if isinstance(reply, list) and reply[0] in _MESSAGES:
                    # (redis-py's handle_message would only make a dict of it)
                    self._deliver(reply[1], reply[2])
                    continue
                # redis-py's bookkeeping: the channels it re-subscribes on a re-made connection
                message = pubsub.handle_message(reply)
            except redis.exceptions.RedisError as exc:
                if isinstance(
                    exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError
                ):
                    self._broken = True
                    continue
                # An error reply (NOPERM for a SUBSCRIBE, say): the listener lives on, and the
                # waiters confirming their subscriptions now hear of it instead of timing out.
                with self._guard:
                    pending, self._pings = self._pings, {}
                    for nonce in pending:
                        self._refusals[nonce] = exc
                for ready in pending.values():
                    ready.set()
                # (sharded: redis-py re-subscribed every channel in one SSUBSCRIBE on a re-made
                # connection, refused when they span slots: as if broken, each watch follows)
                if self._sharded and isinstance(exc, ClusterCrossSlotError):
                    self._broken = True
                continue
            except Exception:
                # redis-py's PubSub can trip over itself while its connection is being re-made
                # (a restart, a failover). The listener must not die of it: every wait would
                # then last until its holder's lease ends.
                logger.warning("fencelock: pub/sub listener error, reading on", exc_info=True)
                self._broken = True
                continue
            if message is not None:
                self._dispatch(message)
                if self._resubscribed.is_set():
                    self._wake_all()
        if self._abandoned:  # nobody will call close(): the connection must not outlive us
            with contextlib.suppress(redis.exceptions.RedisError):
                pubsub.close()

    def _resubscribe(self, pubsub: SyncPubSub) -> None:
        """After the connection broke, messages sent meanwhile are lost. A PING re-makes it:
        redis-py re-subscribes every channel on connect, before the PING, so once its reply is
        read (``_dispatch``) every subscription is active again, and then every waiter re-tries
        once: a release whose message was lost is found. Waiters are not woken earlier, when a
        release could still slip between their re-try and the re-subscription; while the server
        cannot be reached they wait on (until their holder's lease ends, or their deadline).
        The reply also confirms the subscriptions of the watchers whose own PING was sent
        before it and is not answered yet: lost with the old connection, it never will be."""
        nonce = f"fencelock-{os.getpid()}-{next(self._nonces)}"
        with self._guard:
            # a PING of an earlier attempt whose reply was lost with its connection
            self._pings.pop(self._resync_nonce, None)
            self._resync_nonce = nonce
            self._pings[nonce] = self._resubscribed
        try:
            with self._mutex:  # not amid a watcher's SUBSCRIBE and its PING
                with self._guard:
                    self._resync_covers = [n for n in self._pings if n != nonce]
                pubsub.ping(nonce)
            self._broken = False
        except (redis.exceptions.RedisError, *_REMADE):
            with self._guard:
                self._pings.pop(nonce, None)
            self._pause()  # still unreachable: again after a pause

    def _move_all_out(self) -> None:
        """(Sharded) The connection broke: its node may be gone for good (a failover), so every
        watch here follows its slot (``_move_out``) rather than wait for the node to return."""
        with self._mutex:  # not amid a watcher's SSUBSCRIBE and its PING
            with self._guard:
                channels = [*self._watchers, *self._unwatched]
            for channel in channels:
                self._move_out(channel)
            _drop(self._pubsub, None)

    def _wake_all(self) -> None:
        """Wake every waiter to re-try at once, and confirm the subscriptions the
        re-subscription answers for (they are active again)."""
        self._resubscribed.clear()
        with self._guard:
            self.resyncs += 1
            confirmed = [self._pings.pop(nonce, None) for nonce in self._resync_covers]
            self._resync_covers = []
            for watches in self._watchers.values():
                for watch in watches:
                    watch.event.set()
        for ready in confirmed:
            if ready is not None:
                ready.set()

    def _pause(self, pubsub: SyncPubSub | None = None) -> None:
        """Wait a read's time, or less: until close() (``_wake``), or, given ``pubsub``, until a
        watcher subscribes on it (the wait for something to read)."""
        self._wake.clear()  # (then looked at again: a wake-up from now on ends the wait)
        if self._closing or (pubsub is not None and pubsub.subscribed):
            return
        self._wake.wait(_READ_TIMEOUT)

    def abandon(self) -> None:
        """The client was dropped without close(): the listener ends after its current read
        and closes the connection. (Called by the garbage collector: it only sets flags.)"""
        self._abandoned = self._closing = True

    def _interrupt(self) -> None:
        """Wake the listener for close(), so that close() does not wait out its read or pause
        (a thread cannot be cancelled): a PING's reply ends a read, ``_wake`` a pause."""
        self._wake.set()
        pubsub = self._pubsub
        if pubsub is None or not self._listener.running() or self._pid != os.getpid():
            return
        with contextlib.suppress(redis.exceptions.RedisError, *_REMADE):
            with self._mutex:  # (not amid a watcher's SUBSCRIBE and its PING)
                if pubsub.subscribed:  # (else the listener does not read: it pauses)
                    pubsub.ping()

    def close(self) -> None:
        self._closing = True
        self._interrupt()
        self._listener.stop(2 * _READ_TIMEOUT)
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None and self._pid == os.getpid():
            with contextlib.suppress(redis.exceptions.RedisError):
                pubsub.close()


class SyncClusterWaiters:
    """The wake-up subscriptions of one Cluster client: each channel watched on the node that
    serves its slot now (sharded pub/sub is delivered there only), one ``AsyncWaiter`` per node
    (``waiters``, by node name). A watch whose slot moved (``Watch.moved``) subscribes again
    where the cluster client finds the slot now (``follow``)."""

    def __init__(
        self,
        cluster: SyncRedisCluster,
        requester: SyncRequester,
        request_timeout: float,
        waiters: dict[object, Waiter],
    ) -> None:
        self.cluster = cluster
        self.requester = requester
        self.request_timeout = request_timeout
        self.waiters = waiters
        self._guard = SyncStateLock()
        # watch -> its channel, what waits (for errors), and the waiter it is subscribed on (None:
        # nowhere, moved)
        self._at: dict[Watch, tuple[str, str, Waiter | None]] = {}

    @contextmanager
    def watch(self, channel: str, what: str, timeout: float | None) -> Iterator[Watch]:
        """As ``AsyncWaiter.watch``, on the node of ``channel``'s slot; a node that answers
        MOVED, or cannot be reached, leaves the watch ``moved`` (the waiter re-tries, then
        follows the slot as it waits)."""
        watch = Watch()
        end = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        self._at[watch] = (channel, what, None)
        try:
            if not self._subscribe(watch, end - time.monotonic()):
                self.follow(watch, end - time.monotonic())
            yield watch
        finally:
            _, _, waiter = self._at.pop(watch)
            if waiter is not None:
                waiter.unwatch(channel, watch)

    def follow(self, watch: Watch, timeout: float) -> bool:
        """Subscribe a ``moved`` watch where its channel's slot is now, within ``timeout``
        seconds: whether it is (else it stays ``moved``). The cluster client learns where the
        slot is from a read of the channel's slot (MOVED, or a failed node: it looks again)."""
        channel, _, _ = self._at[watch]
        end = time.monotonic() + timeout
        with contextlib.suppress(RedisError, RedisClusterException):  # (then: where it was)
            self.requester.request(self.cluster, [("EXISTS", channel)], timeout, channel)
        return self._subscribe(watch, end - time.monotonic())

    def _subscribe(self, watch: Watch, timeout: float) -> bool:
        """Subscribe ``watch`` on the node the cluster client names for its channel, if that
        node is the slot's master once the subscription is active: whether it is (else
        ``moved``: the node answered MOVED, could not be reached, or was a replica)."""
        channel, what, _ = self._at[watch]
        end = time.monotonic() + timeout
        node = sync_node_of(self.cluster, channel)
        watch.moved = False
        waiter = None
        if node is not None and timeout > 0:
            waiter = self._waiter(node)
            subscribed = False
            with contextlib.suppress(LockConnectionError):
                subscribed = waiter.subscribe(channel, what, watch, timeout)
            if subscribed and not self._serves(node, channel, end):
                # A replica (its master failed over just before) takes an SSUBSCRIBE and gets
                # the master's messages, but the master does not count it as listening: the
                # grant a release made to this waiter would be taken back and made to the next
                # one, while this waiter took it from the message too. A master tells its
                # subscribers when it loses the slot later (SUNSUBSCRIBE).
                waiter.unwatch(channel, watch)
                subscribed = False
            if not subscribed:
                waiter = None
        self._at[watch] = (channel, what, waiter)
        if waiter is None:
            watch.moved = True
        return waiter is not None

    def _serves(self, node: SyncClusterNode, channel: str, end: float) -> bool:
        """Whether ``node`` serves ``channel``'s slot (a read of it, which a replica answers
        MOVED)."""
        [reply] = self.requester.fan_out([node], ("EXISTS", channel), end - time.monotonic())
        return not isinstance(reply, RedisError)

    def _waiter(self, node: SyncClusterNode) -> Waiter:
        """The waiter on ``node`` (made at its first watch)."""
        with self._guard:
            waiter = self.waiters.get(node.name)
            if waiter is None:
                redis = sync_node_client(node, self.request_timeout)
                waiter = Waiter(redis, confirm_timeout=self.request_timeout, sharded=True)
                self.waiters[node.name] = waiter
        return waiter
