"""The world-model reliability report (`wmrl eval --world-model`): the success-agreement
arithmetic, the report's fields and its renderings (rich tables, markdown, JSON). The
measurements that fill it are in `evaluation/reliability.py`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table

from wmrl_cli.evaluation.hand_tracking import HandTrackingReport
from wmrl_cli.evaluation.policy_shift import PolicyShiftReport
from wmrl_cli.evaluation.world_model_eval import OpenLoopReport
from wmrl_cli.files import atomic_write_text
from wmrl_cli.rewards.calibration import BinaryMetrics

REPORT_STEPS = (8, 16, 24, 32)
OPEN_LOOP_VIDEO = "open_loop_truth_vs_model.mp4"  # real | imagined, under videos/ with --save-video

# -- success agreement (pure) ------------------------------------------------------------------


@dataclass
class SuccessAgreement:
    """Imagined success (prediction) against real success (truth). Rates are None where their
    denominator is 0. hallucination_rate = FP / (TP + FP): the share of imagined successes that
    the simulator does not confirm (1 - precision)."""

    tp: int
    fp: int
    fn: int
    tn: int
    precision: float | None
    recall: float | None
    f1: float | None
    accuracy: float | None
    hallucination_rate: float | None

    @property
    def total(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def success_agreement(imagined: Sequence[bool], real: Sequence[bool]) -> SuccessAgreement:
    """Confusion counts and rates of imagined success against real success, per start point."""
    pred = np.asarray(imagined, dtype=bool).reshape(-1)
    truth = np.asarray(real, dtype=bool).reshape(-1)
    if pred.shape != truth.shape:
        raise ValueError(f"need one real outcome per imagined one ({pred.size} vs {truth.size})")
    tp, fp = int((pred & truth).sum()), int((pred & ~truth).sum())
    fn, tn = int((~pred & truth).sum()), int((~pred & ~truth).sum())
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return SuccessAgreement(
        tp, fp, fn, tn, precision, recall, f1, _ratio(tp + tn, pred.size), _ratio(fp, tp + fp)
    )


# -- report ------------------------------------------------------------------------------------


@dataclass
class SpeedReport:
    """Frames per second of both worlds for the same batch, chunk and image size.
    ratio = world_model_fps / real_fps (> 1: imagination is faster)."""

    num_envs: int
    chunk_size: int
    image_size: int
    timed_chunks: int
    world_model_fps: float
    imagined_env_fps: float  # world model + reward model scoring: what an RL step pays
    real_fps: float
    ratio: float
    sim_workers: int
    device: str


@dataclass
class StartResult:
    episode_id: int
    init_id: int
    task: str
    step: int  # where the rollout starts (a chunk boundary)
    kind: str  # "start" (the episode's first frame) or a KIR reason / "chunk"
    steps: int  # steps compared (the horizon in whole chunks, cut at the recording's end)
    imagined_success: bool
    real_success: bool
    recorded_success: bool  # the recording over the same steps: the replay must match it
    max_score: float
    real_max_score: float  # the reward model's highest score on the replay's real frames


@dataclass
class ReliabilityReport:
    world_model: str
    reward_model: str
    suite: str
    episodes: int
    horizon: int
    chunk_size: int
    threshold: float
    threshold_source: str
    open_loop: OpenLoopReport
    speed: SpeedReport
    agreement: SuccessAgreement
    agreement_by_kind: dict[str, SuccessAgreement]
    starts: list[StartResult] = field(default_factory=list)
    imagined_calibration: BinaryMetrics | None = None  # best-F1 threshold on imagined scores
    # The same recalibration scored out of sample: thresholds chosen on half of the episodes,
    # counted on the other half (`cross_validated_threshold`).
    imagined_calibration_cv: BinaryMetrics | None = None
    # The reward model on the simulator's own frames of the same replays: separates what the
    # reward model gets wrong from what the world model does.
    reward_on_real: SuccessAgreement | None = None
    # Where the imagined hand is against the simulator's under the same actions (cm).
    hand_tracking: HandTrackingReport | None = None
    # How differently a policy acts on the imagined frames than on the real ones.
    policy_shift: PolicyShiftReport | None = None
    # Real simulator steps the evaluation took (replays and the speed test; at most).
    simulator_steps: int = 0

    @property
    def videos(self) -> np.ndarray | None:
        """Open-loop videos [N,T,H,2W,3] (truth | model); never written to JSON."""
        return self.open_loop.videos

    @property
    def replay_mismatches(self) -> int:
        """Start points where the simulator's replay disagrees with the recording (should be 0:
        a non-zero count means the stored states do not reproduce this simulator)."""
        return sum(s.real_success != s.recorded_success for s in self.starts)

    def agreement_by_task(self) -> tuple[float, dict[str, SuccessAgreement]]:
        """Imagined vs real success per task at the threshold RL would use: the one recalibrated
        on imagined frames where there is one (in-sample), else the report's. A teacher wrong
        on one task can undo what RL gains on the others, which the overall figure hides."""
        cal = self.imagined_calibration
        threshold = cal.threshold if cal is not None else self.threshold
        tasks = sorted({s.task for s in self.starts})
        return threshold, {
            task: success_agreement(
                [s.max_score >= threshold for s in self.starts if s.task == task],
                [s.real_success for s in self.starts if s.task == task],
            )
            for task in tasks
        }

    def to_dict(self) -> dict[str, Any]:
        open_loop = self.open_loop.to_dict()
        task_threshold, by_task = self.agreement_by_task()
        body = {
            "world_model": self.world_model,
            "reward_model": self.reward_model,
            "suite": self.suite,
            "episodes": self.episodes,
            "horizon": self.horizon,
            "chunk_size": self.chunk_size,
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "open_loop": open_loop,
            "speed": asdict(self.speed),
            "agreement": asdict(self.agreement),
            "agreement_by_kind": {k: asdict(v) for k, v in self.agreement_by_kind.items()},
            "agreement_by_task": {
                "threshold": task_threshold,
                "tasks": {k: asdict(v) for k, v in by_task.items()},
            },
            "replay_mismatches": self.replay_mismatches,
            "reward_on_real": asdict(self.reward_on_real) if self.reward_on_real else None,
            "imagined_calibration": (
                self.imagined_calibration.to_dict() if self.imagined_calibration else None
            ),
            "imagined_calibration_cv": (
                self.imagined_calibration_cv.to_dict() if self.imagined_calibration_cv else None
            ),
            "hand_tracking": asdict(self.hand_tracking) if self.hand_tracking else None,
            "policy_shift": asdict(self.policy_shift) if self.policy_shift else None,
            "simulator_steps": self.simulator_steps,
            "starts": [asdict(s) for s in self.starts],
        }
        return _json_safe(body)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def _sections(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """(title, columns, rows) of each table, shared by the rich and markdown renderings."""
        ol = self.open_loop
        steps = sorted({s for s in REPORT_STEPS if s <= ol.horizon} | {ol.horizon})
        fidelity = [
            [
                str(s),
                _fmt(ol.psnr[s - 1], 2),
                _fmt(ol.copy_psnr[s - 1], 2),
                _fmt(ol.action_gap(s), 2),
                _fmt(ol.ssim[s - 1], 3),
                _fmt(ol.copy_ssim[s - 1], 3),
            ]
            for s in steps
        ]

        def response(s: int) -> str:
            return _fmt(ol.response_ratio[s - 1] if ol.response_ratio else None, 2)

        control = [
            [
                str(s),
                _fmt(ol.action_gap(s, "other"), 2),
                _fmt(ol.action_gap(s, "shuffled"), 2),
                _fmt(ol.action_gap(s, "random"), 2),
                response(s),
                _fmt(ol.moving_psnr[s - 1] if ol.moving_psnr else None, 2),
                _fmt(ol.copy_moving_psnr[s - 1] if ol.copy_moving_psnr else None, 2),
            ]
            for s in steps
        ]
        sp = self.speed
        plural = "es" if sp.sim_workers != 1 else ""
        workers = f"{sp.sim_workers} worker process{plural}" if sp.sim_workers else "in-process"
        speed = [
            ["world model (predict)", _fmt(sp.world_model_fps, 1)],
            ["imagined env (+ reward model)", _fmt(sp.imagined_env_fps, 1)],
            [f"real simulator ({workers})", _fmt(sp.real_fps, 1)],
            ["ratio world model / real", f"{sp.ratio:.2f}x"],
        ]
        groups = {"all": self.agreement, **self.agreement_by_kind}
        if self.reward_on_real is not None:
            groups["all, reward model on real frames"] = self.reward_on_real
        agreement = [_agreement_row(name, a) for name, a in groups.items()]
        calibrations = {
            "best F1 here": self.imagined_calibration,
            "chosen on the other half of the episodes": self.imagined_calibration_cv,
        }
        for how, cal in calibrations.items():
            if cal is None:
                continue
            agreement.append(
                [
                    f"all, threshold {cal.threshold:.2g} ({how})",
                    str(cal.tp + cal.fp + cal.fn + cal.tn),
                    f"{cal.tp}/{cal.fp}/{cal.fn}/{cal.tn}",
                    _fmt(cal.precision, 3),
                    _fmt(cal.recall, 3),
                    _fmt(cal.f1, 3),
                    _fmt(cal.fp / (cal.tp + cal.fp) if cal.tp + cal.fp else None, 3),
                ]
            )
        task_threshold, by_task = self.agreement_by_task()
        per_task = [_agreement_row(task, a) for task, a in by_task.items()]
        sections = [
            (
                f"open-loop fidelity on {ol.episodes} episodes (beats the copy baseline at "
                f"every step: {'yes' if ol.beats_copy_baseline() else 'no'})",
                ["step", "PSNR model", "PSNR copy", "action gap", "SSIM model", "SSIM copy"],
                fidelity,
            ),
            (
                "controllability: action gap (dB, recorded minus other actions: same-task "
                "episode, shuffled, uniform random), response ratio vs the simulator (1: reacts "
                "as the world, 0: ignores its actions), PSNR where the truth moves",
                [
                    "step",
                    "gap other",
                    "gap shuffled",
                    "gap random",
                    "response",
                    "moving PSNR",
                    "moving copy",
                ],
                control,
            ),
            (
                f"speed: {sp.num_envs} envs x {sp.chunk_size}-frame chunks at "
                f"{sp.image_size}x{sp.image_size} ({sp.device})",
                ["world", "frames/s"],
                speed,
            ),
            (
                f"imagined vs real success over {self.horizon} steps "
                f"(threshold {self.threshold:.3f}, {self.threshold_source}; "
                f"replay mismatches {self.replay_mismatches})",
                ["starts", "n", "TP/FP/FN/TN", "precision", "recall", "F1", "halluc."],
                agreement,
            ),
            (
                f"imagined vs real success per task (threshold {task_threshold:.2g}: "
                "recalibrated on imagined frames where possible, in-sample)",
                ["task", "n", "TP/FP/FN/TN", "precision", "recall", "F1", "halluc."],
                per_task,
            ),
        ]
        hand = self.hand_tracking
        if hand is not None:
            hand_steps = sorted({s for s in REPORT_STEPS if s <= hand.horizon} | {hand.horizon})
            sections.insert(
                2,
                (
                    "hand tracking (cm): the hand read from the model's frames against the "
                    "simulator's hand under the same actions; copy: read from the first frame; "
                    "floor: the reader on held-out simulator frames",
                    ["step", "recorded", "copy", "other actions", "copy (other)", "floor"],
                    [
                        [
                            str(s),
                            _fmt(hand.error_cm[s - 1], 2),
                            _fmt(hand.copy_error_cm[s - 1], 2),
                            _fmt(hand.other_error_cm[s - 1], 2),
                            _fmt(hand.copy_other_error_cm[s - 1], 2),
                            _fmt(hand.floor_cm[s - 1], 2),
                        ]
                        for s in hand_steps
                    ],
                ),
            )
        if self.policy_shift is not None:
            at = 3 if hand is not None else 2  # after the other controllability tables
            sections[at:at] = _policy_shift_sections(self.policy_shift)
        return sections

    def table(self) -> Group:
        tables = []
        for title, columns, rows in self._sections():
            table = Table(title=title)
            for i, column in enumerate(columns):
                table.add_column(column, justify="left" if i == 0 else "right")
            for row in rows:
                table.add_row(*row)
            tables.append(table)
        return Group(*tables)

    def markdown(self) -> str:
        lines = [
            f"# World-model reliability: {self.world_model}",
            "",
            f"Reward model {self.reward_model}; suite {self.suite}; {self.episodes} episodes; "
            f"{self.chunk_size}-step chunks.",
        ]
        for title, columns, rows in self._sections():
            lines += ["", f"## {title}", "", "| " + " | ".join(columns) + " |"]
            lines.append("|" + "---|" * len(columns))
            lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += [
            "",
            "Success is imagined when a chunk's highest reward-model score reaches the threshold; "
            "real when the simulator replaying the same actions from the stored state succeeds. "
            "halluc. = FP / (TP + FP), the share of imagined successes the simulator does not "
            "confirm. The row 'reward model on real frames' scores the simulator's own frames of "
            "the same replays: what the reward model alone gets wrong. action gap = PSNR with "
            "the recorded actions minus PSNR with another episode's actions, same start and "
            "noise (dB): near 0, the model ignores its actions.",
        ]
        return "\n".join(lines) + "\n"

    def save(self, run_dir: str | Path, save_video: bool = False, fps: int = 10) -> None:
        run_dir = Path(run_dir)
        atomic_write_text(run_dir / "report.json", self.to_json())
        atomic_write_text(run_dir / "report.md", self.markdown())
        if save_video and self.videos is not None:
            from wmrl_cli.evaluation.videos import label_panes, tile, upscale, write_mp4

            grid = tile([label_panes(upscale(v), ["real", "imagined"]) for v in self.videos])
            write_mp4(run_dir / "videos" / OPEN_LOOP_VIDEO, grid, fps)


def _policy_shift_sections(
    shift: PolicyShiftReport,
) -> list[tuple[str, list[str], list[list[str]]]]:
    columns = ["imagined", "other episode", "first frame", "imagined / other"]

    def row(name: str, kl: dict[str, float]) -> list[str]:
        ratio = kl["imagined"] / kl["other"] if kl["other"] > 0 else None
        return [name, *(_fmt(kl[k], 3) for k in ("imagined", "other", "first")), _fmt(ratio, 1)]

    by_step = [
        row(str(t), {k: v[i] for k, v in shift.kl.items()}) for i, t in enumerate(shift.steps)
    ]
    return [
        (
            "policy shift: mean per-token KL of the policy's action distribution, real frame "
            "against the imagined one (same actions, open loop); against another episode's "
            "real frame of the same task and against the first frame for scale",
            ["step", *columns],
            by_step,
        ),
        (
            f"policy shift per task (steps {shift.steps[0]}-{shift.steps[-1]})",
            ["task", *columns],
            [row(task, kl) for task, kl in shift.by_task.items()],
        ),
    ]


def _agreement_row(name: str, a: SuccessAgreement) -> list[str]:
    return [
        name,
        str(a.total),
        f"{a.tp}/{a.fp}/{a.fn}/{a.tn}",
        _fmt(a.precision, 3),
        _fmt(a.recall, 3),
        _fmt(a.f1, 3),
        _fmt(a.hallucination_rate, 3),
    ]


def _fmt(value: float | None, digits: int) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


def _json_safe(value: Any) -> Any:
    """NaN and infinities (e.g. a horizon step no episode reaches) become null."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
