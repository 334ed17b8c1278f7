"""AsyncDetached: what happens to the clean-up of a call that failed, without a server."""

from __future__ import annotations

import asyncio

import pytest

from fencelock._backend import AsyncDetached


def test_asyncio_run_waits_for_a_clean_up_started_as_it_cancels_the_tasks_left() -> None:
    """``asyncio.run`` cancels what is still running, then closes the loop: a clean-up started
    by that cancellation (in the background) still runs to its end first."""
    detached = AsyncDetached(timeout=5)
    done: list[str] = []

    async def clean_up() -> None:
        await asyncio.sleep(0.01)  # (a request: it outlives the cancellation of every task)
        done.append("given back")

    async def call() -> None:
        try:
            await asyncio.sleep(3600)
        except BaseException as error:
            await detached.clean_up(clean_up(), error)
            raise

    async def main() -> None:
        asyncio.create_task(call())  # noqa: RUF006 (left running on purpose)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert done == ["given back"]


def test_a_clean_up_runs_in_the_call_when_it_failed_otherwise() -> None:
    detached = AsyncDetached(timeout=5)
    done: list[str] = []

    async def clean_up() -> None:
        await asyncio.sleep(0)
        done.append("given back")

    async def main() -> None:
        await detached.clean_up(clean_up(), OSError("refused"))
        assert done == ["given back"]  # (before the caller goes on)
        await detached.close()

    asyncio.run(main())


def test_a_call_closed_for_good_starts_no_clean_up() -> None:
    """``GeneratorExit``: the garbage collector closes a call whose loop is gone. The clean-up
    is closed unstarted (no 'never awaited' warning), and nothing is scheduled."""
    detached = AsyncDetached(timeout=5)

    async def clean_up() -> None:
        raise AssertionError("ran")

    step = detached.clean_up(clean_up(), GeneratorExit())
    with pytest.raises(StopIteration):
        step.send(None)  # done in one step, with no loop at all


def test_close_waits_for_the_clean_ups_within_its_timeout_and_cancels_the_rest() -> None:
    detached = AsyncDetached(timeout=0.05)
    outcomes: list[str] = []

    async def quick() -> None:
        await asyncio.sleep(0)
        outcomes.append("quick")

    async def hung() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            outcomes.append("hung cancelled")
            raise

    async def main() -> None:
        for aw in (quick(), hung()):
            await detached.clean_up(aw, asyncio.CancelledError())
        await detached.close()
        await asyncio.sleep(0)  # (the cancelled one ends)
        assert sorted(outcomes) == ["hung cancelled", "quick"]

    asyncio.run(main())


def test_a_call_closed_for_good_starts_no_clean_up_whatever_the_code_below_raised() -> None:
    """The garbage collector closes a call suspended in redis-py's code: redis-py's
    ``disconnect()`` raises 'no running event loop' on the way up, instead of ``GeneratorExit``.
    No loop runs: the clean-up is closed unstarted all the same (it was started on no loop at
    all, and the call then yielded in the collector: 'coroutine ignored GeneratorExit')."""
    detached = AsyncDetached(timeout=5)

    async def clean_up() -> None:
        raise AssertionError("ran")

    step = detached.clean_up(clean_up(), RuntimeError("no running event loop"))
    with pytest.raises(StopIteration):
        step.send(None)  # done in one step, with no loop at all
