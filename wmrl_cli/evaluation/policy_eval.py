"""Policy evaluation in a real simulator: every task x trial with fixed seeds, success_once."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.table import Table

from wmrl_cli.data.episodes import Episode
from wmrl_cli.envs.interface import Env, Policy
from wmrl_cli.envs.runner import iter_episodes
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import format_difference, paired_difference, wilson_interval
from wmrl_cli.evaluation.videos import tile, upscale, write_mp4
from wmrl_cli.files import atomic_write_text
from wmrl_cli.logging import progress_task

if TYPE_CHECKING:
    from wmrl_cli.config import RunConfig
    from wmrl_cli.config.schema import SimulatorConfig


@dataclass
class EpisodeResult:
    task: str
    trial: int
    init_id: int
    seed: int
    success: bool
    length: int
    video: str | None = None


@dataclass
class EvalReport:
    suite: str
    policy: str
    trials_per_task: int
    per_task: dict[str, float]
    overall: float
    episodes: list[EpisodeResult] = field(default_factory=list)
    # `--baseline`: paired differences against an earlier evaluation (compare_with_baseline)
    baseline: dict | None = None

    @property
    def interval(self) -> tuple[float, float]:
        """Wilson 95% interval of the overall success rate."""
        return wilson_interval(sum(e.success for e in self.episodes), len(self.episodes))

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "overall_interval95": list(self.interval)}, indent=1)

    def _overall(self) -> str:
        low, high = self.interval
        return f"{100 * self.overall:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"

    def table(self, title: str = "success_once") -> Table:
        table = Table(title=f"{title}: {self.policy} on {self.suite}")
        table.add_column("task")
        table.add_column("success", justify="right")
        table.add_column("trials", justify="right")
        for task, rate in self.per_task.items():
            table.add_row(task, f"{100 * rate:.1f}%", str(self.trials_per_task))
        table.add_section()
        table.add_row("overall", self._overall(), str(len(self.episodes)))
        return table

    def markdown(self) -> str:
        lines = [
            f"# Evaluation: {self.policy} on {self.suite}",
            "",
            f"{self.trials_per_task} trials per task, success_once; overall with its Wilson 95% "
            "interval.",
            "",
            "| task | success |",
            "|---|---|",
        ]
        lines += [f"| {task} | {100 * rate:.1f}% |" for task, rate in self.per_task.items()]
        lines.append(f"| **overall** | **{self._overall()}** |")
        if self.baseline is not None:
            lines += ["", *baseline_markdown(self.baseline)]
        return "\n".join(lines) + "\n"

    def save(self, run_dir: Path) -> None:
        atomic_write_text(run_dir / "report.json", self.to_json())
        atomic_write_text(run_dir / "report.md", self.markdown())


def load_baseline(path: Path) -> dict:
    """An earlier `wmrl eval` report (its report.json, or the run directory holding it)."""
    file = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(file.read_text())
        episodes = [(int(e["init_id"]), bool(e["success"])) for e in report["episodes"]]
        return {"path": str(path), "suite": str(report["suite"]), "episodes": episodes}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WmrlError(
            f"--baseline {path}: not a policy evaluation report (report.json of `wmrl eval "
            f"--policy`): {exc.__class__.__name__}"
        ) from None


def compare_with_baseline(report: EvalReport, baseline: dict) -> dict:
    """This evaluation minus the baseline's on the episodes (init ids, so seeds) both ran,
    overall and per task: paired bootstrap differences (evaluation/intervals.py)."""
    if baseline["suite"] != report.suite:
        raise WmrlError(
            f"--baseline {baseline['path']} evaluated {baseline['suite']}, this run {report.suite}"
        )
    before = dict(baseline["episodes"])
    after = {e.init_id: e.success for e in report.episodes}
    shared = sorted(set(before) & set(after))
    if not shared:
        raise WmrlError(f"--baseline {baseline['path']} shares no episode (init id) with this run")
    task_of = {e.init_id: e.task for e in report.episodes}

    def difference(ids: list[int]) -> dict:
        return paired_difference([before[i] for i in ids], [after[i] for i in ids]).to_dict()

    per_task = {}
    for task in report.per_task:
        ids = [i for i in shared if task_of[i] == task]
        if ids:
            per_task[task] = difference(ids)
    return {"path": baseline["path"], "overall": difference(shared), "per_task": per_task}


def _difference_row(name: str, d: dict) -> str:
    return (
        f"| {name} | {d['episodes']} | {100 * d['rate_a']:.1f}% | {100 * d['rate_b']:.1f}% | "
        f"{format_difference(d)} |"
    )


def baseline_markdown(comparison: dict) -> list[str]:
    lines = [
        f"## Against the baseline {comparison['path']}",
        "",
        "Paired by episode (same init ids and seeds): this run minus the baseline, with the "
        "percentile bootstrap 95% interval of the difference (points).",
        "",
        "| task | episodes | baseline | this run | difference [95%] |",
        "|---|---|---|---|---|",
    ]
    lines += [_difference_row(task, d) for task, d in comparison["per_task"].items()]
    lines.append(_difference_row("**overall**", comparison["overall"]))
    return lines


def baseline_table(comparison: dict) -> Table:
    """`compare_with_baseline`'s rows as a rich table, the overall row last."""
    table = Table(title=f"against {comparison['path']} (paired, bootstrap 95%)")
    for column in ("task", "episodes", "baseline", "this run", "difference [95%]"):
        table.add_column(column, justify="left" if column == "task" else "right")
    rows = [*comparison["per_task"].items(), ("overall", comparison["overall"])]
    for i, (task, d) in enumerate(rows):
        if i == len(rows) - 1:
            table.add_section()
        table.add_row(
            task,
            str(d["episodes"]),
            f"{100 * d['rate_a']:.1f}%",
            f"{100 * d['rate_b']:.1f}%",
            format_difference(d),
        )
    return table


def eval_init_ids(num_tasks: int, trials: int) -> list[int]:
    """Trial-major order, so each batch mixes tasks: init_id = trial * num_tasks + task."""
    return list(range(trials * num_tasks))


def rank_share(init_ids: list[int], batch: int, rank: int, world: int) -> list[int]:
    """The init ids rank `rank` of `world` evaluates: whole batches of `batch` (the env's
    num_envs), dealt round robin, so that each batch is the one a single rank would run (the
    same episodes, seeds and sampling: `LearnedPolicy.start_episodes`)."""
    starts = range(rank * batch, len(init_ids), world * batch)
    return [i for start in starts for i in init_ids[start : start + batch]]


def evaluate_policy(
    env: Env,
    policy: Policy,
    *,
    suite: str,
    trials: int,
    chunk_size: int,
    base_seed: int,
    sample: bool = True,
    temperature: float = 1.6,
    video_dir: Path | None = None,
    fps: int = 20,
    progress: bool = True,
    shard: tuple[int, int] = (0, 1),
    gather: Callable[[list[EpisodeResult]], list[EpisodeResult]] | None = None,
) -> EvalReport:
    """Every task x `trials` episodes of `policy` in `env`. `shard` (rank, ranks): this rank
    runs its share of the batches (`rank_share`) and `gather` returns every rank's results,
    so that the report is the one a single rank would make."""
    tasks = env.task_names
    init_ids = rank_share(eval_init_ids(len(tasks), trials), env.num_envs, *shard)
    results: list[EpisodeResult] = []
    videos: dict[str, list[np.ndarray]] = {name: [] for name in tasks}

    with progress_task(f"eval {policy.name}", total=len(init_ids), enabled=progress) as advance:

        def record(episode: Episode) -> None:
            trial = episode.init_id // len(tasks)
            video = None
            if video_dir is not None:
                frames = upscale(episode.frames)
                outcome = "success" if episode.succeeded else "fail"
                name = f"{episode.task_name}_trial{trial:03d}_{outcome}.mp4"
                video = str(write_mp4(video_dir / name, frames, fps).relative_to(video_dir.parent))
                videos[episode.task_name].append(frames)
            results.append(
                EpisodeResult(
                    episode.task_name,
                    trial,
                    episode.init_id,
                    episode.seed,
                    episode.succeeded,
                    episode.length,
                    video,
                )
            )
            advance()

        for episode in iter_episodes(
            env,
            policy,
            init_ids,
            chunk_size=chunk_size,
            seed_of=lambda i: base_seed + i,
            sample=sample,
            temperature=temperature,
            suite=suite,
        ):
            record(episode)
    if gather is not None:
        results = gather(results)
    if video_dir is not None and shard[0] == 0:  # on several ranks, the first one's episodes
        for name, clips in videos.items():
            if clips:
                write_mp4(video_dir / f"{name}{GRID_SUFFIX}", tile(clips), fps)
    per_task = {
        name: float(np.mean([r.success for r in results if r.task == name])) for name in tasks
    }
    results.sort(key=lambda r: (tasks.index(r.task), r.trial))
    return EvalReport(
        suite=suite,
        policy=policy.name,
        trials_per_task=trials,
        per_task=per_task,
        overall=float(np.mean([r.success for r in results])),
        episodes=results,
    )


GRID_SUFFIX = "_grid.mp4"  # each task's episodes tiled into one video


def step_video_dir(run_dir: Path, step: int) -> Path:
    """Where train-policy's evaluation at `step` writes its videos (eval.save_video)."""
    return run_dir / "eval" / "videos" / f"step_{step:06d}"


def grid_videos(video_dir: Path) -> dict[str, Path]:
    """Each task's grid video in `video_dir`, by task name."""
    return {p.name.removesuffix(GRID_SUFFIX): p for p in sorted(video_dir.glob(f"*{GRID_SUFFIX}"))}


def evaluate_with_config(
    env: Env,
    policy: Policy,
    sim_cfg: SimulatorConfig,
    cfg: RunConfig,
    trials: int,
    video_dir: Path | None = None,
    shard: tuple[int, int] = (0, 1),
    gather: Callable[[list[EpisodeResult]], list[EpisodeResult]] | None = None,
) -> EvalReport:
    """`evaluate_policy` as every command runs it: the suite, chunk size and seeds of the
    resolved `sim_cfg`, the sampling of `cfg.policy`, videos at `cfg.eval.video_fps`; on
    several ranks (`shard`, `gather`), progress on the first."""
    return evaluate_policy(
        env,
        policy,
        suite=sim_cfg.suite,
        trials=trials,
        chunk_size=sim_cfg.chunk_size,
        base_seed=sim_cfg.seed,
        sample=not cfg.policy.greedy,
        temperature=cfg.policy.temperature,
        video_dir=video_dir,
        fps=cfg.eval.video_fps,
        progress=cfg.logging.progress and shard[0] == 0,
        shard=shard,
        gather=gather,
    )
