"""Proof that the explorer bites (issue 25, part 5): past fixes undone, and a script broken, in
scratch copies made for one run. A mutant of a ``.lua`` file is run by the simulated servers in
place of the original, under the original's sha (the library sends its EVALSHA unchanged); a
mutant of a function is the function's own source with one change, compiled in its module's
namespace and patched in for the run. Each must be found by the explorer within the CI budget
(``tests/explore/test_mutants.py``).
"""

from __future__ import annotations
import __future__

import contextlib
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fencelock import _scripts as scripts
from fencelock._async import handoff, singleflight
from fencelock._core import lease


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str  # the fix undone, or the break
    config: str  # the explorer's configuration that must find it
    scripts: tuple[tuple[scripts.Script, str, str], ...] = ()  # (script, old, new)
    functions: tuple[tuple[ModuleType, str, ModuleType, str, str], ...] = ()
    # (module that calls it, name, module it is defined in, old, new)

    def patches(self) -> dict[str, str]:
        """The servers' scripts: original source -> the mutant's."""
        found = {}
        for script, old, new in self.scripts:
            assert old in script.source, f"{self.name}: {old!r} not in {script.name}"
            found[script.source] = script.source.replace(old, new)
        return found

    @contextlib.contextmanager
    def functions_patched(self) -> Iterator[None]:
        saved: list[tuple[ModuleType, str, Any]] = []
        try:
            for caller, name, home, old, new in self.functions:
                saved.append((caller, name, getattr(caller, name)))
                setattr(caller, name, _mutated(home, name, old, new))
            yield
        finally:
            for caller, name, original in reversed(saved):
                setattr(caller, name, original)


def _mutated(module: ModuleType, name: str, old: str, new: str) -> Any:
    """``module.name`` compiled from its source with ``old`` replaced by ``new``, in the module's
    own namespace (so it sees the other mutants patched in)."""
    original = getattr(module, name)
    source = textwrap.dedent(inspect.getsource(original))
    assert old in source, f"{old!r} not in {module.__name__}.{name}"
    flags = __future__.annotations.compiler_flag
    code = compile(
        source.replace(old, new), module.__file__ or "", "exec", flags=flags, dont_inherit=True
    )
    exec(code, vars(module))
    mutant = getattr(module, name)
    setattr(module, name, original)  # (patched in where it is called, for the run only)
    return mutant


MUTANTS = (
    Mutant(
        "handoff-of-a-lost-grant",
        "commit 42f5d9b undone: a grant the watchdog declared lost is handed on within its block "
        "(give_up's lost check and handoff_within_block's expiry check removed)",
        "handoff",
        functions=(
            (
                handoff,
                "give_up",
                handoff,
                "if not grant.lost and topology.local_handoff",
                "if topology.local_handoff",
            ),
            (handoff, "handoff_within_block", lease, "grant.expired(now)", "False"),
        ),
    ),
    Mutant(
        "semaphore-late-confirmation-token",
        "commit 1694ce5's t:<holder> undone: a late confirmation of a semaphore grant answers "
        "the counter (another grant's token) instead of its own",
        "semaphore",
        scripts=(
            (
                scripts.SEMAPHORE_ACQUIRE,
                "local token = redis.call('HGET', state, 't:' .. holder)",
                "local token = false",
            ),
        ),
    ),
    Mutant(
        "lapsed-holder-keeps-the-turn",
        "commit 698df34 undone: a local holder whose lease ran out without a release keeps the "
        "local queue's turn, so the client's other lock objects never get the name",
        "lapse",
        functions=(
            (
                singleflight,
                "_gone",
                singleflight,
                "return owner is None or (not isinstance(owner, Ticket) and owner.expired(now))",
                "return owner is None",
            ),
        ),
    ),
    Mutant(
        "release-without-token-check",
        "release.lua deletes the lock whoever holds it (the holder token is not compared)",
        "expiry",
        scripts=((scripts.RELEASE, "if holder ~= ARGV[1] then", "if holder == false then"),),
    ),
)
