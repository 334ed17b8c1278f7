"""The client library a test's ``LockClient`` is made over: redis-py's, and, in the tests marked
``glide`` (the conformance subset, docs/glide.md), valkey-glide's too: the ``library`` fixture
(tests/conftest.py) runs them once per library. A glide client is the test's own, closed when
the test ends (a ``LockClient`` never closes the client it was given)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pytest

from fencelock._async.client import AsyncLockClient
from fencelock._sync.client import LockClient
from fencelock._transport import AsyncRedisCluster, SyncRedisCluster
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.topology import Cluster

REDIS_PY: Final = "redis-py"
GLIDE: Final = "glide"
LIBRARIES: Final = (REDIS_PY, GLIDE)


def _config(server: EmbeddedServer | Cluster, cluster: bool = False, **settings: Any) -> Any:
    """glide's configuration of a client of ``server`` (``cluster``: of a cluster client, not
    connected before its first request unless ``server`` is a Cluster), with ``settings``."""
    from glide_shared.config import (
        GlideClientConfiguration,
        GlideClusterClientConfiguration,
        NodeAddress,
    )

    address = [NodeAddress("127.0.0.1", server.port)]
    if cluster:
        lazy = not isinstance(server, Cluster)
        return GlideClusterClientConfiguration(address, lazy_connect=lazy, **settings)
    return GlideClientConfiguration(address, **settings)


class AsyncClients:
    """``LockClient``s of one library (``of``), over glide clients made here (``glide``)."""

    def __init__(self, library: str) -> None:
        self.library = library
        self._made: list[Any] = []

    async def of(
        self, servers: EmbeddedServer | Sequence[EmbeddedServer], **options: Any
    ) -> AsyncLockClient:
        """A client of ``servers`` (a list: Redlock over them) with ``options``."""
        if self.library == REDIS_PY:
            if isinstance(servers, EmbeddedServer):
                return AsyncLockClient.from_url(servers.url, **options)
            return AsyncLockClient.from_url([s.url for s in servers], **options)
        if isinstance(servers, EmbeddedServer):
            return AsyncLockClient(await self.glide(servers), **options)
        return AsyncLockClient([await self.glide(s) for s in servers], **options)

    async def glide(self, server: EmbeddedServer, **settings: Any) -> Any:
        """A glide client of ``server`` with ``settings`` (the test is skipped where glide is
        not installed)."""
        glide = pytest.importorskip("glide")
        client = await glide.GlideClient.create(_config(server, **settings))
        self._made.append(client)
        return client

    async def glide_cluster(self, server: EmbeddedServer | Cluster) -> Any:
        """A glide cluster client of ``server`` (not connected if it is no Cluster)."""
        glide = pytest.importorskip("glide")
        client = await glide.GlideClusterClient.create(_config(server, cluster=True))
        self._made.append(client)
        return client

    async def of_cluster(self, cluster: Cluster, **options: Any) -> AsyncLockClient:
        """A client of ``cluster`` with ``options``."""
        if self.library != REDIS_PY:
            return AsyncLockClient(await self.glide_cluster(cluster), **options)
        redis = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
        self._made.append(redis)
        return AsyncLockClient(redis, **options)

    async def close(self) -> None:
        for client in self._made:
            if isinstance(client, AsyncRedisCluster):
                await client.aclose()
            else:
                await client.close()


class SyncClients:
    def __init__(self, library: str) -> None:
        self.library = library
        self._made: list[Any] = []

    def of(self, servers: EmbeddedServer | Sequence[EmbeddedServer], **options: Any) -> LockClient:
        if self.library == REDIS_PY:
            if isinstance(servers, EmbeddedServer):
                return LockClient.from_url(servers.url, **options)
            return LockClient.from_url([s.url for s in servers], **options)
        if isinstance(servers, EmbeddedServer):
            return LockClient(self.glide(servers), **options)
        return LockClient([self.glide(s) for s in servers], **options)

    def glide(self, server: EmbeddedServer, **settings: Any) -> Any:
        glide_sync = pytest.importorskip("glide_sync")
        client = glide_sync.GlideClient.create(_config(server, **settings))
        self._made.append(client)
        return client

    def glide_cluster(self, server: EmbeddedServer | Cluster) -> Any:
        glide_sync = pytest.importorskip("glide_sync")
        client = glide_sync.GlideClusterClient.create(_config(server, cluster=True))
        self._made.append(client)
        return client

    def of_cluster(self, cluster: Cluster, **options: Any) -> LockClient:
        if self.library != REDIS_PY:
            return LockClient(self.glide_cluster(cluster), **options)
        redis = SyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
        self._made.append(redis)
        return LockClient(redis, **options)

    def close(self) -> None:
        for client in self._made:
            client.close()
