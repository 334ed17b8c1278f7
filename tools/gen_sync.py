"""Generate the sync implementation (src/fencelock/_sync) from the asyncio one (_async).

python tools/gen_sync.py           # regenerate
python tools/gen_sync.py --check   # exit 1 if the committed _sync files are stale (CI)
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import tokenize_rt
import unasync

ROOT = Path(__file__).resolve().parent.parent
# (asyncio source, generated sync twin): the library, and the tests that exercise both
PAIRS = [
    (ROOT / "src" / "fencelock" / "_async", ROOT / "src" / "fencelock" / "_sync"),
    (ROOT / "tests" / "_async", ROOT / "tests" / "_sync"),
]


class _Rule(unasync.Rule):  # type: ignore[misc]
    """unasync's rule, plus: ``async_x`` -> ``sync_x`` and ``ASYNC_X`` -> ``SYNC_X`` (the paired
    primitives of ``_backend.py`` and the tests' helpers)."""

    def _unasync_name(self, name: str) -> str:
        for prefix, replacement in (("async_", "sync_"), ("ASYNC_", "SYNC_")):
            if name.startswith(prefix) and name not in self.token_replacements:
                return replacement + name[len(prefix) :]
        result: str = super()._unasync_name(name)
        return result


RULE = _Rule(
    fromdir="/_async/",
    todir="/_sync/",
    additional_replacements={
        "AsyncLockClient": "LockClient",
        "AsyncLock": "Lock",
        "AsyncWaiter": "Waiter",
        "AsyncWatchdog": "Watchdog",
        "AsyncLocalQueues": "LocalQueues",
        "AsyncExitStack": "ExitStack",
        "AbstractAsyncContextManager": "AbstractContextManager",
        "enter_async_context": "enter_context",
        "aclose": "close",
        "_async": "_sync",
    },
)

HEADER = "# GENERATED from {source} by tools/gen_sync.py: edit that file instead.\n"


def generate(path: Path) -> str:
    tokens = tokenize_rt.src_to_tokens(path.read_text(encoding="utf-8"))
    body = tokenize_rt.tokens_to_src(RULE._unasync_tokens(tokens))
    return HEADER.format(source=path.relative_to(ROOT)) + body


def main(argv: list[str]) -> int:
    check = "--check" in argv
    expected = {dst / p.name: generate(p) for src, dst in PAIRS for p in sorted(src.glob("*.py"))}
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
    extra = [p for _, dst in PAIRS for p in dst.glob("*.py") if p not in expected]
    for path in extra:
        stale.append(path)
        if not check:
            path.unlink()
    if check and stale:
        print(f"stale generated files: {', '.join(str(p.relative_to(ROOT)) for p in stale)}")
        print("run: python tools/gen_sync.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
