"""The GPU a rank's simulators render on: its own.

MuJoCo's EGL backend renders on the device `MUJOCO_EGL_DEVICE_ID` names, else on the first one
that works, GPU 0: eight ranks would all render there, beside rank 0's training. Robosuite (under
LIBERO) takes the same index as `render_gpu_device_id`, and reads `MUJOCO_EGL_DEVICE_ID` first.
Both count the machine's GPUs as nvidia-smi does, ignoring CUDA_VISIBLE_DEVICES, so the rank's
GPU is its entry there (robosuite asserts that it is one of them). Simulator workers are spawned
and inherit the variable.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

EGL_DEVICE = "MUJOCO_EGL_DEVICE_ID"


def render_device_id(local_rank: str | None, visible: str | None, gpus: int) -> str | None:
    """The EGL device (the machine's GPU index) that the process of local rank `local_rank`
    (None: a single process, 0) renders on, given CUDA_VISIBLE_DEVICES `visible` and the `gpus`
    CUDA sees; None where there is no GPU, or no index to give (devices named by UUID)."""
    if gpus <= 0:
        return None
    rank = int(local_rank or 0)
    ids = [part.strip() for part in (visible or "").split(",") if part.strip()]
    if ids:
        return ids[rank] if rank < len(ids) and ids[rank].isdigit() else None
    return str(rank) if rank < gpus else None


def use_rank_render_device(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Sets `MUJOCO_EGL_DEVICE_ID` to this rank's GPU (`render_device_id`) where MuJoCo renders
    through EGL and the user set none; returns the device rendering will use (None: MuJoCo's
    default). Called before a simulator builds its first env."""
    if environ.get("MUJOCO_GL", "egl") != "egl" or EGL_DEVICE in environ:
        return environ.get(EGL_DEVICE)
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = render_device_id(environ.get("LOCAL_RANK"), environ.get("CUDA_VISIBLE_DEVICES"), gpus)
    if device is not None:
        environ[EGL_DEVICE] = device
    return device


def robosuite_render_kwargs(environ: MutableMapping[str, str] = os.environ) -> dict[str, int]:
    """Robosuite's `render_gpu_device_id` for the device `MUJOCO_EGL_DEVICE_ID` names (empty:
    robosuite's default)."""
    device = environ.get(EGL_DEVICE, "")
    return {"render_gpu_device_id": int(device)} if device.isdigit() else {}
