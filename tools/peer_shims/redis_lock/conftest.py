"""Shim for python-redis-lock's own tests (tests/test_redis_lock.py of its sdist), run by
tools/peer_suite.py against fencelock.compat.redis_lock: ``redis_lock`` is ours, and the server
their fixtures connect to (by unix socket) is one this shim starts (``FENCELOCK_PEER_SERVER``:
"redis" or "valkey").

The tests that run helper processes through ``process_tests`` (to match python-redis-lock's log
lines) are skipped: the helpers would import the real ``redis_lock``. The tests that fail on
purpose are marked xfail (strict) with the difference that explains each (``DIFFERENCES``).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fencelock._keys import LockKeys
from fencelock.compat import redis_lock
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

sys.modules["redis_lock"] = redis_lock  # their ``from redis_lock import Lock``

HELPERS = "runs helper processes (process_tests) that import python-redis-lock and log its lines"


def _helpers(*args: Any, **kwargs: Any) -> Any:
    pytest.skip(HELPERS)


process_tests = types.ModuleType("process_tests")
process_tests.TestProcess = process_tests.dump_on_error = _helpers  # type: ignore[attr-defined]
process_tests.wait_for_strings = _helpers  # type: ignore[attr-defined]
sys.modules["process_tests"] = process_tests

KEY = "reads or writes python-redis-lock's key 'lock:<name>' itself (fencelock's keys are its own)"
SIGNAL = "reads the signal list 'lock-signal:<name>' (fencelock wakes waiters by pub/sub)"
PRIVATE = "reads python-redis-lock's private attributes (_name, _lock_renewal_thread...)"
ID = (
    "expects the id given to be the one an acquire stores (fencelock makes it): not run, as the"
    " acquire would wait for the grant of that id for ever"
)
RESET = (
    "reset_all() by the client whose own other Lock object holds the name: that grant is seen lost"
    " at its next renewal only, so a new Lock of that client cannot take the name at once (a"
    " limitation of fencelock's force_release, not a choice)"
)

# test (without parameters) -> why it fails on purpose; docs/migrating.md lists them
DIFFERENCES = {
    "test_upgrade": PRIVATE,
    "test_extend": KEY,
    "test_extend_lock_default_expire": KEY,
    "test_extend_another_instance": KEY,
    "test_extend_another_instance_different_id_fail": KEY,
    "test_given_id": ID,
    "test_reset_all": RESET,
    "test_release_from_nonblocking_leaving_garbage": SIGNAL,
    "test_signal_expiration": SIGNAL,
    "test_no_auto_renewal": PRIVATE,
    "test_auto_renewal": PRIVATE,
    "test_auto_renewal_stops_after_gc": PRIVATE,
}

# With FENCELOCK_PEER_MAP_KEYS=1 the tests' own commands on 'lock:<name>' go to the key of
# fencelock's lock of that name instead.
MAP_KEYS = os.environ.get("FENCELOCK_PEER_MAP_KEYS") == "1"
MAPPED_COMMANDS = {"GET", "SET", "TTL", "PTTL", "EXISTS"}
MAPPED_DIFFERENCES = {test: why for test, why in DIFFERENCES.items() if why != KEY}


class MappedStrictRedis(redis.StrictRedis):
    def execute_command(self, *args: Any, **options: Any) -> Any:
        if len(args) > 1 and str(args[0]).upper() in MAPPED_COMMANDS:
            key = args[1].decode() if isinstance(args[1], bytes) else args[1]
            if isinstance(key, str) and key.startswith("lock:"):
                args = (args[0], LockKeys.for_name(key.removeprefix("lock:")).lock, *args[2:])
        return super().execute_command(*args, **options)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-differences", action="store_true", help="run without the xfail marks")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.timeout(30))
        if MAP_KEYS:  # their fixtures make their clients through this module global
            item.module.StrictRedis = MappedStrictRedis  # type: ignore[attr-defined]
        if config.getoption("--no-differences"):
            continue
        why = (MAPPED_DIFFERENCES if MAP_KEYS else DIFFERENCES).get(item.name.split("[")[0])
        if why is not None:
            item.add_marker(pytest.mark.xfail(reason=why, strict=True, run=why != ID))


@pytest.fixture(scope="session")
def redis_socket(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("server") / "redis.sock")


@pytest.fixture(scope="session")
def redis_server(redis_socket: str) -> Iterator[EmbeddedServer]:
    binary = find_server(os.environ.get("FENCELOCK_PEER_SERVER", "redis"))
    args = ["--unixsocket", redis_socket, "--unixsocketperm", "700"]
    with EmbeddedServer(binary, args=args) as srv:
        yield srv
