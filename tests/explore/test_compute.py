"""The explorer's compute-once configuration (tests/sim/compute.py): explored within the CI
budget by test_explore.py like every configuration; here, proof that its checks bite (each
mutant found within the CI budget), and the one schedule the budget cannot reach, forced."""

from __future__ import annotations

import pytest

from tests.sim.compute import MUTANTS, ComputeScenario, MethodMutant
from tests.sim.explore import CI, SPECS, Exhaustive, Outcome, report, run
from tests.sim.loop import DROPPED_AT_HORIZON
from tests.sim.mutants import Mutant
from tests.sim.scenario import Plan, Spec
from tests.sim.world import Option, World

pytestmark = [pytest.mark.filterwarnings(f) for f in DROPPED_AT_HORIZON]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_compute_configuration_finds_the_mutant(mutant: Mutant | MethodMutant) -> None:
    with mutant.functions_patched():
        explorer = Exhaustive(SPECS[mutant.config], CI["k"], patches=mutant.patches())
        found = explorer.explore()
    assert found is not None, f"{mutant.name}: not found in {explorer.runs} schedules"
    assert found.violation is not None


class AcquireAfterTheStore:
    """The default schedule, except that p1's try at the builder's lease stays in flight until
    p0, which built meanwhile, has released it: p1 looked before the result was stored, and
    gets the lease after."""

    def __init__(self) -> None:
        self.released = False

    def choose(self, world: World, options: list[Option]) -> int:
        for index, option in enumerate(options):
            held_back = option.label.startswith("p1->s0 EVALSHA acquire") and not self.released
            if not held_back:
                self.released |= option.label.startswith("p0->s0 EVALSHA release")
                return index
        raise AssertionError("nothing but the held-back acquire to do")


QUICK = Plan(kind="compute", rounds=1, work=0.1)  # over within the try's request timeout
RACE = Spec("compute-race", ((QUICK,), (QUICK,)), scenario=ComputeScenario)


def relook_race() -> Outcome:
    return run(RACE, AcquireAfterTheStore())


def test_a_caller_that_takes_the_lease_after_a_store_builds_nothing() -> None:
    outcome = relook_race()
    assert outcome.violation is None, report(outcome)
    assert any("p1: returned 'p0#1'" in line for line in outcome.log)
    assert not any("p1: builds" in line for line in outcome.log)


def test_without_its_look_under_the_lease_it_would_build_twice() -> None:
    mutant = MethodMutant(
        "compute-no-look-under-the-lease",
        "a builder does not look again once it holds the lease",
        "_build",
        "if _next(found, call, None) is Step.HIT:",
        "if False:",
    )
    with mutant.functions_patched():
        outcome = relook_race()
    assert outcome.violation is not None and outcome.violation.check == "builds", report(outcome)
