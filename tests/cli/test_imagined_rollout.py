"""`wmrl rollout --world-model WM --replay STORE`: imagined episodes labelled with the recorded
success, and `wmrl train-reward` on real and imagined episodes pooled."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.sims import small_sim_config
from wmrl_cli.cli.app import app
from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore, open_stores
from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

runner = CliRunner()
LENGTHS = (10, 12, 7)  # starts every 4 steps: 0, 4, 8 | 0, 4, 8 | 0, 4 (12: no step after it)


def episode(i: int, length: int) -> Episode:
    """64x64 noise (the tiny world model's size); a bright square from step 6 on where the
    episode succeeds (every other one)."""
    rng = np.random.default_rng(i)
    frames = rng.integers(0, 60, (length + 1, 64, 64, 3), dtype=np.uint8)
    success = np.zeros(length, dtype=bool)
    if i % 2 == 0:
        success[5:] = True
        frames[6:, 16:48, 16:48] = 230
    return Episode(
        task_id=i % 2,
        task_name=f"t{i % 2}",
        instruction=f"task {i % 2}",
        seed=7 + i,
        init_id=i,
        frames=frames,
        actions=rng.uniform(-1, 1, (length, 4)).astype(np.float32),
        rewards=rng.uniform(0, 1, length).astype(np.float32),
        success=success,
        chunk_size=4,
        sim_states={t: np.full(3, float(t)) for t in range(0, length + 1, 4)},
        policy="expert",
        suite="mw3",
        perturbed=np.arange(length) % 3 == 0,
    )


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[Path, Path]:
    """(a real store of three episodes, a tiny untrained world model's run directory)."""
    root = tmp_path_factory.mktemp("imagined")
    store = EpisodeStore(root / "real")
    store.add([episode(i, n) for i, n in enumerate(LENGTHS)])
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.action_dim = 4
    config.num_inference_steps = 1
    OpenSoraWorldModel(config).save_pretrained(root / "wm-run" / "world_model")
    return store.root, root / "wm-run"


def imagine(assets, out: Path, *extra: str):
    real, wm = assets
    args = ["rollout", "--world-model", str(wm), "--replay", str(real), "--out", str(out),
            "--num-envs", "3", *extra]  # fmt: skip
    return runner.invoke(app, args)


def test_imagined_store_follows_its_source(assets, tmp_path) -> None:
    real = EpisodeStore.open(assets[0])
    out = tmp_path / "imagined"
    result = imagine(assets, out, "--start-every", "4", "--horizon", "5")
    assert result.exit_code == 0, result.output
    store = EpisodeStore.open(out)
    assert len(store) == 8 and store.imagined and not real.imagined
    assert store.real_steps() == 0  # imagined steps are no simulator steps
    starts = [(m["imagined"]["source_episode"], m["imagined"]["t0"]) for m in store.index]
    # written longest first (a batch rolls as long as its longest start)
    assert sorted(starts) == [(0, 0), (0, 4), (0, 8), (1, 0), (1, 4), (1, 8), (2, 0), (2, 4)]
    for meta, imagined in zip(store.index, store, strict=True):
        info = meta["imagined"]
        assert info["world_model"] == str(assets[1].resolve())
        assert info["source_store"] == str(real.root.resolve())
        source, t0 = real.load(info["source_episode"]), info["t0"]
        steps = min(5, source.length - t0)
        span = slice(t0, t0 + steps)
        assert imagined.length == steps and imagined.frames.shape == (steps + 1, 64, 64, 3)
        assert np.array_equal(imagined.frames[0], source.frames[t0])  # the real start frame
        assert np.array_equal(imagined.success, source.success[span])
        assert np.array_equal(imagined.actions, source.actions[span])
        assert np.array_equal(imagined.rewards, source.rewards[span])
        assert np.array_equal(imagined.perturbed, source.perturbed[span])
        assert imagined.sim_states == {}  # no state it does not have
        same = ("task_id", "task_name", "instruction", "seed", "init_id", "chunk_size", "suite")
        assert all(getattr(imagined, k) == getattr(source, k) for k in same)
    # The default: one episode per source episode, imagined to its end; --append adds to it.
    whole = tmp_path / "whole"
    assert imagine(assets, whole).exit_code == 0
    again = imagine(assets, whole, "--append")
    assert again.exit_code == 0, again.output
    lengths = [m["length"] for m in EpisodeStore.open(whole).index]
    assert sorted(lengths) == sorted([*LENGTHS, *LENGTHS])


def test_imagined_store_refuses_simulator_uses(assets, tmp_path) -> None:
    from wmrl_cli.evaluation.reliability import evaluate_world_model
    from wmrl_cli.jobs.inputs import load_reset_set

    out = tmp_path / "imagined"
    assert imagine(assets, out, "--horizon", "4").exit_code == 0
    store = EpisodeStore.open(out)
    with pytest.raises(WmrlError, match="no simulator states to start a reset set from"):
        load_reset_set(RunConfig(), out)
    with pytest.raises(WmrlError, match="no simulator states to replay"):
        evaluate_world_model(None, None, store, [0], small_sim_config(), progress=False)
    # Real and imagined episodes never share a store; nor is an imagined store a source.
    mixed = imagine(assets, assets[0], "--append")
    assert mixed.exit_code == 1 and "holds real episodes" in mixed.output
    source = runner.invoke(app, ["rollout", "--world-model", str(assets[1]), "--replay",
                                 str(out), "--out", str(tmp_path / "twice")])  # fmt: skip
    assert source.exit_code == 2 and "holds imagined episodes" in source.output


def test_train_reward_on_real_and_imagined(assets, tmp_path) -> None:
    out = tmp_path / "imagined"
    assert imagine(assets, out, "--start-every", "4").exit_code == 0
    run = tmp_path / "rm"
    args = ["train-reward", "--data", str(assets[0]), "--data", str(out), "--out", str(run),
            "--steps", "4", "--width", "4", "--set", "reward_model.batch_size=8",
            "--set", "reward_model.val_fraction=0.3"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads((run / "reward_model" / "reward_metrics.json").read_text())
    assert metrics["data"] == [str(assets[0]), str(out)]
    pooled = open_stores([assets[0], out])
    frames = sum(len(e.frames) for e in pooled)
    assert metrics["train_frames"] + metrics["val_frames"] == frames
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert {row["env/real_steps"] for row in rows} == {sum(LENGTHS)}  # the real store's only
    record = json.loads((run / "run.json").read_text())
    assert {"data", "data2"} <= set(record["inputs"])


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--world-model", "{wm}"], "add --replay STORE", 2),
        (["--replay", "{real}"], "add --world-model WM", 2),
        (["--world-model", "{wm}", "--replay", "{empty}"], "no episode with frames", 2),
        (["--world-model", "{wm}", "--replay", "{real}", "--horizon", "0"], "at least 1 step", 2),
        (["--world-model", "{wm}", "--replay", "{real}", "--start-every", "-1"], "0 (the", 2),
        (["--world-model", "{wm}", "--replay", "{real}", "--policy", "random"],
         "drop --policy", 2),
        (["--horizon", "4", "--policy", "random"], "apply only with --world-model", 2),
        (["--world-model", "{tmp}/nope", "--replay", "{real}"], "no such world model", 2),
        (["--world-model", "{wm}", "--replay", "{tmp}"], "not an episode store", 1),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(args, message, code, assets, tmp_path) -> None:
    empty = EpisodeStore(tmp_path / "empty")
    empty.add([])
    values = dict(wm=assets[1], real=assets[0], empty=empty.root, tmp=tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["rollout", *(a.format(**values) for a in args), "-o", str(out)])
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert not out.exists()


def test_threshold_from_policy_episodes(tmp_path) -> None:
    """With held-out policy episodes labelled by the simulator, the threshold separates their
    highest scores by real outcome (the imagined env's verdict); other episodes and the real
    start frames do not count. Without them: None (the frame-level threshold stays)."""
    from wmrl_cli.evaluation.reward_eval import labelled_frames
    from wmrl_cli.training.reward_trainer import policy_episode_metrics

    def labelled(i: int, succeeded: bool) -> Episode:
        e = episode(i, 4)
        e.success = np.array([False, False, succeeded, succeeded])
        e.sim_states = {}
        e.imagined = {"world_model": "wm", "policy": "p", "reset_set": "r", "labels": "simulator"}
        return e

    store = EpisodeStore(tmp_path / "pool")
    store.add([labelled(0, True), labelled(1, False), labelled(2, True), labelled(3, False)])
    val = labelled_frames(store, [0, 1, 2, 3])
    # per episode 5 frames: the start frame scores 0.99 everywhere (ignored); the failed
    # episodes peak at 0.6 / 0.7 on frames the success flags call negative, the successes at
    # 0.8 / 0.9: frame-level best F1 would cut elsewhere than the episode-level one.
    scores = np.array(
        [0.99, 0.1, 0.2, 0.8, 0.3] + [0.99, 0.6, 0.1, 0.1, 0.1]
        + [0.99, 0.1, 0.1, 0.9, 0.2] + [0.99, 0.7, 0.7, 0.7, 0.7],
        dtype=np.float32,
    )  # fmt: skip
    best = policy_episode_metrics(store, val, scores)
    assert best is not None and 0.7 < best.threshold < 0.8
    assert (best.precision, best.recall) == (1.0, 1.0)
    # Held for 2 frames (reward_model.success_frames), the failure at 0.7 throughout outranks
    # both successes' single high frames: the threshold follows the rule RL will use.
    held = policy_episode_metrics(store, val, scores, success_frames=2)
    assert held is not None and 0.1 < held.threshold <= 0.2
    assert held.precision == pytest.approx(2 / 3) and held.recall == 1.0

    real = EpisodeStore(tmp_path / "real")
    real.add([episode(i, 4) for i in range(4)])
    assert policy_episode_metrics(real, labelled_frames(real, [0, 1, 2, 3]), scores) is None
