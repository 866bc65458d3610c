"""The published assets wmrl knows by a short name: RLinf's and OpenVLA-OFT's Hugging Face
repos (RLinf/RLinf-Wan-LIBERO-*, RLinf/RLinf-OpenSora-LIBERO-*, Haozhan72/Openvla-oft-SFT-*).

Each asset is one Hugging Face Hub repository (or a subset of one) with the files wmrl expects
in it. The expected layouts come from the publishers' documentation; where nobody has seen the
real file list (`layout_verified=False`), a wrong guess surfaces as a layout-check error that
names the missing file instead of a failure deep inside a loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wmrl_cli.errors import ConfigError

ROLES = ("world_model", "vae", "reward_model", "reset_set", "policy", "statistics", "config")


@dataclass(frozen=True)
class AssetFile:
    """One expected file, or a glob of files, relative to the asset directory.

    Globs follow huggingface_hub's `allow_patterns` (fnmatch: `*` also crosses `/`). `exclude`
    drops matches, e.g. plain reset files must not be satisfied by `_kir` files alone.
    """

    pattern: str
    role: str
    description: str
    exclude: str | None = None
    required: bool = True

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown asset role {self.role!r} (known: {', '.join(ROLES)})")


@dataclass(frozen=True)
class Asset:
    name: str
    repo_id: str
    description: str
    files: tuple[AssetFile, ...]
    # Restricts the download to part of the repo (WMPO keeps checkpoints and data in one repo).
    subset: tuple[str, ...] | None = None
    unnorm_key: str | None = None
    suite: str | None = None
    size_hint: str | None = None
    layout_verified: bool = False
    layout_note: str = ""
    backend: str | None = None  # the world model's (wan, opensora), for assets that hold one

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.role for f in self.files))


def _wan(suite: str, reward_file: str, verified: bool, note: str) -> Asset:
    title = suite.capitalize()
    return Asset(
        name=f"wan-libero-{suite}",
        repo_id=f"RLinf/RLinf-Wan-LIBERO-{title}",
        description=f"RLinf Wan2.2 world model, VAE, reward model and reset set for LIBERO-{title}",
        suite=f"libero_{suite}",
        files=(
            AssetFile("model-00001.safetensors", "world_model", "Wan DiT with action injection"),
            AssetFile("Wan2.2_VAE.pth", "vae", "Wan2.2 VAE (z_dim 48)"),
            AssetFile(reward_file, "reward_model", "frame success classifier (ResNet-18)"),
            AssetFile(
                "dataset/traj*.npy", "reset_set", "initial frames", exclude="dataset/*_kir.npy"
            ),
            AssetFile("dataset/traj*_kir.npy", "reset_set", "KIR keyframes with context"),
        ),
        layout_verified=verified,
        layout_note=note,
        backend="wan",
    )


def _opensora(suite: str) -> Asset:
    title = suite.capitalize()
    return Asset(
        name=f"opensora-libero-{suite}",
        repo_id=f"RLinf/RLinf-OpenSora-LIBERO-{title}",
        description=f"RLinf OpenSora world model, VAE, reward model, reset set: LIBERO-{title}",
        suite=f"libero_{suite}",
        files=(
            AssetFile("config.json", "config", "STDiT3 world-model config"),
            AssetFile("model-00001.safetensors", "world_model", "STDiT3-XL/2 weights"),
            AssetFile("model.safetensors.index.json", "world_model", "weight shard index"),
            AssetFile("vae/*", "vae", "SDXL VAE directory"),
            AssetFile("resnet_rm.pth", "reward_model", "frame success classifier (ResNet-18)"),
            AssetFile("dataset_statistics.json", "statistics", "action q01/q99 for normalization"),
            AssetFile("dataset/traj*.npy", "reset_set", "initial frames"),
        ),
        layout_verified=False,
        layout_note=(
            "tree from RLinf's OpenSora doc; the same doc's config points at "
            "best_wm_ckpt/base_policy/ and dataset_for_rlinf_world_model_init/ instead, "
            "and the contents of vae/ are not documented"
        ),
        backend="opensora",
    )


_POLICY_NOTE = (
    "file names follow OpenVLA-OFT's prismatic checkpoints (config.json, model*.safetensors, "
    "dataset_statistics.json, tokenizer); not checked against the published repo"
)


def _policy(name: str, repo_id: str, unnorm_key: str, suite: str, description: str) -> Asset:
    return Asset(
        name=name,
        repo_id=repo_id,
        description=description,
        unnorm_key=unnorm_key,
        suite=suite,
        files=(
            AssetFile("config.json", "config", "prismatic OpenVLA-OFT config"),
            AssetFile("model*.safetensors", "policy", "weights (possibly sharded)"),
            AssetFile("dataset_statistics.json", "statistics", f"unnorm key {unnorm_key}"),
            AssetFile("tokenizer.*", "policy", "Llama-2 tokenizer (tokenizer.model or .json)"),
        ),
        layout_verified=False,
        layout_note=_POLICY_NOTE,
    )


def _sft(suite: str, repo_suffix: str) -> Asset:
    return _policy(
        f"openvla-oft-libero{'' if suite == '10' else '-'}{suite}-traj1",
        f"Haozhan72/Openvla-oft-SFT-libero{repo_suffix}-traj1",
        f"libero_{suite}_no_noops",
        f"libero_{suite}",
        f"OpenVLA-OFT SFT policy, 1 demo per task, LIBERO-{suite.capitalize()}",
    )


_WMPO_TASKS = "coffee, square, stack_three, three_piece_assembly"

ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        _wan("spatial", "resnet_rm.pth", True, "tree published in RLinf's Wan doc"),
        _wan(
            "object",
            "resnet_rm.pth",
            False,
            "assumed identical to RLinf-Wan-LIBERO-Spatial (only that tree is published)",
        ),
        _wan(
            "goal",
            "taskemb_resnet_rm.pth",
            False,
            "assumed identical to RLinf-Wan-LIBERO-Spatial, with a task-embedding reward model",
        ),
        _opensora("spatial"),
        _opensora("object"),
        _sft("spatial", "-spatial"),
        _sft("object", "-object"),
        _sft("goal", "-goal"),
        _sft("10", "10"),
        _policy(
            "openvla-oft-libero90-base-lora",
            "RLinf/RLinf-OpenVLAOFT-LIBERO-90-Base-Lora",
            "libero_90_no_noops_trajall",
            "libero_90",
            "RLinf OpenVLA-OFT base for LoRA RL, trained on LIBERO-90",
        ),
        _policy(
            "openvla-oft-libero130-base-lora",
            "RLinf/RLinf-OpenVLAOFT-LIBERO-130-Base-Lora",
            "libero_130_no_noops_trajall",
            "libero_130",
            "RLinf OpenVLA-OFT base for LoRA RL, trained on LIBERO-130",
        ),
        Asset(
            name="wmpo-checkpoints",
            repo_id="fangqi/WMPO",
            description=f"WMPO MimicGen checkpoints ({_WMPO_TASKS}): policies, world models, "
            "VideoMAE reward models",
            subset=("checkpoint_files/*",),
            size_hint="364 GiB",
            files=(
                AssetFile(
                    "checkpoint_files/reward_models/videomae_*.pth", "reward_model", "VideoMAE"
                ),
                AssetFile("checkpoint_files/SFT_models/*", "policy", "SFT base policies"),
                AssetFile("checkpoint_files/WMPO_models/*", "policy", "WMPO-trained policies"),
                AssetFile(
                    "checkpoint_files/world_models/OpenSora-STDiT-v3/*",
                    "world_model",
                    "OpenSora STDiT-v3 initialization",
                ),
                AssetFile(
                    "checkpoint_files/world_models/OpenX_pretrained/*",
                    "world_model",
                    "OXE-pretrained world model",
                ),
                AssetFile("checkpoint_files/world_models/vae/*", "vae", "shared VAE"),
            ),
            layout_note="folder tree from WMPO's README; file names inside folders unknown",
        ),
        Asset(
            name="wmpo-data",
            repo_id="fangqi/WMPO",
            description=f"WMPO MimicGen training data ({_WMPO_TASKS}) and statistics",
            subset=("data_files/*",),
            size_hint="530 GiB",
            files=(
                AssetFile("data_files/statistics/*", "statistics", "unnormalization keys per task"),
            ),
            layout_note="only data_files/statistics is documented (WMPO README)",
        ),
    )
}


def list_assets() -> list[Asset]:
    return list(ASSETS.values())


def get_asset(name: str) -> Asset:
    try:
        return ASSETS[name]
    except KeyError:
        raise ConfigError(f"unknown asset '{name}'; known assets: {', '.join(ASSETS)}") from None


# The Hub's rule for a repo id: OWNER/NAME of letters, digits, '-', '_' and '.', no '--' or '..'.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        raise ConfigError(
            f"'{repo_id}' is not a Hub repo id: OWNER/NAME (letters, digits, '-', '_', '.')"
        )
    return repo_id


def download_target(name: str) -> Asset:
    """What `wmrl download NAME` fetches: a published asset by its name, or any Hub repo by its
    id OWNER/NAME (a model `wmrl push` made, say) as an asset of no expected files, which goes
    to DIR/OWNER/NAME."""
    if name in ASSETS or "/" not in name:
        return get_asset(name)
    return Asset(
        name=check_repo_id(name),
        repo_id=name,
        description=f"the Hub repository {name}",
        files=(),
        layout_verified=True,
    )
