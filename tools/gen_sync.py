"""Generate the sync implementation (src/fencelock/_sync) from the asyncio one (_async).

python tools/gen_sync.py           # regenerate
python tools/gen_sync.py --check   # exit 1 if the committed _sync files are stale (CI)

Either way it exits 1, naming the rule, when one of the substitution rules below matches nothing
in any source: a rule left behind by a rename would otherwise keep rewriting names silently (and
one day rewrite a name that merely looks alike).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

import tokenize_rt
import unasync

ROOT = Path(__file__).resolve().parent.parent
# (asyncio source, generated sync twin): the library, and each test layer's twin tests
# (tests/<layer>/_async -> tests/<layer>/_sync, tests/README.md)
PAIRS = [
    (ROOT / "src" / "fencelock" / "_async", ROOT / "src" / "fencelock" / "_sync"),
    (
        ROOT / "src" / "fencelock" / "compat" / "_async",
        ROOT / "src" / "fencelock" / "compat" / "_sync",
    ),
    *((layer, layer.parent / "_sync") for layer in sorted((ROOT / "tests").glob("*/_async"))),
]

# Names renamed as a whole (on top of unasync's own: __aenter__, AsyncIterator, Async* -> Sync*...)
REPLACEMENTS = {
    "AsyncLockClient": "LockClient",
    "AsyncLock": "Lock",
    "AsyncMultiLock": "MultiLock",
    "AsyncElection": "Election",
    "AsyncSemaphore": "Semaphore",
    "AsyncLease": "Lease",
    "AsyncLeaseFacade": "LeaseFacade",
    "AsyncWiring": "Wiring",
    "AsyncResources": "Resources",
    "AsyncOperators": "Operators",
    "AsyncLatch": "Latch",
    "AsyncBarrier": "Barrier",
    "AsyncReadWriteLock": "ReadWriteLock",
    "AsyncRWSide": "RWSide",
    "AsyncWaiter": "Waiter",
    "AsyncWatchdog": "Watchdog",
    "AsyncLocalQueues": "LocalQueues",
    "AsyncVersioned": "Versioned",
    "AsyncOncePer": "OncePer",
    "AsyncResults": "Results",
    "AsyncCompute": "SyncCompute",
    "AsyncExitStack": "ExitStack",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "enter_async_context": "enter_context",
    "aclose": "close",
    "_async": "_sync",
    "redis_py_asyncio": "redis_py",  # fencelock.compat's public modules
}
# Name prefixes: the paired primitives of ``_backend.py`` and the tests' helpers.
PREFIXES = {"async_": "sync_", "ASYNC_": "SYNC_"}


class Rule(unasync.Rule):  # type: ignore[misc]
    """unasync's rule with ``prefixes`` added, remembering which of its own rules (the
    replacements and prefixes given, not unasync's built-in ones) rewrote a name."""

    def __init__(self, replacements: dict[str, str], prefixes: dict[str, str]) -> None:
        super().__init__("/_async/", "/_sync/", additional_replacements=replacements)
        self.rules = [*replacements, *(f"{prefix}*" for prefix in prefixes)]
        self.prefixes = prefixes
        self.used: set[str] = set()

    def _unasync_name(self, name: str) -> str:
        for prefix, replacement in self.prefixes.items():
            if name.startswith(prefix) and name not in self.token_replacements:
                self.used.add(f"{prefix}*")
                return replacement + name[len(prefix) :]
        if name in self.rules:
            self.used.add(name)
        result: str = super()._unasync_name(name)
        return result

    def unused(self) -> list[str]:
        return [rule for rule in self.rules if rule not in self.used]


HEADER = "# GENERATED from {source} by tools/gen_sync.py: edit that file instead.\n"


def generate(rule: Rule, path: Path, root: Path = ROOT) -> str:
    tokens = tokenize_rt.src_to_tokens(path.read_text(encoding="utf-8"))
    body: str = tokenize_rt.tokens_to_src(rule._unasync_tokens(tokens))
    return HEADER.format(source=path.relative_to(root)) + body


def run(pairs: Sequence[tuple[Path, Path]], rule: Rule, check: bool, root: Path = ROOT) -> int:
    """Generate (or with ``check``, compare) every pair; 1 if anything is stale or a rule
    matched nothing."""
    expected = {
        dst / p.name: generate(rule, p, root)
        for src, dst in pairs
        for p in sorted(src.glob("*.py"))
    }
    stale = []
    for target, text in expected.items():
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            stale.append(target)
            if check:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        current.splitlines(True), text.splitlines(True), str(target), "generated"
                    )
                )
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    extra = [p for _, dst in pairs for p in dst.glob("*.py") if p not in expected]
    for path in extra:
        stale.append(path)
        if not check:
            path.unlink()
    failed = False
    if check and stale:
        print(f"stale generated files: {', '.join(str(p.relative_to(root)) for p in stale)}")
        print("run: python tools/gen_sync.py")
        failed = True
    for unused in rule.unused():
        print(f"tools/gen_sync.py: the substitution rule {unused!r} matches nothing: remove it")
        failed = True
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    return run(PAIRS, Rule(REPLACEMENTS, PREFIXES), check="--check" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
