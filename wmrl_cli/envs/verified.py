"""Verified imagination (`reward_model.source=verified`): the learned judge calls, the real
simulator confirms.

RL runs in the world model and the reward model judges its frames, as in plain imagination;
but a success the judge calls is paid only if the real simulator, replaying the episode from
the reset entry's stored state and seed with the same actions, succeeds by the called step.
An unconfirmed call ends the episode as a failure (reward 0): the imagined episode has left
what the simulator can reach. Or, with `reward_model.refuted_calls=continue`, it goes on: the
judge called a success before it happened (on the judge benchmark, 29 of the 34 real successes
today's judge missed), and the next call is replayed from where this replay stopped
(`ReplayStop`), so an episode costs at most the exact verdict's real steps. Either way the
verdict RL trains on has precision 1 and keeps the judge's recall, and real steps are spent
only on the calls, each up to its call (counted in `env/real_steps` through
`pop_real_steps`), where the exact verdict (`source=simulator`) replays every step of every
episode.

Per RL step the trainer logs `verify/calls` (called episodes), `verify/call_rate` (calls per
episode started), `verify/confirmed_fraction` (confirmed calls per call) and
`verify/real_steps` (the replays' steps), and keeps every call as an imagined episode labelled
by its replay (`pop_calls`; the trainer writes them to `verified_calls/step_N/`, docs/formats.md):
the false calls are the frames that fooled the judge, its hardest negatives, already paid for.

A judge that never calls a task's successes gives GRPO nothing to learn there, however precise
it is. The recall floor (`reward_model.exact_fraction`) judges a fraction of each rollout's
groups exactly: the simulator steps beside the world model for those envs, so a success the
judge did not call is paid too (`verify/exact_uncalled`), at the cost of real steps for every
step of those groups (`verify/exact_real_steps`, in `env/real_steps` as well). A call there
ends the episode as anywhere else, confirmed by the simulator's own steps instead of a replay.

A random fraction is diluted where the recall is missing (docs/results.md, "A recall floor").
The per-task recall floor (`reward_model.task_recall_floor`) judges exactly the groups of the
tasks where the judge has not shown its recall: a task's groups are judged exactly until the
judge has called at least that fraction of the real successes seen in its exactly judged
episodes, over at least `reward_model.task_recall_evidence` of them (`TaskRecall`, kept by the
trainer over all ranks and carried in checkpoints; `verify/exact_tasks`, `verify/exact_episodes`).
The simulator ends such an episode at its success, before a judge that holds k frames can call
it; so the imagined episode is watched on (unpaid, unseen by RL) for k - 1 steps and a chunk,
and a call there counts as calling that success. (`verify/exact_uncalled` counts the successes
not called by the time the simulator ended them.) A task that nothing succeeds at would stay
exact for the whole run, paying nothing; with `reward_model.task_recall_probe` = N it leaves the
floor once N of its exactly judged episodes have shown no real success.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from wmrl_cli.data.episodes import VERIFIED_CALL_LABELS, Episode
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.errors import WmrlError


def check_resettable(imagined: ImaginedEnv, mode: str) -> None:
    """One line for a reset set the simulator cannot be put back to (no stored state or seed:
    an RLinf layout without wmrl's states, say)."""
    missing = [i for i, e in enumerate(imagined.reset_set) if e.sim_state is None or e.seed is None]
    if missing:
        raise WmrlError(
            f"reward_model.source={mode} replays episodes in the real simulator from their "
            f"stored start, but reset entry {missing[0]} has no stored simulator state and seed "
            "(use a wmrl episode store as the reset set)"
        )


def reset_to_entries(sim, entries: list, states: list | None = None) -> None:
    """Puts each of `sim`'s envs back to its reset entry's stored start (task, state, seed), or
    to `states` of the same episodes (where an earlier replay stopped)."""
    sim.reset(
        [e.task_id for e in entries],
        [e.sim_state for e in entries] if states is None else states,
        seeds=[e.seed for e in entries],
    )


def below_recall_floor(
    counts: np.ndarray, floor: float, evidence: int, probe: int = 0
) -> np.ndarray:
    """Per task, whether its groups are still judged exactly. `counts` [T, 3]: the real
    successes of its exactly judged episodes that the judge called, that it did not, and those
    episodes ([T, 2]: the first two). Exact until `evidence` successes are seen and the judge
    called at least `floor` of them; or, with `probe` > 0, until `probe` exactly judged
    episodes have shown no real success at all (there is no recall to show, and exact judging
    would pay nothing there)."""
    called, uncalled = counts[:, 0], counts[:, 1]
    seen = called + uncalled
    exact = (seen < evidence) | (called < floor * seen - 1e-9)  # 7 of 25 meets 0.28
    if probe > 0 and counts.shape[1] > 2:
        exact &= ~((seen == 0) & (counts[:, 2] >= probe))
    return exact


class TaskRecall:
    """The per-task recall floor's evidence over a run: [T, 3] counts as `below_recall_floor`
    reads them, summed over ranks by the trainer."""

    def __init__(self, task_names: list[str], floor: float, evidence: int, probe: int = 0) -> None:
        self.task_names, self.floor, self.evidence = list(task_names), floor, evidence
        self.probe = probe
        self.counts = np.zeros((len(self.task_names), 3), dtype=np.int64)

    def add(self, counts: np.ndarray) -> None:
        self.counts += np.asarray(counts, dtype=np.int64).reshape(self.counts.shape)

    def exact_tasks(self) -> np.ndarray:
        return below_recall_floor(self.counts, self.floor, self.evidence, self.probe)

    def state_dict(self) -> dict:
        return {"task_names": self.task_names, "counts": self.counts.tolist()}

    def load_state_dict(self, state: dict) -> None:
        if list(state["task_names"]) != self.task_names:
            raise WmrlError("the checkpoint's per-task recall counts are for other tasks")
        counts = np.asarray(state["counts"], dtype=np.int64)
        self.counts[:] = 0  # a checkpoint from before the episodes were counted: [T, 2]
        self.counts[:, : counts.shape[1]] = counts


def first_call(success: np.ndarray) -> int:
    """The step of a chunk's success row [C] at which the judge's call falls."""
    return int(np.argmax(success))


@dataclass(frozen=True)
class ReplayStop:
    """Where a refuted replay stopped, for the next call's replay to go on from
    (`refuted_calls=continue`): the chunks replayed, the simulator's state after them, the
    episode's real steps through them, and its steps at a success after the call in the last of
    them (None: none; else the next call finds it)."""

    chunks: int
    state: np.ndarray
    steps: int
    success_after_call: int | None


def replay_confirms(
    sim,
    entry,
    chunks: list[np.ndarray],
    call_step: int,
    start: ReplayStop | None = None,
    go_on: bool = False,
) -> tuple[int | None, int, ReplayStop | None]:
    """Replays `chunks` ([C, A] each, the last holding the call at `call_step`) in `sim` (one
    env) from `entry`'s stored state and seed, or from where the replay of an earlier call
    stopped (`start`). Returns the episode's steps at the success that confirms the call (None:
    refuted), the real steps this replay took (a confirmed replay stops at its success) and,
    refuted with `go_on`, where it stopped (None where the simulator's episode has ended). A
    refuted replay that goes on counts its last chunk's steps after the call too: they are run,
    and kept for the next."""
    if start is not None and start.success_after_call is not None:
        return start.success_after_call, 0, None  # found after the last call, paid now
    reset_to_entries(sim, [entry], None if start is None else [start.state])
    before = 0 if start is None else start.steps
    steps = 0
    for k in range(0 if start is None else start.chunks, len(chunks)):
        actions = np.asarray(chunks[k], dtype=np.float32)
        result = sim.chunk_step(actions[None])
        upto = call_step + 1 if k == len(chunks) - 1 else actions.shape[0]
        valid = result.info["valid"][0]
        steps += int(valid[:upto].sum())
        if (result.success[0][:upto] & valid[:upto]).any():
            return before + steps, steps, None
        if (result.terminated[0][:upto] | result.truncated[0][:upto]).any():
            return None, steps, None
    if not go_on:
        return None, steps, None
    rest = valid[upto:]
    after = np.flatnonzero(result.success[0][upto:] & rest)
    found = before + steps + int(rest[: after[0] + 1].sum()) if after.size else None
    steps += int(rest.sum())  # run by the simulator (to its success at most), and kept
    ended = (result.terminated[0] | result.truncated[0])[upto:].any() and found is None
    if ended:
        return None, steps, None
    return None, steps, ReplayStop(len(chunks), result.obs.sim_states[0], before + steps, found)


class VerifiedEnv:
    real = False  # the policy's steps are imagined; the replays' are real (pop_real_steps)
    imagines = True

    def __init__(
        self,
        imagined: ImaginedEnv,
        sim,
        keep_calls: bool = True,
        exact_sim=None,
        exact_first: int | None = None,
        exact_by_task: bool = False,
        refuted_calls: str = "end",
    ) -> None:
        """`imagined` judges with its reward model as it would alone (it ends an episode at a
        called success); `sim` holds one env that terminates on success and truncates no
        earlier than the imagined env. `keep_calls`: whether calls are kept as episodes
        (`pop_calls`); without, no frame is held. `exact_sim`: None, or a simulator like `sim`
        of m envs, env j beside the world model's env j, which judges exactly the first
        `exact_first` envs of every reset (default m; the recall floor: whole groups, as the
        caller sizes it) and, with `exact_by_task` (m envs: all of them), the envs whose task
        `set_exact_tasks` names (every task until it is called). `refuted_calls`: `end` (a
        refuted call ends its episode as a failure) or `continue` (it goes on, and the next
        call's replay goes on from where this one stopped; in an exact env, the simulator
        beside it goes on)."""
        check_resettable(imagined, "verified")
        if imagined.reward_model is None:
            raise WmrlError("reward_model.source=verified needs a reward model to call successes")
        if imagined.use_rel_reward:
            raise WmrlError(
                "reward_model.source=verified pays confirmed successes: set "
                "reward_model.use_rel_reward=false"
            )
        if sim.num_envs != 1:
            raise ValueError(f"the replay simulator holds {sim.num_envs} envs, expected 1")
        exact = 0 if exact_sim is None else exact_sim.num_envs
        if exact > imagined.num_envs or (exact_by_task and exact != imagined.num_envs):
            raise ValueError(f"{exact} exactly judged envs of {imagined.num_envs}")
        if refuted_calls not in ("end", "continue"):
            raise ValueError(f"refuted_calls={refuted_calls!r}: expected end or continue")
        self.go_on = refuted_calls == "continue"
        self.imagined, self.sim, self.keep_calls = imagined, sim, keep_calls
        self.exact_sim, self.exact = exact_sim, exact
        self.exact_first = exact if exact_first is None else min(exact_first, exact)
        # per task, whether its envs are judged exactly (None: by position alone)
        self.exact_by_task = exact_by_task
        self._exact_tasks = np.ones(len(imagined.task_names), bool) if exact_by_task else None
        self.num_envs = imagined.num_envs
        self.action_dim = imagined.action_dim
        self.task_names = imagined.task_names
        self.reset_set = imagined.reset_set
        self.entry_task_ids = imagined.entry_task_ids
        self._entries: list = []
        self._init_ids: list[int] = []
        self._chunks: list[list[np.ndarray]] = [[] for _ in range(self.num_envs)]
        self._frames: list[list[np.ndarray]] = [[] for _ in range(self.num_envs)]
        self._calls: list[Episode] = []
        self._done = np.zeros(self.num_envs, dtype=bool)
        # per env, where its last refuted replay stopped (`refuted_calls=continue`)
        self._replay_stops: list[ReplayStop | None] = [None] * self.num_envs
        self._is_exact = np.zeros(self.num_envs, dtype=bool)  # this reset's exactly judged envs
        self._tally = {"episodes": 0, "calls": 0, "confirmed": 0, "real_steps": 0}
        if exact:
            self._tally.update(exact_uncalled=0, exact_real_steps=0, exact_episodes=0)
        # per task: the real successes of exact episodes the judge called, and did not, and
        # the exact episodes
        self._task_recall = np.zeros((len(self.task_names), 3), dtype=np.int64)
        # per env: the steps left for the judge to call a real success the simulator ended the
        # episode at first (-1: none awaited)
        self._awaiting = np.full(self.num_envs, -1, dtype=np.int64)
        self._exact_steps = np.zeros(exact, dtype=np.int64)  # real steps of each exact episode
        self._real_steps = 0
        self._exact_real_steps = 0  # of `_real_steps`: the exactly judged episodes'
        self._sim_time = 0.0

    @property
    def generator(self):
        """The world model's noise generator (RL reseeds it every step: exact resume)."""
        return self.imagined.generator

    def pop_timings(self) -> dict[str, float]:
        out = dict(self.imagined.pop_timings(), simulator=self._sim_time)
        self._sim_time = 0.0
        return out

    def pop_real_steps(self) -> int:
        """The real steps the replays took since the last call (the trainer's env/real_steps)."""
        steps, self._real_steps = self._real_steps, 0
        self._exact_real_steps = 0
        return steps

    def pop_real_steps_by_kind(self) -> dict[str, int]:
        """`pop_real_steps` split: the replays of the judge's calls and the exactly judged
        episodes' steps (rl/real_step_kinds.py)."""
        exact = self._exact_real_steps
        total = self.pop_real_steps()
        return {"calls": total - exact, "exact": exact}

    def pop_metrics(self) -> dict[str, float]:
        """The verification's tally since the last call, as per-step metrics."""
        tally = self._tally
        self._tally = dict.fromkeys(tally, 0)
        metrics = {
            "verify/calls": float(tally["calls"]),
            "verify/call_rate": tally["calls"] / max(tally["episodes"], 1),
            "verify/confirmed_fraction": tally["confirmed"] / max(tally["calls"], 1),
            "verify/real_steps": float(tally["real_steps"]),
        }
        if self.exact:  # the recall floor: successes only the simulator saw, and their cost
            metrics["verify/exact_uncalled"] = float(tally["exact_uncalled"])
            metrics["verify/exact_real_steps"] = float(tally["exact_real_steps"])
            metrics["verify/exact_episodes"] = float(tally["exact_episodes"])
        return metrics

    def set_exact_tasks(self, tasks: np.ndarray) -> None:
        """The tasks whose envs the next resets judge exactly ([T] bool; `exact_by_task`)."""
        if self._exact_tasks is None:
            raise ValueError("this env judges exactly by position alone (exact_by_task=False)")
        self._exact_tasks = np.asarray(tasks, dtype=bool).reshape(self._exact_tasks.shape)

    def pop_task_recall(self) -> np.ndarray:
        """[T, 3] since the last call: per task, the real successes of exactly judged episodes
        that the judge called, and that it did not, and those episodes (the evidence
        `TaskRecall` sums)."""
        self._miss_awaited()
        counts, self._task_recall = self._task_recall, np.zeros_like(self._task_recall)
        return counts

    def _miss_awaited(self) -> None:
        """Real successes still awaiting a call when their rollout ends (the rollout stops once
        the simulator has ended every episode; the imagined ones may go on) count as missed:
        a floor errs towards judging exactly."""
        for i in np.flatnonzero(self._awaiting >= 0):
            self._task_recall[self._entries[i].task_id, 1] += 1
        self._awaiting[:] = -1

    def pop_calls(self) -> list[Episode]:
        """The calls since the last call, each an imagined episode up to its call labelled by
        its replay (`imagined.call`: `confirmed` or `false`)."""
        calls, self._calls = self._calls, []
        return calls

    def reset(self, init_ids: list[int], sim_states: list | None = None) -> Obs:
        self._miss_awaited()  # the last rollout's, with its entries
        obs = self.imagined.reset(init_ids)
        self._init_ids = list(init_ids)
        self._entries = [self.reset_set[i] for i in init_ids]
        self._chunks = [[] for _ in range(self.num_envs)]
        self._frames = [[image[None]] if self.keep_calls else [] for image in obs.images]
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._replay_stops = [None] * self.num_envs
        self._tally["episodes"] += len(init_ids)
        if self.exact:
            self._is_exact[:] = np.arange(self.num_envs) < self.exact_first
            if self._exact_tasks is not None:
                tasks = np.array([e.task_id for e in self._entries], dtype=np.int64)
                self._is_exact |= self._exact_tasks[tasks]
                np.add.at(self._task_recall[:, 2], tasks[self._is_exact], 1)
            self._tally["exact_episodes"] += int(self._is_exact.sum())
            t0 = time.perf_counter()
            reset_to_entries(self.exact_sim, self._entries[: self.exact])
            self._sim_time += time.perf_counter() - t0
            self._exact_steps[:] = 0
        return obs

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        out = self.imagined.chunk_step(actions)
        valid = out.info["valid"] & ~self._done[:, None]
        success = out.success & valid
        rewards = np.where(valid, out.rewards, 0.0).astype(np.float32)
        terminated = out.terminated & valid
        truncated = out.truncated & valid
        for i in np.flatnonzero(~self._done):
            self._chunks[i].append(np.asarray(actions[i]))
            if self.keep_calls:
                self._frames[i].append(out.frames[i])
        if (self._awaiting >= 0).any():
            self._await_calls(out.success & out.info["valid"])
        if self._is_exact.any():
            self._judge_exactly(actions, valid, success, rewards, terminated, truncated)
        for i in np.flatnonzero(success.any(axis=1) & ~self._is_exact):
            t0 = time.perf_counter()
            call = first_call(success[i])
            at, steps, stop = replay_confirms(
                self.sim, self._entries[i], self._chunks[i], call, self._replay_stops[i], self.go_on
            )
            confirmed, self._replay_stops[i] = at is not None, stop
            self._sim_time += time.perf_counter() - t0
            if self.keep_calls:
                self._calls.append(self._called_episode(i, call, at))
            self._real_steps += steps
            self._tally["calls"] += 1
            self._tally["confirmed"] += int(confirmed)
            self._tally["real_steps"] += steps
            if not confirmed:  # the judge's call was not real: a failure, or it goes on
                success[i] = False
                rewards[i] = 0.0
                if self.go_on and stop is not None:  # (not where the simulator's has ended)
                    terminated[i] = False
                    truncated[i, -1] = self.imagined.resume(i)
        self._done |= (terminated | truncated).any(axis=1)
        info = dict(out.info, valid=valid, called=out.success & valid)  # the judge's calls
        return ChunkResult(
            obs=out.obs,
            frames=out.frames,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            success=success,
            info=info,
        )

    def _judge_exactly(self, actions, valid, success, rewards, terminated, truncated) -> None:
        """The exact envs' chunk (`self._is_exact`), judged by the simulator stepping beside
        the world model; the arrays ([B, C]) are rewritten in place for those envs. The
        episode ends at the simulator's success (paid, called or not) or at a call the
        simulator has not reached (a failure, as an unconfirmed call anywhere; with
        `refuted_calls=continue` it goes on: `_go_on_exactly`)."""
        k = self.exact
        t0 = time.perf_counter()
        # an episode ended (a false call, say) stops its simulator env, as one not judged exactly
        live = ~self._done[:k] & self._is_exact[:k]
        real = self.exact_sim.chunk_step(np.asarray(actions[:k], dtype=np.float32), active=live)
        self._sim_time += time.perf_counter() - t0
        for i in np.flatnonzero(live):
            real_valid = real.info["valid"][i] & valid[i]
            hits = np.flatnonzero(real.success[i] & real_valid)
            calls = np.flatnonzero(success[i])
            # the simulator runs the chunk as the world model does: past a false call too
            steps = int(real_valid.sum())
            self._exact_steps[i] += steps
            self._real_steps += steps
            self._exact_real_steps += steps
            self._tally["real_steps"] += steps
            self._tally["exact_real_steps"] += steps
            if self.go_on and calls.size and not (hits.size and hits[0] <= calls[0]):
                calls = self._go_on_exactly(i, calls, hits, success, rewards, terminated, truncated)
            paid = hits.size > 0 and (calls.size == 0 or hits[0] <= calls[0])
            end = hits[0] if paid else (calls[0] if calls.size else None)
            if end is None:  # neither the simulator nor the judge has ended it
                continue
            if paid and calls.size:  # a real success the judge called (the per-task floor)
                self._task_recall[self._entries[i].task_id, 0] += 1
            elif paid:  # the judge holds frames before it calls: it may call in the next steps
                self._awaiting[i] = self._call_grace(len(valid[i])) - (len(valid[i]) - 1 - end)
            if calls.size:  # the judge called: confirmed by the simulator's own steps
                self._tally["calls"] += 1
                self._tally["confirmed"] += int(paid)
                if self.keep_calls:
                    replay = int(self._exact_steps[i]) if paid else None
                    self._calls.append(self._called_episode(i, int(calls[0]), replay))
            else:  # a success only the simulator saw: what the recall floor is for
                self._tally["exact_uncalled"] += 1
            valid[i, end + 1 :] = False
            success[i], rewards[i], terminated[i], truncated[i] = False, 0.0, False, False
            terminated[i, end] = True
            if paid:
                success[i, end] = True
                rewards[i, end] = self.imagined.reward_coef

    def _go_on_exactly(self, i, calls, hits, success, rewards, terminated, truncated):
        """`refuted_calls=continue` in exact env i: the judge's calls before the simulator's
        success (`hits`; all of them without one) are refuted by its own steps, counted and
        kept as one false call, and the episode goes on, the imagined env resumed (it may call
        again, also within the grace after a success the simulator ends). Returns the calls
        left: those at or after the success."""
        self._tally["calls"] += 1
        if self.keep_calls:
            self._calls.append(self._called_episode(i, int(calls[0]), None))
        success[i], rewards[i], terminated[i] = False, 0.0, False
        truncated[i, -1] = self.imagined.resume(i)
        return calls[calls >= hits[0]] if hits.size else calls[:0]

    def _call_grace(self, chunk: int) -> int:
        """The steps after a real success within which a call of the judge counts as calling
        it: the frames it holds before it calls, and a chunk of slack for the world model."""
        return self.imagined.success_frames - 1 + chunk

    def _await_calls(self, calls: np.ndarray) -> None:
        """The judge's calls [B, C] in the imagined episodes that go on (unpaid, unseen by RL)
        past a real success the simulator ended first: called within the grace, the success
        counts as called; the grace over, as uncalled."""
        for i in np.flatnonzero(self._awaiting >= 0):
            left, hits = int(self._awaiting[i]), np.flatnonzero(calls[i])
            task = self._entries[i].task_id
            if hits.size and hits[0] < left:
                self._task_recall[task, 0] += 1
                self._awaiting[i] = -1
            elif left <= calls.shape[1]:
                self._task_recall[task, 1] += 1
                self._awaiting[i] = -1
            else:
                self._awaiting[i] = left - calls.shape[1]

    def _called_episode(self, i: int, call_step: int, replay_steps: int | None) -> Episode:
        """Env i's episode up to the call at `call_step` of its last chunk: the imagined frames
        and the policy's actions, success from the replay (`replay_steps`: the confirmed
        replay's length; None: not confirmed) held from the replay's success to the call."""
        actions = np.concatenate(self._chunks[i])
        length = actions.shape[0] - self._chunks[i][-1].shape[0] + call_step + 1
        success = np.zeros(length, dtype=bool)
        if replay_steps is not None:
            success[replay_steps - 1 :] = True
        entry = self._entries[i]
        actions = actions[:length].astype(np.float32)
        transform = getattr(self.imagined, "action_transform", None)
        if transform is not None:  # as executed (LIBERO's gripper sign), as stores hold them
            actions = transform(actions[None])[0]
        return Episode(
            task_id=int(entry.task_id),
            task_name=self.task_names[entry.task_id],
            instruction=entry.instruction,
            seed=int(entry.seed),
            init_id=self._init_ids[i],
            frames=np.concatenate(self._frames[i])[: length + 1],
            actions=np.asarray(actions, dtype=np.float32),
            rewards=success.astype(np.float32),
            success=success,
            chunk_size=self._chunks[i][0].shape[0],
            imagined={
                "labels": VERIFIED_CALL_LABELS,
                "reset_entry": self._init_ids[i],
                "start_step": int(entry.step),  # > 0: a keyframe start
                "call": "confirmed" if replay_steps is not None else "false",
            },
        )

    def close(self) -> None:
        self.sim.close()
        if self.exact_sim is not None:
            self.exact_sim.close()
