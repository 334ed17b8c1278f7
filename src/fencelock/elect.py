"""``fencelock elect`` and ``fencelock leader``: run a command only while leading an election,
and show who leads (docs/election.md).

``fencelock elect NAME -- COMMAND`` is ``fencelock run`` (run.py) with an election for the lock:
it campaigns (waits to lead; ``--timeout``: give up, status 75), runs COMMAND with its term as
``FENCELOCK_TERM`` (and ``FENCELOCK_TOKEN``, the same number: guard COMMAND's writes with it),
and resigns when COMMAND exits, exiting with its status. If the leadership is lost meanwhile,
COMMAND's process group gets SIGTERM, then SIGKILL after ``--grace``, and the exit status is 70.
It never campaigns again by itself: a supervisor that restarts it (systemd ``Restart=always``,
a shell loop) makes a standby that takes over; each run is one term, so COMMAND never outlives
the leadership it was started under.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import TextIO

from . import LockClient
from ._sync.election import Election
from ._sync.lock import Lock
from .labels import holder_label
from .operate import EX_REFUSED, _shown
from .run import Runner


class ElectRunner(Runner):
    """One ``fencelock elect``: campaign, run COMMAND while leading, resign."""

    prog = "fencelock elect"

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        ttl: float,
        timeout: float | None,
        grace: float,
        urls: Sequence[str],
        label: str | None,
    ) -> None:
        super().__init__(name, command, ttl=ttl, timeout=timeout, grace=grace, urls=urls)
        self.label = holder_label() if label is None else label

    def _make_lock(self, client: LockClient) -> Lock | Election:
        # "raise", not the default: the loss is handled here (COMMAND stopped, status 70)
        return client.election(
            self.name, self.ttl, label=self.label, on_lost=self._on_lost, on_lost_policy="raise"
        )

    def _environment(self, token: int) -> dict[str, str]:
        return {**super()._environment(token), "FENCELOCK_TERM": str(token)}


def leader(client: LockClient, name: str, json_out: bool, out: TextIO) -> int:
    """Print who leads ``name``: 0, or 1 when nobody does."""
    now = client.election(name).leader()
    if json_out:
        print(json.dumps(None if now is None else asdict(now)), file=out)
    elif now is None:
        print(f"{_shown(name)}: no leader", file=out)
    else:
        ttl = "no expiry" if now.ttl is None else f"{now.ttl:.3f} s"
        term = "-" if now.term is None else str(now.term)
        print(f"label:  {_shown(now.label)}\nterm:   {term}\nttl:    {ttl}", file=out)
        print(f"holder: {now.holder}", file=out)
    return EX_REFUSED if now is None else 0
