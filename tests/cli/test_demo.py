"""``fencelock demo`` end to end: real server, real processes, a real SIGSTOP."""

from __future__ import annotations

import multiprocessing
import signal

import pytest

from fencelock.cli import main
from fencelock_tools.servers.embedded import ServerNotFound, find_server

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP/SIGCONT")


def test_demo_fences_off_the_frozen_holder(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        find_server()
    except ServerNotFound as exc:
        pytest.skip(str(exc))

    status = main(["demo", "--workers", "3", "--seconds", "2"])

    out = capsys.readouterr().out
    assert status == 0, out
    assert "REFUSED: StaleToken" in out  # the event, as it happened
    assert "stale write refused: yes" in out  # and the summary
    assert "lock.check() after the freeze: raised LockLost" in out
    assert "violations: 0 " in out
    assert "hand-off latency (release -> next process's grant" in out  # some were measured
    assert not multiprocessing.active_children()  # every worker was joined
