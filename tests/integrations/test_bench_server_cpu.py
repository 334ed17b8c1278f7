"""``python -m bench.server_cpu`` runs end to end (its figures belong in docs/benchmarks.md)."""

from __future__ import annotations

import re

import pytest

from bench import server_cpu
from fencelock_tools.servers.embedded import EmbeddedServer


def test_a_quick_run_prints_every_row(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--cycles", "50", "--repeat", "1", "--server", server.binary]
    assert server_cpu.main(args) == 0
    out = capsys.readouterr().out
    for row in ("P1 lock", "semaphore", "read", "write", "multi (3)"):
        line = next(line for line in out.splitlines() if line.startswith(f"| {row} |"))
        # the floor's commands: SET and a compare-and-delete script (EVALSHA, GET, DEL) for P1
        lib, floor = map(int, re.findall(r"\| (\d+) / (\d+) \|$", line)[0])
        assert lib > floor > 0, line
