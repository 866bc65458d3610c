"""PACE co-evolution (WoVR) as one resumable pipeline: `wmrl co-evolve`.

    demos -> sft -> eval base -> base rollouts -> world model + reward model
      -> stage 1 RL in WM_base -> eval -> [real rollouts of the evolved policy -> refine the
         world and reward models on base + new data (KIR refreshed) -> RL in WM_evo -> eval]
      x refinements -> (optional frozen-WM control) -> report

Every stage writes into its own folder of the run directory and is recorded in `stages.json`
when complete, with its wall time and the real environment steps it consumed (demonstrations,
rollouts and evaluations: their episodes' lengths; RL in imagination: 0); running the same
command again skips finished stages, and the stage that was interrupted resumes from its own
checkpoints (SFT, world model and RL trainers all resume). The RL stages' `env/real_steps`
start at the real steps the pipeline's data collection consumed before them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig, dump_config
from wmrl_cli.data.episodes import EpisodeStore, atomic_write_text
from wmrl_cli.pace_gate import check_world_model, enforce_gate
from wmrl_cli.pace_stages import Pipeline

REAL_STEPS_FILE = "real_steps_before.json"  # in an RL stage's folder: env/real_steps at start


def store_steps(path: str | Path) -> int:
    """Real environment steps behind an episode store: the sum of its episodes' lengths."""
    return EpisodeStore.open(path).real_steps()


def _rl_steps(policy_dir: str) -> int:
    """Real steps an RL stage consumed: the growth of its last `env/real_steps`."""
    run = Path(policy_dir).parent
    rows = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(rows[-1])
    return int(last["env/real_steps"]) - int(json.loads((run / REAL_STEPS_FILE).read_text()))


def _sub(cfg: RunConfig, output_dir: Path, **changes: Any) -> RunConfig:
    """A deep copy of the run config for one stage, with dotted-key changes."""
    sub = cfg.model_copy(deep=True)
    for dotted, value in changes.items():
        *path, key = dotted.split("__")
        node = sub
        for part in path:
            node = getattr(node, part)
        setattr(node, key, value)
    sub.output_dir = output_dir
    return sub


def _collect(cfg: RunConfig, out: Path, policy: str, per_task: int, seed: int) -> str:
    """Real rollouts into `out` (temp dir, then rename), with KIR keyframes."""
    from wmrl_cli.data.collection import collect_rollouts

    if (out / "index.json").is_file():
        return str(out)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    sub = _sub(
        cfg,
        tmp,
        policy__name=policy,
        rollout__episodes_per_task=per_task,
        simulator__seed=seed,
        simulator__terminate_on_success=False,
    )
    sub.rollout.kir.enabled = True
    collect_rollouts(sub)
    tmp.rename(out)
    return str(out)


def _merge(stores: list[str], out: Path, cfg: RunConfig) -> str:
    """One store holding the episodes of several (copied), KIR recomputed over all."""
    from wmrl_cli.data.collection import write_keyframes

    if (out / "index.json").is_file():
        return str(out)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged = EpisodeStore(tmp)
    for path in stores:
        for episode in EpisodeStore.open(path):
            merged.add([episode])
    write_keyframes(merged, cfg)
    tmp.rename(out)
    return str(out)


def _eval_steps(result: dict[str, Any]) -> int:
    return int(result["real_steps"])


def _evaluate(cfg: RunConfig, policy_dir: str, out: Path, videos: bool) -> dict[str, Any]:
    from wmrl_cli.evaluation.policy_eval import evaluate_policy
    from wmrl_cli.policies.registry import load_learned_policy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    policy = load_learned_policy(policy_dir, top_k=cfg.policy.top_k, seed=cfg.simulator.seed)
    out.mkdir(parents=True, exist_ok=True)
    with MetaWorldSim(cfg.simulator) as sim:
        report = evaluate_policy(
            sim,
            policy,
            suite=cfg.simulator.suite,
            trials=cfg.coevolve.eval_trials,
            chunk_size=cfg.simulator.chunk_size,
            base_seed=cfg.simulator.seed,
            sample=not cfg.policy.greedy,
            temperature=cfg.policy.temperature,
            video_dir=out / "videos" if videos else None,
            progress=cfg.logging.progress,
        )
    report.save(out)
    steps = sum(e.length for e in report.episodes)
    return {
        "overall": report.overall,
        "interval95": list(report.interval),
        "per_task": report.per_task,
        "real_steps": steps,
        # (init id, success) per episode: stages share the evaluation seeds, so any two stages
        # compare episode by episode (the report's paired differences)
        "outcomes": [[e.init_id, bool(e.success)] for e in report.episodes],
    }


def _train_wm(cfg: RunConfig, data: str, out: Path, init: str | None, steps: int) -> str:
    from wmrl_cli.training.world_model_trainer import WorldModelTrainer

    store = EpisodeStore.open(data)
    sub = _sub(cfg, out)
    if init is not None:
        sub.world_model.steps = steps
    out.mkdir(parents=True, exist_ok=True)
    a_dim = int(store.load(0).actions.shape[1])
    model_dir = WorldModelTrainer(sub, out, store, a_dim).run(init=init)
    return str(model_dir)


def _train_rm(cfg: RunConfig, data: str, out: Path, steps: int) -> dict[str, Any]:
    from wmrl_cli.training.reward_trainer import train_reward_model

    store = EpisodeStore.open(data)
    sub = _sub(cfg, out, reward_model__steps=steps)
    out.mkdir(parents=True, exist_ok=True)
    n_tasks = 1 + max(int(m["task_id"]) for m in store.index)
    model_dir, metrics = train_reward_model(sub, out, store, n_tasks)
    return {
        "path": str(model_dir),
        "f1": metrics.f1,
        "precision": metrics.precision,
        "recall": metrics.recall,
        "threshold": metrics.threshold,
    }


def _rl(
    cfg: RunConfig,
    out: Path,
    policy: str,
    world_model: str,
    reward_model: str,
    reset_set: str,
    real_steps: int,
    threshold: float | None = None,
) -> str:
    """RL in imagination; its `env/real_steps` start at `real_steps` (the data before it);
    `threshold`: the success threshold recalibrated on the world model's frames (None: the
    configured one)."""
    import torch
    from accelerate import Accelerator

    from wmrl_cli.policies.checkpoint import from_pretrained
    from wmrl_cli.policies.registry import resolve_policy_dir
    from wmrl_cli.rl.setup import build_imagined_env
    from wmrl_cli.rl.trainer import PolicyTrainer

    sub = _sub(
        cfg,
        out,
        policy__name=policy,
        world_model__path=world_model,
        reward_model__path=reward_model,
        world_model__reset_set=reset_set,
    )
    if threshold is not None:
        sub.reward_model.success_threshold = threshold
    sub.algorithm.eval_every = 0
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", dump_config(sub))  # what this stage ran with
    before = out / REAL_STEPS_FILE
    if not before.is_file():  # a resumed stage keeps the count it started from
        atomic_write_text(before, json.dumps(real_steps))
    real_steps = int(json.loads(before.read_text()))
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    model = from_pretrained(resolve_policy_dir(policy), device=str(accelerator.device))
    env = build_imagined_env(sub, sub.algorithm.num_envs, str(accelerator.device))
    trainer = PolicyTrainer(sub, out, model, env, accelerator, None, real_steps=real_steps)
    return str(trainer.train())


def _wm_reliability(model_dir: str) -> dict[str, Any]:
    path = Path(model_dir) / "reliability.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out = {"beats_copy_baseline": data.get("beats_copy_baseline")}
    for step in (8, 16, 32):
        if step <= data["horizon"]:
            out[f"psnr@{step}"] = data["psnr"][step - 1]
            out[f"copy_psnr@{step}"] = data["copy_psnr"][step - 1]
    return out


def co_evolve(cfg: RunConfig, run_dir: Path) -> dict[str, Any]:
    """The whole pipeline; returns the report (also written to report.json / report.md)."""
    from wmrl_cli.evaluation.pace_report import rl_activity, write_report
    from wmrl_cli.training.sft import collect_demos, train_bc

    ce = cfg.coevolve
    p = Pipeline(run_dir, cfg.simulator.seed, cfg)
    seed = cfg.simulator.seed

    def sft() -> str:
        sft_dir = run_dir / "sft"
        sft_dir.mkdir(parents=True, exist_ok=True)
        sub = _sub(cfg, sft_dir)
        return str(train_bc(sub, sft_dir, collect_demos(sub, sft_dir)))

    base_policy = p.run(
        "sft",
        sft,
        lambda _: store_steps(run_dir / "sft" / "demos"),
        reads="sft",
        outputs=("sft",),
    )
    evals = {
        "base": p.run(
            "eval_base",
            lambda: _evaluate(cfg, base_policy, run_dir / "eval" / "base", False),
            _eval_steps,
            reads="eval",
            after=("sft",),
            outputs=("eval/base",),
        )
    }
    rollouts = p.run(
        "base_rollouts",
        lambda: _collect(
            cfg, run_dir / "data" / "base", base_policy, ce.base_rollouts_per_task, seed + 2_000_000
        ),
        store_steps,
        reads="base_rollouts",
        after=("sft",),
        outputs=("data/base",),
    )
    # The world and reward models learn from the base policy's rollouts and the demonstrations
    # (which hold the successes a weak base policy rarely shows).
    base_data = p.run(
        "merge0",
        lambda: _merge(
            [str(run_dir / "sft" / "demos"), rollouts], run_dir / "data" / "base_merged", cfg
        ),
        reads="merge",
        after=("sft", "base_rollouts"),
        outputs=("data/base_merged",),
    )
    wm = p.run(
        "world_model",
        lambda: _train_wm(cfg, base_data, run_dir / "wm_base", None, 0),
        reads="world_model",
        after=("merge0",),
        outputs=("wm_base",),
    )
    rm = p.run(
        "reward_model",
        lambda: _train_rm(cfg, base_data, run_dir / "rm_base", cfg.reward_model.steps),
        reads="reward_model",
        after=("merge0",),
        outputs=("rm_base",),
    )
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, wm: str, rm_path: str, data: str, after: tuple[str, ...]) -> float | None:
        """The world model's health check (an evaluation stage) and gate; the threshold RL is
        to use (None: no check configured). `after`: the stages of the world model, reward
        model and data it checks."""
        if not ce.check_episodes:
            return None
        out = run_dir / "check" / name
        checks[name] = p.run(
            f"eval_{name}",
            lambda: check_world_model(cfg, out, wm, rm_path, data),
            lambda result: int(result["real_steps"]),
            reads="check",
            after=after,
            outputs=(f"check/{name}",),
        )
        enforce_gate(name, checks[name], cfg, out)
        return checks[name]["rl_threshold"]

    base_inputs = ("world_model", "reward_model", "merge0")
    threshold = frozen_threshold = check("wm_base", wm, rm["path"], base_data, base_inputs)
    policy = p.run(
        "stage1",
        lambda: _rl(
            cfg,
            run_dir / "stage1",
            base_policy,
            wm,
            rm["path"],
            base_data,
            p.data_steps(),
            threshold,
        ),
        _rl_steps,
        reads="rl",
        after=("sft", *base_inputs, "eval_wm_base"),
        outputs=("stage1",),
    )
    evals["stage1"] = p.run(
        "eval_stage1",
        lambda: _evaluate(
            cfg, policy, run_dir / "eval" / "stage1", ce.videos and ce.refinements == 0
        ),
        _eval_steps,
        reads="eval",
        after=("stage1",),
        outputs=("eval/stage1",),
    )
    reliability = {"wm_base": _wm_reliability(wm)}
    reward_metrics = {"rm_base": rm}
    data = [base_data]
    frozen_input = (policy, wm, rm["path"], base_data)
    frozen_after: tuple[str, ...] = ()
    stages = {
        "policy": "stage1",
        "wm": "world_model",
        "rm": "reward_model",
        "check": "eval_wm_base",
    }
    for r in range(1, ce.refinements + 1):
        stage = f"stage{r + 1}"
        new = p.run(
            f"evolved_rollouts{r}",
            lambda r=r, pol=policy: _collect(
                cfg,
                run_dir / "data" / f"evolved{r}",
                pol,
                ce.evolved_rollouts_per_task,
                seed + 2_000_000 + 100_000 * r,
            ),
            store_steps,
            reads="evolved_rollouts",
            after=(stages["policy"],),
            outputs=(f"data/evolved{r}",),
        )
        data.append(new)
        data_stages = ("merge0", *(f"evolved_rollouts{i}" for i in range(1, r + 1)))
        merged = p.run(
            f"merge{r}",
            lambda r=r, d=tuple(data): _merge(list(d), run_dir / "data" / f"merged{r}", cfg),
            reads="merge",
            after=data_stages,
            outputs=(f"data/merged{r}",),
        )
        frozen_input = (policy, wm, rm["path"], merged)
        frozen_threshold = threshold
        frozen_after = (stages["policy"], stages["wm"], stages["rm"], stages["check"], f"merge{r}")
        wm = p.run(
            f"refine_wm{r}",
            lambda r=r, w=wm, m=merged: _train_wm(
                cfg, m, run_dir / f"wm_evo{r}", w, ce.refine_steps
            ),
            reads="refine_wm",
            after=(stages["wm"], f"merge{r}"),
            outputs=(f"wm_evo{r}",),
        )
        rm = p.run(
            f"refine_rm{r}",
            lambda r=r, m=merged: _train_rm(cfg, m, run_dir / f"rm_evo{r}", ce.refine_reward_steps),
            reads="refine_rm",
            after=(f"merge{r}",),
            outputs=(f"rm_evo{r}",),
        )
        reliability[f"wm_evo{r}"] = _wm_reliability(wm)
        reward_metrics[f"rm_evo{r}"] = rm
        evo_inputs = (f"refine_wm{r}", f"refine_rm{r}", f"merge{r}")
        threshold = check(f"wm_evo{r}", wm, rm["path"], merged, evo_inputs)
        policy = p.run(
            stage,
            lambda s=stage, pol=policy, w=wm, rr=rm, m=merged, t=threshold: _rl(
                cfg, run_dir / s, pol, w, rr["path"], m, p.data_steps(), t
            ),
            _rl_steps,
            reads="rl",
            after=(stages["policy"], *evo_inputs, f"eval_wm_evo{r}"),
            outputs=(stage,),
        )
        stages = {"policy": stage, "wm": f"refine_wm{r}", "rm": f"refine_rm{r}",
                  "check": f"eval_wm_evo{r}"}  # fmt: skip
        last = r == ce.refinements
        evals[stage] = p.run(
            f"eval_{stage}",
            lambda s=stage, pol=policy, last=last: _evaluate(
                cfg, pol, run_dir / "eval" / s, ce.videos and last
            ),
            _eval_steps,
            reads="eval",
            after=(stage,),
            outputs=(f"eval/{stage}",),
        )
    if ce.frozen_control and ce.refinements > 0:
        pol, w, rpath, m = frozen_input
        control = p.run(
            "frozen_control",
            lambda: _rl(
                cfg, run_dir / "frozen_control", pol, w, rpath, m, p.data_steps(), frozen_threshold
            ),
            _rl_steps,
            reads="rl",
            after=frozen_after,
            outputs=("frozen_control",),
        )
        evals["frozen_control"] = p.run(
            "eval_frozen_control",
            lambda: _evaluate(cfg, control, run_dir / "eval" / "frozen_control", False),
            _eval_steps,
            reads="eval",
            after=("frozen_control",),
            outputs=("eval/frozen_control",),
        )
    walls = {name: item["wall_s"] for name, item in p.state.items()}
    real_steps = {name: item.get("real_steps") for name, item in p.state.items()}
    activity = {
        name: act
        for name in evals
        if name != "base" and (act := rl_activity(run_dir / name)) is not None
    }
    for name, figures in checks.items():  # the health check's figures beside training's
        reliability.setdefault(name, {}).update(
            {k: v for k, v in figures.items() if k not in ("gate_step", "real_steps")}
        )
    return write_report(
        run_dir, cfg, evals, reliability, reward_metrics, walls, real_steps, activity
    )
