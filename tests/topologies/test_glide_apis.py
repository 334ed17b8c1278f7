"""valkey-glide's clients where they do not belong, and fencelock without glide installed
(docs/glide.md): not twins, as each test crosses the two APIs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import fencelock
import fencelock.asyncio
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.clients import AsyncClients, SyncClients

glide = pytest.importorskip("glide")


def test_each_api_takes_its_own_packages_clients(server: EmbeddedServer) -> None:
    """The sync client takes glide_sync's clients, the asyncio client glide's: the other
    package's is refused, saying which to pass."""
    clients = SyncClients("glide")
    try:
        with pytest.raises(TypeError, match="not of glide:"):
            fencelock.asyncio.LockClient(clients.glide(server))
    finally:
        clients.close()

    async def made() -> Any:
        made = AsyncClients("glide")
        given = await made.glide(server)
        try:
            with pytest.raises(TypeError, match="not of glide_sync:"):
                fencelock.LockClient(given)
        finally:
            await made.close()

    asyncio.run(made())


def test_fencelock_works_without_glide(server: EmbeddedServer) -> None:
    """Importing fencelock imports no glide package; where none is installed (here: refused
    at import), a client over redis-py works as ever."""
    code = f"""
import sys
import fencelock, fencelock.asyncio
assert not [m for m in sys.modules if m.split(".")[0] in ("glide", "glide_sync", "glide_shared")]
for name in ("glide", "glide_sync", "glide_shared"):
    sys.modules[name] = None  # (an import of it raises ImportError)
client = fencelock.LockClient.from_url({server.url!r})
with client.lock("no-glide", ttl=5) as lock:
    assert lock.token > 0
client.close()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
