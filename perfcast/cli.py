"""The `perfcast` command. Each package contributes its own command group; this module only
mounts them and turns user errors (PerfcastError) into a message and exit code 2."""

from __future__ import annotations

import importlib

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from perfcast.errors import PerfcastError

err_console = Console(stderr=True)


class _Root(TyperGroup):
    """Root command group: a PerfcastError anywhere below becomes `error: ...` and exit 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except PerfcastError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
            raise SystemExit(2) from None


app = typer.Typer(
    name="perfcast",
    cls=_Root,
    help="Predict how deep-learning jobs run on GPU clusters, and choose how to run them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# (module, group name or None to merge the module's commands at the top level)
_GROUPS: list[tuple[str, str | None]] = [
    ("perfcast.datasets.cli", "datasets"),
    ("perfcast.features.cli", "profile"),
    ("perfcast.training.cli", None),
    ("perfcast.serving.cli", None),
    ("perfcast.scheduler.cli", None),
    ("perfcast.scheduler.live.cli", None),
]


def _mount() -> None:
    for module_name, group in _GROUPS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):  # that package has no CLI yet
                continue
            raise
        sub = module.app
        if group:
            app.add_typer(sub, name=group)
        else:
            app.registered_commands.extend(sub.registered_commands)
            app.registered_groups.extend(sub.registered_groups)


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
