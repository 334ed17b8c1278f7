"""``python -m bench.election`` runs end to end (its figures belong in docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from bench import election
from fencelock_tools.servers.embedded import EmbeddedServer


def test_a_quick_run_prints_the_failover_times(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert election.main(["--ttls", "0.3", "--repeat", "1", "--url", server.url]) == 0
    out = capsys.readouterr().out
    assert "ttl 0.3 s  SIGKILL" in out and "ttl 0.3 s  resign" in out
