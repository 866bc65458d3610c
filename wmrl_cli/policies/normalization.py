"""BOUNDS_Q99 action normalization and `dataset_statistics.json` (OpenVLA's
`prismatic/vla/datasets/rlds/utils/data_utils.py`; WMPO, arXiv 2511.09515, for the world model).

Normalize: clip(2 * (x - q01) / (q99 - q01 + 1e-8) - 1, -1, 1) on masked dims; unmasked dims
(the gripper, in LIBERO) pass through unchanged both ways. The statistics file maps an
"unnorm key" (one per training dataset) to {"action": {...}, "proprio": {...},
"num_transitions", "num_trajectories"}; OpenSora-style files hold a single flat entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import temp_file_beside

EPS = 1e-8
STATISTICS_FILE = "dataset_statistics.json"
NO_NOOPS_SUFFIX = "_no_noops"
# Key used when a flat (single-dataset) statistics file is read.
DEFAULT_KEY = "default"

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


def _stats_arrays(stats: Mapping[str, Any], like: ArrayT) -> tuple[ArrayT, ArrayT, ArrayT]:
    q01 = np.asarray(stats["q01"], dtype=np.float64)
    q99 = np.asarray(stats["q99"], dtype=np.float64)
    mask = np.asarray(stats.get("mask", np.ones_like(q01, dtype=bool)), dtype=bool)
    if isinstance(like, torch.Tensor):
        kw = {"device": like.device}
        return (
            torch.as_tensor(q01, dtype=torch.float64, **kw),
            torch.as_tensor(q99, dtype=torch.float64, **kw),
            torch.as_tensor(mask, **kw),
        )
    return q01, q99, mask


def _float_dtype(x: Any) -> np.dtype:
    dtype = np.asarray(x).dtype
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float32)


def normalize(x: ArrayT, stats: Mapping[str, Any]) -> ArrayT:
    """Env units -> [-1, 1] on masked dims (last axis = action dims); keeps the input dtype."""
    q01, q99, mask = _stats_arrays(stats, x)
    if isinstance(x, torch.Tensor):
        xd = x.to(torch.float64)
        scaled = (2.0 * (xd - q01) / (q99 - q01 + EPS) - 1.0).clamp(-1.0, 1.0)
        return torch.where(mask, scaled, xd).to(x.dtype)
    xd = np.asarray(x, dtype=np.float64)
    scaled = np.clip(2.0 * (xd - q01) / (q99 - q01 + EPS) - 1.0, -1.0, 1.0)
    return np.where(mask, scaled, xd).astype(_float_dtype(x))


def unnormalize(a: ArrayT, stats: Mapping[str, Any]) -> ArrayT:
    """[-1, 1] -> env units on masked dims; unmasked dims pass through."""
    q01, q99, mask = _stats_arrays(stats, a)
    if isinstance(a, torch.Tensor):
        ad = a.to(torch.float64)
        out = torch.where(mask, 0.5 * (ad + 1.0) * (q99 - q01 + EPS) + q01, ad)
        return out.to(a.dtype)
    ad = np.asarray(a, dtype=np.float64)
    return np.where(mask, 0.5 * (ad + 1.0) * (q99 - q01 + EPS) + q01, ad).astype(_float_dtype(a))


def _summary(x: np.ndarray) -> dict[str, list[float]]:
    return {
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "max": x.max(0).tolist(),
        "min": x.min(0).tolist(),
        "q01": np.quantile(x, 0.01, axis=0).tolist(),
        "q99": np.quantile(x, 0.99, axis=0).tolist(),
    }


def compute_statistics(
    actions: np.ndarray,
    *,
    mask: list[bool] | np.ndarray | None = None,
    proprio: np.ndarray | None = None,
    num_trajectories: int | None = None,
) -> dict[str, Any]:
    """Statistics of one dataset: actions [N, A] (or [..., A]); mask marks dims to normalize.

    Returns the per-key entry ({"action", "proprio", "num_transitions", "num_trajectories"}).
    """
    acts = np.asarray(actions, dtype=np.float64)
    if acts.ndim < 2 or acts.shape[0] == 0:
        raise WmrlError(f"cannot compute action statistics from an array of shape {acts.shape}")
    acts = acts.reshape(-1, acts.shape[-1])
    action = _summary(acts)
    m = np.ones(acts.shape[-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if m.shape != (acts.shape[-1],):
        raise WmrlError(f"normalization mask has {m.size} entries for {acts.shape[-1]} action dims")
    action["mask"] = m.tolist()
    if proprio is not None:
        prop = np.asarray(proprio, dtype=np.float64)
        prop = prop.reshape(-1, prop.shape[-1])
    else:
        # OpenVLA's loaders expect a proprio entry even when the data has none.
        prop = np.zeros((1, 1))
    return {
        "action": action,
        "proprio": _summary(prop),
        "num_transitions": int(acts.shape[0]),
        "num_trajectories": int(num_trajectories) if num_trajectories is not None else 0,
    }


def _is_entry(value: Any) -> bool:
    return isinstance(value, Mapping) and "action" in value


def as_keyed(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Accept both layouts: {key: entry} (OpenVLA) or a flat entry (OpenSora) -> {key: entry}."""
    if _is_entry(stats):
        return {DEFAULT_KEY: dict(stats)}
    bad = [k for k, v in stats.items() if not _is_entry(v)]
    if bad or not stats:
        raise WmrlError(
            "dataset statistics: expected {unnorm_key: {'action': ...}}, "
            f"bad entries: {bad[:5]}"
        )
    return {str(k): v for k, v in stats.items()}


def resolve_unnorm_key(stats: Mapping[str, Any], key: str | None) -> str:
    """Pick the statistics entry: `key`, else `key + '_no_noops'`, else the only entry."""
    available = sorted(stats)
    if key is None:
        if len(available) == 1:
            return available[0]
        raise WmrlError(
            f"the policy holds several dataset statistics; pass an unnorm key: {available}"
        )
    if key in stats:
        return key
    if key + NO_NOOPS_SUFFIX in stats:
        return key + NO_NOOPS_SUFFIX
    raise WmrlError(f"unnorm key '{key}' not in the dataset statistics; available: {available}")


def action_stats(stats: Mapping[str, Any], key: str | None) -> dict[str, Any]:
    """The "action" statistics for an unnorm key (with the `_no_noops` fallback)."""
    keyed = as_keyed(stats)
    entry = keyed[resolve_unnorm_key(keyed, key)]["action"]
    for field in ("q01", "q99"):
        if field not in entry:
            raise WmrlError(f"dataset statistics: 'action' entry lacks '{field}'")
    return entry


def read_statistics(path: str | Path) -> dict[str, Any]:
    """Read dataset_statistics.json (a file, or a directory holding one) as {key: entry}."""
    p = Path(path)
    if p.is_dir():
        p = p / STATISTICS_FILE
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise WmrlError(f"no dataset statistics at {p}") from None
    except json.JSONDecodeError as exc:
        raise WmrlError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, Mapping):
        raise WmrlError(f"{p}: expected a JSON object")
    return as_keyed(data)


def write_statistics(path: str | Path, stats: Mapping[str, Any]) -> Path:
    """Write {key: entry} as JSON (to a file, or into a directory), atomically."""
    p = Path(path)
    if p.is_dir():
        p = p / STATISTICS_FILE
    keyed = as_keyed(stats)
    fd, tmp = temp_file_beside(p)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_jsonable(keyed), fh, indent=2)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return np.asarray(value).tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
