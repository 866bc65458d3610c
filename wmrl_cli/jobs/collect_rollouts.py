"""Collecting real-simulator rollouts of a policy into an episode store (`wmrl rollout`, SFT's
demonstrations, co-evolve's rollouts): the policy run in the simulator, as in evaluation, with
every frame, action and simulator state kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.table import Table

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.kir import read_keyframes, write_keyframes
from wmrl_cli.data.reset_set import export_rlinf
from wmrl_cli.envs.runner import iter_episodes
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.logging import progress_task
from wmrl_cli.policies.perturbation import perturb
from wmrl_cli.policies.registry import build_policy
from wmrl_cli.run_dirs import prepare_run_dir
from wmrl_cli.runtime import configure_threads, seed_everything
from wmrl_cli.sims.backends import (
    check_scripted_policy,
    resolve_simulator,
    simulator_action_dim,
    simulator_class,
    simulator_suite,
)


@dataclass
class RolloutSummary:
    store: str
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)
    episodes: int = 0
    keyframes: int | None = None
    rlinf_files: int | None = None

    def table(self) -> Table:
        table = Table(title=f"rollouts -> {self.store}")
        for column in ("task", "episodes", "success", "mean length"):
            table.add_column(column, justify="left" if column == "task" else "right")
        for task, row in self.per_task.items():
            table.add_row(
                task,
                str(int(row["episodes"])),
                f"{100 * row['success']:.1f}%",
                f"{row['length']:.1f}",
            )
        extra = []
        if self.keyframes is not None:
            extra.append(f"{self.keyframes} KIR keyframes")
        if self.rlinf_files is not None:
            extra.append(f"{self.rlinf_files} RLinf reset files")
        if extra:
            table.caption = ", ".join(extra)
        return table


def check_output_store(
    out: Path, append: bool, imagined: bool = False, overwrite: bool = False
) -> None:
    """One line for an --out that would be overwritten or is no store, or an --append that
    would mix real and imagined episodes in one store. `overwrite`: a store there is replaced
    (`prepare_run_dir` removes the files it wrote)."""
    if append and overwrite:
        raise ConfigError("--append and --overwrite exclude each other: pass one")
    index = out / "index.json"
    if index.exists() and not (append or overwrite):
        raise ConfigError(
            f"--out {out} already holds an episode store; pass --append to add to it or "
            "--overwrite to replace it"
        )
    if out.is_dir() and not index.exists() and any(out.iterdir()):
        raise ConfigError(
            f"--out {out} holds files wmrl did not write and is not an episode store; choose a "
            "new or empty directory"
        )
    existing = EpisodeStore(out) if index.exists() and append else None
    if existing is not None and len(existing) and existing.imagined != imagined:
        held, given = ("imagined", "real") if existing.imagined else ("real", "imagined")
        raise WmrlError(f"{out} holds {held} episodes; write {given} ones to a store of their own")


def store_summary(store: EpisodeStore, task_names: list[str]) -> RolloutSummary:
    """Episodes, success rate and mean length per task of a store."""
    summary = RolloutSummary(store=str(store.root), episodes=len(store))
    for task in task_names:
        rows = [m for m in store.index if m["task_name"] == task]
        if rows:
            summary.per_task[task] = {
                "episodes": len(rows),
                "success": float(np.mean([m["success"] for m in rows])),
                "length": float(np.mean([m["length"] for m in rows])),
            }
    return summary


def stored_summary(store: EpisodeStore) -> RolloutSummary:
    """`store_summary` of every task the store holds, in task-id order."""
    names = {int(m["task_id"]): m["task_name"] for m in store.index}
    return store_summary(store, [names[t] for t in sorted(names)])


def collect_rollouts(
    cfg: RunConfig, append: bool = False, write_rlinf: bool = False, overwrite: bool = False
) -> RolloutSummary:
    """`append`: add to the store in `cfg.output_dir`; `overwrite`: replace it."""
    out = Path(cfg.output_dir) if cfg.output_dir else None
    if out is None:
        raise WmrlError("rollout needs an output directory (--out DIR)")
    check_output_store(out, append, overwrite=overwrite)
    # The simulator (LIBERO: installed?) and the policy are checked before anything is written;
    # the store's config.yaml records the simulator as it ran (LIBERO's defaults filled in).
    cfg.simulator = sim_cfg = resolve_simulator(cfg.simulator)
    check_scripted_policy(sim_cfg, cfg.policy.name)
    simulator = simulator_class(sim_cfg)
    suite = simulator_suite(sim_cfg)
    n_tasks = len(suite.task_names)
    # Appending continues the init ids, so new episodes never repeat stored seeds.
    used = [] if overwrite else [int(m["init_id"]) for m in EpisodeStore(out).index]
    offset = (max(used) // n_tasks + 1) * n_tasks if used else 0
    init_ids = [offset + i for i in range(cfg.rollout.episodes_per_task * n_tasks)]
    policy = build_policy(
        cfg.policy,
        suite,
        simulator_action_dim(sim_cfg),
        sim_cfg.chunk_size,
        seed=sim_cfg.seed + offset,
        assets_dir=cfg.assets_dir,
    )
    prepare_run_dir(cfg, "rollout", overwrite=overwrite)
    store = EpisodeStore(out)
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    with simulator(sim_cfg) as sim:
        # Keyed on (seed, init id): appended episodes, with new init ids, draw new noise.
        policy = perturb(policy, cfg.rollout.perturbation, sim_cfg.chunk_size, seed=sim_cfg.seed)
        pending = []
        with progress_task(f"rollout {policy.name}", len(init_ids), cfg.logging.progress) as adv:
            for episode in iter_episodes(
                sim,
                policy,
                init_ids,
                chunk_size=sim_cfg.chunk_size,
                seed_of=lambda i: sim_cfg.seed + i,
                sample=not cfg.policy.greedy,
                temperature=cfg.policy.temperature,
                suite=sim_cfg.suite,
            ):
                pending.append(episode)
                if len(pending) >= sim.num_envs:  # flush per batch: bounded memory
                    store.add(pending)
                    pending = []
                adv()
        store.add(pending)

    summary = store_summary(store, suite.task_names)
    keyframes = read_keyframes(out)
    if cfg.rollout.kir.enabled:
        keyframes = write_keyframes(store, cfg.rollout.kir)
        summary.keyframes = len(keyframes)
    if write_rlinf:
        summary.rlinf_files = len(
            export_rlinf(store, out, keyframes, cfg.world_model.context_frames)
        )
    return summary
