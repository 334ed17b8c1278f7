"""The metrics and logs where only asyncio can get in the way: ``asyncio.wait_for`` cancelling
an acquire, and an event loop blocked past a lease's renewal."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from fencelock._async.client import AsyncLockClient
from tests.concurrency import async_until
from tests.exported import Exported


async def test_an_acquire_cancelled_by_wait_for_is_an_error(
    exported: Exported, async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    holder = async_client_b.lock("m-cancel", ttl=10)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("m-cancel", ttl=10)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(waiter.acquire(), 0.2)
    await holder.release()
    labels = {"primitive": "lock", "name": "m-cancel", "outcome": "error"}
    assert exported.count("acquire_wait", **labels) == 1


async def test_a_renewal_held_up_by_a_blocked_loop_is_logged_late(
    async_client: AsyncLockClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = async_client.lock("m-late", ttl=1.5, auto_renew=True)
    with caplog.at_level(logging.WARNING, "fencelock.watchdog"):
        async with lock:
            # The renewal is due after 0.5 s; a loop blocked for 1.1 s sends it with about 0.4 s
            # of the lease left: under a third, but still in time.
            time.sleep(1.1)  # (blocking on purpose: what a CPU-bound task does to the loop)
            renewed = async_client.statistics().renewals + 1
            await async_until(lambda: async_client.statistics().renewals >= renewed)
            assert not lock.lost
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "renewal_late"]
    assert record.lock_name == "m-late" and record.reason == "the watchdog ran late"  # type: ignore[attr-defined]
    assert 0 < record.seconds_left < 0.5  # type: ignore[attr-defined]
