"""`wmrl presets list|show`: the shipped presets and what they resolve to."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from wmrl_cli.cli.common import handle_errors
from wmrl_cli.cli.completion import WmrlCommand, WmrlGroup, complete_presets
from wmrl_cli.config import dump_config, list_presets, resolve_config
from wmrl_cli.logging import console

presets_app = typer.Typer(
    cls=WmrlGroup, help="List the shipped presets or show one resolved.", no_args_is_help=True
)


@presets_app.command("list", cls=WmrlCommand)
@handle_errors
def list_command() -> None:
    """List presets with their descriptions."""
    table = Table(title="wmrl presets")
    table.add_column("name", style="bold")
    table.add_column("description")
    for name, description in list_presets().items():
        table.add_row(name, description)
    console.print(table)


@presets_app.command("show", cls=WmrlCommand)
@handle_errors
def show_command(
    name: Annotated[
        str, typer.Argument(help="Preset name or YAML path.", autocompletion=complete_presets)
    ],
) -> None:
    """Print the full configuration a preset resolves to (defaults filled in), as plain YAML that
    can be redirected to a file and used with --preset."""
    # Plain text, never through rich: rich cuts lines to the terminal width (80 columns when
    # redirected) and pads them with spaces, which corrupts long values.
    typer.echo(dump_config(resolve_config(name)), nl=False)
