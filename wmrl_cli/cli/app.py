"""The `wmrl` command: one Typer app, one module per command."""

from __future__ import annotations

from typing import Annotated

import typer

from wmrl_cli import __version__
from wmrl_cli.cli.co_evolve_cmd import co_evolve_command
from wmrl_cli.cli.completion import WmrlCommand, WmrlGroup
from wmrl_cli.cli.convert_cmd import convert_command
from wmrl_cli.cli.download_cmd import download_command
from wmrl_cli.cli.eval_cmd import eval_command
from wmrl_cli.cli.presets_cmd import presets_app
from wmrl_cli.cli.push_cmd import push_command
from wmrl_cli.cli.rollout_cmd import rollout_command
from wmrl_cli.cli.sft_cmd import sft_command
from wmrl_cli.cli.train_policy_cmd import train_policy_command
from wmrl_cli.cli.train_reward_cmd import train_reward_command
from wmrl_cli.cli.train_wm_cmd import train_wm_command

app = typer.Typer(
    name="wmrl",
    cls=WmrlGroup,
    help="Post-train VLA policies with RL inside learned video world models.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"wmrl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool | None,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version."
        ),
    ] = None,
) -> None:
    """wmrl: world-model RL for vision-language-action policies."""


app.command("rollout", cls=WmrlCommand)(rollout_command)
app.command("eval", cls=WmrlCommand)(eval_command)
app.command("download", cls=WmrlCommand)(download_command)
app.command("convert", cls=WmrlCommand)(convert_command)
app.command("push", cls=WmrlCommand)(push_command)
app.command("sft", cls=WmrlCommand)(sft_command)
app.command("train-wm", cls=WmrlCommand)(train_wm_command)
app.command("train-reward", cls=WmrlCommand)(train_reward_command)
app.command("train-policy", cls=WmrlCommand)(train_policy_command)
app.command("co-evolve", cls=WmrlCommand)(co_evolve_command)
app.add_typer(presets_app, name="presets")


def main() -> None:
    from wmrl_cli.ranks import run_then_end_ranks

    run_then_end_ranks(app)  # several ranks: the process group closed in order
