"""tools/gen_sync.py fails loudly on a substitution rule that matches nothing (no server)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gen_sync.py"
_spec = importlib.util.spec_from_file_location("gen_sync", TOOL)
assert _spec is not None and _spec.loader is not None
gen_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_sync)

SOURCE = """\
from x._async import thing


async def async_get(client: AsyncThingClient) -> None:
    await client.aclose()
"""


def tree(tmp_path: Path) -> list[tuple[Path, Path]]:
    src = tmp_path / "_async"
    src.mkdir()
    (src / "mod.py").write_text(SOURCE)
    return [(src, tmp_path / "_sync")]


@pytest.mark.parametrize("check", [False, True], ids=["generate", "check"])
def test_a_rule_that_matches_nothing_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    rule = gen_sync.Rule(
        {"AsyncThingClient": "ThingClient", "AsyncGone": "Gone", "aclose": "close"},
        {"async_": "sync_", "ASYNC_": "SYNC_"},
    )
    assert gen_sync.run(tree(tmp_path), rule, check=check, root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "'AsyncGone' matches nothing" in out
    assert "'ASYNC_*' matches nothing" in out
    assert "AsyncThingClient'" not in out and "'async_*'" not in out and "aclose" not in out


def test_every_rule_used_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pairs = tree(tmp_path)
    replacements = {"AsyncThingClient": "ThingClient", "_async": "_sync", "aclose": "close"}
    rule = gen_sync.Rule(replacements, {"async_": "sync_"})
    assert gen_sync.run(pairs, rule, check=False, root=tmp_path) == 0
    generated = (tmp_path / "_sync" / "mod.py").read_text()
    assert "from x._sync import thing" in generated
    assert "def sync_get(client: ThingClient) -> None:\n    client.close()" in generated
    assert capsys.readouterr().out == ""


def test_the_real_tree_uses_every_rule_and_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rule = gen_sync.Rule(gen_sync.REPLACEMENTS, gen_sync.PREFIXES)
    assert gen_sync.run(gen_sync.PAIRS, rule, check=True) == 0
    assert rule.unused() == []
