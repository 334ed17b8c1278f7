"""``python -m bench.regress HEAD --quick --only P1`` end to end: the same code on both sides, each
imported from its own temporary install, the table printed with finite ratios, nothing left
behind. No timing is checked."""

from __future__ import annotations

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


def quick_run(tmp_path: Path, workload: str) -> tuple[str, dict[str, Any], str]:
    """``python -m bench.regress HEAD --quick --only WORKLOAD``, which must succeed on both
    sides and leave the working tree as it was: its table, its ``--json`` figures, and its
    output to show on a failure."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    status = git("status", "--porcelain")
    out = tmp_path / "regress.json"
    command = ["bench.regress", "HEAD", "--quick", "--only", workload, "--json", str(out)]
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

    for row in ("P1 sync", "P1 asyncio"):
        for side in ("old", "new"):
            rounds = found["rounds"][row][side]
            assert len(rounds) == 4, shown  # --quick
            for figures in rounds:
                for rate, cpu in (figures["lib"], figures["floor"]):
                    assert math.isfinite(rate) and rate > 0, shown
                    assert math.isfinite(cpu) and cpu > 0, shown
        lib_old, floor_old = found["trips"]["old"][row]
        lib_new, floor_new = found["trips"]["new"][row]
        assert floor_old == floor_new == 2, shown  # SET NX PX, EVALSHA
        assert lib_old == lib_new and lib_old >= 1, shown  # the same code

    lines = [line for line in stdout.splitlines() if line.startswith("| P1 uncontended")]
    assert len(lines) == 2, shown
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        ratio = re.fullmatch(r"\*\*([\d.]+)\*\* \(([\d.]+)-([\d.]+)\)", cells[3])
        assert ratio is not None, line
        assert all(math.isfinite(float(v)) and float(v) > 0 for v in ratio.groups()), line
        assert all(math.isfinite(float(cells[i])) for i in (4, 5)), line  # old/floor, new/floor
    assert math.isfinite(found["floor_noise"][0]), shown


@pytest.mark.timeout(TIMEOUT + 30)
def test_p3_runs_the_local_queue_against_redis_pys_lock(tmp_path: Path) -> None:
    stdout, found, shown = quick_run(tmp_path, "P3")
    for row in ("P3 threads", "P3 tasks"):
        assert found["trips"]["new"][row] == [None, None], shown  # not cycles: none counted
        for side in ("old", "new"):
            for figures in found["rounds"][row][side]:
                for rate, cpu in (figures["lib"], figures["floor"]):
                    assert math.isfinite(rate) and rate > 0, shown
                    assert math.isfinite(cpu) and cpu > 0, shown
    assert len([line for line in stdout.splitlines() if line.startswith("| P3 ")]) == 2
