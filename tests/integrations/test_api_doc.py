"""docs/api.md's "Every public name" is the public surface, both ways: each name and member it
lists exists in fencelock and fencelock.asyncio, and each public name and member of the code is
listed (issue 22)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import fencelock
import fencelock.asyncio
from fencelock._async.rw_lock import AsyncRWSide
from fencelock._sync.rw_lock import RWSide

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def listed() -> dict[str, set[str]]:
    text = API.read_text(encoding="utf-8").split("## Every public name", 1)[1]
    block = re.search(r"```text\n(.*?)```", text, re.DOTALL)
    assert block is not None
    names: dict[str, set[str]] = {}
    # an indented line goes on with the line above
    for line in block.group(1).replace("\n ", " ").splitlines():
        owner, _, members = line.partition(":")
        names[owner] = set(members.split())
    return names


def members(cls: type) -> set[str]:
    """Public attributes of ``cls`` and of its fencelock bases, and those its ``__init__``
    sets on ``self``."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__.split(".")[0] != "fencelock":
            continue
        names.update(n for n in vars(klass) if not n.startswith("_"))
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Store)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id == "self"
                        and not sub.attr.startswith("_")
                    ):
                        names.add(sub.attr)
    return names


def test_the_modules_export_what_is_listed() -> None:
    names = listed()
    assert set(fencelock.__all__) == names["fencelock"]
    assert set(fencelock.asyncio.__all__) == names["fencelock"] - {"__version__"}


def test_every_class_has_exactly_the_listed_members_in_both_apis() -> None:
    names = listed()
    for module in (fencelock, fencelock.asyncio):
        classes = {
            name: getattr(module, name)
            for name in module.__all__
            if inspect.isclass(getattr(module, name))
            and not issubclass(getattr(module, name), BaseException)
        }
        classes["RWSide"] = RWSide if module is fencelock else AsyncRWSide
        assert set(classes) == set(names) - {"fencelock"}, module.__name__
        for name, cls in classes.items():
            assert members(cls) == names[name], (module.__name__, name)


def test_exceptions_are_lock_errors() -> None:
    for name in listed()["fencelock"]:
        obj = getattr(fencelock, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, fencelock.LockError), name
