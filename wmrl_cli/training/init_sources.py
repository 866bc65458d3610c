"""What `wmrl train-wm --init` and `wmrl train-reward --init` start from, and the reward
model's way back to the publisher's layout (`--export-rlinf`; a world model's:
world_models/loading.py).

A source is a wmrl run or model directory, a folder in a publisher's layout (RLinf's Wan or
OpenSora world-model folder, a folder holding an RLinf `*rm.pth`, or the `.pth` itself), or the
name of a published asset (`wmrl download --list`) found in `assets_dir`: the inputs
`wmrl train-policy` accepts. Fine-tuning saves in wmrl's format; the export writes the result
in the layout and key names of the published source it started from
(world_models/published_export.py, rewards/loading.py: export_reward_pth). The world model a
new latent judge reads (`train-reward --kind latent --world-model`) is named the same ways.

RLinf's task-embedding reward model numbers LIBERO's tasks in its own order
(rewards/resnet.py: rlinf_task_ids). A published one fine-tuned on LIBERO episodes has its
embedding rows put into the benchmark's order on loading, as every wmrl reward model directory
numbers tasks, and back into RLinf's on export (rewards/resnet.py: reorder_task_rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.rewards.base import TASK_CONDITIONED
from wmrl_cli.rewards.latent import WorldModelEncoder
from wmrl_cli.rewards.loading import (
    AnyRewardModel,
    export_reward_pth,
    load_reward_model,
    reward_model_source,
)
from wmrl_cli.rewards.resnet import reorder_task_rows

_SOURCES = (
    "a wmrl run or model directory, a published folder, or an asset name (wmrl download --list)"
)


def resolve_init(value: str | Path, assets_dir: str | Path | None, option: str = "--init") -> Path:
    """The path of an `--init` value (or another `option`'s): a published asset's directory
    (checked to be completely downloaded), else the path itself, which must exist."""
    from wmrl_cli.assets.layout import asset_path
    from wmrl_cli.assets.registry import ASSETS

    if str(value) in ASSETS:
        return asset_path(str(value), assets_dir)
    path = Path(value)
    if not path.exists():
        raise WmrlError(f"{option} {value} does not exist; pass {_SOURCES}")
    return path


# -- reward models ------------------------------------------------------------------------------


def _libero_suite(store: EpisodeStore) -> str | None:
    from wmrl_cli.sims.libero_suites import is_libero_suite

    suites = sorted({str(m.get("suite", "")) for m in store.index})
    libero = [s for s in suites if is_libero_suite(s)]
    if libero and len(suites) > 1:
        raise WmrlError(f"{store.root} mixes suites ({', '.join(suites)}): task ids are ambiguous")
    return libero[0] if libero else None


def rlinf_task_order(kind: str, source: Path, store: EpisodeStore) -> list[int] | None:
    """RLinf's embedding row of each benchmark task, for a published (`.pth`) task-embedding
    model and LIBERO episodes; None where the rows already follow the episodes' task ids."""
    if kind != "taskemb_resnet" or source.suffix != ".pth":
        return None
    suite = _libero_suite(store)
    if suite is None:
        return None
    from wmrl_cli.rewards.resnet import rlinf_task_ids
    from wmrl_cli.sims.libero_suites import get_libero_suite

    return rlinf_task_ids(get_libero_suite(suite).instructions)


def reward_model_to_fine_tune(
    init: str | Path, store: EpisodeStore, assets_dir: str | Path | None, reward_cfg: Any
) -> tuple[Path, AnyRewardModel]:
    """The reward model `init` names (what `train-reward --init` takes), loaded for `store`'s
    tasks, and the file or directory it came from; `reward_cfg` (the config's `reward_model`
    section) takes its kind and a ResNet's width, which a fine-tuning keeps. A WMPO
    `videomae_*.pth` loads at WMPO's size (videomae-base, 8-frame clips)."""
    source = reward_model_source(resolve_init(init, assets_dir))
    model = load_init_reward_model(source, store)
    reward_cfg.kind = model.kind
    if model.kind != "videomae":
        reward_cfg.width = model.config.width
    return source, model


def load_init_reward_model(source: Path, store: EpisodeStore) -> AnyRewardModel:
    """The reward model to fine-tune on `store`'s episodes (its task rows in their order);
    `source` is a wmrl model directory or a `.pth` (rewards/loading.py: reward_model_source
    finds it in a run or a published folder)."""
    model = load_reward_model(source)
    order = rlinf_task_order(model.kind, source, store)
    if order is not None:
        reorder_task_rows(model, order, to_benchmark=True)
    if model.kind in TASK_CONDITIONED and len(store):
        top = max(int(m["task_id"]) for m in store.index)
        if top >= model.config.num_tasks:
            raise WmrlError(
                f"{source} embeds {model.config.num_tasks} tasks, the episodes in {store.root} "
                f"have task ids up to {top}"
            )
    return model


def latent_judge_encoder(
    value: str | Path, store: EpisodeStore, cfg: Any
) -> tuple[Path, WorldModelEncoder]:
    """The world model `train-reward --kind latent --world-model` names (a wmrl run or model
    directory, RLinf's OpenSora folder, or an asset name), and its VAE encoder for a new latent
    judge; a published folder is read at the episodes' frame size. Only the autoencoder is
    kept: the denoiser is not needed."""
    from wmrl_cli.world_models.loading import load_any_world_model

    path = resolve_init(value, cfg.assets_dir, option="--world-model")
    size = cfg.simulator.image_size
    height, width = next(iter(store)).frames.shape[1:3] if len(store) else (size, size)
    world_model = load_any_world_model(path, int(height), int(width), cfg, device="cpu")
    return path, WorldModelEncoder.of(world_model)


def reward_export_path(source: Path, target_dir: Path | None) -> Path | None:
    """Where `--export-rlinf DIR` writes the reward model: DIR/<the source file's name>.
    Checked before anything runs: a published `.pth` source, and never the source itself."""
    if target_dir is None:
        return None
    if source.suffix != ".pth":
        raise ConfigError(
            f"--export-rlinf writes the published layout the model was loaded from, but --init "
            f"{source} is not a published reward model: start from an RLinf *rm.pth (or the "
            "folder or asset holding one)"
        )
    target = target_dir / source.name
    if target.resolve() == source.resolve():
        raise ConfigError(f"--export-rlinf {target_dir} would overwrite the file it starts from")
    if target_dir.exists() and not target_dir.is_dir():
        raise ConfigError(f"--export-rlinf {target_dir} is a file, not a folder")
    return target


def export_reward_model(model_dir: Path, source: Path, target: Path, store: EpisodeStore) -> Path:
    """The saved (fine-tuned) reward model in `model_dir`, written in `source`'s layout."""
    model = load_reward_model(model_dir)
    order = rlinf_task_order(model.kind, source, store)
    if order is not None:
        reorder_task_rows(model, order, to_benchmark=False)
    return export_reward_pth(model, source, target)
