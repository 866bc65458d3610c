"""The model card `wmrl push` writes: README.md with the Hub's metadata block (library_name
wmrl, license, tags, base_model where known) and a body that says what the model is, where it
came from, how it scored and what it cost.

Everything comes from files the run wrote (model_source.py finds them): config.json and the
weights' headers (kind, architecture, parameters); run.json and config.yaml (the command, its
inputs, the resolved configuration); an evaluation (a `wmrl eval --policy` report given with
`--eval`, else train-policy's last in-run evaluation `eval/step_N.json`, a co-evolve stage's
`eval/<stage>/report.json`, train-reward's `reward_metrics.json`, train-wm's last `eval/wm/*`
metrics); metrics.jsonl's last `env/real_steps*` (real environment steps). What a run did not
record, the card says it does not know. Paths name no folder of the pushing machine: those under
the working folder are relative to it, the home folder is `~`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCard, ModelCardData
from rich.filesize import decimal

from wmrl_cli import __version__
from wmrl_cli.assets.model_source import (
    PushSource,
    describe,
    files_to_push,
    hub_repo_of,
    parameter_count,
    read_json,
)
from wmrl_cli.errors import WmrlError
from wmrl_cli.logging import read_metric_rows

TAGS = ("wmrl", "robotics", "reinforcement-learning", "world-model")
KIND_TAGS = {
    "policy": ("vision-language-action", "openvla-oft"),
    "world_model": ("video-prediction", "action-conditioned"),
    "reward_model": ("reward-model",),
}


@dataclass(frozen=True)
class Paper:
    key: str
    title: str
    authors: str
    arxiv: str
    year: int

    def bibtex(self) -> str:
        return (
            f"@article{{{self.key},\n  title={{{self.title}}},\n  author={{{self.authors}}},\n"
            f"  journal={{arXiv preprint arXiv:{self.arxiv}}},\n  year={{{self.year}}}\n}}"
        )


# The method wmrl implements, and the policy family it trains.
PAPERS = {
    "RLinf": Paper(
        "yu2025rlinf",
        "RLinf: Flexible and Efficient Large-scale Reinforcement Learning via Macro-to-Micro "
        "Flow Transformation",
        "Yu, Chao and Wang, Yuanqing and Guo, Zhen and others",
        "2509.15965",
        2025,
    ),
    "WoVR": Paper(
        "jiang2026wovr",
        "WoVR: World Models as Reliable Simulators for Post-Training VLA Policies with RL",
        "Jiang, Zhennan and Zhou, Shangqing and Jiang, Yutong and others",
        "2602.13977",
        2026,
    ),
    "WMPO": Paper(
        "zhu2025wmpo",
        "WMPO: World Model-based Policy Optimization for Vision-Language-Action Models",
        "Zhu, Fangqi and Yan, Zhengyang and Hong, Zicong and Shou, Quanxin and Ma, Xiao and "
        "Guo, Song",
        "2511.09515",
        2025,
    ),
    "OpenVLA-OFT": Paper(
        "kim2025openvlaoft",
        "Fine-Tuning Vision-Language-Action Models: Optimizing Speed and Success",
        "Kim, Moo Jin and Finn, Chelsea and Liang, Percy",
        "2502.19645",
        2025,
    ),
}
EVAL_KEYS = {"suite", "per_task", "overall", "episodes"}


@dataclass
class RunRecord:
    """What made the model: the command, its inputs and the resolved configuration."""

    command: str | None
    inputs: dict[str, Any] = field(default_factory=dict)  # key -> {path, sha256}
    config: dict[str, Any] = field(default_factory=dict)
    config_text: str | None = None  # config.yaml as the run wrote it
    stage_of: Path | None = None  # the co-evolve run, for one of its stages


def read_record(run_dir: Path | None) -> RunRecord | None:
    if run_dir is None:
        return None
    record = read_json(run_dir / "run.json")
    record = record if isinstance(record, dict) else {}
    config_text = None
    if (run_dir / "config.yaml").is_file():
        config_text = (run_dir / "config.yaml").read_text(encoding="utf-8")
    config = record.get("config")
    if not isinstance(config, dict):
        loaded = yaml.safe_load(config_text) if config_text else None
        config = loaded if isinstance(loaded, dict) else {}
    stage_of = run_dir.parent if (run_dir.parent / "stages.json").is_file() else None
    command = record.get("command")
    if command is None and stage_of is not None:
        command = "co-evolve"
    return RunRecord(command, dict(record.get("inputs") or {}), config, config_text, stage_of)


def base_of(source: PushSource, record: RunRecord | None) -> tuple[str, str | None]:
    """(what the model started from, in words; the Hub repo of that start where known)."""
    if record is None:
        return "not recorded (no run record beside the model folder)", None
    inputs = record.inputs
    start = inputs.get("policy" if source.kind == "policy" else "init", {}).get("path")
    if start is None and source.kind == "policy" and record.command != "sft":
        name = record.config.get("policy", {}).get("name")
        start = name if name not in (None, "expert", "random") else None
    if start is None:
        if record.command in ("sft", "train-wm", "train-reward"):
            return f"trained from scratch (`wmrl {record.command}`)", None
        return "not recorded", None
    repo = hub_repo_of(start)
    return f"`{start}`" + (f" (Hub: [{repo}](https://huggingface.co/{repo}))" if repo else ""), repo


# --- evaluation ---------------------------------------------------------------------------
def load_policy_report(path: Path) -> dict[str, Any]:
    """A `wmrl eval --policy` report (report.json, its folder, or train-policy's step_N.json)."""
    file = path / "report.json" if path.is_dir() else path
    report = read_json(file)
    if not isinstance(report, dict) or not report.keys() >= EVAL_KEYS:
        raise WmrlError(
            f"--eval {path}: not a policy evaluation report (report.json of `wmrl eval --policy`)"
        )
    return report


def _found_policy_report(record: RunRecord | None, run_dir: Path | None) -> Path | None:
    if run_dir is None:
        return None
    if record is not None and record.stage_of is not None:
        stage_eval = record.stage_of / "eval" / run_dir.name / "report.json"
        if stage_eval.is_file():
            return stage_eval
    steps = sorted((run_dir / "eval").glob("step_*.json"))
    return steps[-1] if steps else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def policy_evaluation(report: dict[str, Any], origin: str) -> list[str]:
    episodes = len(report["episodes"])
    overall = _pct(report["overall"])
    interval = report.get("overall_interval95")
    if interval:
        overall += f" [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"
    lines = [
        f"Real success in the simulator on `{report['suite']}`: "
        f"{report.get('trials_per_task', '?')} trials per task (success at any step), "
        f"{episodes} episodes, the overall rate with its Wilson 95% interval "
        f"(from {origin}; the policy evaluated as `{report.get('policy', '?')}`).",
        "",
        "| task | success |",
        "|---|---|",
        *(f"| {task} | {_pct(rate)} |" for task, rate in report["per_task"].items()),
        f"| **overall** | **{overall}** |",
    ]
    baseline = report.get("baseline")
    if isinstance(baseline, dict) and isinstance(baseline.get("overall"), dict):
        d = baseline["overall"]
        lines += [
            "",
            f"Against `{baseline.get('path')}` on the same {d.get('episodes', '?')} episodes: "
            f"{100 * d['difference']:+.1f} points [{100 * d['low']:+.1f}, "
            f"{100 * d['high']:+.1f}] (paired bootstrap 95%).",
        ]
    return lines


def _reward_evaluation(model_dir: Path) -> list[str]:
    metrics = read_json(model_dir / "reward_metrics.json")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("best_f1"), dict):
        return []
    best = metrics["best_f1"]
    lines = [
        f"Frame success on held-out episodes ({metrics.get('val_frames', '?')} frames, "
        f"{metrics.get('val_positive', '?')} positive), at the threshold of best F1 "
        "(`reward_metrics.json`):",
        "",
        "| threshold | precision | recall | F1 |",
        "|---|---|---|---|",
        f"| {best['threshold']:.3f} | {best['precision']:.3f} | {best['recall']:.3f} | "
        f"{best['f1']:.3f} |",
    ]
    episodes = metrics.get("policy_episodes")
    if isinstance(episodes, dict):
        shown = ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in episodes.items()
            if isinstance(v, (int, float))
        )
        lines += ["", f"On the policy's episodes (the threshold the model keeps): {shown}."]
    return lines


def metric_rows(run_dir: Path | None) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (a torn line skipped); none without a run."""
    return [] if run_dir is None else read_metric_rows(run_dir)


def _world_model_evaluation(rows: list[dict[str, Any]]) -> list[str]:
    last = next((r for r in reversed(rows) if any(k.startswith("eval/wm/") for k in r)), None)
    if last is None:
        return []
    values = {k: v for k, v in last.items() if k.startswith("eval/wm/") and _is_number(v)}
    return [
        f"Open loop on held-out episodes at step {last.get('step', '?')} (train-wm's "
        "validation: PSNR / SSIM at each horizon, beside copying the last frame):",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| `{k}` | {v:.4g} |" for k, v in values.items()),
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def evaluation(
    source: PushSource, record: RunRecord | None, rows: list[dict[str, Any]], given: Path | None
) -> list[str]:
    """The card's evaluation section: the report given, else what the run wrote."""
    if given is not None:
        if source.kind != "policy":
            raise WmrlError("--eval takes a policy evaluation; this model is a " + source.kind_name)
        return policy_evaluation(load_policy_report(given), f"`{given}`")
    if source.kind == "policy":
        found = _found_policy_report(record, source.run_dir)
        if found is not None:
            return policy_evaluation(load_policy_report(found), f"the run's `{found.name}`")
        return [
            "None recorded with the model. Evaluate it with `wmrl eval --policy` and push again "
            "with `--eval` to add the report."
        ]
    lines = (
        _reward_evaluation(source.model_dir)
        if source.kind == "reward_model"
        else _world_model_evaluation(rows)
    )
    return lines or ["None recorded with the model."]


def real_steps(rows: list[dict[str, Any]]) -> list[str]:
    last = next((r for r in reversed(rows) if "env/real_steps" in r), None)
    if last is None:
        return ["Not recorded by the run (`env/real_steps` in its metrics.jsonl)."]
    kinds = {
        k.removeprefix("env/real_steps_"): v
        for k, v in last.items()
        if k.startswith("env/real_steps_") and _is_number(v)
    }
    by_kind = f" ({', '.join(f'{k} {v:,.0f}' for k, v in kinds.items())})" if kinds else ""
    return [
        f"{last['env/real_steps']:,.0f} real environment steps{by_kind}: `env/real_steps` at "
        f"the run's last logged step ({last.get('step', '?')}), the data it started from "
        "included."
    ]


# --- the card -----------------------------------------------------------------------------
def _origin(source: PushSource, record: RunRecord | None) -> list[str]:
    if record is None:
        return ["- command: not recorded (no run.json or config.yaml beside the model folder)"]
    run_dir = source.run_dir
    if record.stage_of is not None and run_dir is not None:
        made = f"stage `{run_dir.name}` of `wmrl co-evolve` (run `{record.stage_of.name}`)"
    elif record.command:
        made = f"`wmrl {record.command}` (its run record, run.json)"
    else:
        made = "a run that recorded its configuration only (config.yaml)"
    lines = [f"- command: {made}"]
    if record.inputs:
        lines.append("- inputs:")
        for key, value in record.inputs.items():
            digest = value.get("sha256") if isinstance(value, dict) else None
            path = value.get("path") if isinstance(value, dict) else value
            lines.append(
                f"  - `{key}`: `{path}`" + (f" (sha256 `{digest[:12]}`)" if digest else "")
            )
    if record.command and record.stage_of is None and record.config_text:
        lines.append(
            f"- to train it again: `wmrl {record.command} --preset config.yaml` (the resolved "
            "configuration below: the preset, every option and `--set`) with the same inputs"
        )
    return lines


def build_card(
    source: PushSource, repo_id: str, license_id: str, given_eval: Path | None = None
) -> ModelCard:
    """The model card of `source` as pushed to `repo_id` (README.md's content: `str(card)`)."""
    record = read_record(source.run_dir)
    rows = metric_rows(source.run_dir)
    base_text, base_repo = base_of(source, record)
    files = files_to_push(source.model_dir)
    size = sum((source.model_dir / f).stat().st_size for f in files)
    suite = (record.config.get("simulator") or {}).get("suite") if record else None
    papers = ["RLinf", "WoVR", "WMPO"] + (["OpenVLA-OFT"] if source.kind == "policy" else [])
    tags = [*TAGS, *KIND_TAGS[source.kind]]
    if suite:
        tags.append("libero" if str(suite).startswith("libero") else "metaworld")
    tags += [f"arxiv:{PAPERS[p].arxiv}" for p in papers]
    data = ModelCardData(
        library_name="wmrl",
        license=license_id,
        tags=tags,
        base_model=base_repo,
        pipeline_tag="robotics",
    )
    on = f" on `{suite}`" if suite else ""
    shown = ", ".join(f"`{f}`" for f in files[:8]) + (", ..." if len(files) > 8 else "")
    body = [
        f"# {repo_id.split('/')[-1]}",
        "",
        f"A {source.kind_name} for robot manipulation{on}, trained with wmrl {__version__}: "
        "reinforcement learning of vision-language-action policies inside learned, "
        "action-conditioned video world models (the RLinf / WoVR / WMPO recipe).",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| kind | {source.kind_name} |",
        *(f"| {what} | {value} |" for what, value in describe(source)),
        f"| parameters | {parameter_count(source.model_dir):,} |",
        f"| files | {len(files)} ({decimal(size)}): {shown} |",
        "",
        "## Where it came from",
        "",
        f"- base: {base_text}",
        *_origin(source, record),
    ]
    if record is not None and record.config_text:
        body += [
            "",
            "<details><summary>Resolved configuration (the run's config.yaml)</summary>",
            "",
            "```yaml",
            record.config_text.rstrip("\n"),
            "```",
            "",
            "</details>",
        ]
    body += ["", "## Evaluation", "", *evaluation(source, record, rows, given_eval)]
    body += ["", "## Real environment steps", "", *real_steps(rows)]
    use = {
        "policy": f"wmrl eval --policy assets/{repo_id}",
        "world_model": f"wmrl eval --world-model assets/{repo_id} --data STORE",
        "reward_model": f"wmrl eval --reward-model assets/{repo_id} --data STORE",
    }[source.kind]
    body += [
        "",
        "## Use",
        "",
        "```bash",
        f"wmrl download {repo_id}   # into ./assets/{repo_id} (--dir, $WMRL_ASSETS)",
        use,
        "```",
        "",
        "## License",
        "",
        f"`{license_id}`. A model fine-tuned from a published one is bound by that model's "
        "license as well (see the base above).",
        "",
        "## Citation",
        "",
        f"wmrl implements the method of {', '.join(papers[:3])}"
        + ("; the policy is OpenVLA-OFT." if source.kind == "policy" else "."),
        "",
        "```bibtex",
        "\n\n".join(PAPERS[p].bibtex() for p in papers),
        "```",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + public_paths("\n".join(body)) + "\n")


def public_paths(text: str) -> str:
    """The card's text without the pushing machine's folders: paths under the working folder
    relative to it (as the commands were typed from it), the home folder as `~`. The run
    records keep the absolute paths; a public card need not show where a user keeps them."""
    for folder, shown in ((Path.cwd(), ""), (Path.home(), "~/")):
        if len(folder.parts) > 1:  # never strip a bare "/"
            text = text.replace(f"{folder}/", shown)
    return text
