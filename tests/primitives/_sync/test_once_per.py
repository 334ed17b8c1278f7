# GENERATED from tests/primitives/_async/test_once_per.py by tools/gen_sync.py: edit that file instead.
"""once_per: one run per period across runners, recorded with a fenced write.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._context import current_token
from fencelock._transport import SyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import sync_together

PERIOD = 3600.0


def _mid() -> float:
    """An offset that puts now in the middle of period 0: no period ends during the test, and
    ``offset - PERIOD`` is the next period."""
    return time.time() - PERIOD / 2


def test_racing_runners_run_a_period_once(server: EmbeddedServer, raw: redis.Redis) -> None:
    offset = _mid()
    runners = [LockClient.from_url(server.url) for _ in range(4)]
    runs: list[tuple[int, int]] = []

    def job(i: int) -> int:
        runs.append((i, current_token()))
        return i

    try:
        guards = [runner.once_per("report", PERIOD, offset=offset) for runner in runners]
        ticks = [lambda g=g, i=i: g.run(job, i) for i, g in enumerate(guards * 2)]
        results = sync_together(ticks)  # type: ignore[arg-type]
        assert len(runs) == 1
        [(i, token)] = runs
        assert [r for r in results if r is not None] == [i]
        assert raw.get("fencelock:{report}:once_per") == "0"  # the period's number
        assert guards[0].run(job, 9) is None  # a later tick of the same period
        # a runner whose clock is a period behind: a later period is recorded, so it is done
        late = runners[1].once_per("report", PERIOD, offset=offset + PERIOD)
        assert late.run(job, 10) is None
        # the next period runs, once, with a larger token
        following = runners[2].once_per("report", timedelta(seconds=PERIOD), offset=offset - PERIOD)
        assert following.run(job, 11) == 11
        assert following.run(job, 12) is None
        assert len(runs) == 2 and runs[1][1] > token
        assert raw.get("fencelock:{report}:once_per") == "1"
    finally:
        for runner in runners:
            runner.close()


def test_a_job_that_raises_leaves_the_period_to_the_next_tick(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    attempts: list[int] = []

    @sync_client.once_per("flaky", PERIOD, offset=_mid(), ttl=5)
    def job(fail: bool) -> str:
        attempts.append(current_token())
        if fail:
            raise ValueError("the job failed")
        return "done"

    with pytest.raises(ValueError, match="the job failed"):
        job(True)
    assert raw.get("fencelock:{flaky}:once_per") is None  # not done
    assert sync_client.inspect("flaky") is None  # and the lock is free
    assert job(False) == "done"
    assert job(False) is None
    assert len(attempts) == 2 and attempts[1] > attempts[0]
    assert raw.get("fencelock:{flaky}:once_per") == "0"


def test_a_tick_skips_while_another_runner_has_the_lock(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    guard = sync_client.once_per("busy", PERIOD, offset=_mid())
    other = sync_client_b.lock("busy", ttl=10)
    assert other.acquire(timeout=0)

    def job() -> str:
        return "ran"

    assert guard.run(job) is None
    other.release()
    assert guard.run(job) == "ran"


def test_run_held_runs_under_the_callers_lock_and_leaves_it_held(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    """``fencelock run --once-per``'s way: its own lock (label, on_lost), kept after the tick."""
    guard = sync_client.once_per("held", PERIOD, offset=_mid())
    lock = sync_client.lock("held", ttl=5, auto_renew=True, label="cron on box-1")
    tokens: list[int] = []

    def job() -> str:
        tokens.append(current_token())
        return "ran"

    with pytest.raises(fencelock.LockNotOwned):
        guard.run_held(lock, job)  # not acquired yet
    assert lock.acquire(timeout=0)
    assert guard.run_held(lock, job) == "ran"
    assert guard.run_held(lock, job) is None  # done already: not run again
    assert tokens == [lock.token]
    assert raw.get("fencelock:{held}:once_per") == "0"
    assert lock.held()  # still the caller's to release
    with pytest.raises(ValueError, match="a lock on 'held', not on 'other'"):
        guard.run_held(sync_client.lock("other"), job)
    lock.release()


def test_bad_arguments_are_refused(sync_client: LockClient) -> None:
    with pytest.raises(ValueError, match="period"):
        sync_client.once_per("j", 0)
    with pytest.raises(ValueError, match="period"):
        sync_client.once_per("j", timedelta(days=-1))
    with pytest.raises(TypeError, match="period"):
        sync_client.once_per("j", "60")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset"):
        sync_client.once_per("j", 60, offset=float("inf"))
    with pytest.raises(ValueError, match="ttl"):
        sync_client.once_per("j", 60, ttl=0)
    with pytest.raises(ValueError, match="timeout"):
        sync_client.once_per("j", 60, timeout=-1)
    with pytest.raises(ValueError, match="name"):
        sync_client.once_per("", 60)
    with pytest.raises(fencelock.LockError, match="no fencelock run"):
        current_token()


def test_over_redlock_the_record_is_on_the_resource_server(
    redlock: list[EmbeddedServer],
) -> None:
    urls = [srv.url for srv in redlock]
    # (a node timeout a loaded machine does not outrun: the default is 50 ms at most)
    with LockClient.from_url(urls, node_timeout=0.5) as client:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="redis="):
            client.once_per("r-job", PERIOD)
        resource = SyncRedis(port=redlock[0].port, socket_timeout=5)
        guard = client.once_per("r-job", PERIOD, offset=_mid(), redis=resource)

        def job() -> int:
            return current_token()

        token = guard.run(job)
        assert token > 0
        assert guard.run(job) is None
        assert resource.get("fencelock:{r-job}:once_per") == b"0"
        resource.close()
