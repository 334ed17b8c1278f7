# GENERATED from tests/engine/_async/test_late_grants.py by tools/gen_sync.py: edit that file instead.
"""A grant the server makes after its request went unanswered is given back once the server
answers again (issue 29). Sync twin generated into tests/engine/_sync by tools/gen_sync.py.

The server is stopped (SIGSTOP) with an acquire in its socket: the acquire times out, and when
the server runs again it grants it, to nobody. The client's watchdog gives it back by the
holder token as soon as the server answers (``_core/giveback.py``); the tests wait for that on
the client's statistics, never on the clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import fencelock
from fencelock._sync.client import LockClient
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import sync_until
from tests.engine.test_cancel_deadline import held_keys

REQUEST = 1.0  # the clients' request timeout: how long the stopped server keeps them waiting
TTL = 300.0  # a grant left to nobody would outlast the test by far

PRIMITIVES = ["lock", "semaphore", "read", "write", "multi", "election"]


def taker(client: LockClient, primitive: str) -> Any:
    """An object of ``primitive`` (each excludes the next one of its kind on the same name;
    a reader excludes a writer)."""
    makers = {
        "lock": lambda: client.lock("l", ttl=TTL),
        "semaphore": lambda: client.semaphore("s", 1, ttl=TTL),
        "read": lambda: client.rw_lock("rw", ttl=TTL).read(),
        "write": lambda: client.rw_lock("rw", ttl=TTL).write(),
        "multi": lambda: client.multi_lock(["m1", "m2"], ttl=TTL),
        "election": lambda: client.election("e", ttl=TTL),
    }
    return makers[primitive]()


@pytest.fixture
def clients(fresh_server: EmbeddedServer) -> Iterator[list[LockClient]]:
    made = [LockClient.from_url(fresh_server.url, socket_timeout=REQUEST) for _ in range(2)]
    yield made
    fresh_server.resume()
    for client in made:
        client.close()


def unanswered_acquire(server: EmbeddedServer, taken: Any) -> None:
    """``taken.acquire`` sent to the stopped server, timed out; the server then runs it."""
    assert taken.acquire(timeout=0)  # (its script loaded: the late one will grant)
    taken.release()
    server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            taken.acquire(timeout=0)
    finally:
        server.resume()


@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_a_grant_made_after_its_request_timed_out_is_given_back(
    fresh_server: EmbeddedServer, clients: list[LockClient], primitive: str
) -> None:
    client, other = clients
    unanswered_acquire(fresh_server, taker(client, primitive))
    sync_until(lambda: client.statistics().giving_back == 0)  # the give-back is done
    assert client.statistics().late_grants == 1  # (and found the grant: the server made it)
    assert held_keys(fresh_server) == []
    rival = taker(other, "write" if primitive == "read" else primitive)
    assert rival.acquire(timeout=0)  # at once, not in a ttl
    rival.release()


def test_close_gives_the_give_backs_a_request_timeout_then_forgets_them(
    fresh_server: EmbeddedServer, clients: list[LockClient]
) -> None:
    """What close() abandons lasts its ttl: the give-back waits for a server that answers."""
    client, _ = clients
    lock = client.lock("closing", ttl=TTL)
    assert lock.acquire(timeout=0)  # (connected: the acquire below goes out at once)
    lock.release()
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            lock.acquire(timeout=0)
        assert client.statistics().giving_back == 1
        client.close()  # the server still stopped: back within its bounds
        assert client.statistics().giving_back == 0
    finally:
        fresh_server.resume()
    assert held_keys(fresh_server) == [b"fencelock:{closing}:lock"]
    assert client.statistics().late_grants == 0
