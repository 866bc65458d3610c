"""`wmrl push`: a policy, world model or reward model to the Hugging Face Hub, with a model card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.filesize import decimal

from wmrl_cli.cli.common import handle_errors, say_done
from wmrl_cli.logging import console


@handle_errors
def push_command(
    source: Annotated[
        Path,
        typer.Argument(
            help="A run directory (its policy/, world_model/ or reward_model/) or a model folder "
            "(a checkpoint's model/ too).",
            metavar="RUN_OR_MODEL_DIR",
            show_default=False,
        ),
    ],
    repo_id: Annotated[
        str,
        typer.Argument(
            help="Hub repository OWNER/NAME; created if missing.",
            metavar="REPO_ID",
            show_default=False,
        ),
    ],
    private: Annotated[
        bool, typer.Option("--private", help="Create the repository private.")
    ] = False,
    revision: Annotated[
        str | None,
        typer.Option(help="Branch to push to, made from main if missing (default: main)."),
    ] = None,
    repo_type: Annotated[
        str, typer.Option("--repo-type", help="Repository type: model or dataset.")
    ] = "model",
    endpoint: Annotated[
        str | None,
        typer.Option(help="Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)."),
    ] = None,
    license_id: Annotated[
        str, typer.Option("--license", help="License in the model card's metadata.")
    ] = "apache-2.0",
    evaluation: Annotated[
        Path | None,
        typer.Option(
            "--eval",
            help="A `wmrl eval --policy` report (report.json or its run directory) for the "
            "card; default: the evaluation the run wrote, if any.",
        ),
    ] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Commit message.")] = None,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show upload progress bars.")
    ] = True,
) -> None:
    """Push a trained model to the Hugging Face Hub with a generated model card (README.md).

    The card says what the model is, what it started from, the command and its resolved
    configuration, the evaluation with its interval and the real steps spent; a README.md of
    your own in the model folder is pushed instead. Nothing local changes. The token is the
    one huggingface_hub finds: HF_TOKEN, or `hf auth login`'s.
    """
    from wmrl_cli.assets.push import push_model

    result = push_model(
        source,
        repo_id,
        private=private,
        revision=revision,
        repo_type=repo_type,
        endpoint=endpoint,
        license_id=license_id,
        evaluation=evaluation,
        message=message,
        progress=progress,
    )
    card = "model card generated" if result.card == "generated" else f"your {result.card}"
    what = f"{result.source.kind_name} {result.source.model_dir} ({result.files} files, "
    what += f"{decimal(result.size)}, {card})"
    if not result.changed:
        console.print(f"{repo_id} already holds these files: no new commit", soft_wrap=True)
    say_done(
        what,
        result.url,
        f"commit {result.commit[:12]}; fetch it with `wmrl download {repo_id}`",
    )
