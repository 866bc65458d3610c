"""docs/parity.md, item by item: what RLinf's recipe does, computed by hand, against wmrl's
options; and that the seeds' presets choose RLinf's behaviour while the defaults (and the mw-*
presets) keep wmrl's."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.config import resolve_config
from wmrl_cli.data.reset_set import ResetEntry, context_indices, read_rlinf_file
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.errors import ConfigError
from wmrl_cli.rewards.base import round_scores
from wmrl_cli.rewards.resnet import rlinf_task_ids
from wmrl_cli.rl.advantages import normalize_advantages
from wmrl_cli.rl.aggregation import (
    LossAggregation,
    aggregate,
    loss_scale,
    masked_mean_ratio,
    minibatch_share,
    trajectory_mean,
)
from wmrl_cli.rl.buffer import Rollout
from wmrl_cli.rl.grouping import band_filter, varied_outcome_groups
from wmrl_cli.rl.losses import policy_loss, value_loss
from wmrl_cli.rl.schedule import concat_rollouts, optimizer_batches
from wmrl_cli.sims.libero_suites import get_libero_suite
from wmrl_cli.world_models import flow_matching as fm

SEED_PRESETS = [
    "wan-spatial-grpo",
    "wan-object-grpo",
    "wan-goal-grpo",
    "opensora-spatial-grpo",
    "opensora-object-grpo",
]

# -- 1, 4, 5: aggregation -------------------------------------------------------------------------

# 3 trajectories x 2 steps x 2 tokens; trajectory 1 ends after its first step, trajectory 2 was
# filtered (all masked).
X = torch.tensor([[[1.0, 3.0], [5.0, 7.0]], [[2.0, 4.0], [9.0, 9.0]], [[6.0, 6.0], [6.0, 6.0]]])
STEP_MASK = torch.tensor([[1, 1], [1, 0], [0, 0]])


def test_masked_mean_ratio_is_rlinfs_per_token_formula() -> None:
    # RLinf: mean over all 12 entries of x * m / (T_i / M), T_i = valid steps before the filter
    # (2, 1, 2), M = max_episode_steps = 2 = rollout length:
    #   traj 0: (1 + 3 + 5 + 7) / (2/2) = 16;  traj 1: (2 + 4) / (1/2) = 12;  traj 2: 0
    #   -> 28 / 12
    assert math.isclose(float(masked_mean_ratio(X, STEP_MASK)), 28 / 12, rel_tol=1e-6)
    # trajectory means 4, 3 and 0 (filtered, but counted): (4 + 3 + 0) / 3 = 28 / 12
    assert math.isclose(
        float(trajectory_mean(X, STEP_MASK, count_masked=True)), 7 / 3, rel_tol=1e-6
    )
    # wmrl's default drops the filtered trajectory: (4 + 3) / 2, N_total / N_kept = 3/2 larger
    assert float(trajectory_mean(X, STEP_MASK)) == 3.5
    # token mean: (1 + 3 + 5 + 7 + 2 + 4) / 6
    assert math.isclose(float(aggregate(X, STEP_MASK, "token_mean")), 22 / 6, rel_tol=1e-6)


def test_loss_scale_is_max_episode_steps_over_rollout_length() -> None:
    assert loss_scale(256, 8) == 1.0  # the seeds: 32 chunks of 8 = 256 steps
    assert loss_scale(12, 8) == 0.75  # 2 chunks = 16 steps for a 12-step episode
    # the scale multiplies the whole aggregate: 0.75 * 7/3
    rule = LossAggregation("masked_mean_ratio", scale=0.75)
    assert math.isclose(float(rule(X, STEP_MASK)), 1.75, rel_tol=1e-6)


@pytest.mark.parametrize(
    ("mode", "count_masked"),
    [
        ("token_mean", False),
        ("trajectory_mean", False),
        ("trajectory_mean", True),
        ("masked_mean_ratio", False),
    ],
)
def test_minibatch_shares_add_up_to_the_batch_aggregate(mode: str, count_masked: bool) -> None:
    rule = LossAggregation(mode, count_masked)  # type: ignore[arg-type]
    parts = [torch.tensor([0, 2]), torch.tensor([1])]
    total = sum(rule.share(STEP_MASK[i], STEP_MASK) * rule(X[i], STEP_MASK[i]) for i in parts)
    assert math.isclose(float(total), float(rule(X, STEP_MASK)), rel_tol=1e-6)
    # trajectory_mean without count_masked: minibatch [0, 2] holds 1 of the 2 kept trajectories
    assert minibatch_share(STEP_MASK[[0, 2]], STEP_MASK, "trajectory_mean") == 0.5


def test_policy_loss_with_rlinfs_aggregation_and_no_dual_clip() -> None:
    # one token per step; ratios r, old logprobs 0, A = +1 for trajectory 0, -2 for 1 and 2
    ratios = torch.tensor([[1.5, 1.0], [4.0, 1.0], [1.0, 1.0]])
    adv = torch.tensor([1.0, -2.0, -2.0])
    # clip [0.8, 1.28]: traj 0: min(1.5, 1.28) = 1.28, 1 -> mean 1.14
    #                   traj 1: min(-8, -2.56) = -8 (no dual clip; c = 3 would give -6)
    #                   traj 2: filtered
    # masked_mean_ratio: -(1.14 - 8 + 0) / 3 = 6.86 / 3
    loss, m = policy_loss(
        torch.log(ratios),
        torch.zeros(3, 2),
        adv,
        STEP_MASK,
        aggregation=LossAggregation("masked_mean_ratio"),
    )
    assert math.isclose(loss.item(), 6.86 / 3, rel_tol=1e-5)
    assert float(m["dual_clip_fraction"]) == 0.0
    dual, _ = policy_loss(
        torch.log(ratios),
        torch.zeros(3, 2),
        adv,
        STEP_MASK,
        dual_clip=3.0,
        aggregation=LossAggregation("masked_mean_ratio"),
    )
    assert math.isclose(dual.item(), (6.0 - 1.14) / 3, rel_tol=1e-5)


# -- 3: GAE advantage normalization ---------------------------------------------------------------


def test_gae_advantages_normalized_over_valid_steps() -> None:
    adv = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # valid 1, 2, 3: mean 2, sample std 1 -> (a - 2) / (1 + 1e-5); the masked entry too
    out = normalize_advantages(adv, mask)
    expected = torch.tensor([[-1.0, 0.0], [1.0, 98.0]]) / (1.0 + 1e-5)
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(normalize_advantages(adv, torch.zeros(2, 2)), adv)


# -- 6: group filter ------------------------------------------------------------------------------


def test_reward_band_filter_against_all_equal_rule() -> None:
    # groups of 2 with continuous returns: means 0.1, 2.5, 5.0
    returns = torch.tensor([0.0, 0.2, 0.0, 5.0, 5.0, 5.0])
    assert varied_outcome_groups(returns, 2).tolist() == [True, True, False]
    assert band_filter(returns, 2, 0.5, 4.5).tolist() == [False, True, False]


# -- 7: reward rounding and the first-step baseline -----------------------------------------------


def test_scores_round_like_torch_round_of_a_probability() -> None:
    scores = np.array([0.0, 0.49, 0.5, 0.51, 0.9, 1.0], dtype=np.float32)
    assert round_scores(scores).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert torch.round(torch.from_numpy(scores)).tolist() == round_scores(scores).tolist()


class _FrameWorld:
    """Predicts frames whose every pixel is one noise draw, and records the draws."""

    def __init__(self) -> None:
        self.draws: list[int] = []

    def reset_context(self, reference, context, actions) -> None:
        self.size = context.shape[-3:-1]

    def predict(self, actions: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, c = actions.shape[:2]
        value = int(torch.randint(0, 256, (1,), generator=generator))
        self.draws.append(value)
        return torch.full((b, c, *self.size, 3), value, dtype=torch.uint8)

    def predict_active(self, actions, active, generator: torch.Generator) -> torch.Tensor:
        return self.predict(actions, generator)


class _PixelReward:
    """Success probability = the first pixel / 255; records the task ids it was given."""

    kind = "taskemb_resnet"
    threshold = None

    def __init__(self) -> None:
        self.task_ids: list[list[int]] = []

    def predict(self, frames, task_ids=None) -> torch.Tensor:
        self.task_ids.append(np.asarray(task_ids).tolist())
        return torch.as_tensor(np.asarray(frames)[..., 0, 0, 0] / 255.0, dtype=torch.float32)


def _entry(pixel: int, task_id: int = 0, step: int = 0) -> ResetEntry:
    frame = np.full((4, 4, 3), pixel, dtype=np.uint8)
    return ResetEntry(
        reference=frame,
        context=np.stack([frame] * 4),
        context_actions=np.zeros((4, 7), np.float32),
        instruction="task",
        task_id=task_id,
        step=step,
    )


def _env(entries: list[ResetEntry], **kwargs) -> ImaginedEnv:
    args = dict(task_names=["t"] * 10, num_envs=len(entries), max_steps=16, use_rel_reward=True)
    args.update(kwargs)
    return ImaginedEnv(_FrameWorld(), _PixelReward(), entries, **args)  # type: ignore[arg-type]


def test_first_step_baseline_and_rounded_rewards() -> None:
    # the reset frame scores 153/255 = 0.6; the world model draws some value v for the chunk
    env = _env([_entry(153)])
    env.reset([0])
    out = env.chunk_step(np.zeros((1, 8, 7), np.float32))
    v = env.world_model.draws[0] / 255.0
    # wmrl: the first step's reward is 5 * (v - 0.6), the later ones 0 (constant frames)
    assert math.isclose(float(out.rewards[0, 0]), 5 * (v - 0.6), rel_tol=1e-5, abs_tol=1e-5)
    rlinf = _env([_entry(153)], round_scores=True, zero_first_baseline=True)
    rlinf.reset([0])
    out = rlinf.chunk_step(np.zeros((1, 8, 7), np.float32))
    # RLinf: scores rounded to 0/1 and r_0 = 0: the first reward is 5 * round(v)
    assert float(out.rewards[0, 0]) == 5.0 * (v > 0.5)
    assert out.success[0].all() == (v > 0.5)  # threshold 0.9 on 0/1 scores: success iff v > 0.5


# -- 8: the task-embedding reward model's task ids ------------------------------------------------

# RLinf's LIBERO_GOAL_TASKS dictionary (its DiffSynth fork, reward_model.py), id: instruction
RLINF_GOAL = {
    0: "open the middle drawer of the cabinet",
    1: "open the top drawer and put the bowl inside",
    2: "push the plate to the front of the stove",
    3: "put the bowl on the plate",
    4: "put the bowl on the stove",
    5: "put the bowl on top of the cabinet",
    6: "put the cream cheese in the bowl",
    7: "put the wine bottle on the rack",
    8: "put the wine bottle on top of the cabinet",
    9: "turn on the stove",
}


def test_libero_goal_task_ids_equal_rlinfs_for_all_ten_tasks() -> None:
    instructions = get_libero_suite("libero_goal").instructions  # benchmark order
    by_text = {text: i for i, text in RLINF_GOAL.items()}
    assert rlinf_task_ids(instructions) == [by_text[text] for text in instructions]
    # written out: benchmark task 1 "put the bowl on the stove" is RLinf's task 4, and so on
    assert rlinf_task_ids(instructions) == [0, 4, 8, 1, 5, 2, 6, 9, 3, 7]


def test_setup_maps_goal_tasks_for_the_published_task_embedding_model() -> None:
    from wmrl_cli.jobs.inputs import reward_task_ids

    cfg = resolve_config("wan-goal-grpo")
    mapping = reward_task_ids(cfg, "taskemb_resnet", Path("taskemb_resnet_rm.pth"))
    assert mapping == [0, 4, 8, 1, 5, 2, 6, 9, 3, 7]
    assert reward_task_ids(cfg, "resnet", Path("resnet_rm.pth")) is None
    assert reward_task_ids(cfg, "taskemb_resnet", Path("run/reward_model")) is None


def test_imagined_env_feeds_the_reward_model_its_own_task_ids() -> None:
    env = _env(
        [_entry(0, task_id=1), _entry(0, task_id=7)], reward_task_ids=[0, 4, 8, 1, 5, 2, 6, 9, 3, 7]
    )
    env.reset([0, 1])
    env.chunk_step(np.zeros((2, 8, 7), np.float32))
    assert env.reward_model.task_ids[-1] == [4, 9]
    assert env._obs(env._last_frames).task_ids.tolist() == [1, 7]  # the env keeps its own ids


# -- 9: deterministic world-model noise and bf16 timesteps ----------------------------------------


def test_noise_seed_gives_the_same_noise_on_every_call() -> None:
    fixed = _env([_entry(0)], noise_seed=0)
    fresh = _env([_entry(0)])
    for env in (fixed, fresh):
        env.reset([0])
        env.chunk_step(np.zeros((1, 8, 7), np.float32))
        env.chunk_step(np.zeros((1, 8, 7), np.float32))
    first = int(torch.randint(0, 256, (1,), generator=torch.Generator().manual_seed(0)))
    assert fixed.world_model.draws == [first, first]
    assert fresh.world_model.draws[0] != fresh.world_model.draws[1]


def test_bf16_timesteps_match_rlinfs_values() -> None:
    from wmrl_cli.world_models.wan import WanWorldModel

    sigmas = fm.inference_sigmas(5, 5.0)[:4]
    as_bf16 = SimpleNamespace(config=SimpleNamespace(bf16_timesteps=True))
    as_fp32 = SimpleNamespace(config=SimpleNamespace(bf16_timesteps=False))
    # 1000 * shifted sigmas 1, 0.95238, 0.88235, 0.76923 (shift 5): bf16 keeps 8 bits
    assert WanWorldModel._timestep(as_bf16, sigmas).tolist() == [1000.0, 952.0, 884.0, 768.0]
    fp32 = WanWorldModel._timestep(as_fp32, sigmas)
    assert torch.allclose(fp32, torch.tensor([1000.0, 952.381, 882.353, 769.231]), atol=1e-3)


# -- 10: KIR resets -------------------------------------------------------------------------------


def test_context_frames_of_short_and_long_reset_files() -> None:
    # files of n frames (frame 0 the reference), 4 context slots; -1 = reference at rest
    pad = {n: context_indices(n, 4, "pad") for n in range(1, 7)}
    last = {n: context_indices(n, 4, "last_frames") for n in range(1, 7)}
    assert pad == {
        1: [-1, -1, -1, -1],
        2: [1, 1, 1, 1],
        3: [1, 1, 1, 2],
        4: [1, 1, 2, 3],
        5: [1, 2, 3, 4],
        6: [2, 3, 4, 5],
    }
    assert last == {
        1: [-1, -1, -1, -1],
        2: [-1, -1, -1, -1],
        3: [-1, -1, -1, -1],
        4: [0, 1, 2, 3],
        5: [1, 2, 3, 4],
        6: [2, 3, 4, 5],
    }


def test_reading_a_four_frame_file_under_both_rules(tmp_path: Path) -> None:
    frames = np.empty(4, dtype=object)
    for i in range(4):
        action = np.full(7, i, np.float32)
        frames[i] = {
            "image": np.full((4, 4, 3), 10 * i, np.uint8),
            "instruction": "x",
            "delta_action": action,
        }
    path = tmp_path / "traj0_kir.npy"
    np.save(path, frames, allow_pickle=True)
    pad = read_rlinf_file(path, 4, "pad")
    assert pad.context[:, 0, 0, 0].tolist() == [10, 10, 20, 30]
    assert pad.context_actions[:, 0].tolist() == [0, 1, 2, 3]  # padded slot at rest (0, -1)
    assert pad.context_actions[0, -1] == -1.0
    last = read_rlinf_file(path, 4, "last_frames")
    assert last.context[:, 0, 0, 0].tolist() == [0, 10, 20, 30]
    assert last.context_actions[:, 0].tolist() == [0, 1, 2, 3]
    assert last.step == 3


def test_kir_step_reset_gives_a_keyframe_the_whole_episode() -> None:
    for reset, truncated in ((False, True), (True, False)):
        env = _env([_entry(0, step=8)], max_steps=16, kir_step_reset=reset)
        env.reset([0])
        out = env.chunk_step(np.zeros((1, 8, 7), np.float32))
        # from step 8, one chunk reaches the limit of 16; from 0 it does not
        assert bool(out.truncated[0, -1]) is truncated


# -- 11: the schedule -----------------------------------------------------------------------------


def _rollout(b: int, t: int, fill: float) -> Rollout:
    return Rollout(
        images=np.full((b, t, 2, 2, 3), int(fill), np.uint8),
        instructions=[f"r{fill}"] * b,
        tokens=torch.full((b, t, 1, 1), int(fill)),
        logprobs=torch.full((b, t, 1, 1), fill),
        values=torch.full((b, t), fill),
        rewards=torch.full((b, t), fill),
        dones=torch.zeros(b, t),
        success=torch.zeros(b, dtype=torch.bool),
        step_mask=torch.ones(b, t, dtype=torch.bool),
        episode_len=torch.full((b,), t),
        last_value=torch.zeros(b),
    )


def test_rollout_epochs_concatenate_and_pad_masked_done_steps() -> None:
    ro = concat_rollouts([_rollout(2, 3, 1.0), _rollout(2, 1, 2.0)])
    assert ro.rewards.tolist() == [[1, 1, 1], [1, 1, 1], [2, 0, 0], [2, 0, 0]]
    assert ro.dones[2:].tolist() == [[0, 1, 1], [0, 1, 1]]
    assert ro.step_mask[2:].tolist() == [[True, False, False]] * 2
    assert ro.images.shape == (4, 3, 2, 2, 3) and ro.instructions[2] == "r2.0"
    assert ro.episode_len.tolist() == [3, 3, 1, 1]


def test_optimizer_batches_split_the_shuffled_trajectories() -> None:
    order = torch.arange(10)
    assert [b.tolist() for b in optimizer_batches(order, 4)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
        [8, 9],
    ]
    with pytest.raises(ConfigError):
        optimizer_batches(order, 11)


def test_presets_show_the_rlinf_schedule() -> None:
    shown = CliRunner().invoke(app, ["presets", "show", "wan-goal-grpo"])
    assert shown.exit_code == 0, shown.output
    assert "rollout_epochs: 16" in shown.output and "optimizer_steps: 4" in shown.output
    cfg = resolve_config("wan-goal-grpo")
    a = cfg.algorithm
    # 16 epochs x 64 envs = 1024 trajectories; 1024 x 32 chunk steps / 8192 = 4 steps
    assert a.rollout_epochs * a.num_envs == 1024
    assert a.rollout_epochs * a.num_envs * a.max_episode_steps // 8 // 8192 == a.optimizer_steps


# -- 12: the value_clip_ratio metric --------------------------------------------------------------


def test_value_clip_ratio_counts_clipped_steps() -> None:
    # V_old = 0, V = 1, clip 0.2: clipped. RLinf's test |V_clip - V_old| > 0.2 reads 0.2 > 0.2
    # (false) here; wmrl counts |V - V_old| = 1 > 0.2.
    _, m = value_loss(torch.ones(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1))
    assert float(m["value_clip_ratio"]) == 1.0
    v_clip = 0.0 + max(-0.2, min(0.2, 1.0 - 0.0))
    assert not abs(v_clip - 0.0) > 0.2


# -- the presets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SEED_PRESETS)
def test_seed_presets_choose_rlinfs_behaviour(name: str) -> None:
    cfg = resolve_config(name)
    a, r, w = cfg.algorithm, cfg.reward_model, cfg.world_model
    assert a.aggregation == "masked_mean_ratio" and a.filtered_in_denominator
    assert a.dual_clip is None and a.normalize_gae_advantages
    assert a.filter_groups and a.filter_band == (0.5, 4.5)
    assert (a.rollout_epochs, a.optimizer_steps) == (16, 4)
    assert a.kir_step_reset and a.kir_context == "last_frames"
    assert r.round_scores and r.first_step_baseline == "zero" and r.success_threshold == 0.9
    wan = w.backend == "wan"
    assert (w.noise_seed == 0) is wan and w.bf16_timesteps is wan


@pytest.mark.parametrize("name", ["mw-wan-grpo", "mw-opensora-grpo", "mw-wan-ppo"])
def test_embedded_presets_keep_wmrls_behaviour(name: str) -> None:
    cfg = resolve_config(name)
    a, r, w = cfg.algorithm, cfg.reward_model, cfg.world_model
    assert a.aggregation != "masked_mean_ratio" and not a.filtered_in_denominator
    assert a.filter_band is None and not a.normalize_gae_advantages
    assert (a.rollout_epochs, a.optimizer_steps) == (1, 1)
    assert not a.kir_step_reset and a.kir_context == "pad"
    assert not r.round_scores and r.first_step_baseline == "initial_frame"
    assert w.noise_seed is None and not w.bf16_timesteps


def test_an_empty_filter_band_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="filter_band"):
        resolve_config("wan-goal-grpo", overrides=["algorithm.filter_band=[4.5, 0.5]"])


# -- 12: deliberate differences: rounded frames, posterior-mean reset latents -------------------


def test_decoded_frames_round_to_the_nearest_grey_level(monkeypatch) -> None:
    from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig

    model = WanWorldModel(WanWorldModelConfig.tiny())
    # a decoded value v maps to (v + 1) * 127.5 grey levels: 100.6 -> 101 (RLinf truncates: 100)
    v = 100.6 / 127.5 - 1.0
    decoded = SimpleNamespace(sample=torch.full((1, 3, 1, 2, 2), v))
    monkeypatch.setattr(model.vae, "decode", lambda z: decoded)
    z_dim = model.config.vae["z_dim"]
    frames = model.decode_latents(torch.zeros(1, z_dim, 1, 1, 1))
    assert frames.dtype == torch.uint8 and frames.unique().tolist() == [101]


def test_reset_frames_encode_to_the_posterior_mean() -> None:
    from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

    torch.manual_seed(0)
    model = OpenSoraWorldModel(OpenSoraWorldModelConfig.tiny()).eval()
    frames = torch.randint(0, 256, (1, 2, model.height, model.width, 3), dtype=torch.uint8)
    # RLinf draws latent_dist.sample(): two encodings would differ; the mean is reproducible
    assert torch.equal(model.encode_frames(frames), model.encode_frames(frames))
