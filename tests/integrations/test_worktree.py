"""The work-tree guard (tests/worktree.py): a run that leaves files behind fails, shown on a tiny
git repository of its own, run by a pytest in a subprocess (never on this work tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0  # an interpreter per run, two more under -n 2, on a loaded machine

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not found")

CONFTEST = """
from tests.worktree import install

def pytest_configure(config):
    install(config)
"""
CLEAN = """
from pathlib import Path

def test_ignored_files_do_not_count():
    (Path(__file__).parent / "cache").mkdir(exist_ok=True)
    (Path(__file__).parent / "cache" / "ignored.txt").write_text("x")

def test_tmp_path_does_not_count(tmp_path):
    (tmp_path / "scratch.txt").write_text("x")
"""
LEAVES = """
from pathlib import Path

HERE = Path(__file__).parent

def test_writes_a_new_file():
    (HERE / "out" / "deep").mkdir(parents=True, exist_ok=True)
    (HERE / "out" / "deep" / "leftover.pid").write_text("123")

def test_changes_a_tracked_file():
    (HERE / "tracked.txt").write_text("changed")
"""


def git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed repository with the guard installed and one clean test file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\ncache/\n")
    (repo / "conftest.py").write_text(CONFTEST)
    (repo / "test_clean.py").write_text(CLEAN)
    (repo / "tracked.txt").write_text("as committed")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "tiny")
    return repo


def pytest_run(repo: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_run_that_leaves_files_fails_and_names_them(repo: Path, workers: list[str]) -> None:
    (repo / "test_leaves.py").write_text(LEAVES)
    git(repo, "add", "test_leaves.py")
    git(repo, "commit", "-q", "-m", "a test that leaves files")
    done = pytest_run(repo, *workers)
    shown = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, shown
    assert "4 passed" in shown, shown  # the tests pass: the leftovers alone fail the run
    assert shown.count("files left in the work tree =") == 1, shown
    assert shown.count("?? out/deep/leftover.pid") == 1, shown
    assert shown.count(" M tracked.txt") == 1, shown
    assert "ignored.txt" not in shown and "scratch.txt" not in shown, shown


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_clean_run_passes(repo: Path, workers: list[str]) -> None:
    (repo / "untracked-before.txt").write_text("the developer's own, there before the run")
    done = pytest_run(repo, *workers)
    shown = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.OK, shown
    assert "files left in the work tree are checked" in shown, shown
    assert "files left in the work tree =" not in shown, shown


def test_without_git_nothing_is_checked_and_the_header_says_so(repo: Path) -> None:
    (repo / "test_leaves.py").write_text(LEAVES)
    done = pytest_run(repo, path=str(Path(sys.executable).parent))
    shown = done.stdout + done.stderr
    assert "files left in the work tree NOT checked (git not found)" in shown, shown
    assert done.returncode == pytest.ExitCode.OK, shown


def test_outside_a_work_tree_nothing_is_checked_and_the_header_says_so(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_leaves.py").write_text(LEAVES.replace("tracked.txt", "new.txt"))
    done = pytest_run(tmp_path, "-p", "no:cacheprovider")  # tmp_path is in no git repository
    shown = done.stdout + done.stderr
    assert "files left in the work tree NOT checked (no git work tree" in shown, shown
    assert done.returncode == pytest.ExitCode.OK, shown
