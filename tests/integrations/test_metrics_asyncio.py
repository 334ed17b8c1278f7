"""The metrics and logs where only asyncio can get in the way: ``asyncio.wait_for`` cancelling
an acquire, and an event loop blocked past a lease's renewal."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from fencelock._async.client import AsyncLockClient
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


async def test_a_blocked_loop_no_longer_holds_a_renewal_up(
    async_client: AsyncLockClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewals run off the loop (issue 24): a loop blocked past a renewal's due time delays
    nothing, and it is the stall that is logged, not a late renewal."""
    lock = async_client.lock("m-late", ttl=1.5, auto_renew=True)
    with caplog.at_level(logging.WARNING, "fencelock.watchdog"):
        async with lock:
            renewed = async_client.statistics().renewals + 2
            time.sleep(1.1)  # (blocking on purpose: what a CPU-bound task does to the loop)
            assert async_client.statistics().renewals >= renewed  # both, meanwhile, on time
            assert not lock.lost
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "renewal_late" not in events and "loop_stalled" in events
