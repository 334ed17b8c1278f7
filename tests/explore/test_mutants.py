"""Proof that the explorer bites (issue 25, part 5; issue 29): past fixes undone, scripts
broken and the watchdog's renewal and loss path broken (``tests/sim/mutants.py``), each found
by the exhaustive search within the CI budget, in a configuration in which today's code passes
the same budget (test_explore.py)."""

from __future__ import annotations

import pytest

from tests.sim.explore import CI, SPECS, Exhaustive
from tests.sim.loop import DROPPED_AT_HORIZON
from tests.sim.mutants import MUTANTS, Mutant

pytestmark = [pytest.mark.filterwarnings(f) for f in DROPPED_AT_HORIZON]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_explorer_finds_the_mutant(mutant: Mutant) -> None:
    with mutant.functions_patched():
        explorer = Exhaustive(SPECS[mutant.config], CI["k"], patches=mutant.patches())
        found = explorer.explore()
    assert found is not None, f"{mutant.name}: not found in {explorer.runs} schedules"
    assert found.violation is not None


def test_a_mutant_is_patched_in_for_its_run_only() -> None:
    def current() -> list[tuple[object, object]]:
        """Each mutated function where it is called, and its module's own name for it."""
        return [(getattr(o, n), vars(h).get(n)) for m in MUTANTS for o, n, h, *_ in m.functions]

    before = current()
    for mutant in MUTANTS:
        with mutant.functions_patched():
            mutant.patches()
            assert current() != before or not mutant.functions
    assert current() == before
