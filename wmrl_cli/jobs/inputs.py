"""What RL reads, resolved and checked before anything loads: the policy, world model, reward
model and reset set as paths (`Inputs`), the settings that must agree with them, and the reset
set's entries and task names.

Each input is a wmrl run or model directory, a directory in a publisher's layout (told apart by
its files), or the name of a published asset (`wmrl download --list`), found in `assets_dir`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wmrl_cli.assets.layout import asset_dir, asset_path, download_command
from wmrl_cli.assets.registry import ASSETS, get_asset
from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.reset_set import ResetEntry, load_rlinf_reset_set, reset_set_from_store
from wmrl_cli.envs.reset_sampler import task_ids
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.policies.registry import resolve_policy_dir
from wmrl_cli.rewards.loading import reward_model_source
from wmrl_cli.sims.backends import resolve_simulator, simulator_class, simulator_suite
from wmrl_cli.sims.libero_suites import get_libero_suite
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
    elif cfg.algorithm.eval_trials or replays_in_simulator(cfg):
        evaluation_simulator(cfg)
    check_train_tasks(cfg, inputs.reset_set)
    check_bc_data(cfg)
    return inputs


def check_bc_data(cfg: RunConfig) -> None:
    """`algorithm.bc_data`, where bc_coef > 0, must be an episode store with a success to clone,
    of every task in `algorithm.bc_tasks` where set (ConfigError)."""
    alg = cfg.algorithm
    if alg.bc_coef <= 0:
        return
    try:
        store = EpisodeStore.open(alg.bc_data, verify=False)
    except WmrlError as exc:
        raise ConfigError(f"algorithm.bc_data: {exc}") from None
    won = [entry["task_name"] for entry in store.index if entry.get("success")]
    if not won:
        raise ConfigError(
            f"algorithm.bc_data: {alg.bc_data} holds no successful episode to clone "
            "(expected a store of rollouts with successes, e.g. co-evolve's data/reward_real)"
        )
    missing = [task for task in alg.bc_tasks or () if task not in won]
    if missing:
        raise ConfigError(
            f"algorithm.bc_tasks: {alg.bc_data} holds no successful episode of "
            f"{', '.join(map(repr, missing))} (its tasks with a success: "
            f"{', '.join(dict.fromkeys(won))})"
        )


def check_train_tasks(cfg: RunConfig, reset_set: Path | None) -> None:
    """`algorithm.train_tasks`, where set, must name tasks of the env (ConfigError)."""
    if cfg.algorithm.train_tasks is not None:
        task_ids(cfg.algorithm.train_tasks, env_task_names(cfg, reset_set))


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


def replays_in_simulator(cfg: RunConfig) -> bool:
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


def exact_groups(cfg: RunConfig, envs_per_rank: int) -> int:
    """How many of a rank's groups per rollout verified imagination judges exactly
    (`reward_model.exact_fraction` of them, half rounded up); one line where the fraction
    cannot apply. The simulator env has no judge: there the setting is moot. Checks the
    per-task recall floor (`reward_model.task_recall_floor`) and `reward_model.refuted_calls`
    as well: the verdict's settings that apply to `source=verified` alone."""
    fraction = cfg.reward_model.exact_fraction
    if cfg.algorithm.env == "simulator":
        return 0
    if cfg.reward_model.refuted_calls == "continue" and cfg.reward_model.source != "verified":
        raise ConfigError(
            "invalid value for 'reward_model.refuted_calls': continue applies to "
            "reward_model.source=verified (set it to end)"
        )
    if cfg.reward_model.task_recall_floor and cfg.reward_model.source != "verified":
        raise ConfigError(
            "invalid value for 'reward_model.task_recall_floor': it applies to "
            "reward_model.source=verified (set it to 0)"
        )
    if cfg.reward_model.task_recall_probe and not cfg.reward_model.task_recall_floor:
        raise ConfigError(
            "invalid value for 'reward_model.task_recall_probe': it applies to a per-task "
            "recall floor (set reward_model.task_recall_floor above 0, or the probe to 0)"
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


def reward_task_ids(cfg: RunConfig, kind: str, source: Path) -> list[int] | None:
    """The reward model's id of each env task, where it numbers tasks its own way: a published
    (RLinf .pth) task-embedding model on a LIBERO suite counts tasks in RLinf's order; None
    (the env's ids) otherwise."""
    sim = resolve_simulator(cfg.simulator)
    if kind != "taskemb_resnet" or source.suffix != ".pth" or sim.name != "libero":
        return None
    from wmrl_cli.rewards.resnet import rlinf_task_ids

    return rlinf_task_ids(get_libero_suite(sim.suite).instructions)
