"""``bench.regress``'s table from collected figures alone (no server, no run)."""

from __future__ import annotations

from bench.regress import ROWS
from bench.regress.report import Results, floor_noise


def test_a_floor_that_ran_no_cycle_in_a_round_is_left_out_of_the_floors_noise() -> None:
    # (a starved machine: P3's floor once counted 0 cycles, and the report raised
    # ZeroDivisionError instead of writing its table)
    row = next(r for r in ROWS if r.workload == "P1")
    results = Results(rows=[row])
    for old, new in ((100.0, 110.0), (0.0, 90.0), (100.0, 90.0)):
        results.add(row.key, {"old": {"floor": [old]}, "new": {"floor": [new]}})
    spread = floor_noise(results)
    assert (spread.low, spread.high) == (0.9, 1.1)
