"""``python -m bench.fences`` end to end with a few writes: every sink's pair runs, fenced and
not, and its row is printed. No timing is checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_sink_is_measured_fenced_and_not() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fences", "--writes", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    table = done.stdout.split("\n\n")[-1]
    sinks = [line.split(" | ")[0] for line in table.splitlines()[2:]]
    assert [s.split()[1] for s in sinks] == ["PostgreSQL", "SQLite", "file,", "S3", "HTTP", "Redis"]
