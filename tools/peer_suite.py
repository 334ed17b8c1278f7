"""Run a peer library's own lock tests against its fencelock.compat layer.

python tools/peer_suite.py                 # redis-py, both server kinds; exit 1 on a surprise
python tools/peer_suite.py --peer python-redis-lock
python tools/peer_suite.py --servers redis --no-differences   # the deliberate failures unmarked
python tools/peer_suite.py --json   # the counts as JSON (tests/integrations/test_compat_*.py)
python tools/peer_suite.py --map-keys      # their commands on a lock's key go to fencelock's

The test files are not kept in this repository: the peer's source distribution (redis-py: of
the installed version) is downloaded once (``pip download``) into a cache directory
(``FENCELOCK_PEER_CACHE``, default ~/.cache/fencelock/peer-suites), and its lock tests are
extracted from it beside the shim conftests of tools/peer_shims/<peer> (which make its ``Lock``
ours, start the server, and mark each test that fails on purpose with the difference that
explains it). Exit status 3: the download failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Peer:
    dist: str  # its name for pip
    version: str
    files: tuple[str, ...]  # extracted from the sdist
    shims: Path  # copied over the extracted tree
    packages: tuple[str, ...] = ()  # directories made packages (for their relative imports)


PEERS = {
    "redis-py": Peer(
        "redis",
        importlib.metadata.version("redis"),
        ("tests/test_lock.py", "tests/test_asyncio/test_lock.py"),
        ROOT / "tools" / "peer_shims" / "redis_py",
        ("tests", "tests/test_asyncio"),
    ),
    # not a dependency: its last release (2022)
    "python-redis-lock": Peer(
        "python-redis-lock",
        "4.0.1",
        ("tests/test_redis_lock.py", "tests/config.py"),
        ROOT / "tools" / "peer_shims" / "redis_lock",
    ),
}
PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    onlynoncluster: redis-py's marker (a single server here)
"""
DOWNLOAD_TIMEOUT = 120
RUN_TIMEOUT = 300


class Unavailable(RuntimeError):
    """The test files could not be had (no network, no such version...)."""


def cache_dir() -> Path:
    explicit = os.environ.get("FENCELOCK_PEER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fencelock" / "peer-suites"


def sdist(peer: Peer) -> Path:
    """The peer's source distribution, downloaded into the cache if need be."""
    cache = cache_dir()
    path = cache / f"{peer.dist}-{peer.version}.tar.gz"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    wanted = f"{peer.dist}=={peer.version}"
    # into a directory of its own, then renamed: a run beside this one sees it whole or not at all
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q"]
        command += ["--no-binary", ":all:", "--no-deps", wanted, "-d", tmp]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download took over {DOWNLOAD_TIMEOUT} s") from None
        got = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or len(got) != 1:
            raise Unavailable(f"pip download {wanted} failed: {done.stderr.strip()[-500:]}")
        os.replace(got[0], path)
    return path


def prepare(peer: Peer, work: Path) -> None:
    """The peer's test files in ``work``, with the shims."""
    with tarfile.open(sdist(peer)) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in peer.files:
            member = tar.extractfile(f"{top}/{name}")
            if member is None:
                raise Unavailable(f"{name} is not in the {peer.dist} {peer.version} sdist")
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(member.read())
    shutil.copytree(peer.shims, work / "tests", dirs_exist_ok=True)
    for package in peer.packages:
        (work / package / "__init__.py").touch()
    (work / "pytest.ini").write_text(PYTEST_INI)


def outcomes(junit: Path) -> dict[str, object]:
    """Counts per outcome and the tests that failed, from pytest's JUnit XML."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    failed = []
    reasons: dict[str, int] = {}  # deliberate difference -> tests it fails
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}.{case.get('name')}"
        children = {child.tag: child for child in case}
        skipped = children.get("skipped")
        if "failure" in children or "error" in children:
            counts["failed"] += 1
            failed.append(test)
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            counts["xfailed"] += 1
            reason = (skipped.get("message") or "").removeprefix("xfail: ").removeprefix("reason: ")
            reasons[reason] = reasons.get(reason, 0) + 1
        elif skipped is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "failures": failed, "differences": reasons}


def run(
    peer: Peer,
    kinds: list[str],
    differences: bool = True,
    verbose: bool = False,
    map_keys: bool = False,
) -> dict[str, object]:
    """Per server kind: the counts of the peer's lock tests through fencelock.compat."""
    results: dict[str, object] = {"version": peer.version}
    with tempfile.TemporaryDirectory(prefix="fencelock-peer-") as tmp:
        work = Path(tmp)
        prepare(peer, work)
        runs = {}
        for kind in kinds:  # the kinds run side by side: the tests mostly wait
            command = [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider"]
            command += ["-q" if verbose else "-qq", f"--junitxml={work / kind}.xml"]
            if not differences:
                command.append("--no-differences")
            env = {**os.environ, "FENCELOCK_PEER_SERVER": kind}
            env["FENCELOCK_PEER_MAP_KEYS"] = "1" if map_keys else "0"
            output = None if verbose else subprocess.DEVNULL
            runs[kind] = subprocess.Popen(command, cwd=work, env=env, stdout=output)
        for kind, process in runs.items():
            process.wait(timeout=RUN_TIMEOUT)
            results[kind] = outcomes(work / f"{kind}.xml")
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", choices=sorted(PEERS), default="redis-py")
    parser.add_argument("--servers", default="redis,valkey", help="server kinds, comma-separated")
    parser.add_argument("--no-differences", action="store_true", help="no xfail marks")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument(
        "--map-keys",
        action="store_true",
        help="the tests' own commands on a lock's key go to fencelock's key of that lock",
    )
    args = parser.parse_args(argv)
    try:
        peer = PEERS[args.peer]
        kinds = args.servers.split(",")
        results = run(peer, kinds, not args.no_differences, not args.json, args.map_keys)
    except Unavailable as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(results))
    else:
        mapped = " (keys mapped)" if args.map_keys else ""
        print(f"{args.peer} {peer.version}'s lock tests through fencelock.compat{mapped}:")
        for kind in args.servers.split(","):
            counts = results[kind]
            assert isinstance(counts, dict)
            shown = ", ".join(f"{counts[k]} {k}" for k in ("passed", "xfailed", "skipped"))
            print(f"  {kind}: {shown}, {counts['failed']} failed {counts['failures'] or ''}")
            for reason, n in counts["differences"].items():
                print(f"    xfailed {n}: {reason}")
    bad = any(isinstance(c, dict) and c["failed"] for c in results.values())
    return 1 if bad and not args.no_differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
