"""What a world model's training step trains on (`train-wm`): the episodes split into training
and validation, clips for the autoencoder, each rank's share of a global batch that every rank
draws alike, and the check that the batch sizes split over the ranks."""

from __future__ import annotations

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.windows import WindowSet
from wmrl_cli.errors import ConfigError
from wmrl_cli.world_models.interface import WorldModel


def _clips(
    windows: WindowSet, idx: np.ndarray, length: int, with_reference: bool = False
) -> torch.Tensor:
    """Clips of `length` consecutive frames starting at window starts, preceded by the episode's
    first frame when `with_reference` (the layout a world-model window is encoded in)."""
    clips = []
    for i in idx:
        e, s = windows.starts[int(i)]
        frames = windows.episodes[int(e)].frames
        take = np.minimum(np.arange(s, s + length), len(frames) - 1)
        clips.append(np.concatenate([frames[:1], frames[take]]) if with_reference else frames[take])
    return torch.from_numpy(np.stack(clips))


def autoencoder_clips(
    model: WorldModel, windows: WindowSet, idx: np.ndarray, chunk: int
) -> torch.Tensor:
    """Training clips for the model's autoencoder: whole windows for a causal video VAE, short
    per-frame clips (five frames) otherwise."""
    if model.autoencoder_trains_on_windows:
        return _clips(windows, idx, model.num_context_frames + chunk, with_reference=True)
    return _clips(windows, idx, 5)


def split_episodes(store: EpisodeStore, cfg: RunConfig) -> tuple[list[int], list[int]]:
    """(training ids, validation ids) of a store, as `train-wm` splits it: the validation
    episodes are the ones the world model never trains on."""
    train_ids, val_ids = store.split(cfg.world_model.val_fraction, seed=cfg.simulator.seed)
    if not val_ids and len(train_ids) >= 2:  # one episode per task: hold one out anyway
        val_ids = [train_ids.pop()]
    return train_ids, val_ids


def check_batch_split(cfg: RunConfig, world: int, trains_autoencoder: bool) -> None:
    """Each of `world` ranks trains on an equal share of every batch: the batch sizes (the
    autoencoder's too where it trains) must split; one line (exit 2) otherwise."""
    if world < 1:
        raise ConfigError(f"--num-processes must be at least 1, got {world}")
    wm = cfg.world_model
    sizes = {"world_model.batch_size": wm.batch_size}
    if trains_autoencoder and wm.vae_init is None and wm.vae_steps > 0:
        sizes["world_model.vae_batch_size"] = wm.vae_batch_size
    for key, size in sizes.items():
        if size % world:
            raise ConfigError(
                f"invalid value for '{key}': {size} must be a multiple of the processes ({world})"
            )


def rank_share(global_idx: np.ndarray, rank: int, world: int) -> np.ndarray:
    """This rank's part of a global batch that every rank draws alike."""
    per_rank = len(global_idx) // world
    return global_idx[rank * per_rank : (rank + 1) * per_rank]
