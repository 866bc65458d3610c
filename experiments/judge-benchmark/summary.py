"""The judge benchmark's verdicts side by side: one table of the RL policies' episodes, a row per
task, each verdict's precision, recall and ranking AUC, and a plot of recall and AUC per task.

    python experiments/judge-benchmark/summary.py SCORES.json [MORE.json ...] \\
        [--group rl] [--markdown OUT.md] [--plot OUT.png]

Each SCORES.json is what `judge_bench.py score --out` wrote; verdicts of several files are
shown together in the order given (a name repeated later replaces the earlier one). A task's
cells read `P / R / AUC`; `-` where the verdict made no call (precision) or the task had no
real success (recall, AUC). The last columns say which tasks hold at least the target's real
successes and which of them each verdict passes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from judge_bench import TARGET_MIN_SUCCESSES, TARGET_PRECISION, TARGET_RECALL

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text


def load_verdicts(paths: list[Path]) -> dict[str, dict]:
    """Every verdict of the files, by name, in the order given."""
    verdicts: dict[str, dict] = {}
    for path in paths:
        if not path.is_file():
            raise WmrlError(f"{path}: no such scores file (expected judge_bench.py score --out)")
        verdicts.update(json.loads(path.read_text()))
    return verdicts


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_table(verdicts: dict[str, dict], group: str) -> str:
    """Markdown: a row per task of `group` (and `all`), a `P / R / AUC` column per verdict."""
    names = [name for name, v in verdicts.items() if group in v["groups"]]
    if not names:
        raise WmrlError(f"no verdict has episodes of the group {group!r}")
    tasks = sorted({t for n in names for t in verdicts[n]["groups"][group]} - {"all"}) + ["all"]
    header = ["task", "episodes", "real successes", *(f"{n}: P / R / AUC" for n in names)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks:
        first = verdicts[names[0]]["groups"][group].get(task)
        if first is None:
            continue
        cells = [task, str(first["episodes"]), str(first["real_successes"])]
        for name in names:
            row = verdicts[name]["groups"][group].get(task, {})
            cells.append(
                f"{_cell(row.get('precision'))} / {_cell(row.get('recall'))} / "
                f"{_cell(row.get('auc'))}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    passed = []
    for name in names:
        target = verdicts[name].get("target_rl") or {}
        passed.append(
            f"{name}: {len(target.get('passed', []))} of {len(target.get('eligible', []))}"
            + (f" ({', '.join(target['passed'])})" if target.get("passed") else "")
        )
    lines += [
        "",
        f"Tasks at precision >= {TARGET_PRECISION} and recall >= {TARGET_RECALL} among those "
        f"with >= {TARGET_MIN_SUCCESSES} real successes (RL episodes): " + "; ".join(passed) + ".",
    ]
    return "\n".join(lines)


def plot(verdicts: dict[str, dict], group: str, out: Path) -> None:
    """Recall (bars) and ranking AUC (dots) per task, a bar per verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [name for name, v in verdicts.items() if group in v["groups"]]
    rows = {n: verdicts[n]["groups"][group] for n in names}
    tasks = [
        t for t in sorted(rows[names[0]]) if t != "all" and rows[names[0]][t]["real_successes"]
    ]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    width = 0.8 / len(names)
    x = np.arange(len(tasks))
    for i, name in enumerate(names):
        recall = [rows[name].get(t, {}).get("recall") or 0.0 for t in tasks]
        auc = [rows[name].get(t, {}).get("auc") for t in tasks]
        top.bar(x + i * width - 0.4 + width / 2, recall, width, label=name)
        bottom.scatter(
            x + i * width - 0.4 + width / 2,
            [np.nan if a is None else a for a in auc],
            label=name,
            s=25,
        )
    top.axhline(TARGET_RECALL, color="k", lw=0.8, ls="--")
    top.set_ylabel("recall")
    top.set_ylim(0, 1)
    top.legend(fontsize=8, ncol=len(names))
    bottom.axhline(0.5, color="k", lw=0.8, ls=":")
    bottom.set_ylabel("ranking AUC")
    bottom.set_ylim(0, 1)
    bottom.set_xticks(x, tasks, rotation=30, ha="right")
    fig.suptitle(f"Judge benchmark, {group} policies' imagined episodes (tasks with a success)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scores", nargs="+", type=Path)
    parser.add_argument("--group", default="rl", help="base or rl (default: rl)")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    verdicts = load_verdicts(args.scores)
    text = summary_table(verdicts, args.group)
    print(text)
    if args.markdown:
        atomic_write_text(args.markdown, text + "\n")
    if args.plot:
        plot(verdicts, args.group, args.plot)


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
