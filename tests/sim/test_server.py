"""The simulated server alone: what the differential test cannot show exactly against a real
server (expiry to the millisecond, clock jumps, delivery held back, faults), and the Lua it
runs."""

from __future__ import annotations

from typing import Any

import pytest

from fencelock import _scripts as scripts
from fencelock._keys import LockKeys

from .protocol import Push, Unsupported
from .server import Queued, SimServer

T0 = 1_700_000_000_000_000  # us
KEYS = LockKeys.for_name("job")


def test_the_lua_is_5_1() -> None:
    sim = SimServer()
    assert sim.execute("c", "EVAL", "return _VERSION", 0) == b"Lua 5.1"


def test_a_key_lives_while_the_clock_is_at_its_expiry_and_is_gone_after() -> None:
    sim = SimServer(now_us=T0)
    assert sim.execute("c", "SET", "k", "v", "PX", 100) == b"OK"
    sim.advance(0.1)  # the clock is at the expiry
    assert sim.execute("c", "PTTL", "k") == 0
    assert sim.execute("c", "GET", "k") == b"v"
    sim.advance(0.000999)  # still within that millisecond
    assert sim.execute("c", "GET", "k") == b"v"
    sim.advance(0.000001)
    assert sim.execute("c", "DBSIZE") == 1  # not deleted until looked at (as Redis counts)
    assert sim.execute("c", "TYPE", "k") == b"none"
    assert sim.execute("c", "DBSIZE") == 0


@pytest.mark.parametrize(
    "look",
    [
        ("GET", "k"),
        ("EXISTS", "k"),
        ("PTTL", "k"),
        ("TYPE", "k"),
        ("SCAN", 0),
        ("EVAL", "return redis.call('GET', KEYS[1])", 1, "k"),
    ],
)
def test_an_expired_key_is_gone_for_every_command(look: tuple[str | int, ...]) -> None:
    sim = SimServer(now_us=T0)
    sim.execute("c", "SET", "k", "v", "PX", 10)
    sim.advance(0.011)
    assert sim.execute("c", *look) in (None, 0, -2, b"none", [b"0", []])
    assert sim.keys == {}


def test_the_sweep_deletes_what_has_expired_and_nothing_else() -> None:
    sim = SimServer(now_us=T0)
    sim.execute("c", "SET", "gone", "v", "PX", 10)
    sim.execute("c", "SET", "kept", "v", "PX", 20)
    sim.execute("c", "SET", "forever", "v")
    sim.advance(0.015)
    assert sim.expire_due() == [b"gone"]
    assert sorted(sim.keys) == [b"forever", b"kept"]


def test_clock_jumps_move_every_expiry_and_time() -> None:
    sim = SimServer(now_us=T0)
    sim.execute("c", "SET", "k", "v", "PX", 1000)
    sim.advance(-5)  # backwards: the lease looks longer
    assert sim.execute("c", "PTTL", "k") == 6000
    assert sim.execute("c", "TIME") == [b"%d" % (T0 // 10**6 - 5), b"0"]
    sim.now_us = T0 + 3_600_000_000  # forwards an hour
    assert sim.execute("c", "GET", "k") is None


def test_the_clock_stands_still_through_a_script() -> None:
    sim = SimServer(now_us=T0 + 123)
    busy = "local a = redis.call('TIME') for i = 1, 1000 do end return {a, redis.call('TIME')}"
    assert sim.execute("c", "EVAL", busy, 0) == [[b"1700000000", b"123"]] * 2


def test_a_token_is_the_clock_in_microseconds_and_counts_on_past_it() -> None:
    sim = SimServer(now_us=T0 + 7)
    acquire = scripts.ACQUIRE.eval([KEYS.lock, KEYS.fence, KEYS.queue], ["h1", 5000, 3, ""])
    assert sim.execute("c", *acquire) == [1, b"%d" % (T0 + 9)]  # a block of 3 ends there
    sim.execute("c", "DEL", KEYS.lock)
    sim.advance(-1)  # the clock is behind the counter: the counter goes on
    assert sim.execute("c", *acquire) == [1, b"%d" % (T0 + 12)]


def test_published_messages_wait_in_the_inbox_of_each_subscriber() -> None:
    sim = SimServer()
    assert sim.execute("a", "SUBSCRIBE", "ch") == Queued(1)
    assert sim.execute("b", "SSUBSCRIBE", "ch") == Queued(1)
    assert sim.execute("p", "PUBLISH", "ch", "m1") == 1
    assert sim.execute("p", "SPUBLISH", "ch", "m2") == 1
    inbox = list(sim.connections["a"].inbox)
    assert inbox == [[b"subscribe", b"ch", 1], [b"message", b"ch", b"m1"]]
    assert sim.connections["b"].inbox.pop() == [b"smessage", b"ch", b"m2"]
    assert all(isinstance(push, Push) for push in inbox)


def test_replies_on_a_subscribed_connection_queue_behind_its_messages() -> None:
    sim = SimServer()
    sim.execute("a", "SUBSCRIBE", "ch")
    sim.execute("p", "PUBLISH", "ch", "m")
    assert sim.execute("a", "PING", "nonce") == Queued(1)
    assert sim.execute("a", "GET", "k") == Queued(1)  # refused in RESP2: the error is queued too
    inbox = sim.connections["a"].inbox
    delivered = [inbox.popleft() for _ in range(3)]
    assert delivered[1:] == [[b"message", b"ch", b"m"], [b"pong", b"nonce"]]
    assert "only (P|S)SUBSCRIBE" in str(inbox.popleft())


def test_a_connection_reset_drops_its_subscriptions_and_undelivered_messages() -> None:
    sim = SimServer()
    sim.execute("a", "SUBSCRIBE", "ch")
    sim.execute("p", "PUBLISH", "ch", "lost")
    sim.reset("a")
    assert sim.execute("p", "PUBLISH", "ch", "m") == 0
    assert sim.execute("a", "PING") == b"PONG"  # a new connection, not subscribed
    assert list(sim.connections["a"].inbox) == []


def test_restart_empty_loses_keys_scripts_and_connections_not_the_clock() -> None:
    sim = SimServer(now_us=T0)
    acquire = scripts.ACQUIRE.eval([KEYS.lock, KEYS.fence, KEYS.queue], ["h1", 5000, 1, ""])
    sim.execute("c", *acquire)
    sim.execute("a", "SUBSCRIBE", "ch")
    sim.restart_empty()
    assert sim.execute("c", "DBSIZE") == 0
    assert type(sim.execute("c", *scripts.ACQUIRE.evalsha([], []))).__name__ == "NoScriptError"
    assert sim.execute("p", "PUBLISH", "ch", "m") == 0
    assert sim.now_us == T0


def test_a_failover_to_a_replica_that_missed_writes() -> None:
    sim = SimServer(now_us=T0)
    sim.execute("c", "SET", "before", "v", "PX", 2000)
    replica = sim.snapshot()
    sim.execute("c", "SET", "after", "v")
    sim.advance(1)
    sim.failover(replica)
    assert sim.execute("c", "EXISTS", "before", "after") == 1
    assert sim.execute("c", "PTTL", "before") == 1000  # its expiry is absolute
    sim.execute("c", "SET", "before", "changed")
    sim.failover(replica)  # a snapshot can be promoted again, unchanged
    assert sim.execute("c", "GET", "before") == b"v"


def test_wait_answers_the_simulated_replicas() -> None:
    sim = SimServer()
    assert sim.execute("c", "WAIT", 1, 100) == 0
    sim.replicas = 2
    assert sim.execute("c", "WAIT", 1, 100) == 2


def test_what_the_simulation_lacks_is_raised_not_guessed() -> None:
    sim = SimServer()
    with pytest.raises(Unsupported):
        sim.execute("c", "ZADD", "z", "GT", 1, "m")
    with pytest.raises(Unsupported):  # from a script too, even under pcall
        sim.execute("c", "EVAL", "return redis.pcall('ZRANGE', 'z', 0, 1, 'BYSCORE')", 0)


def test_scan_returns_each_key_present_throughout_exactly_once() -> None:
    sim = SimServer()
    for i in range(20):
        sim.execute("c", "SET", f"k{i}", "v")
    found: list[bytes] = []
    cursor, round_ = b"0", 0
    while True:
        reply: Any = sim.execute("c", "SCAN", cursor, "MATCH", "k*", "COUNT", 3)
        cursor, page = reply
        found += page
        sim.execute("c", "DEL", f"k{round_}")  # keys come and go meanwhile
        sim.execute("c", "SET", f"new{round_}", "v")
        round_ += 1
        if cursor == b"0":
            break
    present = {b"k%d" % i for i in range(round_, 20)}
    assert present <= set(found) and len(found) == len(set(found))
