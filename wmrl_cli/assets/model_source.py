"""What `wmrl push` pushes: the model folder a path names, its kind, and the run that made it.

A path is a model folder (config.json beside safetensors weights: a policy, world model or
reward model as wmrl saves them; a checkpoint's `model/` too) or a run directory holding one as
`policy/`, `world_model/` or `reward_model/`. The run (the model folder's parent, or the run a
checkpoint belongs to) is whatever recorded it: run.json and config.yaml, or for a co-evolve
stage its config.yaml and the co-evolve run's record one level up. Nothing here loads a model:
kinds and sizes come from config.json and the safetensors headers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl_cli.assets.integrity import DownloadState
from wmrl_cli.assets.registry import ASSETS
from wmrl_cli.errors import WmrlError

# kind -> the folder a run keeps it in
MODEL_DIRS = {"policy": "policy", "world_model": "world_model", "reward_model": "reward_model"}
KIND_NAMES = {"policy": "policy", "world_model": "world model", "reward_model": "reward model"}
REWARD_KINDS = ("resnet", "taskemb_resnet", "videomae", "latent")
# bookkeeping that is never part of a model: huggingface_hub's and wmrl's download records,
# git, and the temporary folders of an atomic write
PRIVATE_PREFIXES = (".cache/", ".git/", ".tmp-", ".old-")


@dataclass(frozen=True)
class PushSource:
    kind: str  # a key of MODEL_DIRS
    model_dir: Path
    run_dir: Path | None  # None: a model folder no run recorded (a copy, a download)
    config: dict[str, Any]  # the model's config.json

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]


def read_json(path: Path) -> Any:
    """A JSON file's content, or None if it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def model_kind(config: Any) -> str | None:
    """policy, world_model or reward_model from a config.json's content; None if none."""
    if not isinstance(config, dict):
        return None
    if str(config.get("format", "")).startswith("wmrl-openvla-oft"):
        return "policy"
    if config.get("kind") in REWARD_KINDS:
        return "reward_model"
    if isinstance(config.get("transformer"), dict):
        return "world_model"
    return None


def _model_at(directory: Path) -> tuple[str, dict[str, Any]] | None:
    config = read_json(directory / "config.json")
    kind = model_kind(config)
    if kind is None or not any(directory.glob("*.safetensors")):
        return None
    return kind, config


def find_model(path: str | Path) -> PushSource:
    """The model `path` names (a model folder, or a run directory holding one), or a one-line
    error saying what the path holds instead."""
    path = Path(path)
    if not path.is_dir():
        state = "is not a folder" if path.exists() else "does not exist"
        raise WmrlError(f"{path} {state}: name a run directory or a model folder")
    found = _model_at(path)
    if found is not None:
        return PushSource(found[0], path, _run_of(path), found[1])
    models = [(d, m) for d in (path / n for n in MODEL_DIRS.values()) if (m := _model_at(d))]
    if len(models) > 1:
        shown = ", ".join(str(d) for d, _ in models)
        raise WmrlError(f"{path} holds several models ({shown}): push one of them")
    if models:
        (directory, (kind, config)), run_dir = models[0], path.absolute()
        return PushSource(kind, directory, run_dir if is_run(path) else None, config)
    raise WmrlError(f"no policy, world model or reward model in {path}{_hint(path)}")


def _hint(path: Path) -> str:
    """Where the model may be instead: a checkpoint of an unfinished run, a stage's folder."""
    checkpoints = sorted(p.parent for p in path.glob("checkpoints/*/model/config.json"))
    if checkpoints:
        return f" (no finished model yet; its newest checkpoint's is {checkpoints[-1]})"
    nested = sorted(
        str(p.parent) for name in MODEL_DIRS.values() for p in path.glob(f"*/{name}/config.json")
    )
    if nested:
        return f" (models inside it: {', '.join(nested[:4])}; push one of them)"
    names = ", ".join(f"{name}/" for name in MODEL_DIRS.values())
    return f" (looked for config.json and weights there and in {names})"


def is_run(directory: Path) -> bool:
    return (directory / "run.json").is_file() or (directory / "config.yaml").is_file()


def _run_of(model_dir: Path) -> Path | None:
    """The run a model folder belongs to: RUN/policy -> RUN, RUN/checkpoints/step_N/model ->
    RUN; None for a folder no run recorded."""
    model_dir = model_dir.absolute()
    if model_dir.name in MODEL_DIRS.values() and is_run(model_dir.parent):
        return model_dir.parent
    if model_dir.parent.parent.name == "checkpoints" and is_run(model_dir.parents[2]):
        return model_dir.parents[2]
    return None


def files_to_push(model_dir: Path) -> list[str]:
    """The model folder's files (posix paths), bookkeeping left out."""
    files = (p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file())
    return sorted(
        f for f in files if not any(part.startswith(PRIVATE_PREFIXES) for part in _parts(f))
    )


def _parts(rel: str) -> list[str]:
    """Each folder of a path with a trailing slash, and its file name."""
    pieces = rel.split("/")
    return [p + "/" for p in pieces[:-1]] + [pieces[-1]]


def parameter_count(model_dir: Path) -> int:
    """Parameters in the folder's safetensors files, from their headers (nothing loaded)."""
    total = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        try:
            with file.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
        except (OSError, ValueError) as exc:
            raise WmrlError(f"{file} is not a readable safetensors file ({exc})") from None
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def hub_repo_of(source: str | None) -> str | None:
    """The Hub repo a run's input came from, where wmrl knows it: a published asset's name, or
    a folder `wmrl download` wrote (its record names the repo)."""
    if not source:
        return None
    if source in ASSETS:
        return ASSETS[source].repo_id
    path = Path(source).absolute()
    for folder in [path, *path.parents][:4]:
        state = DownloadState.load(folder)
        if state is not None:
            return state.repo_id
    return None


def describe(source: PushSource) -> list[tuple[str, str]]:
    """(what, value) rows of the model's architecture, from its config.json."""
    config = source.config
    if source.kind == "policy":
        policy = config.get("policy", {})
        llm = policy.get("llm", {})
        towers = " + ".join(
            f"{t.get('kind')} (depth {t.get('num_layers')}, width {t.get('hidden_size')})"
            for t in policy.get("vision", [])
        )
        rows = [
            ("architecture", f"OpenVLA-OFT ({policy.get('name', '?')})"),
            ("language model", f"depth {llm.get('num_layers')}, width {llm.get('hidden_size')}"),
            ("vision", towers or "?"),
            ("actions", f"{policy.get('action_dim')}-D, chunks of {policy.get('chunk_len')}"),
        ]
        if policy.get("lora"):
            rows.append(("LoRA", json.dumps(policy["lora"])))
        return rows
    if source.kind == "world_model":
        denoiser = config.get("transformer", {})
        backend = "OpenSora (STDiT3)" if "depth" in denoiser else "Wan"
        layers = denoiser.get("depth", denoiser.get("num_layers"))
        heads, head_dim = denoiser.get("num_attention_heads"), denoiser.get("attention_head_dim")
        width = denoiser.get("hidden_size", heads * head_dim if heads and head_dim else None)
        return [
            ("architecture", f"action-conditioned video world model, {backend}"),
            ("denoiser", f"depth {layers}, width {width}"),
            ("frames", f"{config.get('height')}x{config.get('width')}"),
            (
                "window",
                f"{config.get('num_context_frames')} context, "
                f"{config.get('num_target_frames')} predicted frames",
            ),
        ]
    rows = [("architecture", f"success classifier, {config.get('kind')}")]
    for key in ("width", "blocks", "image_size", "task_embedding", "threshold"):
        if config.get(key) is not None:
            rows.append((key.replace("_", " "), str(config[key])))
    return rows
