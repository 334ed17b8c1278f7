"""``python -m bench.regress HEAD --quick --only P1`` (and P2, P3, memory) end to end: the same code
on both sides, each imported from its own temporary install, the table printed with finite
ratios, the servers' costs and the counts where they are exact, nothing left behind. No timing is
checked."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90.0  # two workers start, warm up and run 4 short rounds; a loaded box is slow


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.strip()


def quick_run(tmp_path: Path, workload: str, *more: str) -> tuple[str, dict[str, Any], str]:
    """``python -m bench.regress HEAD --quick --only WORKLOAD [MORE]``, which must succeed on
    both sides and leave the working tree as it was: its table, its ``--json`` figures, and its
    output to show on a failure."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    status = git("status", "--porcelain")
    out = tmp_path / "regress.json"
    command = ["bench.regress", "HEAD", "--quick", "--only", workload, "--json", str(out), *more]
    done = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    shown = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, shown
    found = json.loads(out.read_text())
    assert found["failed"] == {}, shown
    assert git("status", "--porcelain") == status, "the run changed the working tree"
    return done.stdout, found, shown


@pytest.mark.timeout(TIMEOUT + 30)
def test_a_quick_run_against_head_compares_two_installs_of_the_same_code(tmp_path: Path) -> None:
    stdout, found, shown = quick_run(tmp_path, "P1")
    assert found["info"]["commits"]["old"] == git("rev-parse", "HEAD")

    # each side imported fencelock from its own directory of one temporary install, since removed
    files = {side: Path(found["info"]["files"][side]) for side in ("old", "new")}
    for side, path in files.items():
        assert path.parts[-4:] == (side, "src", "fencelock", "__init__.py"), shown
        assert str(path) in stdout, shown
        assert not path.parents[3].exists(), f"{path.parents[3]} left behind"
    assert files["old"].parents[3] == files["new"].parents[3]

    # the floors: the hand-written minimum, and redis-py's own Lock
    for row in ("P1 sync", "P1 asyncio", "P1 sync, redis-py", "P1 asyncio, redis-py"):
        for side in ("old", "new"):
            rounds = found["rounds"][row][side]
            assert len(rounds) == 4, shown  # --quick
            for figures in rounds:
                for rate, cpu, server_us, commands in (figures["lib"], figures["floor"]):
                    assert math.isfinite(rate) and rate > 0, shown
                    assert math.isfinite(cpu) and cpu > 0, shown
                    assert math.isfinite(server_us) and server_us > 0, shown
                    assert commands >= 2, shown  # at least its two requests
                # both floors: SET, and EVALSHA of a compare-and-delete (GET, DEL), counted by
                # the server per cycle, the cycles counted exactly
                assert figures["floor"][3] == pytest.approx(4), shown
        lib_old, floor_old = found["trips"]["old"][row]
        lib_new, floor_new = found["trips"]["new"][row]
        assert floor_old == floor_new == 2, shown  # SET NX PX, EVALSHA
        assert lib_old == lib_new and lib_old >= 1, shown  # the same code

    lines = [line for line in stdout.splitlines() if line.startswith("| P1 uncontended")]
    assert len(lines) == 4, shown
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        ratio = re.fullmatch(r"\*\*([\d.]+)\*\* \(([\d.]+)-([\d.]+)\)", cells[3])
        assert ratio is not None, line
        assert all(math.isfinite(float(v)) and float(v) > 0 for v in ratio.groups()), line
        assert all(math.isfinite(float(cells[i])) for i in (4, 5)), line  # old/floor, new/floor
        # client CPU, server CPU and commands: "old → new (floor)", each a number
        for i in (6, 8, 9):
            assert re.fullmatch(r"[\d,.]+ → [\d,.]+ \([\d,.]+\)", cells[i]), line
    assert math.isfinite(found["floor_noise"][0]), shown


@pytest.mark.timeout(TIMEOUT + 30)
def test_p3_runs_the_local_queue_against_redis_pys_lock(tmp_path: Path) -> None:
    stdout, found, shown = quick_run(tmp_path, "P3")
    for row in ("P3 threads", "P3 tasks"):
        assert found["trips"]["new"][row] == [None, None], shown  # not cycles: none counted
        for side in ("old", "new"):
            for figures in found["rounds"][row][side]:
                for rate, cpu, server_us, _ in (figures["lib"], figures["floor"]):
                    assert math.isfinite(rate) and rate > 0, shown
                    assert math.isfinite(cpu) and cpu > 0, shown
                    assert math.isfinite(server_us) and server_us > 0, shown
    assert len([line for line in stdout.splitlines() if line.startswith("| P3 ")]) == 2


@pytest.mark.timeout(TIMEOUT + 30)
def test_memory_counts_the_keys_of_held_locks_and_of_idle_names(tmp_path: Path) -> None:
    stdout, found, shown = quick_run(tmp_path, "memory", "--memory-locks", "200")
    (old,), (new,) = found["rounds"]["memory"]["old"], found["rounds"]["memory"]["new"]
    for side in (old, new):
        # redis-py's Lock: one key per held lock, none once released
        assert side["floor"]["locks"] == 200, shown
        assert side["floor"]["held_keys"] == 1 and side["floor"]["idle_keys"] == 0, shown
        assert side["floor"]["held_bytes"] > 0, shown
        assert side["lib"]["held_keys"] >= 1 and side["lib"]["held_bytes"] > 0, shown
    for key in ("held_keys", "idle_keys"):
        assert old["lib"][key] == new["lib"][key], shown  # the same code, counted exactly
    lines = [line for line in stdout.splitlines() if line.startswith("| memory")]
    assert len(lines) == 4, shown


@pytest.mark.timeout(TIMEOUT + 60)
def test_p2_runs_both_sides_against_python_redis_lock(tmp_path: Path) -> None:
    stdout, found, shown = quick_run(tmp_path, "P2", "--rounds", "1", "--p2-seconds", "0.3")
    has_floor = found["info"]["p2_floor"] is None
    if not has_floor:
        assert "P2 without python-redis-lock" in stdout, shown
    for side, key in itertools.product(("old", "new"), ("P2", "P2 barging")):
        (figures,) = found["rounds"][key][side]
        for which in ("lib", "floor") if has_floor else ("lib",):
            run = figures[which]
            assert run["grants"] > 0, shown
            assert run["lost_updates"] == run["overlaps"] == 0, shown
            for key in ("cpu_us", "server_us", "commands", "requests"):
                assert math.isfinite(run[key]) and run[key] > 0, (key, shown)
        if not has_floor:
            assert figures["floor"] is None, shown
    # 6 lines per P2 row: the fair lock's and the barging one's
    assert len([line for line in stdout.splitlines() if line.startswith("| P2 ")]) == 12
