"""once_per: one run per period across runners, recorded with a fenced write.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._context import current_token
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_together

PERIOD = 3600.0


def _mid() -> float:
    """An offset that puts now in the middle of period 0: no period ends during the test, and
    ``offset - PERIOD`` is the next period."""
    return time.time() - PERIOD / 2


async def test_racing_runners_run_a_period_once(server: EmbeddedServer, raw: redis.Redis) -> None:
    offset = _mid()
    runners = [AsyncLockClient.from_url(server.url) for _ in range(4)]
    runs: list[tuple[int, int]] = []

    async def job(i: int) -> int:
        runs.append((i, current_token()))
        return i

    try:
        guards = [runner.once_per("report", PERIOD, offset=offset) for runner in runners]
        ticks = [lambda g=g, i=i: g.run(job, i) for i, g in enumerate(guards * 2)]
        results = await async_together(ticks)  # type: ignore[arg-type]
        assert len(runs) == 1
        [(i, token)] = runs
        assert [r for r in results if r is not None] == [i]
        assert raw.get("fencelock:{report}:once_per") == "0"  # the period's number
        assert await guards[0].run(job, 9) is None  # a later tick of the same period
        # a runner whose clock is a period behind: a later period is recorded, so it is done
        late = runners[1].once_per("report", PERIOD, offset=offset + PERIOD)
        assert await late.run(job, 10) is None
        # the next period runs, once, with a larger token
        following = runners[2].once_per("report", timedelta(seconds=PERIOD), offset=offset - PERIOD)
        assert await following.run(job, 11) == 11
        assert await following.run(job, 12) is None
        assert len(runs) == 2 and runs[1][1] > token
        assert raw.get("fencelock:{report}:once_per") == "1"
    finally:
        for runner in runners:
            await runner.close()


async def test_a_job_that_raises_leaves_the_period_to_the_next_tick(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    attempts: list[int] = []

    @async_client.once_per("flaky", PERIOD, offset=_mid(), ttl=5)
    async def job(fail: bool) -> str:
        attempts.append(current_token())
        if fail:
            raise ValueError("the job failed")
        return "done"

    with pytest.raises(ValueError, match="the job failed"):
        await job(True)
    assert raw.get("fencelock:{flaky}:once_per") is None  # not done
    assert await async_client.inspect("flaky") is None  # and the lock is free
    assert await job(False) == "done"
    assert await job(False) is None
    assert len(attempts) == 2 and attempts[1] > attempts[0]
    assert raw.get("fencelock:{flaky}:once_per") == "0"


async def test_a_tick_skips_while_another_runner_has_the_lock(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    guard = async_client.once_per("busy", PERIOD, offset=_mid())
    other = async_client_b.lock("busy", ttl=10)
    assert await other.acquire(timeout=0)

    async def job() -> str:
        return "ran"

    assert await guard.run(job) is None
    await other.release()
    assert await guard.run(job) == "ran"


async def test_run_held_runs_under_the_callers_lock_and_leaves_it_held(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """``fencelock run --once-per``'s way: its own lock (label, on_lost), kept after the tick."""
    guard = async_client.once_per("held", PERIOD, offset=_mid())
    lock = async_client.lock("held", ttl=5, auto_renew=True, label="cron on box-1")
    tokens: list[int] = []

    async def job() -> str:
        tokens.append(current_token())
        return "ran"

    with pytest.raises(fencelock.LockNotOwned):
        await guard.run_held(lock, job)  # not acquired yet
    assert await lock.acquire(timeout=0)
    assert await guard.run_held(lock, job) == "ran"
    assert await guard.run_held(lock, job) is None  # done already: not run again
    assert tokens == [lock.token]
    assert raw.get("fencelock:{held}:once_per") == "0"
    assert await lock.held()  # still the caller's to release
    with pytest.raises(ValueError, match="a lock on 'held', not on 'other'"):
        await guard.run_held(async_client.lock("other"), job)
    await lock.release()


async def test_bad_arguments_are_refused(async_client: AsyncLockClient) -> None:
    with pytest.raises(ValueError, match="period"):
        async_client.once_per("j", 0)
    with pytest.raises(ValueError, match="period"):
        async_client.once_per("j", timedelta(days=-1))
    with pytest.raises(TypeError, match="period"):
        async_client.once_per("j", "60")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset"):
        async_client.once_per("j", 60, offset=float("inf"))
    with pytest.raises(ValueError, match="ttl"):
        async_client.once_per("j", 60, ttl=0)
    with pytest.raises(ValueError, match="timeout"):
        async_client.once_per("j", 60, timeout=-1)
    with pytest.raises(ValueError, match="name"):
        async_client.once_per("", 60)
    with pytest.raises(fencelock.LockError, match="no fencelock run"):
        current_token()


async def test_over_redlock_the_record_is_on_the_resource_server(
    redlock: list[EmbeddedServer],
) -> None:
    urls = [srv.url for srv in redlock]
    # (a node timeout a loaded machine does not outrun: the default is 50 ms at most)
    async with AsyncLockClient.from_url(urls, node_timeout=0.5) as client:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="redis="):
            client.once_per("r-job", PERIOD)
        resource = AsyncRedis(port=redlock[0].port, socket_timeout=5)
        guard = client.once_per("r-job", PERIOD, offset=_mid(), redis=resource)

        async def job() -> int:
            return current_token()

        token = await guard.run(job)
        assert token > 0
        assert await guard.run(job) is None
        assert await resource.get("fencelock:{r-job}:once_per") == b"0"
        await resource.aclose()
