"""Build the policy named in the config: `expert`, `random`, or a checkpoint directory."""

from __future__ import annotations

from pathlib import Path

from wmrl_cli.config.schema import PolicyConfig
from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.base import Policy
from wmrl_cli.sims.suites import Suite

SCRIPTED = ("expert", "random")


def build_policy(
    cfg: PolicyConfig, suite: Suite, action_dim: int, chunk_size: int, seed: int = 0
) -> Policy:
    from wmrl_cli.sims.experts import ExpertPolicy, RandomPolicy

    if cfg.name == "expert":
        return ExpertPolicy(suite, noise_std=cfg.noise_std, seed=seed)
    if cfg.name == "random":
        return RandomPolicy(action_dim, chunk_size, seed=seed)
    path = Path(cfg.name)
    if not (path / "config.json").is_file():
        raise WmrlError(
            f"unknown policy '{cfg.name}': expected expert, random or a policy checkpoint "
            "directory (with config.json)"
        )
    raise WmrlError(f"{path}: loading learned policy checkpoints is not available yet")
