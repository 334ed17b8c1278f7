"""The release's metadata: one version, and the license beside it; the tools a distribution of
their own (tools/fencelock-tools), of that version."""

import tomllib
from importlib.metadata import metadata, packages_distributions, requires, version
from pathlib import Path

import fencelock
import fencelock_tools

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_metadata_has_the_version_of_the_code() -> None:
    assert version("fencelock") == fencelock.__version__


def test_the_license_is_an_spdx_expression() -> None:
    assert metadata("fencelock")["License-Expression"] == "MIT"


def test_the_tools_are_a_distribution_of_their_own_of_fencelocks_version() -> None:
    """The library's ``tools`` extra is the fencelock-tools distribution, which pins the
    library of its own version: whichever is installed first, the other matches it."""
    assert set(packages_distributions()["fencelock_tools"]) == {"fencelock-tools"}
    assert fencelock_tools.__version__ == version("fencelock-tools") == fencelock.__version__
    project = tomllib.loads((ROOT / "tools/fencelock-tools/pyproject.toml").read_text())
    assert f"fencelock=={fencelock.__version__}" in project["project"]["dependencies"]
    assert 'fencelock-tools; extra == "tools"' in (requires("fencelock") or [])
    # the library's own packages, none of the tools
    library = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert library["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "fencelock",
        "fencelock.*",
    ]
