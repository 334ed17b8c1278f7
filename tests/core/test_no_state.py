"""``fencelock._core`` is rules and values only: no module of it keeps process-wide state (the
event listeners live in ``fencelock._events``, the live clients in ``fencelock._live_clients``).
Checked by importing every module and looking at each module-level name, and in the source for
``global`` statements (no server)."""

from __future__ import annotations
import __future__

import ast
import dataclasses
import enum
import importlib
import logging
import pkgutil
import re
import threading
import types
import typing
import weakref
from pathlib import Path

import pytest

import fencelock._core

MODULES = [
    "fencelock._core",
    *sorted(f"fencelock._core.{m.name}" for m in pkgutil.iter_modules(fencelock._core.__path__)),
]
# the typing constructs a module may name (aliases, unions, type variables): types, not state
TYPING = types.UnionType | types.GenericAlias | typing.TypeVar | type(typing.Final)


def immutable(value: object) -> bool:
    """Whether ``value`` can hold no state that changes: a constant of an immutable type, a
    function, class or module, or a frozen value made of such constants."""
    if value is None or isinstance(value, bool | int | float | complex | str | bytes | range):
        return True
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType | types.ModuleType):
        return True
    if isinstance(value, enum.Enum | re.Pattern | TYPING) or value is __future__.annotations:
        return True
    if type(value).__module__ in ("typing", "_collections_abc"):  # Callable[...], Union[...]
        return True
    if isinstance(value, tuple | frozenset):
        return all(immutable(each) for each in value)
    if isinstance(value, types.MappingProxyType):
        return all(immutable(k) and immutable(v) for k, v in value.items())
    if dataclasses.is_dataclass(value):
        return type(value).__dataclass_params__.frozen and all(
            immutable(getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    # an instance with no place for state (a sentinel whose class has empty __slots__)
    return not hasattr(value, "__dict__") and all(
        vars(cls).get("__slots__") == () for cls in type(value).__mro__[:-1]
    )


def test_the_check_tells_state_from_values() -> None:
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        parts: tuple[int, ...]

    @dataclasses.dataclass
    class Thawed:
        parts: tuple[int, ...]

    class Sentinel:
        __slots__ = ()

    values = [1, "a", (1, ("b",)), frozenset({2}), types.MappingProxyType({"k": "v"})]
    values += [Frozen((1, 2)), Sentinel(), re.compile("x"), int | None, typing.Final]
    assert all(immutable(each) for each in values)
    state = [[], {}, set(), (1, []), Frozen(([],)), Thawed((1,)), threading.Lock()]
    state += [weakref.WeakSet(), logging.getLogger("x"), types.MappingProxyType({"k": []})]
    assert not any(immutable(each) for each in state)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_level_name_is_a_value(module: str) -> None:
    namespace = vars(importlib.import_module(module))
    state = {
        name: type(value).__name__
        for name, value in namespace.items()
        if not (name.startswith("__") and name.endswith("__")) and not immutable(value)
    }
    assert state == {}, f"{module} keeps state at module level: {state}"


@pytest.mark.parametrize("module", MODULES)
def test_no_function_rebinds_a_module_global(module: str) -> None:
    path = importlib.import_module(module).__file__
    assert path is not None
    source = Path(path).read_text(encoding="utf-8")
    rebinds = [
        f"line {node.lineno}: global {', '.join(node.names)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Global)
    ]
    assert rebinds == []
