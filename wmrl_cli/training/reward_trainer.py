"""Training a success classifier from episodes (`wmrl train-reward`): RLinf's ResNet on single
frames, a head on a world model's frozen VAE latents (rewards/latent.py) on single frames, or
WMPO's VideoMAE on the clip of `num_frames` frames that ends at each frame.

Labels come from the simulator: frame t (t >= 1) is positive when the success flag held after
the action that produced it (for a clip model, the clip ending at t); the first frame is
negative. Batches are balanced (half positive)
because successes are rare when episodes end at the first success. The threshold is chosen by
F1 on held-out episodes and saved with the model, with precision, recall and F1: F1 over
frames, or, where the held-out episodes include a policy's imagined episodes labelled by the
simulator, F1 over those episodes (their highest score against their real outcome), the
verdict the imagined env gives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import SIMULATOR_LABELS, EpisodeStore
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.evaluation.reward_eval import LabelledFrames, labelled_frames, score_frames
from wmrl_cli.logging import MetricsLogger, progress_task
from wmrl_cli.rewards.calibration import (
    METRICS_FILE,
    BinaryMetrics,
    best_f1_threshold,
    binary_metrics,
    held_score,
)
from wmrl_cli.trackers import tracked

if TYPE_CHECKING:
    from wmrl_cli.rewards.latent import WorldModelEncoder
    from wmrl_cli.rewards.loading import AnyRewardModel


class NoSuccessfulFrames(WmrlError):
    """The training or held-out episodes hold no successful frame: nothing to learn or
    calibrate a success classifier on."""


def check_split_has_successes(
    store: EpisodeStore, train_ids: list[int], val_ids: list[int]
) -> None:
    """Both sides of the split hold a successful episode, or `NoSuccessfulFrames` says what is
    missing: a success at all, or a second success of some task (the split, stratified by task
    and outcome, holds out a task's successes only where it has two; the first always
    trains)."""
    succeeded = {int(m["id"]) for m in store.index if m["success"]}
    if not succeeded:
        raise NoSuccessfulFrames(
            f"{store.root}: no successful frame in any of the {len(store.index)} episodes; "
            "collect rollouts that succeed (e.g. with the expert policy)"
        )
    if succeeded.intersection(train_ids) and succeeded.intersection(val_ids):
        return
    tasks = {int(m["task_id"]) for m in store.index if m["success"]}
    raise NoSuccessfulFrames(
        f"{store.root}: no successful frame is left for the {len(val_ids)} held-out "
        f"episodes: each of the {len(tasks)} task(s) with a success has only 1 successful "
        "episode, and a task's successes are held out only from 2 on; collect at least 2 "
        "successful episodes per task (e.g. wmrl rollout --policy expert -n 2)"
    )


def random_shift(images: torch.Tensor, pad: int, rng: np.random.Generator) -> torch.Tensor:
    """Each image [N,C,H,W] translated by an integer offset in [-pad, pad] per axis, its edges
    replicated (DrQ, Kostrikov et al. 2020): the label of a success frame does not depend on
    where the scene sits by a few pixels, the memorized training frame does."""
    n, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, n))
    return torch.stack([padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])


def train_reward_model(
    cfg: RunConfig,
    run_dir: Path,
    store: EpisodeStore,
    init: AnyRewardModel | None = None,
    encoder: WorldModelEncoder | None = None,
) -> tuple[Path, BinaryMetrics]:
    """Train (or, from `init`, fine-tune) a reward model; (its directory, held-out metrics at
    the F1-best threshold). A new task-conditioned model embeds the tasks up to the store's
    highest id; a new latent judge reads `encoder`'s latents (frozen); a model to fine-tune
    keeps its kind and sizes."""
    from wmrl_cli.rewards.loading import save_reward_model

    rc = cfg.reward_model
    # Stratified by outcome too, so that successes land on both sides of the split.
    train_ids, val_ids = store.split(
        rc.val_fraction, seed=cfg.simulator.seed, stratify=("task_id", "success")
    )
    check_split_has_successes(store, train_ids, val_ids)
    train, val = labelled_frames(store, train_ids), labelled_frames(store, val_ids)
    torch.manual_seed(cfg.simulator.seed)
    model = init or new_reward_model(
        rc, 1 + max((int(m["task_id"]) for m in store.index), default=0), encoder
    )
    window = int(getattr(model, "clip_length", 1))  # a clip model's frames per clip
    clips = None if window == 1 else clip_rows(train.episode_ids, window)
    trained = [p for p in model.parameters() if p.requires_grad]  # not a frozen encoder's
    optimizer = torch.optim.AdamW(trained, lr=rc.lr, weight_decay=1e-4)
    pos, neg = np.flatnonzero(train.labels), np.flatnonzero(~train.labels)
    logger = MetricsLogger(  # training starts over: rows of an earlier attempt go
        run_dir,
        cfg.logging.tensorboard,
        **tracked(cfg),
        real_steps=store.real_steps(),
        resume_step=0,
        log_every=cfg.logging.log_every,
        total=rc.steps,
    )
    model.train()
    with progress_task("reward model", rc.steps, cfg.logging.progress) as advance:
        for step in range(rc.steps):
            rng = np.random.default_rng([cfg.simulator.seed, step])
            half = rc.batch_size // 2
            idx = np.concatenate([rng.choice(pos, half), rng.choice(neg, rc.batch_size - half)])
            labels = torch.from_numpy(train.labels[idx])
            if clips is None:
                images = model.preprocess(torch.from_numpy(train.frames[idx]))
                if rc.augment_shift:
                    images = random_shift(images, rc.augment_shift, rng)
                ids = torch.from_numpy(train.task_ids[idx])
                loss = F.binary_cross_entropy_with_logits(model.logits(images, ids), labels.float())
            else:  # clips [B, W, 3, S, S], one shift per clip (its frames stay aligned)
                frames = torch.from_numpy(train.frames[clips[idx].ravel()])
                images = model.preprocess(frames).unflatten(0, (len(idx), window))
                if rc.augment_shift:
                    shifted = random_shift(images.flatten(1, 2), rc.augment_shift, rng)
                    images = shifted.unflatten(1, (window, 3))
                loss = F.cross_entropy(model.logits(images), labels.long())  # WMPO's 2 classes
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if (step + 1) % 20 == 0 or step + 1 == rc.steps:
                logger.log({"train/reward/loss": loss.detach()}, step + 1)
            advance()
    model.eval()
    scores = score_frames(model, val)
    best = best_f1_threshold(scores, val.labels)
    at_half = binary_metrics(scores, val.labels, 0.5)
    episodes = policy_episode_metrics(store, val, scores, rc.success_frames)
    chosen = best if episodes is None else episodes
    model.config.threshold = float(chosen.threshold)
    logger.log(
        {
            "eval/reward/f1": best.f1,
            "eval/reward/precision": best.precision,
            "eval/reward/recall": best.recall,
        },
        rc.steps,
    )
    logger.close()

    final = run_dir / "reward_model"
    tmp = run_dir / ".reward_model-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_reward_model(model, tmp)
    report = {
        "data": [str(root) for root in store.roots],
        "threshold_from": "frames" if episodes is None else "policy_episodes",
        "best_f1": best.to_dict(),
        "policy_episodes": None if episodes is None else episodes.to_dict(),
        "at_0.5": at_half.to_dict(),
        "val_frames": int(len(val.labels)),
        "val_positive": int(val.labels.sum()),
        "train_frames": int(len(train.labels)),
        "train_positive": int(train.labels.sum()),
    }
    (tmp / METRICS_FILE).write_text(json.dumps(report, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final, chosen


def new_reward_model(
    rc, num_tasks: int, encoder: WorldModelEncoder | None = None
) -> AnyRewardModel:
    """A reward model of the configured kind and size, at its initial weights: RLinf's ResNet
    (`width`, with a task embedding over `num_tasks` for taskemb_resnet), a latent judge (a
    head of `width` over `encoder`'s latents, tasks embedded) or WMPO's VideoMAE
    (`reward_model.videomae` over videomae-base's sizes)."""
    from dataclasses import fields

    from wmrl_cli.rewards.latent import latent_reward_model
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
    from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig

    if rc.kind != "videomae" and rc.videomae:
        raise WmrlError(f"reward_model.videomae is set, but reward_model.kind is {rc.kind}")
    if rc.kind == "latent":
        if encoder is None:
            raise ConfigError(
                "reward_model.kind latent reads a world model's latents: a new one is made by "
                "train-reward --kind latent --world-model WM (then fine-tuned with --init)"
            )
        if rc.image_size is not None:
            raise ConfigError(
                "reward_model.image_size does not apply to kind latent: it scores frames at its "
                "world model's size"
            )
        return latent_reward_model(encoder, rc.width, num_tasks)
    if rc.kind != "videomae":
        return build_resnet_reward_model(
            ResnetRewConfig(
                width=rc.width,
                task_embedding=rc.kind == "taskemb_resnet",
                num_tasks=num_tasks,
                image_size=rc.image_size,
            )
        )
    known = {f.name for f in fields(VideoMAERewConfig)} - {"threshold"}
    unknown = sorted(set(rc.videomae) - known)
    if unknown:
        raise WmrlError(
            f"reward_model.videomae: unknown field(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(sorted(known))}"
        )
    sizes = dict(rc.videomae)
    if rc.image_size is not None:
        sizes["image_size"] = rc.image_size
    try:
        return VideoMAERewardModel(VideoMAERewConfig(**sizes))
    except (TypeError, ValueError) as exc:  # transformers checks the sizes against each other
        raise WmrlError(f"reward_model.videomae {rc.videomae}: {exc}") from None


def clip_rows(episode_ids: np.ndarray, window: int) -> np.ndarray:
    """rows[i, k]: the rows of the `window`-frame clip that ends at row i of frames stored
    episode after episode (`episode_ids` [N], each episode's rows contiguous): each episode's
    clips as the model scores a whole video (rewards/videomae.py: clip_indices, which repeats
    the first frame where a clip would begin before it), offset to the episode's rows."""
    from wmrl_cli.rewards.videomae import clip_indices

    bounds = np.concatenate([[0], np.flatnonzero(np.diff(episode_ids)) + 1, [len(episode_ids)]])
    return np.concatenate(
        [
            start + clip_indices(int(end - start), window).numpy()
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)
        ]
    )


def policy_episode_metrics(
    store: EpisodeStore, val: LabelledFrames, scores: np.ndarray, success_frames: int = 1
) -> BinaryMetrics | None:
    """The best-F1 threshold at the episode level on the held-out policy episodes labelled by
    the simulator (`wmrl rollout --world-model --policy --reset-set`), where they hold both
    outcomes; else None.

    The imagined env calls an episode a success at its first frame that reaches the threshold
    (with `success_frames` k, at the k-th of k consecutive frames there), so what RL relies on
    is the episode's highest score (`held_score`) against its real outcome, not each frame's
    score: on the default profile's held-out policy episodes the frame-level best-F1
    threshold judged 41% of them successes at precision 0.33, the episode-level one 29% at
    precision 0.70 (docs/results.md#labelled-imagined-episodes)."""
    labelled = {
        int(m["id"])
        for m in store.index
        if (m.get("imagined") or {}).get("labels") == SIMULATOR_LABELS
    }
    highest, outcome = [], []
    for episode_id in np.unique(val.episode_ids):
        if int(episode_id) in labelled:
            rows = np.flatnonzero(val.episode_ids == episode_id)[1:]  # not the real start frame
            highest.append(held_score(scores[rows], success_frames))
            outcome.append(val.labels[rows].any())
    if len(set(outcome)) < 2:
        return None
    # An episode shorter than k frames is never called a success: any floor below 0 will do.
    return best_f1_threshold(np.maximum(highest, -1.0), np.array(outcome))
