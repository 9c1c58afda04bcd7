"""Scheduling policies, one module each, chosen by name.

A module registers its policy class with `@register("name")`; `make_policy(name, **options)`
builds one and `policy_names()` lists them. A policy's module is named after it (`-` as `_`:
`srtf-predicted` in `srtf_predicted.py`), so building one imports its module alone, not every
policy's dependencies (the elastic DP's pandas, Pollux's scipy: ~2 s of CPU per scheduler
process); `tests/test_scheduler_policies.py` checks the naming. A policy implements
`scheduler.core.loop.SchedulingPolicy`: `schedule(ctx) -> list[Allocation]`, and may set
`placement` to its own `JobPlacement` (Gandiva does, to migrate and share GPUs).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.loop import SchedulingPolicy

_POLICIES: dict[str, type] = {}
T = TypeVar("T", bound=type)


class UnknownPolicyError(PerfcastError):
    """A policy name that no module registered."""


def register(name: str) -> Callable[[T], T]:
    def decorate(cls: T) -> T:
        if name in _POLICIES:
            raise ValueError(f"policy {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        _POLICIES[name] = cls
        return cls

    return decorate


_discovered: list[bool] = []


def _discover() -> None:
    """Import every policy module once (some may already be imported directly)."""
    if not _discovered:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _discovered.append(True)


def policy_names() -> list[str]:
    _discover()
    return sorted(_POLICIES)


def module_of(name: str) -> str:
    """The module that registers policy `name`."""
    return f"{__name__}.{name.replace('-', '_')}"


def _load(name: str) -> None:
    """Import policy `name`'s own module, if there is one."""
    if name in _POLICIES or not name.replace("-", "_").isidentifier():
        return
    if importlib.util.find_spec(module_of(name)) is not None:
        importlib.import_module(module_of(name))


class PolicyOptionError(PerfcastError):
    """A policy option that the policy does not take, or a value it cannot read."""


def make_policy(name: str, **options: Any) -> SchedulingPolicy:
    """A new policy `name` built with `options`."""
    _load(name)
    if name not in _POLICIES:
        names = policy_names()  # every module: one registered under another name is found too
        if name not in _POLICIES:
            raise UnknownPolicyError(f"unknown policy {name!r}; choose one of {', '.join(names)}")
    cls = _POLICIES[name]
    known = set(inspect.signature(cls).parameters)
    unknown = sorted(set(options) - known)
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise PolicyOptionError(
            f"policy {name!r} has no option {', '.join(unknown)}; its options: {takes}"
        )
    return cls(**options)


def parse_policy_options(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` strings from the command line: numbers become floats (ints when whole),
    comma-separated numbers tuples, `true`/`false` booleans; anything else stays a string."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise PolicyOptionError(f"policy option {pair!r}: expected KEY=VALUE")
        options[key.strip()] = _option_value(text.strip())
    return options


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    parts = text.split(",")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        return text
    values = tuple(
        int(v) if v.is_integer() and "." not in p else v
        for v, p in zip(numbers, parts, strict=True)
    )
    return values if len(parts) > 1 else values[0]
