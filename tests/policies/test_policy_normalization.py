"""BOUNDS_Q99 normalization, dataset_statistics.json and unnorm-key lookup."""

import json

import numpy as np
import pytest
import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.normalization import (
    action_stats,
    compute_statistics,
    normalize,
    read_statistics,
    resolve_unnorm_key,
    unnormalize,
    write_statistics,
)

MASK = [True] * 6 + [False]


def _stats(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    acts = rng.normal(size=(500, 7)) * np.arange(1, 8) + np.arange(7)
    acts[:, -1] = rng.choice([-1.0, 1.0], size=500)
    return compute_statistics(acts, mask=MASK, num_trajectories=10)


def test_statistics_layout():
    entry = _stats()
    assert set(entry) == {"action", "proprio", "num_transitions", "num_trajectories"}
    assert set(entry["action"]) == {"mean", "std", "max", "min", "q01", "q99", "mask"}
    assert len(entry["action"]["q01"]) == 7 and entry["action"]["mask"] == MASK
    assert entry["num_transitions"] == 500 and entry["num_trajectories"] == 10


def test_normalize_unnormalize_inverse_within_mask():
    a = _stats()["action"]
    q01, q99 = np.array(a["q01"]), np.array(a["q99"])
    rng = np.random.default_rng(3)
    x = rng.uniform(q01, q99, size=(64, 7))
    x[:, -1] = rng.uniform(-1, 1, size=64)
    y = normalize(x, a)
    assert np.all(np.abs(y[:, :6]) <= 1.0)
    np.testing.assert_array_equal(y[:, -1], x[:, -1])  # unmasked dim passes through
    np.testing.assert_allclose(unnormalize(y, a), x, atol=1e-6)


def test_normalize_formula_and_clipping():
    a = {"q01": [0.0, -2.0], "q99": [4.0, 2.0], "mask": [True, True]}
    x = np.array([[1.0, 0.0], [10.0, -5.0]])
    np.testing.assert_allclose(normalize(x, a), [[-0.5, 0.0], [1.0, -1.0]], atol=1e-7)
    np.testing.assert_allclose(unnormalize(np.array([[-1.0, 1.0]]), a), [[0.0, 2.0]], atol=1e-6)


def test_torch_matches_numpy():
    a = _stats()["action"]
    x = np.random.default_rng(4).normal(size=(3, 8, 7)).astype(np.float32)
    np.testing.assert_allclose(normalize(torch.from_numpy(x), a).numpy(), normalize(x, a), 1e-6)
    y = normalize(x, a)
    np.testing.assert_allclose(
        unnormalize(torch.from_numpy(y), a).numpy(), unnormalize(y, a), rtol=1e-5, atol=1e-5
    )


def test_missing_mask_means_all_dims(tmp_path):
    a = {"q01": [0.0], "q99": [2.0]}
    assert normalize(np.array([[2.0]]), a)[0, 0] == pytest.approx(1.0)


def test_file_round_trip_and_flat_layout(tmp_path):
    stats = {"libero_spatial_no_noops": _stats()}
    path = write_statistics(tmp_path, stats)
    assert path.name == "dataset_statistics.json"
    assert read_statistics(tmp_path) == json.loads(path.read_text())
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(_stats(1)))
    assert list(read_statistics(flat)) == ["default"]


def test_unnorm_key_fallback_and_errors():
    stats = {"libero_spatial_no_noops": _stats(), "libero_goal_no_noops": _stats(2)}
    assert resolve_unnorm_key(stats, "libero_spatial") == "libero_spatial_no_noops"
    assert resolve_unnorm_key(stats, "libero_goal_no_noops") == "libero_goal_no_noops"
    assert (
        action_stats(stats, "libero_goal")["q01"] == stats["libero_goal_no_noops"]["action"]["q01"]
    )
    with pytest.raises(WmrlError) as err:
        resolve_unnorm_key(stats, "libero_10")
    msg = str(err.value)
    assert "\n" not in msg and "libero_10" in msg and "libero_goal_no_noops" in msg
    with pytest.raises(WmrlError, match="several"):
        resolve_unnorm_key(stats, None)
    assert resolve_unnorm_key({"only": _stats()}, None) == "only"


def test_bad_files_give_clear_errors(tmp_path):
    with pytest.raises(WmrlError, match="no dataset statistics"):
        read_statistics(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(WmrlError, match="not valid JSON"):
        read_statistics(bad)
    with pytest.raises(WmrlError):
        compute_statistics(np.zeros((0, 7)))
