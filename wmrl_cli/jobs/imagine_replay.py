"""A world model's imagined episodes under a store's recorded actions (`wmrl rollout
--world-model WM --replay STORE`, co-evolve's imagined reward data): the world model loaded at
the stored frames' size, rolled from the store's real context frames over its recorded actions,
each episode labelled with the recorded success (data/imagined.py).

`imagine_replay_rollouts` is the command's job: the inputs checked, the world model loaded, the
episodes written to the store in `output_dir`. Co-evolve's `imagine` stage (coevolve/stages.py)
calls `load_replay_world_model` and `imagine_replay` itself, into a temporary store.
"""

from __future__ import annotations

from pathlib import Path

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.imagined import Start, check_source, imagine_store, imagined_starts
from wmrl_cli.errors import ConfigError
from wmrl_cli.jobs.collect_rollouts import RolloutSummary, check_output_store, stored_summary
from wmrl_cli.run_dirs import prepare_run_dir
from wmrl_cli.runtime import configure_threads, seed_everything
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.loading import load_imagining_world_model


def imagine_replay_rollouts(
    cfg: RunConfig, world_model: Path, replay: Path, horizon: int | None, start_every: int,
    append: bool = False, overwrite: bool = False,
) -> RolloutSummary:  # fmt: skip
    """`world_model` rolled over `replay`'s recorded actions from steps 0, `start_every`, ... of
    every episode (0: the start only), `horizon` steps each (None: the rest), into the store in
    `cfg.output_dir` (`append`: added to it, `overwrite`: replacing it). The inputs are checked
    and the world model loads before anything is written."""
    source = EpisodeStore.open(replay)
    starts = imagined_starts(source, start_every, horizon)
    out = Path(cfg.output_dir)
    check_output_store(out, append, imagined=True, overwrite=overwrite)
    if not world_model.exists():
        raise ConfigError(
            f"--world-model {world_model}: no such world model (expected a train-wm run, a model "
            "directory or an RLinf Wan/OpenSora directory)"
        )
    configure_threads(cfg.num_threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_replay_world_model(cfg, world_model, source, starts, device)
    prepare_run_dir(cfg, "rollout", overwrite=overwrite)  # the store's config.yaml
    seed_everything(cfg.simulator.seed)
    store = EpisodeStore(out)
    imagine_replay(cfg, model, str(world_model), source, starts, store)
    return stored_summary(store)


def load_replay_world_model(
    cfg: RunConfig, path: Path, source: EpisodeStore, starts: list[Start], device: str
) -> WorldModel:
    """The world model that imagines `source`'s recorded actions (`imagined_starts`), as
    imagination runs it, at the stored frames' size; a store it cannot read is a one-line error."""
    height, width = source.load(starts[0].episode_id).frames.shape[1:3]
    world_model = load_imagining_world_model(path, height, width, cfg, device)
    check_source(source, world_model)
    return world_model


def imagine_replay(
    cfg: RunConfig,
    world_model: WorldModel,
    name: str,
    source: EpisodeStore,
    starts: list[Start],
    out: EpisodeStore,
) -> None:
    """`imagine_store` with the run's batch (`simulator.num_envs`), seed and progress display:
    the one call behind `wmrl rollout --world-model --replay` and co-evolve's imagined reward
    data."""
    imagine_store(
        world_model,
        source,
        out,
        starts,
        batch_size=cfg.simulator.num_envs,
        world_model_name=name,
        seed=cfg.simulator.seed,
        progress=cfg.logging.progress,
    )
