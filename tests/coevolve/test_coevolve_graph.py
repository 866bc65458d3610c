"""co_evolve's stage graph (coevolve/pipeline.py) with every task replaced by a recorder: which
stages run, on which world and reward models, for `coevolve.refine_reward_model` and the frozen
control; and options added after a run was recorded keep its fingerprints
(coevolve/stage_cache.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import wmrl_cli.coevolve.pipeline as pipeline
import wmrl_cli.coevolve.run_state as run_state
from wmrl_cli.coevolve.stage_cache import ADDED_OPTIONS, READS, STAGES_FILE, StageCache
from wmrl_cli.config import resolve_config
from wmrl_cli.run_dirs import config_values


def patch(monkeypatch, name: str, value: Any) -> None:
    """Replace a stage's function (stages.py) where the stage graph (pipeline.py) or the run's
    helpers (run_state.py) call it."""
    modules = [module for module in (pipeline, run_state) if hasattr(module, name)]
    assert modules, name
    for module in modules:
        monkeypatch.setattr(module, name, value)


@pytest.fixture
def recorded(monkeypatch) -> list[tuple]:
    """The tasks co_evolve calls, as (task, its arguments that name models and data)."""
    import wmrl_cli.coevolve.report as coevolve_report
    import wmrl_cli.jobs.sft as sft

    calls: list[tuple] = []

    def made(path: Path) -> str:
        Path(path).mkdir(parents=True, exist_ok=True)
        return str(path)

    def train_rm(cfg, data, out, steps, init=None, imagined=None, labelled=None, real=None):
        calls.append(("train_rm", Path(out).name, imagined is not None))
        if labelled is not None:
            calls.append(("labelled_by", Path(out).name, Path(labelled).name))
        if real is not None:
            calls.append(("real_for", Path(out).name, Path(real).name))
        return {"path": made(Path(out) / "reward_model"), "f1": 0.5}

    def collect(cfg, out, policy, per_task, seed, perturbed=True) -> str:
        calls.append(("collect", Path(out).name, Path(policy).name, perturbed))
        return made(out)

    def imagine_policy(cfg, policy, wm, reset_set, out, seed) -> str:
        calls.append(("imagine_policy", Path(out).name, Path(policy).parent.name,
                      Path(wm).parent.name, Path(reset_set).name))  # fmt: skip
        return made(out)

    def rl(
        cfg, out, policy, wm, rm_path, data, real_steps, threshold=None, tasks=None, ranks=1,
        bc_data=None,
    ) -> str:  # fmt: skip
        calls.append(("rl", Path(out).name, Path(wm).parent.name, Path(rm_path).parent.name))
        if tasks is not None:
            calls.append(("train_tasks", Path(out).name, tuple(tasks)))
        if bc_data is not None:
            calls.append(("bc_data", Path(out).name, bc_data))
        if ranks != 1:
            calls.append(("ranks", Path(out).name, ranks))
        return made(Path(out) / "policy")

    def simulator_rl(cfg, out, policy, steps, ranks=1) -> str:
        calls.append(("simulator_rl", Path(out).name, Path(policy).parent.name, steps))
        if ranks != 1:
            calls.append(("ranks", Path(out).name, ranks))
        return made(Path(out) / "policy")

    def train_wm(cfg, data, out, init, steps, ranks=1) -> str:
        calls.append(("wm_data", Path(out).name, Path(data).name))
        if ranks != 1:
            calls.append(("ranks", Path(out).name, ranks))
        return made(Path(out) / "world_model")

    def check(cfg, out, wm, rm_path, data) -> dict[str, Any]:
        calls.append(("check", Path(out).name, Path(wm).parent.name, Path(rm_path).parent.name))
        return {"rl_threshold": None, "real_steps": 0}

    monkeypatch.setattr(sft, "collect_demos", lambda cfg, out: made(Path(out) / "demos"))
    monkeypatch.setattr(sft, "train_bc", lambda cfg, out, demos: made(Path(out) / "policy"))
    fakes = {
        "collect": collect,
        "merge": lambda stores, out, cfg: made(out),
        "train_wm": train_wm,
        "imagine": lambda cfg, wm, data, out: made(out),
        "train_rm": train_rm,
        "imagine_policy": imagine_policy,
        "rl": rl,
        "simulator_rl": simulator_rl,
        "gate_check": check,
        "enforce_gate": lambda *a: None,
        "evaluate": lambda cfg, policy, out, videos: {"overall": 0.5},
        "wm_reliability": lambda wm: {},
        **{counter: lambda _: 0 for counter in ("store_steps", "eval_steps", "rl_steps")},
    }
    for name, fake in fakes.items():
        patch(monkeypatch, name, fake)
    monkeypatch.setattr(coevolve_report, "write_report", lambda *a, **k: {})
    return calls


def _config(**coevolve: Any):
    cfg = resolve_config("mw-coevolve-smoke")
    cfg.coevolve.check_episodes = 10
    cfg.coevolve.reward_imagined_start_every = 16
    # One refinement taken as it is (the smoke profile's acceptance: its own test below), and
    # no per-task trust, at the schema's floor where a test turns it on (the tests at the end).
    cfg.coevolve.refine_candidates, cfg.coevolve.accept_audit_per_task = 1, 0
    cfg.coevolve.trust_audit_per_task, cfg.coevolve.trust_precision_floor = 0, 0.5
    for key, value in coevolve.items():
        setattr(cfg.coevolve, key, value)
    return cfg


@pytest.mark.parametrize("start", ["sft", "given"])
def test_every_training_stage_trains_on_the_ranks_asked_for(tmp_path, recorded, start) -> None:
    cfg = _config(frozen_control=True, simulator_control=True)
    if start == "given":
        cfg.coevolve.start = "given"
        cfg.policy.name, cfg.world_model.path = "policy", str(tmp_path / "wm")
        cfg.reward_model.path, cfg.world_model.reset_set = str(tmp_path / "rm"), "starts"
    pipeline.co_evolve(cfg, tmp_path / "run", ranks=3)
    ranks = [c[1:] for c in recorded if c[0] == "ranks"]
    first = [("wm_base", 3)] if start == "sft" else []  # the given start's is given
    assert ranks == [
        *first,
        ("stage1", 3),
        ("wm_evo1", 3),
        ("stage2", 3),
        ("frozen_control", 3),
        ("simulator_control", 3),
    ]


def test_each_refinement_can_retrain_the_judge(tmp_path, recorded) -> None:
    pipeline.co_evolve(_config(frozen_control=True, refine_reward_model=True), tmp_path)
    assert [c for c in recorded if c[0] == "train_rm"] == [
        ("train_rm", "rm_base", True),
        ("train_rm", "rm_evo1", True),
    ]
    assert [c for c in recorded if c[0] == "rl"] == [
        ("rl", "stage1", "wm_base", "rm_base"),
        ("rl", "stage2", "wm_evo1", "rm_evo1"),
        ("rl", "frozen_control", "wm_base", "rm_base"),
    ]
    assert ("check", "wm_evo1", "wm_evo1", "rm_evo1") in recorded


def test_without_refine_reward_model_the_last_judge_judges_stage_2(tmp_path, recorded) -> None:
    pipeline.co_evolve(_config(frozen_control=True, refine_reward_model=False), tmp_path)
    assert [c for c in recorded if c[0] == "train_rm"] == [("train_rm", "rm_base", True)]
    assert [c for c in recorded if c[0] == "rl"] == [
        ("rl", "stage1", "wm_base", "rm_base"),
        ("rl", "stage2", "wm_evo1", "rm_base"),
        ("rl", "frozen_control", "wm_base", "rm_base"),
    ]
    assert ("check", "wm_evo1", "wm_evo1", "rm_base") in recorded
    stages = json.loads((tmp_path / STAGES_FILE).read_text())
    assert "refine_rm1" not in stages and "imagined_evo1" not in stages
    assert not (tmp_path / "rm_evo1").exists()


def test_the_simulator_control_runs_the_same_rl_from_the_base_for_every_imagined_step(
    tmp_path, recorded
) -> None:
    cfg = _config(simulator_control=True, refinements=2)
    pipeline.co_evolve(cfg, tmp_path)
    steps = 3 * cfg.training.steps  # stage 1 and two refined stages
    assert [c for c in recorded if c[0] == "simulator_rl"] == [
        ("simulator_rl", "simulator_control", "sft", steps)
    ]
    stages = json.loads((tmp_path / STAGES_FILE).read_text())
    assert {"simulator_control", "eval_simulator_control"} <= set(stages)
    # Its real steps are not data the method collected: later RL stages do not count them.
    stages["simulator_control"]["real_steps"] = 10**6
    (tmp_path / STAGES_FILE).write_text(json.dumps(stages))
    assert StageCache(tmp_path, 0, cfg).data_steps() < 10**6
    # Nor the base policy's demonstrations: the control starts from that base too.
    before = StageCache(tmp_path, 0, cfg).data_steps()
    stages["sft"]["real_steps"] += 10**6
    (tmp_path / STAGES_FILE).write_text(json.dumps(stages))
    assert StageCache(tmp_path, 0, cfg).data_steps() == before
    recorded.clear()
    pipeline.co_evolve(_config(simulator_control=False, refinements=2), tmp_path)
    assert not [c for c in recorded if c[0] == "simulator_rl"]


def test_switching_the_judge_reruns_stage_2_and_keeps_stage_1(
    tmp_path, recorded, monkeypatch
) -> None:
    import wmrl_cli.coevolve.report as coevolve_report

    pipeline.co_evolve(_config(refine_reward_model=True), tmp_path)
    recorded.clear()
    reported = {}
    monkeypatch.setattr(
        coevolve_report, "write_report", lambda *a, **k: reported.update(walls=a[5]) or {}
    )
    pipeline.co_evolve(_config(refine_reward_model=False), tmp_path)
    # Only what the judge reaches runs again: the refined world model's check and stage 2.
    assert recorded == [
        ("check", "wm_evo1", "wm_evo1", "rm_base"),
        ("rl", "stage2", "wm_evo1", "rm_base"),
    ]
    # The first configuration's refined judge is still recorded, but not reported as a stage.
    assert "refine_rm1" in json.loads((tmp_path / STAGES_FILE).read_text())
    assert "refine_rm1" not in reported["walls"] and "stage2" in reported["walls"]


def test_the_judge_learns_from_the_policys_labelled_imagined_episodes(tmp_path, recorded) -> None:
    """Each reward model also learns from the episodes of the policy its RL stage starts from,
    imagined in the world model that stage uses, from that stage's starts."""
    cfg = _config(refine_reward_model=True, reward_policy_rollouts_per_task=3)
    pipeline.co_evolve(cfg, tmp_path)
    assert [c for c in recorded if c[0] in ("imagine_policy", "labelled_by")] == [
        ("imagine_policy", "labelled_base", "sft", "wm_base", "base_merged"),
        ("labelled_by", "rm_base", "labelled_base"),
        ("imagine_policy", "labelled_evo1", "stage1", "wm_evo1", "merged1"),
        ("labelled_by", "rm_evo1", "labelled_evo1"),
    ]
    # Off (the schema's default): no such stage.
    recorded.clear()
    off = _config(refine_reward_model=True, reward_policy_rollouts_per_task=0)
    pipeline.co_evolve(off, tmp_path / "off")
    assert not [c for c in recorded if c[0] in ("imagine_policy", "labelled_by")]


def test_every_judge_learns_from_the_stage_1_policys_real_rollouts(tmp_path, recorded) -> None:
    """One unperturbed real collection of the base policy, shared by every reward model."""
    cfg = _config(refine_reward_model=True, reward_real_rollouts_per_task=2)
    pipeline.co_evolve(cfg, tmp_path)
    collected = [c for c in recorded if c[0] == "collect"]
    assert collected == [
        ("collect", "base", "policy", True),
        ("collect", "reward_real", "policy", False),
        ("collect", "evolved1", "policy", True),
    ]
    assert [c for c in recorded if c[0] == "real_for"] == [
        ("real_for", "rm_base", "reward_real"),
        ("real_for", "rm_evo1", "reward_real"),
    ]
    # Changing how many reruns the collection and the judges built on it, not the world model.
    recorded.clear()
    pipeline.co_evolve(_config(refine_reward_model=True, reward_real_rollouts_per_task=3), tmp_path)
    reran = [c[:2] for c in recorded if c[0] in ("collect", "train_rm", "rl")]
    assert ("collect", "reward_real") in reran and ("train_rm", "rm_base") in reran
    assert ("collect", "base") not in reran
    # Off (the schema's default): no such stage.
    recorded.clear()
    pipeline.co_evolve(
        _config(refine_reward_model=True, reward_real_rollouts_per_task=0), tmp_path / "off"
    )
    assert not [c for c in recorded if c[0] == "real_for"]
    assert ("collect", "reward_real", "policy", False) not in recorded


def test_the_first_world_model_can_learn_from_the_judges_real_rollouts(tmp_path, recorded) -> None:
    """world_model_on_reward_real: the first world model trains on base_merged with the
    judge's real rollouts; RL's starts and the judge's data are still base_merged. Turning it
    on reruns the world model and what is built on it, not the data."""
    cfg = _config(reward_real_rollouts_per_task=2)
    pipeline.co_evolve(cfg, tmp_path)
    assert [c for c in recorded if c[0] == "wm_data"][0] == ("wm_data", "wm_base", "base_merged")
    recorded.clear()
    pipeline.co_evolve(_config(reward_real_rollouts_per_task=2, world_model_on_reward_real=True),
                       tmp_path)  # fmt: skip
    assert [c for c in recorded if c[0] == "wm_data"][0] == ("wm_data", "wm_base", "wm_merged")
    collected = [c[1] for c in recorded if c[0] == "collect"]
    assert "base" not in collected and "reward_real" not in collected  # the data is kept
    assert ("imagine_policy", "labelled_base", "sft", "wm_base", "base_merged") in recorded
    assert ("rl", "stage1", "wm_base", "rm_base") in recorded
    stages = json.loads((tmp_path / STAGES_FILE).read_text())
    assert stages["merge_wm"]["result"] == str(tmp_path / "data" / "wm_merged")


def test_the_closed_loop_floor_leaves_out_the_tasks_the_world_models_loop_loses(
    tmp_path, recorded, monkeypatch
) -> None:
    """closed_loop_floor: stage 1 trains on the tasks where the base acting in the world model
    (labelled_base) succeeds at least floor times as often as in its real rollouts
    (reward_real); the stage reruns when either store does."""
    import wmrl_cli.coevolve.run_state as run_state

    counts = {
        "labelled_base": {"door-open": (4, 25), "drawer-close": (1, 25), "plate-slide": (0, 25)},
        "reward_real": {"door-open": (13, 20), "drawer-close": (3, 20), "plate-slide": (0, 20)},
    }
    monkeypatch.setattr(run_state, "task_successes", lambda store: counts[Path(store).name])
    on = {"reward_policy_rollouts_per_task": 2, "reward_real_rollouts_per_task": 2}
    pipeline.co_evolve(_config(closed_loop_floor=0.5, **on), tmp_path)
    # door-open: 16% imagined against 65% real, under half: out. drawer-close: 4% against 15%,
    # under half too. plate-slide: no real success, nothing to lose: kept.
    assert ("train_tasks", "stage1", ("plate-slide",)) in recorded
    counts["labelled_base"]["drawer-close"] = (2, 25)  # 8% against 15%: over half, kept
    recorded.clear()
    pipeline.co_evolve(_config(closed_loop_floor=0.5, **on), tmp_path)
    assert not [c for c in recorded if c[0] == "rl"]  # the stores' stages did not change
    recorded.clear()
    pipeline.co_evolve(_config(closed_loop_floor=0.3, **on), tmp_path)  # door-open: 16% < 19.5%
    assert ("train_tasks", "stage1", ("drawer-close", "plate-slide")) in recorded


@pytest.mark.parametrize("start", ["sft", "given"])
def test_the_anchor_clones_the_bases_real_successes_in_every_imagined_stage(
    tmp_path, recorded, start
) -> None:
    """bc_anchor: stage 1, the refined stage and the frozen control clone the judge's real
    rollouts of the base (data/reward_real); the simulator control runs RL as it is."""
    cfg = _config(bc_anchor=0.5, reward_real_rollouts_per_task=2, frozen_control=True)
    cfg.coevolve.simulator_control = True
    if start == "given":
        cfg.coevolve.start = "given"
        cfg.policy.name, cfg.world_model.path = "policy", str(tmp_path / "wm")
        cfg.reward_model.path, cfg.world_model.reset_set = str(tmp_path / "rm"), "starts"
    pipeline.co_evolve(cfg, tmp_path / "run")
    store = str(tmp_path / "run" / "data" / "reward_real")
    cloned = [c[1] for c in recorded if c[0] == "bc_data" and c[2] == store]
    assert cloned == ["stage1", "stage2", "frozen_control"]
    assert any(c[0] == "simulator_rl" for c in recorded)
    assert not [c for c in recorded if c[0] == "bc_data" and c[1] == "simulator_control"]


def test_the_anchor_reruns_from_stage_1_on_and_needs_the_real_rollouts(tmp_path, recorded) -> None:
    from wmrl_cli.errors import ConfigError

    on = {"reward_real_rollouts_per_task": 2}
    pipeline.co_evolve(_config(**on), tmp_path)
    recorded.clear()
    pipeline.co_evolve(_config(bc_anchor=0.5, **on), tmp_path)
    rerun = [c[1] for c in recorded if c[0] in ("rl", "collect", "train_rm", "wm_data")]
    assert rerun[0] == "stage1" and not {"base", "reward_real", "rm_base", "wm_base"} & set(rerun)
    with pytest.raises(ConfigError, match="'coevolve.bc_anchor': 0.5 needs"):
        pipeline.prepare_co_evolve(_config(bc_anchor=0.5, reward_real_rollouts_per_task=0))


def test_a_closed_loop_floor_no_task_clears_stops_with_one_line(tmp_path, recorded, monkeypatch):
    import wmrl_cli.coevolve.run_state as run_state
    from wmrl_cli.errors import WmrlError

    counts = {"labelled_base": {"door-open": (0, 25)}, "reward_real": {"door-open": (5, 20)}}
    monkeypatch.setattr(run_state, "task_successes", lambda store: counts[Path(store).name])
    on = {"reward_policy_rollouts_per_task": 2, "reward_real_rollouts_per_task": 2}
    with pytest.raises(
        WmrlError, match="closed_loop_floor=0.5 times its real rollouts: expected at least one task"
    ):
        pipeline.co_evolve(_config(closed_loop_floor=0.5, **on), tmp_path)


@pytest.mark.parametrize("change", [{"reward_policy_rollouts_per_task": 0}, {"start": "given"}])
def test_the_closed_loop_floor_needs_both_stores(change) -> None:
    from wmrl_cli.errors import ConfigError

    on = {"reward_policy_rollouts_per_task": 2, "reward_real_rollouts_per_task": 2}
    cfg = _config(**{**on, "closed_loop_floor": 0.5, **change})
    with pytest.raises(ConfigError, match="closed_loop_floor': 0.5 needs"):
        pipeline.prepare_co_evolve(cfg)


@pytest.mark.parametrize("change", [{"reward_real_rollouts_per_task": 0}, {"start": "given"}])
def test_the_world_model_on_the_judges_real_rollouts_needs_them(change) -> None:
    from wmrl_cli.errors import ConfigError

    cfg = _config(
        **{"reward_real_rollouts_per_task": 2, "world_model_on_reward_real": True, **change}
    )
    with pytest.raises(ConfigError, match="world_model_on_reward_real': true needs"):
        pipeline.prepare_co_evolve(cfg)


def test_given_start_judges_learn_from_the_given_policys_real_rollouts(tmp_path, recorded) -> None:
    cfg = _config(start="given", refine_reward_model=True, reward_real_rollouts_per_task=2)
    cfg.policy.name = str(tmp_path / "given" / "policy")
    cfg.world_model.path = str(tmp_path / "given" / "world_model")
    cfg.reward_model.path = str(tmp_path / "given" / "reward_model")
    cfg.world_model.reset_set = str(tmp_path / "given" / "reset_set")
    pipeline.co_evolve(cfg, tmp_path / "run")
    assert ("collect", "reward_real", "policy", False) in recorded
    assert [c for c in recorded if c[0] == "real_for"] == [("real_for", "rm_evo1", "reward_real")]


def test_collect_without_perturbation_keeps_the_policys_actions(tmp_path, monkeypatch) -> None:
    import wmrl_cli.jobs.collect_rollouts as collection
    from wmrl_cli.coevolve.stages import collect

    seen = []

    def collect_rollouts(sub) -> None:
        seen.append(sub)
        Path(sub.output_dir).mkdir(parents=True)

    monkeypatch.setattr(collection, "collect_rollouts", collect_rollouts)
    cfg = resolve_config("mw-coevolve-smoke")
    assert cfg.rollout.perturbation.kind != "none"
    collect(cfg, tmp_path / "perturbed", "policy", 2, 7)
    collect(cfg, tmp_path / "plain", "policy", 2, 7, perturbed=False)
    assert seen[0].rollout.perturbation == cfg.rollout.perturbation
    plain = seen[1].rollout.perturbation
    assert plain.kind == "none" and plain.random_chunk_prob == 0.0
    assert not seen[1].simulator.terminate_on_success and seen[1].simulator.seed == 7
    assert cfg.rollout.perturbation.kind != "none"  # the run's config is left as it was


# The stage kind that reads each added option: setting it away from its default reruns those.
READ_BY = {
    "reward_model.audit_with_simulator": "rl",
    "reward_model.exact_fraction": "rl",
    "reward_model.task_recall_floor": "rl",
    "reward_model.task_recall_evidence": "rl",
    "reward_model.task_recall_probe": "rl",
    "coevolve.reward_policy_rollouts_per_task": "imagine_policy",
    "coevolve.reward_real_rollouts_per_task": "reward_rollouts",
    "world_model.lr_schedule": "refine_wm",
    "reward_model.confirm_world_models": "rl",
    "coevolve.refine_candidates": "accept",
    "coevolve.accept_audit_per_task": "accept",
    "algorithm.train_tasks": "rl",
    "coevolve.trust_audit_per_task": "trust",
    "coevolve.trust_precision_floor": "rl",
    "coevolve.simulator_control": "structure",  # adds a stage, changes none
    "world_model.dtype": "rl",
    "world_model.offload_during_update": "rl",
    "world_model.vae_batch": "rl",
    "training.sharding": "rl",
    "training.param_dtype": "rl",
    "training.optimizer_dtype": "rl",
    "training.activation_checkpointing": "rl",
    "training.cpu_offload": "rl",
    "training.memory_budget_gb": "rl",
    "coevolve.curve_every": "rl",
    "coevolve.world_model_on_reward_real": "world_model",
    "coevolve.closed_loop_floor": "rl",
    "world_model.sharding": "refine_wm",
    "reward_model.videomae": "reward_model",
    "algorithm.bc_coef": "rl",
    "algorithm.bc_data": "rl",
    "algorithm.bc_batch_size": "rl",
    "algorithm.bc_tasks": "rl",
    "coevolve.bc_anchor": "rl",
}
# A value other than the default, where flipping the default's truth would not be one.
OTHER_VALUE = {
    "reward_model.exact_fraction": 0.25,
    "reward_model.task_recall_floor": 0.5,
    "reward_model.task_recall_evidence": 3,
    "reward_model.task_recall_probe": 32,
    "world_model.lr_schedule": "cosine",
    "reward_model.confirm_world_models": ["wm"],
    "coevolve.refine_candidates": 2,
    "coevolve.accept_audit_per_task": 10,
    "algorithm.train_tasks": ["drawer-close"],
    "coevolve.trust_audit_per_task": 10,
    "coevolve.trust_precision_floor": 0.7,
    "coevolve.closed_loop_floor": 0.5,
    "world_model.dtype": "bf16",
    "world_model.offload_during_update": True,
    "world_model.vae_batch": 4,
    "training.sharding": "fsdp",
    "training.param_dtype": "bf16",
    "training.optimizer_dtype": "float32",
    "training.memory_budget_gb": 10.0,
    "world_model.sharding": "fsdp",
    "reward_model.videomae": {"num_frames": 4},
    "algorithm.bc_coef": 0.5,
    "algorithm.bc_data": "runs/x/data/reward_real",
    "algorithm.bc_batch_size": 128,
    "algorithm.bc_tasks": ["window-close"],
    "coevolve.bc_anchor": 0.5,
}
NEEDS = {
    "training.cpu_offload": {"sharding": "fsdp"},  # it offloads FSDP's shards
    "algorithm.bc_coef": {"bc_data": "runs/x/data/reward_real"},  # the store it clones
}


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("reward_model", "keep_verified_calls", False),
        ("world_model", "gradient_checkpointing", True),
    ],
)
def test_keeping_verified_calls_or_checkpointing_is_in_no_fingerprint(
    tmp_path, section, key, value
) -> None:
    cfg = resolve_config()
    before = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    setattr(getattr(cfg, section), key, value)
    after = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    assert after == before


def test_how_a_lerobot_dataset_is_read_is_in_no_coevolve_fingerprint(tmp_path) -> None:
    """co-evolve makes its own data: the lerobot section (how --data reads a LeRobot dataset)
    reruns no stage and does not stop a resume."""
    cfg = resolve_config()
    before = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    cfg.lerobot.camera, cfg.lerobot.fps = "wrist", 5
    after = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    assert after == before


def test_the_world_models_sharding_reruns_its_training_alone(tmp_path) -> None:
    cfg = resolve_config()
    before = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    cfg.world_model.sharding = "fsdp"
    after = {kind: StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) for kind in READS}
    assert {kind for kind in READS if after[kind] != before[kind]} == {"world_model", "refine_wm"}


def test_an_option_added_later_stays_out_of_fingerprints_at_its_default(tmp_path) -> None:
    cfg = resolve_config()  # the schema's defaults (profiles may set the added options)
    assert set(ADDED_OPTIONS) == set(READ_BY)
    for key, default in ADDED_OPTIONS.items():
        kind = READ_BY[key]
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == default
        now = StageCache(tmp_path, 0, cfg)
        assert key not in now.values
        recorded_before = StageCache(tmp_path, 0, cfg)  # a run recorded before the option existed
        recorded_before.values = {k: v for k, v in now.values.items() if k != key}
        assert now.fingerprint(kind, ()) == recorded_before.fingerprint(kind, ())
        other = OTHER_VALUE[key] if key in OTHER_VALUE else type(default)(not default)
        given = getattr(cfg, section).model_copy()
        for companion, value in NEEDS.get(key, {}).items():  # what the other value needs beside it
            setattr(getattr(cfg, section), companion, value)
        before = StageCache(tmp_path, 0, cfg).fingerprint(kind, ())
        setattr(getattr(cfg, section), name, other)
        assert StageCache(tmp_path, 0, cfg).fingerprint(kind, ()) != before
        setattr(cfg, section, given)


def test_every_option_a_recorded_run_lacks_is_out_of_fingerprints_at_its_default() -> None:
    """A new option at its default must leave the fingerprints of runs recorded before it as
    they were, or `co-evolve` on such a run removes its finished stages and runs them again (the
    bc_* options, 2026-12-07, did so to every RL stage until they were listed). The keys below
    are those of the runs recorded so far; a key beyond them goes in ADDED_OPTIONS."""
    recorded = set(json.loads((Path(__file__).parent / "fingerprinted_keys.json").read_text()))
    keys = set(config_values(resolve_config(), None, "co-evolve"))
    new = sorted(keys - recorded - set(ADDED_OPTIONS))
    assert not new, f"add {new} to ADDED_OPTIONS with the default that keeps recorded runs"


@pytest.mark.parametrize("chosen", ["current", "wm_evo1_seed1"])
def test_the_audit_chooses_the_world_model_of_stage_2(
    tmp_path, recorded, monkeypatch, chosen
) -> None:
    """accept_audit_per_task with two refinement candidates: both are trained (training seeds
    0 and 1), the evolved policy is audited in the current world model and in each, and stage 2
    runs in the one chosen; the current one means stage 2 runs where stage 1 did, from the
    frozen control's inputs, so the control is stage 2 and is not run apart."""
    import wmrl_cli.coevolve.report as coevolve_report

    seeds, audited, reported = [], [], {}

    def train_wm(cfg, data, out, init, steps, ranks=1):
        seeds.append((Path(out).name, cfg.simulator.seed))
        return str(Path(out) / "world_model")

    def audit(cfg, out, policy, world_models, rm_path, reset_set, threshold):
        audited.append((Path(policy).parent.name, {k: Path(v).parent.name
                                                   for k, v in world_models.items()}))  # fmt: skip
        return {"world_models": {}, "chosen": chosen, "real_steps": 0}

    monkeypatch.setattr(pipeline, "train_wm", train_wm)
    monkeypatch.setattr(pipeline, "audit_world_models", audit)
    monkeypatch.setattr(
        coevolve_report, "write_report", lambda *a, **k: reported.update(same_as=a[9]) or {}
    )
    cfg = _config(refine_reward_model=False, refine_candidates=2, accept_audit_per_task=4)
    cfg.coevolve.frozen_control = True
    pipeline.co_evolve(cfg, tmp_path)
    seed = cfg.simulator.seed
    assert seeds == [("wm_base", seed), ("wm_evo1", seed), ("wm_evo1_seed1", seed + 1)]
    assert audited == [
        ("stage1", {"current": "wm_base", "wm_evo1": "wm_evo1", "wm_evo1_seed1": "wm_evo1_seed1"})
    ]
    stage2 = "wm_base" if chosen == "current" else chosen
    control = [("rl", "frozen_control", "wm_base", "rm_base")] if chosen != "current" else []
    assert [c for c in recorded if c[0] == "rl"] == [
        ("rl", "stage1", "wm_base", "rm_base"),
        ("rl", "stage2", stage2, "rm_base"),
        *control,
    ]
    assert reported["same_as"] == ("stage2" if chosen == "current" else None)
    stages = json.loads((tmp_path / STAGES_FILE).read_text())
    assert "accept1" in stages and "refine_wm1_seed1" in stages
    assert ("frozen_control" in stages) == (chosen != "current")


def test_an_acceptance_run_again_to_the_same_choice_keeps_stage_2_without_trust(
    tmp_path, recorded, monkeypatch
) -> None:
    """Without per-task trust stage 2 reads the acceptance only through the world model it
    chose: the acceptance run again (another audit size) choosing the same one reruns neither
    stage 2 nor the control, as a run recorded before per-task trust existed is kept."""
    audits = []

    def audit(cfg, out, policy, world_models, rm_path, reset_set, threshold):
        audits.append(cfg.coevolve.accept_audit_per_task)
        return {"world_models": {}, "chosen": "wm_evo1", "real_steps": 0}

    monkeypatch.setattr(pipeline, "audit_world_models", audit)
    cfg = _config(refine_reward_model=False, refine_candidates=2, accept_audit_per_task=4)
    cfg.coevolve.frozen_control = True
    pipeline.co_evolve(cfg, tmp_path)
    assert ("rl", "stage2", "wm_evo1", "rm_base") in recorded
    recorded.clear()
    cfg.coevolve.accept_audit_per_task = 5
    pipeline.co_evolve(cfg, tmp_path)
    assert audits == [4, 5] and not [c for c in recorded if c[0] == "rl"]


def test_a_kept_world_model_with_a_new_judge_still_runs_the_control(
    tmp_path, recorded, monkeypatch
) -> None:
    """Acceptance keeps the current world model, but stage 2 has a retrained judge: its inputs
    are not the control's, so the control runs."""
    monkeypatch.setattr(
        pipeline,
        "audit_world_models",
        lambda *a: {"world_models": {}, "chosen": "current", "real_steps": 0},
    )
    cfg = _config(refine_reward_model=True, refine_candidates=2, accept_audit_per_task=4)
    cfg.coevolve.frozen_control = True
    pipeline.co_evolve(cfg, tmp_path)
    assert [c for c in recorded if c[0] == "rl"][1:] == [
        ("rl", "stage2", "wm_base", "rm_evo1"),
        ("rl", "frozen_control", "wm_base", "rm_base"),
    ]


def test_refinement_candidates_need_the_audit() -> None:
    from wmrl_cli.errors import ConfigError

    cfg = _config(refine_candidates=2)
    with pytest.raises(ConfigError, match="needs coevolve.accept_audit_per_task"):
        pipeline.prepare_co_evolve(cfg)


def test_the_acceptance_prefers_the_current_world_model_on_a_tie() -> None:
    from wmrl_cli.coevolve.stages import choose_world_model

    assert choose_world_model({"current": 0.7, "a": 0.7, "b": 0.6}) == "current"
    assert choose_world_model({"current": 0.7, "a": 0.75, "b": 0.8}) == "b"
    assert choose_world_model({"current": None, "a": 0.0}) == "current"  # no signal either way
    assert choose_world_model({"current": None, "a": 0.1}) == "a"


def _audit_rows(precision: dict[str, tuple[int, int]]) -> dict[str, dict[str, Any]]:
    """An audit's per-task rows from (true calls, false calls) per task."""
    from wmrl_cli.rl.judge_audit import JudgeAudit

    audit = JudgeAudit(list(precision))
    for task, (tp, fp) in enumerate(precision.values()):
        judged = [True] * (tp + fp) + [False] * 4
        real = [True] * tp + [False] * (fp + 4)
        audit.add([task] * len(judged), judged, real)
    return audit.summary()["tasks"]


def test_stage_1_trains_on_the_tasks_whose_audited_verdict_clears_the_floor(
    tmp_path, recorded, monkeypatch
) -> None:
    """trust_audit_per_task: an audit of stage 1's inputs runs first (its own stage), and stage
    1 draws its starts from the tasks whose precision is at least the floor or that had no
    call; without acceptance, stage 2 and the control have their own audits."""
    import wmrl_cli.coevolve.report as coevolve_report

    rows = _audit_rows(
        {"drawer-close": (6, 3), "button-press-topdown": (1, 2), "door-open": (0, 0)}
    )
    audited, reported = [], {}

    def audit_trust(cfg, out, policy, wm, rm_path, reset_set, threshold):
        audited.append((Path(out).name, Path(policy).parent.name, Path(wm).parent.name))
        return {"tasks": rows, "real_steps": 7}

    patch(monkeypatch, "audit_trust", audit_trust)
    monkeypatch.setattr(
        coevolve_report, "write_report", lambda *a, **k: reported.update(trust=a[10])
    )
    cfg = _config(refine_reward_model=False, frozen_control=True, trust_audit_per_task=10)
    pipeline.co_evolve(cfg, tmp_path)
    assert audited == [
        ("stage1", "sft", "wm_base"),
        ("stage2", "stage1", "wm_evo1"),
        ("frozen_control", "stage1", "wm_base"),
    ]
    trained = ("drawer-close", "door-open")
    assert [c for c in recorded if c[0] == "train_tasks"] == [
        ("train_tasks", name, trained) for name in ("stage1", "stage2", "frozen_control")
    ]
    assert reported["trust"]["stage1"]["excluded"] == {
        "button-press-topdown": {"precision": 1 / 3, "tp": 1, "fp": 2}
    }
    assert reported["trust"]["stage1"]["audit"] == "trust/stage1"
    stages = json.loads((tmp_path / STAGES_FILE).read_text())
    assert stages["trust_stage1"]["real_steps"] == 7
    # A higher floor: stage 1's audit is kept (the floor is not its setting); stage 1 reruns,
    # and with it what builds on its policy (the later audits among them).
    recorded.clear()
    audited.clear()
    cfg.coevolve.trust_precision_floor = 0.7
    pipeline.co_evolve(cfg, tmp_path)
    assert [name for name, *_ in audited] == ["stage2", "frozen_control"]
    assert [c for c in recorded if c[0] == "train_tasks"][0] == (
        "train_tasks", "stage1", ("door-open",)
    )  # fmt: skip


@pytest.mark.parametrize("chosen", ["current", "wm_evo1"])
def test_acceptances_audit_is_stage_2s_and_the_controls_trust_audit(
    tmp_path, recorded, monkeypatch, chosen
) -> None:
    """With acceptance and the judge kept, the tally of the world model chosen decides stage
    2's tasks and that of the current one the control's: no new audit. When the current one is
    chosen, the control is stage 2 (same inputs, same tasks)."""
    import wmrl_cli.coevolve.report as coevolve_report

    tallies = {
        "current": {"drawer-close": (6, 3), "button-press-topdown": (1, 2)},
        "wm_evo1": {"drawer-close": (2, 5), "button-press-topdown": (3, 0)},
    }
    trusted = []
    reported = {}

    def audit_trust(cfg, out, *inputs):
        trusted.append(Path(out).name)
        return {"tasks": _audit_rows(tallies["current"]), "real_steps": 0}

    def acceptance(cfg, out, policy, world_models, rm_path, reset_set, threshold):
        for name in world_models:
            (out / name).mkdir(parents=True, exist_ok=True)
            rows = _audit_rows(tallies[name if name in tallies else "current"])
            (out / name / "judge_audit.json").write_text(json.dumps({"tasks": rows}))
        return {"world_models": {}, "chosen": chosen, "real_steps": 0}

    patch(monkeypatch, "audit_trust", audit_trust)
    monkeypatch.setattr(pipeline, "audit_world_models", acceptance)
    monkeypatch.setattr(
        coevolve_report, "write_report", lambda *a, **k: reported.update(trust=a[10])
    )
    cfg = _config(
        refine_reward_model=False,
        refine_candidates=2,
        accept_audit_per_task=4,
        frozen_control=True,
        trust_audit_per_task=10,
    )
    pipeline.co_evolve(cfg, tmp_path)
    assert trusted == ["stage1"]  # stage 2's and the control's come from the acceptance
    tasks = {c[1]: c[2] for c in recorded if c[0] == "train_tasks"}
    if chosen == "current":
        assert tasks == {"stage1": ("drawer-close",), "stage2": ("drawer-close",)}
        assert set(reported["trust"]) == {"stage1", "stage2"}
    else:
        assert tasks == {
            "stage1": ("drawer-close",),
            "stage2": ("button-press-topdown",),
            "frozen_control": ("drawer-close",),
        }
        assert reported["trust"]["frozen_control"]["audit"] == "accept/round1/current"
    assert reported["trust"]["stage2"]["audit"] == f"accept/round1/{chosen}"


def test_a_floor_no_task_clears_stops_with_one_line(tmp_path, recorded, monkeypatch) -> None:
    from wmrl_cli.errors import WmrlError

    rows = _audit_rows({"drawer-close": (1, 3), "button-press-topdown": (0, 2)})
    patch(monkeypatch, "audit_trust", lambda *a: {"tasks": rows, "real_steps": 0})
    cfg = _config(trust_audit_per_task=10)
    with pytest.raises(WmrlError, match="stage1: no task's verdict clears"):
        pipeline.co_evolve(cfg, tmp_path)
    assert not [c for c in recorded if c[0] == "rl"]
