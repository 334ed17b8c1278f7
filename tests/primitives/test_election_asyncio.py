"""Leader election under asyncio only: the leader's block cancelled on loss, TaskGroup and
asyncio.wait_for around campaign (the others: tests/primitives/_async/test_election.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

import fencelock
from fencelock._async.client import AsyncLockClient
from tests.concurrency import TIMEOUT


async def test_the_leaders_block_is_cancelled_when_leadership_is_lost(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    el = async_client.election("ea-cancel", ttl=0.6)  # default policy under asyncio: "cancel"
    started = time.monotonic()
    with pytest.raises(fencelock.LockLost):
        async with el:
            await async_client_b.force_release("ea-cancel")  # deposed by an operator
            await asyncio.sleep(30)  # the leader's work: cancelled at the next renewal
    assert not el.leading  # (the block's end forgot the lost grant)
    assert time.monotonic() - started < 10  # (a bound: the renewal comes within ttl/3)
    assert await el.leader() is None


async def test_campaigns_in_a_task_group_lead_one_after_the_other(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    terms: list[tuple[str, int]] = []

    async def lead(el: fencelock.asyncio.Election) -> None:
        term = await el.campaign(timeout=10)
        leader = await el.leader()
        assert leader is not None and leader.term == term
        terms.append((el.name, term))
        await el.resign()

    async with asyncio.TaskGroup() as group:
        group.create_task(lead(async_client.election("ea-group", ttl=5)))
        group.create_task(lead(async_client_b.election("ea-group", ttl=5)))
    assert len(terms) == 2 and terms[0][1] < terms[1][1]


async def test_wait_for_around_campaign_leaves_nothing_behind(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    a = async_client.election("ea-wait", ttl=5, label="a")
    b = async_client_b.election("ea-wait", ttl=5, label="b")
    first = await a.campaign()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(b.campaign(), 0.3)
    assert not b.leading
    # b leaves the queue in the background (the caller got control back at its deadline)
    deadline = time.monotonic() + TIMEOUT
    while (info := await async_client.inspect("ea-wait")) is not None and info.queued:
        assert time.monotonic() < deadline, "the cancelled campaign never left the queue"
        await asyncio.sleep(0.001)
    assert info is not None and info.label == "a"
    await a.resign()
    assert await a.leader() is None  # nothing was granted to the cancelled campaign
    term = await asyncio.wait_for(b.campaign(), 5)
    assert term > first
    await b.resign()


async def test_a_campaign_cancelled_by_its_task_group_leaves_nothing_behind(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    a = async_client.election("ea-group-cancel", ttl=5)
    b = async_client_b.election("ea-group-cancel", ttl=5)
    await a.campaign()

    async def fail_soon() -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("sibling failed")

    with pytest.raises(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(b.campaign())
            group.create_task(fail_soon())
    assert not b.leading
    await a.resign()
    assert await a.leader() is None
