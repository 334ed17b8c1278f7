"""A value written by compare-and-set, without a lock: ``client.versioned(key)``.

The value is a plain string key; a companion key in its slot counts the writes
(_scripts/versioned.lua). A write names the version it read and is refused if another write came
first, so concurrent read-modify-writes never lose an update: the loser reads again and retries.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._backend import async_public_name, async_sleep
from .._core.backoff import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_RETRIES,
    backoff_delay,
    validate_backoff,
    validate_retries,
)
from .._core.replies import versioned_reply, versioned_set_reply
from .._keys import Value, validate_value, version_key_for
from .._scripts import VERSIONED_GET, VERSIONED_SET, Script
from ..errors import TooManyConflicts

MAX_VERSION = 2**63 - 1  # INCR counts in signed 64 bits

# runs a script on the server of the value, within one request timeout
Run = Callable[[Script, Sequence[str], Sequence[Any]], Awaitable[Any]]


class AsyncVersioned:
    """A versioned value (made by ``LockClient.versioned``). Values are read back as bytes
    (None: no value), whatever the client's ``decode_responses``; each method sends one request
    per try, bounded by the client's request timeout."""

    def __init__(self, key: str, run: Run) -> None:
        self.key = key
        self._keys = (key, version_key_for(key))
        self._run = run

    def __repr__(self) -> str:
        public = async_public_name(self)
        return f"<{public} {self.key!r}>"

    async def get(self) -> tuple[bytes | None, int]:
        """(value, version); an unset key is (None, 0)."""
        return versioned_reply(await self._run(VERSIONED_GET, self._keys, ()))

    async def set(self, value: Value, version: int) -> bool:
        """Write ``value`` if the version is still ``version`` (it becomes ``version + 1``);
        False, writing nothing, if another write came first."""
        value = validate_value(value)
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        if not 0 <= version <= MAX_VERSION:
            raise ValueError(f"version must be from 0 to 2**63 - 1, got {version}")
        written, _, _ = await self._write(value, version)
        return written

    async def _write(self, value: Value, version: int) -> tuple[bool, bytes | None, int]:
        return versioned_set_reply(await self._run(VERSIONED_SET, self._keys, (value, version)))

    async def update(
        self,
        fn: Callable[[bytes | None], Value],
        *,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
    ) -> tuple[Value, int]:
        """Write ``fn(value)``, re-reading and calling ``fn`` again (so keep it free of side
        effects) each time another write came first, up to ``retries`` times; then raise
        ``TooManyConflicts``. Returns (what ``fn`` returned and was written, its version).

        The first conflict re-tries at once with the value the refusal sent back; later ones
        wait a random time up to ``backoff`` doubled per conflict, at most ``max_backoff``
        seconds (``_core/backoff.py``), then read again."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        retries = validate_retries(retries)
        base, cap = validate_backoff(backoff, max_backoff)
        value, version = await self.get()
        for conflicts in range(retries + 1):
            if conflicts > 1:
                await async_sleep(backoff_delay(conflicts - 1, base, cap, random.random()))
                value, version = await self.get()
            new = validate_value(fn(value), "the value fn returned")
            written, value, version = await self._write(new, version)
            if written:
                return new, version
        raise TooManyConflicts(self.key, retries + 1)
