"""``python -m bench.compare``'s issue-34 figures, rendered from made-up results (no server): the
ratios to redis-py's Lock and to the minimum beside the costs per cycle, and the goals."""

from __future__ import annotations

from bench.compare import goals, render
from bench.compare.run import CycleCosts, Results
from bench.footprint import Footprint
from bench.trips import Costs
from fencelock_tools.benchmark import HandoffResult, HandoffRun, Sample, Variant


def variant(name: str, *rates: float) -> Variant:
    made = Variant(name, lambda seconds: Sample(0.0, 0.0))
    made.samples = [Sample(rate, 100.0) for rate in rates]
    return made


def results() -> Results:
    found = Results()
    found.p1 = [
        variant("fencelock sync", 900, 1100),
        variant("redis-py Lock sync", 1000, 1000),
        variant("minimal sync", 1200, 1200),
    ]
    found.costs["P1 fencelock sync"] = CycleCosts([Costs(1000, 100, 70, 10)] * 2, 2.0)
    found.footprints = {
        "fencelock": Footprint(10_000, 325.0, 2.0, 192.0, 1.0),
        "redis-py Lock": Footprint(10_000, 182.0, 1.0, 0.0, 0.0),
    }
    return found


def test_p1_is_rendered_against_the_minimum_and_redis_pys_lock() -> None:
    r = results()
    lines = render.rate_table(
        r.p1,
        {"sync": "minimal sync", "async": "minimal async"},
        r.costs,
        "P1",
        {"sync": "redis-py Lock sync", "async": "redis-py Lock async"},
    )
    assert lines[0].endswith("| / minimal (per-run median) | / redis-py Lock (per-run median) |")
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells[0] == "fencelock sync"
    # server CPU, server commands and round trips per cycle, then the two ratios
    assert cells[7:] == ["70", "10.0", "2", "0.83 (0.83)", "1.00 (1.00)"]
    unmeasured = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert unmeasured[7:10] == ["-", "-", "?"]  # no costs recorded for it


def test_issue_34s_goals_are_judged_on_the_figures() -> None:
    found = {(g.workload, g.goal): g for g in goals.goals_34(results())}
    assert found["P1", "sync >= 1x redis-py Lock sync"].met is True  # 1000 against 1000
    assert found["P1", "sync >= 0.95x minimal sync"].met is False  # 0.83x
    memory = found["memory", "per held lock <= redis-py's Lock (used_memory)"]
    assert memory.met is False and memory.figure.startswith("1.79x (325 B, 2.00 keys")
    assert found["memory", "0 once idle (right after the release)"].met is False
    assert found["P1a", "asyncio >= 1x redis-py Lock async"].met is None  # not measured


def handoffs(label: str, acquisitions: int) -> HandoffResult:
    run = HandoffRun(1.0, acquisitions, acquisitions, acquisitions, [1.0], [0.001], 0, 0)
    return HandoffResult(label, 4, 0.001, [run])


def test_the_barging_locks_throughput_is_judged_against_python_redis_locks() -> None:
    r = results()
    r.p2 = [handoffs("python-redis-lock", 1000), handoffs("fencelock fair=False", 1100)]
    found = {(g.workload, g.goal): g for g in goals.goals_34(r)}
    barging = found["P2", "barging: throughput >= 1.0x python-redis-lock's"]
    assert barging.met is True and barging.figure == "1.10x (1,100/s)"
    r.p2[1] = handoffs("fencelock fair=False", 900)
    found = {(g.workload, g.goal): g for g in goals.goals_34(r)}
    assert found["P2", "barging: throughput >= 1.0x python-redis-lock's"].met is False
