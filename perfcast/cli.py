"""The `perfcast` command. Each package contributes its own command group; this module only
mounts them and turns user errors into a message and exit code 2."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from perfcast.errors import PerfcastError

app = typer.Typer(
    name="perfcast",
    help="Predict how deep-learning jobs run on GPU clusters, and choose how to run them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True)

# (module, attribute, group name or None to merge the module's commands at the top level)
_GROUPS: list[tuple[str, str, str | None]] = [
    ("datasets.cli", "app", "datasets"),
    ("perfcast.quickstart", "app", None),
    ("features.cli", "app", "profile"),
    ("training.cli", "app", None),
    ("serving.cli", "app", None),
    ("scheduler.cli", "app", None),
    ("scheduler.live.cli", "app", None),
]


def _mount() -> None:
    for module_name, attr, group in _GROUPS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):  # that package has no CLI yet
                continue
            raise
        sub = getattr(module, attr)
        if group:
            app.add_typer(sub, name=group)
        else:
            for command in sub.registered_commands:
                app.registered_commands.append(command)
            for group_info in sub.registered_groups:
                app.registered_groups.append(group_info)


_mount()


def main() -> None:
    try:
        app(standalone_mode=True)
    except PerfcastError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
