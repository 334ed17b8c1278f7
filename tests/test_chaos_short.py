"""The short chaos run (``python -m bench.chaos --short``), one test per scenario of the fault
matrix (bench/chaos/scenarios.py), against real servers, worker processes and a nemesis.

Each test asserts what fencelock promises in its scenario (``report.violations``): in every
scenario no stale write accepted, no orphaned lock, no unsignalled loss of an ``auto_renew``
lock (sync or asyncio), a loss of an ``async_cancel`` lock (asyncio, ``on_lost_policy="cancel"``)
that cancels its block, which ends with ``LockLost``; per scenario no overlap, a failing
``check()`` after a pause, a refused write of an overtaken holder, a crashed holder's lock free
within its ttl. Overlaps that are expected (a paused holder, a server restarted empty, a
failover, a clock jump) are reported, not asserted: docs/safety.md says which and why.

The chaos suite runs on one server kind (the first of FENCELOCK_TEST_SERVERS, default redis)
to keep within CI's time: about 2.5 minutes for all scenarios on 2 vCPUs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from bench.chaos import report
from bench.chaos.runner import Lab, run_scenario
from bench.chaos.scenarios import NO_OVERLAP, SCENARIOS, SHORT, Scenario
from tests.conftest import KINDS, _binary

# Violations that a known library bug causes: (scenario, or "" for any, text in the violation,
# the bug). They are shown as xfail, not hidden; any other violation in these scenarios still
# fails the test. (The rows redlock5/*-redis-objects found a bug fixed in eaeb97e: they now
# guard the fix.)
LATE_ON_LOST = (
    "the watchdog blocked in a renewal to a black-holed server calls on_lost only when the "
    "request times out, not at the local lease deadline (check() is right all along)"
)
PENDING_CANCEL = (
    "asyncio before Python 3.13, on_lost_policy='cancel': a loss that check() declares from "
    "the block's own task cancels that task; __aexit__'s Task.uncancel() does not clear the "
    "pending cancellation before 3.13, so it lands in the release (unless redis-py's wait_for "
    "swallows it, as on an open single-server connection): the block ends with CancelledError "
    "instead of LockLost"
)
KNOWN_BUGS = [
    ("single/slow-network", f" auto_renew: {NO_OVERLAP}:", LATE_ON_LOST),
    ("single/slow-network", f" async_cancel: {NO_OVERLAP}:", LATE_ON_LOST),  # the same watchdog
]
if sys.version_info < (3, 13):  # seen in redlock5/holder-pause; any pause or outage can do it
    KNOWN_BUGS.append(("", "the block ended with CancelledError, not LockLost", PENDING_CANCEL))


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
