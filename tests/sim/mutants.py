"""Proof that the explorer bites (issue 25, part 5; issue 29): past fixes undone, and the
bugs a script or the watchdog could plausibly have, in scratch copies made for one run. A
mutant of a ``.lua`` file is run by the simulated servers in place of the original, under the
original's sha (the library sends its EVALSHA unchanged); a mutant of a function (or of a
method) is its own source with one change, compiled in its module's namespace and patched in
for the run. Each must be found by the explorer within the CI budget
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
from fencelock._async import engine, grants, handoff, singleflight, watchdog
from fencelock._core import lease, quorum


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str  # the fix undone, or the break
    config: str  # the explorer's configuration that must find it
    scripts: tuple[tuple[scripts.Script, str, str], ...] = ()  # (script, old, new)
    functions: tuple[tuple[Any, str, ModuleType, str, str], ...] = ()
    # (where it is looked up: the module that calls it, or a method's class; name; the module
    # it is defined in; old; new)

    def patches(self) -> dict[str, str]:
        """The servers' scripts: original source -> the mutant's."""
        found = {}
        for script, old, new in self.scripts:
            count = script.source.count(old)
            assert count == 1, f"{self.name}: {old!r} {count} times in {script.name}"
            found[script.source] = script.source.replace(old, new)
        return found

    @contextlib.contextmanager
    def functions_patched(self) -> Iterator[None]:
        saved: list[tuple[Any, str, Any]] = []
        try:
            for owner, name, home, old, new in self.functions:
                original = getattr(owner, name)
                saved.append((owner, name, original))
                setattr(owner, name, _mutated(original, home, old, new))
            yield
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)


def _mutated(original: Any, module: ModuleType, old: str, new: str) -> Any:
    """``original`` (a function or method of ``module``) compiled from its source with ``old``
    replaced by ``new``, in the module's own namespace (so it sees the other mutants patched
    in), which is left as it was."""
    name = original.__name__
    source = textwrap.dedent(inspect.getsource(original))
    count = source.count(old)
    assert count == 1, f"{old!r} {count} times in {module.__name__}.{original.__qualname__}"
    flags = __future__.annotations.compiler_flag
    code = compile(
        source.replace(old, new), module.__file__ or "", "exec", flags=flags, dont_inherit=True
    )
    namespace = vars(module)
    before = namespace.get(name, _ABSENT)
    exec(code, namespace)
    mutant = namespace[name]
    if before is _ABSENT:  # a method's name: not the module's
        del namespace[name]
    else:
        namespace[name] = before
    return mutant


_ABSENT = object()


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
                "if not grant.lost and parts.topology.traits.local_handoff",
                "if parts.topology.traits.local_handoff",
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
    # -- a release publishes only to the waiters the queue holds (issue 34) -------------------
    Mutant(
        "uncontended-release-ignores-the-queue",
        "release.lua's uncontended path returns without looking at the queue: a queued waiter "
        "is not served, and waits for the holder's lease end",
        "lock",
        scripts=((scripts.RELEASE, "and redis.call('EXISTS', KEYS[2]) == 0 then", "then"),),
    ),
    Mutant(
        "reentrant-waiter-not-queued",
        "reentrant_acquire.lua does not put the waiters woken together ('*') in the queue: a "
        "release, which publishes only to queued waiters, wakes none",
        "reentrant",
        scripts=((scripts.REENTRANT_ACQUIRE, "if ARGV[5] == '*' then", "if false then"),),
    ),
    # -- Redlock's token folded into the acquire (issue 34) -------------------------------------
    Mutant(
        "redlock-tokens-differ-unconfirmed",
        "a Redlock grant whose majority answered different tokens is taken as confirmed: the "
        "largest is not written back, and a later majority without its node hands out less",
        "redlock-ahead",
        functions=(
            (
                grants,
                "acquire_outcome",
                quorum,
                "confirmed=fences.count(top) >= need",
                "confirmed=True",
            ),
        ),
    ),
    # -- the watchdog's path (issue 29): renewals, and the losses they find -------------------
    Mutant(
        "renew-whoever-holds",
        "renew.lua extends a lock's lease whoever holds it (the holder token is not compared)",
        "renewed-lock",
        scripts=(
            (
                scripts.RENEW,
                "owned = counted or string.sub(value, 1, #holder + 1) == holder .. ' '",
                "owned = value ~= false",
            ),
        ),
    ),
    Mutant(
        "refused-renewal-not-lost",
        "the watchdog takes a refused renewal for a failed one: it tries again soon instead of "
        "declaring the lease lost",
        "renewed-lock",
        functions=(
            (
                watchdog.AsyncWatchdog,
                "_renew",
                watchdog,
                'self._lose(lease, "at renewal", other_holder=ok == TAKEN)',
                "lease.renew_at = renewal_retry(now, spec.ttl)",
            ),
        ),
    ),
    Mutant(
        "cancel-policy-not-applied",
        'on_lost_policy="cancel" misspelt where a loss is declared: the block runs on',
        "renewed-election",
        functions=((engine, "should_cancel", lease, 'policy == "cancel"', 'policy == "canceled"'),),
    ),
    Mutant(
        "renewal-a-ttl-later",
        "the watchdog renews a lease a whole ttl after its last renewal (at its end), not a "
        "third of it",
        "renewed-semaphore",
        functions=(
            (
                watchdog.AsyncWatchdog,
                "_renew",
                watchdog,
                "lease.renew_at = next_renewal(sent_at, spec.ttl)",
                "lease.renew_at = sent_at + spec.ttl",
            ),
        ),
    ),
    Mutant(
        "no-loss-at-the-deadline",
        "the watchdog leaves a lease past its local deadline to its next renewal's refusal "
        "(which a renewal with no time left never gets): only check() declares the loss",
        "renewed-lock",
        functions=(
            (
                watchdog.AsyncWatchdog,
                "_expire",
                watchdog,
                'self._lose(lease, "by its local deadline, no renewal confirmed")',
                "continue",
            ),
        ),
    ),
    Mutant(
        "renewal-in-seconds-times-1000",
        "renew.lua converts a lock's ttl to milliseconds again: its key is renewed for a "
        "thousand ttls",
        "renewed-lock",
        scripts=(
            (
                scripts.RENEW,
                "tonumber(ttl), math.floor(token / 1000) + 2)\n"
                "    redis.call('SET', key, value, 'PXAT', string.format('%d', ends))\n"
                "  elseif owned and kind ~= 'zset' then\n"
                "    redis.call('PEXPIRE', key, ttl)",
                "tonumber(ttl) * 1000, math.floor(token / 1000) + 2)\n"
                "    redis.call('SET', key, value, 'PXAT', string.format('%d', ends))\n"
                "  elseif owned and kind ~= 'zset' then\n"
                "    redis.call('PEXPIRE', key, ttl * 1000)",
            ),
        ),
    ),
    Mutant(
        "permit-renewal-adds-a-ttl",
        "renew.lua adds a ttl to a permit's lease instead of restarting it a ttl from now",
        "renewed-semaphore",
        scripts=(
            (
                scripts.RENEW,
                "'XX', now + tonumber(ttl), holder)",
                "'XX', tonumber(ends) + tonumber(ttl), holder)",
            ),
        ),
    ),
)
