"""The command line's shape: a package with one module per family of commands, which import
only the shared modules (never each other) and read no other module's private names; each
subcommand says its own usage; and both ways of starting it work."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import fencelock
import fencelock.cli
from fencelock.cli import build_parser, main
from tests.cli.test_cli_run import _env
from tests.concurrency import TIMEOUT

PACKAGE = Path(fencelock.cli.__file__).parent
TREES = {path.stem: ast.parse(path.read_text(), str(path)) for path in PACKAGE.glob("*.py")}


def _defines(tree: ast.Module, function: str) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name == function for node in tree.body)


# a command module adds its commands to the parser; the other modules are shared
COMMANDS = {name for name, tree in TREES.items() if _defines(tree, "add_commands")}
SHARED = set(TREES) - COMMANDS - {"__init__"}


def _imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import name``, relative modules made absolute
    (``from . import x``: ("fencelock.cli", "x")), and ("module", "") for ``import module``."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "fencelock.cli" if node.level == 1 else "fencelock" if node.level == 2 else ""
            module = ".".join(part for part in (base, node.module) if part)
            found += [(module, alias.name) for alias in node.names]
    return found


def _cli_modules(tree: ast.Module) -> set[str]:
    """The modules of the package that ``tree`` imports."""
    used = set()
    for module, name in _imports(tree):
        if module == "fencelock.cli" and name in TREES:
            used.add(name)
        elif module.startswith("fencelock.cli."):
            used.add(module.removeprefix("fencelock.cli."))
    return used


def test_the_families_and_the_shared_modules() -> None:
    assert {"_run", "_elect", "_operate", "_tools", "_doctor"} == COMMANDS
    assert {"_common", "_supervise"} == SHARED
    assert _cli_modules(TREES["__init__"]) >= COMMANDS


@pytest.mark.parametrize("module", sorted(COMMANDS | SHARED))
def test_no_command_module_is_imported_by_another_module(module: str) -> None:
    assert _cli_modules(TREES[module]) <= SHARED - {module}


@pytest.mark.parametrize("module", sorted(TREES))
def test_no_module_reads_another_modules_private_names(module: str) -> None:
    tree = TREES[module]
    imported = [
        name
        for source, name in _imports(tree)
        if name.startswith("_")
        and not name.startswith("__")
        # (the package's own modules, which the package itself imports)
        and not (module == "__init__" and source == "fencelock.cli" and name in TREES)
    ]
    assert imported == []
    modules = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom | ast.Import)
        for alias in node.names
    }
    read = [
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]
    assert read == []


# doctor applies the rules the client warns by (one code path): fencelock._core.hazards, and
# what the server is, fencelock._core.natives
INTERNAL = {"_doctor": {"fencelock._core"}}


@pytest.mark.parametrize("module", sorted(TREES.keys() - {"_common"}))
def test_the_library_is_used_through_its_public_names(module: str) -> None:
    """Only the argument types of ``_common`` check values with the library's own validators,
    and doctor applies the library's rules of a deployment; everything else takes what
    ``import fencelock`` offers, as an application would."""
    for source, name in _imports(TREES[module]):
        if source.split(".")[0] == "fencelock" and not source.startswith("fencelock.cli"):
            if source in INTERNAL.get(module, ()):
                assert name in ("hazards", "natives"), (source, name)
                continue
            assert source == "fencelock" and name in [*fencelock.__all__], (source, name)


# each subcommand with what it requires besides options
REQUIRED = {
    "bench": [],
    "demo": [],
    "doctor": [],
    "elect": ["job", "--", "true"],
    "inspect": ["job"],
    "leader": ["job"],
    "ls": [],
    "release": ["job"],
    "run": ["job", "--", "true"],
    "top": [],
}


def test_every_subcommand_is_checked_below() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(commands) == sorted(REQUIRED)


@pytest.mark.parametrize("command", sorted(REQUIRED))
def test_an_unknown_option_prints_the_subcommands_usage(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fencelock", command, "--no-such-option", *REQUIRED[command]],
        env=_env(FENCELOCK_URL="redis://127.0.0.1:1/0"),  # nothing there: usage comes first
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 64, done.stderr
    assert done.stderr.startswith(f"usage: fencelock {command} "), done.stderr
    last = done.stderr.splitlines()[-1]
    assert last == f"fencelock {command}: error: unrecognized arguments: --no-such-option"


def test_a_command_after_a_subcommand_that_takes_none_is_its_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ls", "--", "true"])
    assert exited.value.code == 64
    assert capsys.readouterr().err.startswith("usage: fencelock ls ")


def test_the_console_script_and_python_dash_m() -> None:
    [script] = [
        ep for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.name == "fencelock"
    ]  # fmt: skip
    assert (script.value, script.load()) == ("fencelock.cli:main", main)
    installed = Path(sys.executable).with_name("fencelock")
    starts = [[sys.executable, "-m", "fencelock"]]
    if installed.exists():  # (a virtualenv's bin/: where pip put the script)
        starts.append([str(installed)])
    for start in starts:
        done = subprocess.run(
            [*start, "--version"], capture_output=True, text=True, timeout=TIMEOUT
        )
        assert (done.returncode, done.stdout) == (0, f"fencelock {fencelock.__version__}\n")
