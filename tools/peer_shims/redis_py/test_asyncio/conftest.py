"""The asyncio fixtures of redis-py's tests/test_asyncio/conftest.py that its lock tests use:
``create_redis`` (a single-connection client, then a pooled one) and ``r``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio

from fencelock_tools.servers.embedded import EmbeddedServer
from tests.conftest import MAP_KEYS, MappedAsyncRedis


@pytest_asyncio.fixture(params=[True, False], ids=["single", "pool"])
async def create_redis(
    request: pytest.FixtureRequest, peer_server: EmbeddedServer
) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    made: list[redis.asyncio.Redis] = []

    async def factory(flushdb: bool = True, **kwargs: Any) -> redis.asyncio.Redis:
        cls = MappedAsyncRedis if MAP_KEYS else redis.asyncio.Redis
        client = cls.from_url(peer_server.url, **kwargs)
        if request.param:
            client = client.client()
            await client.initialize()
        await client.flushdb()
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.flushdb()
        await client.aclose()


@pytest_asyncio.fixture
async def r(create_redis: Callable[..., Awaitable[Any]]) -> Any:
    return await create_redis()
