"""Which real simulator a config names: Meta-World (embedded) or LIBERO (the `libero` extra).

Suite names are unique across backends, so the suite decides: `--suite libero_spatial` selects
LIBERO and its settings (sims/libero_suites.py) without `simulator.name=libero`; naming the
other backend explicitly is an error.
"""

from __future__ import annotations

import numpy as np

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.sims.libero_suites import LIBERO_SUITES, get_libero_suite, libero_sim_config
from wmrl_cli.sims.suites import SUITES, Suite, get_suite


def resolve_simulator(cfg: SimulatorConfig) -> SimulatorConfig:
    """`cfg` with the backend its suite belongs to, and LIBERO's defaults for a LIBERO suite."""
    if cfg.suite in LIBERO_SUITES:
        if "name" in cfg.model_fields_set and cfg.name != "libero":
            raise ConfigError(
                f"invalid value for 'simulator.name': suite '{cfg.suite}' is a LIBERO suite, "
                f"not a {cfg.name} one"
            )
        return libero_sim_config(cfg)
    if cfg.suite not in SUITES:
        raise ConfigError(
            f"unknown suite '{cfg.suite}': expected one of {', '.join(SUITES)} (metaworld) "
            f"or {', '.join(LIBERO_SUITES)} (libero)"
        )
    if cfg.name == "libero":
        get_libero_suite(cfg.suite)  # raises: a Meta-World suite under the LIBERO backend
    return cfg


def simulator_suite(cfg: SimulatorConfig) -> Suite:
    if cfg.name == "libero":
        return get_libero_suite(cfg.suite).as_suite()
    return get_suite(cfg.suite)


def simulator_action_dim(cfg: SimulatorConfig) -> int:
    if cfg.name == "libero":
        from wmrl_cli.sims.libero_suites import ACTION_DIM
    else:
        from wmrl_cli.sims.metaworld_sim import ACTION_DIM
    return ACTION_DIM


def replay_actions(cfg: SimulatorConfig, actions: np.ndarray) -> np.ndarray:
    """Stored (executed) actions as the simulator takes them to execute them again: LIBERO
    converts the policy's gripper convention on every step (`from_libero_actions` undoes it);
    Meta-World executes actions as they are."""
    if cfg.name == "libero":
        from wmrl_cli.sims.libero_suites import from_libero_actions

        return from_libero_actions(actions)
    return actions


def simulator_class(cfg: SimulatorConfig) -> type:
    """The simulator class; for LIBERO this checks hf-libero and its assets (one-line
    `WmrlError` naming what to run), so call it before loading anything expensive."""
    if cfg.name == "libero":
        from wmrl_cli.sims.libero_sim import LiberoSim

        return LiberoSim
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    return MetaWorldSim


def check_scripted_policy(cfg: SimulatorConfig, policy: str) -> None:
    if cfg.name == "libero" and policy == "expert":
        raise WmrlError(
            "LIBERO has no scripted expert: pass --policy with an OpenVLA-OFT checkpoint or "
            "policy asset (e.g. openvla-oft-libero-spatial-traj1, fetched by `wmrl download "
            "openvla-oft-libero-spatial-traj1`) or random"
        )
