"""``fencelock`` and ``fencelock.asyncio`` export the same names, every one of them resolves, and
both modules are what tools/gen_exports.py writes from src/fencelock/_exports.py (no server)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import fencelock
import fencelock.asyncio
from fencelock._exports import EXPORTS, PACKAGE_ONLY, Shared, Twin

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gen_exports.py"
_spec = importlib.util.spec_from_file_location("gen_exports", TOOL)
assert _spec is not None and _spec.loader is not None
gen_exports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_exports)


def test_both_apis_export_the_names_of_the_list() -> None:
    assert PACKAGE_ONLY == ("__version__",)
    assert sorted(fencelock.__all__) == fencelock.__all__  # (as the generator writes it)
    assert set(fencelock.__all__) == {*EXPORTS, "__version__"}
    assert fencelock.asyncio.__all__ == [n for n in fencelock.__all__ if n != "__version__"]


@pytest.mark.parametrize("module", [fencelock, fencelock.asyncio], ids=lambda m: m.__name__)
def test_every_exported_name_resolves(module: ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)  # (AttributeError on a name missing)
    assert set(namespace) - {"__builtins__"} == set(module.__all__)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_name_is_its_twin_or_the_same_object_in_both(name: str) -> None:
    sync, asyncio = getattr(fencelock, name), getattr(fencelock.asyncio, name)
    origin = EXPORTS[name]
    if isinstance(origin, Twin):
        assert sync.__module__ == f"fencelock._sync.{origin.module}"
        assert asyncio.__module__ == f"fencelock._async.{origin.module}"
        assert (sync.__name__, asyncio.__name__) == (name, f"Async{name}")
    else:
        assert isinstance(origin, Shared)
        assert sync is asyncio
        assert sync.__module__ == f"fencelock.{origin.module}"


def test_the_real_modules_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def copies(tmp_path: Path) -> tuple[ModuleType, list[object]]:
    exports = gen_exports.load_exports()
    for target in gen_exports.targets(exports):
        shutil.copy(target.path, tmp_path / target.path.name)
    return exports, gen_exports.targets(exports, tmp_path)


def test_a_stale_module_fails_the_check_and_is_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exports, modules = copies(tmp_path)
    asyncio_py = tmp_path / "asyncio.py"
    fresh = asyncio_py.read_text()
    asyncio_py.write_text(fresh.replace('    "Barrier",\n', ""))
    assert gen_exports.run(exports, modules, check=True, root=tmp_path) == 1
    out = capsys.readouterr().out
    assert '-    "Barrier",' not in out and '+    "Barrier",' in out
    assert "stale export lists: asyncio.py" in out
    assert gen_exports.run(exports, modules, check=False, root=tmp_path) == 0
    assert asyncio_py.read_text() == fresh
    assert gen_exports.run(exports, modules, check=True, root=tmp_path) == 0


def test_a_module_without_its_generated_part_fails_naming_it(tmp_path: Path) -> None:
    exports, modules = copies(tmp_path)
    init = tmp_path / "__init__.py"
    init.write_text(init.read_text().replace(gen_exports.END, ""))
    with pytest.raises(SystemExit, match=r"__init__\.py: no generated part"):
        gen_exports.run(exports, modules, check=True, root=tmp_path)
