"""`wmrl convert SOURCE OUT`: an episode store as a LeRobotDataset v3, or a LeRobot dataset (a
folder or a Hub repo id) as an episode store (docs/formats.md#lerobotdataset-v3)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from wmrl_cli.cli.common import PresetOpt, SetOpt, build_config, handle_errors, say_done
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import console


@handle_errors
def convert_command(
    source: Annotated[
        str,
        typer.Argument(
            help="An episode store (wmrl rollout), or a LeRobotDataset v3: a folder or a Hub "
            "repo id."
        ),
    ],
    out: Annotated[Path, typer.Argument(help="The new dataset or store to write.")],
    to: Annotated[
        str | None,
        typer.Option(
            help="lerobot or wmrl (default: the format SOURCE is not in).",
        ),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace OUT where it holds a LeRobot dataset or an episode store."
        ),
    ] = False,
    preset: PresetOpt = None,
    set_: SetOpt = None,
) -> None:
    """Convert between wmrl's episode store and LeRobotDataset v3; lerobot.* settings choose the camera, keys, success, fps and frame size (docs/formats.md)."""  # noqa: E501
    from wmrl_cli.data.episodes import EpisodeStore

    cfg = build_config(preset, set_)
    is_store = (Path(source) / "index.json").is_file()
    to = to or ("lerobot" if is_store else "wmrl")
    if to not in ("lerobot", "wmrl"):
        raise ConfigError(f"--to {to}: choose lerobot or wmrl")
    if to == "lerobot":
        if not is_store:
            raise ConfigError(f"{source}: not an episode store (no index.json) to convert")
        check_new_output(out, overwrite)
        store = EpisodeStore.open(source)
        export_lerobot(store, out, cfg, recorded_camera(Path(source)))
        return
    if is_store:
        raise ConfigError(f"{source} is already an episode store")
    from wmrl_cli.assets.datasets import lerobot_root
    from wmrl_cli.data.lerobot.reader import convert

    root = lerobot_root(source, cfg)
    check_new_output(out, overwrite)
    size = cfg.lerobot.image_size or cfg.simulator.image_size
    store = convert(root, out, cfg.lerobot, size, cfg.simulator.chunk_size)
    say_done(f"{len(store)} episodes", out)


def check_new_output(out: Path, overwrite: bool) -> None:
    """OUT is new or empty; with --overwrite, a dataset or store there is removed (never a
    folder of anything else)."""
    from wmrl_cli.data.lerobot.layout import is_dataset

    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    ours = is_dataset(out) or (out / "index.json").is_file()
    if overwrite and ours:
        shutil.rmtree(out)
        return
    hint = "; pass --overwrite to replace it" if ours else ""
    raise ConfigError(f"{out} already exists and is not empty{hint}")


def recorded_camera(store: Path) -> str | None:
    """The camera a store's episodes were rendered from (its config.yaml), where recorded."""
    import yaml

    try:
        config = yaml.safe_load((store / "config.yaml").read_text())
        return str(config["simulator"]["camera"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None


def export_lerobot(store, out: Path, cfg: RunConfig, camera: str | None) -> None:
    """Write `store` as a LeRobotDataset v3 at `out` (lerobot.camera, lerobot.fps, else the
    store's camera and eval.video_fps)."""
    from wmrl_cli.data.lerobot.writer import write_dataset

    name = cfg.lerobot.camera or camera or cfg.simulator.camera
    fps = cfg.lerobot.fps or cfg.eval.video_fps
    frames = write_dataset(store, out, fps, name.removeprefix("observation.images."))
    console.print(f"LeRobotDataset v3: {frames} frames at {fps} fps, camera {name}")
    say_done(f"{len(store)} episodes", out)
