"""``python -m bench.compute_once --quick`` end to end on a real server: every strategy runs,
every caller gets the build's value, compute_once, the floor and the hand-written loop build
once per round and no coordination once per caller, the wake path's stages are stamped, and
nothing is left behind. No timing is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

from bench.compute_once import STAGES
from fencelock_tools.servers.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0  # spawns a few interpreters; a loaded box is slow


def test_quick_run_measures_every_strategy(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    out = tmp_path / "compute.json"
    command = ["-m", "bench.compute_once", "--quick", "--url", server.url, "--json", str(out)]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    shown = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, shown
    report = json.loads(out.read_text())
    rows = {row["strategy"]: row for row in report["results"]}
    once, stamped = "compute_once", "compute_once, stamped"
    assert set(rows) == {once, stamped, "floor", "lock-then-poll", "none"}
    callers = 2 * 4  # --quick: 2 processes of 4 threads
    builds_of = {once: 1, stamped: 1, "floor": 1, "lock-then-poll": 1, "none": callers}
    for strategy, builds in builds_of.items():
        row = rows[strategy]
        assert row["errors"] == [], shown
        assert (row["rounds"], row["calls"]) == (2, 2 * callers), shown
        assert (row["builds_per_round"], row["builds_max"]) == (builds, builds), shown
        assert f"| {strategy} |" in done.stdout, shown
    # the wake path's stages stamped: those every round has, in 2 rounds (a process whose
    # callers all came after the store, on a loaded machine, waits for no message)
    for strategy, always in ((stamped, ("store", "returned")), ("floor", ("published",))):
        figures = rows[strategy]["stages_ms"]
        counts = {stamp: figures[label][3] for label, stamp, _ in STAGES[strategy]}
        expected = {"store": 2, "returned": 2 * callers, "published": 2}
        assert {s: counts[s] for s in always} == {s: expected[s] for s in always}, counts
        assert f"| {strategy}: the wake path |" in done.stdout, shown
    # compute_once's waiters read nothing once woken: the store's message carries the result
    assert rows[stamped]["stages_ms"]["wait returned -> its look's reply"][3] == 0
    assert not raw.keys("*fencelock-bench-compute*"), "benchmark keys left behind"
