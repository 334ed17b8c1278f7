"""Shim for redis-py's own lock tests (tests/test_lock.py, tests/test_asyncio/test_lock.py of
the installed redis-py), run by tools/peer_suite.py against fencelock.compat.redis_py: their
``Lock`` is ours, their ``r`` fixtures are clients of a server this shim starts
(``FENCELOCK_PEER_SERVER``: "redis" or "valkey").

The tests that fail on purpose are marked xfail (strict) with the difference that explains each
(``DIFFERENCES``): a test that starts to pass, or fails unmarked, fails the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.lock
import redis.lock

from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock.compat import redis_py, redis_py_asyncio
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

# before the test modules import it: ``from redis.lock import Lock`` gets ours
redis.lock.Lock = redis_py.Lock  # type: ignore[misc]
redis.asyncio.lock.Lock = redis_py_asyncio.Lock  # type: ignore[misc]

KEY = "reads or writes redis-py's lock key 'foo' itself (fencelock's keys are its own)"
POLL = "counts the sleeps of redis-py's polling loop (fencelock waits for a wake-up instead)"
TOKEN = "passes acquire(token=...) (fencelock makes its holder tokens itself)"
NO_TIMEOUT = "expects no expiry without timeout (fencelock: a lease renewed while held)"

# test (of either file, without parameters) -> why it fails on purpose; docs/migrating.md
# lists them
DIFFERENCES = {
    "TestLock::test_lock": KEY,
    "TestLock::test_lock_token": TOKEN,
    "TestLock::test_lock_token_thread_local_false": TOKEN,
    "TestLock::test_timeout": KEY,
    "TestLock::test_float_timeout": KEY,
    "TestLock::test_blocking_timeout": POLL,
    "TestLock::test_context_manager": KEY,
    "TestLock::test_context_manager_blocking_timeout": POLL,
    "TestLock::test_context_manager_raises_when_locked_not_acquired": KEY,
    "TestLock::test_releasing_lock_no_longer_owned_raises_error": KEY,
    "TestLock::test_extend_lock": KEY,
    "TestLock::test_extend_lock_replace_ttl": KEY,
    "TestLock::test_extend_lock_float": KEY,
    "TestLock::test_extending_lock_no_longer_owned_raises_error": KEY,
    "TestLock::test_reacquire_lock": KEY,
    "TestLock::test_reacquiring_lock_no_longer_owned_raises_error": KEY,
    "TestLock::test_context_manager_reacquiring_lock_no_longer_owned_raises_error": (KEY),
    "TestLock::test_lock_error_gives_correct_lock_name": KEY,
}


# With FENCELOCK_PEER_MAP_KEYS=1 the tests' own commands on a lock's key ("foo") go to the key of
# fencelock's lock of that name instead: the tests that only read or write the key then check
# fencelock's lease as they check redis-py's (its PTTL the lease; a GET reads its holder token,
# without the fencing token the key holds beside it).
MAP_KEYS = os.environ.get("FENCELOCK_PEER_MAP_KEYS") == "1"
MAPPED_COMMANDS = {"GET", "SET", "TTL", "PTTL", "PEXPIRE"}


def _mapped(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(args) > 1 and str(args[0]).upper() in MAPPED_COMMANDS and isinstance(args[1], str):
        return (args[0], LockKeys.for_name(args[1]).lock, *args[2:])
    return args


def _read(args: tuple[Any, ...], reply: Any) -> Any:
    """A GET's reply as redis-py's key would hold it: the holder token alone."""
    if str(args[0]).upper() != "GET" or not isinstance(reply, bytes | str):
        return reply
    holder = lock_value(reply)[0]
    return holder.encode() if isinstance(reply, bytes) else holder


class MappedRedis(redis.Redis):
    def execute_command(self, *args: Any, **options: Any) -> Any:
        return _read(args, super().execute_command(*_mapped(args), **options))


class MappedAsyncRedis(redis.asyncio.Redis):
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return _read(args, await super().execute_command(*_mapped(args), **options))


# the tests that still fail with the keys mapped, and why
MAPPED_DIFFERENCES = {
    "TestLock::test_lock": NO_TIMEOUT,
    "TestLock::test_lock_token": TOKEN,
    "TestLock::test_lock_token_thread_local_false": TOKEN,
    "TestLock::test_blocking_timeout": POLL,
    "TestLock::test_context_manager_blocking_timeout": POLL,
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-differences", action="store_true", help="run without the xfail marks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--no-differences"):
        return
    for item in items:
        test = item.nodeid.split("[")[0].split(".py::")[1]
        why = (MAPPED_DIFFERENCES if MAP_KEYS else DIFFERENCES).get(test)
        if why is not None:
            item.add_marker(pytest.mark.xfail(reason=why, strict=True))
    for item in items:
        item.add_marker(pytest.mark.timeout(30))


@pytest.fixture(scope="session")
def peer_server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(find_server(os.environ.get("FENCELOCK_PEER_SERVER", "redis"))) as srv:
        yield srv


def _get_client(
    cls: Any,
    request: pytest.FixtureRequest,
    single_connection_client: bool = True,
    flushdb: bool = True,
    from_url: str | None = None,
    **kwargs: Any,
) -> Any:
    """redis-py's helper of the same name: a client of the peer server, flushed and closed after
    the test."""
    url = from_url or request.getfixturevalue("peer_server").url
    if MAP_KEYS and cls is redis.Redis:
        cls = MappedRedis
    client = cls.from_url(url, single_connection_client=single_connection_client, **kwargs)
    if flushdb:
        client.flushdb()

    def teardown() -> None:
        if flushdb:
            client.flushdb()
        client.close()

    request.addfinalizer(teardown)
    return client


@pytest.fixture
def r(request: pytest.FixtureRequest) -> Any:
    return _get_client(redis.Redis, request)
