"""Writing a world model back into the publisher's layout it was loaded from (`wmrl train-wm
--init PUBLISHED --export-rlinf DIR`), so that RLinf, and wmrl's published loaders, read it.

The export is a new folder shaped like the source folder (world_models/published.py):

    the weight files    the same file names, shards and key names (wrapper prefix included) as
                        the source's DiT / STDiT3 files; every tensor the model holds is the
                        fine-tuned one, in float32 (the dtype it was trained in: rounding it back
                        to the published bf16 would lose most of a fine-tuning's small updates);
                        tensors the world model never uses (Wan's text projection, STDiT3's
                        caption and fps embedders) are the source's, unchanged
    the index           `*.safetensors.index.json` with the same weight map, its total size
                        recomputed
    everything else     the autoencoder (`Wan2.2_VAE.pth`, `vae/`: frozen during fine-tuning),
                        `config.json`, `dataset_statistics.json`, the reward model and the reset
                        set: hard links to the source's files where the filesystem allows, else
                        copies; the download bookkeeping (`.cache/`) is left out

The folder is written under a temporary name beside the target and renamed once complete.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import save_tensors
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.published import RLINF_WAN, published_layout, weights_checkpoint
from wmrl_cli.world_models.state_dicts import WRAPPER_PREFIXES
from wmrl_cli.world_models.wan.converter import diffusers_to_diffsynth_dit


def published_tensors(model: WorldModel, layout: str) -> dict[str, torch.Tensor]:
    """The model's denoiser weights under the names the publisher's file uses (before its
    wrapper prefix), in float32."""
    if model.config.carry_detail or model.config.delta_prediction:
        raise WmrlError(
            "this world model predicts differently from the published ones (carry_detail or "
            "delta_prediction is on): it has no published layout to go back to"
        )
    state = model.transformer.state_dict()
    if layout == RLINF_WAN:
        state = diffusers_to_diffsynth_dit(state)
    return {
        k: (v.detach().float() if v.is_floating_point() else v.detach()).contiguous()
        for k, v in state.items()
    }


def _weight_files(checkpoint: Path) -> dict[str, list[str]]:
    """File name -> the keys it holds, for one safetensors file or a sharded index."""
    if checkpoint.name.endswith(".index.json"):
        weight_map = json.loads(checkpoint.read_text())["weight_map"]
        files: dict[str, list[str]] = {}
        for key, name in weight_map.items():
            files.setdefault(name, []).append(key)
        return files
    with safe_open(str(checkpoint), "pt") as handle:
        return {checkpoint.name: list(handle.keys())}


def _wrapper_prefix(keys: list[str]) -> str:
    for prefix in WRAPPER_PREFIXES:
        if keys and all(k.startswith(prefix) for k in keys):
            return prefix
    return ""


def _check_fits(
    source: Path, files: dict[str, list[str]], prefix: str, tensors: dict[str, torch.Tensor]
) -> None:
    """Every tensor of the model has a key of the same shape in the source files."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name, keys in files.items():
        with safe_open(str(source / name), "pt") as handle:
            for key in keys:
                shapes[key[len(prefix) :]] = tuple(handle.get_slice(key).get_shape())
    homeless = sorted(set(tensors) - set(shapes))
    if homeless:
        shown = ", ".join(homeless[:4]) + (f" ({len(homeless)} in all)" if homeless[4:] else "")
        raise WmrlError(
            f"the world model has weights that {source} has no place for ({shown}): options "
            "that add modules (world_model.action_tokens, ...) have no published layout"
        )
    wrong = sorted(k for k, v in tensors.items() if tuple(v.shape) != shapes[k])
    if wrong:
        k = wrong[0]
        raise WmrlError(
            f"the world model does not fit {source}: {k} is {tuple(tensors[k].shape)} here, "
            f"{shapes[k]} there ({len(wrong)} such tensors)"
        )


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link to `source` at `target`, or a copy where links are not possible."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def export_published_world_model(model: WorldModel, source: str | Path, target: str | Path) -> Path:
    """Write `model` into a new folder `target` in the layout of the published folder `source`
    it was loaded from (see the module doc); returns `target`."""
    source, target = Path(source), Path(target)
    layout = published_layout(source)
    if layout is None:
        raise WmrlError(f"{source}: not a published world-model folder to export in the layout of")
    if target.exists():
        raise WmrlError(f"{target} exists: the export writes a new folder")
    checkpoint = weights_checkpoint(source)
    files = _weight_files(checkpoint)
    prefix = _wrapper_prefix([k for keys in files.values() for k in keys])
    tensors = published_tensors(model, layout)
    _check_fits(source, files, prefix, tensors)

    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        total_size = 0
        for name, keys in files.items():
            with safe_open(str(source / name), "pt") as handle:
                metadata = handle.metadata()
            state = load_file(str(source / name))
            for key in keys:
                if key[len(prefix) :] in tensors:
                    state[key] = tensors[key[len(prefix) :]]
            save_tensors(state, tmp / name, metadata=metadata)
            total_size += sum(t.numel() * t.element_size() for t in state.values())
            del state
        written = set(files)
        if checkpoint.name.endswith(".index.json"):
            index = json.loads(checkpoint.read_text())
            index.setdefault("metadata", {})["total_size"] = total_size
            (tmp / checkpoint.name).write_text(json.dumps(index, indent=2))
            written.add(checkpoint.name)
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if (
                path.is_file()
                and rel.as_posix() not in written
                and not rel.parts[0].startswith(".")
            ):
                link_or_copy(path, tmp / rel)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
