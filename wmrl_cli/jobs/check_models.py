"""Checking the learned models, one job each: a world model's reliability (`wmrl eval
--world-model`, and co-evolve's check before every RL stage, which chooses its own episodes)
and a reward model's verdicts on stored episodes (`wmrl eval --reward-model`).

Each loads what it checks, evaluates it and writes its report; the caller prints. A command
claims its run directory only once the inputs have loaded (`out` may be a callable that does
so and returns the directory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig
from wmrl_cli.config.reward_model import RewardModelConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.base import RewardModel
from wmrl_cli.rewards.calibration import judge_threshold, raw_score_threshold

REWARD_MODEL_DIR = "reward_model"  # what `wmrl train-reward` writes into its run directory

Out = Path | Callable[[], Path]  # a directory, or what claims it once the inputs have loaded


# -- inputs ------------------------------------------------------------------------------------


def load_reward_model_from(path: str | Path) -> Any:
    """A reward model from a `wmrl train-reward` run directory (its reward_model/), a model
    directory, or a `.pth` file (RLinf's)."""
    from wmrl_cli.rewards.loading import load_reward_model

    path = Path(path)
    if not path.exists():
        raise WmrlError(
            f"{path}: no such reward model (expected a train-reward run directory, a model "
            "directory or a .pth file)"
        )
    return load_reward_model(_model_dir(path))


def _model_dir(path: Path) -> Path:
    """A train-reward run's reward_model/, else `path` itself."""
    if (path / REWARD_MODEL_DIR / "config.json").is_file():
        return path / REWARD_MODEL_DIR
    return path


def episodes_per_task(store: EpisodeStore, per_task: int | None) -> list[int]:
    """The first `per_task` episodes of every task in the store (all with None)."""
    taken: dict[int, int] = {}
    ids = []
    for meta in store.index:
        task = int(meta["task_id"])
        if per_task is None or taken.get(task, 0) < per_task:
            taken[task] = taken.get(task, 0) + 1
            ids.append(int(meta["id"]))
    return ids


def verdict_threshold(
    rm_cfg: RewardModelConfig, reward_model: RewardModel, path: str | Path | None
) -> tuple[float, str]:
    """The threshold on raw scores at which a report measures the verdict RL would use with
    the same `reward_model` settings (`judge_threshold`; RLinf's rounding, `round_scores`,
    turns any threshold in (0, 1] into p > 0.5), and where it came from."""
    model_dir = None if path is None else _model_dir(Path(path))
    threshold, source = judge_threshold(rm_cfg.success_threshold, reward_model, model_dir)
    rounded = ", on scores rounded to 0/1" if rm_cfg.round_scores else ""
    return raw_score_threshold(threshold, rm_cfg.round_scores), source + rounded


def _stored_episodes(data: Path, per_task: int | None) -> tuple[EpisodeStore, list[int]]:
    """The store and the first `per_task` episodes of each of its tasks (one line if none)."""
    store = EpisodeStore.open(data)
    ids = episodes_per_task(store, per_task)
    if not ids:
        raise WmrlError(f"{data}: the episode store holds no episodes")
    return store, ids


def _claim(out: Out) -> Path:
    return out() if callable(out) else out


# -- a world model -----------------------------------------------------------------------------


def check_world_model(
    cfg: RunConfig,
    world_model: str | Path,
    reward_model: str | Path,
    store: EpisodeStore,
    ids: list[int],
    out: Out,
    *,
    policy: str | None = None,
    hand_tracking: bool = True,
    save_video: bool = False,
) -> Any:
    """`world_model`'s reliability on episodes `ids` of `store` (evaluation/reliability.py),
    imagined success judged by `reward_model` as RL judges it, the world model sampled as
    imagination runs it; with `policy` (a learned one), also that policy's shift between real
    and imagined frames. The report (a `ReliabilityReport`) is written to `out` and returned."""
    import torch

    from wmrl_cli.evaluation.reliability import evaluate_world_model
    from wmrl_cli.policies.registry import load_learned_policy
    from wmrl_cli.world_models.loading import load_imagining_world_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rm = load_reward_model_from(reward_model).to(device)
    actor = None
    if policy is not None:
        actor = load_learned_policy(
            policy, top_k=cfg.policy.top_k, device=device, assets_dir=cfg.assets_dir
        ).model
    height, width = store.load(ids[0]).frames.shape[1:3]  # a published model's frame size
    wm = load_imagining_world_model(Path(world_model), height, width, cfg, device)
    run_dir = _claim(out)
    threshold, source = verdict_threshold(cfg.reward_model, rm, reward_model)
    report = evaluate_world_model(
        wm,
        rm,
        store,
        ids,
        cfg.simulator,
        horizon=cfg.world_model.val_horizon,
        threshold=threshold,
        threshold_source=source,
        success_frames=cfg.reward_model.success_frames,
        progress=cfg.logging.progress,
        seed=cfg.simulator.seed,
        world_model_name=str(world_model),
        reward_model_name=str(reward_model),
        hand_tracking=hand_tracking,
        policy=actor,
        policy_temperature=cfg.policy.temperature,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    report.save(run_dir, save_video=save_video, fps=cfg.eval.video_fps)
    return report


def eval_world_model(cfg: RunConfig, data: Path | None, out: Out, with_policy: bool) -> Any:
    """`wmrl eval --world-model`: `cfg.world_model.path` checked on the first
    `eval.episodes_per_task` episodes of every task of `data`, judged by
    `cfg.reward_model.path`; with `with_policy`, `cfg.policy.name`'s shift too."""
    from wmrl_cli.policies.registry import SCRIPTED

    wm_path, rm_path = cfg.world_model.path, cfg.reward_model.path
    if data is None:
        raise WmrlError("--world-model needs --data STORE: the episodes to evaluate it on")
    if rm_path is None:
        raise WmrlError("--world-model needs --reward-model PATH to judge imagined success")
    if not Path(wm_path).exists():
        raise WmrlError(
            f"{wm_path}: no such world model (expected a train-wm run, a model directory or an "
            "RLinf Wan/OpenSora directory)"
        )
    if with_policy and cfg.policy.name in SCRIPTED:
        raise WmrlError(
            f"--policy {cfg.policy.name} with --world-model: the policy shift needs a learned "
            "policy's action distribution (a policy checkpoint or asset name)"
        )
    store, ids = _stored_episodes(data, cfg.eval.episodes_per_task)
    chunk = store.load(ids[0]).chunk_size
    if with_policy and cfg.world_model.val_horizon < chunk:
        raise WmrlError(
            f"--policy with --world-model reads the policy at chunk boundaries: --horizon must "
            f"be at least one chunk ({chunk} steps), got {cfg.world_model.val_horizon}"
        )
    return check_world_model(
        cfg,
        wm_path,
        rm_path,
        store,
        ids,
        out,
        policy=cfg.policy.name if with_policy else None,
        save_video=cfg.eval.save_video,
    )


# -- a reward model ----------------------------------------------------------------------------


def eval_reward_model(cfg: RunConfig, data: Path | None, out: Out) -> Any:
    """`wmrl eval --reward-model R --data STORE`: frame- and episode-level precision, recall
    and F1 of the reward model against the simulator's success labels on the first
    `eval.episodes_per_task` episodes of every task (a `RewardEvalReport`, written to `out`)."""
    from wmrl_cli.evaluation.reward_eval import evaluate_reward_model

    rm_path = cfg.reward_model.path
    if data is None:
        raise WmrlError("--reward-model needs --data STORE: the episodes to score")
    store, ids = _stored_episodes(data, cfg.eval.episodes_per_task)
    rm = load_reward_model_from(rm_path)
    threshold, source = verdict_threshold(cfg.reward_model, rm, rm_path)
    run_dir = _claim(out)
    report = evaluate_reward_model(rm, store, ids, threshold, source, str(rm_path))
    report.save(run_dir)
    return report
