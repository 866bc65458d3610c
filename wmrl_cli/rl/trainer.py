"""GRPO / PPO for a VLA policy inside an env (normally the imagined one): `wmrl train-policy`.

One step = `rollout_epochs` rollouts (each rank steps its own shard of the envs; with dynamic
sampling, more while fewer than `min_kept_groups` groups pass the filter) ->
advantages -> update epochs, each cutting the shuffled trajectories into `optimizer_steps`
batches whose minibatches are accumulated into one optimizer step (rl/schedule.py) ->
metrics reduced over ranks. Log-probs are per action token [B,T,C,A]; steps after an env's
first done are masked; GRPO groups are consecutive envs that share an initial state, and a
rank's shard always holds whole groups.

Real-step accounting: `env/real_steps` is the cumulative number of real environment steps the
run has consumed, summed over ranks: the executed steps of every rollout in an env whose
`real` attribute is true (the simulator, `envs/simulator_rl.py`), none in the imagined env,
a verified env's replays; it starts at `real_steps` (what came before, e.g. co-evolve's data
collection) and is checkpointed with the run, split by kind (`env/real_steps_<kind>`:
data, rollouts, calls, exact; rl/real_step_kinds.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.envs.interface import Env
from wmrl_cli.envs.reset_sampler import GroupResetSampler, task_ids
from wmrl_cli.envs.verified import TaskRecall
from wmrl_cli.logging import MetricsLogger, console, progress_task
from wmrl_cli.memory.budget import env_memory_plan
from wmrl_cli.rl import (
    band_filter,
    broadcast_advantages,
    entropy_loss,
    explained_variance,
    gae,
    grpo_advantages,
    kl_loss,
    normalize_advantages,
    policy_loss,
    token_mask,
    trajectory_returns,
    value_loss,
    varied_outcome_groups,
)
from wmrl_cli.rl.aggregation import LossAggregation, loss_scale
from wmrl_cli.rl.bc_anchor import RealSuccessAnchor
from wmrl_cli.rl.buffer import Rollout, collect_rollout
from wmrl_cli.rl.judge_audit import JudgeAudit
from wmrl_cli.rl.policy_start import LoadBase, starting_policies
from wmrl_cli.rl.real_step_kinds import KINDS, real_step_metrics, restored, taken_by_kind
from wmrl_cli.rl.rollout_metrics import judge_and_truth, rollout_metrics
from wmrl_cli.rl.schedule import check_world_size, concat_rollouts, optimizer_batches
from wmrl_cli.rl.verified_calls import drop_calls_after, write_step_calls
from wmrl_cli.run_dirs import write_rank_summary
from wmrl_cli.trackers import tracked
from wmrl_cli.training.checkpoints import latest_checkpoint, save_checkpoint
from wmrl_cli.training.sharding import PolicySharding, frozen_models, offloaded

POLICY_DIR = "policy"


def ensure_value_head(model) -> None:
    """PPO needs a critic: add a fresh value head to a policy saved without one."""
    from wmrl_cli.policies.openvla_oft import ValueHead

    if model.value_head is None:
        model.config.value_head = True
        model.value_head = ValueHead(
            model.config.llm.hidden_size, model.config.value_hidden_size
        ).to(model.device)


@dataclass
class StepResult:
    metrics: dict[str, float]
    rollout: Rollout


class PolicyTrainer:
    """GRPO or PPO of one policy on this rank's `env`. `load_base(device, dtype)` returns the
    base policy in that place and weights' dtype (`PolicySharding.load_device`, `load_dtype`);
    it is called only when the run starts fresh or keeps a KL anchor, so that nothing holds
    the base beside a resumed run's policy (`rl/policy_start.py`)."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        load_base: LoadBase,
        env: Env,
        accelerator,
        evaluate: Callable[[Any, int], dict[str, float]] | None = None,
        real_steps: int = 0,
    ) -> None:
        self.cfg, self.alg, self.run_dir = cfg, cfg.algorithm, run_dir
        self.accelerator = accelerator
        self.env = env
        self.evaluate = evaluate
        rank, world = accelerator.process_index, accelerator.num_processes
        check_world_size(self.alg.num_envs, self.alg.group_size, world)
        self.local_envs = self.alg.num_envs // world
        train_tasks = self.alg.train_tasks
        self.sampler = GroupResetSampler(
            len(env.reset_set),
            self.alg.num_envs,
            self.alg.group_size,
            seed=cfg.simulator.seed,
            mode=self.alg.reset_sampling,
            entry_tasks=getattr(env, "entry_task_ids", None),
            tasks=None if train_tasks is None else task_ids(train_tasks, env.task_names),
        )
        self.rank = rank
        wms, rms = frozen_models(env)
        self.sharding = PolicySharding(cfg.training, accelerator)
        checkpoint = latest_checkpoint(run_dir)
        kl = self.alg.kl_coef > 0
        model, self.reference = starting_policies(load_base, self.sharding, checkpoint, kl)
        # The memory plan, before the first step (one line, exit 2, where it does not fit).
        self.memory = env_memory_plan(cfg, model.config, env, world, str(accelerator.device))
        if checkpoint is None and cfg.training.lora_rank:
            from wmrl_cli.policies.config import LoraSpec
            from wmrl_cli.policies.lora import apply_lora

            r = cfg.training.lora_rank
            apply_lora(model, LoraSpec(rank=r, alpha=r))
        if self.alg.name == "ppo":
            ensure_value_head(model)
        model = self.sharding.prepare_model(model)  # dtype, checkpointing, sharding
        critic = [p for n, p in model.named_parameters() if n.startswith("value_head.")]
        actor = [
            p
            for n, p in model.named_parameters()
            if not n.startswith("value_head.") and p.requires_grad
        ]
        t = cfg.training
        groups = [{"params": actor, "lr": t.lr}]
        if critic:
            groups.append({"params": critic, "lr": t.value_lr})
        self.optimizer = self.sharding.optimizer(
            groups, betas=t.adam_betas, eps=t.adam_eps, weight_decay=t.weight_decay
        )
        self.model = model
        self.step = 0
        self.real_steps_by_kind = restored({}, real_steps)
        self.real_steps = real_steps
        self._resumed_from = None
        self.last_eval: tuple[int, float] | None = None  # (step, real success) of the last eval
        # per task, the judge against the simulator on training episodes (when both judge)
        self.audit = JudgeAudit(list(getattr(env, "task_names", [])))
        rm = cfg.reward_model  # the per-task recall floor's evidence, over all ranks
        self.task_recall = None
        if rm.task_recall_floor and hasattr(env, "set_exact_tasks"):
            floor, evidence = rm.task_recall_floor, rm.task_recall_evidence
            self.task_recall = TaskRecall(env.task_names, floor, evidence, rm.task_recall_probe)
        if checkpoint is not None:
            info = self.sharding.load_checkpoint(checkpoint, model, self.optimizer)
            self.step = info["step"]
            self.sampler.load_state_dict(info["extra"]["sampler"])
            self.real_steps_by_kind = restored(info["extra"], real_steps)
            self.real_steps = sum(self.real_steps_by_kind.values())
            if "judge_audit" in info["extra"]:
                self.audit.load_state_dict(info["extra"]["judge_audit"])
            if self.task_recall is not None and "task_recall" in info["extra"]:
                self.task_recall.load_state_dict(info["extra"]["task_recall"])
                env.set_exact_tasks(self.task_recall.exact_tasks())
            self._resumed_from = checkpoint.name
        if accelerator.is_main_process:  # once a resume's state has loaded (a damaged one
            self.memory.print()  # stops the command with its one line alone)
            drop_calls_after(self.run_dir, self.step)
        self.wrapped, self.optimizer = self.sharding.prepare(model, self.optimizer)
        self.unwrapped = self.sharding.unwrap(self.wrapped)
        self.anchor = None  # a behaviour-cloning term on real successes (algorithm.bc_coef)
        if self.alg.bc_coef > 0:
            self.anchor = RealSuccessAnchor.from_store(
                self.alg.bc_data,
                self.unwrapped.chunk_size,
                self.alg.bc_batch_size,
                cfg.simulator.seed,
                rank,
                world,
                tasks=self.alg.bc_tasks,
            )
        self._frozen = wms + rms  # moved off the device for updates (offload_during_update)
        # every rank enters an evaluation (under fsdp they gather the policy for it)
        self._evaluates = self._global_sum(int(evaluate is not None)) > 0
        self.loss_rule = LossAggregation(
            self.alg.aggregation,
            self.alg.filtered_in_denominator,
            loss_scale(self.alg.max_episode_steps, self.unwrapped.chunk_size),
        )
        self.generator = torch.Generator()
        self.logger = MetricsLogger(
            run_dir,
            cfg.logging.tensorboard,
            **tracked(cfg),
            enabled=accelerator.is_main_process,
            resume_step=self.step,
            log_every=cfg.logging.log_every,
            total=cfg.training.steps,
        )
        self._local_metrics: dict[str, float] = {}
        self._stepped_ids: list[list[int]] = []

    # -- advantages ------------------------------------------------------------------------
    def advantages(self, ro: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(advantages [B,T], returns [B,T], trajectory keep mask [B])."""
        g = self.alg.group_size
        if self.alg.name == "grpo":
            returns = trajectory_returns(ro.rewards * ro.step_mask, ro.dones)
            adv = grpo_advantages(returns, g, normalize_std=self.alg.normalize_advantage_std)
            keep = torch.ones_like(returns, dtype=torch.bool)
            if self.alg.filter_groups:
                keep = self._kept_groups(ro).repeat_interleave(g)
            step_adv = broadcast_advantages(adv, ro.step_mask)
            return step_adv, returns[:, None].expand_as(step_adv), keep
        adv, ret = gae(
            ro.rewards, ro.values, ro.dones, ro.last_value, self.alg.gamma, self.alg.gae_lambda
        )
        if self.alg.normalize_gae_advantages:
            adv = normalize_advantages(adv, ro.step_mask)
        return adv, ret, torch.ones(adv.shape[0], dtype=torch.bool)

    def _kept_groups(self, ro: Rollout) -> torch.Tensor:
        """GRPO's group filter: bool [groups], the groups whose returns carry a gradient."""
        g, band = self.alg.group_size, self.alg.filter_band
        returns = trajectory_returns(ro.rewards * ro.step_mask, ro.dones)
        if band is None:
            return varied_outcome_groups(returns, g)
        return band_filter(returns, g, *band)

    def _global_sum(self, value: int) -> int:
        total = torch.tensor([value], dtype=torch.int64, device=self.accelerator.device)
        return int(self.accelerator.reduce(total, "sum").item())

    def _log_eval_videos(self) -> None:
        """Each task's grid video of this step's evaluation (eval.save_video) to TensorBoard and
        the trackers, as `eval/video/<task>` at this step (the main process's logger only)."""
        from wmrl_cli.evaluation.policy_eval import grid_videos, step_video_dir

        if not self.logger.enabled:
            return
        fps = self.cfg.eval.video_fps
        for task, path in grid_videos(step_video_dir(self.run_dir, self.step)).items():
            self.logger.log_video(f"eval/video/{task}", path, self.step, fps=fps)

    # -- one step --------------------------------------------------------------------------
    def train_step(self) -> StepResult:
        acc, alg = self.accelerator, self.alg
        timings: dict[str, float] = {}
        t0 = time.time()
        # Counter-based seeding (seed, step, rank): a resumed run draws what an uninterrupted
        # one would, with no generator state to checkpoint.
        seed = int(
            np.random.default_rng([self.cfg.simulator.seed, self.step, self.rank]).integers(2**62)
        )
        self.generator.manual_seed(seed)
        if hasattr(self.env, "generator"):
            self.env.generator.manual_seed(seed + 1)
        max_chunks = -(-alg.max_episode_steps // self.unwrapped.chunk_size)
        self.wrapped.eval()
        rollouts, ids, global_ids = [], [], []
        kept_groups = 0
        # Each epoch draws fresh initial states. Dynamic sampling (min_kept_groups > 0) goes on
        # drawing while too few groups carry a gradient; the decision is global, so every rank
        # collects the same number of epochs (DDP needs equal backward passes).
        # the whole policy on every rank for the rollouts (fsdp: no collective per call)
        with self.sharding.gathered(self.wrapped):
            while len(rollouts) < alg.rollout_epochs or (
                kept_groups < alg.min_kept_groups and len(rollouts) < alg.max_rollout_epochs
            ):
                drawn = self.sampler.sample()
                global_ids.append(drawn)
                shard = drawn[self.rank * self.local_envs :][: self.local_envs]
                ids += shard
                epoch = collect_rollout(
                    self.env,
                    self.unwrapped,
                    shard,
                    max_chunks,
                    self.cfg.policy.temperature,
                    self.cfg.policy.top_k,
                    self.generator,
                )
                rollouts.append(epoch)
                if alg.min_kept_groups:
                    kept_groups += self._global_sum(int(self._kept_groups(epoch).sum()))
        ro = concat_rollouts(rollouts)
        timings["time/rollout"] = time.time() - t0
        self._observe_outcomes(global_ids, ro)
        for kind, steps in self._real_steps_taken(ro).items():
            self.real_steps_by_kind[kind] += steps
        self.real_steps = sum(self.real_steps_by_kind.values())
        if hasattr(self.env, "pop_timings"):
            timings.update({f"time/{k}": v for k, v in self.env.pop_timings().items()})
        if hasattr(self.env, "pop_metrics"):  # e.g. verified imagination's call tally
            timings.update(self.env.pop_metrics())
        if self.task_recall is not None:  # which tasks the next rollouts judge exactly
            counts = torch.as_tensor(self.env.pop_task_recall(), device=acc.device)
            counts = acc.reduce(counts, "sum").cpu().numpy()
            self.task_recall.add(counts)
            exact = self.task_recall.exact_tasks()
            self.env.set_exact_tasks(exact)
            timings["verify/exact_tasks"] = float(exact.sum())
            # this step's real successes in exact episodes the judge called, and did not (per
            # rank, as the other verify/ tallies)
            per_rank = counts[:, :2].sum(0) / acc.num_processes
            timings["verify/exact_called"], timings["verify/exact_missed"] = map(float, per_rank)
        if hasattr(self.env, "pop_calls"):  # verified imagination's calls, labelled
            t_calls = time.time()
            calls = self.env.pop_calls()
            if self.cfg.reward_model.keep_verified_calls:
                several = self.accelerator.num_processes > 1
                write_step_calls(self.run_dir, self.step + 1, calls, self.rank, several)
            timings["time/write_calls"] = time.time() - t_calls

        adv, returns, keep = self.advantages(ro)
        step_mask = ro.step_mask & keep[:, None]
        c, a = ro.tokens.shape[2:]
        t1 = time.time()
        self.wrapped.train()
        stats: dict[str, list[float]] = {}
        b = ro.tokens.shape[0]
        mb_size = alg.minibatch_trajectories
        # the frozen world and reward models leave the device for the update where planned
        with offloaded(self._frozen, acc.device, self.memory.offload_world_model):
            optimizer_step = 0
            for _ in range(alg.update_epochs):
                order = torch.randperm(b, generator=self.generator)
                for batch in optimizer_batches(order, alg.optimizer_steps):
                    self.optimizer.zero_grad(set_to_none=True)
                    for start in range(0, len(batch), mb_size):
                        idx = batch[start : start + mb_size]
                        mb_mask = step_mask[idx]
                        loss, mb_stats = self._minibatch_loss(
                            ro, idx, mb_mask, adv[idx], returns[idx], c, a
                        )
                        # the minibatches of a batch add up to the batch's aggregate, exactly
                        acc.backward(loss * self.loss_rule.share(mb_mask, step_mask[batch]))
                        for k, v in mb_stats.items():
                            stats.setdefault(k, []).append(float(v))
                    if self.anchor is not None:
                        self._anchor_backward(optimizer_step, stats)
                    optimizer_step += 1
                    # the whole gradient's norm, wherever its shards live
                    grad_norm = self.sharding.clip_gradients(
                        self.wrapped.parameters(), self.cfg.training.grad_clip
                    )
                    self.optimizer.step()
                    grad_norm = float(grad_norm)
                    stats.setdefault("train/actor/grad_norm", []).append(grad_norm)
            self.optimizer.zero_grad(set_to_none=True)  # no gradients held in the rollout
        timings["time/update"] = time.time() - t1

        metrics = {k: float(np.mean(v)) for k, v in stats.items()}
        metrics.update(rollout_metrics(ro, adv, keep))
        self._audit(ro)
        metrics["rollout/epochs"] = float(len(rollouts))  # > rollout_epochs: dynamic sampling
        metrics.update(real_step_metrics(self.real_steps_by_kind))  # equal on every rank
        metrics["train/actor/lr"] = self.cfg.training.lr
        metrics.update(timings)
        metrics["time/step"] = time.time() - t0
        self._local_metrics = metrics
        self._stepped_ids.append(ids)
        return StepResult(self._reduce(metrics), ro)

    def _anchor_backward(self, optimizer_step: int, stats: dict[str, list[float]]) -> None:
        """The behaviour-cloning term of this optimizer step (`rl/bc_anchor.py`), its gradient
        added to the policy gradient's."""
        bc = self.anchor.loss(
            self.unwrapped, self.wrapped, self.accelerator.device, self.step, optimizer_step
        )
        self.accelerator.backward(self.alg.bc_coef * bc.loss)
        for key, value in (("loss", bc.loss), ("token_accuracy", bc.token_accuracy)):
            stats.setdefault(f"train/bc/{key}", []).append(float(value.detach()))

    def _minibatch_loss(
        self,
        ro: Rollout,
        idx: torch.Tensor,
        mask: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        c: int,
        a: int,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        alg = self.alg
        sel = mask.nonzero(as_tuple=False)  # (traj, step) pairs to forward
        if len(sel) == 0:  # every rank must run the same forwards (DDP): a zero-weight one
            sel = torch.zeros((1, 2), dtype=torch.long)
        rows, cols = sel[:, 0].numpy(), sel[:, 1].numpy()
        images = torch.from_numpy(ro.images[idx.numpy()][rows, cols])
        prompts = [ro.instructions[int(idx[i])] for i in sel[:, 0]]
        tokens = ro.tokens[idx][sel[:, 0], sel[:, 1]]
        out = self.wrapped(
            images, prompts, tokens, self.cfg.policy.temperature, self.cfg.policy.top_k
        )
        shape = (len(idx), mask.shape[1], c, a)
        logp = torch.zeros(shape).index_put((sel[:, 0], sel[:, 1]), out.log_probs.cpu())
        ent = torch.zeros(shape).index_put((sel[:, 0], sel[:, 1]), out.entropy.cpu())
        tok_mask = token_mask(mask, c, a)
        adv_tok = adv[:, :, None, None].expand(shape)
        loss, pm = policy_loss(
            logp,
            ro.logprobs[idx],
            adv_tok,
            tok_mask,
            alg.clip_low,
            alg.clip_high,
            alg.dual_clip,
            self.loss_rule,
        )
        ent_loss = entropy_loss(ent, tok_mask, self.loss_rule)
        total = loss - alg.entropy_coef * ent_loss
        if self.reference is not None:
            policy = self.cfg.policy  # the reference runs in the policy's precision
            ref = self.sharding.reference_forward(
                self.reference, images, prompts, tokens, policy.temperature, policy.top_k
            )
            ref_logp = torch.zeros(shape).index_put((sel[:, 0], sel[:, 1]), ref.log_probs.cpu())
            kl = kl_loss(logp, ref_logp, tok_mask, self.loss_rule)
            total = total + alg.kl_coef * kl
        stats = {
            "train/actor/policy_loss": pm["policy_loss"],
            "train/actor/approx_kl": pm["approx_kl"],
            "train/actor/clip_fraction": pm["clip_fraction"],
            "train/actor/clipped_ratio": pm["clipped_ratio"],
            "train/entropy_loss": ent_loss.detach(),
        }
        if self.reference is not None:
            stats["train/actor/kl_loss"] = kl.detach()
        if alg.name == "ppo" and out.values is not None:
            values = torch.zeros(mask.shape).index_put((sel[:, 0], sel[:, 1]), out.values.cpu())
            vloss, vm = value_loss(
                values,
                ro.values[idx],
                returns,
                mask,
                alg.value_clip,
                alg.huber_delta,
                self.loss_rule,
            )
            total = total + vloss
            stats["train/critic/value_loss"] = vm["value_loss"]
            stats["train/critic/value_clip_ratio"] = vm["value_clip_ratio"]
            stats["train/critic/explained_variance"] = explained_variance(
                values.detach(), returns, mask
            )
        stats["train/loss"] = total.detach()
        return total.to(self.accelerator.device), stats

    def _audit(self, ro: Rollout) -> None:
        """Add every rank's episodes with two verdicts to the per-task audit (the same tally on
        every rank, so that any rank's checkpoint carries the whole of it)."""
        verdicts = judge_and_truth(ro)
        if ro.task_ids is None or verdicts is None:
            return
        judged, real = verdicts
        seen = ro.real_frame_passes
        columns = [ro.task_ids, judged.long(), real.long()]
        if seen is not None:
            columns.append(seen.long())
        local = torch.stack(columns, 1)
        rows = self.accelerator.gather(local.to(self.accelerator.device)).cpu().numpy()
        self.audit.add(
            rows[:, 0],
            rows[:, 1].astype(bool),
            rows[:, 2].astype(bool),
            None if seen is None else rows[:, 3].astype(bool),
        )

    def _observe_outcomes(self, global_ids: list[list[int]], ro: Rollout) -> None:
        """Feed every rank's training outcomes, in global order, to the reset sampler."""
        if self.alg.reset_sampling == "uniform":
            return
        local = ro.success.to(torch.int64).reshape(len(global_ids), self.local_envs)
        # gather: [world * epochs, local] in rank order -> per epoch, ranks concatenated
        gathered = self.accelerator.gather(local.to(self.accelerator.device)).cpu()
        world = gathered.shape[0] // len(global_ids)
        per_rank = gathered.reshape(world, len(global_ids), self.local_envs)
        for epoch, drawn in enumerate(global_ids):
            self.sampler.observe(drawn, per_rank[:, epoch].reshape(-1).bool().tolist())

    def _real_steps_taken(self, ro: Rollout) -> dict[str, int]:
        """Real environment steps of this rollout by kind, summed over ranks."""
        local = taken_by_kind(self.env, int(ro.episode_len.sum()))
        counts = torch.tensor([local.get(k, 0) for k in KINDS], device=self.accelerator.device)
        return dict(zip(KINDS, self.accelerator.reduce(counts, "sum").tolist(), strict=True))

    def _reduce(self, metrics: dict[str, float]) -> dict[str, float]:
        """Mean over ranks (every rank logs the same keys in the same order)."""
        keys = sorted(metrics)
        values = torch.tensor(
            [metrics[k] for k in keys], dtype=torch.float64, device=self.accelerator.device
        )
        values = self.accelerator.reduce(values, "mean")
        return dict(zip(keys, values.cpu().tolist()))

    def _write_rank_summary(self) -> None:
        """Per rank: a digest of its weights, the reset-set entries it stepped and its last
        un-reduced metrics, for checking data parallelism (ranks/rank_N.json)."""
        write_rank_summary(
            self.run_dir,
            self.rank,
            self.sharding.local_state(self.unwrapped),
            init_ids=self._stepped_ids,  # per step this process ran, from first_step on
            first_step=self.step - len(self._stepped_ids) + 1,
            sampler=self.sampler.state_dict(),  # identical on every rank
            last_metrics=self._local_metrics,
        )

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> Path:
        t = self.cfg.training
        acc = self.accelerator
        if self._resumed_from and acc.is_main_process:  # once, whatever the number of ranks
            console.print(f"resuming policy training from {self._resumed_from}")
        real, imagines = (getattr(self.env, flag, False) for flag in ("real", "imagines"))
        where = "the simulator" if real and not imagines else "imagination"
        with progress_task(
            f"{self.alg.name} in {where}",
            t.steps,
            self.cfg.logging.progress and acc.is_main_process,
        ) as advance:
            advance(self.step)
            while self.step < t.steps:
                result = self.train_step()
                self.step += 1
                metrics = result.metrics
                every = self.alg.eval_every
                evaluated = self._evaluates and (
                    (every and self.step % every == 0) or self.step == t.steps
                )
                if evaluated:
                    with self.sharding.gathered(self.wrapped):  # each rank its share
                        if self.evaluate is not None:
                            t_eval = time.time()
                            metrics.update(self.evaluate(self.unwrapped, self.step))
                            metrics["time/eval"] = time.time() - t_eval
                            self.last_eval = (self.step, metrics["eval/success_once"])
                self.logger.log(metrics, self.step)
                if evaluated and self.cfg.eval.save_video:
                    self._log_eval_videos()
                if self.step % t.save_every == 0 or self.step == t.steps:
                    acc.wait_for_everyone()
                    # every rank: under fsdp each writes its optimizer shard, the policy is gathered
                    save_model, stateful = self.sharding.checkpoint_parts(
                        self.wrapped, self.optimizer, self.run_dir, self.step
                    )
                    if acc.is_main_process:
                        save_checkpoint(
                            self.run_dir,
                            self.step,
                            save_model,
                            stateful,
                            {
                                "sampler": self.sampler.state_dict(),
                                "real_steps": self.real_steps,
                                "real_steps_by_kind": self.real_steps_by_kind,
                                "judge_audit": self.audit.state_dict(),
                                **(
                                    {}
                                    if self.task_recall is None
                                    else {"task_recall": self.task_recall.state_dict()}
                                ),
                            },
                            keep=t.keep_checkpoints,
                        )
                advance()
        self.logger.close()
        self._write_rank_summary()
        out = self.run_dir / POLICY_DIR
        acc.wait_for_everyone()
        self.sharding.save_policy(self.wrapped, out)  # consolidated, by the main process
        if acc.is_main_process and self.audit.episodes:
            self.audit.write(self.run_dir)
            console.print(self.audit.table())
        return out
