"""Tables of results (markdown), the promises check, and docs/safety.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import history as h
from .runner import Result
from .scenarios import (
    ALWAYS,
    FAILS_CHECK,
    FENCED,
    FREE_IN_TTL,
    GIVEN_BACK,
    INCREASING,
    KEPT,
    NO_OVERLAP,
    STALL_REPORTED,
    TOLD_STALE,
)

SLACK = 1.0  # seconds allowed above the ttl for "free within its ttl" (a loaded 2-vCPU box)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == float("inf"):
        return "never"
    return f"{value:.2f} s"


@dataclass(frozen=True)
class Row:
    scenario: str
    kind: str
    acquisitions: int
    faults: int
    overlaps: int
    superseded_refused: int
    superseded_accepted: int
    stale_accepted: int
    lost_updates: int | None
    losses_signalled: int
    losses_in_time: int
    losses: int
    token_regressions: int
    refused_not_superseded: int
    late_checks: int
    orphaned: int
    worst_recovery: float | None
    locked: bool = True  # False: the versioned kind, whose "grants" are reads (no lock)

    def cells(self) -> list[str]:
        lock_only = [
            str(self.overlaps),
            f"{self.superseded_refused} / {self.superseded_accepted}",
            f"{self.losses_signalled} ({self.losses_in_time}) / {self.losses}",
            str(self.token_regressions),
            seconds(self.worst_recovery),
        ]
        if not self.locked:  # a lock's measures, meaningless without one
            lock_only = ["-"] * len(lock_only)
        overlaps, overtaken, losses, regressions, recovery = lock_only
        return [
            f"`{self.scenario}`",
            self.kind,
            str(self.acquisitions),
            str(self.faults),
            overlaps,
            overtaken,
            str(self.stale_accepted),
            "-" if self.lost_updates is None else str(self.lost_updates),
            losses,
            regressions,
            str(self.orphaned),
            recovery,
        ]


HEADER = [
    "scenario",
    "lock",
    "acquisitions",
    "faults",
    "overlaps",
    "overtaken writes refused / accepted",
    "stale writes accepted",
    "lost updates",
    "losses signalled (in time) / happened",
    "token regressions",
    "orphaned",
    "worst recovery",
]


def rows(result: Result) -> list[Row]:
    found = []
    for r in sorted(result.report.names.values(), key=lambda r: r.kind):
        faults = len({rec.fault.id for rec in r.recoveries})
        found.append(
            Row(
                result.scenario.name, r.kind, r.acquisitions, faults, len(r.overlaps),
                len(r.superseded_refused), len(r.superseded_accepted), len(r.stale_accepted),
                r.lost_updates, r.losses_signalled, r.losses_in_time, len(r.losses),
                len(r.token_regressions), len(r.refused_not_superseded), len(r.late_checks),
                len(r.orphaned), r.worst_recovery, r.locked,
            )
        )  # fmt: skip
    return found


def markdown(results: Sequence[Result]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for result in results:
        if result.skipped:
            cells = [f"`{result.scenario.name}`", f"skipped: {result.skipped}"]
            lines.append("| " + " | ".join(cells + [""] * (len(HEADER) - 2)) + " |")
            continue
        for row in rows(result):
            lines.append("| " + " | ".join(row.cells()) + " |")
    return "\n".join(lines)


def violations(result: Result) -> list[str]:
    """The promises of ``result``'s scenario (and ``ALWAYS``) that its history breaks."""
    if result.skipped:
        return []
    scenario = result.scenario
    found = [f"nemesis/harness: {e}" for e in result.errors]
    if not result.report.names:
        found.append("no history")
    for r in result.report.names.values():
        where = f"{scenario.name} {r.kind}"
        if r.acquisitions == 0:
            found.append(f"{where}: no acquisition at all")
        for w in r.stale_accepted:
            found.append(f"{where}: {ALWAYS[0]}: {w}")
        for orphan in r.orphaned:
            found.append(f"{where}: {ALWAYS[1]}: {orphan}")
        if r.unverified:
            found.append(f"{where}: {ALWAYS[1]}: not verified, the final acquire failed: "
                         f"{r.unverified}")  # fmt: skip
        if r.renewed:
            for loss in r.unsignalled:
                found.append(f"{where}: {ALWAYS[2]}: {loss.grant} {loss.how} at {loss.at:.3f}")
        for grant, why in r.uncancelled:
            found.append(f"{where}: {ALWAYS[4]}: {grant}: {why}")
        if r.unexplained_increments:
            found.append(f"{where}: {ALWAYS[3]}: {r.unexplained_increments}")
        for error in r.untyped_errors:
            found.append(f"{where}: {ALWAYS[5]}: {error}")
        if not r.locked:
            if r.lost_updates:
                found.append(f"{where}: {ALWAYS[6]}: {r.lost_updates}")
            continue  # the promises below are a lock's
        if NO_OVERLAP in scenario.promises:
            for o in r.overlaps:
                found.append(f"{where}: {NO_OVERLAP}: {o.earlier} / {o.later}")
        if FAILS_CHECK in scenario.promises:
            for grant, t in r.late_checks:
                found.append(f"{where}: {FAILS_CHECK}: {grant} passed check() at {t:.3f}")
        if FENCED in scenario.promises:
            for w in r.unfenced:
                found.append(f"{where}: {FENCED}: {w}")
        if TOLD_STALE in scenario.promises and not r.superseded_refused:
            found.append(f"{where}: {TOLD_STALE}: no overtaken write was refused")
        if INCREASING in scenario.promises:
            for grant in r.token_regressions:
                found.append(f"{where}: {INCREASING}: {grant}")
        if KEPT in scenario.promises:
            for grant, why in r.leases_not_kept:
                found.append(f"{where}: {KEPT}: {grant}: {why}")
        if STALL_REPORTED in scenario.promises:
            for grant, why in r.unreported_stalls:
                found.append(f"{where}: {STALL_REPORTED}: {grant}: {why}")
        if FREE_IN_TTL in scenario.promises:
            for rec in r.recoveries:
                late = rec.seconds is None or rec.seconds > scenario.ttl + SLACK
                if rec.fault.scope == h.HOLDER and late:
                    found.append(
                        f"{where}: {FREE_IN_TTL}: {seconds(rec.seconds)} after {rec.fault.detail}"
                    )
        if GIVEN_BACK in scenario.promises:
            for rec in r.recoveries:
                late = rec.seconds is None or rec.seconds > scenario.ttl / 2
                if rec.fault.scope == h.SERVER and late:
                    found.append(
                        f"{where}: {GIVEN_BACK}: {seconds(rec.seconds)} after {rec.fault.detail}"
                    )
    return found


def details(result: Result) -> str:
    """A longer account of one result: every fault and its recoveries, and every overlap."""
    out = [f"## {result.scenario.name} ({result.seconds:.1f} s, {result.faults} faults)"]
    if result.skipped:
        return out[0] + f"\nskipped: {result.skipped}"
    for e in result.errors:
        out.append(f"  ERROR {e}")
    report = result.report
    t0 = min((g.start for g in report.grants), default=0.0)
    for fault in report.faults:
        recs = [
            f"{r.name}: {seconds(r.seconds)}"
            for rr in report.names.values()
            for r in rr.recoveries
            if r.fault.id == fault.id
        ]
        out.append(f"  fault {fault.id} at +{fault.start - t0:.2f} s: {fault.detail}; "
                   f"recovery {', '.join(recs)}")  # fmt: skip
    for r in report.names.values():
        out.append(
            f"  {r.kind}: {r.acquisitions} grants, writes {r.count(h.WRITE_ACCEPTED)} accepted "
            f"{r.count(h.WRITE_REFUSED)} refused ({len(r.refused_not_superseded)} of holders "
            f"nobody overtook), final {r.final_value}, lost updates {r.lost_updates}, "
            f"late checks {len(r.late_checks)}, token regressions {len(r.token_regressions)}"
            + (f", event loop blocked in {r.loop_blocks} grants" if r.loop_blocks else "")
        )
        for died in r.threads_died:
            out.append(f"    library thread died: {died}")
        for o in r.overlaps:
            out.append(
                f"    overlap {o.seconds:.3f} s at +{o.start - t0:.2f}: {o.earlier} / {o.later}"
            )
        for loss in r.losses:
            out.append(f"    loss ({loss.how}, signalled {loss.signalled}): {loss.grant}")
        for grant, why in r.uncancelled:
            out.append(f"    block not cancelled by its loss: {grant}: {why}")
        for grant, why in r.masked_losses:
            out.append(f"    loss masked by a release error: {grant}: {why}")
        for grant, why in r.leases_not_kept:
            out.append(f"    lease not kept through a blocked loop: {grant}: {why}")
        for grant, why in r.unreported_stalls:
            out.append(f"    stall not reported: {grant}: {why}")
    return "\n".join(out)


def summary(result: Result) -> str:
    return f"{result.scenario.name}: {result.seconds:.1f} s, {result.faults} faults" + "".join(
        f"; {r.kind}: {r.acquisitions} acq, {len(r.overlaps)} ovl, "
        f"{r.losses_signalled}/{len(r.losses)} sig"
        for r in result.report.names.values()
    )
