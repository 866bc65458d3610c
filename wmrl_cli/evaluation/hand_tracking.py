"""Hand-tracking error: where the world model puts the robot's hand, in centimetres, against
where the simulator's hand is under the same actions.

Pixels say little about control (a model can score well in PSNR and still leave the gripper
where it was); the hand's position says it directly. A small CNN regresses the end-effector
position from a frame. It is trained on the simulator's own frames: every evaluated episode
replayed from its stored start under its recorded actions and under another episode's actions
(`alternative_actions("other")`), with the hand position the simulator reports. It is then
applied to the world model's frames under the same two action sequences. Two folds by episode:
the regressor never scores the episodes whose simulator frames it was trained on, and its error
on those held-out simulator frames is the instrument's floor. Per horizon step t:

* ``error_cm``: |hand(model(a)_t) - sim_hand(a)_t|, the recorded actions a;
* ``other_error_cm``: |hand(model(a')_t) - sim_hand(a')_t|, other actions a': the number that
  says whether the imagined hand goes where the world's would;
* ``copy_error_cm`` / ``copy_other_error_cm``: the same against the hand read from the first
  frame (a model in which the hand never moves);
* ``floor_cm``: the regressor on the simulator's held-out frames under a.

Distances are Euclidean over the position's dimensions, times `units_to_cm` (Meta-World reports
metres: 100).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from wmrl_cli.data.episodes import Episode
from wmrl_cli.evaluation.world_model_eval import (
    alternative_actions,
    open_loop_rollout,
    recorded_starts,
)
from wmrl_cli.logging import progress_task, track_batches
from wmrl_cli.world_models.interface import WorldModel

# state_replay(episodes, actions [B, T, A]) -> (frames [B, T + 1, H, W, 3] uint8,
# hands [B, T + 1, D]): what the simulator shows and where its hand is, from each episode's
# stored start under those actions.
StateReplay = Callable[[Sequence[Episode], np.ndarray], tuple[np.ndarray, np.ndarray]]


class HandRegressor(nn.Module):
    """Frame uint8 [N,H,W,3] -> hand position [N,D]: four stride-2 convolutions, a 4x4 grid
    (positions need the layout, so no global pooling), a two-layer head; targets standardized."""

    def __init__(self, out_dim: int = 3, width: int = 16) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for k in range(4):
            layers += [nn.Conv2d(channels, width * 2**k, 3, stride=2, padding=1), nn.SiLU()]
            channels = width * 2**k
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(channels * 16, 128), nn.SiLU(), nn.Linear(128, out_dim))
        self.register_buffer("mean", torch.zeros(out_dim))
        self.register_buffer("std", torch.ones(out_dim))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 127.5 - 1.0
        return self.head(self.features(x)) * self.std + self.mean

    @torch.no_grad()
    def predict(self, frames: np.ndarray, batch: int = 256) -> np.ndarray:
        self.eval()
        flat = frames.reshape(-1, *frames.shape[-3:])
        out = [self(torch.from_numpy(flat[i : i + batch])) for i in range(0, len(flat), batch)]
        return torch.cat(out).numpy().reshape(*frames.shape[:-3], -1)


def fit_hand_regressor(
    frames: np.ndarray,
    hands: np.ndarray,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    advance: Callable[[], None] | None = None,
) -> HandRegressor:
    """Train a `HandRegressor` on frames [N,H,W,3] uint8 and hand positions [N,D] (MSE on
    standardized targets, AdamW, cosine decay), with small random shifts as augmentation;
    `advance()` after each step (progress)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = HandRegressor(out_dim=hands.shape[1])
    targets = torch.from_numpy(np.asarray(hands, dtype=np.float32))
    model.mean.copy_(targets.mean(0))
    model.std.copy_(targets.std(0).clamp_min(1e-4))
    images = torch.from_numpy(np.ascontiguousarray(frames))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(images), (min(batch_size, len(images)),), generator=gen)
        x = images[idx]
        dy, dx = (int(v) for v in torch.randint(-2, 3, (2,), generator=gen))
        x = torch.roll(x, shifts=(dy, dx), dims=(1, 2))  # a shift of 2 px moves the hand < 1 cm
        pred = (model(x) - model.mean) / model.std
        loss = ((pred - (targets[idx] - model.mean) / model.std) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if advance is not None:
            advance()
    return model.eval()


@dataclass
class HandTrackingReport:
    horizon: int
    episodes: int
    error_cm: list[float]  # per step 1..horizon
    other_error_cm: list[float]
    copy_error_cm: list[float]
    copy_other_error_cm: list[float]
    floor_cm: list[float]

    def summary(self, steps: tuple[int, ...] = (8, 16, 32)) -> dict[str, float]:
        out = {}
        for s in (s for s in steps if s <= self.horizon):
            out[f"hand_error_cm@{s}"] = self.error_cm[s - 1]
            out[f"hand_error_other_cm@{s}"] = self.other_error_cm[s - 1]
            out[f"hand_copy_other_cm@{s}"] = self.copy_other_error_cm[s - 1]
            out[f"hand_floor_cm@{s}"] = self.floor_cm[s - 1]
        return out


def _fit_fold(
    sim: np.ndarray,
    sim_other: np.ndarray,
    hands: np.ndarray,
    hands_other: np.ndarray,
    valid: np.ndarray,
    train: np.ndarray,
    steps: int,
    seed: int,
    advance: Callable[[], None],
) -> HandRegressor:
    """The reader of one fold, trained on the `train` episodes' frames: steps 0..horizon of
    both replays, while the episode lasts."""
    keep = np.concatenate([np.ones((train.sum(), 1), bool), valid[train]], axis=1)
    x = np.concatenate([sim[train][keep], sim_other[train][keep]])
    y = np.concatenate([hands[train][keep], hands_other[train][keep]])
    return fit_hand_regressor(x, y, steps=steps, seed=seed, advance=advance)


def hand_tracking_eval(
    world_model: WorldModel,
    episodes: list[Episode],
    state_replay: StateReplay,
    horizon: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    units_to_cm: float = 100.0,
    fit_steps: int = 600,
    progress: bool = False,
) -> HandTrackingReport:
    """The hand-tracking error of `world_model` on `episodes` (see the module doc). The world
    model runs with the same seeds as `open_loop_eval`, so its frames are those that metric saw."""
    if len(episodes) < 2:
        raise ValueError("hand tracking needs at least two episodes (two folds)")
    c = episodes[0].chunk_size
    steps = -(-horizon // c) * c
    other = alternative_actions("other", episodes, steps, seed)
    sim, sim_other, hands, hands_other, model, model_other, valid = ([] for _ in range(7))
    batches = range(0, len(episodes), batch_size)
    for start in track_batches(batches, "hand-tracking replays (episodes)", progress):
        batch = episodes[start : start + batch_size]
        first, actions = recorded_starts(batch, steps)
        alt = np.stack(other[start : start + len(batch)])
        for acts, frames_out, hands_out, model_out in (
            (actions, sim, hands, model),
            (alt, sim_other, hands_other, model_other),
        ):
            frames, hand = state_replay(batch, acts)
            frames_out.append(frames[:, : horizon + 1])
            hands_out.append(hand[:, : horizon + 1])
            model_out.append(open_loop_rollout(world_model, first, acts, c, horizon, seed + start))
        valid.append(np.array([[t < e.length for t in range(horizon)] for e in batch]))
    sim, sim_other = np.concatenate(sim), np.concatenate(sim_other)
    hands, hands_other = np.concatenate(hands), np.concatenate(hands_other)
    model = torch.cat(model).numpy()
    model_other = torch.cat(model_other).numpy()
    valid = np.concatenate(valid)

    names = ("error", "other", "copy", "copy_other", "floor")
    dist = {k: np.full((len(episodes), horizon), np.nan) for k in names}
    folds = np.arange(len(episodes)) % 2
    reader = progress_task("hand-tracking reader (steps)", 2 * fit_steps, progress, announce=True)
    with reader as advance:
        readers = [
            _fit_fold(sim, sim_other, hands, hands_other, valid, folds != fold, fit_steps,
                      seed + fold, advance)
            for fold in (0, 1)
        ]  # fmt: skip
    for fold, reg in zip((0, 1), readers):
        test = folds == fold
        start_hand = reg.predict(sim[test][:, 0])[:, None]
        truth, truth_other = hands[test][:, 1:], hands_other[test][:, 1:]
        for name, pred, ref in (
            ("error", reg.predict(model[test]), truth),
            ("other", reg.predict(model_other[test]), truth_other),
            ("copy", start_hand, truth),
            ("copy_other", start_hand, truth_other),
            ("floor", reg.predict(sim[test][:, 1:]), truth),
        ):
            dist[name][test] = np.linalg.norm(pred - ref, axis=-1) * units_to_cm

    def mean(name: str) -> list[float]:
        values = np.where(valid, dist[name], np.nan)
        counts = valid.sum(0)
        return [
            float(np.nanmean(values[:, t])) if counts[t] else float("nan") for t in range(horizon)
        ]

    return HandTrackingReport(
        horizon=horizon,
        episodes=len(episodes),
        error_cm=mean("error"),
        other_error_cm=mean("other"),
        copy_error_cm=mean("copy"),
        copy_other_error_cm=mean("copy_other"),
        floor_cm=mean("floor"),
    )
