"""The chaos checker on hand-made histories: each check has histories that must pass and
histories that must fail (bench/chaos/checker.py, and the promises of bench/chaos/report.py;
no server needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import checker, report
from bench.chaos import history as h
from bench.chaos.history import Event
from bench.chaos.runner import Result
from bench.chaos.scenarios import ALWAYS, BY_NAME, FENCED, KEPT, NO_OVERLAP, STALL_REPORTED

NAME = "job"


class Story:
    """A history written step by step: ``s.acquire("w1", 1, at=0.0)`` and so on."""

    def __init__(self, ttl_ms: int = 1000, kind: str = "default") -> None:
        self.events: list[Event] = [
            Event(0.0, h.HARNESS, h.CONFIG, NAME, value=ttl_ms, detail=kind)
        ]
        self.tokens: dict[str, int] = {}

    def add(self, t: float, worker: str, kind: str, **fields: Any) -> Story:
        fields.setdefault("name", NAME)
        if worker in self.tokens and "token" not in fields and kind not in (h.KILLED, h.EXIT):
            fields["token"] = self.tokens[worker]
        self.events.append(Event(t, worker, kind, **fields))
        return self

    def acquire(
        self,
        worker: str,
        token: int,
        at: float,
        asked: float | None = None,
        until: float | None = None,
    ) -> Story:
        self.tokens[worker] = token
        t0 = at if asked is None else asked
        return self.add(at, worker, h.ACQUIRE, token=token, t0=t0, until=until)

    def write(self, worker: str, value: int, at: float, outcome: str = h.WRITE_ACCEPTED) -> Story:
        self.add(at, worker, h.WRITE_ATTEMPT, value=value)
        return self.add(at + 0.001, worker, outcome, value=value, t0=at)

    def release(self, worker: str, at: float, error: str = "") -> Story:
        self.add(at, worker, h.RELEASE)
        if error:
            return self.add(at + 0.001, worker, h.RELEASE_FAILED, detail=error)
        return self.add(at + 0.001, worker, h.RELEASED)

    def cycle(self, worker: str, token: int, start: float, value: int) -> Story:
        """A clean critical section: acquire, read, check, write value, release."""
        self.acquire(worker, token, start)
        self.add(start + 0.01, worker, h.READ, value=value - 1)
        self.add(start + 0.02, worker, h.CHECK_PASSED)
        self.write(worker, value, start + 0.03)
        return self.release(worker, start + 0.05)

    def final(self, value: int, pttl: int = -2, waited_ms: int = 0) -> Story:
        end = max(e.t for e in self.events) + 1
        self.add(end, h.HARNESS, h.FINAL_VALUE, value=value)
        self.add(end, h.HARNESS, h.FINAL_KEY, value=pttl, detail="node0")
        return self.add(end, h.HARNESS, h.FINAL_ACQUIRE, value=waited_ms)

    def report(self) -> checker.NameReport:
        return checker.check(self.events).names[NAME]


def clean(n: int = 3) -> Story:
    s = Story()
    for i in range(n):
        s.cycle(f"w{i % 2}", i + 1, i * 0.1, i + 1)
    return s.final(n)


def assert_clean(r: checker.NameReport) -> None:
    assert r.overlaps == []
    assert r.stale_accepted == []
    assert r.lost_updates == 0
    assert r.losses == []
    assert r.orphaned == []
    assert r.token_regressions == []
    assert r.late_checks == []


# -- passing histories ---------------------------------------------------------------------------


def test_sequential_holders_pass_every_check() -> None:
    r = clean(4).report()
    assert_clean(r)
    assert r.acquisitions == 4
    assert r.count(h.WRITE_ACCEPTED) == 4
    assert r.final_value == 4
    assert r.ttl == 1.0 and r.kind == "default"


def test_touching_intervals_are_not_an_overlap() -> None:
    # w1 is granted exactly when w0 calls release: release first, then the grant (in time order)
    s = Story().acquire("w0", 1, 0.0).release("w0", 0.5).acquire("w1", 2, 0.5, asked=0.2)
    assert s.report().overlaps == []


def test_waiting_for_the_lock_is_not_holding_it() -> None:
    # w1 asked while w0 held; its grant came after the release: no overlap, no loss
    s = Story().acquire("w0", 1, 0.0).release("w0", 0.4).acquire("w1", 2, 0.45, asked=0.1)
    s.release("w1", 0.6).final(0)
    assert_clean(s.report())


def test_a_killed_holder_stops_believing_and_is_no_loss() -> None:
    s = Story().acquire("w0", 1, 0.0).add(0.1, "w0", h.KILLED, detail="nemesis")
    s.acquire("w1", 2, 1.0, asked=0.05).write("w1", 1, 1.1).release("w1", 1.2).final(1)
    r = s.report()
    assert_clean(r)
    assert [g.ended_by for g in checker.grants(s.events)] == ["killed", "release"]


def test_a_holder_that_learns_of_its_loss_stops_believing() -> None:
    # w0 told by on_lost at 0.9, w1 granted at 1.0: w0 kept holding the object, not the belief
    s = Story(kind="auto_renew").acquire("w0", 1, 0.0).add(0.9, "w0", h.LOST)
    s.acquire("w1", 2, 1.0).release("w1", 1.2).release("w0", 1.5, error="LockLost").final(0)
    r = s.report()
    assert r.overlaps == []
    assert len(r.losses) == 1 and r.losses[0].signalled == checker.IN_TIME
    assert r.unsignalled == []


def test_refused_stale_write_is_not_a_stale_write_accepted() -> None:
    s = Story().acquire("w0", 1, 0.0)
    s.acquire("w1", 2, 1.2).write("w1", 1, 1.3).release("w1", 1.4)
    s.write("w0", 1, 2.0, outcome=h.WRITE_REFUSED).release("w0", 2.1, error="LockLost")
    s.final(1)
    r = s.report()
    assert r.stale_accepted == []
    assert len(r.overlaps) == 1  # the pause: expected, and harmless
    assert [w.worker for w in r.superseded_refused] == ["w0"]
    assert r.superseded_accepted == []
    assert r.lost_updates == 0
    assert r.losses[0].signalled == checker.IN_TIME  # the refused write told it


def test_a_write_paused_in_flight_and_refused_is_an_overtaken_write_refused() -> None:
    # w0 recorded its write as sent at 0.5, was stopped before the request left, and its write
    # reached the resource after w1's grant and write: refused (seen in holder-pause-http)
    s = Story().acquire("w0", 1, 0.0)
    s.add(0.5, "w0", h.WRITE_ATTEMPT, value=1)
    s.acquire("w1", 2, 1.2).write("w1", 1, 1.3).release("w1", 1.4)
    s.add(3.3, "w0", h.WRITE_REFUSED, value=1, t0=0.5).release("w0", 3.4, error="LockLost")
    r = s.final(1).report()
    assert [w.worker for w in r.superseded_refused] == ["w0"]
    assert r.refused_not_superseded == []


def test_same_token_written_twice_by_its_grant_is_fine() -> None:
    s = Story().acquire("w0", 1, 0.0).write("w0", 1, 0.1).write("w0", 2, 0.2).release("w0", 0.3)
    r = s.final(2).report()
    assert_clean(r)


def test_recovery_after_a_holder_crash_is_measured_from_the_kill() -> None:
    s = Story().acquire("w0", 1, 0.0)
    s.add(0.2, h.NEMESIS, h.FAULT_START, value=1, scope=h.HOLDER, detail="kill w0")
    s.add(0.2, "w0", h.KILLED, value=1).add(0.2, h.NEMESIS, h.FAULT_END, value=1)
    s.acquire("w1", 2, 1.05, asked=0.1).release("w1", 1.1).final(0)
    r = s.report()
    assert [round(x.seconds or 0, 3) for x in r.recoveries] == [0.85]
    assert r.worst_recovery == pytest.approx(0.85)


def test_recovery_is_zero_when_grants_go_on_during_a_server_fault() -> None:
    s = Story().add(1.0, h.NEMESIS, h.FAULT_START, value=7, scope=h.SERVER, name="")
    s.acquire("w0", 1, 1.5, asked=1.1).release("w0", 1.6)
    s.add(3.0, h.NEMESIS, h.FAULT_END, value=7).final(0)
    assert [x.seconds for x in s.report().recoveries] == [0.0]


def test_recovery_after_a_server_outage_counts_from_the_heal() -> None:
    s = Story().acquire("w0", 1, 0.9, asked=0.5)  # asked before the fault: does not count
    s.add(1.0, h.NEMESIS, h.FAULT_START, value=3, scope=h.SERVER)
    s.add(1.2, "w1", h.ACQUIRE_FAILED, t0=1.1, detail="LockConnectionError")
    s.add(3.0, h.NEMESIS, h.FAULT_END, value=3)
    s.acquire("w1", 2, 3.4, asked=1.3).release("w1", 3.5).final(0)
    assert [round(x.seconds or 0, 3) for x in s.report().recoveries] == [0.4]


def test_jsonl_round_trip_and_a_torn_last_line(tmp_path: Path) -> None:
    s = clean(2)
    path = tmp_path / "w.jsonl"
    h.write_jsonl(path, s.events)
    with path.open("a") as out:
        out.write('{"t": 9.0, "worker": "w0", "ki')  # killed mid-write
    assert h.read_jsonl(path) == s.events
    recorder = h.Recorder(tmp_path / "r.jsonl", "w5")
    event = recorder.record(h.ACQUIRE, name=NAME, token=2**70, t0=1.5)
    recorder.close()
    assert list(recorder) == [event] and event.token == 2**70
    assert json.loads((tmp_path / "r.jsonl").read_text())["token"] == 2**70
    assert h.read_dir(tmp_path) == h.merge([s.events, [event]])


def test_a_bad_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t": 1, "worker": "w", "kind": "acquire"}\nnot json\n{"t": 2}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        h.read_jsonl(path)


# -- failing histories ---------------------------------------------------------------------------


def test_overlapping_beliefs_are_reported() -> None:
    # w0 paused past its lease (no signal yet); w1 granted meanwhile
    s = Story().acquire("w0", 1, 0.0).acquire("w1", 2, 1.1).release("w1", 1.3)
    s.release("w0", 2.5, error="LockLost").final(0)
    r = s.report()
    assert len(r.overlaps) == 1
    o = r.overlaps[0]
    assert (o.earlier.worker, o.later.worker) == ("w0", "w1")
    assert (o.start, o.end) == (1.1, 1.3)
    assert r.losses[0].signalled == checker.AT_RELEASE


def test_overlap_ends_at_the_signal_of_the_earlier_holder() -> None:
    s = Story().acquire("w0", 1, 0.0).acquire("w1", 2, 1.0).add(1.25, "w0", h.CHECK_FAILED)
    s.release("w1", 2.0).release("w0", 3.0, error="LockLost")
    (o,) = s.report().overlaps
    assert (o.start, o.end) == (1.0, 1.25)


def test_a_holder_stops_believing_when_its_lease_ends_by_its_own_clock() -> None:
    # w0 (no renewal) knew its lease ended at 0.988; slow to release (a loaded machine), it
    # called release() at 1.05, after w1 was granted at 1.0: no overlap, a loss all the same
    s = Story().acquire("w0", 1, 0.0, until=0.988).add(0.5, "w0", h.CHECK_PASSED)
    s.acquire("w1", 2, 1.0, asked=0.7).release("w1", 1.2)
    s.release("w0", 1.05, error="LockLost").final(0)
    r = s.report()
    assert r.overlaps == []
    assert [(loss.grant.worker, loss.how) for loss in r.losses] == [("w0", "taken over")]
    assert broken_promises(s, "redlock5/slow-network") == []  # "no overlapping holds" holds


def test_an_overlap_inside_the_holders_known_lease_is_still_reported() -> None:
    # w1 granted at 0.9, while w0's lease still ran by its own clock (until 0.988): that is an
    # overlap fencelock promises against, whenever w0 released
    s = Story().acquire("w0", 1, 0.0, until=0.988).acquire("w1", 2, 0.9, asked=0.7)
    s.release("w1", 1.2).release("w0", 1.05, error="LockLost").final(0)
    (o,) = s.report().overlaps
    assert (o.earlier.worker, o.later.worker, o.start, o.end) == ("w0", "w1", 0.9, 0.988)
    assert any(NO_OVERLAP in line for line in broken_promises(s, "redlock5/slow-network"))


def test_a_re_entry_restarts_the_known_lease() -> None:
    s = Story(kind="reentrant").acquire("w0", 1, 0.0, until=0.988)
    s.add(0.2, "w0", h.REENTER, until=1.188)
    s.acquire("w1", 2, 1.0, asked=0.7).release("w1", 1.3).release("w0", 1.25).final(0)
    (o,) = s.report().overlaps
    assert (o.start, o.end) == (1.0, 1.188)
    refused = Story(kind="reentrant").acquire("w0", 1, 0.0, until=0.988)
    refused.add(0.2, "w0", h.REENTER, detail="refused")  # (no until: the lease is unchanged)
    refused.acquire("w1", 2, 1.0, asked=0.7).release("w1", 1.3).release("w0", 1.25).final(0)
    assert refused.report().overlaps == []


def test_a_renewed_lock_believes_past_the_end_known_at_its_grant() -> None:
    # its watchdog moves the end: until release, or a loss told (and each loss must be told)
    s = Story(kind="auto_renew").acquire("w0", 1, 0.0, until=0.988)
    s.acquire("w1", 2, 1.0, asked=0.7).release("w1", 1.2).release("w0", 1.5).final(0)
    r = s.report()
    (o,) = r.overlaps
    assert (o.start, o.end) == (1.0, 1.2)
    assert [loss.grant.worker for loss in r.unsignalled] == ["w0"]


def test_a_renewed_grant_handed_over_after_its_lease_ended_is_not_believed() -> None:
    # w0's acquire returned at 2.0 a grant whose lease had ended (remaining() 0: until 2.0), the
    # hand-over slower than the lease; w1 was granted meanwhile; w0 was told at 2.05
    s = Story(kind=h.ASYNC_CANCEL).acquire("w1", 3, 1.5, asked=1.2, until=2.5)
    s.acquire("w0", 2, 2.0, asked=0.5, until=2.0).add(2.05, "w0", h.LOST)
    s.release("w0", 2.06, error="LockLost").release("w1", 2.4).final(0)
    assert s.report().overlaps == []
    # the same grant with a lease left when it was handed over: believed until told
    s2 = Story(kind=h.ASYNC_CANCEL).acquire("w1", 3, 1.5, asked=1.2, until=2.5)
    s2.acquire("w0", 2, 2.0, asked=0.5, until=2.1).add(2.05, "w0", h.LOST)
    s2.release("w0", 2.06, error="LockLost").release("w1", 2.4).final(0)
    (o,) = s2.report().overlaps
    assert (o.earlier.worker, o.later.worker, o.start, o.end) == ("w1", "w0", 2.0, 2.05)


def test_an_overtaken_write_is_unfenced_only_once_a_newer_holder_has_written() -> None:
    def paused(successor_writes: bool) -> Story:
        # w0 passed check(), then was paused past its lease; w1 was granted meanwhile
        s = Story().acquire("w0", 1, 0.0, until=0.988).add(0.5, "w0", h.CHECK_PASSED)
        s.acquire("w1", 2, 1.2, asked=0.6, until=2.1).add(1.25, "w1", h.READ, value=0)
        if successor_writes:
            s.write("w1", 1, 1.3).release("w1", 1.4)
        else:  # (a loaded machine: its lease ran out before it could write)
            s.add(1.3, "w1", h.CHECK_FAILED).release("w1", 1.4, error="LockLost")
        s.write("w0", 1, 2.5).release("w0", 2.6, error="LockLost")
        return s.final(1)

    scenario = "single/holder-pause"
    nothing_to_refuse = paused(successor_writes=False)
    r = nothing_to_refuse.report()
    assert [w.worker for w in r.superseded_accepted] == ["w0"]  # (counted in the table)
    assert r.unfenced == [] and r.stale_accepted == []
    assert broken_promises(nothing_to_refuse, scenario) == []
    refusable = paused(successor_writes=True)
    r = refusable.report()
    assert [w.worker for w in r.unfenced] == ["w0"]
    broken = broken_promises(refusable, scenario)
    assert any(FENCED in line for line in broken) and any(ALWAYS[0] in line for line in broken)


def test_stale_write_accepted_is_reported() -> None:
    s = Story().acquire("w0", 1, 0.0).acquire("w1", 2, 1.0)
    s.write("w1", 1, 1.1).release("w1", 1.2)
    s.write("w0", 1, 1.5)  # accepted with token 1 after token 2 was accepted: a broken fence
    s.release("w0", 1.6, error="LockLost").final(1)
    r = s.report()
    assert [(w.worker, w.token) for w in r.stale_accepted] == [("w0", 1)]
    assert r.superseded_accepted and r.superseded_accepted[0].worker == "w0"


def test_concurrent_writes_are_not_called_stale() -> None:
    # token 2's write was still in flight when token 1's was sent: the order is unknown
    s = Story().acquire("w0", 1, 0.0).acquire("w1", 2, 0.5)
    s.add(1.0, "w1", h.WRITE_ATTEMPT, value=1).add(1.2, "w1", h.WRITE_ACCEPTED, value=1, t0=1.0)
    s.add(1.1, "w0", h.WRITE_ATTEMPT, value=1).add(1.3, "w0", h.WRITE_ACCEPTED, value=1, t0=1.1)
    assert s.report().stale_accepted == []


def test_lost_update_is_counted() -> None:
    # w1 read 0, w0's superseded write of 1 landed, then w1 wrote 1 over it: one increment lost
    s = Story().acquire("w0", 1, 0.0).add(0.1, "w0", h.READ, value=0)
    s.acquire("w1", 2, 1.0).add(1.05, "w1", h.READ, value=0)
    s.write("w0", 1, 1.1).write("w1", 1, 1.2).release("w1", 1.3)
    s.release("w0", 1.4, error="LockLost").final(1)
    r = s.report()
    assert r.lost_updates == 1
    assert r.stale_accepted == []  # token 1 was accepted before token 2 was seen
    assert len(r.superseded_accepted) == 1


def test_an_unanswered_write_may_explain_a_higher_counter() -> None:
    s = Story().acquire("w0", 1, 0.0).add(0.1, "w0", h.WRITE_ATTEMPT, value=1)
    s.add(0.15, "w0", h.KILLED, detail="nemesis").final(1)
    r = s.report()
    assert r.lost_updates == 0 and r.unexplained_increments == 0
    s2 = Story().final(1)  # nobody wrote, yet the counter moved
    assert s2.report().unexplained_increments == 1


def test_a_loss_never_signalled_is_reported() -> None:
    # w0 was taken over, yet every check passed and its release "succeeded"
    s = Story(kind="auto_renew").acquire("w0", 1, 0.0).acquire("w1", 2, 0.5)
    s.add(0.6, "w0", h.CHECK_PASSED).release("w0", 0.7).release("w1", 0.8).final(0)
    r = s.report()
    assert [loss.grant.worker for loss in r.unsignalled] == ["w0"]
    assert r.losses_signalled == 0
    assert [(g.worker, t) for g, t in r.late_checks] == [("w0", 0.6)]


def test_a_lease_gone_at_release_is_a_loss() -> None:
    s = Story().acquire("w0", 1, 0.0).release("w0", 2.0, error="LockLost").final(0)
    (loss,) = s.report().losses
    assert loss.how == "gone at release" and loss.signalled == checker.AT_RELEASE


def test_a_connection_error_at_release_is_no_loss() -> None:
    s = Story().acquire("w0", 1, 0.0).release("w0", 0.5, error="LockConnectionError").final(0)
    assert s.report().losses == []


def test_orphaned_locks_are_reported() -> None:
    assert Story().final(0, pttl=-1).report().orphaned == ["node0: lock key without an expiry"]
    assert Story().final(0, pttl=5000).report().orphaned == ["node0: PTTL 5000 ms > ttl 1000 ms"]
    blocked = Story().final(0, waited_ms=-1).report().orphaned
    assert len(blocked) == 1 and "could not acquire" in blocked[0]
    assert Story().final(0, pttl=900).report().orphaned == []


def test_token_regression_is_reported() -> None:
    # a server restarted without persistence: the counter starts again at 1
    s = Story().cycle("w0", 5, 0.0, 1).cycle("w1", 1, 1.0, 2).final(1)
    r = s.report()
    assert [g.token for g in r.token_regressions] == [1]
    # ... and the same token twice is a regression too
    s2 = Story().cycle("w0", 5, 0.0, 1).cycle("w1", 5, 1.0, 2).final(2)
    assert len(s2.report().token_regressions) == 1


def test_token_order_of_concurrent_requests_is_not_a_regression() -> None:
    # w1 asked before w0's grant returned: either may have been granted first by the server
    s = Story().acquire("w1", 3, 0.3, asked=0.0).release("w1", 0.35)
    s.acquire("w0", 4, 0.2, asked=0.1).release("w0", 0.25)
    assert s.report().token_regressions == []


def test_a_fault_never_recovered_from_is_reported() -> None:
    s = Story().add(1.0, h.NEMESIS, h.FAULT_START, value=2, scope=h.SERVER, detail="kill node")
    s.add(2.0, h.NEMESIS, h.FAULT_END, value=2)
    s.add(2.5, "w0", h.ACQUIRE_FAILED, t0=2.1).final(0)
    r = s.report()
    assert [x.seconds for x in r.recoveries] == [None]
    assert r.worst_recovery == float("inf")


def test_refused_writes_of_holders_nobody_overtook_are_told_apart() -> None:
    # after a token regression the current holder is fenced out although it holds the lock
    s = Story().cycle("w0", 5, 0.0, 1)
    s.acquire("w1", 1, 1.0).write("w1", 2, 1.1, outcome=h.WRITE_REFUSED).release("w1", 1.2)
    r = s.final(1).report()
    assert [w.worker for w in r.refused_not_superseded] == ["w1"]
    assert r.superseded_refused == []


def test_a_grant_returned_after_its_lease_ran_out_is_the_one_overtaken() -> None:
    # w1 asked at 0.0 and got token 3 at the servers, but its acquire returned only at 3.5, long
    # after its lease; w0 was granted token 9 meanwhile (asked after w1's lease ran out)
    s = Story().acquire("w0", 9, 3.4, asked=3.39).acquire("w1", 3, 3.5, asked=0.0)
    s.add(3.6, "w1", h.CHECK_FAILED).release("w1", 3.61, error="LockLost").release("w0", 3.7)
    r = s.final(0).report()
    (o,) = r.overlaps  # w1 believed it held the lock from 3.5 until its check failed
    assert (o.earlier.worker, o.later.worker, o.start, o.end) == ("w0", "w1", 3.5, 3.6)
    (loss,) = r.losses  # w1 lost it (before its acquire even returned), not w0
    assert (loss.grant.worker, loss.at, loss.signalled) == ("w1", 3.4, checker.IN_TIME)
    assert r.late_checks == []


def test_a_late_grant_that_passes_its_check_is_a_late_check() -> None:
    s = Story().acquire("w0", 9, 3.4, asked=3.39).acquire("w1", 3, 3.5, asked=0.0)
    s.add(3.55, "w1", h.CHECK_PASSED).write("w1", 1, 3.56, outcome=h.WRITE_REFUSED)
    s.release("w1", 3.6, error="LockLost").release("w0", 3.7)
    r = s.final(0).report()
    assert [(g.worker, t) for g, t in r.late_checks] == [("w1", 3.55)]
    assert [w.worker for w in r.superseded_refused] == ["w1"]


def test_a_final_probe_that_failed_is_unverified_not_orphaned() -> None:
    s = Story().add(1.0, h.HARNESS, h.FINAL_ACQUIRE, value=-2, detail="NotReplicated(...)")
    r = s.report()
    assert r.orphaned == [] and r.unverified == "NotReplicated(...)"


def test_threads_that_died_are_reported() -> None:
    s = Story().add(1.0, "w0", h.THREAD_DIED, detail="fencelock-waiter: KeyError: 0").final(0)
    assert s.report().threads_died == ["w0 fencelock-waiter: KeyError: 0"]


# -- async_cancel: auto_renew under asyncio, on_lost_policy="cancel" ------------------------------


def cancel_story() -> Story:
    """w0 is told of a loss at 0.5 by the watchdog (on_lost), its block is cancelled; w1 waits."""
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.01, "w0", h.READ, value=0)
    s.add(0.5, "w0", h.LOST, detail="fencelock-watchdog").add(0.5, "w0", h.CANCELLED, detail="work")
    return s


def test_a_loss_that_cancels_the_block_and_ends_it_with_lock_lost_passes() -> None:
    s = cancel_story().release("w0", 0.51, error="LockLost")
    s.acquire("w1", 2, 0.6, asked=0.2).write("w1", 1, 0.7).release("w1", 0.8).final(1)
    r = s.report()
    assert r.renewed and r.cancelling
    assert r.uncancelled == []
    assert r.overlaps == [] and r.stale_accepted == []
    (loss,) = r.losses  # found gone when the block released it: told in time, by on_lost
    assert (loss.how, loss.signalled) == ("gone at release", checker.IN_TIME)


def test_a_cancellation_that_lands_in_the_block_ends_its_belief() -> None:
    # w0 taken over at 1.0; the cancellation landing at 1.25 is the signal (no on_lost seen)
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).acquire("w1", 2, 1.0)
    s.add(1.25, "w0", h.CANCELLED, detail="work").release("w0", 1.26, error="LockLost")
    s.release("w1", 2.0).final(0)
    r = s.report()
    (o,) = r.overlaps
    assert (o.start, o.end) == (1.0, 1.25)
    (loss,) = r.losses
    assert (loss.grant.worker, loss.signalled) == ("w0", checker.IN_TIME)
    assert r.uncancelled == []


def test_a_loss_found_by_check_in_the_block_passes() -> None:
    # check() declared the loss from the worker's own task: on_lost, then LockLost from check()
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.01, "w0", h.READ, value=0)
    s.add(0.9, "w0", h.LOST, detail="chaos-w0").add(0.9001, "w0", h.CHECK_FAILED)
    s.release("w0", 0.901, error="LockLost").final(0)
    r = s.report()
    assert r.uncancelled == [] and r.unsignalled == []


def test_the_answer_of_a_write_in_flight_when_cancelled_is_no_step_after_the_loss() -> None:
    # the cancellation landed while the fenced write was in flight; its answer came after it
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.01, "w0", h.READ, value=0)
    s.add(0.3, "w0", h.CHECK_PASSED).add(0.35, "w0", h.WRITE_ATTEMPT, value=1)
    s.add(0.36, "w0", h.LOST).add(0.36, "w0", h.CANCELLED, detail="write (in flight)")
    s.add(0.37, "w0", h.WRITE_ACCEPTED, value=1, t0=0.35).release("w0", 0.38, error="LockLost")
    r = s.final(1).report()
    assert r.uncancelled == []
    assert r.count(h.WRITE_ACCEPTED) == 1 and r.lost_updates == 0


def test_a_loss_without_any_block_left_to_cancel_passes() -> None:
    # gone at release without a signal before: nothing was told inside the block
    s = Story(kind=h.ASYNC_CANCEL).cycle("w0", 1, 0.0, 1)
    s.acquire("w1", 2, 1.0).release("w1", 1.5, error="LockLost").final(1)
    assert s.report().uncancelled == []


def test_a_step_after_the_cancel_is_reported() -> None:
    # the block went on after on_lost: the cancellation did not land at the next await
    s = cancel_story().add(0.6, "w0", h.CHECK_FAILED)
    s.add(0.62, "w0", h.WRITE_ATTEMPT, value=1).add(0.63, "w0", h.WRITE_REFUSED, value=1, t0=0.62)
    s.release("w0", 0.64, error="LockLost").final(0)
    ((grant, why),) = s.report().uncancelled
    assert grant.worker == "w0"
    assert why == "write_attempt at 0.620, after the loss at 0.500"


def test_a_step_after_on_lost_is_fine_without_the_cancel_policy() -> None:
    # the same steps under on_lost_policy="ignore" (the sync auto_renew kind): it goes on
    s = Story(kind=h.AUTO_RENEW).acquire("w0", 1, 0.0).add(0.5, "w0", h.LOST)
    s.add(0.6, "w0", h.CHECK_PASSED).write("w0", 1, 0.62).release("w0", 0.7, error="LockLost")
    r = s.final(1).report()
    assert r.renewed and not r.cancelling
    assert r.uncancelled == []


@pytest.mark.parametrize(
    ("error", "why"),
    [
        ("", "the block ended normally after the loss, not with LockLost"),
        ("CancelledError", "the block ended with CancelledError, not LockLost"),
    ],
)
def test_a_cancelled_block_that_does_not_end_with_lock_lost_is_reported(
    error: str, why: str
) -> None:
    s = cancel_story().release("w0", 0.51, error=error).final(0)
    r = s.report()
    assert [(g.worker, text) for g, text in r.uncancelled] == [("w0", why)]
    assert r.masked_losses == []


def test_a_release_error_in_place_of_lock_lost_is_a_masked_loss() -> None:
    # the release at the block's exit could not reach the servers: its error came out instead
    s = cancel_story().release("w0", 0.51, error="LockConnectionError").final(0)
    r = s.report()
    assert r.uncancelled == []
    why = "the block ended with LockConnectionError from its release, not LockLost"
    assert [(g.worker, text) for g, text in r.masked_losses] == [("w0", why)]
    # not when nothing was told inside the block: the release's error is all there is to say
    s2 = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).release("w0", 0.5, "LockConnectionError")
    assert s2.final(0).report().masked_losses == []


def test_a_holder_killed_after_its_loss_is_not_held_to_its_block_end() -> None:
    s = cancel_story().add(0.6, "w0", h.KILLED, detail="nemesis").final(0)
    assert s.report().uncancelled == []
    s2 = cancel_story().add(0.51, "w0", h.RELEASE).final(0)  # killed within the block's exit
    assert s2.report().uncancelled == []


def broken_promises(s: Story, scenario: str = "single/holder-crash") -> list[str]:
    """What ``report.violations`` says of the history ``s`` in ``scenario``."""
    result = Result(BY_NAME[scenario], checker.check(s.events), 0, 0.0, Path())
    return report.violations(result)


def test_every_loss_of_an_async_cancel_lock_must_be_signalled_as_for_auto_renew() -> None:
    def unsignalled(kind: str) -> Story:  # w0 taken over, and never told
        s = Story(kind=kind).acquire("w0", 1, 0.0).acquire("w1", 2, 2.0, asked=1.5)
        return s.release("w1", 2.2).release("w0", 2.5).final(0)

    for kind, promised in [(h.ASYNC_CANCEL, True), (h.AUTO_RENEW, True), (h.DEFAULT, False)]:
        lines = [line for line in broken_promises(unsignalled(kind)) if ALWAYS[2] in line]
        assert len(lines) == (1 if promised else 0), kind
        assert all(line.startswith(f"single/holder-crash {kind}: ") for line in lines)


def test_an_uncancelled_block_is_a_broken_promise_a_masked_loss_is_not() -> None:
    uncancelled = cancel_story().release("w0", 0.51, error="CancelledError").final(0)
    (line,) = [line for line in broken_promises(uncancelled) if ALWAYS[4] in line]
    assert line.endswith("the block ended with CancelledError, not LockLost")
    cancelled = cancel_story().release("w0", 0.51, error="LockLost").final(0)
    assert broken_promises(cancelled) == []
    masked = cancel_story().release("w0", 0.51, error="LockConnectionError").final(0)
    assert broken_promises(masked) == []


def test_a_worker_killed_by_an_untyped_error_is_a_broken_promise() -> None:
    # a lock call raised ValueError out of the worker's loop (seen: a pub/sub connection closed
    # under a subscribing thread); a library thread that died is counted, not a violation
    died = Story().acquire("w0", 1, 0.0).release("w0", 0.5)
    died = died.add(0.6, "w1", h.THREAD_DIED, detail="worker w1: ValueError: closed file")
    (line,) = [line for line in broken_promises(died.final(0)) if ALWAYS[5] in line]
    assert line.endswith("worker w1: ValueError: closed file")
    library = Story().acquire("w0", 1, 0.0).release("w0", 0.5)
    library = library.add(0.6, "w1", h.THREAD_DIED, detail="fencelock-waiter: KeyError: 0")
    assert broken_promises(library.final(0)) == []


def test_a_versioned_value_is_held_to_no_lost_update_not_to_a_locks_promises() -> None:
    def story(second_outcome: str, final: int) -> Story:
        # two read-modify-writes of version 1 at once (no lock: an overlap by design); the
        # second's compare-and-set must be refused
        s = Story(kind=h.VERSIONED).acquire("w0", 1, 0.0).acquire("w1", 1, 0.1)
        s.add(0.11, "w0", h.READ, value=0).add(0.12, "w1", h.READ, value=0)
        s.write("w0", 1, 0.2).write("w1", 1, 0.3, outcome=second_outcome)
        return s.release("w0", 0.4).release("w1", 0.5).add(0.6, "w2", h.EXIT).final(final)

    refused = story(h.WRITE_REFUSED, final=1)
    assert refused.report().overlaps  # (reported, not a broken promise)
    assert broken_promises(refused) == []
    both = story(h.WRITE_ACCEPTED, final=1)  # a compare-and-set that let the second through
    (line,) = broken_promises(both)
    assert line == f"single/holder-crash {h.VERSIONED}: {ALWAYS[6]}: 1"


# -- holder-loop-block: an asyncio holder's event loop blocked by a sync call -------------------

LOOP_BLOCK = "single/holder-loop-block"
STALL = "fencelock: the event loop was blocked for about 2.995 s, more than a third of ..."


def blocked_story() -> Story:
    """w0's loop is blocked 0.1..3.1 while it works (3 ttls); w1 waits meanwhile."""
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.01, "w0", h.READ, value=0)
    s.add(0.1, "w0", h.LOOP_BLOCKED, value=3000, detail="work")
    s.add(0.1, h.NEMESIS, h.FAULT_START, value=1, scope=h.HOLDER, name=NAME, detail="block w0")
    s.add(0.1, "w0", h.BLOCKED, value=1)
    s.add(1.2, "w1", h.ACQUIRE_FAILED, t0=0.2, detail="timeout")
    s.add(2.2, "w1", h.ACQUIRE_FAILED, t0=1.2, detail="timeout")
    s.add(3.1, "w0", h.LOOP_RESUMED).add(3.1, h.NEMESIS, h.FAULT_END, value=1)
    return s


def test_a_blocked_holder_that_keeps_its_lease_passes() -> None:
    s = blocked_story().add(3.101, "w0", h.LIBRARY_LOG, detail=STALL)
    s.add(3.102, "w0", h.CHECK_PASSED).write("w0", 1, 3.15).release("w0", 3.2)
    s.acquire("w1", 2, 3.21, asked=2.2).release("w1", 3.3).final(1)
    r = s.report()
    assert r.loop_blocks == 1
    assert r.leases_not_kept == [] and r.unreported_stalls == []
    assert r.overlaps == [] and r.losses == []
    assert [round(x.seconds or 0, 3) for x in r.recoveries] == [3.11]  # w1 only after the release
    assert broken_promises(s, LOOP_BLOCK) == []


def test_a_blocked_holder_that_lost_its_lease_breaks_the_promise() -> None:
    # renewals on the loop: the lease ran out at 1.0, w1 got the lock at 1.2; w0 learnt of it
    # when its loop ran again, and its block ended with LockLost; no stall was reported
    s = blocked_story().acquire("w1", 2, 1.25, asked=1.2).release("w1", 1.5)
    s.add(3.1, "w0", h.LOST).add(3.1, "w0", h.CHECK_FAILED).release("w0", 3.11, error="LockLost")
    r = s.final(0).report()
    ((grant, why),) = r.leases_not_kept
    assert grant.worker == "w0"
    assert why == (
        "another worker was granted the lock at 1.250; told of a loss: lost at 3.100, "
        "check_failed at 3.100; no write accepted after the block (none); the block ended "
        "with LockLost"
    )
    assert [text for _, text in r.unreported_stalls] == [
        "the loop blocked 0.100..3.100 was not reported"
    ]
    broken = broken_promises(s, LOOP_BLOCK)
    counts = [sum(p in line for line in broken) for p in (NO_OVERLAP, KEPT, STALL_REPORTED)]
    assert counts == [1, 1, 1]
    # the same history in another scenario: a loss signalled, nothing promised of the block
    assert not any(KEPT in line or STALL_REPORTED in line for line in broken_promises(s))


def test_a_write_refused_after_the_block_is_no_lease_kept() -> None:
    # blocked after its check: its write after the block was refused (a newer token wrote)
    s = blocked_story().add(3.101, "w0", h.LIBRARY_LOG, detail=STALL)
    s.write("w0", 1, 3.15, outcome=h.WRITE_REFUSED).release("w0", 3.2, error="LockLost")
    ((_, why),) = s.final(0).report().leases_not_kept
    assert why == (
        "told of a loss: write_refused at 3.151; no write accepted after the block "
        "(write_refused); the block ended with LockLost"
    )


def test_a_write_sent_before_the_block_does_not_count() -> None:
    # the write went out, and was accepted, before the loop was blocked: after it, none
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.02, "w0", h.CHECK_PASSED)
    s.write("w0", 1, 0.05).add(0.1, "w0", h.LOOP_BLOCKED, value=3000, detail="gap")
    s.add(3.1, "w0", h.LOOP_RESUMED).add(3.101, "w0", h.LIBRARY_LOG, detail=STALL)
    s.release("w0", 3.2)
    ((_, why),) = s.final(1).report().leases_not_kept
    assert why == "no write accepted after the block (none)"


def test_a_block_that_outlasts_the_hold_is_reported() -> None:
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0)
    s.add(0.1, "w0", h.LOOP_BLOCKED, value=3000).add(2.0, "w0", h.KILLED, detail="late")
    ((_, why),) = s.final(0).report().leases_not_kept
    assert why == (
        "its loop was still blocked when its hold ended (killed); "
        "no write accepted after the block (none)"
    )


def test_a_block_shorter_than_a_third_of_the_ttl_needs_no_report() -> None:
    s = Story(kind=h.ASYNC_CANCEL).acquire("w0", 1, 0.0).add(0.01, "w0", h.READ, value=0)
    s.add(0.1, "w0", h.LOOP_BLOCKED, value=300).add(0.4, "w0", h.LOOP_RESUMED)
    s.add(0.41, "w0", h.CHECK_PASSED).write("w0", 1, 0.45).release("w0", 0.5)
    r = s.final(1).report()
    assert r.loop_blocks == 1 and r.leases_not_kept == [] and r.unreported_stalls == []
