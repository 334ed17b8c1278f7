"""Running the real lock code in the simulation without exploring: ``simulate`` runs a few
processes, each an ``async def`` given its ``SimClient``, to their end on the default schedule
(every message delivered in the order sent, time moved only when nothing is in flight), or on
a test's own ``chooser`` (tests/engine/test_engine.py's ``LateReplies``). A test
reads the outcome from the world (its log, its servers) and from what its processes recorded;
an assertion that fails in a process fails the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from .loop import deterministic, virtual_monotonic
from .topology import SimClient, sim_client
from .world import Chooser, Option, World

Main = Callable[[SimClient], Awaitable[Any]]


class _Default:
    def choose(self, world: World, options: list[Option]) -> int:
        return 0


@contextlib.contextmanager
def running(world: World) -> Iterator[None]:
    """The library on the world's clock, with its randomness fixed."""
    with virtual_monotonic(world.clock), deterministic(0):
        yield


def simulate(
    *mains: Main,
    world: World | None = None,
    max_steps: int = 10_000,
    chooser: Chooser | None = None,
    **client: Any,
) -> World:
    """Run one process per ``main`` (named p0, p1...) until every one has returned, and raise
    the first error one raised. ``chooser``: the schedule (default: the default one);
    ``client``: ``sim_client``'s options."""
    world = world or World()
    chooser = chooser or _Default()
    tasks = []
    for i, main in enumerate(mains):
        process = world.process(f"p{i}")

        async def run(process: Any = process, main: Main = main) -> Any:
            sim = sim_client(world, process, **client)
            try:
                return await main(sim)
            finally:
                await sim.close()

        world.start(process, run())
        tasks.append(process.main)
    with running(world):
        try:
            steps = 0
            while world.step(chooser, stop=lambda: all(p.done for p in world.processes)):
                steps += 1
                if steps > max_steps:
                    raise AssertionError(f"no end after {max_steps} steps")
            for task in tasks:
                assert task is not None
                if not task.done():
                    raise AssertionError("a process never ended: nothing could happen")
                task.result()
        finally:
            world.close()
    return world
