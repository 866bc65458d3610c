"""The LIBERO backend: suites, OpenVLA-OFT's conventions, config and asset checks, the CLI's
one-line errors, and the process-sharded env. Runs without the `libero` extra; the parts that
need hf-libero skip without it, and the simulator itself runs only where its assets are."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.sims import libero_setup
from wmrl_cli.sims.backends import resolve_simulator, simulator_action_dim, simulator_suite
from wmrl_cli.sims.libero_setup import (
    ASSET_SUBDIRS,
    LiberoUnavailable,
    check_libero,
    default_config,
    find_assets,
    prepare_libero,
    read_config,
)
from wmrl_cli.sims.libero_suites import (
    LIBERO_SUITES,
    get_libero_suite,
    libero_sim_config,
    proprio_from_obs,
    quat2axisangle,
    task_and_trial,
    task_language,
    to_libero_actions,
    upright,
)
from wmrl_cli.sims.workers import ShardedEnvs

runner = CliRunner()


# -- suites -------------------------------------------------------------------------------


def test_suites_tasks_and_limits() -> None:
    assert list(LIBERO_SUITES) == ["libero_spatial", "libero_object", "libero_goal", "libero_10"]
    limits = {name: s.max_steps for name, s in LIBERO_SUITES.items()}
    assert limits == {
        "libero_spatial": 220,
        "libero_object": 280,
        "libero_goal": 300,
        "libero_10": 520,
    }
    for suite in LIBERO_SUITES.values():
        assert len(suite.task_files) == len(set(suite.task_files)) == 10
    spatial = get_libero_suite("libero_spatial").as_suite()
    assert spatial.tasks[0].instruction == (
        "pick up the black bowl between the plate and the ramekin and place it on the plate"
    )
    with pytest.raises(ConfigError, match="unknown LIBERO suite 'libero_99'"):
        get_libero_suite("libero_99")


def test_task_language_strips_scene_prefixes() -> None:
    assert task_language("turn_on_the_stove") == "turn on the stove"
    assert task_language("KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it") == (
        "turn on the stove and put the moka pot on it"
    )
    assert task_language("LIVING_ROOM_SCENE10_put_the_mug_on_the_plate") == (
        "put the mug on the plate"
    )


def test_init_ids_are_trial_major_and_wrap_the_fixed_states() -> None:
    assert [task_and_trial(i, 10) for i in (0, 9, 10, 23)] == [(0, 0), (9, 0), (0, 1), (3, 2)]
    assert task_and_trial(50 * 10 + 4, 10) == (4, 0)  # past the 50 init states: wrap
    with pytest.raises(ValueError):
        task_and_trial(-1, 10)


def test_libero_defaults_fill_only_what_the_user_left() -> None:
    cfg = libero_sim_config(SimulatorConfig(suite="libero_goal"))
    assert (cfg.name, cfg.camera, cfg.image_size, cfg.max_steps) == (
        "libero",
        "agentview",
        256,
        300,
    )
    mine = libero_sim_config(SimulatorConfig(suite="libero_10", image_size=128, max_steps=40))
    assert (mine.image_size, mine.max_steps, mine.camera) == (128, 40, "agentview")
    assert libero_sim_config(mine) == mine
    with pytest.raises(ConfigError, match="simulator.camera"):
        libero_sim_config(SimulatorConfig(suite="libero_10", camera="corner"))


def test_backend_follows_the_suite() -> None:
    cfg = resolve_simulator(SimulatorConfig(suite="libero_object"))
    assert cfg.name == "libero" and cfg.max_steps == 280
    assert simulator_action_dim(cfg) == 7 and len(simulator_suite(cfg).tasks) == 10
    mw = resolve_simulator(SimulatorConfig(suite="mw3"))
    assert mw.name == "metaworld" and simulator_action_dim(mw) == 4
    with pytest.raises(ConfigError, match="is a LIBERO suite"):
        resolve_simulator(SimulatorConfig(suite="libero_object", name="metaworld"))
    with pytest.raises(ConfigError, match="unknown LIBERO suite 'mw3'"):
        resolve_simulator(SimulatorConfig(suite="mw3", name="libero"))
    with pytest.raises(ConfigError, match="mw10.*libero_spatial"):
        resolve_simulator(SimulatorConfig(suite="nope"))


# -- OpenVLA-OFT's conventions ------------------------------------------------------------


def test_gripper_conversion_matches_openvla_oft() -> None:
    policy = np.zeros((2, 3, 7), dtype=np.float32)
    policy[..., :6] = np.arange(6) / 10
    policy[0, :, 6] = [1.0, 0.0, 0.5]  # open, close, undecided
    policy[1, :, 6] = [0.7, 0.2, 0.51]
    before = policy.copy()
    env = to_libero_actions(policy)
    assert np.array_equal(policy, before)  # the input is left alone
    assert np.allclose(env[..., :6], policy[..., :6])
    # OpenVLA: 1 = open, 0 = close. LIBERO: -1 = open, +1 = close; sign(0) stays 0.
    assert env[0, :, 6].tolist() == [-1.0, 1.0, 0.0]
    assert env[1, :, 6].tolist() == [-1.0, 1.0, -1.0]
    with pytest.raises(ValueError):
        to_libero_actions(np.zeros((2, 4)))


def test_images_are_rotated_upright() -> None:
    raw = np.zeros((4, 6, 3), dtype=np.uint8)
    raw[3, 5] = 255  # LIBERO's raw frame: the scene's top-left pixel lands bottom-right
    up = upright(raw)
    assert up[0, 0].tolist() == [255, 255, 255] and up.flags.c_contiguous
    assert np.array_equal(up, np.rot90(raw, 2))


def test_quat2axisangle_and_proprio() -> None:
    from scipy.spatial.transform import Rotation

    assert np.allclose(quat2axisangle(np.array([0.0, 0.0, 0.0, 1.0])), 0.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        q *= np.sign(q[3])  # robosuite's formula and scipy's agree for w >= 0
        assert np.allclose(quat2axisangle(q), Rotation.from_quat(q).as_rotvec(), atol=1e-9)
    half = math.sqrt(0.5)
    state = proprio_from_obs(
        {
            "robot0_eef_pos": np.array([0.1, 0.2, 0.3]),
            "robot0_eef_quat": np.array([0.0, 0.0, half, half]),
            "robot0_gripper_qpos": np.array([0.04, -0.04]),
        }
    )
    assert np.allclose(state, [0.1, 0.2, 0.3, 0, 0, math.pi / 2, 0.04, -0.04])


# -- package, config and assets -----------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No LIBERO variables, and a home and cache of the test's own. (Set, then deleted: the
    code under test sets $LIBERO_CONFIG_PATH itself, and monkeypatch restores what setenv
    saw.)"""
    for var in (libero_setup.ASSETS_ENV, libero_setup.CONFIG_ENV):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def _fake_package(root: Path) -> Path:
    pkg = root / "site" / "libero" / "libero"
    for sub in ("bddl_files", "init_files"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    return pkg


def _fake_assets(root: Path) -> Path:
    for sub in ASSET_SUBDIRS:
        (root / sub).mkdir(parents=True)
    return root


def test_missing_package_names_the_install_command(monkeypatch) -> None:
    fake_util = types.SimpleNamespace(find_spec=lambda name: None)
    monkeypatch.setattr(libero_setup, "importlib", types.SimpleNamespace(util=fake_util))
    with pytest.raises(LiberoUnavailable, match=r"pip install 'wmrl\[libero\]'") as info:
        libero_setup.package_dir()
    assert isinstance(info.value, WmrlError) and isinstance(info.value, ImportError)


def test_assets_lookup_order_and_error(clean_env, monkeypatch) -> None:
    pkg = _fake_package(clean_env)
    with pytest.raises(LiberoUnavailable, match="hf download lerobot/libero-assets") as info:
        find_assets(pkg)
    assert "\n" not in str(info.value)
    cache = _fake_assets(clean_env / "home" / ".cache" / "libero" / "assets")
    assert find_assets(pkg) == cache
    configured = _fake_assets(clean_env / "configured")
    assert find_assets(pkg, {"assets": str(configured)}) == configured
    monkeypatch.setenv(libero_setup.ASSETS_ENV, str(clean_env / "incomplete"))
    with pytest.raises(LiberoUnavailable, match="is not a LIBERO assets folder"):
        find_assets(pkg)
    explicit = _fake_assets(clean_env / "explicit")
    monkeypatch.setenv(libero_setup.ASSETS_ENV, str(explicit))
    assert find_assets(pkg, {"assets": str(configured)}) == explicit


def test_config_is_written_without_prompting(clean_env, monkeypatch) -> None:
    pkg = _fake_package(clean_env)
    monkeypatch.setattr(libero_setup, "package_dir", lambda: pkg)
    assets = _fake_assets(clean_env / "assets")
    monkeypatch.setenv(libero_setup.ASSETS_ENV, str(assets))

    _, where, found = prepare_libero()
    assert where == clean_env / "cache" / "wmrl" / "libero" and found == assets
    assert os.environ[libero_setup.CONFIG_ENV] == str(where)
    config = read_config(where)
    assert config == default_config(pkg, assets)
    assert config["bddl_files"] == str(pkg / "bddl_files")
    assert config["init_states"] == str(pkg / "init_files")

    # wmrl's own config follows the assets; a user's config is left as it is.
    moved = _fake_assets(clean_env / "moved")
    monkeypatch.setenv(libero_setup.ASSETS_ENV, str(moved))
    monkeypatch.delenv(libero_setup.CONFIG_ENV)
    prepare_libero()
    assert read_config(where)["assets"] == str(moved)

    user = clean_env / "user-libero"
    monkeypatch.setenv(libero_setup.CONFIG_ENV, str(user))
    _, user_where, _ = prepare_libero()
    assert user_where == user and read_config(user)["bddl_files"] == str(pkg / "bddl_files")
    (user / "config.yaml").write_text("bddl_files: /nowhere\ninit_states: /nowhere\n")
    with pytest.raises(LiberoUnavailable, match="'bddl_files' is not a folder"):
        prepare_libero()


def test_check_libero_reports_missing_assets(clean_env, monkeypatch) -> None:
    pkg = _fake_package(clean_env)
    monkeypatch.setattr(libero_setup, "package_dir", lambda: pkg)
    with pytest.raises(LiberoUnavailable, match="LIBERO assets"):
        check_libero()


def test_init_states_refuse_anything_but_arrays(tmp_path) -> None:
    import pickle

    import torch

    from wmrl_cli.sims.libero_envs import load_init_states

    states = np.random.default_rng(0).normal(size=(50, 9))
    torch.save(states, tmp_path / "ok.pruned_init")
    assert np.array_equal(load_init_states(tmp_path / "ok.pruned_init"), states)

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"states": Payload()}, tmp_path / "evil.pruned_init")
    with pytest.raises(pickle.UnpicklingError):
        load_init_states(tmp_path / "evil.pruned_init")


# -- the CLI ------------------------------------------------------------------------------


def _eval(tmp_path: Path, *extra: str):
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["eval", "--suite", "libero_spatial", "-n", "1", "--out", str(out), *extra]
    )
    return result, out


def _reimport_libero_sim(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "wmrl_cli.sims.libero_sim", raising=False)


def test_cli_missing_package(tmp_path, monkeypatch) -> None:
    _reimport_libero_sim(monkeypatch)
    fake_util = types.SimpleNamespace(find_spec=lambda name: None)
    monkeypatch.setattr(libero_setup, "importlib", types.SimpleNamespace(util=fake_util))
    result, out = _eval(tmp_path, "--policy", "random")
    assert result.exit_code == 1
    assert "pip install 'wmrl[libero]'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_missing_assets(clean_env, monkeypatch) -> None:
    _reimport_libero_sim(monkeypatch)
    pkg = _fake_package(clean_env)
    monkeypatch.setattr(libero_setup, "package_dir", lambda: pkg)
    result, out = _eval(clean_env, "--policy", "random")
    assert result.exit_code == 1
    assert "hf download lerobot/libero-assets --repo-type dataset" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_cli_rejects_expert_and_a_mismatched_backend(tmp_path) -> None:
    result, out = _eval(tmp_path)  # the default policy is the scripted expert
    assert result.exit_code == 1 and "no scripted expert" in result.output
    assert "Traceback" not in result.output and not out.exists()
    result, _ = _eval(tmp_path, "--policy", "random", "--set", "simulator.name=metaworld")
    assert result.exit_code == 2 and "is a LIBERO suite" in result.output


# -- the sharded env (with a stand-in simulator) ------------------------------------------


class CountingEnvs:
    """A stand-in shard: the image is filled with init id + steps taken."""

    def __init__(self, num_envs: int, size: int) -> None:
        self.size = size
        self.ids = np.zeros(num_envs, dtype=np.int64)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def _obs(self) -> dict:
        value = (self.ids + self.steps).astype(np.uint8)
        return {
            "images": np.broadcast_to(
                value[:, None, None, None], (len(value), self.size, self.size, 3)
            ).copy(),
            "proprio": self.steps[:, None].astype(np.float64),
            "task_ids": self.ids % 2,
            "sim_states": [np.array([float(s)]) for s in self.steps],
        }

    def reset(self, init_ids, sim_states):
        self.ids = np.asarray(init_ids, dtype=np.int64)
        self.steps[:] = 0 if sim_states is None else [int(s[0]) for s in sim_states]
        return self._obs()

    def chunk_step(self, actions):
        b, c, _ = actions.shape
        frames = np.empty((b, c, self.size, self.size, 3), dtype=np.uint8)
        for t in range(c):
            self.steps += 1
            frames[:, t] = self._obs()["images"]
        zeros = np.zeros((b, c), dtype=bool)
        out = dict(
            frames=frames,
            rewards=zeros.astype(np.float32),
            terminated=zeros,
            truncated=zeros,
            success=zeros,
            valid=~zeros,
            executed=actions,
        )
        out.update(self._obs())
        return out

    def close(self) -> None:
        pass


class CountingSim(ShardedEnvs):
    def __init__(self, num_envs: int, num_workers: int, target: str = "CountingEnvs") -> None:
        self.num_envs, self.action_dim = num_envs, 2
        self.task_names, self.instructions = ["even", "odd"], ["do even", "do odd"]
        self._start(f"{__name__}:{target}", {"size": 4}, num_workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_sharded_envs_concatenate_shards_in_order(workers) -> None:
    with CountingSim(num_envs=3, num_workers=workers) as sim:
        obs = sim.reset([5, 6, 7])
        assert obs.images[:, 0, 0, 0].tolist() == [5, 6, 7]
        assert obs.instructions == ["do odd", "do even", "do odd"]
        result = sim.chunk_step(np.zeros((3, 2, 2)))
        assert result.frames.shape == (3, 2, 4, 4, 3)
        assert result.frames[:, :, 0, 0, 0].tolist() == [[6, 7], [7, 8], [8, 9]]
        assert result.info["valid"].all() and result.info["executed_actions"].shape == (3, 2, 2)
        again = sim.reset([1, 1, 1], sim_states=result.obs.sim_states)
        assert again.images[:, 0, 0, 0].tolist() == [3, 3, 3]


def test_a_worker_that_cannot_start_is_reported() -> None:
    with pytest.raises(RuntimeError, match="simulator worker failed: AttributeError"):
        CountingSim(num_envs=2, num_workers=1, target="Missing")


# -- with hf-libero installed -------------------------------------------------------------


def test_embedded_suites_match_hf_libero(tmp_path) -> None:
    """hf-libero's task lists and instructions, read in a child process with stdin closed:
    a prompt for the config would fail it."""
    pytest.importorskip("libero")
    pkg = libero_setup.package_dir()
    libero_setup._write_config(tmp_path, default_config(pkg, None))
    script = textwrap.dedent(
        """
        import json
        from libero.libero import benchmark
        out = {}
        for name in ("libero_spatial", "libero_object", "libero_goal", "libero_10"):
            suite = benchmark.get_benchmark_dict()[name]()
            out[name] = [[t.name, t.language] for t in suite.tasks]
        print("JSON" + json.dumps(out))
        """
    )
    env = dict(os.environ, LIBERO_CONFIG_PATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    tasks = json.loads(proc.stdout.split("JSON", 1)[1])
    for name, suite in LIBERO_SUITES.items():
        assert [t[0] for t in tasks[name]] == list(suite.task_files)
        assert [t[1] for t in tasks[name]] == suite.instructions


def test_init_states_load_without_unpickling_code() -> None:
    pytest.importorskip("libero")
    import torch

    from wmrl_cli.sims.libero_envs import load_init_states

    suite = LIBERO_SUITES["libero_spatial"]
    path = (
        libero_setup.package_dir()
        / "init_files"
        / suite.name
        / f"{suite.task_files[0]}.pruned_init"
    )
    states = load_init_states(path)
    assert states.shape[0] == 50 and states.dtype == np.float64
    assert np.array_equal(states, torch.load(path, weights_only=False))


def _libero_runs() -> bool:
    try:
        check_libero()
    except LiberoUnavailable:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _libero_runs(), reason="hf-libero and its assets are not installed")
def test_libero_sim_episode_protocol(tmp_path, monkeypatch) -> None:
    """Two real LIBERO envs in one worker: upright frames, instructions, the step limit."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(libero_setup.CONFIG_ENV, "")  # restored (unset) after the test
    monkeypatch.delenv(libero_setup.CONFIG_ENV)
    from wmrl_cli.sims.libero_sim import LiberoSim

    cfg = SimulatorConfig(
        suite="libero_spatial", num_envs=2, num_workers=1, image_size=64, max_steps=4
    )
    with LiberoSim(cfg) as sim:
        obs = sim.reset([0, 11])
        assert obs.images.shape == (2, 64, 64, 3) and obs.images.dtype == np.uint8
        assert obs.task_ids.tolist() == [0, 1] and obs.proprio.shape == (2, 8)
        assert obs.instructions == LIBERO_SUITES["libero_spatial"].instructions[:2]
        actions = np.zeros((2, 3, 7), dtype=np.float32)
        actions[..., 6] = 1.0  # OpenVLA: open
        first = sim.chunk_step(actions)
        assert (first.info["executed_actions"][..., 6] == -1).all()  # LIBERO: open
        assert not first.truncated.any()
        second = sim.chunk_step(actions)
        assert second.info["valid"].tolist() == [[True, False, False]] * 2
        assert second.truncated[:, 0].all()
        # The table (bright) fills the lower part of an upright agentview frame.
        image = obs.images[0].astype(float).mean(axis=-1)
        assert image[40:].mean() > image[:8].mean()


def test_a_worker_keeps_no_more_envs_than_slots(monkeypatch) -> None:
    """A LIBERO env holds about 1 GB: RL's changing task mixes must not make a worker hold one
    per task and slot (the pool is least-recently-used, bounded by the slots)."""
    from collections import OrderedDict

    from wmrl_cli.sims import libero_envs
    from wmrl_cli.sims.pool import Slot

    class FakeEnv:
        def __init__(self, task_id: int) -> None:
            self.task_id, self.closed = task_id, False

        def close(self) -> None:
            self.closed = True

    envs = object.__new__(libero_envs.LiberoEnvs)
    envs.slots = [Slot() for _ in range(2)]
    envs._pool, envs.pool_size = OrderedDict(), 2
    built: list[FakeEnv] = []
    monkeypatch.setattr(envs, "_make", lambda t: built.append(FakeEnv(t)) or built[-1])
    for mix in ([0, 0], [1, 2], [2, 3], [3, 3], [2, 3]):
        envs._assign(mix)
        assert len(envs._pool) <= 2
        assert [slot.task_id for slot in envs.slots] == mix
        assert all(not s.env.closed and s.env.task_id == t for s, t in zip(envs.slots, mix))
    assert sum(not env.closed for env in built) == 2
    # [2, 3] again after [3, 3]: (2, 0) was evicted, (3, 0) is reused, not rebuilt
    assert len(built) == 7
