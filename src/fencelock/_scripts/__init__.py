"""The Lua scripts, one ``.lua`` file each (KEYS/ARGV documented at the top of each file).

Scripts that take, release or hand off a lock are sent with ``prelude.lua`` in front (the one
rule for fencing tokens, and what a lock key may hold), releases with ``serve.lua`` too (serving
the waiters), the fenced writes of resources with ``fencing.lua``, versioned values with
``versioned.lua``: a script cannot call another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str  # EVALSHA sends 40 bytes instead of the source; on NOSCRIPT, EVAL reloads it

    def evalsha(self, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def eval(self, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        """The command to send after NOSCRIPT (SCRIPT FLUSH, a restart): nothing ran, and EVAL
        also caches the script for the next EVALSHA."""
        return ("EVAL", self.source, len(keys), *keys, *args)


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


# A line of a script after which its preludes go, rather than in front: what comes before it
# runs before any helper is made (each one made costs the server about what a command costs).
HELPERS = "-- (the preludes' helpers from here on)\n"


def load(name: str, *preludes: str) -> Script:
    """The script of ``name``.lua in this package, ``preludes`` (other .lua files of it) in
    front, or at its ``HELPERS`` line: a primitive's module loads its own scripts so."""
    head, marker, body = _read(name).partition(HELPERS)
    if not marker:
        head, body = "", head
    source = head + marker + "".join(_read(part) for part in preludes) + body
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ACQUIRE = load("acquire", "prelude")
RELEASE = load("release", "prelude", "serve")
RENEW = load("renew")
REENTRANT_ACQUIRE = load("reentrant_acquire", "prelude")
REENTRANT_RELEASE = load("reentrant_release", "prelude", "serve")
FENCED_SET = load("fenced_set", "fencing")
FENCED_GET = load("fenced_get", "fencing")
VERSIONED_GET = load("versioned_get", "versioned")
VERSIONED_SET = load("versioned_set", "versioned")
FENCE_RAISE = load("fence_raise", "prelude")
HANDOFF = load("handoff", "prelude")
INSPECT = load("inspect")
FORCE_RELEASE = load("force_release", "prelude", "serve")
SEMAPHORE_ACQUIRE = load("semaphore_acquire", "prelude", "semaphore")
SEMAPHORE_RELEASE = load("semaphore_release", "prelude", "semaphore")
SEMAPHORE_STATE = load("semaphore_state")
SEMAPHORE_LIMIT = load("semaphore_limit", "prelude", "semaphore")
RW_DOWNGRADE = load("rw_downgrade", "prelude", "semaphore")
MULTI_ACQUIRE = load("multi_acquire", "prelude", "serve")
MULTI_RELEASE = load("multi_release", "prelude", "serve")
