"""The bounded run of ``python -m bench.reshard`` (``--quick``): 10 names, 40 waiters in two
processes (sync and asyncio), holders releasing as they go, while the names' slots move to other
masters and back and their master fails over by hand. On one server kind, as the chaos run.

The waiters' clients count how their waits ended: by a message (or their slot's move) or by a
timer, which is only the end of the holder's lease here (a ttl of a minute, renewed; nobody
holds for more than 0.3 s). A waiter that missed a release because its slot moved waits for
that timer: before waiters followed their slot, the same run (with a ttl of 10 s) counted 14
such polls, and waits of up to 9 s."""

from __future__ import annotations

from collections import Counter

from bench import reshard
from bench.chaos.checker import Grant
from tests.conftest import KINDS, _binary


def test_waiters_follow_a_cluster_that_changes_under_them() -> None:
    result = reshard.run(reshard.QUICK, _binary(KINDS[0]))
    assert result.broken() == [], reshard.markdown([result])
    assert {part["asyncio"] for part in result.stats.values()} == {False, True}
    assert all(part["acquired"] > 0 for part in result.stats.values())
    assert sum(part["polls"] for part in result.stats.values()) == 0, reshard.markdown([result])
    moved = Counter(fault.split()[2] for fault in result.faults if fault.startswith("move slot"))
    assert 2 in moved.values()  # a slot moved away, then back
    assert any("CLUSTER FAILOVER" in fault for fault in result.faults)


def _grant(
    worker: str, requested: float, start: float, end: float, released: bool, name: str = "n"
) -> Grant:
    return Grant(worker, name, 1, requested, start, end, "release", released)


def test_wake_latencies_count_from_the_release_or_when_the_slot_was_served_again() -> None:
    n, m = reshard.slot_of("n"), reshard.slot_of("m")
    grants = [
        _grant("p0-w0", 0.0, 0.0, 1.0, True),
        _grant("p1-w1", 0.5, 1.2, 2.0, True),  # waited: 0.2 s after the release
        _grant("p1-w3", 1.5, 2.1, 3.0, False),  # waited: 0.1 s; its release failed
        _grant("p0-w0", 2.5, 9.0, 10.0, True),  # after a failed release: the lease freed it
        _grant("p0-w2", 10.5, 10.6, 11.0, True),  # asked after the release: did not wait
        _grant("p1-w1", 10.8, 13.5, 14.0, True),  # freed while its master was down
        _grant("p0-w4", 10.0, 13.0, 13.2, True, "m"),  # its master's first grant after the kill
        _grant("p0-w2", 13.8, 14.9, 15.0, True),  # freed while its slot moved: from the release
    ]
    changes = [
        reshard.Change(reshard.KILL, 10.9, 13.8, frozenset({n, m})),  # (promotion seen late)
        reshard.Change(reshard.MOVE, 13.9, 14.5, frozenset({n})),
        reshard.Change(reshard.MOVE, 0.0, 5.0, frozenset({n + 1})),  # another slot's
    ]
    latencies, by_lease = reshard.wake_latencies(grants, changes)
    rounded = {what: [round(s, 3) for s in values] for what, values in latencies.items()}
    assert rounded == {
        reshard.STEADY: [0.2, 0.1],
        reshard.KILL: [0.5],
        reshard.MOVE: [0.9],
        reshard.FAILOVER: [],
    }
    assert by_lease == 1
