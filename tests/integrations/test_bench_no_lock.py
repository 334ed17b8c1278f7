"""``python -m bench.no_lock`` end to end with minimal settings: every variant writes and loses
no update, and the benchmark's keys are gone afterwards. No timing is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

from fencelock_tools.servers.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90.0  # spawns interpreters; a loaded box is slow


def test_every_variant_writes_and_loses_nothing(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    out = tmp_path / "no_lock.json"
    command = ["--quick", "--seconds", "0.1", "--url", server.url, "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.no_lock", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    shown = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, shown
    results = json.loads(out.read_text())["results"]
    assert {(r["workload"], r["strategy"]) for r in results} == {
        ("hot", "mutex"),
        ("hot", "versioned"),
        ("hot", "atomic"),
        ("hot", "partitioned"),
        ("spread", "mutex"),
        ("spread", "versioned"),
        ("spread", "atomic"),
    }
    for result in results:
        assert result["error"] is None and result["lost_updates"] == 0, shown
        assert result["writes"] > 0, shown
        assert "| hot | versioned |" in done.stdout, shown
    assert not raw.keys("*fencelock-bench-no-lock*"), "benchmark keys left behind"
