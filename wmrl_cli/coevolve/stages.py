"""What each stage of `wmrl co-evolve` does (pipeline.py orders them): collect real rollouts, merge
stores, evaluate a policy in the real simulator, train or fine-tune the world and reward models,
RL in imagination, and RL in the simulator as the control. The simulator is the one the config
names (Meta-World, or LIBERO); inputs are wmrl runs, published folders or asset names, as
`wmrl train-policy` takes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig, dump_config
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.files import atomic_write_text
from wmrl_cli.logging import read_metric_rows
from wmrl_cli.ranks import on_ranks

REAL_STEPS_FILE = "real_steps_before.json"  # in an RL stage's folder: env/real_steps at start


def store_steps(path: str | Path) -> int:
    """Real environment steps behind an episode store: the sum of its episodes' lengths."""
    return EpisodeStore.open(path).real_steps()


def rl_steps(policy_dir: str) -> int:
    """Real steps an RL stage consumed: the growth of its last `env/real_steps`."""
    run = Path(policy_dir).parent
    last = [row for row in read_metric_rows(run) if "env/real_steps" in row][-1]
    return int(last["env/real_steps"]) - int(json.loads((run / REAL_STEPS_FILE).read_text()))


def eval_steps(result: dict[str, Any]) -> int:
    return int(result["real_steps"])


def sub_config(cfg: RunConfig, output_dir: Path, **changes: Any) -> RunConfig:
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


def collect(
    cfg: RunConfig, out: Path, policy: str, per_task: int, seed: int, perturbed: bool = True
) -> str:
    """Real rollouts into `out` (temp dir, then rename), run on after success, with KIR
    keyframes; the actions perturbed as `rollout.perturbation` says, or (`perturbed` false) as
    the policy chose them."""
    from wmrl_cli.config.schema import PerturbationConfig
    from wmrl_cli.jobs.collect_rollouts import collect_rollouts

    if (out / "index.json").is_file():
        return str(out)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    sub = sub_config(
        cfg,
        tmp,
        policy__name=policy,
        rollout__episodes_per_task=per_task,
        simulator__seed=seed,
        simulator__terminate_on_success=False,
    )
    sub.rollout.kir.enabled = True
    if not perturbed:
        sub.rollout.perturbation = PerturbationConfig()
    collect_rollouts(sub)
    tmp.rename(out)
    return str(out)


def merge(stores: list[str], out: Path, cfg: RunConfig) -> str:
    """One store holding the episodes of several (copied), KIR recomputed over all."""
    from wmrl_cli.data.kir import write_keyframes

    if (out / "index.json").is_file():
        return str(out)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged = EpisodeStore(tmp)
    for path in stores:
        for episode in EpisodeStore.open(path):
            merged.add([episode])
    write_keyframes(merged, cfg.rollout.kir)
    tmp.rename(out)
    return str(out)


def evaluate(cfg: RunConfig, policy_dir: str, out: Path, videos: bool) -> dict[str, Any]:
    """The policy (a run, a checkpoint or a policy asset) on every task x `eval_trials` in the
    configured simulator (`eval --policy`'s job)."""
    from wmrl_cli.jobs.evaluate_policy import evaluate_in_simulator

    sub = sub_config(cfg, out, policy__name=policy_dir)
    report = evaluate_in_simulator(sub, cfg.coevolve.eval_trials, out, videos=videos)
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


def train_wm(
    cfg: RunConfig, data: str, out: Path, init: str | None, steps: int, ranks: int = 1
) -> str:
    """A world model from scratch, or `steps` more on `data` from `init` (a wmrl model, a
    published folder or an asset name: what `train-wm --init` takes); on `ranks` processes
    (ranks.py; `world_model.sharding` says whether they shard the denoiser)."""
    from wmrl_cli.training.init_sources import resolve_init

    sub = sub_config(cfg, out)
    source = None
    if init is not None:
        sub.world_model.steps = steps
        source = str(resolve_init(init, cfg.assets_dir))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", dump_config(sub))  # what this stage ran with
    return _run_job("train-wm", sub, out, ranks, data, source or "")


def train_wm_job(sub: RunConfig, out: Path, data: str, init: str | None = None) -> str:
    """A world-model stage's training on this process's rank (`train_wm`); the model's
    folder."""
    from wmrl_cli.training.world_model_trainer import WorldModelTrainer

    store = EpisodeStore.open(data)
    a_dim = int(store.load(0).actions.shape[1])
    return str(WorldModelTrainer(sub, out, store, a_dim).run(init=init or None))


def imagine(cfg: RunConfig, world_model: str, data: str, out: Path) -> str:
    """The world model's imagined rollouts of `data`'s recorded actions from steps 0, K, 2K, ...
    of every episode (`coevolve.reward_imagined_*`), sampled as RL samples, each frame labelled
    by the recorded outcome: the reward model's imagined training frames. Written to a temporary
    store, then renamed: a finished store is reused, an interrupted one redone."""
    import torch

    from wmrl_cli.data.imagined import imagined_starts
    from wmrl_cli.jobs.imagine_replay import imagine_replay, load_replay_world_model

    if (out / "index.json").is_file():
        return str(out)
    ce = cfg.coevolve
    source = EpisodeStore.open(data)
    starts = imagined_starts(source, ce.reward_imagined_start_every, ce.reward_imagined_horizon)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_replay_world_model(cfg, Path(world_model), source, starts, device)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    imagine_replay(cfg, model, world_model, source, starts, EpisodeStore(tmp))
    tmp.rename(out)
    return str(out)


def imagine_policy(
    cfg: RunConfig, policy: str, world_model: str, reset_set: str, out: Path, seed: int
) -> str:
    """`coevolve.reward_policy_rollouts_per_task` imagined episodes per task of `policy` in
    `world_model` from `reset_set`'s starts, labelled by the simulator: the reward model's
    training data on the policy's own imagined rollouts. Written to a temporary store, then
    renamed: a finished store is reused, an interrupted one redone."""
    from wmrl_cli.jobs.imagine_policy import imagine_policy as roll
    from wmrl_cli.jobs.imagine_policy import resolve_labelling_inputs

    if (out / "index.json").is_file():
        return str(out)
    sub = sub_config(
        cfg,
        out,
        policy__name=policy,
        world_model__path=world_model,
        world_model__reset_set=reset_set,
        simulator__seed=seed,
        simulator__num_envs=cfg.algorithm.num_envs,  # batched as RL batches its rollouts
    )
    inputs = resolve_labelling_inputs(sub)
    tmp = out.with_name(f".{out.name}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    roll(sub, EpisodeStore(tmp), cfg.coevolve.reward_policy_rollouts_per_task, inputs)
    tmp.rename(out)
    return str(out)


def train_rm(
    cfg: RunConfig,
    data: str,
    out: Path,
    steps: int,
    init: str | None = None,
    imagined: str | None = None,
    labelled: str | None = None,
    real: str | None = None,
) -> dict[str, Any]:
    """A reward model from scratch, or fine-tuned from `init` (a wmrl model, an RLinf `*rm.pth`,
    a folder holding one or an asset name), on `data` and, if given, the `imagined` store, the
    `labelled` policy episodes (whose episode-level F1 then sets the threshold) and the `real`
    rollouts collected for the judge (`coevolve.reward_real_rollouts_per_task`). A
    fine-tuning whose data hold no successful frame on either side of the split keeps `init`,
    and says why (`kept`)."""
    from wmrl_cli.data.episodes import open_stores
    from wmrl_cli.training.init_sources import reward_model_to_fine_tune
    from wmrl_cli.training.reward_trainer import NoSuccessfulFrames, train_reward_model

    store = open_stores([path for path in (data, real, imagined, labelled) if path is not None])
    sub = sub_config(cfg, out, reward_model__steps=steps)
    model = source = None
    if init is not None:
        source, model = reward_model_to_fine_tune(init, store, cfg.assets_dir, sub.reward_model)
    out.mkdir(parents=True, exist_ok=True)
    try:
        model_dir, metrics = train_reward_model(sub, out, store, init=model)
    except NoSuccessfulFrames as exc:
        if source is None:
            raise
        return {"path": str(source), "kept": str(exc)}
    return {
        "path": str(model_dir),
        "f1": metrics.f1,
        "precision": metrics.precision,
        "recall": metrics.recall,
        "threshold": metrics.threshold,
    }


def rl_config(
    cfg: RunConfig,
    out: Path,
    policy: str,
    world_model: str,
    reward_model: str,
    reset_set: str,
    threshold: float | None,
    train_tasks: list[str] | None = None,
    bc_data: str | None = None,
) -> RunConfig:
    """The config of an RL stage in imagination on these inputs, judged at `threshold` (None:
    the configured one), drawing its starts from `train_tasks` (None: as configured), and with
    `bc_data`, cloning that store's successes at `coevolve.bc_anchor` (rl/bc_anchor.py)."""
    sub = sub_config(
        cfg,
        out,
        policy__name=policy,
        world_model__path=world_model,
        reward_model__path=reward_model,
        world_model__reset_set=reset_set,
    )
    if threshold is not None:
        sub.reward_model.success_threshold = threshold
    if train_tasks is not None:
        sub.algorithm.train_tasks = train_tasks
    if bc_data is not None:  # the store first: a coefficient without one is refused
        sub.algorithm.bc_data = bc_data
        sub.algorithm.bc_coef = cfg.coevolve.bc_anchor
    return sub


def rl(
    cfg: RunConfig,
    out: Path,
    policy: str,
    world_model: str,
    reward_model: str,
    reset_set: str,
    real_steps: int,
    threshold: float | None = None,
    train_tasks: list[str] | None = None,
    ranks: int = 1,
    bc_data: str | None = None,
) -> str:
    """RL in imagination; its `env/real_steps` start at `real_steps` (the data before it);
    `threshold`: the success threshold recalibrated on the world model's frames (None: the
    configured one); `train_tasks`: the tasks it draws starts from (None: as configured);
    `bc_data`: the store of real successes it also clones (`coevolve.bc_anchor`). Inputs as
    `train-policy` takes them (published policies in float32 with their unnorm key, bf16
    autocast with `training.bf16`); on `ranks` processes (ranks.py)."""
    sub = rl_config(
        cfg, out, policy, world_model, reward_model, reset_set, threshold, train_tasks, bc_data
    )
    return _train_policy(sub, out, real_steps, ranks)


def simulator_rl(cfg: RunConfig, out: Path, policy: str, steps: int, ranks: int = 1) -> str:
    """The simulator control: `steps` RL steps of the run's algorithm and training settings
    from `policy` in the real simulator (`train-policy --env simulator`), with its true reward;
    its `env/real_steps` count its own steps only, from 0."""
    sub = sub_config(cfg, out, policy__name=policy, algorithm__env="simulator")
    sub.training.steps = steps
    sub.reward_model.audit_with_simulator = False  # nothing imagined to audit
    return _train_policy(sub, out, 0, ranks)


def _train_policy(sub: RunConfig, out: Path, real_steps: int, ranks: int) -> str:
    """`train-policy`'s job on `sub` into `out`, on `ranks` processes; env/real_steps start at
    `real_steps`, kept across a resume. The pipeline evaluates each stage apart; with
    `coevolve.curve_every` the stage is also evaluated every that many steps on the same
    held-out episodes (`out/eval/step_N.json`: the real-steps curve)."""
    curve = sub.coevolve.curve_every
    sub.algorithm.eval_every = curve
    if curve:
        sub.algorithm.eval_trials = sub.coevolve.eval_trials
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", dump_config(sub))  # what this stage ran with
    before = out / REAL_STEPS_FILE
    if not before.is_file():  # a resumed stage keeps the count it started from
        atomic_write_text(before, json.dumps(real_steps))
    return _run_job("train-policy", sub, out, ranks)


def train_policy_job(sub: RunConfig, out: Path) -> str:
    """An RL stage's training on this process's rank, from what `_train_policy` wrote in `out`
    (the stage's config, the real steps before it); the saved policy's folder."""
    from wmrl_cli.jobs.inputs import resolve_inputs
    from wmrl_cli.jobs.train_policy import make_accelerator, train_policy

    real_steps = int(json.loads((out / REAL_STEPS_FILE).read_text()))
    accelerator = make_accelerator(sub)
    # As `train-policy` builds it: the imagined env, with the simulator beside it where the
    # config asks (the reward audit, or the simulator-judged control), or the simulator alone.
    trained = train_policy(
        sub,
        out,
        resolve_inputs(sub),
        accelerator,
        evaluate=sub.coevolve.curve_every > 0,
        real_steps=real_steps,
    )
    return str(trained.path)


# The stage jobs that run on ranks (`co-evolve --num-processes N`, ranks.py): name -> job,
# called as job(stage config, stage folder, *its arguments, as strings).
RANK_JOBS = {"train-policy": train_policy_job, "train-wm": train_wm_job}


def _run_job(job: str, sub: RunConfig, out: Path, ranks: int, *args: str) -> str:
    """Job `job` of the stage in `out` here (one rank) or on `ranks` processes (ranks.py), the
    same function either way; its result."""
    if ranks > 1:
        return on_ranks(job, out, ranks, list(args))
    return RANK_JOBS[job](sub, out, *args)


def _audit(
    cfg: RunConfig,
    out: Path,
    inputs: tuple[str, str, str, str, float | None],
    per_task: int,
    title: str,
) -> Any:
    """`eval --audit` of an RL stage's inputs (policy, world model, judge, starts, threshold):
    `per_task` imagined episodes per task, judged as the stage would judge them and replayed;
    the tally written to out/judge_audit.json, printed, and returned (a `JudgeAudit`)."""
    from wmrl_cli.jobs.audit_policy import audit_policy
    from wmrl_cli.logging import console

    audit = audit_policy(rl_config(cfg, out, *inputs), per_task, out=out)
    console.print(audit.table(title))
    return audit


def audit_world_models(
    cfg: RunConfig,
    out: Path,
    policy: str,
    world_models: dict[str, str],
    reward_model: str,
    reset_set: str,
    threshold: float | None,
) -> dict[str, Any]:
    """The refinement's acceptance: `policy`'s imagined episodes
    (`coevolve.accept_audit_per_task` per task, the same seeded starts) in each of
    `world_models` (name -> path; the current one first), judged by `reward_model` at
    `threshold` (None: its own) as the next RL stage would judge them and replayed in the
    simulator (`eval --audit`). Returns each one's overall tally, the name of the one chosen
    (`choose_world_model`) and the real steps the replays took; out/<name>/judge_audit.json
    per world model, out/acceptance.json."""
    from wmrl_cli.logging import console

    tallies, real_steps = {}, 0
    for name, path in world_models.items():
        audit = _audit(
            cfg, out / name, (policy, path, reward_model, reset_set, threshold),
            cfg.coevolve.accept_audit_per_task,
            f"acceptance: the judge on {policy} in {name} ({path})",
        )  # fmt: skip
        tallies[name] = {"path": path, **audit.summary()["overall"]}
        real_steps += audit.real_steps or 0
    chosen = choose_world_model({name: t["f1"] for name, t in tallies.items()})
    result = {"world_models": tallies, "chosen": chosen, "real_steps": real_steps}
    atomic_write_text(out / "acceptance.json", json.dumps(result, indent=1))
    console.print(f"acceptance: the next stage runs in {chosen} ({tallies[chosen]['path']})")
    return result


def audit_trust(
    cfg: RunConfig,
    out: Path,
    policy: str,
    world_model: str,
    reward_model: str,
    reset_set: str,
    threshold: float | None,
) -> dict[str, Any]:
    """The per-task trust in an RL stage's verdict: `policy`'s imagined episodes
    (`coevolve.trust_audit_per_task` per task) in `world_model`, judged by `reward_model` at
    `threshold` as the stage will judge them, replayed in the simulator. out/judge_audit.json;
    returns its per-task rows (`trust_from_audit` decides) and the replays' real steps."""
    audit = _audit(
        cfg, out, (policy, world_model, reward_model, reset_set, threshold),
        cfg.coevolve.trust_audit_per_task, f"trust: the judge on {policy} in {world_model}",
    )  # fmt: skip
    return {"tasks": audit.summary()["tasks"], "real_steps": audit.real_steps or 0}


def trust_from_audit(cfg: RunConfig, rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The tasks an RL stage trains on, from an audit's per-task rows (`JudgeAudit.summary()`):
    those whose precision clears `coevolve.trust_precision_floor` (within
    `algorithm.train_tasks` where set), and each left-out task's precision and calls."""
    from wmrl_cli.rl.judge_audit import trusted_tasks

    trusted = trusted_tasks(rows, cfg.coevolve.trust_precision_floor)
    if cfg.algorithm.train_tasks is not None:
        trusted = [name for name in trusted if name in cfg.algorithm.train_tasks]
    excluded = {
        name: {"precision": row["precision"], "tp": row["tp"], "fp": row["fp"]}
        for name, row in rows.items()
        if name not in trusted
    }
    return {"train_tasks": trusted, "excluded": excluded}


def task_successes(store: str) -> dict[str, tuple[int, int]]:
    """Per task of an episode store (its index alone): (episodes that succeed, episodes)."""
    counts: dict[str, list[int]] = {}
    for meta in EpisodeStore.open(store, verify=False).index:
        row = counts.setdefault(meta["task_name"], [0, 0])
        row[0] += int(bool(meta["success"]))
        row[1] += 1
    return {task: (wins, n) for task, (wins, n) in counts.items()}


def closed_loop_tasks(
    imagined: dict[str, tuple[int, int]],
    real: dict[str, tuple[int, int]],
    floor: float,
    within: list[str] | None = None,
) -> dict[str, Any]:
    """The tasks RL in the world model trains on (of `imagined`'s, within `within` where
    given): all but those where the policy acting in the world model (`imagined`: successes,
    episodes) succeeds less than `floor` times as often as on real frames (`real`). A task
    without a real success stays: there is nothing its loop could lose."""
    excluded: dict[str, dict[str, list[int]]] = {}
    kept = []
    for task, (wins, n) in imagined.items():
        if within is not None and task not in within:
            continue
        real_wins, real_n = real.get(task, (0, 0))
        if real_wins and wins / n < floor * real_wins / real_n:
            excluded[task] = {"imagined": [wins, n], "real": [real_wins, real_n]}
        else:
            kept.append(task)
    return {"train_tasks": kept, "excluded": excluded, "floor": floor}


def choose_world_model(f1: dict[str, float | None]) -> str:
    """The name with the highest F1 of the verdict against the replays, the first (the current
    world model) on a tie. No F1 (no call and no real success: no signal) counts as 0."""
    scores = {name: value or 0.0 for name, value in f1.items()}
    return max(scores, key=lambda name: scores[name])  # max keeps the first of equals


def wm_reliability(model_dir: str) -> dict[str, Any]:
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
