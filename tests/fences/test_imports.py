"""``import fencelock`` and ``from fencelock import fences`` import none of the sinks' optional
libraries, and a sink imports none either (the connection or client given brings its own)."""

from __future__ import annotations

import subprocess
import sys

OPTIONAL = ("sqlalchemy", "psycopg", "boto3", "botocore", "httpx", "requests", "moto", "aiosqlite")


def imported_after(code: str) -> list[str]:
    probe = (
        f"import sys\n{code}\n"
        f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.split()


def test_fencelock_and_fences_import_no_optional_library() -> None:
    assert imported_after("import fencelock\nfrom fencelock import fences") == []


def test_each_sink_imports_no_optional_library() -> None:
    code = "from fencelock import fences\n" + "\n".join(
        f"fences.{name}" for name in __import__("fencelock.fences").fences.__all__
    )
    assert imported_after(code) == []
