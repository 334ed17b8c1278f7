"""``python -m bench.herd --quick`` end to end on a real server: both wake modes run, nothing is
lost or overlaps, and the server's counters were read over the runs. No timing is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis

from fencelock_tools.servers.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90.0  # spawns a few interpreters per run; a loaded box is slow


def test_quick_run_measures_both_modes(
    server: EmbeddedServer, raw: redis.Redis, tmp_path: Path
) -> None:
    out = tmp_path / "herd.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.herd", "--quick", "--url", server.url, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    shown = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, shown
    results = json.loads(out.read_text())["results"]
    assert {r["mode"] for r in results} == {"all", "one"}
    assert len({r["processes"] for r in results}) >= 2
    for result in results:
        where = f"{result['processes']} processes, wake={result['mode']}: {result}\n{shown}"
        assert result["error"] is None, where
        assert result["runs"], where
        assert result["lost_updates"] == 0, where
        assert result["overlaps"] == 0, where
        for run in result["runs"]:
            assert run["total"] > 0, where
            assert run["lost_updates"] == 0 and run["overlaps"] == 0, where
            assert run["commands_per_acquisition"] > 0, where
            # every grant took an acquire script and a release script, at least
            assert run["scripts_per_acquisition"] >= 2, where
            assert run["wakeups_per_acquisition"] is not None, where  # the workers counted
    for mode in ("all", "one"):
        assert f"| {mode} |" in done.stdout, shown  # a table line per mode
    assert not raw.keys("*fencelock-bench*"), "benchmark keys left behind"
