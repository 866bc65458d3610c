"""Co-evolution of the policy and its world model (WoVR) as one resumable pipeline:
`wmrl co-evolve`.

Two starts (`coevolve.start`), then the same refinements:

    sft:    demos -> sft -> eval base -> base rollouts -> world model + reward model (from
            scratch, on the rollouts and the demonstrations) -> check -> stage 1 RL in WM_base
            -> eval                                                       (Meta-World)
    given:  eval base (the given policy) -> stage 1 RL in the given world model, reward model
            and reset set (published assets or wmrl runs) -> eval          (LIBERO presets)
    then, `coevolve.refinements` times (the refinement step, WoVR's PACE): real rollouts of
    the evolved policy -> the world model fine-tuned on them (sft: with the base data) and
    the reward model retrained (sft) or fine-tuned (given), or kept
    (`coevolve.refine_reward_model: false`) -> check -> RL in WM_evo from the new rollouts
    and their KIR keyframes -> eval; optionally the frozen-WM
    control and the simulator control (the same RL from the base policy in the real
    simulator, for as many steps as the imagined stages took) -> eval; report

With `coevolve.reward_imagined_start_every` K > 0, each reward model trained after a world
model also learns from that world model's imagined rollouts of its data (from every K-th step,
sampled as RL samples, labelled by the recorded outcome: an `imagine` stage before it), since a
judge trained on real frames alone finds no success in imagined ones (docs/results.md). With
`coevolve.reward_policy_rollouts_per_task` N > 0 it also learns from N imagined episodes per
task of the policy the next RL stage starts from, acting in that world model from that stage's
starts, labelled by executing its actions in the simulator (a `labelled` stage; real steps):
the rollouts the judge will have to call, which set its threshold at the episode level. With
`coevolve.reward_real_rollouts_per_task` N > 0 every reward model of the run also learns from
N real rollouts per task of the policy stage 1 starts from, without action noise and run on
after success (a `reward_rollouts` stage): the policy's own successes and near misses, which
the perturbed rollouts the world model learns from do not show the judge. With
`coevolve.trust_audit_per_task` N > 0 each RL stage draws its starts only from the tasks whose
verdict an audit of its inputs found true often enough (a `trust` stage, or acceptance's audit
where it tallied the same inputs): a judge that is mostly wrong on a task teaches the policy to
fail there.

Every stage writes into its own folder of the run directory and is recorded in `stages.json`
when complete, with its wall time and the real environment steps it consumed (demonstrations,
rollouts and evaluations: their episodes' lengths; RL in imagination: 0); running the same
command again skips finished stages, and the stage that was interrupted resumes from its own
checkpoints (SFT, world model and RL trainers all resume). The RL stages' `env/real_steps`
start at the real steps the pipeline's data collection consumed before them. What each stage
does is in stages.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl_cli.coevolve.report import SIMULATOR_CONTROL
from wmrl_cli.coevolve.run_state import CoevolveRun
from wmrl_cli.coevolve.stages import (
    audit_world_models,
    collect,
    merge,
    rl,
    rl_steps,
    simulator_rl,
    store_steps,
    sub_config,
    train_rm,
    train_wm,
    wm_reliability,
)
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError


def prepare_co_evolve(cfg: RunConfig, ranks: int = 1) -> None:
    """Before the run directory is claimed: the simulator resolved and available (LIBERO:
    installed), the RL stages' envs and the world models' batches split over `ranks`, and the
    given start's policy, world model, reward model and reset set found (assets downloaded)
    and the memory plans of its RL stages and its world model's refinement within the GPU's
    memory (on a GPU, or with `training.memory_budget_gb`): one line otherwise, not hours later
    at stage 1."""

    from wmrl_cli.data.reset_set import reset_frame_size
    from wmrl_cli.jobs.inputs import exact_groups, resolve_inputs
    from wmrl_cli.memory.budget import check_rl_memory
    from wmrl_cli.memory.world_model import check_world_model_training
    from wmrl_cli.ranks import check_local_gpus
    from wmrl_cli.rl.schedule import check_world_size
    from wmrl_cli.sims.backends import resolve_simulator, simulator_class
    from wmrl_cli.training.world_model_batches import check_batch_split

    cfg.simulator = resolve_simulator(cfg.simulator)
    ce = cfg.coevolve
    if ce.refine_candidates > 1 and not ce.accept_audit_per_task:
        raise ConfigError(
            f"invalid value for 'coevolve.refine_candidates': {ce.refine_candidates} needs "
            "coevolve.accept_audit_per_task > 0 (the audit chooses among the refinements)"
        )
    if ce.world_model_on_reward_real and not (
        ce.start == "sft" and ce.reward_real_rollouts_per_task
    ):
        raise ConfigError(
            "invalid value for 'coevolve.world_model_on_reward_real': true needs "
            "coevolve.start=sft and coevolve.reward_real_rollouts_per_task > 0 (the real "
            "rollouts it adds to the first world model's data)"
        )
    stores = ce.reward_policy_rollouts_per_task and ce.reward_real_rollouts_per_task
    if ce.closed_loop_floor and not (ce.start == "sft" and stores):
        raise ConfigError(
            f"invalid value for 'coevolve.closed_loop_floor': {ce.closed_loop_floor} needs "
            "coevolve.start=sft, reward_policy_rollouts_per_task > 0 and "
            "reward_real_rollouts_per_task > 0 (the base policy's imagined and real successes "
            "it compares)"
        )
    if ce.bc_anchor and not ce.reward_real_rollouts_per_task:
        raise ConfigError(
            f"invalid value for 'coevolve.bc_anchor': {ce.bc_anchor} needs "
            "coevolve.reward_real_rollouts_per_task > 0 (the base policy's real rollouts whose "
            "successes it clones)"
        )
    if cfg.coevolve.start == "sft" and cfg.simulator.name == "libero":
        raise ConfigError(
            "invalid value for 'coevolve.start': 'sft' trains the base policy on scripted "
            "demonstrations, which LIBERO has not; start from given models "
            "(coevolve.start=given), e.g. --preset wan-spatial-coevolve"
        )
    simulator_class(cfg.simulator)
    check_world_size(cfg.algorithm.num_envs, cfg.algorithm.group_size, ranks)
    exact_groups(cfg, cfg.algorithm.num_envs // ranks)  # the recall floor, if set
    check_local_gpus(ranks)  # before the first stage, not at the first stage on ranks
    # the world models train on the ranks too (sft: the first from scratch, its autoencoder too)
    if ce.start == "sft" or ce.refinements:
        check_batch_split(cfg, ranks, trains_autoencoder=ce.start == "sft")
    if cfg.coevolve.start == "given":
        inputs = resolve_inputs(cfg)
        check_rl_memory(cfg, inputs, ranks)
        if ce.refinements:  # the given world model's refinement, on the reset set's frames
            frames = reset_frame_size(inputs.reset_set) or (256, 256)
            check_world_model_training(cfg, inputs.world_model, frames, ranks)


@dataclass
class _Evolved:
    """What the next refinement builds on: the last policy, world model and reward model, the
    success threshold RL used, and the stages that made each (None: given, no stage)."""

    policy: str
    wm: str
    rm: dict[str, Any]
    threshold: float | None
    stages: dict[str, str | None]


def _after(*names: str | None) -> tuple[str, ...]:
    return tuple(n for n in names if n is not None)


def _sft_start(run: CoevolveRun) -> tuple[_Evolved, list[str], tuple[str, ...]]:
    """Stage 1 from scratch; (its result, the base data, the stage that made it)."""
    from wmrl_cli.jobs.sft import collect_demos, train_bc

    cfg, run_dir, p, ce = run.cfg, run.run_dir, run.cache, run.cfg.coevolve
    seed = cfg.simulator.seed

    def sft() -> str:
        sft_dir = run_dir / "sft"
        sft_dir.mkdir(parents=True, exist_ok=True)
        sub = sub_config(cfg, sft_dir)
        return str(train_bc(sub, sft_dir, collect_demos(sub, sft_dir)))

    base_policy = p.run(
        "sft",
        sft,
        lambda _: store_steps(run_dir / "sft" / "demos"),
        reads="sft",
        outputs=("sft",),
    )
    run.evaluate("base", base_policy, ("sft",), False)
    run.base = (base_policy, ("sft",))
    rollouts = p.run(
        "base_rollouts",
        lambda: collect(
            cfg, run_dir / "data" / "base", base_policy, ce.base_rollouts_per_task, seed + 2_000_000
        ),
        store_steps,
        reads="base_rollouts",
        after=("sft",),
        outputs=("data/base",),
    )
    real, real_stage = run.real_reward_data(base_policy, ("sft",))
    # The world and reward models learn from the base policy's rollouts and the demonstrations
    # (which hold the successes a weak base policy rarely shows).
    base_data = p.run(
        "merge0",
        lambda: merge(
            [str(run_dir / "sft" / "demos"), rollouts], run_dir / "data" / "base_merged", cfg
        ),
        reads="merge",
        after=("sft", "base_rollouts"),
        outputs=("data/base_merged",),
    )
    wm_data, wm_data_stage = base_data, "merge0"
    if ce.world_model_on_reward_real:  # the base policy's own clean closed loop besides
        wm_data = p.run(
            "merge_wm",
            lambda: merge([base_data, str(real)], run_dir / "data" / "wm_merged", cfg),
            reads="merge",
            after=_after("merge0", real_stage),
            outputs=("data/wm_merged",),
        )
        wm_data_stage = "merge_wm"
    wm = p.run(
        "world_model",
        lambda: train_wm(cfg, wm_data, run_dir / "wm_base", None, 0, run.ranks),
        reads="world_model",
        ranks=run.ranks,
        after=(wm_data_stage,),
        outputs=("wm_base",),
    )
    imagined, imagine_stage = run.imagined_reward_data(
        "imagined_base", wm, base_data, ("world_model", "merge0")
    )
    labelled, label_stage = run.labelled_reward_data(
        "labelled_base", base_policy, wm, base_data, seed + 3_000_000,
        ("sft", "world_model", "merge0"),
    )  # fmt: skip
    rm = p.run(
        "reward_model",
        lambda: train_rm(
            cfg,
            base_data,
            run_dir / "rm_base",
            cfg.reward_model.steps,
            imagined=imagined,
            labelled=labelled,
            real=real,
        ),
        reads="reward_model",
        after=_after("merge0", imagine_stage, label_stage, real_stage),
        outputs=("rm_base",),
    )
    base_inputs = ("world_model", "reward_model", "merge0")
    threshold = run.check("wm_base", wm, rm["path"], base_data, base_inputs)
    after = ("sft", *base_inputs, "eval_wm_base")
    tasks, trust_stage = run.train_tasks(
        "stage1", (base_policy, wm, rm["path"], base_data, threshold), after
    )
    if ce.closed_loop_floor:  # leave out the tasks the world model's loop loses
        tasks = run.closed_loop_tasks("stage1", str(labelled), str(real), tasks)
        after = (*after, *_after(label_stage, real_stage))
    anchor, anchor_stage = run.anchor()
    policy = p.run(
        "stage1",
        lambda: rl(
            cfg,
            run_dir / "stage1",
            base_policy,
            wm,
            rm["path"],
            base_data,
            p.data_steps(),
            threshold,
            tasks,
            ranks=run.ranks,
            bc_data=anchor,
        ),
        rl_steps,
        reads="rl",
        ranks=run.ranks,
        after=_after(*after, trust_stage, anchor_stage),
        outputs=("stage1",),
    )
    run.evaluate("stage1", policy, ("stage1",), ce.videos and ce.refinements == 0)
    run.reliability["wm_base"] = wm_reliability(wm)
    run.reward_metrics["rm_base"] = rm
    stages = {"policy": "stage1", "wm": "world_model", "rm": "reward_model",
              "check": "eval_wm_base"}  # fmt: skip
    return _Evolved(policy, wm, rm, threshold, stages), [base_data], ("merge0",)


def _given_start(run: CoevolveRun) -> tuple[_Evolved, list[str], tuple[str, ...]]:
    """Stage 1 in the given world model, reward model and reset set (published assets or
    wmrl runs) from the given policy; no base data: the refinements learn from the evolved
    policy's rollouts alone (the published models' own data is not published)."""
    cfg, run_dir, p, ce = run.cfg, run.run_dir, run.cache, run.cfg.coevolve
    wm, rm_path = str(cfg.world_model.path), str(cfg.reward_model.path)
    run.evaluate("base", str(cfg.policy.name), (), False)
    run.base = (str(cfg.policy.name), ())
    run.real_reward_data(str(cfg.policy.name), ())  # for the refinements' fine-tuned judges
    anchor, anchor_stage = run.anchor()
    policy = p.run(
        "stage1",
        lambda: rl(
            cfg,
            run_dir / "stage1",
            str(cfg.policy.name),
            wm,
            rm_path,
            str(cfg.world_model.reset_set),
            p.data_steps(),
            ranks=run.ranks,
            bc_data=anchor,
        ),
        rl_steps,
        reads="rl",
        ranks=run.ranks,
        after=_after(anchor_stage),
        outputs=("stage1",),
    )
    run.evaluate("stage1", policy, ("stage1",), ce.videos and ce.refinements == 0)
    stages = {"policy": "stage1", "wm": None, "rm": None, "check": None}
    return _Evolved(policy, wm, {"path": rm_path}, None, stages), [], ()


def _refine_world_model(
    run: CoevolveRun,
    r: int,
    last: _Evolved,
    made: dict[str, str | None],
    merged: str,
    merge_stage: str,
) -> tuple[str, str | None]:
    """Refinement r's world model and its stage: `last.wm` fine-tuned on the merged data, or,
    with `coevolve.accept_audit_per_task`, the one of `last.wm` and its `refine_candidates`
    fine-tunings (training seeds simulator.seed + c) that the evolved policy's audit chooses."""
    cfg, ce, p = run.cfg, run.cfg.coevolve, run.cache
    candidates: dict[str, tuple[str, str]] = {}  # name -> (path, stage)
    for c in range(ce.refine_candidates):
        name = f"wm_evo{r}" if c == 0 else f"wm_evo{r}_seed{c}"
        stage = f"refine_wm{r}" if c == 0 else f"refine_wm{r}_seed{c}"
        trainer_cfg = sub_config(cfg, run.run_dir, simulator__seed=cfg.simulator.seed + c)
        candidates[name] = (
            p.run(
                stage,
                lambda t=trainer_cfg, n=name: train_wm(
                    t, merged, run.run_dir / n, last.wm, ce.refine_steps, run.ranks
                ),
                reads="refine_wm",
                ranks=run.ranks,
                after=_after(made["wm"], merge_stage),
                outputs=(name,),
            ),
            stage,
        )
    if not ce.accept_audit_per_task:
        return candidates[f"wm_evo{r}"]
    options = {"current": (last.wm, made["wm"]), **candidates}
    out = run.run_dir / "accept" / f"round{r}"
    result = p.run(
        f"accept{r}",
        lambda: audit_world_models(
            cfg,
            out,
            last.policy,
            {name: path for name, (path, _) in options.items()},
            last.rm["path"],
            merged,
            last.threshold,
        ),
        lambda result: int(result["real_steps"]),
        reads="accept",
        after=_after(made["policy"], made["rm"], made["check"], merge_stage,
                     *(stage for _, stage in options.values())),
        outputs=(f"accept/round{r}",),
    )  # fmt: skip
    run.acceptance[f"round{r}"] = result
    return options[result["chosen"]]


def _refine_reward_model(
    run: CoevolveRun,
    r: int,
    last: _Evolved,
    made: dict[str, str | None],
    merged: str,
    merge_stage: str,
    wm: str,
    wm_stage: str | None,
) -> tuple[dict[str, Any], str]:
    """Refinement r's reward model and its stage: sft, a new one on all the data (and the
    refined world model's imagined rollouts of it); given, the given one fine-tuned."""
    cfg, ce = run.cfg, run.cfg.coevolve
    imagined, imagine_stage = run.imagined_reward_data(
        f"imagined_evo{r}", wm, merged, _after(wm_stage, merge_stage)
    )
    # The evolved policy in the refined world model, from the starts its next stage uses.
    labelled, label_stage = run.labelled_reward_data(
        f"labelled_evo{r}", last.policy, wm, merged, cfg.simulator.seed + 3_000_000 + 100_000 * r,
        _after(made["policy"], wm_stage, merge_stage),
    )  # fmt: skip
    rm_init = last.rm["path"] if ce.start == "given" else None
    real, real_stage = run.real_reward
    rm = run.cache.run(
        f"refine_rm{r}",
        lambda: train_rm(
            cfg,
            merged,
            run.run_dir / f"rm_evo{r}",
            ce.refine_reward_steps,
            rm_init,
            imagined,
            labelled,
            real,
        ),
        reads="refine_rm",
        after=_after(
            made["rm"] if rm_init else None, merge_stage, imagine_stage, label_stage, real_stage
        ),
        outputs=(f"rm_evo{r}",),
    )
    run.reward_metrics[f"rm_evo{r}"] = rm
    return rm, f"refine_rm{r}"


def co_evolve(cfg: RunConfig, run_dir: Path, ranks: int = 1) -> dict[str, Any]:
    """The whole pipeline; returns the report (also written to report.json / report.md).
    `ranks`: the processes each RL and world-model stage trains on (ranks.py); the rest runs in
    this one."""
    from wmrl_cli.coevolve.report import log_report_media, write_report
    from wmrl_cli.rl.activity import rl_activity

    ce = cfg.coevolve
    run = CoevolveRun(cfg, run_dir, ranks)
    p, seed = run.cache, cfg.simulator.seed
    evolved, data, data_stages = (_sft_start if ce.start == "sft" else _given_start)(run)
    anchor, anchor_stage = run.anchor()  # the real successes every later RL stage clones too
    # The frozen control's RL inputs (policy, world model, judge, starts, threshold) and the
    # last refined stage's: equal when acceptance kept the current world model and judge.
    frozen_input = last_input = None
    frozen_after: tuple[str, ...] = ()
    accept = frozen_audited = None  # the last round's acceptance stage and its audit of the control
    for r in range(1, ce.refinements + 1):
        made, last = evolved.stages, evolved
        new = p.run(
            f"evolved_rollouts{r}",
            lambda r=r, pol=last.policy: collect(
                cfg,
                run_dir / "data" / f"evolved{r}",
                pol,
                ce.evolved_rollouts_per_task,
                seed + 2_000_000 + 100_000 * r,
            ),
            store_steps,
            reads="evolved_rollouts",
            after=(made["policy"],),
            outputs=(f"data/evolved{r}",),
        )
        data.append(new)
        data_stages = (*data_stages, f"evolved_rollouts{r}")
        if len(data) == 1:  # the evolved rollouts alone (given start): used where they are
            merged, merge_stage = new, f"evolved_rollouts{r}"
        else:
            merged = p.run(
                f"merge{r}",
                lambda r=r, d=tuple(data): merge(list(d), run_dir / "data" / f"merged{r}", cfg),
                reads="merge",
                after=data_stages,
                outputs=(f"data/merged{r}",),
            )
            merge_stage = f"merge{r}"
        frozen_input = (last.policy, last.wm, last.rm["path"], merged, last.threshold)
        frozen_after = _after(made["policy"], made["wm"], made["rm"], made["check"], merge_stage)
        wm, wm_stage = _refine_world_model(run, r, last, made, merged, merge_stage)
        if ce.refine_reward_model:
            rm, rm_stage = _refine_reward_model(
                run, r, last, made, merged, merge_stage, wm, wm_stage
            )
        else:  # the judge that gave the last stage its signal
            rm, rm_stage = last.rm, made["rm"]
        # The world model stage r+1 runs in: a refinement, or the current one kept by the audit.
        run.reliability[f"wm_evo{r}"] = {"world_model": Path(wm).parent.name, **wm_reliability(wm)}
        evo_inputs = _after(wm_stage, rm_stage, merge_stage)
        threshold = run.check(f"wm_evo{r}", wm, rm["path"], merged, evo_inputs)
        name = f"stage{r + 1}"
        # Acceptance audited the evolved policy in each world model with the last stage's
        # judge and threshold: where those are stage r+1's too, its tallies are the trust audits
        # of stage r+1 (the world model chosen) and of the control (the current one).
        # Only then does stage r+1 read the acceptance stage beyond the world model it chose
        # (which `wm_stage` already names), so only then is it among the stage's inputs: a
        # run recorded before per-task trust keeps its stage r+1 (`co-evolve --update`).
        accept = f"accept{r}" if f"round{r}" in run.acceptance else None
        if accept and not ce.trust_audit_per_task:
            accept = audited = frozen_audited = None
        elif accept and rm["path"] == last.rm["path"] and threshold == last.threshold:
            audited = run_dir / "accept" / f"round{r}"
            frozen_audited = audited / "current"
            audited /= run.acceptance[f"round{r}"]["chosen"]
        else:
            accept = audited = frozen_audited = None
        after = (made["policy"], *evo_inputs, f"eval_wm_evo{r}")
        tasks, trust_stage = run.train_tasks(
            name, (last.policy, wm, rm["path"], merged, threshold), after, audited
        )
        last_input = (last.policy, wm, rm["path"], merged, threshold, tasks)
        policy = p.run(
            name,
            lambda s=name, pol=last.policy, w=wm, rr=rm, m=merged, t=threshold, tk=tasks: rl(
                cfg, run_dir / s, pol, w, rr["path"], m, p.data_steps(), t, tk, run.ranks, anchor
            ),
            rl_steps,
            reads="rl",
            ranks=run.ranks,
            after=_after(*after, trust_stage, accept, anchor_stage),
            outputs=(name,),
        )
        stages = {"policy": name, "wm": wm_stage, "rm": rm_stage,
                  "check": f"eval_wm_evo{r}"}  # fmt: skip
        evolved = _Evolved(policy, wm, rm, threshold, stages)
        run.evaluate(name, policy, (name,), ce.videos and r == ce.refinements)
    frozen_same_as = None
    if ce.frozen_control and frozen_input is not None:
        frozen_tasks, frozen_trust = run.train_tasks(
            "frozen_control", frozen_input, frozen_after, frozen_audited
        )
        frozen_after = _after(*frozen_after, frozen_trust, accept)
        frozen_input = (*frozen_input, frozen_tasks)
    if ce.frozen_control and frozen_input is not None and frozen_input == last_input:
        # Acceptance kept the current world model (and the judge is kept): the control would
        # repeat the last stage's RL from the same inputs, differing only in its randomness.
        frozen_same_as = f"stage{ce.refinements + 1}"
        run.trust.pop("frozen_control", None)
    elif ce.frozen_control and frozen_input is not None:
        pol, w, rpath, m, t, tk = frozen_input
        out = run_dir / "frozen_control"
        control = p.run(
            "frozen_control",
            lambda: rl(cfg, out, pol, w, rpath, m, p.data_steps(), t, tk, run.ranks, anchor),
            rl_steps,
            reads="rl",
            ranks=run.ranks,
            after=_after(*frozen_after, anchor_stage),
            outputs=("frozen_control",),
        )
        run.evaluate("frozen_control", control, ("frozen_control",), False)
    if ce.simulator_control and run.base is not None:
        # The same RL, as many steps as the imagined stages took, in the real simulator.
        steps = (ce.refinements + 1) * cfg.training.steps
        base_policy, base_after = run.base
        control = p.run(
            SIMULATOR_CONTROL,
            lambda: simulator_rl(cfg, run_dir / SIMULATOR_CONTROL, base_policy, steps, run.ranks),
            rl_steps,
            reads="simulator_rl",
            ranks=run.ranks,
            after=base_after,
            outputs=(SIMULATOR_CONTROL,),
        )
        run.evaluate(SIMULATOR_CONTROL, control, (SIMULATOR_CONTROL,), False)
    reached = {name: item for name, item in p.state.items() if name in p.visited}
    walls = {name: item["wall_s"] for name, item in reached.items()}
    real_steps = {name: item.get("real_steps") for name, item in reached.items()}
    ranks = {name: item["ranks"] for name, item in reached.items() if "ranks" in item}
    activity = {
        name: act
        for name in run.evals
        if name != "base" and (act := rl_activity(run_dir / name)) is not None
    }
    for name, figures in run.checks.items():  # the health check's figures beside training's
        run.reliability.setdefault(name, {}).update(
            {k: v for k, v in figures.items() if k not in ("gate_step", "real_steps")}
        )
    report = write_report(
        run_dir,
        cfg,
        run.evals,
        run.reliability,
        run.reward_metrics,
        walls,
        real_steps,
        activity,
        run.acceptance,
        frozen_same_as,
        run.trust,
        ranks,
        run.closed_loop,
    )
    log_report_media(run_dir, cfg, list(run.evals), list(run.reliability))
    return report
