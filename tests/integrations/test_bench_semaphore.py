"""``python -m bench.semaphore`` runs end to end (its figures belong in docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from bench import semaphore
from fencelock_tools.servers.embedded import EmbeddedServer


@pytest.mark.parametrize("fresh", [[], ["--fresh"]], ids=["one object", "fresh objects"])
def test_a_quick_run_prints_the_table(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str], fresh: list[str]
) -> None:
    args = ["--seconds", "0.05", "--repeat", "1", "--warmup", "0", "--url", server.url, *fresh]
    assert semaphore.main(args) == 0
    out = capsys.readouterr().out
    assert "fencelock sync / minimal sync" in out and "fencelock async" in out
    for what in ("read", "write", "multi (3)"):
        assert f"fencelock {what} / minimal {what}" in out
