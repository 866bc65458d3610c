"""The co-evolution report: success per stage and task (table + PNG), world-model reliability,
reward-model metrics, wall time and real environment steps per stage, as report.md and
report.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.config import RunConfig, dump_config
from wmrl_cli.evaluation.intervals import (
    format_difference,
    format_rate,
    pair_by_init_id,
    paired_difference,
)
from wmrl_cli.evaluation.reliability_report import OPEN_LOOP_VIDEO
from wmrl_cli.files import atomic_write_bytes, atomic_write_text
from wmrl_cli.rl.activity import SUCCESS_WINDOW, no_update_reason

PLOT_FILE = "success_per_stage.png"
# The stage that runs the same RL in the real simulator (`coevolve.simulator_control`): it
# measures the method, so its real steps are counted apart from the method's.
SIMULATOR_CONTROL = "simulator_control"
# The stage that trains the base policy from demonstrations: every arm starts from its policy,
# the simulator control included, so its real steps are shared, counted apart from the method's
# (an RL stage's env/real_steps, like the control's, start from the base).
BASE_POLICY_STAGE = "sft"


def plot_success(evals: dict[str, dict[str, Any]], path: Path, trials_per_task: int) -> Path:
    """Real success per task and overall, one bar per stage, with Wilson 95% intervals. A 0%
    bar is drawn as a flat mark with "0" above it; a task a stage did not evaluate reads
    "n/a". The legend sits above the axes, clear of every bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wmrl_cli.evaluation.intervals import wilson_interval

    stages = list(evals)
    tasks = list(next(iter(evals.values()))["per_task"])
    x = np.arange(len(tasks) + 1)
    width = 0.8 / len(stages)
    fig, ax = plt.subplots(figsize=(max(8, len(tasks) * 0.9), 4.6), dpi=110)
    for i, stage in enumerate(stages):
        rates = [evals[stage]["per_task"].get(t) for t in tasks] + [evals[stage]["overall"]]
        intervals = [
            None if r is None else wilson_interval(round(r * trials_per_task), trials_per_task)
            for r in rates[:-1]
        ] + [evals[stage].get("interval95")]
        offsets = x + (i - (len(stages) - 1) / 2) * width
        heights = [0.0 if r is None else 100 * r for r in rates]
        bars = ax.bar(offsets, heights, width, label=stage)
        color = bars.patches[0].get_facecolor()
        for at, rate, interval in zip(offsets, rates, intervals):
            if rate is None:
                ax.text(at, 1, "n/a", ha="center", va="bottom", fontsize=6, rotation=90)
                continue
            if interval is not None:
                low, high = 100 * interval[0], 100 * interval[1]
                ax.errorbar(at, 100 * rate, yerr=[[100 * rate - low], [high - 100 * rate]],
                            fmt="none", ecolor="black", elinewidth=0.8, capsize=2)  # fmt: skip
            if rate == 0:
                ax.hlines(0.6, at - width / 2, at + width / 2, colors=[color], linewidth=2)
                ax.text(at, 1.5, "0", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, [*tasks, "OVERALL"], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("real success_once (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"Real-simulator success per stage ({trials_per_task} trials per task, 95% CI)")
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=len(stages),
              frameon=False)  # fmt: skip
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()

    def save(handle) -> None:
        fig.savefig(handle, format="png")

    atomic_write_bytes(path, save)
    plt.close(fig)
    return path


def write_report(
    run_dir: Path,
    cfg: RunConfig,
    evals: dict[str, dict[str, Any]],
    reliability: dict[str, dict[str, Any]],
    rewards: dict[str, dict[str, Any]],
    walls: dict[str, float],
    real_steps: dict[str, int | None],
    rl_activity: dict[str, dict[str, Any]] | None = None,
    acceptance: dict[str, dict[str, Any]] | None = None,
    frozen_same_as: str | None = None,
    trust: dict[str, dict[str, Any]] | None = None,
    ranks: dict[str, int] | None = None,
    closed_loop: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`real_steps`: per stage, the real environment steps it consumed (None: not recorded,
    a stage finished before wmrl counted them). `rl_activity`: per RL stage, what
    `rl_activity` (below) read from its metrics; a stage whose RL changed nothing is flagged.
    `acceptance`: per refinement round, the audit that chose its world model.
    `frozen_same_as`: the stage that had the frozen control's inputs (acceptance kept the
    current world model), so the control was not run apart. `trust`: per RL stage, the tasks
    it trained on and those its trust audit left out (`coevolve.trust_audit_per_task`).
    `ranks`: per training stage, the processes it trained on (`--num-processes`).
    `closed_loop`: per RL stage, the tasks `coevolve.closed_loop_floor` left out, with the base
    policy's imagined and real successes there."""
    rl_activity = rl_activity or {}
    acceptance = acceptance or {}
    trust = trust or {}
    differences = stage_differences(evals)
    control_steps = real_steps.get(SIMULATOR_CONTROL)
    data_steps = [
        v or 0 for k, v in real_steps.items() if not k.startswith("eval") and k != SIMULATOR_CONTROL
    ]
    base_steps = real_steps.get(BASE_POLICY_STAGE) or 0
    # With reward_model.audit_with_simulator an RL stage's real steps are its audit's replays:
    # a diagnostic of the verdict, not something the method needs.
    audit_steps = (
        sum(real_steps.get(name) or 0 for name in rl_activity if name != SIMULATOR_CONTROL)
        if cfg.reward_model.audit_with_simulator
        else 0
    )
    report = {
        "real_steps_by_kind": _method_steps_by_kind(sum(data_steps), base_steps, rl_activity),
        "suite": cfg.simulator.suite,
        "trials_per_task": cfg.coevolve.eval_trials,
        "success": evals,
        "differences": differences,
        "world_model_reliability": reliability,
        "reward_models": rewards,
        "wall_time_s": walls,
        "total_wall_time_s": round(sum(walls.values()), 1),
        "ranks": ranks or {},
        "real_steps": real_steps,
        "total_real_steps": sum(v or 0 for v in real_steps.values()),
        "total_real_steps_without_evaluation": sum(data_steps),
        "base_policy_real_steps": base_steps,
        "rl_audit_real_steps": audit_steps,
        "simulator_control_real_steps": control_steps,
        "rl_activity": rl_activity,
        "acceptance": acceptance,
        "frozen_control_same_as": frozen_same_as,
        "trust": trust,
        "closed_loop": closed_loop or {},
    }
    atomic_write_text(run_dir / "report.json", json.dumps(report, indent=1))
    # Drawn whatever the rates: zeros are a result (each 0 bar a flat mark with "0" above it).
    plot_success(evals, run_dir / PLOT_FILE, cfg.coevolve.eval_trials)
    stages = list(evals)
    tasks = list(evals[stages[0]]["per_task"])
    lines = [
        "# Co-evolution report",
        "",
        f"Suite `{cfg.simulator.suite}`, {cfg.coevolve.eval_trials} trials per task, "
        "real success_once (%), fixed evaluation seeds.",
        "",
        "| task | " + " | ".join(stages) + " |",
        "|---" * (len(stages) + 1) + "|",
    ]
    for task in tasks:
        row = " | ".join(f"{100 * evals[s]['per_task'][task]:.0f}" for s in stages)
        lines.append(f"| {task} | {row} |")
    overall = " | ".join(f"**{_rate(evals[s])}**" for s in stages)
    lines += [
        f"| **overall** | {overall} |",
        "",
        "Overall: success with its Wilson 95% interval.",
        "",
    ]
    if differences:
        lines += [
            "Differences on the same evaluation episodes (percentage points; paired bootstrap "
            "95% interval over episodes):",
            "",
            "| comparison | difference | 95% interval | episodes |",
            "|---|---|---|---|",
        ]
        for name, d in differences.items():
            lines.append(
                f"| {name} | {100 * d['difference']:+.1f} | "
                f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | {d['episodes']} |"
            )
        lines.append("")
    if frozen_same_as:
        lines += [
            f"The frozen-world-model control is `{frozen_same_as}`: the acceptance audit kept "
            "the current world model, so that stage ran from the control's inputs (policy, "
            "world model, judge, starts, threshold) and the control was not run apart.",
            "",
        ]
    lines += _simulator_control_lines(report, rl_activity)
    lines += _verdict_lines(cfg.reward_model.source)
    lines += [
        f"![success per stage]({PLOT_FILE})",
        "",
    ]
    lines += _real_steps_curve(run_dir, list(rl_activity))
    lines += _check_videos(run_dir, reliability)
    idle = {name: why for name, act in rl_activity.items() if (why := no_update_reason(act))}
    for name, why in idle.items():
        lines.append(f"**Warning: RL stage `{name}` made no update**: {why}.")
    lines += [""] if idle else []
    if rl_activity:
        lines += _rl_table(rl_activity)
    lines += _acceptance_table(acceptance)
    lines += _trust_lines(trust, cfg.coevolve.trust_precision_floor)
    lines += _closed_loop_lines(closed_loop or {})
    lines += [
        "## World-model reliability (open loop, held-out episodes, PSNR dB)",
        "",
    ]
    for name, rel in reliability.items():
        lines.append(
            f"- {name}: "
            + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in rel.items()
            )
        )
    lines += ["", "## Reward models (held-out frames)", ""]
    for name, rm in rewards.items():
        if "kept" in rm:  # a fine-tuning with nothing to learn from kept the model it started from
            lines.append(f"- {name}: not fine-tuned, {rm['path']} kept: {rm['kept']}")
            continue
        lines.append(
            f"- {name}: F1 {rm['f1']:.3f}, precision {rm['precision']:.3f}, "
            f"recall {rm['recall']:.3f}, threshold {rm['threshold']:.3f}"
        )
    lines += [
        "",
        "## Wall time and real environment steps per stage",
        "",
        "Real steps: the simulator steps a stage took (demonstrations, rollouts, evaluation "
        "episodes; RL in imagination takes none); cumulative: all stages so far."
        + (
            f" The simulator control's ({SIMULATOR_CONTROL}) are not the method's: they are "
            "left out of the total without evaluation."
            if control_steps is not None
            else ""
        )
        + (
            " RL stages here show their audit's replays (reward_model.audit_with_simulator): "
            "a diagnostic of the verdict, counted apart in the last line."
            if audit_steps
            else ""
        ),
        "",
        "| stage | seconds | real steps | cumulative real steps |",
        "|---|---|---|---|",
    ]
    total = 0
    for name, seconds in walls.items():
        steps = real_steps.get(name)
        total += steps or 0
        shown = "-" if steps is None else str(steps)
        on = (ranks or {}).get(name, 1)
        lines.append(
            f"| {name} | {seconds:.0f}{f' on {on} ranks' if on > 1 else ''} | {shown} | {total} |"
        )
    lines += [
        f"| **total** | **{report['total_wall_time_s']:.0f}** | **{total}** | "
        f"({report['total_real_steps_without_evaluation']} without evaluation) |",
        *(
            [
                f"| without evaluation and the RL audit | | "
                f"**{report['total_real_steps_without_evaluation'] - audit_steps}** | |"
            ]
            if audit_steps
            else []
        ),
        *_kind_lines(report["real_steps_by_kind"]),
        "",
        "## Configuration",
        "",
        "```yaml",
        dump_config(cfg).rstrip(),
        "```",
        "",
    ]
    atomic_write_text(run_dir / "report.md", "\n".join(lines))
    return report


def _method_steps_by_kind(
    without_evaluation: int, base: int, rl_activity: dict[str, dict[str, Any]]
) -> dict[str, int] | None:
    """The run's real steps (evaluations and the simulator control left out) by kind: the base
    policy's demonstrations (`base`, shared with the control), what its RL stages spent by kind,
    and the method's data (every other stage); None where no RL stage logged the split."""
    spent = [
        act["real_steps_by_kind"]
        for name, act in rl_activity.items()
        if name != SIMULATOR_CONTROL and "real_steps_by_kind" in act
    ]
    if not spent:
        return None
    kinds = {k: sum(s.get(k, 0) for s in spent) for k in ("rollouts", "calls", "exact")}
    return {"base": base, "data": without_evaluation - base - sum(kinds.values()), **kinds}


def _kind_lines(by_kind: dict[str, int] | None) -> list[str]:
    if by_kind is None:
        return []
    shown = ", ".join(f"{kind} {steps}" for kind, steps in by_kind.items())
    return [
        "",
        f"The run's real steps by kind (evaluations left out): {shown}. Base: the base "
        "policy's demonstrations, shared with the simulator control; data: what the method "
        "collected before each RL stage; rollouts: RL in the simulator; calls: verified "
        "imagination's replays of the judge's calls; exact: episodes the simulator judged exactly "
        "(`env/real_steps_<kind>`).",
    ]


# What judged success in the imagined RL stages, by `reward_model.source`.
_VERDICTS = {
    "model": "the reward model alone (the learned verdict)",
    "verified": "verified imagination: the reward model's calls, each confirmed by the real "
    "simulator replaying the episode up to the call; the replays' real steps are the RL "
    "stages' real steps, counted in the method's",
    "simulator": "the real simulator replaying every step of every episode (the exact verdict, "
    "a control: its replays cost as many real steps as RL in the simulator)",
}


def _verdict_lines(source: str) -> list[str]:
    return [f"Success in the imagined RL stages was judged by {_VERDICTS[source]}.", ""]


CURVE_FILE = "real_steps_to_gain.png"


def _real_steps_curve(run_dir: Path, stages: list[str]) -> list[str]:
    """With `coevolve.curve_every`: each RL stage's (and the simulator control's) real success
    at its evaluation steps against the real steps spent by then, paired with the base's
    evaluation; a plot and a table."""
    from wmrl_cli.evaluation.real_steps import curve_table, learning_curve, plot_real_steps

    base_path = run_dir / "eval" / "base" / "report.json"
    curved = [n for n in stages if any((run_dir / n / "eval").glob("step_*.json"))]
    if not curved or not base_path.is_file():
        return []
    base = json.loads(base_path.read_text())
    arms = {name: learning_curve(run_dir / name, base) for name in curved}
    plot_real_steps(arms, run_dir / CURVE_FILE, base["overall"])
    return [
        "## Real steps to gain",
        "",
        "Real success at each stage's evaluation steps against the real steps spent by then "
        "(the method's: its data and the verdict's replays; the simulator control's: its own), "
        "paired with the base on the same held-out episodes:",
        "",
        f"![real success against real steps]({CURVE_FILE})",
        "",
        curve_table(arms),
    ]


def log_report_media(run_dir: Path, cfg: RunConfig, stages: list[str], checks: list[str]) -> None:
    """The report's plots (report/success_per_stage, report/real_steps_to_gain), each stage's
    evaluation grid per task (eval/<stage>/video/<task>) and each world-model check's video
    (check/<name>/open_loop), those the run made, to TensorBoard (RUN/tensorboard) and the
    trackers (logging.trackers) in a run of the co-evolve run's own, at step 0."""
    from wmrl_cli.evaluation.policy_eval import grid_videos
    from wmrl_cli.logging import MetricsLogger
    from wmrl_cli.trackers import tracked

    if not (cfg.logging.tensorboard or cfg.logging.trackers):
        return
    images = [run_dir / name for name in (PLOT_FILE, CURVE_FILE) if (run_dir / name).is_file()]
    videos = {
        f"eval/{stage}/video/{task}": path
        for stage in stages
        for task, path in grid_videos(run_dir / "eval" / stage / "videos").items()
    }
    for name in checks:
        if (path := run_dir / "check" / name / "videos" / OPEN_LOOP_VIDEO).is_file():
            videos[f"check/{name}/open_loop"] = path
    if not (images or videos):
        return
    with MetricsLogger(run_dir, cfg.logging.tensorboard, **tracked(cfg), jsonl=False) as log:
        for path in images:
            log.log_image(f"report/{path.stem}", path, 0)
        for tag, path in videos.items():
            log.log_video(tag, path, 0, fps=cfg.eval.video_fps)


def _check_videos(run_dir: Path, reliability: dict[str, dict[str, Any]]) -> list[str]:
    """Links to each world-model check's video (coevolve.videos): real validation episodes
    beside the world model's imagination of them, from the same start under the same
    actions."""
    videos = [
        (name, path.relative_to(run_dir))
        for name in reliability
        if (path := run_dir / "check" / name / "videos" / OPEN_LOOP_VIDEO).is_file()
    ]
    if not videos:
        return []
    lines = [
        "Real (left) against imagined (right), from the same start under the same actions "
        "(each world model's check, its validation episodes):",
        "",
    ]
    return [*lines, *(f"- {name}: [{path}]({path})" for name, path in videos), ""]


def _acceptance_table(acceptance: dict[str, dict[str, Any]]) -> list[str]:
    """Per round: each world model's verdict on the evolved policy's imagined episodes against
    the simulator's replays, and the one chosen."""
    if not acceptance:
        return []
    lines = [
        "## World-model acceptance (the evolved policy's imagined episodes, replayed)",
        "",
        "| round | world model | episodes | TP/FP/FN/TN | precision [95%] | recall | F1 | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for round_name, result in acceptance.items():
        for name, t in result["world_models"].items():
            counts = "/".join(str(t[k]) for k in ("tp", "fp", "fn", "tn"))
            precision = format_rate(t["precision"], t["precision_interval"])
            chosen = "**chosen**" if name == result["chosen"] else ""
            lines.append(
                f"| {round_name} | {name} | {t['episodes']} | {counts} | {precision} | "
                f"{format_rate(t['recall'])} | {format_rate(t['f1'])} | {chosen} |"
            )
    return [*lines, ""]


def _trust_lines(trust: dict[str, dict[str, Any]], floor: float) -> list[str]:
    """Per RL stage: the tasks it drew starts from, and each task its audit left out with the
    verdict's precision there."""
    if not trust:
        return []
    lines = [
        f"## Tasks RL trained on (the verdict's audited precision at least {floor:g})",
        "",
        "| stage | audit | tasks trained | left out (true calls / calls) |",
        "|---|---|---|---|",
    ]
    for stage, t in trust.items():
        left_out = ", ".join(
            f"{name} ({row['tp']}/{row['tp'] + row['fp']})" for name, row in t["excluded"].items()
        )
        lines.append(
            f"| {stage} | `{t['audit']}` | {len(t['train_tasks'])} | {left_out or 'none'} |"
        )
    return [*lines, ""]


def _closed_loop_lines(closed_loop: dict[str, dict[str, Any]]) -> list[str]:
    """Per RL stage: the tasks the closed-loop floor left out, with the base policy's
    successes acting in the world model and on real frames."""
    if not closed_loop:
        return []
    lines = [
        "## Tasks the world model's closed loop loses (coevolve.closed_loop_floor)",
        "",
        "| stage | floor | tasks trained | left out (imagined successes / real successes) |",
        "|---|---|---|---|",
    ]
    for stage, loop in closed_loop.items():
        left_out = ", ".join(
            f"{name} ({row['imagined'][0]}/{row['imagined'][1]} / "
            f"{row['real'][0]}/{row['real'][1]})"
            for name, row in loop["excluded"].items()
        )
        trained = len(loop["train_tasks"])
        lines.append(f"| {stage} | {loop['floor']:g} | {trained} | {left_out or 'none'} |")
    return [*lines, ""]


def _simulator_control_lines(report: dict[str, Any], activity: dict[str, Any]) -> list[str]:
    """What the same RL gains in the real simulator (a perfect world model and verdict) beside
    what the method's last stage gained, with the real steps each took."""
    differences = report["differences"]
    gain = differences.get(f"{SIMULATOR_CONTROL} - base")
    if gain is None:
        return []
    stages = [n for n in report["success"] if n.startswith("stage")]
    last = differences.get(f"{stages[-1]} - base") if stages else None
    method = (
        report["total_real_steps_without_evaluation"]
        - report["rl_audit_real_steps"]
        - report.get("base_policy_real_steps", 0)
    )
    steps = activity.get(SIMULATOR_CONTROL, {}).get("steps", "?")
    lines = [
        "## Against RL in the real simulator",
        "",
        f"The simulator control: {steps} steps of the same RL from the base policy in the real "
        "simulator (its own reward: a perfect world model and verdict), evaluated on the same "
        "episodes. Real steps are counted from the base policy both start from (its "
        f"demonstrations, {report.get('base_policy_real_steps', 0)} real steps, left out of "
        "both).",
        "",
        "| | against the base | real steps |",
        "|---|---|---|",
        f"| {SIMULATOR_CONTROL} | {format_difference(gain)} | "
        f"{report['simulator_control_real_steps']} |",
    ]
    if last is not None:
        lines.append(f"| {stages[-1]} (the method) | {format_difference(last)} | {method} |")
    return [*lines, ""]


def _rate(result: dict[str, Any]) -> str:
    interval = result.get("interval95")  # absent in a stage cached before wmrl kept it
    shown = f"{100 * result['overall']:.1f}"
    if interval is None:
        return shown
    return f"{shown} [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def stage_differences(evals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Paired differences that answer the pipeline's questions: every stage against the base,
    each stage against the one before it, and the refinement against the frozen-world-model control
    (the last refined stage minus the control), and the simulator control against the base
    and the last stage. Stages evaluated without per-episode outcomes are skipped."""
    names = [n for n in evals if evals[n].get("outcomes")]
    stages = [n for n in names if n.startswith("stage")]
    pairs: list[tuple[str, str]] = []
    if "base" in names:
        pairs += [("base", s) for s in stages]
    pairs += list(zip(stages, stages[1:], strict=False))
    if "frozen_control" in names and len(stages) >= 2:
        pairs.append(("frozen_control", stages[-1]))
    if SIMULATOR_CONTROL in names:  # the same RL with a perfect world model and verdict
        pairs += [("base", SIMULATOR_CONTROL)] if "base" in names else []
        pairs += [(SIMULATOR_CONTROL, stages[-1])] if stages else []
    out = {}
    for a, b in dict.fromkeys(pairs):
        left, right = pair_by_init_id(evals[a]["outcomes"], evals[b]["outcomes"])
        if left:
            out[f"{b} - {a}"] = paired_difference(left, right).to_dict()
    return out


def _rl_table(rl_activity: dict[str, dict[str, Any]]) -> list[str]:
    """Per RL stage: steps, kept groups and the training rollouts' judged success, first and
    last steps: the signal GRPO had, next to what the real evaluation says it learned."""
    lines = [
        "## RL stages",
        "",
        "Training success: the stage's own rollouts as its environment judged them (in "
        "imagination, the reward model on imagined frames), mean of the first and the last "
        f"{SUCCESS_WINDOW} steps.",
        "",
        "| stage | steps | kept groups | training success, first -> last | max gradient norm "
        "| real steps: rollouts / calls / exact |",
        "|---|---|---|---|---|---|",
    ]
    for name, act in rl_activity.items():
        if "train_success_first" in act:
            success = (
                f"{100 * act['train_success_first']:.1f}% -> {100 * act['train_success_last']:.1f}%"
            )
        else:
            success = "-"
        kinds = act.get("real_steps_by_kind")
        spent = (
            " / ".join(str(kinds.get(k, 0)) for k in ("rollouts", "calls", "exact"))
            if kinds
            else "-"
        )
        lines.append(
            f"| {name} | {act['steps']} | {act['kept_groups_fraction']:.2f} | {success} | "
            f"{act['max_grad_norm']:.3g} | {spent} |"
        )
    anchored = [
        f"{name} {act['bc_loss_first']:.3f} -> {act['bc_loss_last']:.3f}"
        for name, act in rl_activity.items()
        if "bc_loss_first" in act
    ]
    if anchored:
        lines += [
            "",
            "Cloned beside RL, the real successes of `data/reward_real` (`coevolve.bc_anchor`; "
            "negative log-likelihood per action token, first -> last steps): "
            + "; ".join(anchored)
            + ".",
        ]
    return [*lines, ""]
