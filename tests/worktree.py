"""A pytest plugin that fails the run when the tests leave files behind in the git work tree.

It compares ``git status`` (which leaves out what .gitignore ignores: .venv, caches) before and
after the session. Under pytest-xdist it runs once, in the controller, whose session ends after
every worker's; workers do not load it. Without git, or outside a work tree, it says so in the
report header and checks nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

GIT_TIMEOUT = 60.0  # a status of a large tree on a loaded machine


def _status(root: Path) -> set[str]:
    """The work tree's changed and untracked files, one porcelain line each."""
    done = subprocess.run(
        # --no-optional-locks: a status must not take the index lock another git command holds
        ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        check=True,
    )
    return set(done.stdout.splitlines())


def _work_tree(start: Path) -> tuple[Path | None, str]:
    """The work tree holding ``start``, or None and why there is none."""
    if shutil.which("git") is None:
        return None, "git not found"
    done = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=start,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
    )
    if done.returncode != 0:
        return None, f"no git work tree at {start}: {done.stderr.strip()}"
    return Path(done.stdout.strip()), ""


class WorkTreeGuard:
    def __init__(self, start: Path) -> None:
        self.root, self.why_not = _work_tree(start)
        self.before = _status(self.root) if self.root is not None else set()
        self.left: list[str] = []

    def pytest_report_header(self) -> str:
        if self.root is None:
            return f"fencelock: files left in the work tree NOT checked ({self.why_not})"
        return f"fencelock: files left in the work tree are checked: {self.root}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.root is None:
            return
        self.left = sorted(_status(self.root) - self.before)
        if self.left and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.left:
            terminalreporter.section("files left in the work tree", red=True, bold=True)
            terminalreporter.line(f"the tests changed these under {self.root} (git status;")
            terminalreporter.line("files edited by hand during the run show up here too):")
            for line in self.left:
                terminalreporter.line(f"  {line}")


def install(config: pytest.Config) -> None:
    """Register the guard, in the controller only (xdist workers carry ``workerinput``)."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(WorkTreeGuard(config.rootpath), "fencelock-worktree")
