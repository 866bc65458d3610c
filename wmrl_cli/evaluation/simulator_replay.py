"""The real simulator replaying stored episodes (`wmrl eval --world-model`'s reference): the
simulator that collected a store (`replay_sim_config`), and each episode restarted from its
stored state under other actions (`SimulatorReplay`, `open_loop_eval`'s replay)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.errors import WmrlError


def replay_sim_config(
    store: EpisodeStore, episodes: list[Episode], sim_cfg: SimulatorConfig
) -> SimulatorConfig:
    """The simulator that reproduces the stored episodes: suite and image size from the
    episodes, backend, camera, max_steps and terminate_on_success from the store's config.yaml (the
    configuration that collected it) where present; batch size and workers from `sim_cfg`."""
    suites = {e.suite or sim_cfg.suite for e in episodes}
    if len(suites) > 1:
        raise WmrlError(f"{store.root}: the episodes come from several suites {sorted(suites)}")
    update: dict[str, Any] = {"suite": suites.pop(), "image_size": int(episodes[0].frames.shape[1])}
    config_path = store.root / "config.yaml"
    if config_path.is_file():
        try:
            collected = (yaml.safe_load(config_path.read_text()) or {}).get("simulator") or {}
        except (yaml.YAMLError, AttributeError) as exc:
            raise WmrlError(f"{config_path}: not a readable run configuration ({exc})") from None
        for key in ("name", "camera", "max_steps", "terminate_on_success"):
            if key in collected:
                update[key] = collected[key]
    return sim_cfg.model_copy(update=update)


def seed_offset(episode: Episode) -> int:
    """The seed of init id 0 in the run that recorded `episode`."""
    return episode.seed - episode.init_id


def padded_batches(n: int, size: int) -> list[list[int]]:
    """Index batches of exactly `size` (the last padded with its last index)."""
    out = []
    for start in range(0, n, size):
        idx = list(range(start, min(start + size, n)))
        out.append(idx + [idx[-1]] * (size - len(idx)))
    return out


class SimulatorReplay:
    """The real simulator as `open_loop_eval`'s replay: each episode restarted from its first
    stored state (step 0) and driven by other actions, `batch_size` at a time; one simulator per
    seed offset, kept until `close`."""

    def __init__(self, cfg: SimulatorConfig, batch_size: int) -> None:
        self.cfg, self.batch_size = cfg, batch_size
        self._sims: dict[int, Any] = {}
        self.steps = 0  # simulator steps taken, every env of a batch counted

    def __call__(self, episodes: Sequence[Episode], actions: np.ndarray) -> np.ndarray:
        return self.states(episodes, actions)[0]

    def states(
        self, episodes: Sequence[Episode], actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Frames [B, T + 1, H, W, 3] and hand positions [B, T + 1, 3] (metres; the proprio
        of Meta-World and LIBERO starts with the end effector's xyz) under `actions` [B, T, A]."""
        from wmrl_cli.sims.backends import replay_actions, resolve_simulator, simulator_class

        simulator = simulator_class(resolve_simulator(self.cfg))
        actions = replay_actions(resolve_simulator(self.cfg), actions)  # as recorded, executed
        b, steps = self.batch_size, actions.shape[1]
        chunk = episodes[0].chunk_size
        size = episodes[0].frames.shape[1]
        out = np.zeros((len(episodes), steps + 1, size, size, 3), dtype=np.uint8)
        hands = np.zeros((len(episodes), steps + 1, 3))
        for i, episode in enumerate(episodes):
            out[i, 0] = episode.frames[0]
        for offset in sorted({seed_offset(e) for e in episodes}):
            if offset not in self._sims:
                cfg = self.cfg.model_copy(update={"seed": offset})
                self._sims[offset] = simulator(cfg, num_envs=b)
            sim = self._sims[offset]
            group = [i for i, e in enumerate(episodes) if seed_offset(e) == offset]
            for sub in padded_batches(len(group), b):
                idx = [group[j] for j in sub]  # exactly b (padded with repeats)
                obs = sim.reset(
                    [episodes[i].init_id for i in idx], [episodes[i].sim_states.get(0) for i in idx]
                )
                hands[idx, 0] = obs.proprio[:, :3]
                for start in range(0, steps - steps % chunk, chunk):
                    part = slice(start, start + chunk)
                    result = sim.chunk_step(actions[idx][:, part])
                    self.steps += len(idx) * chunk
                    out[idx, start + 1 : start + chunk + 1] = result.frames
                    hands[idx, start + 1 : start + chunk + 1] = result.info["step_proprio"][..., :3]
        return out, hands

    def close(self) -> None:
        for sim in self._sims.values():
            sim.close()
        self._sims.clear()
