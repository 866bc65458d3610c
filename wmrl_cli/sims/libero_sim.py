"""LIBERO behind the env interface, sharded over worker processes (the `libero` extra).

Importing this module checks that hf-libero and its assets are installed and raises
`LiberoUnavailable` (a `WmrlError` and an `ImportError`, one line naming what to run)
otherwise, so that a run fails before it starts rather than at its first evaluation.

The evaluation protocol is OpenVLA-OFT's (sims/libero_envs.py): fixed init states per
(task, trial), dummy settling steps, 256x256 agentview frames rotated upright, the suite's
step limit, success_once. Actions are the policy's 7-dim chunks with OpenVLA's gripper
convention; the sim converts them to LIBERO's.
"""

from __future__ import annotations

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.sims.libero_setup import check_libero, prepare_libero
from wmrl_cli.sims.libero_suites import ACTION_DIM, get_libero_suite, libero_sim_config
from wmrl_cli.sims.workers import ShardedEnvs

check_libero()


class LiberoSim(ShardedEnvs):
    """The real simulator: B LIBERO environments of one suite."""

    # An init id fixes the task and the trial's init state, not a seed; the furniture's pose
    # comes from the env's random stream. A stored episode start is restored from its state.
    seeded_starts = False

    def __init__(
        self, cfg: SimulatorConfig, num_envs: int | None = None, *, render_every_step: bool = True
    ) -> None:
        # robosuite renders its camera observation inside every step, so LIBERO renders every
        # step whatever `render_every_step` says (Meta-World's hint to skip mid-chunk frames).
        del render_every_step
        cfg = libero_sim_config(cfg)
        libero_suite = get_libero_suite(cfg.suite)
        _, _, assets = prepare_libero()
        self.cfg = cfg
        self.suite = libero_suite.as_suite()
        self.num_envs = num_envs or cfg.num_envs
        self.action_dim = ACTION_DIM
        self.task_names = self.suite.task_names
        self.instructions = libero_suite.instructions
        self._start(
            "wmrl_cli.sims.libero_envs:LiberoEnvs",
            dict(
                suite=cfg.suite,
                image_size=cfg.image_size,
                camera=cfg.camera,
                max_steps=cfg.max_steps,
                terminate_on_success=cfg.terminate_on_success,
                assets_dir=str(assets),
            ),
            cfg.num_workers,
        )
