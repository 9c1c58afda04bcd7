"""The `perfcast` command: the top layer, the one module that may import every package. Each
package contributes its own command group (its `cli` module, which keeps heavy imports inside
the commands so that `--help` is fast); this module mounts them and turns user errors
(PerfcastError) into a message and exit code 2."""

from __future__ import annotations

import inspect
import os
from typing import NoReturn

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from perfcast.datasets import cli as datasets_cli
from perfcast.errors import PerfcastError
from perfcast.features import cli as features_cli
from perfcast.scheduler import cli as scheduler_cli
from perfcast.scheduler.live import cli as live_cli
from perfcast.serving import cli as serving_cli
from perfcast.training import cli as training_cli

err_console = Console(stderr=True)


class _Root(TyperGroup):
    """Root command group: a PerfcastError anywhere below becomes `error: ...` and exit 2; so
    does a file of the user's that is not UTF-8 where no reader named it (perfcast.files)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except PerfcastError as err:
            _error(str(err))
        except UnicodeDecodeError as err:
            _error(f"a file given is not UTF-8 text ({err}); save it as UTF-8")


def _error(message: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise SystemExit(2) from None


app = typer.Typer(
    name="perfcast",
    cls=_Root,
    help="Predict how deep-learning jobs run on GPU clusters, and choose how to run them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

app.add_typer(datasets_cli.app, name="datasets")
app.add_typer(features_cli.app, name="profile")
for _flat in (training_cli.app, serving_cli.app, scheduler_cli.app, live_cli.app):
    app.registered_commands.extend(_flat.registered_commands)
    app.registered_groups.extend(_flat.registered_groups)


def _one_line_summaries(group: typer.Typer) -> None:
    """Each command's summary in a command list is its docstring's first paragraph as one line:
    rich kept the docstring's line breaks, so at 80 columns the lists broke mid-sentence."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _one_line_summaries(sub.typer_instance)


_one_line_summaries(app)


def main() -> None:
    # OpenMP threads that spin while idle steal the other core from LightGBM and torch on small
    # machines (fits ran ~6x slower); a passive wait policy costs nothing on big ones. Set before
    # either library loads, for this process only.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app()


if __name__ == "__main__":
    main()
