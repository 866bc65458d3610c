"""World-model reliability: open-loop autoregressive rollouts against the recorded truth.

From each held-out episode's first frame, the world model is fed the recorded actions chunk by
chunk (never the true frames again) for `horizon` steps. Every predicted frame is compared with
the recorded one (PSNR, SSIM, and PSNR in the moving region: the pixels that differ from the
first frame in the truth), next to the copy-the-first-frame baseline, which predicts that
nothing moves. Metrics per horizon step average over the episodes that last that long.

Controllability (`alternatives`): every episode is rolled out again from the same first frame
and with the same sampling noise, driven by other actions:

* ``other``: another episode's actions, of the same task where the list has one;
* ``shuffled``: the episode's own actions in a random order (same marginal, wrong timing);
* ``random``: uniform actions in the per-dimension range of the evaluated episodes.

The **action gap** of a kind is PSNR with the recorded actions minus PSNR with those (Genie's
delta-t-PSNR): near zero, the pixels are right for reasons the actions do not control. With a
`replay` function (the simulator run from the episode's stored start state under the other
actions) the **response ratio** MSE(model(a), model(a')) / MSE(sim(a), sim(a')) per step says
how strongly the model reacts to a change of actions compared with the world: 1 reacts as the
world does, 0 ignores its actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from wmrl_cli.data.episodes import Episode
from wmrl_cli.data.reset_set import rest_action
from wmrl_cli.evaluation.video_metrics import psnr, ssim
from wmrl_cli.logging import track_batches
from wmrl_cli.world_models.interface import WorldModel

ALTERNATIVES = ("other", "shuffled", "random")
MOVING_THRESHOLD = 16  # grey levels: a pixel "moves" when some channel changed by more
# replay(episodes, actions [B, steps, A]) -> frames [B, steps + 1, H, W, 3]: what the world shows
# from each episode's start under those actions (the simulator from its stored state)
Replay = Callable[[Sequence[Episode], np.ndarray], np.ndarray]


@dataclass
class OpenLoopReport:
    horizon: int
    psnr: list[float]  # per step 1..horizon
    ssim: list[float]
    copy_psnr: list[float]
    copy_ssim: list[float]
    episodes: int
    videos: np.ndarray | None = field(default=None, repr=False)  # [N, T, H, 2W, 3]: truth | model
    moving_psnr: list[float] | None = None  # PSNR over the pixels that move in the truth
    copy_moving_psnr: list[float] | None = None
    # PSNR of the rollouts driven by other actions, by kind (ALTERNATIVES)
    alternative_psnr: dict[str, list[float]] = field(default_factory=dict)
    response_ratio: list[float] | None = None  # against the simulator, "other" actions
    # per episode and step [N, horizon], NaN once the episode has ended: what pairs two models
    # evaluated on the same episodes with the same noise (`per_episode`)
    episode_psnr: np.ndarray | None = field(default=None, repr=False)
    episode_alternative_psnr: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def other_actions_psnr(self) -> list[float] | None:
        return self.alternative_psnr.get("other")

    def action_gap(self, step: int, kind: str = "other") -> float | None:
        """PSNR with the recorded actions minus PSNR with the `kind` alternative actions (dB)."""
        values = self.alternative_psnr.get(kind)
        if values is None:
            return None
        return self.psnr[step - 1] - values[step - 1]

    def at(self, step: int) -> dict[str, float]:
        i = step - 1
        out = {
            "psnr": self.psnr[i],
            "ssim": self.ssim[i],
            "copy_psnr": self.copy_psnr[i],
            "copy_ssim": self.copy_ssim[i],
        }
        if self.moving_psnr is not None and self.copy_moving_psnr is not None:
            out["moving_psnr"] = self.moving_psnr[i]
            out["copy_moving_psnr"] = self.copy_moving_psnr[i]
        return out

    def per_episode(self, steps: tuple[int, ...] = (8, 16, 32)) -> dict[str, list[float]]:
        """Per episode, PSNR and each kind's action gap at the horizon `steps` (NaN where the
        episode ended before the step): the values a paired comparison of two models reads."""
        out: dict[str, list[float]] = {}
        if self.episode_psnr is None:
            return out
        for step in (s for s in steps if s <= self.horizon):
            psnr_at = self.episode_psnr[:, step - 1]
            out[f"psnr@{step}"] = psnr_at.tolist()
            for kind, values in self.episode_alternative_psnr.items():
                name = "action_gap" if kind == "other" else f"action_gap_{kind}"
                out[f"{name}@{step}"] = (psnr_at - values[:, step - 1]).tolist()
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able values: the per-step means, whether it beats the copy
        baseline, and `per_episode` at the summary's steps (None where an episode had ended),
        which lets two models evaluated on the same episodes be compared pair by pair."""
        skip = ("videos", "episode_psnr", "episode_alternative_psnr")
        body: dict[str, Any] = {k: v for k, v in self.__dict__.items() if k not in skip}
        body["beats_copy_baseline"] = self.beats_copy_baseline()
        steps = (1, 8, 16, 24, 32)
        body["per_episode"] = {
            key: [None if np.isnan(v) else v for v in values]
            for key, values in self.per_episode(steps).items()
        }
        return body

    def beats_copy_baseline(self) -> bool:
        return all(m > c for m, c in zip(self.psnr, self.copy_psnr))

    def summary(self, steps: tuple[int, ...] = (1, 8, 16, 24, 32)) -> dict[str, float]:
        out: dict[str, float] = {}
        for step in (s for s in steps if s <= self.horizon):
            for key, value in self.at(step).items():
                out[f"{key}@{step}"] = value
            for kind in self.alternative_psnr:
                name = "action_gap" if kind == "other" else f"action_gap_{kind}"
                out[f"{name}@{step}"] = self.psnr[step - 1] - self.alternative_psnr[kind][step - 1]
            if self.response_ratio is not None:
                out[f"response_ratio@{step}"] = self.response_ratio[step - 1]
        return out


def alternative_actions(
    kind: str, episodes: Sequence[Episode], steps: int, seed: int
) -> list[np.ndarray]:
    """Per episode, the [steps, A] actions of the `kind` alternative (see the module doc)."""
    a_dim = episodes[0].actions.shape[1]
    rng = np.random.default_rng([seed, ALTERNATIVES.index(kind)])
    if kind == "other":
        return [
            padded_actions(episodes[j].actions, steps, a_dim) for j in same_task_partners(episodes)
        ]
    if kind == "shuffled":
        return [
            padded_actions(e.actions[rng.permutation(len(e.actions))], steps, a_dim)
            for e in episodes
        ]
    if kind == "random":
        every = np.concatenate([e.actions for e in episodes])
        low, high = every.min(0), every.max(0)
        return [
            padded_actions(rng.uniform(low, high, (steps, a_dim)), steps, a_dim) for _ in episodes
        ]
    raise ValueError(f"unknown alternative {kind!r}; expected one of {ALTERNATIVES}")


def same_task_partners(episodes: Sequence[Episode]) -> list[int]:
    """Per episode, the index of the next other episode in the list of the same task (of any
    task where it is the only one; itself when it is alone)."""
    out = []
    for i, episode in enumerate(episodes):
        order = [(i + j) % len(episodes) for j in range(1, len(episodes))]
        same = [j for j in order if episodes[j].task_id == episode.task_id]
        out.append((same or order or [i])[0])
    return out


def moving_mse(pred: torch.Tensor, truth: torch.Tensor, first: torch.Tensor) -> np.ndarray:
    """MSE [B,T] (in [0,1] units) over the pixels that differ from the first frame in the truth;
    NaN where nothing moves."""
    moving = (truth.int() - first[:, None].int()).abs().amax(-1) > MOVING_THRESHOLD  # [B,T,H,W]
    err = ((pred.float() - truth.float()) / 255.0).pow(2).mean(-1)
    count = moving.sum((-2, -1)).float()
    mse = (err * moving).sum((-2, -1)) / count.clamp_min(1)
    return torch.where(count > 0, mse, torch.nan).numpy()


def _mse(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> np.ndarray:
    a, b = torch.as_tensor(a).float(), torch.as_tensor(b).float()
    return ((a - b) / 255.0).pow(2).flatten(2).mean(-1).numpy()


def psnr_of_mse(mse: np.ndarray) -> np.ndarray:
    return 10 * np.log10(1.0 / np.maximum(mse, 1e-10))


@torch.no_grad()
def open_loop_eval(
    world_model: WorldModel,
    episodes: list[Episode],
    horizon: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    keep_videos: int = 4,
    action_check: bool = False,
    alternatives: Sequence[str] | None = None,
    replay: Replay | None = None,
    progress: bool = False,
) -> OpenLoopReport:
    """Open-loop fidelity and, with `action_check` (the "other" kind) or `alternatives`,
    controllability; `replay` adds the response ratio (see the module doc)."""
    c = episodes[0].chunk_size
    steps = -(-horizon // c) * c
    kinds = list(alternatives) if alternatives is not None else (["other"] if action_check else [])
    if len(episodes) < 2:
        kinds = [k for k in kinds if k != "other"]
    alt_actions = {k: alternative_actions(k, episodes, steps, seed) for k in kinds}
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}

    def add(name: str, values: np.ndarray, valid: np.ndarray) -> None:
        ok = valid & ~np.isnan(values)
        sums[name] = sums.get(name, 0) + np.where(ok, values, 0).sum(0)
        counts[name] = counts.get(name, 0) + ok.sum(0)

    videos = []
    per_episode: dict[str, list[np.ndarray]] = {}

    def keep(name: str, values: np.ndarray, valid: np.ndarray) -> None:
        per_episode.setdefault(name, []).append(np.where(valid, values, np.nan))

    batches = range(0, len(episodes), batch_size)
    for start in track_batches(batches, "open-loop rollouts (episodes)", progress):
        batch = episodes[start : start + batch_size]
        first, actions = recorded_starts(batch, steps)
        preds = open_loop_rollout(world_model, first, actions, c, horizon, seed + start)
        truth = torch.from_numpy(np.stack([_padded_frames(e.frames, horizon) for e in batch]))
        first_t = torch.from_numpy(first)
        copy = first_t[:, None].expand_as(truth)
        valid = np.array([[t < e.length for t in range(horizon)] for e in batch])
        true_psnr = psnr(preds, truth).numpy()
        add("psnr", true_psnr, valid)
        keep("psnr", true_psnr, valid)
        add("ssim", ssim(preds, truth).numpy(), valid)
        add("copy_psnr", psnr(copy, truth).numpy(), valid)
        add("copy_ssim", ssim(copy, truth).numpy(), valid)
        add("moving_mse", moving_mse(preds, truth, first_t), valid)
        add("copy_moving_mse", moving_mse(copy, truth, first_t), valid)
        for kind in kinds:
            alt = np.stack(alt_actions[kind][start : start + len(batch)])
            other = open_loop_rollout(world_model, first, alt, c, horizon, seed + start)
            other_psnr = psnr(other, truth).numpy()
            add(f"alt_{kind}", other_psnr, valid)
            keep(f"alt_{kind}", other_psnr, valid)
            if kind == "other" and replay is not None:
                sim_other = replay(batch, alt)[:, 1 : horizon + 1]
                add("model_response", _mse(preds, other), valid)
                add("sim_response", _mse(truth, sim_other), valid)
        if len(videos) < keep_videos:
            videos.extend(torch.cat([truth, preds], dim=3).numpy()[: keep_videos - len(videos)])
    means = {
        k: np.where(counts[k] > 0, s / np.maximum(counts[k], 1), np.nan) for k, s in sums.items()
    }
    response = None
    if "sim_response" in means:
        response = list(means["model_response"] / np.maximum(means["sim_response"], 1e-12))
    return OpenLoopReport(
        horizon=horizon,
        episodes=len(episodes),
        videos=np.stack(videos) if videos else None,
        psnr=list(means["psnr"]),
        ssim=list(means["ssim"]),
        copy_psnr=list(means["copy_psnr"]),
        copy_ssim=list(means["copy_ssim"]),
        moving_psnr=list(psnr_of_mse(means["moving_mse"])),
        copy_moving_psnr=list(psnr_of_mse(means["copy_moving_mse"])),
        alternative_psnr={k: list(means[f"alt_{k}"]) for k in kinds},
        response_ratio=response,
        episode_psnr=np.concatenate(per_episode["psnr"]),
        episode_alternative_psnr={k: np.concatenate(per_episode[f"alt_{k}"]) for k in kinds},
    )


def open_loop_rollout(
    world_model: WorldModel,
    first: np.ndarray,
    actions: np.ndarray,
    chunk: int,
    horizon: int,
    seed: int,
) -> torch.Tensor:
    """Frames [B, horizon, H, W, 3] predicted from `first` [B,H,W,3] under `actions`
    [B, steps, A], `chunk` steps at a time; the same seed gives the same sampling noise."""
    k = world_model.num_context_frames
    world_model.reset_context(
        first,
        np.repeat(first[:, None], k, axis=1),
        np.tile(rest_action(actions.shape[2]), (len(first), k, 1)),
    )
    gen = torch.Generator().manual_seed(seed)
    chunks = [
        world_model.predict(torch.from_numpy(actions[:, i : i + chunk]).float(), gen).cpu()
        for i in range(0, actions.shape[1], chunk)
    ]
    return torch.cat(chunks, dim=1)[:, :horizon]


def recorded_starts(batch: Sequence[Episode], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch's first frames [B,H,W,3] and recorded actions [B, steps, A] (padded with the
    rest action): what an open-loop rollout of the recorded episodes starts from."""
    a_dim = batch[0].actions.shape[1]
    first = np.stack([e.frames[0] for e in batch])
    return first, np.stack([padded_actions(e.actions, steps, a_dim) for e in batch])


def padded_actions(actions: np.ndarray, steps: int, a_dim: int) -> np.ndarray:
    """Recorded actions, then the rest action after the episode ends."""
    out = np.tile(rest_action(a_dim), (steps, 1))
    n = min(steps, len(actions))
    out[:n] = actions[:n]
    return out.astype(np.float32)


def _padded_frames(frames: np.ndarray, horizon: int) -> np.ndarray:
    """frames[1 .. horizon], holding the last frame after the episode ends (masked anyway)."""
    idx = np.minimum(np.arange(1, horizon + 1), len(frames) - 1)
    return frames[idx]
