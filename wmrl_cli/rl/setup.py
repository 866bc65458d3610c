"""Assembling RL from the config: policy, world model, reward model, reset set, the env of this
rank (imagined; judged by the real simulator with `reward_model.source=simulator`; or the real
simulator with `algorithm.env=simulator`), and the real-simulator evaluation callback.

Each input is a wmrl run or model directory, a directory in a publisher's layout (told apart by
its files), or the name of a published asset (`wmrl download --list`), found in `assets_dir`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.assets.layout import asset_dir, asset_path, download_command
from wmrl_cli.assets.registry import ASSETS, get_asset
from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.imagined import Start, check_source, imagine_store
from wmrl_cli.data.reset_set import ResetEntry, load_rlinf_reset_set, reset_set_from_store
from wmrl_cli.envs.imagined import ImaginedEnv, load_imagining_world_model
from wmrl_cli.envs.interface import Env
from wmrl_cli.envs.reset_sampler import task_ids
from wmrl_cli.envs.simulator_judged import SimulatorJudgedEnv
from wmrl_cli.envs.simulator_rl import SimulatorRLEnv, StoredStartsSimulatorEnv
from wmrl_cli.envs.verified import VerifiedEnv
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.policies.registry import resolve_policy_dir
from wmrl_cli.rewards.calibration import judge_threshold
from wmrl_cli.rewards.loading import reward_model_source
from wmrl_cli.sims.backends import resolve_simulator, simulator_class, simulator_suite
from wmrl_cli.sims.libero_suites import get_libero_suite
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.published import published_layout

_HINTS = {
    "policy.name": "pass --policy RUN (a wmrl sft run, a policy directory or an asset name)",
    "world_model.path": "pass --world-model RUN (a wmrl train-wm run, a model directory or an "
    "asset name)",
    "reward_model.path": "pass --reward-model RUN (a wmrl train-reward run, a .pth file or an "
    "asset name)",
    "world_model.reset_set": "pass --reset-set STORE (wmrl rollout --kir output), an RLinf "
    "folder or an asset name",
}


def _required(value: str | None, key: str) -> str:
    if not value:
        hint = _HINTS.get(key, "name a world model (a wmrl train-wm run or a model directory)")
        raise WmrlError(f"'{key}' is not set: {hint}")
    return value


@dataclass
class Inputs:
    """The paths train-policy reads, asset names resolved to their download directories."""

    policy: Path
    world_model: Path | None  # None (like the reward model and reset set) in the simulator
    reward_model: Path | None
    reset_set: Path | None
    unnorm_key: str | None = None  # the policy asset's, when the policy is one
    confirm_world_models: list[Path] = field(default_factory=list)  # one per confirming draw
    # the directories of published assets not downloaded yet: only a plan resolves those
    # (`resolve_inputs(missing_assets_ok=True)`), counting them at their published size
    not_downloaded: frozenset[Path] = frozenset()


def _missing_assets(failures: list[tuple[str, WmrlError]], assets_dir: Path | None) -> WmrlError:
    """One line for one or several assets that are not (completely) downloaded."""
    if len(failures) == 1:
        return failures[0][1]
    # asset_path's messages end with "; run: <command>": keep one command that fetches them all.
    details = "; ".join(str(exc).split("; run: ")[0] for _, exc in failures)
    command = download_command(" ".join(name for name, _ in failures), assets_dir)
    return WmrlError(f"{details}; run: {command}")


def resolve_inputs(cfg: RunConfig, missing_assets_ok: bool = False) -> Inputs:
    """Every input of RL as a path (in the simulator: the policy only); fails before anything
    is written.

    A value that names a published asset (`wmrl download --list`) resolves to its directory
    under `assets_dir`; assets that are missing or incomplete are reported together, with the
    one `wmrl download` command that fetches them. Anything else is a path. With
    `missing_assets_ok` (the memory plan of `train-policy --plan`), an asset that is not
    downloaded resolves to the directory it would have, listed in `Inputs.not_downloaded`.
    """
    rm = cfg.reward_model
    if rm.confirm_world_models and len(rm.confirm_world_models) != rm.confirm_draws:
        raise ConfigError(
            f"invalid value for 'reward_model.confirm_world_models': it names "
            f"{len(rm.confirm_world_models)} world model(s) for confirm_draws={rm.confirm_draws}"
            "; one per confirming draw"
        )
    values = {key: _required(value, key) for key, value in _values(cfg).items()}
    failures: list[tuple[str, WmrlError]] = []
    assets: dict[str, Path] = {}
    absent: set[Path] = set()
    for name in dict.fromkeys(v for v in values.values() if v in ASSETS):
        target = asset_dir(name, cfg.assets_dir)
        try:
            assets[name] = asset_path(name, cfg.assets_dir)
        except WmrlError as exc:
            # a plan counts an asset that is not there at all; an incomplete or damaged one
            # fails as at launch
            if missing_assets_ok and not target.exists():
                assets[name] = target
                absent.add(target)
            else:
                failures.append((name, exc))
    if failures:
        raise _missing_assets(failures, cfg.assets_dir)
    paths = {key: assets.get(value, Path(value)) for key, value in values.items()}
    for key, path in paths.items():
        if key != "policy.name" and path not in absent and not path.exists():
            raise WmrlError(f"{key}: {values[key]} does not exist")
    world_model = paths.get("world_model.path")
    if world_model is not None:  # the backend it holds: its layout's, or (absent) the asset's
        holds = (
            ASSETS[values["world_model.path"]].backend
            if world_model in absent
            else published_layout(world_model)
        )
        holds = holds.removeprefix("rlinf-") if holds else None
        if holds is not None and holds != cfg.world_model.backend:
            raise WmrlError(
                f"world_model.backend is {cfg.world_model.backend}, but "
                f"{values['world_model.path']} holds RLinf's {holds} world model"
            )
    policy = paths["policy.name"]
    policy = policy if policy in absent else resolve_policy_dir(str(policy))
    if policy is None:
        raise WmrlError(f"'{cfg.policy.name}' is not a policy checkpoint; {_HINTS['policy.name']}")
    policy_asset = values["policy.name"] if values["policy.name"] in ASSETS else None
    reward = paths.get("reward_model.path")
    return Inputs(
        policy=policy,
        world_model=world_model,
        reward_model=reward if reward is None or reward in absent else reward_model_source(reward),
        reset_set=paths.get("world_model.reset_set"),
        unnorm_key=get_asset(policy_asset).unnorm_key if policy_asset else None,
        confirm_world_models=[path for key, path in paths.items() if key.startswith(_CONFIRM)],
        not_downloaded=frozenset(absent),
    )


_CONFIRM = "reward_model.confirm_world_models"


def _values(cfg: RunConfig) -> dict[str, str | None]:
    if cfg.algorithm.env == "simulator":
        values = {"policy.name": cfg.policy.name}
        if cfg.world_model.reset_set:  # optional: start from its stored states
            values["world_model.reset_set"] = cfg.world_model.reset_set
        return values
    values = {
        "world_model.path": cfg.world_model.path,
        "reward_model.path": cfg.reward_model.path,
        "world_model.reset_set": cfg.world_model.reset_set,
        "policy.name": cfg.policy.name,
    }
    if cfg.reward_model.source == "simulator" and not cfg.reward_model.path:
        del values["reward_model.path"]  # optional: the simulator judges
    for j, path in enumerate(cfg.reward_model.confirm_world_models):
        values[f"{_CONFIRM}[{j}]"] = path
    return values


def check_inputs(cfg: RunConfig) -> Inputs:
    """Fail before anything is written if an input or the evaluation simulator is missing."""
    inputs = resolve_inputs(cfg)
    if cfg.algorithm.env == "simulator":
        check_simulator_rl(cfg)
    elif cfg.algorithm.eval_trials or _replays(cfg):
        evaluation_simulator(cfg)
    if cfg.algorithm.train_tasks is not None:  # names of the env's tasks
        task_ids(cfg.algorithm.train_tasks, env_task_names(cfg, inputs.reset_set))
    return inputs


def env_task_names(cfg: RunConfig, reset_set: Path | None) -> list[str]:
    """The task names the RL env will have: its reset set's, or the simulator suite's."""
    if reset_set and (Path(reset_set) / "index.json").is_file():  # from the index alone
        return store_task_names(EpisodeStore.open(reset_set))
    if reset_set:
        return load_reset_set(cfg, Path(reset_set))[1]
    return list(simulator_suite(resolve_simulator(cfg.simulator)).task_names)


def store_task_names(store: EpisodeStore) -> list[str]:
    """An episode store's task names by task id (`task<id>` for an id it holds no episode of)."""
    names: dict[int, str] = {int(m["task_id"]): m["task_name"] for m in store.index}
    return [names.get(t, f"task{t}") for t in range(1 + max(names))]


def _replays(cfg: RunConfig) -> bool:
    """Whether the imagined env also runs the real simulator (as judge, or as auditor)."""
    source = cfg.reward_model.source
    return source in ("simulator", "verified") or cfg.reward_model.audit_with_simulator


_IMAGINED_ONLY: dict[str, Callable[[RunConfig], str | None]] = {
    "world_model.path": lambda cfg: cfg.world_model.path,
    "reward_model.path": lambda cfg: cfg.reward_model.path,
}


def check_simulator_rl(cfg: RunConfig) -> None:
    """RL in the real simulator: the simulator exists, and its training init ids stay clear of
    the evaluation seeds (a reset set's stored starts are the user's to keep apart)."""
    unused = [key for key, value in _IMAGINED_ONLY.items() if value(cfg)]
    if unused:
        raise ConfigError(
            f"invalid value for '{unused[0]}': algorithm.env=simulator uses no world model or "
            "reward model"
        )
    if cfg.reward_model.source != "model":
        raise ConfigError(
            f"invalid value for 'reward_model.source': '{cfg.reward_model.source}' judges the "
            "imagined env; algorithm.env=simulator is judged by the simulator already"
        )
    if cfg.reward_model.audit_with_simulator:
        raise ConfigError(
            "invalid value for 'reward_model.audit_with_simulator': it audits the imagined "
            "env's reward model; algorithm.env=simulator is judged by the simulator already"
        )
    sim = resolve_simulator(cfg.simulator)
    simulator_class(sim)
    alg = cfg.algorithm
    evaluated = alg.eval_trials * len(simulator_suite(sim).task_names)
    if alg.eval_trials and alg.sim_init_offset < evaluated:
        raise ConfigError(
            f"invalid value for 'algorithm.sim_init_offset': {alg.sim_init_offset} overlaps "
            f"the evaluation init ids 0..{evaluated - 1}"
        )


def rl_simulator(cfg: RunConfig, num_envs: int, max_steps: int | None = None) -> Env:
    """`num_envs` real simulator envs as RL steps them: episodes truncated at `max_steps`
    (default `algorithm.max_episode_steps`) by the simulator itself, terminated at success."""
    limit = max_steps or cfg.algorithm.max_episode_steps
    sim_cfg = resolve_simulator(cfg.simulator).model_copy(
        update={"max_steps": limit, "terminate_on_success": True}
    )
    # RL reads the observations at chunk ends and the per-step success flags, never the frames
    # between.
    return simulator_class(sim_cfg)(sim_cfg, num_envs, render_every_step=False)


def build_simulator_env(
    cfg: RunConfig, num_envs: int, inputs: Inputs | None = None
) -> SimulatorRLEnv | StoredStartsSimulatorEnv:
    """The real simulator as the RL env of this rank (`algorithm.env=simulator`): from fresh
    training init ids, or, with `world_model.reset_set`, from that reset set's stored states
    with imagination's step counting (the start-distribution control)."""
    reset_set = inputs.reset_set if inputs is not None else cfg.world_model.reset_set
    if reset_set:
        entries, task_names = load_reset_set(cfg, Path(reset_set))
        horizon = cfg.algorithm.max_episode_steps + max(e.step for e in entries)
        return StoredStartsSimulatorEnv(
            rl_simulator(cfg, num_envs, max_steps=min(horizon + 1, 10_000)),
            entries,
            task_names,
            cfg.algorithm.max_episode_steps,
            kir_step_reset=cfg.algorithm.kir_step_reset,
            reward_coef=cfg.reward_model.reward_coef,
        )
    sim = rl_simulator(cfg, num_envs)
    return SimulatorRLEnv(
        sim,
        cfg.algorithm.sim_init_ids,
        cfg.algorithm.sim_init_offset,
        reward_coef=cfg.reward_model.reward_coef,
    )


def build_env(cfg: RunConfig, num_envs: int, device: str, inputs: Inputs | None = None) -> Env:
    """The RL env `algorithm.env` names, with `num_envs` envs (one rank's share)."""
    if cfg.algorithm.env == "simulator":  # no judge: the reward model's settings are moot
        return build_simulator_env(cfg, num_envs, inputs)
    exact = exact_groups(cfg, num_envs)  # checked before any model loads
    imagined = build_imagined_env(cfg, num_envs, device, inputs)
    if not _replays(cfg):
        return imagined
    # The simulator never truncates first: the imagined env's step count decides, as it does
    # for keyframe entries recorded past the episode limit.
    horizon = cfg.algorithm.max_episode_steps + max(e.step for e in imagined.reset_set)
    limit = min(horizon + 1, 10_000)
    if cfg.reward_model.source == "verified":  # the judge's calls replayed, one at a time
        if cfg.reward_model.audit_with_simulator:
            raise ConfigError(
                "invalid value for 'reward_model.audit_with_simulator': "
                "reward_model.source=verified replays every call already"
            )
        keep = cfg.reward_model.keep_verified_calls
        replay = rl_simulator(cfg, 1, max_steps=limit)
        # the recall floor's envs are the first groups of every reset: the sampler draws a
        # rollout's groups in random order (envs/reset_sampler.py), a random sample of starts
        # (the per-task floor's, any env of a reset: the simulator has one beside each)
        by_task = cfg.reward_model.task_recall_floor > 0
        first = exact * cfg.algorithm.group_size
        sim_envs = num_envs if by_task else first
        exact_sim = rl_simulator(cfg, sim_envs, max_steps=limit) if sim_envs else None
        return VerifiedEnv(
            imagined, replay, keep, exact_sim, exact_first=first, exact_by_task=by_task
        )
    sim = rl_simulator(cfg, num_envs, max_steps=limit)
    coef = cfg.reward_model.reward_coef
    if cfg.reward_model.source == "model":  # the audit: the reward model judges as always
        if imagined.reward_model is None:
            raise ConfigError("reward_model.audit_with_simulator needs a reward model to audit")
        return SimulatorJudgedEnv(imagined, sim, reward_coef=coef, judge="model")
    # The control: imagined observations, the simulator's verdict; the reward model (if any)
    # only recorded beside it.
    threshold, imagined.threshold = imagined.threshold, float("inf")
    env = SimulatorJudgedEnv(imagined, sim, reward_coef=coef)
    if imagined.reward_model is not None:
        env.model_threshold = threshold
    return env


def exact_groups(cfg: RunConfig, envs_per_rank: int) -> int:
    """How many of a rank's groups per rollout verified imagination judges exactly
    (`reward_model.exact_fraction` of them, half rounded up); one line where the fraction
    cannot apply. The simulator env has no judge: there the setting is moot. Checks the
    per-task recall floor (`reward_model.task_recall_floor`) as well."""
    fraction = cfg.reward_model.exact_fraction
    if cfg.algorithm.env == "simulator":
        return 0
    if cfg.reward_model.task_recall_floor and cfg.reward_model.source != "verified":
        raise ConfigError(
            "invalid value for 'reward_model.task_recall_floor': it applies to "
            "reward_model.source=verified (set it to 0)"
        )
    if not fraction:
        return 0
    if cfg.reward_model.source != "verified":
        raise ConfigError(
            "invalid value for 'reward_model.exact_fraction': it applies to "
            "reward_model.source=verified (set it to 0)"
        )
    per_rank = envs_per_rank // cfg.algorithm.group_size
    groups = math.floor(fraction * per_rank + 0.5)
    if groups == 0:
        raise ConfigError(
            f"invalid value for 'reward_model.exact_fraction': {fraction} of the {per_rank} "
            f"groups a rollout has per rank rounds to none (expected at least "
            f"{0.5 / per_rank:.3g})"
        )
    return groups


def verdict_line(env: Env, inputs: Inputs) -> str | None:
    """One line for the run's log: who judges success in `env` and at what threshold (None in
    the real simulator, where success is the simulator's own)."""
    judged = isinstance(env, SimulatorJudgedEnv)
    imagined = env.imagined if judged or isinstance(env, VerifiedEnv) else env
    if not isinstance(imagined, ImaginedEnv):
        return None
    replay = "the simulator replaying each episode's actions (real steps)"
    if judged and env.judge == "simulator":
        return f"success judged by {replay}"
    held = imagined.success_frames
    line = (
        f"success judged by {inputs.reward_model} at threshold {imagined.threshold:.3f} "
        f"({imagined.threshold_source})"
        + (", on scores rounded to 0/1 (p > 0.5)" if imagined.round_scores else "")
        + (f", held {held} frames" if held > 1 else "")
        + (
            f", repeated by {imagined.confirm_draws} other world-model draw(s)"
            + (
                f" of {', '.join(map(str, inputs.confirm_world_models))}"
                if inputs.confirm_world_models
                else ""
            )
            if imagined.confirm_draws
            else ""
        )
    )
    if isinstance(env, VerifiedEnv):
        line = f"{line}; each call confirmed by the simulator replaying it (real steps)"
        if env.exact_first:
            line += f"; the first {env.exact_first} of {env.num_envs} envs judged by the simulator"
        if env.exact_by_task:
            line += (
                "; a task's envs judged by the simulator until the judge shows its recall "
                "there (reward_model.task_recall_floor)"
            )
        return line
    return f"{line}; audited by {replay}" if judged else line


def evaluation_simulator(cfg: RunConfig) -> type:
    """The real simulator class of `cfg.simulator` (LIBERO: checked to be installed)."""
    try:
        return simulator_class(resolve_simulator(cfg.simulator))
    except WmrlError as exc:
        raise WmrlError(
            f"{exc}; or set algorithm.eval_trials=0 to train without real-simulator evaluation"
        ) from None


def load_reset_set(cfg: RunConfig, path: Path | None = None) -> tuple[list[ResetEntry], list[str]]:
    """Reset entries and task names from an episode store (with its kir.json) or RLinf layout."""
    from wmrl_cli.data.kir import read_keyframes

    path = path or Path(_required(cfg.world_model.reset_set, "world_model.reset_set"))
    if (path / "index.json").is_file():
        store = EpisodeStore.open(path)
        store.require_simulator_states("to start a reset set from")
        keys = read_keyframes(path) if cfg.algorithm.enable_kir else []
        ids = [int(m["id"]) for m in store.index]
        entries = reset_set_from_store(store, ids, keys, cfg.world_model.context_frames)
        return entries, store_task_names(store)
    if path.is_dir():
        entries = load_rlinf_reset_set(
            path,
            cfg.algorithm.enable_kir,
            cfg.world_model.context_frames,
            cfg.algorithm.kir_context,
        )
        sim = resolve_simulator(cfg.simulator)
        if sim.name == "libero":
            return entries, assign_libero_tasks(entries, sim.suite, path)
        return entries, [f"task{t}" for t in range(1 + max(e.task_id for e in entries))]
    raise WmrlError(f"{path}: not an episode store or an RLinf reset folder")


def _words(text: str) -> str:
    return " ".join(text.lower().replace("_", " ").rstrip(".").split())


def assign_libero_tasks(entries: list[ResetEntry], suite_name: str, source: Path) -> list[str]:
    """Task ids of RLinf reset entries from their instructions, in LIBERO's task order (what a
    task-embedding reward model was trained on; the files carry no task id); the task names."""
    suite = get_libero_suite(suite_name)
    index = {_words(text): i for i, text in enumerate(suite.instructions)}
    unknown = sorted({e.instruction for e in entries if _words(e.instruction) not in index})
    if unknown:
        raise WmrlError(
            f"{source}: reset instructions that are no {suite_name} task: "
            + "; ".join(repr(u) for u in unknown[:3])
            + (f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else "")
        )
    for entry in entries:
        entry.task_id = index[_words(entry.instruction)]
    return suite.as_suite().task_names


def load_policy(inputs: Inputs, device: str, dtype: str = "float32"):
    """The base policy, with the asset's unnorm key. A published (prismatic) checkpoint, stored
    in bf16, loads in `dtype`: RL's weights' dtype (`training.param_dtype`: float32 master
    weights by default, training.bf16 turning on bf16 autocast); a wmrl policy as it was saved."""
    from wmrl_cli.policies.checkpoint import from_pretrained, is_prismatic, read_config

    dtype = dtype if is_prismatic(read_config(inputs.policy)) else None
    return from_pretrained(inputs.policy, device=device, dtype=dtype, unnorm_key=inputs.unnorm_key)


def load_replay_world_model(
    cfg: RunConfig, path: Path, source: EpisodeStore, starts: list[Start], device: str
) -> WorldModel:
    """The world model that imagines `source`'s recorded actions (`imagined_starts`), as
    imagination runs it, at the stored frames' size; a store it cannot read is a one-line error."""
    height, width = source.load(starts[0].episode_id).frames.shape[1:3]
    world_model = load_imagining_world_model(path, height, width, cfg, device)
    check_source(source, world_model)
    return world_model


def imagine_replay(
    cfg: RunConfig,
    world_model: WorldModel,
    name: str,
    source: EpisodeStore,
    starts: list[Start],
    out: EpisodeStore,
) -> None:
    """`imagine_store` with the run's batch (`simulator.num_envs`), seed and progress display:
    the one call behind `wmrl rollout --world-model --replay` and co-evolve's imagined reward
    data."""
    imagine_store(
        world_model,
        source,
        out,
        starts,
        batch_size=cfg.simulator.num_envs,
        world_model_name=name,
        seed=cfg.simulator.seed,
        progress=cfg.logging.progress,
    )


def build_imagined_env(
    cfg: RunConfig, num_envs: int, device: str, inputs: Inputs | None = None
) -> ImaginedEnv:
    from wmrl_cli.rewards.loading import load_reward_model

    inputs = inputs or resolve_inputs(cfg)
    entries, task_names = load_reset_set(cfg, inputs.reset_set)
    height, width = entries[0].reference.shape[:2]
    world_model = load_imagining_world_model(inputs.world_model, height, width, cfg, device)
    if cfg.compile_world_model:  # imagination only: nothing here saves the world model
        world_model.transformer = torch.compile(world_model.transformer)
    reward_model = None
    if inputs.reward_model is not None:  # None: reward_model.source=simulator judges alone
        reward_model = load_reward_model(inputs.reward_model).to(device)
    threshold, source = judge_threshold(
        cfg.reward_model.success_threshold, reward_model, inputs.reward_model
    )
    # only where the reward model decides (not where the simulator judges or labels)
    confirm_draws = cfg.reward_model.confirm_draws if cfg.reward_model.source == "model" else 0
    confirm_paths = inputs.confirm_world_models if confirm_draws else []
    return ImaginedEnv(
        world_model,
        reward_model,
        entries,
        task_names,
        num_envs,
        cfg.algorithm.max_episode_steps,
        success_threshold=threshold,
        use_rel_reward=cfg.reward_model.use_rel_reward,
        reward_coef=cfg.reward_model.reward_coef,
        seed=cfg.simulator.seed,
        action_transform=world_model_actions(cfg),
        round_scores=cfg.reward_model.round_scores,
        zero_first_baseline=cfg.reward_model.first_step_baseline == "zero",
        noise_seed=cfg.world_model.noise_seed,
        kir_step_reset=cfg.algorithm.kir_step_reset,
        reward_task_ids=None
        if reward_model is None
        else reward_task_ids(cfg, reward_model.kind, inputs.reward_model),
        threshold_source=source,
        success_frames=cfg.reward_model.success_frames,
        # only where the reward model decides (not where the simulator judges or labels)
        confirm_draws=confirm_draws,
        confirm_models=[
            load_imagining_world_model(path, height, width, cfg, device) for path in confirm_paths
        ],
    )


def reward_task_ids(cfg: RunConfig, kind: str, source: Path) -> list[int] | None:
    """The reward model's id of each env task, where it numbers tasks its own way: a published
    (RLinf .pth) task-embedding model on a LIBERO suite counts tasks in RLinf's order; None
    (the env's ids) otherwise."""
    sim = resolve_simulator(cfg.simulator)
    if kind != "taskemb_resnet" or source.suffix != ".pth" or sim.name != "libero":
        return None
    from wmrl_cli.rewards.resnet import rlinf_task_ids

    return rlinf_task_ids(get_libero_suite(sim.suite).instructions)


def world_model_actions(cfg: RunConfig) -> Callable[[np.ndarray], np.ndarray] | None:
    """The policy -> world-model action conversion: RLinf feeds its LIBERO world models the
    actions the real LIBERO env gets (gripper flipped to LIBERO's sign); Meta-World: none."""
    if cfg.simulator.name == "libero":
        from wmrl_cli.sims.libero_suites import to_libero_actions

        return to_libero_actions
    return None


def real_eval_callback(cfg: RunConfig, run_dir: Path):
    """Evaluate in the real simulator (`simulator.name`): success_once overall and per task
    (eval/*); None when algorithm.eval_trials is 0."""
    from wmrl_cli.evaluation.policy_eval import evaluate_with_config
    from wmrl_cli.files import atomic_write_text
    from wmrl_cli.policies.registry import LearnedPolicy

    if not cfg.algorithm.eval_trials:
        return None
    sim_cfg = resolve_simulator(cfg.simulator)
    simulator = evaluation_simulator(cfg)

    def evaluate(model, step: int) -> dict[str, float]:
        policy = LearnedPolicy(model, top_k=cfg.policy.top_k, seed=sim_cfg.seed)
        with simulator(sim_cfg, render_every_step=False) as sim:
            report = evaluate_with_config(sim, policy, sim_cfg, cfg, cfg.algorithm.eval_trials)
        model.train()
        atomic_write_text(run_dir / "eval" / f"step_{step:06d}.json", report.to_json())
        out = {"eval/success_once": report.overall}
        out.update({f"eval/success_once/{k}": v for k, v in report.per_task.items()})
        return out

    return evaluate
