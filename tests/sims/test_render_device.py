"""Each rank's simulators render on the rank's own GPU (sims/render_device.py), not all on GPU 0."""

from __future__ import annotations

import torch

from wmrl_cli.sims.render_device import (
    EGL_DEVICE,
    render_device_id,
    robosuite_render_kwargs,
    use_rank_render_device,
)


def test_each_local_rank_renders_on_its_own_gpu() -> None:
    assert [render_device_id(str(r), None, 8) for r in range(8)] == [str(r) for r in range(8)]
    assert render_device_id(None, None, 2) == "0"  # one process
    assert render_device_id("1", "4,6", 2) == "6"  # the machine's index, as EGL counts
    assert render_device_id(None, "3", 1) == "3"
    assert render_device_id("0", "GPU-8d3c", 1) is None  # a UUID: MuJoCo's default
    assert render_device_id("1", None, 0) is None  # no GPU: nothing set (gloo ranks on a CPU)
    assert render_device_id("2", "0,1", 2) is None  # more ranks than GPUs


def test_the_rank_device_reaches_mujoco_and_robosuite(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    env = {"MUJOCO_GL": "egl", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "2,5"}
    assert use_rank_render_device(env) == "5" and env[EGL_DEVICE] == "5"
    assert robosuite_render_kwargs(env) == {"render_gpu_device_id": 5}
    mine = {"MUJOCO_GL": "egl", "LOCAL_RANK": "1", EGL_DEVICE: "0"}  # the user's own choice
    assert (
        use_rank_render_device(mine) == "0"
        and robosuite_render_kwargs(mine)["render_gpu_device_id"] == 0
    )
    osmesa = {"MUJOCO_GL": "osmesa", "LOCAL_RANK": "1"}
    assert use_rank_render_device(osmesa) is None and EGL_DEVICE not in osmesa
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = {"MUJOCO_GL": "egl", "LOCAL_RANK": "1"}
    assert use_rank_render_device(cpu) is None and robosuite_render_kwargs(cpu) == {}


def test_a_simulator_sets_the_device_before_its_workers_start(monkeypatch) -> None:
    """ShardedEnvs._start: the variable is in os.environ before any env is built, so spawned
    workers inherit it."""
    from wmrl_cli.sims import workers

    seen = []
    monkeypatch.setattr(workers, "use_rank_render_device", lambda: seen.append("set"))

    class Built(workers.ShardedEnvs):
        num_envs = 1

    monkeypatch.setattr(workers, "Worker", lambda *args, **kwargs: seen.append("worker"))
    Built()._start("x.Y", {}, 0)
    assert seen == ["set", "worker"]
