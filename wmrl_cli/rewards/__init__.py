"""Reward models that decide success inside the imagined env: RLinf's ResNet classifiers and
WMPO's VideoMAE clip classifier, a success head on a world model's latents, their safe loading
and threshold calibration."""

from wmrl_cli.rewards.base import RewardModel
from wmrl_cli.rewards.calibration import BinaryMetrics, best_f1_threshold, binary_metrics
from wmrl_cli.rewards.latent import LatentRewConfig, LatentRewModel
from wmrl_cli.rewards.loading import (
    load_reward_model,
    load_reward_pth,
    safe_torch_load,
    save_reward_model,
)
from wmrl_cli.rewards.resnet import (
    ResnetRewConfig,
    ResnetRewModel,
    TaskEmbedResnetRewModel,
    build_resnet_reward_model,
)
from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig

__all__ = [
    "BinaryMetrics",
    "LatentRewConfig",
    "LatentRewModel",
    "ResnetRewConfig",
    "ResnetRewModel",
    "RewardModel",
    "TaskEmbedResnetRewModel",
    "VideoMAERewConfig",
    "VideoMAERewardModel",
    "best_f1_threshold",
    "binary_metrics",
    "build_resnet_reward_model",
    "load_reward_model",
    "load_reward_pth",
    "safe_torch_load",
    "save_reward_model",
]
