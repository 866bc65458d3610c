"""One `wmrl co-evolve` run's state and the stage helpers its graph (pipeline.py) shares: the stage
cache, what the report collects, and the stages several places of the graph run (the world
model's check, the judge's data, evaluations, per-task trust)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wmrl_cli.coevolve.gate import enforce_gate, gate_check
from wmrl_cli.coevolve.stage_cache import StageCache
from wmrl_cli.coevolve.stages import (
    audit_trust,
    closed_loop_tasks,
    collect,
    eval_steps,
    evaluate,
    imagine,
    imagine_policy,
    store_steps,
    task_successes,
    trust_from_audit,
)
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import WmrlError


class CoevolveRun:
    """One co-evolution run: its stage cache and what the report collects."""

    def __init__(self, cfg: RunConfig, run_dir: Path, ranks: int = 1) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        self.ranks = ranks  # the processes an RL or world-model stage trains on (ranks.py)
        self.cache = StageCache(run_dir, cfg.simulator.seed, cfg)
        self.evals: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, dict[str, Any]] = {}
        self.reliability: dict[str, dict[str, Any]] = {}
        self.reward_metrics: dict[str, dict[str, Any]] = {}
        self.acceptance: dict[str, dict[str, Any]] = {}  # per round: audit_world_models
        self.trust: dict[str, dict[str, Any]] = {}  # per RL stage: trust_from_audit, its audit
        self.closed_loop: dict[str, dict[str, Any]] = {}  # per RL stage: closed_loop_tasks
        # The judge's real rollouts of the stage-1 policy (`real_reward_data`): store, stage.
        self.real_reward: tuple[str | None, str | None] = (None, None)
        # The policy stage 1 starts from and the stages that made it (the start sets it).
        self.base: tuple[str, tuple[str, ...]] | None = None

    def anchor(self) -> tuple[str | None, str | None]:
        """(the store, the stage) of the real successes every RL stage in imagination clones
        (`coevolve.bc_anchor`: the judge's real rollouts of the base); (None, None) when off."""
        return self.real_reward if self.cfg.coevolve.bc_anchor else (None, None)

    def check(self, name: str, wm: str, rm_path: str, data: str, after: tuple[str, ...]):
        """The world model's health check (an evaluation stage) and gate; the threshold RL is
        to use (None: no check configured). `after`: the stages of the world model, reward
        model and data it checks."""
        cfg = self.cfg
        if not cfg.coevolve.check_episodes:
            return None
        out = self.run_dir / "check" / name
        self.checks[name] = self.cache.run(
            f"eval_{name}",
            lambda: gate_check(cfg, out, wm, rm_path, data),
            lambda result: int(result["real_steps"]),
            reads="check",
            after=after,
            outputs=(f"check/{name}",),
        )
        enforce_gate(name, self.checks[name], cfg, out)
        return self.checks[name]["rl_threshold"]

    def train_tasks(
        self,
        stage: str,
        inputs: tuple[str, str, str, str, float | None],
        after: tuple[str, ...],
        audited: Path | None = None,
    ) -> tuple[list[str] | None, str | None]:
        """The tasks RL stage `stage` draws its starts from, and the stage that audited them:
        with `coevolve.trust_audit_per_task`, those whose verdict an audit of the stage's
        inputs (policy, world model, judge, starts, threshold) found true often enough
        (`trust_from_audit`). `audited`: a folder whose judge_audit.json tallies these inputs
        already (acceptance's), used instead of a new audit. (None, None) without the option."""
        cfg = self.cfg
        if not cfg.coevolve.trust_audit_per_task:
            return None, None
        audit_stage = None
        if audited is None:
            audit_stage, out = f"trust_{stage}", self.run_dir / "trust" / stage
            rows = self.cache.run(
                audit_stage,
                lambda: audit_trust(cfg, out, *inputs),
                lambda result: int(result["real_steps"]),
                reads="trust",
                after=after,
                outputs=(f"trust/{stage}",),
            )["tasks"]
            audited = out
        else:
            rows = json.loads((audited / "judge_audit.json").read_text())["tasks"]
        trust = {**trust_from_audit(cfg, rows), "audit": str(audited.relative_to(self.run_dir))}
        if not trust["train_tasks"]:
            raise WmrlError(
                f"{stage}: no task's verdict clears coevolve.trust_precision_floor="
                f"{cfg.coevolve.trust_precision_floor} in {trust['audit']}/judge_audit.json: "
                "expected at least one task to train on (lower the floor, or check the judge)"
            )
        self.trust[stage] = trust
        return trust["train_tasks"], audit_stage

    def closed_loop_tasks(
        self, stage: str, imagined: str, real: str, within: list[str] | None
    ) -> list[str]:
        """`within` (None: `algorithm.train_tasks`, or every task) less the tasks where the
        policy's imagined episodes (`imagined`, replayed) succeed below
        `coevolve.closed_loop_floor` times its real rollouts (`real`): `closed_loop_tasks`,
        kept for the report."""
        floor = self.cfg.coevolve.closed_loop_floor
        within = within if within is not None else self.cfg.algorithm.train_tasks
        loop = closed_loop_tasks(task_successes(imagined), task_successes(real), floor, within)
        if not loop["train_tasks"]:
            raise WmrlError(
                f"{stage}: on every task the base policy's imagined loop succeeds below "
                f"coevolve.closed_loop_floor={floor:g} times its real rollouts: expected at "
                "least one task to train on (lower the floor, or check the world model)"
            )
        self.closed_loop[stage] = loop
        return loop["train_tasks"]

    def imagined_reward_data(
        self, name: str, wm: str, data: str, after: tuple[str, ...]
    ) -> tuple[str | None, str | None]:
        """(the store, the stage) of `wm`'s imagined rollouts of `data` for the next reward
        model, or (None, None) without `coevolve.reward_imagined_start_every`."""
        if not self.cfg.coevolve.reward_imagined_start_every:
            return None, None
        out = self.run_dir / "data" / name
        store = self.cache.run(
            name,
            lambda: imagine(self.cfg, wm, data, out),
            reads="imagine",
            after=after,
            outputs=(f"data/{name}",),
        )
        return store, name

    def labelled_reward_data(
        self, name: str, policy: str, wm: str, reset_set: str, seed: int, after: tuple[str, ...]
    ) -> tuple[str | None, str | None]:
        """(the store, the stage) of `policy`'s imagined episodes in `wm` from `reset_set`'s
        starts, labelled by the simulator, for the next reward model, or (None, None) without
        `coevolve.reward_policy_rollouts_per_task`."""
        if not self.cfg.coevolve.reward_policy_rollouts_per_task:
            return None, None
        out = self.run_dir / "data" / name
        store = self.cache.run(
            name,
            lambda: imagine_policy(self.cfg, policy, wm, reset_set, out, seed),
            store_steps,  # the labels' replays are real steps
            reads="imagine_policy",
            after=after,
            outputs=(f"data/{name}",),
        )
        return store, name

    def real_reward_data(
        self, policy: str, after: tuple[str, ...]
    ) -> tuple[str | None, str | None]:
        """(the store, the stage) of `policy`'s real rollouts for every reward model of the run,
        also kept in `real_reward`; (None, None) without
        `coevolve.reward_real_rollouts_per_task`."""
        per_task = self.cfg.coevolve.reward_real_rollouts_per_task
        if not per_task:
            return self.real_reward
        store = self.cache.run(
            "reward_rollouts",
            lambda: collect(
                self.cfg,
                self.run_dir / "data" / "reward_real",
                policy,
                per_task,
                self.cfg.simulator.seed + 4_000_000,
                perturbed=False,
            ),
            store_steps,
            reads="reward_rollouts",
            after=after,
            outputs=("data/reward_real",),
        )
        self.real_reward = (store, "reward_rollouts")
        return self.real_reward

    def evaluate(self, name: str, policy: str, after: tuple[str, ...], videos: bool) -> None:
        self.evals[name] = self.cache.run(
            f"eval_{name}",
            lambda: evaluate(self.cfg, policy, self.run_dir / "eval" / name, videos),
            eval_steps,
            reads="eval",
            after=after,
            outputs=(f"eval/{name}",),
        )
