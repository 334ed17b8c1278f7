"""AsyncEvent at the end of its loop, without a server. A loop closed without cancelling its
tasks (``loop.close()``, unlike ``asyncio.run``) leaves the waits in it to the garbage
collector, which closes them (``GeneratorExit``) in any order: nothing may raise then, nor be
left never started. The tests close them as the collector would, in the order that matters."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from fencelock._backend import AsyncEvent


def test_a_wait_begun_in_the_last_step_of_its_loop_leaves_nothing_never_started() -> None:
    event = AsyncEvent()
    loop = asyncio.new_event_loop()
    waiting = loop.create_task(event.wait(None))
    loop.call_soon(loop.stop)  # the loop's last step: the wait's first one, and nothing after it
    loop.run_forever()
    loop.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        waiting.get_coro().close()
        del waiting
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_a_call_closed_in_a_closed_loop_wakes_another_there_without_raising() -> None:
    """A call closed by the garbage collector may pass its turn on as it ends (to the next in
    the local queue, waiting on its event): the loop is closed, nothing is scheduled, nothing
    raises ('Event loop is closed'); the event is set, for what it is worth."""
    event = AsyncEvent()
    loop = asyncio.new_event_loop()
    waiting = loop.create_task(event.wait(None))
    for _ in range(3):  # (the wait is under way)
        loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    event.set()
    assert event.is_set()
    waiting.get_coro().close()


def test_a_wait_is_woken_by_set_and_ends_at_its_timeout_otherwise() -> None:
    async def main() -> None:
        event = AsyncEvent()
        assert not await event.wait(0)
        woken = asyncio.ensure_future(event.wait(None))
        await asyncio.sleep(0)
        assert not woken.done()
        event.set()
        assert await woken
        assert await event.wait(None)  # (set: at once)
        event.clear()
        assert not event.is_set()
        assert not await event.wait(0.001)

    asyncio.run(main())


@pytest.mark.parametrize("woken_by", ["set", "timer"])
def test_a_cancellation_in_the_step_the_wait_ends_is_raised(woken_by: str) -> None:
    """The wait ends (set(), or its timer fires) and its task is cancelled before it runs
    again: the cancellation is raised, not swallowed (as asyncio.timeout()/wait_for() can on
    Python 3.11: a waiter that ignored it could take the lock)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers: list[tuple[Callable[..., object], tuple[object, ...]]] = []
        later = loop.call_later

        def held(delay: float, callback: Callable[..., object], *args: object) -> Any:
            timers.append((callback, args))  # fired below, by hand
            return later(3600, callback, *args)

        loop.call_later = held  # type: ignore[method-assign]
        event = AsyncEvent()
        waiting = loop.create_task(event.wait(1.0))
        await asyncio.sleep(0)  # (suspended in the wait)
        if woken_by == "set":
            event.set()
        else:
            [(callback, args)] = timers
            callback(*args)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
