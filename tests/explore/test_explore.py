"""The explorer's CI budget (issue 25): every configuration explored exhaustively (every
schedule with at most one fault, at any step, and no departure from the default order), then
with seeded random runs of up to three faults. A violation fails with the
schedule that replays it (``python -m tests.sim.explore --replay ...``) and the run step by step.
"""

from __future__ import annotations

import pytest

from tests.sim.explore import CI, SPECS, Default, Randomly, Replay, measure, report, run
from tests.sim.loop import DROPPED_AT_HORIZON

pytestmark = [pytest.mark.filterwarnings(f) for f in DROPPED_AT_HORIZON]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_no_schedule_within_the_budget_breaks_a_promise(name: str) -> None:
    figures, found = measure(SPECS[name], **CI)
    assert not found, report(found[0])
    assert figures.complete
    assert figures.seeds == CI["seeds"]


def test_a_schedule_replays_exactly() -> None:
    spec = SPECS["handoff"]
    first = run(spec, Replay({5: 1, 9: 2}))
    again = run(spec, Replay({5: 1, 9: 2}))
    assert first.log == again.log
    assert first.log != run(spec, Default()).log  # (the schedule made a difference)


@pytest.mark.parametrize(("name", "seed"), [("semaphore", 1480), ("rwlock", 659)])
def test_a_waiter_queued_behind_a_paused_one_waits_out_its_turn(name: str, seed: int) -> None:
    """The queued waiter ahead is paused: first come, first served, the next one waits until
    the paused one's turn ends, as behind a slow one. The checker once counted that as a
    waiter left waiting while the name was free."""
    outcome = run(SPECS[name], Randomly(seed), faults=3, seed=seed)
    assert outcome.violation is None, report(outcome)
    assert any(fault.startswith("pause") for fault in outcome.faults)
