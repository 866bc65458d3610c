"""Build the policy named in the config: `expert`, `random`, a checkpoint directory, or the
name of a published policy asset (`wmrl download --list`).

A checkpoint directory is a policy directory (config.json + model.safetensors, wmrl or
published prismatic layout) or a run directory holding one under `policy/`. An asset name
resolves to its download directory (`assets_dir`) and brings its unnorm key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from wmrl_cli.config.schema import PolicyConfig
from wmrl_cli.envs.interface import Obs, Policy, PolicyOutput
from wmrl_cli.errors import WmrlError
from wmrl_cli.sims.suites import Suite

SCRIPTED = ("expert", "random")


def resolve_policy_dir(name: str) -> Path | None:
    """The checkpoint directory `name` refers to, or None if it is not one."""
    path = Path(name)
    for candidate in (path, path / "policy"):
        if (candidate / "config.json").is_file():
            return candidate
    return None


class LearnedPolicy:
    """Adapts an OpenVLA-OFT model to the Policy interface for rollouts and evaluation."""

    def __init__(self, model, top_k: int | None = None, seed: int = 0) -> None:
        self.model = model.eval()
        self.name = str(getattr(model, "name", "openvla-oft"))
        self.chunk_size = int(model.chunk_size)
        self.top_k = top_k
        self.seed = seed
        self.generator = torch.Generator(device=model.device).manual_seed(seed)

    def start_episodes(self, init_ids: list[int]) -> None:
        """A batch's sampling seeded by the run's seed and its first episode: its actions do
        not depend on which batches ran before it (an evaluation spread over ranks makes the
        episodes one rank makes)."""
        self.generator.manual_seed(self.seed * 1_000_003 + int(init_ids[0]))

    @torch.no_grad()
    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.6) -> PolicyOutput:
        out = self.model.act(
            obs.images,
            obs.instructions,
            sample=sample,
            temperature=temperature,
            top_k=self.top_k,
            generator=self.generator,
        )
        out.actions = np.asarray(out.actions, dtype=np.float32)
        return out


def resolve_policy_source(
    name: str, assets_dir: str | Path | None = None
) -> tuple[str, str | None]:
    """(the path to load, its unnorm key): a published policy asset's download directory
    (checked to be complete) and the asset's key; anything else as it is, with no key."""
    from wmrl_cli.assets.layout import asset_path
    from wmrl_cli.assets.registry import ASSETS

    asset = ASSETS.get(name)
    if asset is None or asset.unnorm_key is None:
        return name, None
    return str(asset_path(name, assets_dir)), asset.unnorm_key


def load_learned_policy(
    path: str | Path,
    top_k: int | None = None,
    seed: int = 0,
    device: str | None = None,
    assets_dir: str | Path | None = None,
) -> LearnedPolicy:
    """A checkpoint, run directory or policy asset name as a `LearnedPolicy`."""
    from wmrl_cli.policies.checkpoint import from_pretrained

    source, unnorm_key = resolve_policy_source(str(path), assets_dir)
    directory = resolve_policy_dir(source)
    if directory is None:
        raise WmrlError(f"{path}: no policy checkpoint (config.json) here or in {path}/policy")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = from_pretrained(directory, device=device, unnorm_key=unnorm_key)
    policy = LearnedPolicy(model, top_k=top_k, seed=seed)
    policy.name = Path(path).name or policy.name
    return policy


def build_policy(
    cfg: PolicyConfig,
    suite: Suite,
    action_dim: int,
    chunk_size: int,
    seed: int = 0,
    assets_dir: str | Path | None = None,
) -> Policy:
    from wmrl_cli.sims.experts import ExpertPolicy, RandomPolicy

    if cfg.name == "expert":
        return ExpertPolicy(suite, noise_std=cfg.noise_std, seed=seed)
    if cfg.name == "random":
        return RandomPolicy(action_dim, chunk_size, seed=seed)
    if resolve_policy_dir(resolve_policy_source(cfg.name, assets_dir)[0]) is None:
        raise WmrlError(
            f"unknown policy '{cfg.name}': expected expert, random, a policy checkpoint "
            "directory (with config.json, or a run directory with policy/config.json) or a "
            "policy asset name (wmrl download --list)"
        )
    policy = load_learned_policy(cfg.name, top_k=cfg.top_k, seed=seed, assets_dir=assets_dir)
    if policy.model.config.action_dim != action_dim:
        raise WmrlError(
            f"{cfg.name}: the policy acts in {policy.model.config.action_dim} "
            f"dimensions, the simulator expects {action_dim}"
        )
    return policy


def _trained_setting(name: str, policy: LearnedPolicy) -> dict[str, object]:
    """Suite, image size and chunk size a learned policy was trained with: from the config.yaml
    of the wmrl run that holds it, else what its checkpoint says (chunk size, the suites of
    its action statistics)."""
    import yaml

    config = policy.model.config
    setting: dict[str, object] = {"chunk size": int(config.chunk_len)}
    directory = resolve_policy_dir(name)
    for run in (Path(name), directory.parent if directory is not None else None):
        if run is not None and (run / "config.yaml").is_file():
            try:
                sim = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("simulator")
            except yaml.YAMLError:
                sim = None
            if isinstance(sim, dict):
                setting.update({"suite": sim.get("suite"), "image size": sim.get("image_size")})
                return {k: v for k, v in setting.items() if v is not None}
    stats = getattr(policy.model, "norm_stats", None) or {}
    if len(stats) == 1:
        setting["suite"] = next(iter(stats))
    return setting


def policy_mismatches(
    name: str, policy: Policy, suite: str, image_size: int, chunk_size: int
) -> str | None:
    """A one-line warning when a learned policy is run on a suite, image size or chunk size
    other than its own (None when they agree, or for scripted policies)."""
    if not isinstance(policy, LearnedPolicy):
        return None
    trained = _trained_setting(name, policy)
    now = {"suite": suite, "image size": image_size, "chunk size": chunk_size}
    differ = []
    for key, value in trained.items():
        # a published policy's statistics key names its suite and variant (libero_spatial_...)
        same = value == now[key] or (key == "suite" and str(value).startswith(f"{suite}_"))
        if not same:
            differ.append(f"{key} {value} (trained) vs {now[key]} (now)")
    if not differ:
        return None
    return f"warning: {name} was trained with another setting than it is run with: " + ", ".join(
        differ
    )
