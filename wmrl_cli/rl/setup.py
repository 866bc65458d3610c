"""Assembling RL in imagination from paths in the config: policy, world model, reward model,
reset set, the imagined env of this rank, and the real-simulator evaluation callback."""

from __future__ import annotations

from pathlib import Path

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.reset_set import ResetEntry, load_rlinf_reset_set, reset_set_from_store
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.errors import WmrlError


def _required(value: str | None, key: str, hint: str) -> str:
    if not value:
        raise WmrlError(f"'{key}' is not set: {hint}")
    return value


def check_inputs(cfg: RunConfig) -> None:
    """Fail before anything is written if a path the imagined env needs is missing."""
    for key, value, hint in (
        ("world_model.path", cfg.world_model.path, "pass --world-model RUN (a wmrl train-wm run)"),
        (
            "reward_model.path",
            cfg.reward_model.path,
            "pass --reward-model RUN (a wmrl train-reward run)",
        ),
        (
            "world_model.reset_set",
            cfg.world_model.reset_set,
            "pass --reset-set STORE (wmrl rollout --kir output) or an RLinf folder",
        ),
    ):
        if not Path(_required(value, key, hint)).exists():
            raise WmrlError(f"{key}: {value} does not exist")


def load_reset_set(cfg: RunConfig) -> tuple[list[ResetEntry], list[str]]:
    """Reset entries and task names from an episode store (with its kir.json) or RLinf layout."""
    from wmrl_cli.data.collection import read_keyframes

    path = Path(
        _required(
            cfg.world_model.reset_set,
            "world_model.reset_set",
            "pass --reset-set STORE (wmrl rollout --kir output) or an RLinf folder",
        )
    )
    if (path / "index.json").is_file():
        store = EpisodeStore.open(path)
        keys = read_keyframes(path) if cfg.algorithm.enable_kir else []
        ids = [int(m["id"]) for m in store.index]
        names: dict[int, str] = {int(m["task_id"]): m["task_name"] for m in store.index}
        entries = reset_set_from_store(store, ids, keys, cfg.world_model.context_frames)
    elif path.is_dir():
        entries = load_rlinf_reset_set(
            path, cfg.algorithm.enable_kir, cfg.world_model.context_frames
        )
        names = {}
    else:
        raise WmrlError(f"{path}: not an episode store or an RLinf reset folder")
    n_tasks = 1 + max(e.task_id for e in entries)
    return entries, [names.get(t, f"task{t}") for t in range(n_tasks)]


def reward_model_dir(path: str) -> Path:
    p = Path(path)
    return p / "reward_model" if (p / "reward_model" / "config.json").is_file() else p


def build_imagined_env(cfg: RunConfig, num_envs: int, device: str) -> ImaginedEnv:
    from wmrl_cli.rewards.loading import load_reward_model
    from wmrl_cli.training.world_model_trainer import load_world_model

    wm_path = _required(
        cfg.world_model.path, "world_model.path", "pass --world-model RUN (a wmrl train-wm run)"
    )
    rm_path = _required(
        cfg.reward_model.path,
        "reward_model.path",
        "pass --reward-model RUN (a wmrl train-reward run)",
    )
    world_model = load_world_model(wm_path, device=device).eval()
    if cfg.world_model.num_inference_steps is not None:
        world_model.config.num_inference_steps = cfg.world_model.num_inference_steps
    reward_model = load_reward_model(reward_model_dir(rm_path)).to(device)
    entries, task_names = load_reset_set(cfg)
    threshold = cfg.reward_model.success_threshold
    if threshold is None:
        threshold = reward_model.threshold if reward_model.threshold is not None else 0.9
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
    )


def real_eval_callback(cfg: RunConfig, run_dir: Path):
    """Evaluate in the real simulator: success_once overall and per task (eval/*)."""
    from wmrl_cli.data.episodes import atomic_write_text
    from wmrl_cli.evaluation.policy_eval import evaluate_policy
    from wmrl_cli.policies.registry import LearnedPolicy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    def evaluate(model, step: int) -> dict[str, float]:
        policy = LearnedPolicy(model, top_k=cfg.policy.top_k, seed=cfg.simulator.seed)
        with MetaWorldSim(cfg.simulator) as sim:
            report = evaluate_policy(
                sim,
                policy,
                suite=cfg.simulator.suite,
                trials=cfg.algorithm.eval_trials,
                chunk_size=cfg.simulator.chunk_size,
                base_seed=cfg.simulator.seed,
                sample=not cfg.policy.greedy,
                temperature=cfg.policy.temperature,
                progress=cfg.logging.progress,
            )
        model.train()
        atomic_write_text(run_dir / "eval" / f"step_{step:06d}.json", report.to_json())
        out = {"eval/success_once": report.overall}
        out.update({f"eval/success_once/{k}": v for k, v in report.per_task.items()})
        return out

    return evaluate
