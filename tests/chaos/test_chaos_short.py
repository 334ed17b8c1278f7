"""The short chaos run (``python -m bench.chaos --short``), one test per scenario of the fault
matrix (bench/chaos/scenarios.py), against real servers, worker processes and a nemesis.

Each test asserts what fencelock promises in its scenario (``report.violations``): in every
scenario no stale write accepted, no orphaned lock, no unsignalled loss of an ``auto_renew``
lock (sync or asyncio), a loss of an ``async_cancel`` lock (asyncio, ``on_lost_policy="cancel"``)
that cancels its block, which ends with ``LockLost``; per scenario no overlap, a failing
``check()`` after a pause, a refused write of an overtaken holder, a crashed holder's lock free
within its ttl, an asyncio holder whose event loop is blocked for 3 ttls that keeps its lease
(and whose stall is reported), every lock granted again within half a ttl of the resume of a
server hung past the request timeout (what it granted late is given back). Overlaps that are
expected (a paused holder, a server restarted empty, a failover, a clock jump) are reported,
not asserted: docs/safety.md says which and why.

The chaos suite runs on one server kind (the first of those tested: redis when the system has
redis-server, else valkey; FENCELOCK_TEST_SERVERS=valkey,redis puts valkey first) to keep within
CI's time: about 4 minutes for all scenarios on 2 vCPUs (the three holder-loop-block ones: 16 s;
the four fence sinks' holder-pause: about 50 s).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.chaos import report
from bench.chaos.runner import Lab, run_scenario
from bench.chaos.scenarios import SCENARIOS, SHORT, Scenario
from tests.conftest import KINDS, _binary

# Violations that a known library bug causes: (scenario, or "" for any, text in the violation,
# the bug). They are shown as xfail, not hidden; any other violation in these scenarios still
# fails the test. Earlier rows found bugs since fixed, and their scenarios guard the fixes:
# redlock5/*-redis-objects (eaeb97e), single/slow-network's late on_lost (77ce024, 6dcbfdc) and
# async_cancel's pending self-cancellation (93e699e).
KNOWN_BUGS: list[tuple[str, str, str]] = [
    # seen twice on Cluster (holder-pause, and a first grant lost at once), rare: the loss is
    # declared while the worker's GET of the counter is being sent
    (
        "",
        "read at",
        'on_lost_policy="cancel" on Python 3.11: a cancellation that lands while the block '
        "sends a redis.asyncio request is swallowed (redis-py sends through asyncio.wait_for, "
        "which on 3.11 returns a send completed in the same step instead of raising), so the "
        "block runs on after its loss until check() or its exit; not on 3.12",
    ),
]


def chaos_binary() -> str:
    return _binary(KINDS[0])  # one kind only, to keep within CI's time


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with Lab(chaos_binary()) as built:
        yield built


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_short_run(scenario: Scenario, lab: Lab) -> None:
    result = run_scenario(scenario, SHORT, lab)
    if result.skipped:
        pytest.skip(result.skipped)
    broken = report.violations(result)
    known = [(text, bug) for name, text, bug in KNOWN_BUGS if name in ("", scenario.name)]
    unexpected = [line for line in broken if not any(text in line for text, _ in known)]
    assert not unexpected, "\n".join([*unexpected, report.details(result)])
    if broken:
        bugs = {bug for text, bug in known if any(text in line for line in broken)}
        pytest.xfail(f"known library bug: {'; '.join(sorted(bugs))}; seen: {broken[0]}")
    assert result.report.names, "no history"
