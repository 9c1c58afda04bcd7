"""Scheduling policies, one module each, chosen by name.

A module registers its policy class with `@register("name")`; `make_policy(name, **options)`
builds one and `policy_names()` lists them. A policy implements
`scheduler.core.loop.SchedulingPolicy`: `schedule(ctx) -> list[Allocation]`, and may set
`placement` to its own `JobPlacement` (Gandiva does, to migrate and share GPUs).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
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


def make_policy(name: str, **options: Any) -> SchedulingPolicy:
    """A new policy `name` built with `options`."""
    names = policy_names()
    if name not in _POLICIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of {', '.join(names)}")
    return _POLICIES[name](**options)
