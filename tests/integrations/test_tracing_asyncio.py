"""The spans where only asyncio differs: an acquire run in a task of its own (``wait_for``, a
TaskGroup) is still a child of the caller's span, and the grant released by another task ends
its hold."""

from __future__ import annotations

import asyncio

from fencelock._async.client import AsyncLockClient
from tests.traced import Traced


async def test_an_acquire_in_another_task_is_a_child_of_the_callers_span(
    traced: Traced, async_client: AsyncLockClient
) -> None:
    lock, other = async_client.lock("t-task", ttl=10), async_client.lock("t-task-2", ttl=10)
    with traced.tracer.start_as_current_span("request"):
        assert await asyncio.wait_for(lock.acquire(timeout=None), 10)
        async with asyncio.TaskGroup() as group:
            group.create_task(other.acquire(timeout=None))
    await asyncio.create_task(lock.release())  # (outside the span, in a task of its own)
    await other.release()
    request = traced.application("request").context.span_id
    for name in ("t-task", "t-task-2"):
        for span in (traced.one("acquire", name), traced.one("hold", name)):
            assert span.parent is not None and span.parent.span_id == request
        assert dict(traced.one("hold", name).attributes or {})["fencelock.hold.end"] == "released"
