"""`wmrl download`: fetch published assets (world models, reward models, reset sets, policies)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.filesize import decimal
from rich.table import Table
from rich.text import Text

from wmrl_cli.assets.layout import ASSETS_ENV, default_assets_dir
from wmrl_cli.assets.registry import download_target, list_assets
from wmrl_cli.cli.common import handle_errors, say_done
from wmrl_cli.cli.completion import complete_assets
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import console


def _asset_table() -> Table:
    table = Table(
        title="Published assets (wmrl download NAME)", title_justify="left", box=box.SIMPLE
    )
    table.add_column("name / hub repo", no_wrap=True)
    table.add_column("contents / notes")
    for asset in list_assets():
        notes = []
        if asset.size_hint:
            notes.append(asset.size_hint)
        if asset.subset:
            notes.append("only " + ", ".join(asset.subset))
        notes.append("layout verified" if asset.layout_verified else "layout unverified")
        name = Text.assemble((asset.name, "bold"), "\n", (asset.repo_id, "cyan"))
        if asset.unnorm_key:
            name.append(f"\nunnorm key {asset.unnorm_key}", "dim")
        contents = Text.assemble(", ".join(asset.roles), "\n", ("; ".join(notes), "dim"))
        table.add_row(name, contents)
    return table


@handle_errors
def download_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Asset names, e.g. wan-libero-spatial (see --list), or Hub repo ids "
            "OWNER/NAME (a model `wmrl push` made, say; it goes to DIR/OWNER/NAME).",
            show_default=False,
            autocompletion=complete_assets,
        ),
    ] = None,
    dir: Annotated[  # noqa: A002 - the option is --dir
        Path | None,
        typer.Option(
            "--dir",
            "-d",
            help=f"Assets directory; NAME goes to DIR/NAME (default: ${ASSETS_ENV} or ./assets).",
        ),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(help="Branch, tag or commit of the hub repo (default: main)."),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            "-i",
            help="Download only files matching this glob, e.g. 'dataset/*' (repeatable).",
        ),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", "-l", help="List every known asset and exit.")
    ] = False,
    recheck: Annotated[
        bool,
        typer.Option(
            "--recheck", help="Hash every local file again, even those unchanged since last check."
        ),
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show progress bars.")
    ] = True,
) -> None:
    """Download published assets from the Hugging Face Hub and check their layout.

    Honours HF_ENDPOINT (mirrors), HF_TOKEN (gated or private repos), HF_HUB_OFFLINE and the
    huggingface cache. Running it again fetches only what is missing or damaged.
    """
    if list_:
        console.print(_asset_table())
        return
    if not names:
        raise ConfigError("name at least one asset to download (see: wmrl download --list)")
    assets = [download_target(name) for name in dict.fromkeys(names)]

    from wmrl_cli.assets.download import fetch_asset

    root = dir if dir is not None else default_assets_dir()
    summary = Table(title=f"Assets in {root} (one folder per asset)", title_justify="left")
    for column in ("asset", "commit", "files", "size", "fetched"):
        summary.add_column(column, no_wrap=column in ("asset", "commit"))
    for asset in assets:
        result = fetch_asset(asset.name, dir, revision, include, progress=progress, recheck=recheck)
        fetched = str(result.fetched)
        if result.repaired:
            fetched += f" ({len(result.repaired)} repaired)"
        if result.offline:
            fetched = "offline: local copy"
        summary.add_row(
            asset.name,
            (result.commit or "?")[:12],
            str(result.files),
            decimal(result.size),
            fetched,
        )
    console.print(summary)
    say_done(f"{len(assets)} asset(s), one folder each,", root)
