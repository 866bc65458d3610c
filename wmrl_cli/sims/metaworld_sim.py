"""Meta-World behind the env interface, sharded over worker processes.

Each worker owns a contiguous shard of the batch and steps it with `MetaWorldEnvs`; the
parent concatenates the shards (sims/workers.py). `num_workers=0` runs the same code
in-process.
"""

from __future__ import annotations

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.errors import ConfigError
from wmrl_cli.sims.suites import CAMERAS, Suite, get_suite
from wmrl_cli.sims.workers import ShardedEnvs

ACTION_DIM = 4  # Meta-World: end-effector xyz delta + gripper


class MetaWorldSim(ShardedEnvs):
    """The real simulator: B Meta-World environments of one suite.

    `render_every_step=False` renders only the frames a policy observes (after each chunk's
    last executed step); `frames` holds black images for the steps between. For RL in the
    simulator and evaluation without video, about 8x fewer renders for the same physics.
    """

    def __init__(
        self, cfg: SimulatorConfig, num_envs: int | None = None, *, render_every_step: bool = True
    ) -> None:
        self.suite: Suite = get_suite(cfg.suite)
        if cfg.camera not in CAMERAS:
            raise ConfigError(
                f"invalid value for 'simulator.camera': '{cfg.camera}' is not one of "
                f"{', '.join(CAMERAS)}"
            )
        self.cfg = cfg
        self.num_envs = num_envs or cfg.num_envs
        self.action_dim = ACTION_DIM
        self.task_names = self.suite.task_names
        self.instructions = [task.instruction for task in self.suite.tasks]
        self._start(
            "wmrl_cli.sims.metaworld_envs:MetaWorldEnvs",
            dict(
                suite=self.suite,
                image_size=cfg.image_size,
                camera=cfg.camera,
                max_steps=cfg.max_steps,
                terminate_on_success=cfg.terminate_on_success,
                base_seed=cfg.seed,
                render_every_step=render_every_step,
            ),
            cfg.num_workers,
        )
