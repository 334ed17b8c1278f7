"""``fencelock bench`` end to end (``python -m fencelock bench``), with tiny durations: a smoke
test that every workload runs and prints its line. The figures themselves are not checked."""

from __future__ import annotations

import os
import subprocess
import sys

import redis

from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from tests.concurrency import TIMEOUT

TINY = [
    "--seconds", "0.1", "--repeat", "1", "--warmup", "0.05", "--processes", "2",
    "--threads", "2", "--locks", "50", "--renew-ttl", "0.3", "--renew-seconds", "0.3",
    "--memory-locks", "20",
]  # fmt: skip


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FENCELOCK_URL", "REDIS_URL")}
    return subprocess.run(
        [sys.executable, "-m", "fencelock", "bench", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_bench_runs_every_workload(server: EmbeddedServer, raw: redis.Redis) -> None:
    redlock = f"redis://127.0.0.1:{server.port}/1"  # Redlock over one master, in database 1
    # (a node timeout a loaded machine keeps: the default, 50 ms here, was overrun once under
    # two CPU burners and the suite, and the bench stopped at P4)
    done = bench("--url", server.url, "--redlock", redlock, "--node-timeout", "5", *TINY)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for workload in ("P1", "P2", "P3", "P4", "P5", "P6"):
        found = [line for line in lines if line.startswith(f"{workload} ")]
        assert found, f"no {workload} line in:\n{done.stdout}"
        assert not any("failed" in line for line in found), "\n".join(found)
    assert len([line for line in lines if line.startswith("P6 ")]) == 2  # simple, reentrant
    assert not raw.keys("*fencelock-bench*"), "benchmark keys left behind"


def test_bench_runs_chosen_workloads_only(server: EmbeddedServer, raw: redis.Redis) -> None:
    done = bench("--url", server.url, "--workload", "p1,P6", *TINY)
    assert done.returncode == 0, done.stderr
    shown = {line.split()[0] for line in done.stdout.splitlines() if line[:1] == "P"}
    assert shown == {"P1", "P6"}


def test_bench_bad_usage_and_unreachable_server() -> None:
    done = bench("--workload", "P9")
    assert done.returncode == 64
    assert "P1,P2,P3,P4,P5,P6" in done.stderr
    done = bench("--renew-ttl", "0.01")  # under the library's minimum lease: refused up front
    assert done.returncode == 64
    assert "argument --renew-ttl: value must be between 0.1" in done.stderr
    done = bench("--url", f"redis://127.0.0.1:{free_port()}/0", *TINY)
    assert done.returncode == 69
    assert "fencelock bench:" in done.stderr
