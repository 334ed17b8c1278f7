"""What only asyncio has: cancellation at any await, and tasks that share a lock object."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import time
import traceback
import warnings
from collections.abc import Callable
from types import CodeType
from typing import Any

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._backend import AsyncEvent
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock._scripts import ACQUIRE, RELEASE
from fencelock._transport import async_read, async_select_checked
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_until, sync_until

KEY = LockKeys.for_name("cancel").lock


async def settle() -> None:
    """Let shielded clean-ups finish: every task but this one and the pub/sub listener."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me and t.get_name() != "fencelock-waiter"]
    await asyncio.gather(*others, return_exceptions=True)


def unraisable_errors(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What is raised where nobody can catch it (in the garbage collector), from now on: each
    error, its object and its traceback."""
    unraisable: list[str] = []
    monkeypatch.setattr(
        "sys.unraisablehook",
        lambda u: unraisable.append(
            f"{u.exc_value!r} in {u.object!r}\n{''.join(traceback.format_tb(u.exc_traceback))}"
        ),
    )
    return unraisable


async def cancel_after(steps: int, coro_fn: object) -> bool:
    """Run ``coro_fn()`` as a task, cancel it after ``steps`` loop iterations; True if it had
    finished by then."""
    task = asyncio.ensure_future(coro_fn())  # type: ignore[operator]
    for _ in range(steps):
        await asyncio.sleep(0)
    finished = task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await settle()
    return finished


async def test_cancel_anywhere_in_uncontended_acquire_and_release(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    lock = async_client.lock("cancel", ttl=30)

    async def cycle() -> None:
        if await lock.acquire(timeout=5):
            await lock.release()

    steps = 0
    while not await cancel_after(steps, cycle):
        assert not raw.exists(KEY), f"lock orphaned after cancel at step {steps}"
        steps += 1
    assert steps > 2  # the cycle really had several await points to cancel at
    assert not raw.exists(KEY)


async def test_cancel_anywhere_while_waiting(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client.lock("cancel", ttl=30)
    await holder.acquire(timeout=0)
    holder_value = raw.get(KEY)
    waiter = async_client.lock("cancel", ttl=30)
    for steps in range(40):
        assert not await cancel_after(steps, lambda: waiter.acquire(timeout=None))
        assert raw.get(KEY) == holder_value  # the holder's lock is never touched
    assert async_client._wiring.topology.route.waiters[0]._watchers == {}  # every wait unsubscribed
    await holder.release()


@pytest.mark.parametrize("script", [ACQUIRE, RELEASE], ids=["acquire", "release"])
async def test_cancel_after_server_executed(
    async_client: AsyncLockClient, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch, script: object
) -> None:
    """Cancellation arriving just as the reply does: the server acted, the caller never saw it."""
    route = async_client._wiring.topology.route  # every request of a lock goes through it
    real_request = route.send

    async def request_then_cancel(*args: Any, **kwargs: Any) -> Any:
        replies = await real_request(*args, **kwargs)
        commands = args[0]
        if commands[0][:2] == ("EVALSHA", script.sha):  # type: ignore[attr-defined]
            raise asyncio.CancelledError
        return replies

    lock = async_client.lock("cancel", ttl=30)
    if script is RELEASE:
        await lock.acquire(timeout=0)
    monkeypatch.setattr(route, "send", request_then_cancel)
    with pytest.raises(asyncio.CancelledError):
        if script is ACQUIRE:
            await lock.acquire(timeout=0)
        else:
            await lock.release()
    monkeypatch.undo()
    await settle()
    assert not raw.exists(KEY)


async def test_cancelled_release_still_releases(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    lock = async_client.lock("cancel", ttl=30)
    await lock.acquire(timeout=0)
    task = asyncio.ensure_future(lock.release())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle()
    assert not raw.exists(KEY)


async def test_wait_for_acquire_grant_belongs_to_the_lock(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # asyncio.wait_for runs the acquire in a task of its own (Python 3.11): the grant must still
    # be the lock object's, usable and releasable by the caller
    lock = async_client.lock("wait-for", ttl=30)
    assert await asyncio.wait_for(lock.acquire(), 5)
    assert lock.token > 0 and await lock.held()
    await lock.release()
    assert not raw.exists(LockKeys.for_name("wait-for").lock)


async def test_acquire_in_a_task_release_in_another(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    lock = async_client.lock("tasks", ttl=30)
    assert await asyncio.create_task(lock.acquire(timeout=0))
    token = lock.token

    async def child() -> int:
        return lock.token

    # a task started outside the acquiring task's context sees the same grant
    fresh = asyncio.get_running_loop().create_task(child(), context=contextvars.Context())
    assert await fresh == token
    await asyncio.create_task(lock.release())
    assert not raw.exists(LockKeys.for_name("tasks").lock)


async def test_wait_for_under_contention_orphans_nothing(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    """The issue's loop: wait_for(acquire(), short) against a busy lock. Every True holds a
    usable grant; every timeout leaves nothing held by this client."""
    other = async_client_b.lock("contended", ttl=30)
    stop = asyncio.Event()

    async def contend() -> None:
        while not stop.is_set():
            async with other:
                await asyncio.sleep(0.002)
            await asyncio.sleep(0)

    contender = asyncio.ensure_future(contend())
    lock = async_client.lock("contended", ttl=30)
    granted = 0
    for _ in range(150):
        try:
            ok = await asyncio.wait_for(lock.acquire(), 0.01)
        except TimeoutError:
            continue
        assert ok
        granted += 1
        assert lock.token > 0
        await lock.release()  # raises LockNotOwned for an orphaned grant
    stop.set()
    await contender
    await settle()
    assert not raw.exists(LockKeys.for_name("contended").lock)  # nothing left held
    assert granted > 0  # the loop really got grants to check


async def test_a_task_that_survived_a_failed_task_group_can_lock(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(fail())
            group.create_task(asyncio.sleep(3600))
    # Python 3.11 and 3.12 leave this task's cancelling() at 1 here; 3.13 withdraws it
    await _acquire_wait_and_release(async_client, async_client_b, raw)


async def test_a_cancellation_request_from_before_the_call_does_not_interrupt_it(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    # The state a caught TaskGroup failure leaves on 3.11/3.12, made on any version: a request
    # that was delivered and caught, never withdrawn.
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(1)
    assert task.cancelling() == 1
    await _acquire_wait_and_release(async_client, async_client_b, raw)
    # a cancellation that really arrives during the call still interrupts it, leaving nothing
    holder = async_client_b.lock("survivor", ttl=30)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("survivor", ttl=30)
    waiting = asyncio.ensure_future(waiter.acquire(timeout=30))
    await async_until(lambda: async_client.statistics().waiting == 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await holder.release()
    await settle()
    assert not raw.exists(LockKeys.for_name("survivor").lock)
    task.uncancel()


async def _acquire_wait_and_release(
    client: AsyncLockClient, other: AsyncLockClient, raw: redis.Redis
) -> None:
    lock = client.lock("survivor", ttl=30)
    assert await lock.acquire(timeout=0)
    await lock.release()  # deletes the key and returns normally
    assert not raw.exists(LockKeys.for_name("survivor").lock)
    holder = other.lock("survivor", ttl=30)
    assert await holder.acquire(timeout=0)
    waiting = asyncio.ensure_future(lock.acquire(timeout=30))  # waits, and is woken
    await async_until(lambda: client.statistics().waiting == 1)
    await holder.release()
    assert await waiting
    async with client.lock("survivor-2", ttl=30):
        pass
    await lock.release()


async def test_an_async_on_lost_callback_is_awaited(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    heard = asyncio.Event()

    async def on_lost(lock: fencelock.asyncio.Lock) -> None:
        await asyncio.sleep(0)
        heard.set()

    lock = async_client.lock("async-cb", ttl=0.6, auto_renew=True, on_lost=on_lost)
    assert await lock.acquire(timeout=0)
    raw.delete(LockKeys.for_name("async-cb").lock)
    await asyncio.wait_for(heard.wait(), 30)
    assert lock.lost


async def test_many_waiters_share_one_pubsub_connection(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    names = [f"shared-{i}" for i in range(20)]
    holders = [async_client_b.lock(name, ttl=60) for name in names]
    for holder in holders:
        await holder.acquire(timeout=0)
    waiters = [async_client.lock(name, ttl=60) for name in names]

    async def take(lock: fencelock.asyncio.Lock) -> int:
        assert await lock.acquire(timeout=None)
        token = lock.token
        await lock.release()
        return token

    tasks = [asyncio.ensure_future(take(w)) for w in waiters]
    await async_until(lambda: async_client.statistics().waiting == 20)
    subscribed = [c for c in raw.client_list() if int(c.get("sub", 0)) > 0]
    assert len(subscribed) == 1  # one connection for the 20 waits
    first = [holder.token for holder in holders]
    for holder in holders:
        await holder.release()
    tokens = await asyncio.gather(*tasks)
    assert all(t > f for t, f in zip(tokens, first, strict=True))


async def test_cancel_policy_cancels_the_block(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    lock = async_client.lock("cancelled", ttl=0.6, auto_renew=True, on_lost_policy="cancel")
    reached_end = False
    with pytest.raises(fencelock.LockLost):
        async with lock:
            raw.delete(LockKeys.for_name("cancelled").lock)
            await asyncio.sleep(3600)  # the long work, cut short when the lease is lost
            reached_end = True
    assert not reached_end
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the library's cancel was withdrawn
    await asyncio.sleep(0)  # and the task goes on normally


async def test_cancel_policy_spares_the_task_that_finds_the_loss(
    fresh_server: EmbeddedServer,
) -> None:
    # The block's own check() declares the loss: it raises LockLost, and must not also leave a
    # cancellation of its own task pending (before Python 3.13 Task.uncancel() cannot withdraw
    # it), which would land in the next await, here or after the block.
    async with AsyncLockClient.from_url(fresh_server.url) as client:
        lock = client.lock("self-found", ttl=0.5, auto_renew=True, on_lost_policy="cancel")
        reached_end = False
        with pytest.raises(fencelock.LockLost):
            async with lock:
                fresh_server.pause()  # renewals get no answer (they run off the loop)...
                time.sleep(0.6)  # ...and the loop stalls past the lease: nothing runs on it
                fresh_server.resume()
                with pytest.raises(fencelock.LockLost):
                    lock.check()  # (found here first: the renewals' loss waits for the loop)
                await asyncio.sleep(0)
                reached_end = True
        assert reached_end
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)


async def test_cancel_policy_is_asyncio_only() -> None:
    import fencelock as sync_api

    with pytest.raises(ValueError, match="on_lost_policy"):
        sync_api.LockClient.from_url("redis://127.0.0.1:1/0").lock("x", on_lost_policy="cancel")


async def test_redlock_cancel_anywhere_leaves_nothing_held(
    redlock: list[EmbeddedServer],
) -> None:
    """Cancellation while the requests to five nodes are in flight: whatever each node did, the
    grant is given back on all of them (the fan-out lets sent requests finish first, so the
    release cannot overtake them)."""
    client = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=0.5)
    lock = client.lock("cancel", ttl=30)
    probes = [srv.client() for srv in redlock]

    async def cycle() -> None:
        if await lock.acquire(timeout=5):
            await lock.release()

    steps = 0
    while not await cancel_after(steps, cycle):
        assert not any(p.exists(KEY) for p in probes), f"orphaned after cancel at step {steps}"
        steps += 1
    assert steps > 2
    assert not any(p.exists(KEY) for p in probes)
    for probe in probes:
        probe.close()
    await client.close()


async def test_redlock_token_is_written_back_at_acquire(redlock: list[EmbeddedServer]) -> None:
    """asyncio cannot do I/O in the ``token`` property, so the fencing write-back is part of a
    Redlock acquire: the token stays readable after the lease is lost, as in every mode."""
    client = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=0.5)
    lock = client.lock("cancel", ttl=30)
    assert await lock.acquire(timeout=0)
    fences = []
    for srv in redlock:
        with srv.client() as probe:
            fences.append(lock_value(probe.get(KEY))[1])  # written back during acquire
            probe.delete(KEY)
    assert fences == [lock.token] * 5
    await client.close()


async def test_cancel_anywhere_while_queued_for_a_local_hand_off(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """A queued waiter cancelled at every step of a hand-off to it: whatever reached it (the
    lock, or its turn as head) is passed on, never left held, and the queue is left empty."""

    def queued_tickets() -> int:
        return sum(len(line.tickets) for line in async_client._wiring.queues._lines.values())

    steps, finished = 0, False
    while not finished:  # cancel one loop step later each time, until the waiter got through
        held, go = asyncio.Event(), asyncio.Event()

        async def hold(held: asyncio.Event = held, go: asyncio.Event = go) -> None:
            holder = async_client.lock("cancel", ttl=30)
            assert await holder.acquire(timeout=0)
            held.set()
            await go.wait()
            await holder.release()

        async def take() -> None:
            waiter = async_client.lock("cancel", ttl=30)
            if await waiter.acquire(timeout=None):
                await waiter.release()

        holding = asyncio.ensure_future(hold())
        await held.wait()
        task = asyncio.ensure_future(take())
        await async_until(lambda: queued_tickets() == 1)
        go.set()
        for _ in range(steps):
            await asyncio.sleep(0)
        finished = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await holding
        await settle()
        assert not raw.exists(KEY), f"lock orphaned after cancel at step {steps}"
        assert async_client._wiring.queues._lines == {}, f"queue left behind at step {steps}"
        steps += 1
    assert steps > 3 and async_client.statistics().handoffs > 0


def test_a_dropped_client_ends_its_tasks_at_once(
    server: EmbeddedServer, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Dropped unclosed, its lock held with auto_renew (next renewal due in 10 s) and its pub/sub
    listener running: its close() runs as a task, so its tasks end now, and a loop closed right
    after (without cancelling anything, unlike asyncio.run) destroys no pending task."""

    async def use_and_drop() -> None:
        client = AsyncLockClient.from_url(server.url)
        async with client._wiring.topology.watch("some-channel", "a test's wait"):
            pass  # the listener task runs from now on
        lock = client.lock("unclosed", ttl=30, auto_renew=True)
        assert await lock.acquire(timeout=0)

    async def main() -> None:
        me = asyncio.current_task()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            await use_and_drop()
            gc.collect()
        await async_until(lambda: asyncio.all_tasks() == {me}, timeout=5)

    connections = len(raw.client_list())
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    gc.collect()
    assert "Task was destroyed" not in caplog.text
    sync_until(lambda: len(raw.client_list()) <= connections)
    assert 0 < raw.pttl(LockKeys.for_name("unclosed").lock) <= 30_000  # left to expire


def test_a_client_used_in_a_second_event_loop_says_so(server: EmbeddedServer) -> None:
    # Its connections, tasks and locks belong to the first loop: redis-py failed deep inside
    # ("attached to a different loop", "Event loop is closed") or hung.
    client = AsyncLockClient.from_url(server.url)

    async def use() -> None:
        async with client.lock("loops", ttl=5):
            pass

    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(use())
        with pytest.raises(fencelock.LockError, match="another event loop"):
            asyncio.run(use())
        first.run_until_complete(client.close())
    finally:
        first.close()


async def test_a_woken_waiter_that_gives_up_passes_the_wake_up_on(
    redlock: list[EmbeddedServer],
) -> None:
    """Redlock: a release wakes the first queued waiter only (it cannot grant by itself). That
    waiter is cancelled before its re-try: its leaving passes the wake-up to the next waiter,
    which would otherwise sleep until the old holder's lease (an hour) ran out."""
    urls = [s.url for s in redlock]
    # (sync: its release does not yield; node timeouts a loaded machine does not outrun)
    holder_client = fencelock.LockClient.from_url(urls, node_timeout=0.5)
    holder = holder_client.lock("pass-on", ttl=3600)
    assert holder.acquire(timeout=0)
    first, second = [AsyncLockClient.from_url(urls, node_timeout=0.5) for _ in range(2)]
    woken = asyncio.ensure_future(first.lock("pass-on", ttl=30).acquire(timeout=30))
    await async_until(lambda: first.statistics().waiting == 1)
    next_lock = second.lock("pass-on", ttl=30)
    waiting = asyncio.ensure_future(next_lock.acquire(timeout=10))
    await async_until(lambda: second.statistics().waiting == 1)
    holder.release()  # wakes the first waiter, which is cancelled before it can re-try
    woken.cancel()
    with pytest.raises(asyncio.CancelledError):
        await woken
    assert await waiting is True
    await next_lock.release()
    for client in (first, second):
        await client.close()
    holder_client.close()


async def test_multi_lock_cancelled_anywhere_leaves_nothing_held(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """Cancelled at any step of an uncontended acquire of three names (one script on one
    server): a grant in flight is given back."""
    names = ["mc-1", "mc-2", "mc-3"]
    keys = [LockKeys.for_name(n).lock for n in names]
    multi = async_client.multi_lock(names, ttl=30)

    async def cycle() -> None:
        if await multi.acquire(timeout=5):
            await multi.release()

    steps = 0
    while not await cancel_after(steps, cycle):
        await settle()
        assert not raw.exists(*keys), f"left held after cancel at step {steps}"
        steps += 1
    assert steps > 3  # the cancellations really fell around the request
    assert not raw.exists(*keys)


async def test_a_composed_multi_lock_cancelled_anywhere_leaves_nothing_held(
    redlock: list[EmbeddedServer],
) -> None:
    """The same for the composed path (Redlock: one lock per name): the names already taken,
    and one whose grant was in flight, are given back. (A node timeout a loaded machine does
    not outrun: with the default, 50 ms at most, a node's request was abandoned under load and
    its grant, made after the give-back, stayed until its ttl: issue 29's late grants.)"""
    names = ["mcr-1", "mcr-2", "mcr-3"]
    keys = [LockKeys.for_name(n).lock for n in names]
    client = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=0.5)
    probes = [server.client() for server in redlock]
    multi = client.multi_lock(names, ttl=30)

    async def cycle() -> None:
        if await multi.acquire(timeout=5):
            await multi.release()

    try:
        steps = 0
        while not await cancel_after(steps, cycle):
            await settle()
            assert not any(p.exists(*keys) for p in probes), f"left held at step {steps}"
            steps += 1
        assert steps > 6  # the cancellations really fell between the names
    finally:
        for probe in probes:
            probe.close()
        await client.close()


async def test_multi_lock_wait_for_while_waiting_for_a_busy_name_releases_the_others(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    busy = async_client_b.lock("mw-2", ttl=30)
    assert await busy.acquire()
    multi = async_client.multi_lock(["mw-2", "mw-1", "mw-3"], ttl=30)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(multi.acquire(timeout=None), 0.2)  # waits for mw-2
    await settle()
    assert not raw.exists(LockKeys.for_name("mw-1").lock, LockKeys.for_name("mw-3").lock)
    free = async_client_b.lock("mw-1")
    assert await free.acquire(timeout=0)
    await free.release()
    await busy.release()
    assert await multi.acquire(timeout=0)  # the cancelled acquire left the object usable
    await multi.release()


async def test_a_request_past_its_deadline_times_out_whatever_the_task_carries(
    fresh_server: EmbeddedServer,
) -> None:
    # A request's bound is a timer on the caller's task (no task of its own): when it fires, the
    # request raises a timeout, not a cancellation, even in a task that carries a cancellation
    # request never withdrawn (as a caught TaskGroup failure leaves on 3.11/3.12); and it
    # withdraws its own request, leaving the task's count as it was.
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=0.2)
    lock = client.lock("stale", ttl=30)
    assert await lock.acquire(timeout=0)  # (connected, script cached)
    await lock.release()
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(1)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError, match="TimeoutError"):
            await lock.acquire(timeout=0)
        assert task.cancelling() == 1
        await asyncio.sleep(0.01)  # no cancellation left pending for the next await
    finally:
        fresh_server.resume()
    task.uncancel()
    # (the try that timed out may have been granted, after its deadline: it expires by its ttl)
    other = client.lock("other", ttl=30)
    assert await other.acquire(timeout=0)  # the connection that timed out was made anew
    await other.release()
    await client.close()


async def test_a_reply_there_when_the_loop_sees_its_deadline_is_taken(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    """A reply that came in time is read, however late the event loop gets to it (a busy loop,
    a loaded machine): when the loop finds the reply and the passed deadline at once, the reply
    wins. (The deadline's timer cancelled the read first: the reply was taken for a timeout and
    its connection closed. Under load an asyncio Redlock client, whose node timeouts are a few
    ms, then spent its time reconnecting and was granted nothing: the chaos run's redlock5
    scenarios, with two CPU burners.)"""
    conn = redis.asyncio.Connection(port=server.port, client_name="late-loop")
    await conn.connect()
    await conn.send_command("BLPOP", "late-loop", 0)
    reading = asyncio.ensure_future(async_read(conn, time.monotonic()))  # (its deadline: now)
    await asyncio.sleep(0)  # it waits for the reply now
    # the loop held up (sync calls) until the reply is on its way: the loop's next step finds
    # it and the deadline at once
    raw.lpush("late-loop", "in time")

    def answered(c: dict[str, str]) -> bool:
        return c["name"] == "late-loop" and c["cmd"] == "blpop" and "b" not in c["flags"]

    sync_until(lambda: any(answered(c) and c["obl"] == "0" for c in raw.client_list()))
    assert await reading == [b"late-loop", b"in time"]
    await conn.disconnect()


async def test_an_uncontended_cycle_costs_the_loop_two_steps_per_request_and_no_task(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uncontended acquire + release (docs/benchmarks.md, issue 34's P1 asyncio): each of
    its two requests costs the event loop two steps, the reply's read and the caller's wake-up,
    and one timer (its deadline's); no task, shield or other hop of its own. Nothing of
    fencelock's is left to run between the send and the reply: the loop waits for the reply."""
    async with fencelock.asyncio.LockClient.from_url(server.url) as client:
        lock = client.lock("loop-steps", ttl=30)
        for _ in range(2):  # (connected, the scripts loaded, the server checked)
            assert await lock.acquire(timeout=0)
            await lock.release()
        loop = asyncio.get_running_loop()
        counted = {"steps": 0, "tasks": 0, "timers": 0}

        def counter(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
            def counting(*args: Any, **kwargs: Any) -> Any:
                counted[name] += 1
                return call(*args, **kwargs)

            return counting

        for attribute, name in (("_run_once", "steps"), ("create_task", "tasks"),
                                ("call_at", "timers")):  # fmt: skip
            monkeypatch.setattr(loop, attribute, counter(name, getattr(loop, attribute)))
        cycles = 20
        for _ in range(cycles):
            assert await lock.acquire(timeout=0)
            await lock.release()
        monkeypatch.undo()
    assert counted == {"steps": 4 * cycles, "tasks": 0, "timers": 2 * cycles}


def test_asyncio_run_lets_the_clean_ups_of_the_tasks_it_cancels_finish(
    server: EmbeddedServer,
    raw: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``asyncio.run`` cancels the tasks still running when its coroutine returns, then closes
    the loop: a waiter it cancels leaves the queue in Redis (a clean-up in the background, since
    a cancelled caller gets control back at once) before the loop closes. They were destroyed
    pending: the queue entry stayed, and their coroutines raised 'no running event loop' in the
    garbage collector ('never awaited' when they had not started)."""
    keys = LockKeys.for_name("run-ends")
    unraisable = unraisable_errors(monkeypatch)

    async def main() -> None:
        holding = AsyncLockClient.from_url(server.url)
        assert await holding.lock("run-ends", ttl=30).acquire(timeout=0)
        queued = AsyncLockClient.from_url(server.url, wake="one")
        waiting = asyncio.create_task(queued.lock("run-ends", ttl=30).acquire(timeout=30))
        await async_until(lambda: raw.exists(keys.queue) == 1)
        assert not waiting.done()
        # returns with the waiter still waiting, its client and the holder's unclosed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert not raw.exists(keys.queue)  # the waiter left the queue
    assert 0 < raw.pttl(keys.lock) <= 30_000  # the holder's, left to expire
    assert unraisable == []
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert "Task was destroyed" not in caplog.text


def suspended_in(call: asyncio.Future[Any], code: CodeType) -> bool:
    """Whether the task ``call`` is suspended inside a coroutine of ``code``."""
    assert isinstance(call, asyncio.Task)
    awaited: Any = call.get_coro()
    while awaited is not None and getattr(awaited, "cr_code", None) is not code:
        awaited = getattr(awaited, "cr_await", None)
    return awaited is not None


def waiting(call: asyncio.Future[Any]) -> bool:
    """Whether the task ``call`` waits on one of fencelock's events (a wake-up, its turn in the
    local queue, its subscription's confirmation): suspended in fencelock's own code."""
    return suspended_in(call, AsyncEvent.wait.__code__)


def test_a_loop_closed_with_calls_pending_leaves_nothing_raising_in_the_garbage_collector(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop closed without cancelling its tasks (``loop.close()``, unlike ``asyncio.run``),
    every call waiting: the garbage collector closes the calls left suspended inside fencelock
    (each gets ``GeneratorExit``), in any order; here each before those behind it in its local
    queue, which it passes its turn to as it ends. Nothing can run any more: no clean-up may
    start, and none may raise ('no running event loop', 'Event loop is closed', a context
    variable reset in another context). The leases end by themselves. (A call caught inside
    redis-py's own code, making a connection or sending a pub/sub command, is redis-py's:
    its ``disconnect()`` raises 'no running event loop' there.)"""
    unraisable = unraisable_errors(monkeypatch)
    name = "closed-loop"

    tasks: list[asyncio.Future[bool]] = []
    clients: list[AsyncLockClient] = []  # (not collected meanwhile: that closes them)

    async def main() -> None:
        holding, one, other = clients[:] = [
            AsyncLockClient.from_url(server.url),
            AsyncLockClient.from_url(server.url, wake="one"),
            AsyncLockClient.from_url(server.url),
        ]
        assert await holding.lock(name, ttl=30).acquire(timeout=0)
        assert await holding.semaphore(f"{name}-sem", 1, ttl=30).acquire(timeout=0)
        assert await holding.rw_lock(f"{name}-rw").read().acquire(timeout=0)
        assert await holding.election(f"{name}-e").campaign(timeout=0)
        calls = [
            holding.lock(name, ttl=30).acquire(timeout=30),  # in the local queue
            one.lock(name, ttl=30).acquire(timeout=30),  # in the queue in Redis
            one.lock(name, ttl=30).acquire(timeout=30),  # behind it, in the local queue
            other.lock(name, ttl=30).acquire(timeout=30),
            one.semaphore(f"{name}-sem", 1, ttl=30).acquire(timeout=30),
            one.multi_lock([f"{name}-a", name], ttl=30).acquire(timeout=30),
            other.rw_lock(f"{name}-rw").write().acquire(timeout=30),
            other.election(f"{name}-e").campaign(timeout=30),
            other.latch(f"{name}-l", 1).wait(timeout=30),
        ]
        tasks.extend(asyncio.ensure_future(call) for call in calls)
        await async_until(lambda: all(waiting(task) for task in tasks))

    loop = asyncio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (unclosed clients, on purpose)
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        assert [task for task in tasks if task.done()] == []
        for task in tasks:
            assert isinstance(task, asyncio.Task)
            task.get_coro().close()  # as the garbage collector does: it must not raise
        del tasks[:], clients[:], loop  # (the closed loop holds the tasks' last callbacks)
        gc.collect()
    assert unraisable == []


def close_with_requests_in_flight(
    servers: list[EmbeddedServer], connect: Callable[[], AsyncLockClient]
) -> None:
    """Close the loop while ``servers`` hold the requests of an acquire by a client of
    ``connect`` (``CLIENT PAUSE WRITE``), then the acquire, as the garbage collector closes it."""
    probes = [srv.client() for srv in servers]
    clients: list[AsyncLockClient] = []  # (not collected meanwhile: that closes it)

    async def main() -> asyncio.Future[bool]:
        client = connect()
        clients.append(client)
        lock = client.lock("in-flight", ttl=30)
        assert await lock.acquire(timeout=0)  # (connected, script cached)
        await lock.release()
        for probe in probes:
            probe.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        asking = asyncio.ensure_future(client.lock("in-flight", ttl=30).acquire(timeout=30))
        await async_until(lambda: all(p.info("clients")["blocked_clients"] for p in probes))
        return asking

    loop = asyncio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (an unclosed client, on purpose)
        try:
            asking = loop.run_until_complete(main())
        finally:
            loop.close()
            for probe in probes:
                probe.execute_command("CLIENT", "UNPAUSE")
                probe.close()
        asking.get_coro().close()  # as the garbage collector does: it must not raise
        del asking, clients[:], loop
        gc.collect()


def test_a_loop_closed_with_a_request_in_flight_leaves_nothing_raising_in_the_garbage_collector(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server holds the request when the loop is closed: the call, closed as the garbage
    collector closes it, starts no give-back and leaves its connection to be collected
    (redis-py's ``disconnect()`` needs a running loop: it raised 'no running event loop', and
    the give-back started on no loop raised 'coroutine ignored GeneratorExit')."""
    unraisable = unraisable_errors(monkeypatch)
    close_with_requests_in_flight([server], lambda: AsyncLockClient.from_url(server.url))
    assert unraisable == []


def test_a_loop_closed_with_a_redlock_fan_out_in_flight_leaves_nothing_raising_there(
    redlock: list[EmbeddedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the requests of a Redlock fan-out in flight, one per node."""
    unraisable = unraisable_errors(monkeypatch)
    urls = [srv.url for srv in redlock]
    close_with_requests_in_flight(redlock, lambda: AsyncLockClient.from_url(urls, node_timeout=10))
    assert unraisable == []


def test_a_loop_closed_as_a_call_makes_its_connection_leaves_only_redis_py_raising(
    fresh_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stopped, a call's first request waits in redis-py's handshake of its
    connection when the loop is closed. Closing the call there (as the garbage collector does)
    makes redis-py's ``disconnect()`` raise 'no running event loop', which fencelock cannot
    prevent; fencelock adds nothing to it: no second disconnect, no give-back (started on no
    loop, it raised 'coroutine ignored GeneratorExit' instead)."""
    unraisable = unraisable_errors(monkeypatch)
    handshake = async_select_checked(None).__code__  # fencelock's, around redis-py's handshake

    async def main() -> asyncio.Future[bool]:
        client = AsyncLockClient.from_url(fresh_server.url)
        asking = asyncio.ensure_future(client.lock("connecting", ttl=30).acquire(timeout=30))
        await async_until(lambda: suspended_in(asking, handshake))  # (no reply comes)
        return asking

    fresh_server.pause()
    loop = asyncio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (an unclosed client, on purpose)
        try:
            asking = loop.run_until_complete(main())
        finally:
            loop.close()
            fresh_server.resume()
        try:
            asking.get_coro().close()  # as the garbage collector does
        except RuntimeError as exc:  # redis-py's own disconnect(), closed on the way
            assert str(exc) == "no running event loop"
        del asking, loop
        gc.collect()
    assert unraisable == []
