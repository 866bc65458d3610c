"""Meta-World behind the env interface, sharded over worker processes.

Each worker owns a contiguous shard of the batch and steps it with `MetaWorldEnvs`; the
parent concatenates the shards. `num_workers=0` runs the same code in-process.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from typing import Any

import numpy as np

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs
from wmrl_cli.sims.suites import CAMERAS, Suite, get_suite

ACTION_DIM = 4  # Meta-World: end-effector xyz delta + gripper


def _worker(conn: Any, kwargs: dict[str, Any]) -> None:
    envs = None
    try:
        envs = MetaWorldEnvs(**kwargs)
        conn.send(("ok", None))
        while True:
            cmd, payload = conn.recv()
            if cmd == "close":
                break
            try:
                conn.send(("ok", getattr(envs, cmd)(*payload)))
            except Exception as exc:  # report to the parent, keep serving
                conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        if envs is not None:
            envs.close()
        conn.close()


class _Shard:
    """One worker process (or, with in_process, a direct object) owning some env slots."""

    def __init__(self, kwargs: dict[str, Any], in_process: bool) -> None:
        self._local = MetaWorldEnvs(**kwargs) if in_process else None
        self._pending: Any = None
        if self._local is None:
            # spawn, not fork: a forked child would share the parent's GL and thread state.
            ctx = mp.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_worker, args=(child, kwargs), daemon=True)
            self._proc.start()
            child.close()
            self._receive()

    def send(self, cmd: str, *payload: Any) -> None:
        if self._local is not None:
            self._pending = getattr(self._local, cmd)(*payload)
        else:
            self._conn.send((cmd, payload))

    def _receive(self) -> Any:
        try:
            status, value = self._conn.recv()
        except EOFError:
            raise WmrlError("a simulator worker process died; see its output above") from None
        if status == "error":
            raise RuntimeError(f"simulator worker failed: {value}")
        return value

    def receive(self) -> Any:
        if self._local is not None:
            value, self._pending = self._pending, None
            return value
        return self._receive()

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self._conn.send(("close", ()))
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()


class MetaWorldSim:
    """The real simulator: B Meta-World environments of one suite."""

    def __init__(self, cfg: SimulatorConfig, num_envs: int | None = None) -> None:
        self.suite: Suite = get_suite(cfg.suite)
        if cfg.camera not in CAMERAS:
            raise ConfigError(
                f"invalid value for 'simulator.camera': '{cfg.camera}' is not one of "
                f"{', '.join(CAMERAS)}"
            )
        self.cfg = cfg
        self.num_envs = num_envs or cfg.num_envs
        self.action_dim = ACTION_DIM
        self.task_names = self.suite.task_names
        n_workers = min(cfg.num_workers, self.num_envs)
        self._bounds = np.array_split(np.arange(self.num_envs), max(n_workers, 1))
        self._shards = [
            _Shard(
                dict(
                    suite=self.suite,
                    num_envs=len(idx),
                    image_size=cfg.image_size,
                    camera=cfg.camera,
                    max_steps=cfg.max_steps,
                    terminate_on_success=cfg.terminate_on_success,
                    base_seed=cfg.seed,
                ),
                in_process=n_workers == 0,
            )
            for idx in self._bounds
        ]

    def _broadcast(self, cmd: str, per_shard: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        for shard, payload in zip(self._shards, per_shard):
            shard.send(cmd, *payload)
        return [shard.receive() for shard in self._shards]

    def _obs(self, parts: list[dict[str, Any]]) -> Obs:
        task_ids = np.concatenate([p["task_ids"] for p in parts])
        return Obs(
            images=np.concatenate([p["images"] for p in parts]),
            instructions=[self.suite.tasks[t].instruction for t in task_ids],
            task_ids=task_ids,
            proprio=np.concatenate([p["proprio"] for p in parts]),
            sim_states=[s for p in parts for s in p["sim_states"]],
        )

    def reset(self, init_ids: list[int], sim_states: list[np.ndarray | None] | None = None) -> Obs:
        if len(init_ids) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} init ids, got {len(init_ids)}")
        payloads = [
            (
                [int(init_ids[i]) for i in idx],
                None if sim_states is None else [sim_states[i] for i in idx],
            )
            for idx in self._bounds
        ]
        return self._obs(self._broadcast("reset", payloads))

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        actions = np.asarray(actions, dtype=np.float32)
        parts = self._broadcast("chunk_step", [(actions[idx],) for idx in self._bounds])

        def cat(key: str) -> np.ndarray:
            return np.concatenate([p[key] for p in parts])

        return ChunkResult(
            obs=self._obs(parts),
            frames=cat("frames"),
            rewards=cat("rewards"),
            terminated=cat("terminated"),
            truncated=cat("truncated"),
            success=cat("success"),
            info={"valid": cat("valid"), "executed_actions": cat("executed")},
        )

    def close(self) -> None:
        for shard in self._shards:
            shard.close()
        self._shards = []

    def __enter__(self) -> MetaWorldSim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
