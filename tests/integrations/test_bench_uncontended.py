"""``python -m bench.uncontended --count``: what one cycle costs the client, without a clock."""

from __future__ import annotations

import pytest

from bench import uncontended
from fencelock_tools.servers.embedded import EmbeddedServer


def test_count_prints_what_each_variant_calls(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert uncontended.main(["--count", "--url", server.url]) == 0
    out = capsys.readouterr().out
    rows = {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| variant")
        for cells in [line.strip("| ").split(" | ")]
    }
    libraries = ("fencelock", "minimal", "redis-py Lock")
    assert set(rows) == {f"{api} {lib}" for api in ("sync", "asyncio") for lib in libraries}
    assert all(float(cells[0]) > 0 and float(cells[1]) > 0 for cells in rows.values())
    # the asyncio loop's own counts (test_asyncio_only pins fencelock's)
    steps, waits, tasks, timers = rows["asyncio fencelock"][2:]
    assert (steps, waits, tasks, timers) == ("4", "2", "0", "2")
