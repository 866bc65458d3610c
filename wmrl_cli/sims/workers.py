"""A batch of simulator environments split over worker processes, one shard per worker.

A shard object (`envs`) answers `reset(init_ids, sim_states)` and `chunk_step(actions)` with
dicts of numpy arrays and is closed with `close()`. `ShardedEnvs` builds one per worker from
a class path and keyword arguments (so the child imports the simulator itself), sends every
call to all shards at once and concatenates the answers into the env interface's `Obs` and
`ChunkResult`. With `num_workers=0` the same code runs in-process.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import signal
import traceback
from multiprocessing import resource_tracker
from typing import Any

import numpy as np

from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.errors import WmrlError
from wmrl_cli.sims.render_device import use_rank_render_device


def _build(target: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


def _serve(conn: Any, target: str, kwargs: dict[str, Any]) -> None:
    envs = None
    try:
        try:
            envs = _build(target, kwargs)
        except Exception as exc:  # the parent raises it as a one-line error
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            return
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


class Worker:
    """One shard in a spawned process (spawn, not fork: a forked child would share the
    parent's GL and thread state), or the shard object itself when in_process."""

    def __init__(self, target: str, kwargs: dict[str, Any], in_process: bool) -> None:
        self._local = _build(target, kwargs) if in_process else None
        self._pending: Any = None
        self._awaiting = False  # a command sent, its reply not yet received
        if self._local is None:
            ctx = mp.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_serve, args=(child, target, kwargs), daemon=True)
            # Ctrl-C is the parent's, which closes its workers: started with SIGINT blocked, a
            # worker keeps it blocked (the mask survives exec), so a Ctrl-C at a terminal,
            # which reaches every process, prints no traceback from the workers. (The resource
            # tracker, started first, unblocks SIGINT after its own start.)
            resource_tracker.ensure_running()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                self._proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            child.close()
            self._receive()

    def send(self, cmd: str, *payload: Any) -> None:
        if self._local is not None:
            self._pending = getattr(self._local, cmd)(*payload)
        else:
            self._conn.send((cmd, payload))
            self._awaiting = True

    def _receive(self) -> Any:
        try:
            status, value = self._conn.recv()
        except EOFError:
            raise WmrlError("a simulator worker process died; see its output above") from None
        self._awaiting = False
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
        try:
            if self._awaiting and self._conn.poll(30):
                # the reply an interruption left unread: the worker waits to send it
                self._conn.recv()
            self._conn.send(("close", ()))
        except Exception:  # the worker is gone, or a reply was cut short
            self._proc.kill()
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()


class ShardedEnvs:
    """The env interface over `num_envs` environments in contiguous shards. Subclasses set
    `num_envs`, `action_dim`, `task_names`, `instructions` (per task id) and call
    `_start(target, kwargs_of_shard_size, num_workers)`."""

    num_envs: int
    action_dim: int
    task_names: list[str]
    instructions: list[str]

    def _start(self, target: str, kwargs: dict[str, Any], num_workers: int) -> None:
        use_rank_render_device()  # this rank's GPU renders, here and in the spawned workers
        n_workers = min(num_workers, self.num_envs)
        self._bounds = np.array_split(np.arange(self.num_envs), max(n_workers, 1))
        self._shards: list[Worker] = []
        try:
            for idx in self._bounds:
                shard_kwargs = dict(kwargs, num_envs=len(idx))
                self._shards.append(Worker(target, shard_kwargs, in_process=n_workers == 0))
        except BaseException:
            self.close()
            raise

    def _broadcast(self, cmd: str, per_shard: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        for shard, payload in zip(self._shards, per_shard):
            shard.send(cmd, *payload)
        return [shard.receive() for shard in self._shards]

    def _obs(self, parts: list[dict[str, Any]]) -> Obs:
        task_ids = np.concatenate([p["task_ids"] for p in parts])
        return Obs(
            images=np.concatenate([p["images"] for p in parts]),
            instructions=[self.instructions[t] for t in task_ids],
            task_ids=task_ids,
            proprio=np.concatenate([p["proprio"] for p in parts]),
            sim_states=[s for p in parts for s in p["sim_states"]],
        )

    def reset(
        self,
        init_ids: list[int],
        sim_states: list[np.ndarray | None] | None = None,
        seeds: list[int] | None = None,
    ) -> Obs:
        """`seeds` (simulators that seed episodes, Meta-World): per env, the seed to use instead
        of the one its init id implies."""
        if len(init_ids) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} init ids, got {len(init_ids)}")
        payloads = [
            (
                [int(init_ids[i]) for i in idx],
                None if sim_states is None else [sim_states[i] for i in idx],
            )
            + (() if seeds is None else ([int(seeds[i]) for i in idx],))
            for idx in self._bounds
        ]
        return self._obs(self._broadcast("reset", payloads))

    def chunk_step(self, actions: np.ndarray, active: np.ndarray | None = None) -> ChunkResult:
        """`active` [B]: False stops an env until the next reset (no step spent on it)."""
        actions = np.asarray(actions, dtype=np.float32)
        payloads = [
            (actions[idx],) + (() if active is None else (np.asarray(active)[idx],))
            for idx in self._bounds
        ]
        parts = self._broadcast("chunk_step", payloads)

        def cat(key: str) -> np.ndarray:
            return np.concatenate([p[key] for p in parts])

        info = {"valid": cat("valid"), "executed_actions": cat("executed")}
        if "step_proprio" in parts[0]:  # [B,C,D]: the proprio after every step (Meta-World)
            info["step_proprio"] = cat("step_proprio")
        return ChunkResult(
            obs=self._obs(parts),
            frames=cat("frames"),
            rewards=cat("rewards"),
            terminated=cat("terminated"),
            truncated=cat("truncated"),
            success=cat("success"),
            info=info,
        )

    def close(self) -> None:
        for shard in getattr(self, "_shards", []):
            shard.close()
        self._shards = []

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
