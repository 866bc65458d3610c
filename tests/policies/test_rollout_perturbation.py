"""Action perturbation in `wmrl rollout`: noise kinds, random chunks, the `perturbed` record."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.config.loading import resolve_config
from wmrl_cli.config.schema import PerturbationConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.envs.interface import ChunkResult, Obs, PolicyOutput
from wmrl_cli.envs.runner import iter_episodes
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.policies.perturbation import PerturbedPolicy, perturb

DIM = 4


class FixedPolicy:
    """Deterministic actions that vary with the step: `base(step)` for every env."""

    name = "fixed"

    def __init__(self, chunk_size: int = 1, level: float = 0.0) -> None:
        self.chunk_size = chunk_size
        self.level = level
        self.calls = 0

    def start_episodes(self, init_ids: list[int]) -> None:
        self.calls = 0

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.6) -> PolicyOutput:
        batch = len(obs.task_ids)
        steps = self.calls * self.chunk_size + np.arange(self.chunk_size)
        self.calls += 1
        one = self.level + 0.3 * np.sin(steps[:, None] * 0.7 + np.arange(DIM)[None, :])
        return PolicyOutput(actions=np.broadcast_to(one, (batch, *one.shape)).astype(np.float32))


class CountingEnv:
    """Episodes of exactly `length` steps; blank frames; the executed actions in info."""

    action_dim = DIM
    task_names = ["task0"]

    def __init__(self, num_envs: int, length: int) -> None:
        self.num_envs = num_envs
        self.length = length
        self.t = np.zeros(num_envs, dtype=np.int64)

    def _obs(self) -> Obs:
        b = self.num_envs
        return Obs(np.zeros((b, 4, 4, 3), np.uint8), ["go"] * b, np.zeros(b, np.int64))

    def reset(self, init_ids: list[int], sim_states=None) -> Obs:
        self.t[:] = 0
        return self._obs()

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        b, c, _ = actions.shape
        valid = np.zeros((b, c), dtype=bool)
        terminated = np.zeros((b, c), dtype=bool)
        for i in range(b):
            for k in range(c):
                if self.t[i] < self.length:
                    valid[i, k] = True
                    self.t[i] += 1
                    terminated[i, k] = self.t[i] == self.length
                else:
                    terminated[i, k] = True
        zeros = np.zeros((b, c), dtype=np.float32)
        return ChunkResult(
            obs=self._obs(),
            frames=np.zeros((b, c, 4, 4, 3), np.uint8),
            rewards=zeros,
            terminated=terminated,
            truncated=np.zeros((b, c), dtype=bool),
            success=np.zeros((b, c), dtype=bool),
            info={"valid": valid, "executed_actions": actions},
        )

    def close(self) -> None:
        pass


def rollout_actions(
    cfg: PerturbationConfig,
    steps: int,
    init_ids: list[int],
    *,
    policy_chunk: int = 1,
    episode_chunk: int = 8,
    seed: int = 0,
    level: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base actions, perturbed actions, flags), each [B, steps, ...], act() called directly."""
    base_policy = FixedPolicy(policy_chunk, level)
    reference = FixedPolicy(policy_chunk, level)
    wrapped = PerturbedPolicy(base_policy, cfg, episode_chunk, seed=seed)
    wrapped.start_episodes(init_ids)
    b = len(init_ids)
    obs = Obs(np.zeros((b, 4, 4, 3), np.uint8), [""] * b, np.zeros(b, np.int64))
    base, acts, flags = [], [], []
    for _ in range(steps // policy_chunk):
        base.append(reference.act(obs).actions)
        out = wrapped.act(obs)
        assert out.perturbed is not None and out.perturbed.shape == out.actions.shape[:2]
        acts.append(out.actions)
        flags.append(out.perturbed)
    return (
        np.concatenate(base, axis=1),
        np.concatenate(acts, axis=1),
        np.concatenate(flags, axis=1),
    )


def lag1(noise: np.ndarray) -> float:
    """Lag-1 autocorrelation over time (axis 1), pooled over envs and dims."""
    x = noise - noise.mean(axis=1, keepdims=True)
    return float((x[:, 1:] * x[:, :-1]).sum() / (x * x).sum())


def test_kind_none_leaves_actions_unchanged() -> None:
    cfg = PerturbationConfig(kind="none", random_chunk_prob=0.0)
    base, acts, flags = rollout_actions(cfg, 64, [0, 1])
    assert np.array_equal(base, acts) and not flags.any()
    policy = FixedPolicy()
    assert perturb(policy, cfg, 8) is policy  # nothing to do: not wrapped
    assert perturb(policy, PerturbationConfig(kind="ou", std=0.0), 8) is policy
    assert perturb(policy, PerturbationConfig(kind="ou"), 8) is not policy


def test_random_policy_reports_every_step_as_perturbed() -> None:
    from wmrl_cli.sims.experts import RandomPolicy

    obs = Obs(np.zeros((3, 4, 4, 3), np.uint8), [""] * 3, np.zeros(3, np.int64))
    out = RandomPolicy(DIM, chunk_size=8, seed=0).act(obs)
    assert out.perturbed is not None and out.perturbed.shape == (3, 8) and out.perturbed.all()


def test_ou_noise_is_temporally_correlated_and_gaussian_is_not() -> None:
    ids = list(range(4))
    ou = PerturbationConfig(kind="ou", std=0.2, ou_theta=0.15)
    base, acts, flags = rollout_actions(ou, 1000, ids)
    noise = acts - base  # std 0.2 around |base| <= 0.3: clipping never binds
    assert flags.all()
    assert lag1(noise) > 0.75  # 1 - theta = 0.85
    assert abs(noise.std() - 0.2) < 0.05  # started stationary: std 0.2 throughout
    assert abs(noise[:, :50].std() - 0.2) < 0.08

    base, acts, flags = rollout_actions(PerturbationConfig(kind="gaussian", std=0.2), 1000, ids)
    noise = acts - base
    assert flags.all() and abs(lag1(noise)) < 0.1
    assert abs(noise.std() - 0.2) < 0.02


def test_chunk_offsets_are_constant_within_episode_chunks() -> None:
    cfg = PerturbationConfig(kind="chunk_offset", std=0.2)
    # A policy chunk of 3 against episode chunks of 8: offsets follow the episode's steps.
    base, acts, flags = rollout_actions(cfg, 48, [0, 1], policy_chunk=3, episode_chunk=8)
    offsets = (acts - base).reshape(2, 6, 8, DIM)
    assert flags.all()
    assert np.allclose(offsets, offsets[:, :, :1], atol=1e-6)  # constant within a chunk
    per_chunk = offsets[:, :, 0]
    assert np.abs(np.diff(per_chunk, axis=1)).min() > 0  # a new offset every chunk
    assert 0.1 < per_chunk.std() < 0.3


def test_random_chunks_cover_the_configured_fraction_and_are_flagged() -> None:
    cfg = PerturbationConfig(kind="none", random_chunk_prob=0.3)
    base, acts, flags = rollout_actions(cfg, 512, list(range(16)), episode_chunk=8)
    chunks = flags.reshape(16, 64, 8)  # 1024 chunks: the fraction has std 0.014
    assert (chunks.all(axis=2) | ~chunks.any(axis=2)).all()  # whole episode chunks only
    assert 0.24 < flags.mean() < 0.36
    assert np.array_equal(acts[~flags], base[~flags])  # the rest is the policy's own
    random = acts[flags]
    assert random.min() >= -1.0 and random.max() <= 1.0
    assert random.min() < -0.9 and random.max() > 0.9 and abs(random.mean()) < 0.05
    assert np.abs(random - base[flags]).mean() > 0.3


def test_actions_stay_clipped() -> None:
    cfg = PerturbationConfig(kind="ou", std=2.0)
    _, acts, _ = rollout_actions(cfg, 64, [0, 1], level=0.7)
    assert acts.min() >= -1.0 and acts.max() <= 1.0
    assert (acts == 1.0).any() and (acts == -1.0).any()


def test_deterministic_by_seed_and_init_id_not_batching() -> None:
    cfg = PerturbationConfig(kind="ou", std=0.5, random_chunk_prob=0.2)
    _, a, fa = rollout_actions(cfg, 64, [3, 5], seed=11)
    _, b, fb = rollout_actions(cfg, 64, [3, 5], seed=11)
    assert np.array_equal(a, b) and np.array_equal(fa, fb)
    _, alone, _ = rollout_actions(cfg, 64, [5], seed=11)
    assert np.array_equal(alone[0], a[1])  # the episode's noise depends on its init id only
    _, other, _ = rollout_actions(cfg, 64, [3, 5], seed=12)
    assert not np.allclose(other, a)
    assert not np.allclose(a[0], a[1])


def test_closed_loop_records_perturbed_steps_through_the_store(tmp_path) -> None:
    cfg = PerturbationConfig(kind="none", random_chunk_prob=0.5)
    env = CountingEnv(num_envs=3, length=37)
    policy = PerturbedPolicy(FixedPolicy(chunk_size=8), cfg, chunk_size=8, seed=3)
    episodes = list(
        iter_episodes(env, policy, [0, 1, 2, 3], chunk_size=8, seed_of=lambda i: i, suite="toy")
    )
    assert [e.length for e in episodes] == [37] * 4
    for episode in episodes:
        assert episode.perturbed is not None and episode.perturbed.shape == (37,)
    flags = np.concatenate([e.perturbed for e in episodes])
    assert flags.any() and not flags.all()
    # Restarted per batch: init id 3 (second batch, padded) drew what a fresh wrapper draws.
    fresh = PerturbedPolicy(FixedPolicy(chunk_size=8), cfg, chunk_size=8, seed=3)
    again = list(iter_episodes(env, fresh, [3], chunk_size=8, seed_of=lambda i: i))
    assert np.array_equal(again[0].perturbed, episodes[3].perturbed)
    assert np.array_equal(again[0].actions, episodes[3].actions)

    store = EpisodeStore(tmp_path / "store")
    store.add(episodes)
    loaded = list(EpisodeStore.open(tmp_path / "store"))
    for before, after in zip(episodes, loaded):
        assert after.perturbed is not None and after.perturbed.dtype == bool
        assert np.array_equal(before.perturbed, after.perturbed)

    # A policy that reports nothing: no array, as in stores written before it existed.
    plain = list(iter_episodes(env, FixedPolicy(8), [0], chunk_size=8, seed_of=lambda i: i))
    assert plain[0].perturbed is None


def _episode(perturbed: np.ndarray | None, length: int = 6) -> Episode:
    return Episode(
        task_id=0,
        task_name="t",
        instruction="go",
        seed=0,
        init_id=0,
        frames=np.zeros((length + 1, 4, 4, 3), np.uint8),
        actions=np.zeros((length, DIM), np.float32),
        rewards=np.zeros(length, np.float32),
        success=np.zeros(length, bool),
        chunk_size=2,
        perturbed=perturbed,
    )


def test_stores_without_the_array_still_load(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "old")
    store.add([_episode(None)])
    with np.load(tmp_path / "old" / store.index[0]["file"]) as data:
        assert "perturbed" not in data.files
    assert EpisodeStore.open(tmp_path / "old").load(0).perturbed is None
    with pytest.raises(WmrlError, match="perturbed has shape"):
        store.add([_episode(np.zeros(5, bool))])


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="rollout.perturbation.kind"):
        resolve_config(None, None, ["rollout.perturbation.kind=brownian"])
    with pytest.raises(ConfigError, match="rollout.perturbation.random_chunk_prob"):
        resolve_config(None, None, ["rollout.perturbation.random_chunk_prob=1.5"])
    result = CliRunner().invoke(app, ["rollout", "--out", "x", "--noise-kind", "pink"])
    assert result.exit_code == 2 and "rollout.perturbation.kind" in result.output


def test_noise_std_targets_the_configured_noise(monkeypatch) -> None:
    import wmrl_cli.jobs.collect_rollouts as collection

    seen = []
    monkeypatch.setattr(
        collection,
        "collect_rollouts",
        lambda cfg, **_: seen.append(cfg) or collection.RolloutSummary(store="x"),
    )
    runner = CliRunner()
    assert runner.invoke(app, ["rollout", "--out", "x", "--noise-std", "0.3"]).exit_code == 0
    assert (
        runner.invoke(
            app, ["rollout", "--out", "x", "--noise-std", "0.3", "--noise-kind", "ou"]
        ).exit_code
        == 0
    )
    assert (seen[0].policy.noise_std, seen[0].rollout.perturbation.kind) == (0.3, "none")
    assert (seen[1].policy.noise_std, seen[1].rollout.perturbation.std) == (0.0, 0.3)


SMALL = ["--suite", "mw2", "--image-size", "32", "--num-envs", "2", "--num-workers", "0"]


def test_cli_rollout_expert_with_ou_noise_and_random_chunks(tmp_path) -> None:
    runner = CliRunner()
    common = ["rollout", "--policy", "expert", "-n", "1", "--seed", "5", *SMALL]
    common += ["--set", "simulator.max_steps=24"]
    noisy = [*common, "--noise-kind", "ou", "--noise-std", "0.4", "--random-chunk-prob", "0.5"]
    result = runner.invoke(app, [*noisy, "--out", str(tmp_path / "ou")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*common, "--out", str(tmp_path / "plain")])
    assert result.exit_code == 0, result.output

    config = yaml.safe_load((tmp_path / "ou" / "config.yaml").read_text())
    assert config["rollout"]["perturbation"] == {
        "kind": "ou",
        "std": 0.4,
        "ou_theta": 0.15,
        "random_chunk_prob": 0.5,
    }
    noisy_store, plain_store = (
        EpisodeStore.open(tmp_path / "ou"),
        EpisodeStore.open(tmp_path / "plain"),
    )
    assert len(noisy_store) == len(plain_store) == 2
    for meta in noisy_store.index:
        assert meta["policy"] == "expert+ou(0.4,theta=0.15)+random_chunks(0.5)"
    for noisy_ep, plain_ep in zip(noisy_store, plain_store):
        assert noisy_ep.perturbed is not None and noisy_ep.perturbed.all()  # OU: every step
        assert plain_ep.perturbed is not None and not plain_ep.perturbed.any()
        assert np.abs(noisy_ep.actions).max() <= 1.0
        assert not np.allclose(noisy_ep.actions[:8], plain_ep.actions[:8])
        assert np.array_equal(noisy_ep.frames[0], plain_ep.frames[0])  # same start state
