"""World-model reliability: success agreement arithmetic, the full report on real expert
episodes with tiny untrained models, and `wmrl eval --world-model`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from tests.helpers.sims import small_sim_config
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.kir import Keyframe
from wmrl_cli.data.reset_set import reset_set_from_store
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.reliability import (
    evaluate_world_model,
    imagined_successes,
    start_points,
    success_agreement,
)
from wmrl_cli.evaluation.simulator_replay import replay_sim_config
from wmrl_cli.jobs.check_models import episodes_per_task
from wmrl_cli.rewards.calibration import binary_metrics, held_success
from wmrl_cli.rewards.loading import save_reward_model
from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

runner = CliRunner()
SIM = dict(image_size=64, num_envs=2, max_steps=80)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> EpisodeStore:
    """Expert episodes at 64x64: door-open (fails within 80 steps), drawer-close (succeeds at
    step 78, so the KIR keyframes just before it replay to real successes)."""
    from wmrl_cli.envs.runner import iter_episodes
    from wmrl_cli.sims.experts import ExpertPolicy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    cfg = small_sim_config(**SIM)
    with MetaWorldSim(cfg) as sim:
        episodes = list(
            iter_episodes(
                sim,
                ExpertPolicy(sim.suite),
                [0, 2],
                chunk_size=cfg.chunk_size,
                seed_of=lambda i: cfg.seed + i,
                suite=cfg.suite,
            )
        )
    root = tmp_path_factory.mktemp("store")
    out = EpisodeStore(root)
    out.add(episodes)
    (root / "config.yaml").write_text("simulator:\n  camera: corner\n  max_steps: 80\n")
    return out


@pytest.fixture(scope="module")
def models() -> tuple[OpenSoraWorldModel, torch.nn.Module]:
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.action_dim = 4
    config.num_inference_steps = 2
    return OpenSoraWorldModel(config).eval(), build_resnet_reward_model(ResnetRewConfig(width=4))


@pytest.fixture(scope="module")
def report(store, models):
    wm, rm = models
    # Threshold 0: every imagined rollout succeeds, so the confusion counts are known from the
    # simulator alone (TP = real successes, FN = 0).
    return evaluate_world_model(
        wm, rm, store, [0, 1], small_sim_config(**{**SIM, "max_steps": 10}), horizon=16,
        threshold=0.0, progress=False, speed_chunks=1,
    )  # fmt: skip


def test_success_agreement_arithmetic() -> None:
    imagined = [True, True, True, False, False, False, False, True]
    real = [True, False, True, True, False, False, False, False]
    a = success_agreement(imagined, real)
    assert (a.tp, a.fp, a.fn, a.tn) == (2, 2, 1, 3) and a.total == 8
    assert a.precision == pytest.approx(0.5) and a.recall == pytest.approx(2 / 3)
    assert a.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert a.accuracy == pytest.approx(5 / 8) and a.hallucination_rate == pytest.approx(0.5)
    # Undefined rates are None, not 0: no imagined success, then no success at all.
    never = success_agreement([False, False], [True, False])
    assert never.precision is None and never.hallucination_rate is None and never.f1 is None
    assert never.recall == 0.0 and never.fn == 1
    empty = success_agreement([False], [False])
    assert empty.recall is None and empty.accuracy == 1.0
    with pytest.raises(ValueError):
        success_agreement([True], [True, False])


class _ScriptedEnv:
    """An imagined env whose judge scores frame t of env b as `scores[b, t]`, calling success
    under the held rule and ending the episode at its call, as ImaginedEnv does."""

    def __init__(self, scores: np.ndarray, success_frames: int) -> None:
        self.scores, self.success_frames = scores, success_frames

    def reset(self, entry_ids) -> None:
        self.t, self.run = 0, np.zeros(len(self.scores), dtype=np.int64)
        self.ended = np.zeros(len(self.scores), dtype=bool)

    def chunk_step(self, actions: np.ndarray):
        chunk = actions.shape[1]
        scores = self.scores[:, self.t : self.t + chunk]
        calls, self.run = held_success(scores, 0.5, self.success_frames, self.run)
        valid = ~self.ended[:, None] & (np.cumsum(calls, axis=1) - calls == 0)
        self.ended |= calls.any(axis=1)
        self.t += chunk
        ended = np.broadcast_to(self.ended[:, None], calls.shape)
        return SimpleNamespace(success=calls & valid, terminated=ended, truncated=ended & False,
                               info={"scores": scores, "valid": valid})  # fmt: skip


def test_a_held_call_begun_in_the_compared_span_may_end_after_it() -> None:
    """success_frames=4 over a one-chunk span: a run that begins at step 6 of 8 (a recording
    that ends at the real success) is called, at step 9; one that begins at step 8 is not."""
    scores = np.zeros((2, 16))
    scores[0, 6:] = 1.0
    scores[1, 8:] = 1.0
    env = _ScriptedEnv(scores, success_frames=4)
    masks = np.arange(16)[None].repeat(2, 0) < 8
    called, score = imagined_successes(env, [0, 1], np.zeros((2, 16, 4)), masks, 8)
    assert called.tolist() == [True, False] and score.tolist() == [1.0, 0.0]
    # One chunk of actions only (the span itself): no frame left to hold the run.
    called, _ = imagined_successes(env, [0, 1], np.zeros((2, 8, 4)), masks[:, :8], 8)
    assert called.tolist() == [False, False]


def test_start_points_follow_chunks_and_kir(store) -> None:
    episodes = {i: store.load(i) for i in (0, 1)}
    starts = start_points(episodes, chunk_starts=(0, 2), keyframes=True)
    by_episode = {i: {s.step: s.kind for s in starts if s.episode_id == i} for i in (0, 1)}
    assert by_episode[0][0] == "start" and by_episode[0][16] == "chunk"
    # drawer-close succeeds at step 78, in chunk 9: KIR keyframes at 72, 64 and 48.
    assert episodes[1].success_step == 78
    assert {72: "before_success", 64: "before_success", 48: "before_success"}.items() <= (
        by_episode[1].items()
    )
    assert all(s.step % 8 == 0 and s.step < episodes[s.episode_id].length for s in starts)
    assert start_points(episodes, chunk_starts=(99,), keyframes=False) == []


def test_replay_config_from_store(store) -> None:
    cfg = replay_sim_config(store, [store.load(0)], small_sim_config(image_size=32, max_steps=5))
    assert (cfg.suite, cfg.image_size, cfg.max_steps, cfg.camera) == ("mw3", 64, 80, "corner")


# The report fixture evaluates a world model in the simulator (about 40 s on a 2-core CPU): its
# two tests are slow since the suite neared its 15 minutes (2026-11-28); `eval --world-model`
# end to end stays in CI (test_cli_world_model_eval)
@pytest.mark.slow
def test_report_fields_agreement_and_speed(report, store) -> None:
    assert report.episodes == 2 and report.horizon == 16 and report.chunk_size == 8
    assert len(report.open_loop.psnr) == 16 and np.isfinite(report.open_loop.copy_psnr).all()
    assert report.threshold == 0.0 and report.threshold_source == "given"
    # The replay from stored states reproduces the recording; drawer-close succeeds from the
    # keyframes within 16 steps of its success, never from the episode start.
    assert report.replay_mismatches == 0
    real = {(s.episode_id, s.step): s.real_success for s in report.starts}
    assert real[(1, 72)] and real[(1, 64)] and not real[(1, 48)] and not real[(0, 0)]
    a = report.agreement
    n_real = sum(real.values())
    assert (a.tp, a.fp, a.fn, a.tn) == (n_real, len(real) - n_real, 0, 0)
    assert a.recall == 1.0 and a.precision == pytest.approx(n_real / len(real))
    # The best-F1 threshold on the imagined scores reproduces its own confusion counts.
    cal = report.imagined_calibration
    scores = [s.max_score for s in report.starts]
    assert cal == binary_metrics(scores, list(real.values()), cal.threshold)
    assert cal.f1 >= a.f1
    # Its out-of-sample version needs a success in every fold's fitting half: episode 0 never
    # succeeds, so the half that fits on it alone has none and there is no such row.
    assert report.imagined_calibration_cv is None
    assert report.to_dict()["imagined_calibration_cv"] is None
    assert len(report.open_loop.other_actions_psnr) == 16
    # At threshold 0 the reward model also "detects" success on every replay of real frames;
    # its per-start scores are the simulator frames' (in [0, 1]), not the imagined ones.
    r = report.reward_on_real
    assert (r.tp, r.fp, r.fn, r.tn) == (a.tp, a.fp, a.fn, a.tn)
    assert all(0.0 <= s.real_max_score <= 1.0 for s in report.starts)
    assert [s.real_max_score for s in report.starts] != scores
    assert {"before_success", "start"} <= set(report.agreement_by_kind)
    assert all(s.steps == min(16, store.load(s.episode_id).length - s.step) for s in report.starts)
    sp = report.speed
    assert sp.num_envs == 2 and sp.image_size == 64 and sp.chunk_size == 8
    assert sp.world_model_fps > 0 and sp.real_fps > 0 and sp.imagined_env_fps > 0
    assert sp.ratio == pytest.approx(sp.world_model_fps / sp.real_fps)
    hand = report.hand_tracking  # read by a regressor trained on the other episode's frames
    assert hand.episodes == 2 and len(hand.error_cm) == len(hand.floor_cm) == 16
    assert np.isfinite(hand.error_cm + hand.other_error_cm + hand.floor_cm).all()


def test_replay_reports_the_hand_where_the_actions_move_it(store) -> None:
    from wmrl_cli.evaluation.simulator_replay import SimulatorReplay

    episodes = [store.load(0), store.load(1)]
    replay = SimulatorReplay(replay_sim_config(store, episodes, small_sim_config(**SIM)), 2)
    try:
        push = np.zeros((2, 8, 4), np.float32)
        push[..., 0] = 1.0  # +x at full speed for a chunk
        frames, hands = replay.states(episodes, push)
        again = replay(episodes, push)
    finally:
        replay.close()
    assert frames.shape[:2] == hands.shape[:2] == (2, 9) and hands.shape[2] == 3
    assert np.array_equal(frames, again)
    assert (hands[:, 8, 0] - hands[:, 0, 0] > 0.03).all()  # metres: the hand moved along +x
    assert np.abs(hands[:, 8, 1:] - hands[:, 0, 1:]).max() < 0.02


@pytest.mark.slow
def test_report_renders_and_serializes(report, tmp_path) -> None:
    body = json.loads(report.to_json())
    assert "videos" not in body["open_loop"] and body["replay_mismatches"] == 0
    assert body["speed"]["ratio"] > 0 and body["agreement"]["hallucination_rate"] is not None
    assert report.videos is not None and report.videos.shape[-1] == 3
    console = Console(record=True, width=120)
    console.print(report.table())
    text = console.export_text()
    assert "open-loop fidelity" in text and "frames/s" in text and "halluc." in text
    assert "controllability" in text and "gap shuffled" in text
    assert set(body["open_loop"]["alternative_psnr"]) == {"other", "shuffled", "random"}
    # per episode, for pairing two world models evaluated on the same episodes
    per_episode = body["open_loop"]["per_episode"]
    assert len(per_episode["psnr@1"]) == report.open_loop.episodes
    assert {"action_gap@1", "action_gap_shuffled@1", "action_gap_random@1"} <= set(per_episode)
    # the response ratio comes from replaying the other actions in the simulator
    assert len(body["open_loop"]["response_ratio"]) == report.horizon
    report.save(tmp_path, save_video=True)
    assert (tmp_path / "videos" / "open_loop_truth_vs_model.mp4").stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# World-model reliability") and md.count("## ") == 6
    assert "hand tracking (cm)" in md and body["hand_tracking"]["horizon"] == report.horizon
    assert json.loads((tmp_path / "report.json").read_text()) == body


def test_episodes_per_task(store) -> None:
    assert episodes_per_task(store, None) == [0, 1] and episodes_per_task(store, 1) == [0, 1]


def test_reset_entries_match_reset_set(store) -> None:
    """The imagined rollouts start from exactly what the RL reset set would hold."""
    from wmrl_cli.evaluation.reliability import _attach_entries

    starts = start_points({1: store.load(1)}, chunk_starts=(0,), keyframes=True)
    _attach_entries(store, starts, context=4)
    expected = reset_set_from_store(store, [1], [Keyframe(1, s.step, "") for s in starts[1:]])
    for start, entry in zip(starts, expected):
        assert start.entry.step == entry.step == start.step
        assert np.array_equal(start.entry.context, entry.context)
        assert np.array_equal(start.entry.sim_state, store.load(1).sim_states[start.step])


def _tiny_policy_dir(store: EpisodeStore, root) -> str:
    from wmrl_cli.policies.checkpoint import save_pretrained
    from wmrl_cli.policies.config import tiny_config
    from wmrl_cli.policies.normalization import compute_statistics
    from wmrl_cli.policies.openvla_oft import OpenVLAOFT
    from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

    torch.manual_seed(0)
    tok = build_word_tokenizer([m["instruction"] for m in store.index])
    cfg = tiny_config(len(tok), action_dim=4, llm_layers=1, vision_layers=1)
    acts = np.random.default_rng(0).uniform(-1, 1, size=(100, 4))
    stats = {"mw": compute_statistics(acts, mask=[True] * 3 + [False])}
    cfg.unnorm_key = "mw"
    save_pretrained(OpenVLAOFT(cfg, tok, stats).eval(), root)
    return str(root)


def test_cli_world_model_eval(store, models, tmp_path) -> None:
    wm, rm = models
    wm.save_pretrained(tmp_path / "wm-run" / "world_model")
    save_reward_model(rm, tmp_path / "rm-run" / "reward_model")
    small = EpisodeStore(tmp_path / "store")  # one episode keeps the command quick
    small.add([store.load(1)])
    out = tmp_path / "eval"
    args = ["eval", "--world-model", str(tmp_path / "wm-run"), "--reward-model",
            str(tmp_path / "rm-run"), "--data", str(small.root), "--horizon", "8",
            "--num-envs", "2", "--num-workers", "0", "-o", str(out),
            "--policy", _tiny_policy_dir(store, tmp_path / "policy")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    body = json.loads((out / "report.json").read_text())
    assert body["horizon"] == 8 and body["episodes"] == 1 and body["replay_mismatches"] == 0
    # --policy: the policy's KL between the real and the imagined frame at the chunk boundary
    shift = body["policy_shift"]
    assert shift["steps"] == [8] and shift["kl"]["imagined"][0] >= 0
    assert "policy shift" in result.output
    # An uncalibrated reward model: RL's default threshold (RLinf's), and the report says so.
    assert body["threshold"] == 0.9 and body["threshold_source"].startswith("RLinf's default")
    assert (out / "report.md").is_file() and "frames/s" in result.output
    # Per task, the starts are those of the task, counted at the threshold RL would use.
    by_task = body["agreement_by_task"]
    counts = {task: a["tp"] + a["fp"] + a["fn"] + a["tn"] for task, a in by_task["tasks"].items()}
    assert counts == {body["starts"][0]["task"]: len(body["starts"])}
    assert "success per task" in (out / "report.md").read_text()
    # Each phase says when it starts and counts episodes (its first line came after minutes,
    # per batch), and the command ends on what it wrote and where.
    for phase in ("open-loop rollouts (episodes)", "policy shift (episodes)"):
        assert f"{phase}: 0/1" in result.output and f"{phase}: 1/1" in result.output
    assert "imagined rollouts (starts): 0/" in result.output
    assert (
        result.output.rstrip().splitlines()[-1] == f"done: report (report.md, report.json) in {out}"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-model", "{tmp}/nope", "--reward-model", "{tmp}", "--data", "{tmp}"],
         "no such world model"),
        (["--world-model", "{tmp}", "--reward-model", "{tmp}"], "needs --data"),
        (["--world-model", "{tmp}", "--data", "{tmp}"], "needs --reward-model"),
        (["--data", "{tmp}"], "applies only with --world-model or --reward-model"),
        (["--reward-model", "{tmp}"], "--reward-model needs --data"),
        (["--world-model", "{tmp}", "--reward-model", "{tmp}/nope.pth", "--data", "{store}"],
         "no such reward model"),
        (["--world-model", "{tmp}", "--reward-model", "{tmp}", "--data", "{tmp}"],
         "not an episode store"),
        (["--world-model", "{tmp}", "--reward-model", "{tmp}", "--data", "{store}",
          "--policy", "expert"], "needs a learned policy"),
        (["--world-model", "{tmp}", "--reward-model", "{tmp}", "--data", "{store}",
          "--policy", "{tmp}/nope", "--horizon", "4"], "at least one chunk"),
    ],
)  # fmt: skip
def test_cli_one_line_errors(args, message, store, tmp_path) -> None:
    filled = [a.format(tmp=tmp_path, store=store.root) for a in args]
    result = runner.invoke(app, ["eval", *filled, "-o", str(tmp_path / "run")])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not (tmp_path / "run").exists()


def test_imagination_loads_sample_as_rl_does(monkeypatch, tmp_path) -> None:
    """RL, `eval --world-model`, co-evolve's check and imagined rollouts load the world model
    through one function, so a threshold the check calibrates is calibrated on frames sampled
    as RL samples them (the RL presets: 2 steps; a saved model: 10)."""
    from types import SimpleNamespace

    from wmrl_cli.config import RunConfig
    from wmrl_cli.world_models import loading

    class Loaded(torch.nn.Module):
        def __init__(self, null_action: bool = True) -> None:
            super().__init__()
            self.config = SimpleNamespace(
                num_inference_steps=10,
                action_guidance=1.5,
                transformer=SimpleNamespace(null_action=null_action),
            )

    monkeypatch.setattr(loading, "load_any_world_model", lambda *a: Loaded())
    cfg = RunConfig.model_validate(
        {"world_model": {"num_inference_steps": 2, "action_guidance": 3.0}}
    )
    model = loading.load_imagining_world_model(tmp_path, 64, 64, cfg, "cpu")
    assert model.config.num_inference_steps == 2 and model.config.action_guidance == 3.0
    default = loading.load_imagining_world_model(tmp_path, 64, 64, RunConfig(), "cpu")
    # the model's own when the run sets none
    assert default.config.num_inference_steps == 10 and default.config.action_guidance == 1.5
    # guidance needs the null action that action dropout trains: refused in one line
    monkeypatch.setattr(loading, "load_any_world_model", lambda *a: Loaded(null_action=False))
    with pytest.raises(WmrlError, match="null action"):
        loading.load_imagining_world_model(tmp_path, 64, 64, cfg, "cpu")
    unguided = RunConfig.model_validate({"world_model": {"action_guidance": 1.0}})
    assert loading.load_imagining_world_model(tmp_path, 64, 64, unguided, "cpu")
