"""The stage cache of `wmrl co-evolve` (pipeline.py): each stage runs once, is recorded in
stages.json with its result, wall time, real environment steps and a fingerprint of what it
read, and is skipped when the same command runs again; a stage whose fingerprint changed runs
again (with every stage built on it)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wmrl_cli.coevolve.report import BASE_POLICY_STAGE, SIMULATOR_CONTROL
from wmrl_cli.config import RunConfig
from wmrl_cli.files import atomic_write_text
from wmrl_cli.logging import console
from wmrl_cli.run_dirs import config_values, covers
from wmrl_cli.runtime import release_memory, seed_stage

STAGES_FILE = "stages.json"

# What each kind of stage reads of the run config (keys or sections, `config_values`). A stage's
# fingerprint hashes these values with the fingerprints of the stages whose outputs it uses, so
# `co-evolve --update` with a changed config reruns exactly the stages the change reaches.
_SIM = ("simulator",)
READS: dict[str, tuple[str, ...]] = {
    "sft": (*_SIM, "sft", "policy"),
    "eval": (*_SIM, "policy", "coevolve.eval_trials", "coevolve.videos"),
    "base_rollouts": (*_SIM, "policy", "rollout", "coevolve.base_rollouts_per_task"),
    "evolved_rollouts": (*_SIM, "policy", "rollout", "coevolve.evolved_rollouts_per_task"),
    "reward_rollouts": (*_SIM, "policy", "coevolve.reward_real_rollouts_per_task"),
    "merge": (*_SIM, "rollout.kir"),
    "world_model": (*_SIM, "world_model", "precision", "coevolve.world_model_on_reward_real"),
    "refine_wm": (*_SIM, "world_model", "precision", "coevolve.refine_steps"),
    "imagine": (
        *_SIM,
        "world_model",
        "precision",
        "coevolve.reward_imagined_start_every",
        "coevolve.reward_imagined_horizon",
    ),  # fmt: skip
    "imagine_policy": (
        *_SIM,
        "world_model",
        "precision",
        "policy",
        "algorithm.max_episode_steps",
        "algorithm.enable_kir",
        "algorithm.train_tasks",
        "coevolve.reward_policy_rollouts_per_task",
    ),  # fmt: skip
    "reward_model": (*_SIM, "reward_model"),
    "refine_rm": (*_SIM, "reward_model", "coevolve.refine_reward_steps"),
    "check": (
        *_SIM,
        "world_model",
        "reward_model",
        "precision",
        "coevolve.check_episodes",
        "coevolve.recalibrate_threshold",
    ),  # fmt: skip
    "rl": (
        *_SIM,
        "policy",
        "algorithm",
        "training",
        "world_model",
        "reward_model",
        "precision",
        "compile_world_model",
        "coevolve.trust_audit_per_task",
        "coevolve.trust_precision_floor",
        "coevolve.closed_loop_floor",
        "coevolve.bc_anchor",
        "coevolve.curve_every",
    ),  # fmt: skip
    # The simulator control: RL from the base policy in the simulator; no world or reward model.
    "simulator_rl": (
        *_SIM,
        "policy",
        "algorithm",
        "training",
        "precision",
        "coevolve.refinements",
        "coevolve.curve_every",
    ),  # fmt: skip
    # The audit's tally alone: the floor decides outside it, in the RL stage.
    "trust": (
        *_SIM,
        "policy",
        "algorithm",
        "world_model",
        "reward_model",
        "precision",
        "coevolve.trust_audit_per_task",
    ),  # fmt: skip
    "accept": (
        *_SIM,
        "policy",
        "algorithm",
        "world_model",
        "reward_model",
        "precision",
        "coevolve.accept_audit_per_task",
        "coevolve.refine_candidates",
    ),  # fmt: skip
    # Settings that add or gate stages without changing a finished one's result.
    "structure": (
        "coevolve.start",
        "coevolve.refinements",
        "coevolve.frozen_control",
        "coevolve.simulator_control",
        "coevolve.refine_reward_model",
        "coevolve.min_action_gap_db",
        "coevolve.min_imagined_recall",
    ),  # fmt: skip
}
_CLAIMED = tuple(key for keys in READS.values() for key in keys)

# Options added after runs were recorded, with the default that keeps the behaviour those runs
# had: at it they stay out of every fingerprint, so `--update` with a newer wmrl keeps the
# finished stages, and setting them otherwise reruns what they reach.
ADDED_OPTIONS: dict[str, Any] = {
    "reward_model.audit_with_simulator": False,
    "reward_model.exact_fraction": 0.0,
    "reward_model.task_recall_floor": 0.0,
    "reward_model.task_recall_evidence": 5,
    "reward_model.task_recall_probe": 0,
    "coevolve.reward_policy_rollouts_per_task": 0,
    "coevolve.reward_real_rollouts_per_task": 0,
    "world_model.lr_schedule": "constant",
    "reward_model.confirm_world_models": [],
    "coevolve.refine_candidates": 1,
    "coevolve.accept_audit_per_task": 0,
    "algorithm.train_tasks": None,
    "coevolve.trust_audit_per_task": 0,
    "coevolve.trust_precision_floor": 0.5,
    "coevolve.simulator_control": False,
    "coevolve.curve_every": 0,
    "coevolve.world_model_on_reward_real": False,
    "coevolve.closed_loop_floor": 0.0,
    # The memory plan's settings: at these the weights, their dtypes and the memory are as
    # before (world_model.dtype auto is float32 on the CPU, where those runs were recorded).
    "world_model.dtype": "auto",
    "world_model.offload_during_update": None,
    "world_model.vae_batch": None,
    "training.sharding": "none",
    "training.param_dtype": "float32",
    "training.optimizer_dtype": "param",
    "training.activation_checkpointing": False,
    "training.cpu_offload": False,
    "training.memory_budget_gb": None,
    "world_model.sharding": "none",
    "reward_model.videomae": {},
    # RL's behaviour-cloning anchor (rl/bc_anchor.py), off at these
    "algorithm.bc_coef": 0.0,
    "algorithm.bc_data": None,
    "algorithm.bc_batch_size": 64,
    "algorithm.bc_tasks": None,
    "coevolve.bc_anchor": 0.0,
}
# Keys under a section a stage kind reads that only RL uses: the audit changes what RL records
# and the recall floor what it is paid, not how a reward model is trained or checked.
NOT_READ: dict[str, tuple[str, ...]] = {
    kind: (
        "reward_model.audit_with_simulator",
        "reward_model.exact_fraction",
        "reward_model.task_recall_floor",
        "reward_model.task_recall_evidence",
        "reward_model.task_recall_probe",
    )
    for kind in ("reward_model", "refine_rm", "check")
}
# How a world model trains on its ranks: read by its training alone (the other stages read the
# world_model section for the model they load), so that a change reruns no RL stage.
for _kind in READS:
    if _kind not in ("world_model", "refine_wm"):
        NOT_READ[_kind] = (*NOT_READ.get(_kind, ()), "world_model.sharding")
# What a run keeps beside its result, or how it computes the same result (gradient
# checkpointing: the same gradients): in no fingerprint, whatever its value.
for _kind in READS:
    NOT_READ[_kind] = (
        *NOT_READ.get(_kind, ()),
        "reward_model.keep_verified_calls",
        "world_model.gradient_checkpointing",
    )


class StageCache:
    """Runs named stages once each, recording outputs, wall times, real steps and a fingerprint
    of what the stage read in stages.json. Each stage starts with the global RNGs (Python,
    numpy, torch) seeded from the run seed and its name, so a stage started over (after a kill,
    with the stages before it skipped) draws what it would have drawn in an uninterrupted run.

    A finished stage whose fingerprint no longer matches (its settings, or a stage it builds
    on, changed: `co-evolve --update`) has its outputs removed and runs again."""

    def __init__(self, run_dir: Path, seed: int, cfg: RunConfig | None = None) -> None:
        self.run_dir = run_dir
        self.seed = seed
        self.cfg = cfg
        # The config does not change during a run: its flattened values are read once.
        values = {} if cfg is None else config_values(cfg, None, "co-evolve")
        self.values = {
            k: v for k, v in values.items() if k not in ADDED_OPTIONS or v != ADDED_OPTIONS[k]
        }
        path = run_dir / STAGES_FILE
        self.state: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        # The stages this configuration reaches, run or skipped: a stage recorded under an
        # earlier configuration (`--update`) that no longer has a place stays out of the report.
        self.visited: list[str] = []

    def fingerprint(self, reads: str | None, after: tuple[str, ...]) -> str | None:
        """sha256 of the config values of the stage kind `reads`, of the settings no stage
        declares (a change there reruns everything) and of the fingerprints of `after`."""
        import hashlib

        if self.cfg is None or reads is None:
            return None
        body = {
            "reads": {
                k: v
                for k, v in self.values.items()
                if covers(READS[reads], k) and not covers(NOT_READ.get(reads, ()), k)
            },
            "unclaimed": {k: v for k, v in self.values.items() if not covers(_CLAIMED, k)},
            "after": [self.state.get(name, {}).get("fingerprint") for name in after],
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def run(
        self,
        name: str,
        fn: Callable[[], Any],
        real_steps: Callable[[Any], int] | None = None,
        *,
        reads: str | None = None,
        after: tuple[str, ...] = (),
        outputs: tuple[str, ...] = (),
        ranks: int | None = None,
    ) -> Any:
        """`real_steps(result)`: the real environment steps the stage consumed (none: 0);
        `reads`: the stage's kind in READS; `after`: the stages whose outputs it uses;
        `outputs`: its folders in the run directory (removed when it must run again); `ranks`:
        the processes a training stage trains on (`--num-processes`), recorded with it (a stage
        done on other ranks is kept: the rank count is in no fingerprint)."""
        self.visited.append(name)
        fingerprint = self.fingerprint(reads, after)
        done = self.state.get(name)
        if done is not None and done.get("fingerprint") in (None, fingerprint):
            if done.get("fingerprint") is None and fingerprint is not None:
                done["fingerprint"] = fingerprint  # recorded before fingerprints: adopt this one
                self._save()
            console.print(f"[dim]stage {name}: done, skipped[/]")
            return done["result"]
        if done is not None:
            console.print(f"stage {name}: its settings or inputs changed; running it again")
            del self.state[name]
            self._save()
            for folder in outputs:
                shutil.rmtree(self.run_dir / folder, ignore_errors=True)
        console.rule(f"stage: {name}")
        seed_stage(self.seed, name)
        start = time.time()
        result = fn()
        release_memory()  # the next stage may need what this one held (one GPU, in turn)
        self.state[name] = {
            "result": result,
            "wall_s": round(time.time() - start, 1),
            "real_steps": real_steps(result) if real_steps is not None else 0,
            "fingerprint": fingerprint,
            **({"ranks": ranks} if ranks is not None else {}),
        }
        self._save()
        return result

    def _save(self) -> None:
        atomic_write_text(self.run_dir / STAGES_FILE, json.dumps(self.state, indent=1))

    def data_steps(self) -> int:
        """Real steps of the finished stages that collected the method's data: where its RL
        stages' env/real_steps start. Not evaluations, not the simulator control, and not the
        base policy's demonstrations (`BASE_POLICY_STAGE`): the control starts from the same
        base and counts from it, so the two arms' real steps compare like with like."""
        return sum(
            int(item.get("real_steps", 0))
            for name, item in self.state.items()
            if not name.startswith("eval") and name not in (SIMULATOR_CONTROL, BASE_POLICY_STAGE)
        )
