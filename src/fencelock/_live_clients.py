"""The clients of this process not closed yet, for the metrics' gauges of what is held and
waited for now (``fencelock.metrics``), read when they are collected. Process state, hence not in
``_core``: a client adds itself when made and leaves when closed or dropped."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._core.stats import Statistics


class LiveClients:
    """Every client not closed yet, held weakly: a dropped one leaves by itself."""

    def __init__(self) -> None:
        self._guard = threading.Lock()  # (a WeakSet may not change while it is iterated)
        self._clients: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, client: object) -> None:
        with self._guard:
            self._clients.add(client)

    def discard(self, client: object) -> None:
        with self._guard:
            self._clients.discard(client)

    def total(self, gauge: Callable[[Statistics], int]) -> int:
        with self._guard:
            clients = list(self._clients)
        return sum(gauge(client.statistics()) for client in clients)


LIVE_CLIENTS = LiveClients()
