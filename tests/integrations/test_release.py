"""The release's metadata: one version, and the license beside it."""

from importlib.metadata import metadata, version

import fencelock


def test_the_package_metadata_has_the_version_of_the_code() -> None:
    assert version("fencelock") == fencelock.__version__


def test_the_license_is_an_spdx_expression() -> None:
    assert metadata("fencelock")["License-Expression"] == "MIT"
