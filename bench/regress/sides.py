"""The two sides of ``python -m bench.regress``: each one's ``fencelock`` unpacked into a directory
of its own, and the worker process that imports it."""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent.parent  # the checkout this runs from
PACKAGE: Final = "src/fencelock"
TOOLS: Final = ROOT / "tools" / "fencelock-tools" / "src"  # fencelock_tools, of the checkout
GIT_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 30.0


class RegressError(RuntimeError):
    """The run cannot go on: a bad ref, a worker that died or stopped answering."""


def git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=GIT_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegressError(f"git {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise RegressError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True)
class Source:
    """What one side measures."""

    label: str  # "old" or "new"
    commit: str  # REF's commit, or the working tree's HEAD
    short: str
    dirty: bool  # the working tree has uncommitted changes (never for a ref)
    ref: str | None  # as given on the command line; None for the working tree

    @property
    def description(self) -> str:
        if self.ref is not None:
            return f"`{self.ref}` = `{self.short}`"
        return f"the working tree at `{self.short}`" + (
            " + uncommitted changes" if self.dirty else ""
        )


def ref_source(ref: str) -> Source:
    try:
        commit = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except RegressError:
        raise RegressError(f"{ref!r} names no commit in {ROOT}") from None
    return Source("old", commit, git("rev-parse", "--short", commit), False, ref)


def working_tree_source() -> Source:
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain"))
    return Source("new", commit, git("rev-parse", "--short", commit), dirty, None)


def unpack_ref(commit: str, into: Path) -> Path:
    """``git archive`` of the commit's ``src/fencelock`` unpacked into ``into``; returns the
    directory to import it from."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit, PACKAGE],
            cwd=ROOT,
            capture_output=True,
            timeout=GIT_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegressError(f"git archive {commit}: {exc}") from None
    if archive.returncode != 0:
        raise RegressError(f"git archive {commit} {PACKAGE}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return checked(into, commit)


def copy_working_tree(into: Path) -> Path:
    """The working tree's ``src/fencelock`` as git sees it (tracked files as they are now, and new
    files that are not ignored) copied into ``into``; returns the directory to import it from."""
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", PACKAGE)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # (a tracked file deleted in the working tree is not)
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return checked(into, "the working tree")


def checked(into: Path, what: str) -> Path:
    root = into / Path(PACKAGE).parent
    if not (root / "fencelock" / "__init__.py").is_file():
        raise RegressError(f"{what} has no {PACKAGE}/__init__.py")
    return root


class Worker:
    """One side's worker process (``bench.regress.worker``), which imports ``fencelock`` from
    ``root`` and ``fencelock_tools`` from the checkout; a JSON line each way per request."""

    def __init__(self, source: Source, root: Path, config: dict[str, Any]) -> None:
        self.source = source
        self.root = root
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(root), str(TOOLS), os.environ.get("PYTHONPATH")])
        )
        config = {**config, "root": str(root), "tools": str(TOOLS)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.regress.worker", json.dumps(config)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def label(self) -> str:
        return self.source.label

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def read(self, timeout: float) -> dict[str, Any]:
        """The worker's next reply, within ``timeout`` seconds."""
        _, stdout = self._pipes()
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            raise RegressError(f"the {self.label} side's worker did not answer in {timeout:g} s")
        line = stdout.readline()
        if not line:
            status = self.process.wait(STOP_TIMEOUT)
            raise RegressError(f"the {self.label} side's worker exited (status {status})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        stdin, _ = self._pipes()
        try:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
        except BrokenPipeError:
            status = self.process.wait(STOP_TIMEOUT)
            raise RegressError(f"the {self.label} side's worker exited (status {status})") from None
        return self.read(timeout)

    def close(self) -> None:
        stdin, _ = self._pipes()
        try:
            if self.process.poll() is None:
                stdin.write(json.dumps({"op": "quit"}) + "\n")
                stdin.flush()
            stdin.close()
            self.process.wait(STOP_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()
