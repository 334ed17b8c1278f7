"""The simulated server (server.py) against the real ones: the same command streams go to a real
server (the suite's redis-server and valkey-server, in RESP2 and in RESP3) and to a SimServer of
the same flavor, and every reply must be the same, exactly: value, type, error class and text.

Time. On the real server each step runs in one transaction, MULTI / TIME / the step / EXEC,
and the simulation's clock is set to that TIME before it runs the step. Valkey reads its clock
once per command, a transaction included, so whatever the step reads from the clock there (each
TIME in a script, expiries, PTTL) is that instant, as in the simulation, whose clock stands still
during a command: fencing tokens (microseconds), queue scores, lease ends and pttls compare
exactly, with nothing normalised. Redis 7.0 reads its clock afresh at every TIME, within a script
too (a token there is some microseconds past the transaction's TIME), so on a server like it
(``Pair.still_clock`` finds out) the steps whose replies depend on the clock are left out and
the rest run. Nothing expires during a stream (leases of ten minutes): expiry is tested to the
millisecond in test_server.py, and its boundary here by a script that sets an expiry at the
instant it runs.

Pub/sub. What a subscriber received is compared by ``Pair.drain``: both servers answer a PING on
its connection, and what the real server sent before its pong must be what the simulation
queued before its own (no waiting for messages that might still come).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.connection import Connection
from redis.exceptions import NoScriptError, ResponseError

from fencelock import _scripts as scripts
from fencelock._core.compute import (
    COMPUTE,
    COMPUTE_FORGET,
    COMPUTE_LOOK,
    COMPUTE_STORE,
    ComputeKeys,
    keys_of_families,
)
from fencelock._keys import (
    DEFAULT_PREFIX,
    LockKeys,
    SemaphoreKeys,
    fence_key_for,
    version_key_for,
)
from fencelock._scripts import Script
from fencelock_tools.servers.embedded import EmbeddedServer

from .protocol import FLAVORS
from .server import Queued, SimServer

MAIN = "main"
LONG = 600_000  # ms: no lease ends before its stream does
HOLDERS = {h: f"{h}-token-abcdefghijklmnopqrstuvwxyz" for h in ("h1", "h2", "h3")}
# the clock read twice in one script, with work between: one instant where the clock stands still
BUSY = (
    "local a = redis.call('TIME') for i = 1, 200000 do end local b = redis.call('TIME') "
    "return {a[1], a[2], b[1], b[2]}"
)


def shape(reply: Any) -> Any:
    """A reply in a form that compares exactly: errors by class and text, doubles apart from
    integers, maps with their order."""
    if isinstance(reply, ResponseError):
        return ("error", type(reply).__name__, str(reply))
    if isinstance(reply, float):
        return ("double", reply)
    if isinstance(reply, list):
        return [shape(item) for item in reply]
    if isinstance(reply, dict):
        return ("map", [(key, shape(value)) for key, value in reply.items()])
    return reply


class Real:
    """A connection to the real server, read at the parser's level (as the simulation answers)."""

    def __init__(self, port: int, protocol: int) -> None:
        self.conn = Connection(port=port, protocol=protocol, socket_timeout=10)
        self.conn.connect()

    def read(self) -> Any:
        try:
            return self.conn.read_response(push_request=True)
        except ResponseError as exc:
            return exc

    def send(self, *commands: Sequence[Any]) -> None:
        self.conn.send_packed_command(self.conn.pack_commands(commands))

    def call(self, *args: Any) -> Any:
        self.send(args)
        return self.read()

    def timed(self, *args: Any) -> tuple[int | None, Any]:
        """``args`` run in a transaction after TIME: that TIME (in us) and the reply (no TIME if
        the command was refused before it could run)."""
        self.send(("MULTI",), ("TIME",), args, ("EXEC",))
        replies = [self.read() for _ in range(4)]
        if isinstance(replies[2], ResponseError):  # (unknown command, arity: EXEC aborts)
            return None, replies[2]
        (seconds, micros), reply = replies[3]
        return int(seconds) * 1_000_000 + int(micros), reply

    def quiet(self) -> None:
        """Unsubscribe everything, and skip whatever was sent before."""
        self.send(("UNSUBSCRIBE",), ("SUNSUBSCRIBE",), ("PING", "quiet"))
        while self.read() not in (b"quiet", [b"pong", b"quiet"]):
            pass


class Pair:
    """A real server and a simulation, fed the same commands, compared at every reply."""

    compared = 0  # replies compared, all pairs together

    def __init__(self, server: EmbeddedServer, kind: str, protocol: int) -> None:
        self.port, self.kind, self.protocol = server.port, kind, protocol
        self.real = Real(server.port, protocol)
        self.subscribers: dict[str, Real] = {}
        self.fresh()
        now, times = self.real.timed("EVAL", BUSY, 0)
        self.still_clock = times[0:2] == times[2:4] and now == int(times[0]) * 10**6 + int(times[1])

    def fresh(self) -> None:
        """Both empty: no keys, no scripts, nobody subscribed."""
        self.real.call("FLUSHALL")
        self.real.call("SCRIPT", "FLUSH")
        for real in self.subscribers.values():
            real.quiet()
        self.sim = SimServer(FLAVORS[self.kind])
        for conn in (MAIN, *self.subscribers):
            self.sim.execute(conn, "HELLO", self.protocol)

    def require_still_clock(self) -> None:
        if not self.still_clock:
            pytest.skip(
                f"{self.kind} reads its clock afresh within a command: replies that depend on "
                "the clock cannot match a simulation whose clock stands still (see docstring)"
            )

    def check(self, what: object, real: Any, sim: Any) -> None:
        Pair.compared += 1
        expected, got = shape(real), shape(sim)
        assert got == expected, f"{what!r}\n  real: {expected!r}\n  sim:  {got!r}"

    def step(self, *args: Any) -> Any:
        """One command on the main connection of both, the simulation's clock set from the
        real server's."""
        now, real = self.real.timed(*args)
        if now is not None:
            self.sim.now_us = now
        sim = self.sim.execute(MAIN, *args)
        self.check(args, real, sim)
        return sim

    def call(self, *args: Any) -> Any:
        """One command outside a transaction (HELLO, SCRIPT may not run in one)."""
        real = self.real.call(*args)
        sim = self.sim.execute(MAIN, *args)
        self.check(args, real, sim)
        return sim

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """As the library runs a script: EVALSHA, and EVAL after NOSCRIPT."""
        reply = self.step(*script.evalsha(keys, args))
        if isinstance(reply, NoScriptError):
            reply = self.step(*script.eval(keys, args))
        return reply

    def subscriber(self, who: str) -> Real:
        if who not in self.subscribers:
            self.subscribers[who] = Real(self.port, self.protocol)
            self.sim.execute(who, "HELLO", self.protocol)
        return self.subscribers[who]

    def send_to(self, who: str, *args: Any) -> None:
        """A command on a subscriber's connection: its replies are compared at ``drain``, with
        what was published to it, in the order the connection reads them."""
        self.subscriber(who).send(args)
        reply = self.sim.execute(who, *args)
        if not isinstance(reply, Queued):  # (a connection no longer subscribed)
            self.sim.connections[who].inbox.append(reply)

    def drain(self, who: str) -> list[Any]:
        """Everything sent to ``who`` since its last drain, compared (PING marks the end)."""
        nonce = f"drain-{Pair.compared}"
        self.send_to(who, "PING", nonce)
        inbox = self.sim.connections[who].inbox
        sim = [inbox.popleft() for _ in range(len(inbox))]
        real = [self.subscribers[who].read()]
        while len(real) < len(sim) and shape(real[-1]) != shape(sim[-1]):
            real.append(self.subscribers[who].read())
        self.check(f"inbox of {who}", real, sim)
        return sim[:-1]

    def close(self) -> None:
        for real in (self.real, *self.subscribers.values()):
            real.conn.disconnect()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def pair(
    request: pytest.FixtureRequest, server: EmbeddedServer, server_kind: str
) -> Iterator[Pair]:
    made = Pair(server, server_kind, request.param)
    yield made
    made.close()


def lock_keys(name: str) -> tuple[LockKeys, list[str], list[str]]:
    """A lock's keys, and the KEYS of acquire.lua and of release.lua."""
    k = LockKeys.for_name(name)
    return k, [k.lock, k.fence, k.queue], [k.lock, k.queue, k.fence]


def sem_keys(name: str, kind: str = "sem") -> tuple[SemaphoreKeys, list[str], list[str]]:
    """A semaphore's keys, and the KEYS of semaphore_acquire.lua and of the others that serve."""
    k = SemaphoreKeys.for_semaphore(name, kind=kind)
    return (
        k,
        [k.lock, k.fence, k.queue, k.state, k.alive],
        [k.lock, k.queue, k.fence, k.state, k.alive],
    )


# -- scripted scenarios (the clock must stand still) ---------------------------------------------


def test_a_lock_granted_queued_released_and_granted_to_a_waiter(pair: Pair) -> None:
    pair.require_still_clock()
    k, acquire, release = lock_keys("job")
    h1, h2, h3 = HOLDERS.values()
    first = pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    assert first[0] == 1
    assert pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""]) == first  # re-sent
    pair.send_to("w2", "SUBSCRIBE", f"{k.channel}:w2")
    assert pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, f"w2 {LONG} 1 {h2}"])[0] == 0
    assert pair.script(scripts.ACQUIRE, acquire, [h3, LONG, 1, "w3"])[0] == 0
    pair.script(scripts.INSPECT, acquire, [10])
    assert pair.script(scripts.RELEASE, release, [h2, k.channel, "PUBLISH", ""]) == 0
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", ""]) == 4
    [_, grant] = pair.drain("w2")
    assert grant[2].startswith(b"g")
    # the waiter re-confirms its grant; a waiter of the channel ('*': wake="all") queues after
    # w3; the release: w3 is gone (nobody hears it), so every waiter of the channel is woken
    assert pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, ""])[0] == 1
    pair.send_to("all", "SUBSCRIBE", k.channel)
    busy = pair.script(scripts.ACQUIRE, acquire, [h3, LONG, 1, "*"])
    assert busy[0] == 0 and busy[2] in ("", b"")
    pair.script(scripts.INSPECT, acquire, [10])
    assert pair.script(scripts.RELEASE, release, [h2, k.channel, "PUBLISH", ""]) == 3
    pair.drain("all")
    # nobody queued: nothing is published (unless the kind announces its releases)
    assert pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])[0] == 1
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", ""]) == 1
    assert pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])[0] == 1
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", "", "1"]) == 3
    pair.drain("all")
    for command in ("PTTL", "TYPE", "GET"):
        pair.step(command, k.lock)
    pair.step("ZRANGE", k.queue, 0, -1, "WITHSCORES")
    pair.step("GET", k.fence)
    pair.step("PTTL", k.fence)


def test_a_waiter_leaving_passes_its_wake_up_on(pair: Pair) -> None:
    pair.require_still_clock()
    k, acquire, release = lock_keys("job")
    h1, h2, h3 = HOLDERS.values()
    pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, "w2"])
    pair.script(scripts.ACQUIRE, acquire, [h3, LONG, 1, f"w3 {LONG} 1 {h3}"])
    for who in ("w2", "w3"):
        pair.send_to(who, "SSUBSCRIBE", f"{k.channel}:{who}")
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "SPUBLISH", ""]) == 3
    # w2 was woken (its entry popped) but gives up: the lock is free, w3 is granted it
    assert pair.script(scripts.RELEASE, release, [h2, k.channel, "SPUBLISH", "w2"]) == 0
    assert pair.drain("w2")[1][2] == b"1"
    assert pair.drain("w3")[1][2].startswith(b"g")
    pair.script(scripts.INSPECT, acquire, [10])


def test_a_barging_release_wakes_and_a_waiter_in_order_keeps_its_place(pair: Pair) -> None:
    pair.require_still_clock()
    k, acquire, release = lock_keys("job")
    h1, h2, h3 = HOLDERS.values()
    pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    for who in ("w2", "w3"):
        pair.send_to(who, "SUBSCRIBE", f"{k.channel}:{who}")
    pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, "w2"])
    pair.script(scripts.ACQUIRE, acquire, [h3, LONG, 1, "w3"])
    # woken, not granted: w2 stays first in line, and a newcomer takes the name
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", "", "", "1"]) == 3
    assert pair.drain("w2")[1][2] == b"1"
    assert pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])[0] == 1
    pair.step("ZRANGE", k.queue, 0, -1, "WITHSCORES")
    # w2 queues in order now: in its place, ahead of w3, and the next release grants it
    in_order = f"w2 {LONG} 1 {h2}"
    busy = pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, in_order])
    assert busy[0] == 0 and busy[2] not in ("", b"")
    pair.step("ZRANGE", k.queue, 0, -1, "WITHSCORES")
    assert pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", "", "", "1"]) == 4
    assert pair.drain("w2")[0][2].startswith(b"g")
    # w3 gives up while w2 holds: its entry goes, nobody is woken; then w2 releases
    assert pair.script(scripts.RELEASE, release, [h3, k.channel, "PUBLISH", "w3", "", "1"]) == 0
    assert pair.script(scripts.RELEASE, release, [h2, k.channel, "PUBLISH", "", "", "1"]) == 1
    pair.step("ZRANGE", k.queue, 0, -1, "WITHSCORES")
    pair.step("GET", k.lock)


def test_reentrant_enter_leave_and_each_kind_busy_for_the_other(pair: Pair) -> None:
    pair.require_still_clock()
    k, acquire, release = lock_keys("re")
    h1, h2, _ = HOLDERS.values()
    entered = pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 0, 1])
    assert entered[0] == 1
    assert pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 1, 1]) == entered
    assert pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 1, 1]) == entered
    assert pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 5, 1])[0] == -1
    assert pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h2, LONG, 0, 1])[0] == 0
    assert pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, "w2"])[0] == 0  # a hash: busy
    pair.script(scripts.INSPECT, acquire, [10])
    pair.step("HGETALL", k.lock)
    assert pair.script(scripts.REENTRANT_RELEASE, release, [h2, k.channel, "PUBLISH", 1]) == 0
    assert pair.script(scripts.REENTRANT_RELEASE, release, [h1, k.channel, "PUBLISH", 2]) == 2
    # the same release sent again (its reply was late): the hold it left is not left twice
    assert pair.script(scripts.REENTRANT_RELEASE, release, [h1, k.channel, "PUBLISH", 2]) == 2
    assert pair.step("HGET", k.lock, h1) == b"1"
    pair.send_to("w2", "SUBSCRIBE", f"{k.channel}:w2")
    assert pair.script(scripts.REENTRANT_RELEASE, release, [h1, k.channel, "PUBLISH", 1]) == 3
    pair.drain("w2")
    pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, "w2"])
    assert pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 0, 1])[0] == 0
    assert pair.script(scripts.REENTRANT_RELEASE, release, [h1, k.channel, "PUBLISH", 1]) == 0


def test_hand_off_fence_raise_and_force_release(pair: Pair) -> None:
    pair.require_still_clock()
    k, acquire, release = lock_keys("job")
    h1, h2, _ = HOLDERS.values()
    pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    top = int(pair.script(scripts.HANDOFF, acquire[:2], [h1, LONG, 5])[1])
    assert pair.script(scripts.HANDOFF, acquire[:2], [h2, LONG, 5]) == [0, 0]
    assert pair.script(scripts.FENCE_RAISE, acquire[:2], [h1, top + 1000]) == 1
    assert pair.script(scripts.FENCE_RAISE, acquire[:2], [h1, top]) == 1  # never lowered
    assert pair.script(scripts.FENCE_RAISE, acquire[:2], [h2, top + 5000]) == 0
    pair.step("GET", k.fence)
    pair.step("PTTL", k.fence)
    assert pair.script(scripts.FORCE_RELEASE, release, ["1", "", k.channel, "PUBLISH"])[0] == -1
    assert pair.script(scripts.FORCE_RELEASE, release, ["", h2, k.channel, "PUBLISH"])[0] == -1
    done = pair.script(scripts.FORCE_RELEASE, release, [str(top + 1000), h1, k.channel, "PUBLISH"])
    assert done[0] == 1
    assert pair.script(scripts.FORCE_RELEASE, release, ["", "", k.channel, "PUBLISH"])[0] == 0
    # the next grant's token is past every one handed out
    pair.script(scripts.ACQUIRE, acquire, [h2, LONG, 1, ""])


def test_renew_a_batch_with_every_outcome(pair: Pair) -> None:
    pair.require_still_clock()
    h1, h2, _ = HOLDERS.values()
    simple, acquire, _ = lock_keys("simple")
    taken, taken_acquire, _ = lock_keys("taken")
    reentrant, reentrant_acquire, _ = lock_keys("reentrant")
    sem, sem_acquire, _ = sem_keys("pool")
    gone, _, _ = lock_keys("gone")
    pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    pair.script(scripts.ACQUIRE, taken_acquire, [h2, LONG, 1, ""])
    pair.script(scripts.REENTRANT_ACQUIRE, reentrant_acquire[:2], [h1, LONG, 0, 1])
    pair.script(
        scripts.SEMAPHORE_ACQUIRE, sem_acquire, [h1, LONG, 1, "", 1, 2, sem.channel, "PUBLISH"]
    )
    keys, args = [], []
    for lock, holder, ttl in [
        (simple, h1, LONG * 2),
        (taken, h1, LONG),
        (reentrant, h1, 1000),  # shorter: the lease is reset, the counter kept longer
        (sem, h1, LONG * 3),
        (sem, h2, LONG),
        (gone, h1, LONG),
    ]:
        keys += [lock.lock, lock.fence]
        args += [holder, ttl]
    assert pair.script(scripts.RENEW, keys, args) == [1, -1, 1, 1, 0, 0]
    for lock in (simple, reentrant, sem):
        pair.step("PTTL", lock.lock)
        pair.step("PTTL", lock.fence)
    pair.step("ZRANGE", sem.lock, 0, -1, "WITHSCORES")


def test_a_semaphore_queue_limit_state_and_downgrade(pair: Pair) -> None:
    pair.require_still_clock()
    h1, h2, h3 = HOLDERS.values()
    k, acquire, serve = sem_keys("pool", kind="rw")

    def take(holder: str, n: int, waiter: str = "") -> Any:
        args = [holder, LONG, 1, waiter, n, 2, k.channel, "PUBLISH"]
        return pair.script(scripts.SEMAPHORE_ACQUIRE, acquire, args)

    assert take(h1, 2)[0] == 1  # a writer: every permit
    assert take(h1, 2)[0] == 1  # re-sent: its own token again
    assert isinstance(take(h2, 3), ResponseError)  # more than the limit
    pair.send_to("w2", "SUBSCRIBE", f"{k.channel}:w2")
    pair.send_to("w3", "SUBSCRIBE", f"{k.channel}:w3")
    assert take(h2, 1, f"w2 {LONG} 1 {h2}")[0] == 0
    assert take(h3, 2, f"w3 {LONG} 1 {h3}")[0] == 0
    pair.script(scripts.SEMAPHORE_STATE, [k.lock, k.state, k.fence, k.queue], [])
    pair.step("HGETALL", k.state)
    # the writer becomes a reader: one permit left, the first queued reader granted
    assert pair.script(scripts.RW_DOWNGRADE, serve, [h1, k.channel, "PUBLISH"]) == 4
    pair.drain("w2")
    assert pair.script(scripts.SEMAPHORE_LIMIT, serve, [4, k.channel, "PUBLISH"]) == 4
    pair.drain("w3")
    assert pair.script(scripts.SEMAPHORE_RELEASE, serve, [h1, k.channel, "PUBLISH", ""]) == 1
    assert pair.script(scripts.SEMAPHORE_RELEASE, serve, [h1, k.channel, "PUBLISH", ""]) == 0
    assert pair.script(scripts.RW_DOWNGRADE, serve, [h1, k.channel, "PUBLISH"]) == 0
    pair.script(scripts.SEMAPHORE_STATE, [k.lock, k.state, k.fence, k.queue], [])
    for key in (k.lock, k.queue, k.alive):
        pair.step("ZRANGE", key, 0, -1, "WITHSCORES")
        pair.step("PTTL", key)


def test_the_boundary_of_an_expiry(pair: Pair) -> None:
    pair.require_still_clock()
    at = (
        "local t = redis.call('TIME') "
        "local ms = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1]) "
        "local set = redis.call('SET', KEYS[1], 'v', 'PXAT', string.format('%.0f', ms)) "
        "redis.call('SET', KEYS[2], 'v') "
        "local expired = redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', ms)) "
        "return {set, redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[1]), expired, "
        "redis.call('DBSIZE')}"
    )
    for offset in (-1, 0, 1):
        pair.step("FLUSHALL")
        pair.step("EVAL", at, 2, "k", "j", offset)
        pair.step("EXISTS", "k", "j")


def test_a_key_lives_through_the_millisecond_of_its_expiry(pair: Pair) -> None:
    """Polled until a step falls in that very millisecond (every step compared, whenever it
    falls: the polling only decides when the boundary has been seen)."""
    pair.require_still_clock()
    for _ in range(200):
        pair.step("SET", "k", "v", "PX", 2)
        expiry, seen = pair.sim.now_ms + 2, set()
        while pair.sim.now_ms <= expiry:
            pair.step("PTTL", "k")
            seen.add(pair.sim.now_ms)
        pair.step("GET", "k")
        if expiry in seen:
            return
    pytest.fail("no step ran in the millisecond of the expiry")


# -- what does not depend on the clock (every server) --------------------------------------------


def test_fenced_and_versioned_values(pair: Pair) -> None:
    fence, version = fence_key_for("res"), version_key_for("res")
    for token, value in [("5", "a"), ("4", "b"), ("5", "c"), ("12", "d"), ("9", "e")]:
        pair.script(scripts.FENCED_SET, ["res", fence], [value, token])
        pair.script(scripts.FENCED_GET, ["res", fence], [token])
    current = pair.step("GET", "res")
    pair.script(scripts.FENCED_SET, ["res", fence], ["f", "12", "0" * 40])  # read something else
    pair.script(
        scripts.FENCED_SET,
        ["res", fence],
        ["f", "13", pair.step("EVAL", "return redis.sha1hex(ARGV[1])", 0, current)],
    )
    pair.script(scripts.FENCED_GET, ["new", fence_key_for("new")], ["99999999999999999999"])
    for expected, value in [("0", "a"), ("0", "b"), ("1", "c"), ("3", "d")]:
        pair.script(scripts.VERSIONED_SET, ["v", version], [value, expected])
        pair.script(scripts.VERSIONED_GET, ["v", version], [])


def test_errors_raised_and_returned_by_the_scripts(pair: Pair) -> None:
    h1 = HOLDERS["h1"]
    k, acquire, release = lock_keys("job")
    pair.step("RPUSH", k.lock, "x")  # a lock key that is no lock: raised (with the line)
    pair.script(scripts.ACQUIRE, acquire, [h1, LONG, 1, ""])
    pair.script(scripts.RELEASE, release, [h1, k.channel, "PUBLISH", ""])
    pair.script(scripts.INSPECT, acquire, [3])
    pair.step("DEL", k.lock)
    pair.step("SET", k.fence, "12x")  # a counter that is no number: an error reply
    pair.script(scripts.FENCE_RAISE, acquire[:2], [h1, 5])
    pair.step("HSET", k.fence, "f", "1")  # a counter of another type: pcall's error, passed on
    pair.script(scripts.HANDOFF, acquire[:2], [h1, LONG, 1])
    pair.script(scripts.REENTRANT_ACQUIRE, acquire[:2], [h1, LONG, 0, 1])
    pair.step("HSET", "res", "f", "1")
    pair.script(scripts.FENCED_SET, ["res", fence_key_for("res")], ["v", "3"])
    pair.step("SET", fence_key_for("r2"), "not a token")
    pair.script(scripts.FENCED_GET, ["r2", fence_key_for("r2")], ["3"])
    pair.step("SADD", version_key_for("v"), "x")
    pair.script(scripts.VERSIONED_GET, ["v", version_key_for("v")], [])


LUA_CONVERSIONS = [
    "return 3.99",
    "return -3.99",
    "return 2^63",
    "return {1, 2.5, 'a', false, true, nil, 5}",
    "return {1, {err='inner'}, {ok='x'}, {}, {{}}}",
    "return {err='plain err'}",
    "return {ok='FINE'}",
    "return redis.status_reply('FINE')",
    "return redis.error_reply('fencing counter x: value is not an integer')",
    "return redis.error_reply('nospace')",
    "return redis.error_reply('nospace').err .. '|' .. redis.error_reply('-A b\\r\\n').err",
    "return redis.error_reply('-MYCODE with code')",
    "error({err='WRONGTYPE lock key x holds a list'})",
    "local x = nil\nreturn x.y",
    "return nosuchglobal",
    "newglobal = 1",
    "return type(io) .. type(os) .. type(debug) .. type(print)",
    "return redis.call('NOSUCHCOMMAND')",
    "return redis.call('GET')",
    "return redis.pcall()",
    "return redis.call('SUBSCRIBE', 'x')",
    "return redis.call('EVAL', 'return 1', 0)",
    "return redis.call('SET', 'x', true)",
    "return redis.pcall('GET', KEYS[1])",
    "return redis.pcall('GET', KEYS[1]).err",
    "return redis.call('GET', KEYS[1])",
    "return redis.pcall('INCRBY', 'x', 'y')",
    "redis.call('SET', 'x', 12345678901234567) return redis.call('GET', 'x')",
    "redis.call('SET', 'x', 1e15 + 7) return redis.call('GET', 'x')",
    "redis.call('SET', 'x', 0.5) return redis.call('GET', 'x')",
    "redis.call('SET', 'x', -0.1) return redis.call('GET', 'x')",
    "redis.call('SET', 'x', 1e20) return redis.call('GET', 'x')",
    "redis.call('ZADD', 'z', 1/3, 'm') return redis.call('ZSCORE', 'z', 'm')",
    "redis.call('ZADD', 'z', 2^53 + 2, 'm') return redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES')",
    "return redis.call('TYPE', KEYS[1])",
    "return type(redis.call('TYPE', KEYS[1]))",
    "return redis.call('SET', 'k', 'v', 'NX')",
    "return {redis.call('SET', 'k', 'v', 'NX')}",
    "return #{1, 2, nil, 4}",
    "return string.format('%.0f', 2^53 + 1)",
    "return tostring(tonumber('1700000000123456'))",
    "return math.floor(-2.5) .. ' ' .. math.floor(2.5)",
    "return redis.sha1hex('abc')",
    "return {KEYS[1], ARGV[1], ARGV[2], #KEYS, #ARGV}",
    "return redis.call('HGETALL', 'h')",
    "return redis.call('ZPOPMIN', 'z')",
    "return (",
]


@pytest.mark.parametrize("source", LUA_CONVERSIONS)
def test_lua_values_and_replies(pair: Pair, source: str) -> None:
    pair.step("RPUSH", "l", "a")
    pair.step("HSET", "h", "b", 1, "a", 2)
    pair.step("EVAL", source, 1, "l", "first", "second")


PLAIN = [
    ("SET", "s", "v", "PX", LONG),
    ("SET", "s", "w", "NX"),
    ("SET", "s", "w", "XX", "GET"),
    ("SET", "s", "x", "KEEPTTL"),
    ("SET", "n", "1", "EX", 600, "XX"),
    ("SET", "s", "v", "PX", 0),
    ("SET", "s", "v", "PX", "1.5"),
    ("SET", "s", "v", "NX", "XX"),
    ("SET", "s", "v", "PX", 10, "EX", 10),
    ("SET", "s"),
    ("GET", "s"),
    ("INCRBY", "n", 5),
    ("INCRBY", "n", "x"),
    ("INCRBY", "s", 1),
    ("INCRBY", "big", 2**63 - 1),
    ("INCRBY", "big", 1),
    ("EXISTS", "s", "s", "none"),
    ("TYPE", "s"),
    ("HSET", "h", "a", 1, "b", 2),
    ("HSET", "h", "a"),
    ("HGET", "h", "a"),
    ("HGET", "s", "a"),
    ("HINCRBY", "h", "a", 5),
    ("HINCRBY", "h", "c", -1),
    ("HSET", "h", "t", "x1"),
    ("HINCRBY", "h", "t", 1),
    ("HINCRBY", "h", "a", "y"),
    ("HEXISTS", "h", "a"),
    ("HEXISTS", "h", "zz"),
    ("HGETALL", "h"),
    ("HDEL", "h", "a", "a", "zz"),
    ("HGETALL", "none"),
    ("ZADD", "z", 3, "c", 1, "a", 2, "b"),
    ("ZADD", "z", "NX", 9, "a", 4, "d"),
    ("ZADD", "z", "XX", "CH", 7, "a", 5, "e"),
    ("ZADD", "z", "NX", "XX", 1, "a"),
    ("ZADD", "z", 1, "a", 2),
    ("ZADD", "z", "x", "a"),
    ("ZADD", "nz", "XX", 1, "a"),
    ("ZADD", "z", "0.1", "f", "-inf", "g", "1e3", "h"),
    ("ZADD", "ties", 1, "b", 1, "a", 1, "c", 0, "z", 2, "A"),
    ("ZRANGE", "ties", 0, -1, "WITHSCORES"),
    ("ZRANGEBYSCORE", "ties", 1, 1),
    ("ZPOPMIN", "ties", 2),
    ("ZSCORE", "z", "a"),
    ("ZSCORE", "z", "f"),
    ("ZSCORE", "z", "none"),
    ("ZCARD", "z"),
    ("ZRANGE", "z", 0, -1),
    ("ZRANGE", "z", 0, -1, "WITHSCORES"),
    ("ZRANGE", "z", -2, -1, "WITHSCORES"),
    ("ZRANGE", "z", 5, 2),
    ("ZRANGE", "z", -100, 1),
    ("ZRANGE", "z", 0, 0, "REV", "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", "(1", "7"),
    ("ZRANGEBYSCORE", "z", "1", "(7", "LIMIT", 1, 2),
    ("ZRANGEBYSCORE", "z", "-inf", "inf", "LIMIT", 1, -1, "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", "x", "1"),
    ("ZRANGEBYSCORE", "z", "0", "1", "LIMIT", 1),
    ("ZPOPMIN", "z"),
    ("ZPOPMIN", "z", 2),
    ("ZPOPMIN", "z", 0),
    ("ZPOPMIN", "z", -1),
    ("ZPOPMIN", "none"),
    ("ZPOPMIN", "none", 3),
    ("ZREM", "z", "c", "c", "none"),
    ("ZSCORE", "h", "a"),
    ("PEXPIRE", "h", LONG),
    ("PEXPIRE", "none", LONG),
    ("PEXPIRE", "h", "x"),
    ("PEXPIREAT", "n", 1),
    ("PEXPIRE", "z", 0),
    ("EXISTS", "n", "z"),
    ("RPUSH", "l", "a", "b"),
    ("SADD", "st", "a", "a", "b"),
    ("GET", "l"),
    ("TYPE", "l"),
    ("TYPE", "st"),
    ("TYPE", "none"),
    ("DEL", "l", "st", "l", "none"),
    ("PUBLISH", "nobody", "m"),
    ("SPUBLISH", "nobody", "m"),
    ("PING",),
    ("PING", "hello"),
    ("PING", "a", "b"),
    ("WAIT", 0, 0),
    ("WAIT", 0, -1),
    ("EVAL", "return 1", 2, "a"),
    ("EVAL", "return 1", -1),
    ("EVAL", "return 1", "x"),
    ("EVALSHA", "0" * 40, 0),
    ("EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", 0),
    ("SCRIPT", "LOAD", "return 1"),
    ("EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", 0),
    ("SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0" * 40),
    ("SCRIPT", "NOSUCH"),
    ("NOSUCHCOMMAND", "a", "b"),
    ("GET",),
    ("DBSIZE",),
    ("FLUSHALL",),
    ("DBSIZE",),
]


def test_plain_commands(pair: Pair) -> None:
    for command in PLAIN:
        pair.step(*command)
    pair.call("SCRIPT", "FLUSH")
    pair.step("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)


def test_hello_and_info(pair: Pair) -> None:
    """What differs by server version or connection (version, id, valkey's modules) aside."""
    sim: Any = pair.sim.execute(MAIN, "HELLO", pair.protocol)
    real: Any = pair.real.call("HELLO", pair.protocol)
    if pair.protocol == 2:
        sim, real = (dict(zip(r[::2], r[1::2], strict=True)) for r in (sim, real))
    assert list(sim) == list(real)
    for field in (b"server", b"proto", b"mode", b"role"):
        pair.check(field, real[field], sim[field])
    shown: Any = pair.sim.execute(MAIN, "INFO", "memory")
    everything: Any = pair.real.call("INFO", "memory")
    for line in shown.split(b"\r\n")[1:-1]:  # ("# Memory", then the fields the library reads)
        assert b"\r\n" + line + b"\r\n" in everything


def scan(run: Callable[..., Any], match: str) -> set[bytes]:
    """Every key a full SCAN finds (the order of the pages is the server's own)."""
    cursor, found = b"0", set()
    while True:
        cursor, page = run("SCAN", cursor, "MATCH", match, "COUNT", 7)
        found.update(page)
        if cursor == b"0":
            return found


@pytest.mark.parametrize(
    "match",
    [
        "fencelock:*:lock",
        "fencelock:{n1?}:*",
        "fencelock:{n[1-2]}*",
        "fencelock:{n[^1]}:*",
        r"fencelock:{\[x\]\*\?}:lock",
        "*",
    ],
)
def test_scan_finds_the_same_keys(pair: Pair, match: str) -> None:
    for i in range(30):
        pair.step("SET", f"fencelock:{{n{i}}}:lock", "v")
        pair.step("HSET", f"other:{i}", "f", "v")
    pair.step("SET", "fencelock:{[x]*?}:lock", "v")
    sim = scan(lambda *args: pair.sim.execute(MAIN, *args), match)
    pair.check(("SCAN", match), scan(pair.real.call, match), sim)
    pair.step("SCAN", "x")


def test_pub_sub(pair: Pair) -> None:
    pair.send_to("a", "SUBSCRIBE", "c1", "c2")
    pair.send_to("a", "SSUBSCRIBE", "s1")
    pair.send_to("b", "SUBSCRIBE", "c1")
    pair.send_to("a", "SUBSCRIBE", "c1")
    for args in [
        ("PUBLISH", "c1", "m1"),
        ("SPUBLISH", "s1", "m2"),
        ("PUBLISH", "s1", "m3"),
        ("SPUBLISH", "c1", "m4"),
    ]:
        pair.step(*args)
    pair.step("EVAL", "return redis.call('PUBLISH', 'c2', 'from a script')", 0)
    pair.send_to("a", "PING")
    pair.send_to("a", "GET", "k")  # refused in RESP2, answered in RESP3
    pair.send_to("a", "UNSUBSCRIBE", "c2", "nope")
    pair.send_to("a", "SUNSUBSCRIBE", "s1")
    pair.send_to("a", "SUBSCRIBE")
    pair.drain("a")
    pair.drain("b")
    pair.send_to("a", "UNSUBSCRIBE", "c1")
    pair.send_to("a", "UNSUBSCRIBE")
    pair.send_to("a", "SUNSUBSCRIBE")
    pair.drain("a")
    pair.step("PUBLISH", "c1", "only b")
    pair.drain("b")


# -- random streams ------------------------------------------------------------------------------

NAMES = ("a", "b")
WAITS = ("", "id", "grant", "grant")
TOKENS = ("last", "before last", "1", "huge")
# steps whose replies depend on the clock (left out where it does not stand still)
UNTIMED = {"fenced_set", "fenced_get", "versioned_get", "versioned_set", "subscribe", "drain"}

holders = st.sampled_from(sorted(HOLDERS))
releasers = st.sampled_from(["current"] * 3 + sorted(HOLDERS))  # current: who was granted last
names = st.sampled_from(NAMES[:1] * 3 + NAMES[1:])  # most ops on one name: they meet there
# (each with a weight: a lock's holder must come back to it often enough to release it)
WEIGHTED_OPS = [
    (
        5,
        st.tuples(
            st.just("acquire"), names, holders, st.sampled_from(WAITS), st.sampled_from([1, 3])
        ),
    ),
    (
        4,
        st.tuples(
            st.just("release"), names, releasers, st.sampled_from(WAITS), st.sampled_from("  1")
        ),
    ),
    (2, st.tuples(st.just("r_acquire"), names, holders, st.integers(0, 2))),
    (2, st.tuples(st.just("r_release"), names, releasers, st.integers(1, 3))),
    (
        2,
        st.tuples(
            st.just("renew"),
            st.lists(st.tuples(names, st.booleans(), holders), min_size=1, max_size=3),
        ),
    ),
    (1, st.tuples(st.just("handoff"), names, releasers, st.sampled_from([1, 4]))),
    (1, st.tuples(st.just("fence_raise"), names, releasers, st.sampled_from(TOKENS))),
    (1, st.tuples(st.just("inspect"), names)),
    (
        1,
        st.tuples(
            st.just("force_release"),
            names,
            st.sampled_from(["", "last", "1"]),
            st.sampled_from(["", "h1"]),
        ),
    ),
    (
        4,
        st.tuples(
            st.just("sem_acquire"),
            names,
            holders,
            st.integers(1, 2),
            st.integers(1, 3),
            st.sampled_from(WAITS),
        ),
    ),
    (3, st.tuples(st.just("sem_release"), names, releasers, st.sampled_from(WAITS))),
    (1, st.tuples(st.just("sem_limit"), names, st.integers(1, 3))),
    (1, st.tuples(st.just("sem_state"), names)),
    (1, st.tuples(st.just("downgrade"), names, releasers)),
    (1, st.tuples(st.just("fenced_set"), names, st.sampled_from(TOKENS), st.booleans())),
    (1, st.tuples(st.just("fenced_get"), names, st.sampled_from(TOKENS))),
    (1, st.tuples(st.just("versioned_get"), names)),
    (1, st.tuples(st.just("versioned_set"), names, st.integers(0, 3))),
    (1, st.tuples(st.just("subscribe"), holders)),
    (1, st.tuples(st.just("unsubscribe"), holders)),
    (2, st.tuples(st.just("drain"), holders)),
    (
        1,
        st.tuples(
            st.just("command"),
            st.sampled_from(["GET", "DEL", "TYPE", "PTTL", "RPUSH", "SET", "HGETALL", "ZRANGE"]),
            names,
            st.sampled_from(["lock", "fence", "queue", "sem", "state"]),
        ),
    ),
]
OPS = st.one_of([op for weight, op in WEIGHTED_OPS for _ in range(weight)])


class Stream:
    """The random streams' interpreter: an op is a method and its arguments, naming locks,
    holders and where a token comes from; tokens come from the replies (the same on both sides,
    or the stream has failed already)."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.tokens: list[bytes] = [b"1"]
        self.granted: dict[tuple[str, str], str] = {}  # (kind, name) -> its last holder

    def run(self, op: tuple[Any, ...]) -> None:
        getattr(self, op[0])(*op[1:])

    def token(self, pick: str) -> bytes:
        last = int(self.tokens[-1])
        picks = {"last": last, "before last": max(1, last - 1), "1": 1, "huge": 10**20 - 1}
        return b"%d" % picks[pick]

    def holder(self, kind: str, name: str, pick: str) -> str:
        return HOLDERS[self.granted.get((kind, name), "h1") if pick == "current" else pick]

    def waiter(self, holder: str, wait: str) -> str:
        return {"": "", "id": f"w{holder}", "grant": f"w{holder} {LONG} 1 {HOLDERS[holder]}"}[wait]

    def listening(self, holder: str, wait: str) -> str:
        """The waiter's entry, once it listens (as the library's waiter subscribes first)."""
        conn = self.pair.sim.connections.get(holder)
        if wait and (conn is None or not conn.subscribed):
            self.subscribe(holder)
        return self.waiter(holder, wait)

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> bool:
        """Run it; whether it granted (a grant's {1, fence}: the token is kept)."""
        reply = self.pair.script(script, keys, args)
        granted = isinstance(reply, list) and reply[:1] == [1] and len(reply) > 1
        if granted and isinstance(reply[1], bytes) and reply[1].isdigit():
            self.tokens.append(reply[1])
            return True
        return False

    def grant(
        self, kind: str, name: str, holder: str, script: Script, keys: list[str], args: list[Any]
    ) -> None:
        if self.script(script, keys, args):
            self.granted[kind, name] = holder

    # -- locks

    def acquire(self, name: str, holder: str, wait: str, block: int) -> None:
        args = [HOLDERS[holder], LONG, block, self.listening(holder, wait)]
        self.grant("lock", name, holder, scripts.ACQUIRE, lock_keys(name)[1], args)

    def release(self, name: str, pick: str, leaving: str, barge: str) -> None:
        k, _, release = lock_keys(name)
        holder = self.holder("lock", name, pick)
        waiter = self.waiter(pick if pick in HOLDERS else "h1", leaving)
        args = [holder, k.channel, "PUBLISH", waiter, "", barge.strip()]
        self.script(scripts.RELEASE, release, args)

    def r_acquire(self, name: str, holder: str, depth: int) -> None:
        args = [HOLDERS[holder], LONG, depth, 1]
        self.grant("lock", name, holder, scripts.REENTRANT_ACQUIRE, lock_keys(name)[1][:2], args)

    def r_release(self, name: str, pick: str, depth: int) -> None:
        k, _, release = lock_keys(name)
        args = [self.holder("lock", name, pick), k.channel, "PUBLISH", depth]
        self.script(scripts.REENTRANT_RELEASE, release, args)

    def renew(self, leases: list[tuple[str, bool, str]]) -> None:
        keys, args = [], []
        for name, semaphore, holder in leases:
            lock = (sem_keys(name) if semaphore else lock_keys(name))[0]
            keys += [lock.lock, lock.fence]
            args += [HOLDERS[holder], LONG]
        self.script(scripts.RENEW, keys, args)

    def handoff(self, name: str, pick: str, block: int) -> None:
        args = [self.holder("lock", name, pick), LONG, block]
        self.script(scripts.HANDOFF, lock_keys(name)[1][:2], args)

    def fence_raise(self, name: str, pick: str, token: str) -> None:
        args = [self.holder("lock", name, pick), self.token(token)]
        self.script(scripts.FENCE_RAISE, lock_keys(name)[1][:2], args)

    def inspect(self, name: str) -> None:
        self.script(scripts.INSPECT, lock_keys(name)[1], [5])

    def force_release(self, name: str, counter: str, holder: str) -> None:
        k, _, release = lock_keys(name)
        named = [self.token(counter) if counter else "", HOLDERS[holder] if holder else ""]
        self.script(scripts.FORCE_RELEASE, release[:3], [*named, k.channel, "PUBLISH"])

    # -- semaphores

    def sem_acquire(self, name: str, holder: str, n: int, limit: int, wait: str) -> None:
        k, acquire, _ = sem_keys(name)
        args = [
            HOLDERS[holder],
            LONG,
            1,
            self.listening(holder, wait),
            n,
            limit,
            k.channel,
            "PUBLISH",
        ]
        self.grant("sem", name, holder, scripts.SEMAPHORE_ACQUIRE, acquire, args)

    def sem_release(self, name: str, pick: str, leaving: str) -> None:
        k, _, serve = sem_keys(name)
        waiter = self.waiter(pick if pick in HOLDERS else "h1", leaving)
        args = [self.holder("sem", name, pick), k.channel, "PUBLISH", waiter]
        self.script(scripts.SEMAPHORE_RELEASE, serve, args)

    def sem_limit(self, name: str, limit: int) -> None:
        k, _, serve = sem_keys(name)
        self.script(scripts.SEMAPHORE_LIMIT, serve, [limit, k.channel, "PUBLISH"])

    def sem_state(self, name: str) -> None:
        k = sem_keys(name)[0]
        self.script(scripts.SEMAPHORE_STATE, [k.lock, k.state, k.fence, k.queue], [])

    def downgrade(self, name: str, pick: str) -> None:
        k, _, serve = sem_keys(name)
        args = [self.holder("sem", name, pick), k.channel, "PUBLISH"]
        self.script(scripts.RW_DOWNGRADE, serve, args)

    # -- values

    def fenced_set(self, name: str, token: str, read_first: bool) -> None:
        read = []
        if read_first:  # (fenced_update: only if the value is still the one read)
            sha = "local v = redis.call('GET', KEYS[1]) return v and redis.sha1hex(v) or ''"
            read.append(self.pair.step("EVAL", sha, 1, name))
        args = ["value", self.token(token), *read]
        self.script(scripts.FENCED_SET, [name, fence_key_for(name)], args)

    def fenced_get(self, name: str, token: str) -> None:
        self.script(scripts.FENCED_GET, [name, fence_key_for(name)], [self.token(token)])

    def versioned_get(self, name: str) -> None:
        self.script(scripts.VERSIONED_GET, [f"v{name}", version_key_for(f"v{name}")], [])

    def versioned_set(self, name: str, version: int) -> None:
        keys = [f"v{name}", version_key_for(f"v{name}")]
        self.script(scripts.VERSIONED_SET, keys, ["value", version])

    # -- connections and plain commands

    def channels(self, holder: str) -> list[str]:
        """Where the waiter of ``holder`` hears of every lock it may wait for."""
        kinds = (lock_keys, sem_keys)
        return [keys(name)[0].channel + f":w{holder}" for name in NAMES for keys in kinds]

    def subscribe(self, holder: str) -> None:
        self.pair.send_to(holder, "SUBSCRIBE", *self.channels(holder))

    def unsubscribe(self, holder: str) -> None:
        """The waiter is gone (it no longer hears a grant, which goes to the next)."""
        if holder in self.pair.subscribers:
            self.pair.send_to(holder, "UNSUBSCRIBE", *self.channels(holder))

    def drain(self, holder: str) -> None:
        if holder in self.pair.subscribers:
            self.pair.drain(holder)

    def command(self, command: str, name: str, role: str) -> None:
        """A plain command on one of the keys (a write of the wrong type among them)."""
        k = sem_keys(name)[0]
        key = {"state": k.state, "sem": k.lock}.get(role) or getattr(lock_keys(name)[0], role)
        extra: dict[str, list[Any]] = {
            "RPUSH": ["x"],
            "SET": ["junk"],
            "ZRANGE": [0, -1, "WITHSCORES"],
        }
        self.pair.step(command, key, *extra.get(command, []))


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=20, max_size=80))
def test_random_streams(pair: Pair, ops: list[tuple[Any, ...]]) -> None:
    pair.fresh()
    stream = Stream(pair)
    for op in ops:
        if pair.still_clock or (op[0] in UNTIMED or (op[0] == "command" and op[1] != "PTTL")):
            stream.run(op)
    for who in list(pair.subscribers):
        pair.drain(who)


def test_compute_once_look_store_and_forget(pair: Pair) -> None:
    """compute_once's scripts (``fencelock._core.compute``): a look, a fingerprint recorded, a
    result stored and a late one refused, a failure told to a waiter, a forget under a build."""
    pair.require_still_clock()
    k = ComputeKeys.for_compute("report", DEFAULT_PREFIX, COMPUTE)
    looked, stored = list(k.looked()), list(k.stored())
    h1, h2, _ = HOLDERS.values()
    pair.script(COMPUTE_LOOK, looked, ["", 1])  # nothing yet
    granted = pair.script(scripts.ACQUIRE, [k.lock, k.fence, k.queue], [h1, LONG, 1, ""])
    token = int(granted[1])
    pair.script(COMPUTE_LOOK, looked, ["sha:1", LONG])  # the builder records its fingerprint
    pair.send_to("w", "SUBSCRIBE", k.channel)
    done = [token, "v", '"done"', LONG, "sha:1", k.channel, "PUBLISH", "1"]
    pair.script(COMPUTE_STORE, stored, done)
    assert pair.drain("w")[-1][2] == f'v{token}:"done"'.encode()  # the message carries it
    late = [token - 1, "v", '"late"', LONG, "", k.channel, "PUBLISH"]
    assert pair.script(COMPUTE_STORE, stored, late)[0] == 0  # an older token: refused
    pair.script(
        COMPUTE_STORE, stored, [token - 1, "e", "KeyError", "'x'", LONG, k.channel, "PUBLISH"]
    )
    pair.script(COMPUTE_LOOK, looked, ["", 1])
    pair.step("HGETALL", k.result)
    # a newer build that raises, heard by a waiter; then a forget while another build runs
    pair.script(
        COMPUTE_STORE, stored, [token + 5, "e", "KeyError", "'x'", LONG, k.channel, "PUBLISH"]
    )
    pair.drain("w")
    pair.script(COMPUTE_LOOK, looked, ["", 1])
    pair.script(scripts.RELEASE, [k.lock, k.queue, k.fence], [h1, k.channel, "PUBLISH", ""])
    pair.script(scripts.ACQUIRE, [k.lock, k.fence, k.queue], [h2, LONG, 1, ""])
    assert pair.script(COMPUTE_FORGET, keys_of_families("report"), []) == 1
    pair.step("GET", k.fence)
    pair.step("PTTL", k.fence)
    pair.script(COMPUTE_LOOK, looked, ["", 1])
    for key in (k.result, k.failure):
        pair.step("EXISTS", key)
