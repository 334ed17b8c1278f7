"""The Lua scripts, one ``.lua`` file each (KEYS/ARGV documented at the top of each file)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str  # EVALSHA sends 40 bytes instead of the source; on NOSCRIPT, EVAL reloads it


def _load(name: str) -> Script:
    source = resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ACQUIRE = _load("acquire")
RELEASE = _load("release")
RENEW = _load("renew")
REENTRANT_ACQUIRE = _load("reentrant_acquire")
REENTRANT_RELEASE = _load("reentrant_release")
FENCED_SET = _load("fenced_set")
FENCE_RAISE = _load("fence_raise")
HANDOFF = _load("handoff")
