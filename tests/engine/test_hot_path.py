"""The uncontended acquire stays a short path: few frames between ``acquire`` and the bytes of
its one EVALSHA (issue 13: at most 4 frames across at most 5 files of fencelock)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import redis.connection

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer

PACKAGE = Path(fencelock.__file__).parent


def _fencelock_frames(frame: FrameType | None) -> list[tuple[str, str]]:
    frames = []
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(PACKAGE):
            frames.append((str(path.relative_to(PACKAGE)), frame.f_code.co_name))
        frame = frame.f_back
    return frames[::-1]


def test_acquire_reaches_evalsha_in_five_frames(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacks: list[list[tuple[str, str]]] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def spy(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        data = b"".join(command) if isinstance(command, list) else command
        if b"EVALSHA" in data:
            stacks.append(_fencelock_frames(sys._getframe(1)))
        return send(self, command, *args, **kwargs)

    with fencelock.LockClient.from_url(server.url) as client:
        lock = client.lock("hot-path", ttl=10)
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", spy)
        assert lock.acquire(timeout=0)
        monkeypatch.undo()
        lock.release()
    [frames] = stacks  # one request: the acquire script
    assert frames[0] == ("_sync/lock.py", "acquire")
    assert frames[1] == ("_sync/engine.py", "acquire")  # the facade, then the lease engine
    assert len(frames) <= 5, frames
    assert len({file for file, _ in frames}) <= 5, frames
