"""``python -m bench.breakdown``: the requests it reads back, and short runs of each part, whose
steps must do what they are named for (no timing is checked)."""

from __future__ import annotations

import re

import pytest
import redis

from bench import breakdown
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer


def test_the_commands_of_a_request_are_read_back() -> None:
    packed = b"".join(
        [
            *redis.connection.Connection().pack_command("EVALSHA", "ab", 1, "k{x}", "", 10),
            *redis.connection.Connection().pack_command("PING"),
        ]
    )
    assert breakdown.parse_commands(packed) == [
        [b"EVALSHA", b"ab", b"1", b"k{x}", b"", b"10"],
        [b"PING"],
    ]
    with pytest.raises(breakdown.BenchError):
        breakdown.parse_commands(b"+OK\r\n")


def cells(out: list[str], label: str) -> list[str]:
    line = next(line for line in out if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_scripts_parts_run_alone(server: EmbeddedServer) -> None:
    out = breakdown.server_report(server.url, breakdown.PIPELINE, 1, 0.05)
    for label in ("SET NX PX in a script", "+ the clock-based token (mint) instead",
                  "fencelock's acquire, as sent", "+ the queue peek (ZPOPMIN, empty)",
                  "fencelock's release, as sent"):  # fmt: skip
        found = cells(out, label)
        assert found[1] == "`evalsha`", found
        assert float(found[2].split()[0]) > 0, found  # usec per call, pipelined
    assert cells(out, "SET NX PX (a command)")[1] == "`set`"
    # the floor's cycle: SET, and EVALSHA of a compare-and-delete (GET, DEL)
    assert cells(out, "minimal sync")[2].startswith("4.0 "), out
    assert re.search(r"`PING` one at a time: [\d.]+ ", "\n".join(out))


def test_the_client_is_profiled_by_layer(server: EmbeddedServer) -> None:
    found = {f.name: f for f in breakdown.profile_client(server.url, 0.05, 1, 0.2, 20)}
    assert set(found) == {
        f"{who} {mode}"
        for who in ("fencelock", "minimal", "redis-py Lock")
        for mode in ("sync", "async")
    }
    for name, figures in found.items():
        assert figures.cpu > 0, name
        assert figures.calls["redis-py"] > 0, name
        assert (figures.calls["fencelock"] > 0) == name.startswith("fencelock"), name
        assert len(figures.sends) == 2, name  # an acquire's request, a release's
    sync = found["fencelock sync"].sends
    assert sync[0].fencelock[0] == "_sync/lock.py:acquire"
    assert sync[0].fencelock[-1] == "_sync/transport.py:request"
    assert found["fencelock async"].sends[1].fencelock[-1] == "_async/transport.py:request"
    assert breakdown.client_report(list(found.values()))


@pytest.mark.timeout(180)
def test_the_wake_paths_scripts_grant_and_queue(server: EmbeddedServer, raw: redis.Redis) -> None:
    out = breakdown.wake_report(server.url, breakdown.PIPELINE, 1, 0.3)
    # each step checked its reply: a busy acquire queued, a release granted a listening waiter
    for label in ("acquire, the name held: the waiter queued",
                  "release, the name granted to the queued waiter"):  # fmt: skip
        assert float(cells(out, label)[2].split()[0]) > 0
    assert float(cells(out, "fencelock")[4]) > 0  # server CPU per grant in P2
    assert cells(out, "`evalsha`")
    keys = LockKeys.for_name(breakdown.NAME)
    assert not raw.exists(keys.lock, keys.queue), "the steps' lock or queue left behind"
