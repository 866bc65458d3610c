"""Frame-level success classifiers of RLinf's world-model envs: ResnetRewModel and
TaskEmbedResnetRewModel (RLinf's `rlinf/models/embodiment/reward/`, its `resnet_rm.pth` files).

Both use the ResNet-18 of "Dive into Deep Learning" that RLinf's reward models are built from,
with its module names, so that RLinf's `resnet_rm.pth` / `taskemb_resnet_rm.pth` state dicts
load without renaming. It differs from torchvision's resnet18: the convolutions have biases,
and a stage's first block shortcuts through a bare strided 1x1 convolution (`conv3`, no
BatchNorm) instead of torchvision's `downsample` conv + BatchNorm.

    trunk   stem: Conv7x7/2 (3 -> w), BN, ReLU, MaxPool3x3/2
            stages of `blocks` Residuals: w, 2w, 4w, 8w channels (stride 2 from the 2nd stage)
            AdaptiveAvgPool(1), Flatten                      -> 8w features (512 at w = 64)
    plain   net = [trunk..., Linear(8w, 1)]                  -> sigmoid
    task    visual_encoder = trunk; task_embedding = Embedding(num_tasks, e)
            fusion_layer = Linear(8w + e, hidden), ReLU, Dropout, Linear(hidden, 1) -> sigmoid

Input frames are scaled to [-1, 1] ((x / 255 - 0.5) / 0.5, then clamped) at the env's
resolution (RLinf: 256x256, no resize), as RLinf's envs feed them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.base import FrameRewardModel, check_task_ids, to_unit_range


@dataclass
class ResnetRewConfig:
    """Sizes of both ResNet reward models. The defaults are RLinf's (ResNet-18, width 64);
    a tiny CPU configuration only lowers `width`.

    task_embedding selects TaskEmbedResnetRewModel; num_tasks, task_embed_dim, hidden_dim and
    dropout only apply to it. image_size resizes frames to a square before scoring (None keeps
    the env's resolution). threshold is the calibrated success threshold, if any.
    """

    width: int = 64
    blocks: int = 2
    task_embedding: bool = False
    num_tasks: int = 10
    task_embed_dim: int = 64
    hidden_dim: int = 256
    dropout: float = 0.1
    image_size: int | None = None
    threshold: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def kind(self) -> str:
        return "taskemb_resnet" if self.task_embedding else "resnet"

    @property
    def feature_dim(self) -> int:
        return 8 * self.width


class Residual(nn.Module):
    """Basic residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), where the
    shortcut is the identity or, when the shape changes, the strided 1x1 conv `conv3`."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.conv3 = (
            nn.Conv2d(in_channels, out_channels, 1, stride=stride)
            if stride != 1 or in_channels != out_channels
            else None
        )
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x if self.conv3 is None else self.conv3(x)
        return F.relu(y + shortcut)


def resnet_trunk(width: int, blocks: int) -> list[nn.Module]:
    """The 7 trunk modules, in the order that fixes the state-dict indices 0..6."""
    stem = nn.Sequential(
        nn.Conv2d(3, width, 7, stride=2, padding=3),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    )
    stages = []
    in_ch = width
    for i in range(4):
        out_ch = width * 2**i
        stride = 1 if i == 0 else 2
        layers = [Residual(in_ch, out_ch, stride)]
        layers += [Residual(out_ch, out_ch) for _ in range(blocks - 1)]
        stages.append(nn.Sequential(*layers))
        in_ch = out_ch
    return [stem, *stages, nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten()]


class _ResnetRewardBase(FrameRewardModel):
    """The preprocessing the two ResNet reward models share (scoring: base.FrameRewardModel)."""

    config: ResnetRewConfig

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [N,H,W,3] -> float [N,3,H,W] in [-1,1] at `image_size`."""
        x = to_unit_range(frames) * 2.0 - 1.0
        size = self.config.image_size
        if size is not None and x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        return x.clamp(-1.0, 1.0)


class ResnetRewModel(_ResnetRewardBase):
    """RLinf's ResnetRewModel: ResNet trunk -> Linear(8w, 1) -> sigmoid; ignores task ids."""

    def __init__(self, config: ResnetRewConfig | None = None) -> None:
        super().__init__()
        self.config = config or ResnetRewConfig()
        if self.config.task_embedding:
            raise WmrlError("ResnetRewModel takes no task embedding; use TaskEmbedResnetRewModel")
        trunk = resnet_trunk(self.config.width, self.config.blocks)
        self.net = nn.Sequential(*trunk, nn.Linear(self.config.feature_dim, 1))

    def logits(self, images: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(images).squeeze(-1)


class TaskEmbedResnetRewModel(_ResnetRewardBase):
    """RLinf's TaskEmbedResnetRewModel: concat(trunk features, task embedding) -> MLP -> sigmoid."""

    def __init__(self, config: ResnetRewConfig | None = None) -> None:
        super().__init__()
        self.config = config or ResnetRewConfig(task_embedding=True)
        if not self.config.task_embedding:
            raise WmrlError("TaskEmbedResnetRewModel needs a config with task_embedding=True")
        c = self.config
        self.visual_encoder = nn.Sequential(*resnet_trunk(c.width, c.blocks))
        self.task_embedding = nn.Embedding(c.num_tasks, c.task_embed_dim)
        self.fusion_layer = nn.Sequential(
            nn.Linear(c.feature_dim + c.task_embed_dim, c.hidden_dim),
            nn.ReLU(),
            nn.Dropout(c.dropout),
            nn.Linear(c.hidden_dim, 1),
        )

    def logits(self, images: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        task_ids = check_task_ids(task_ids, self.config.num_tasks)
        features = torch.cat([self.visual_encoder(images), self.task_embedding(task_ids)], dim=1)
        return self.fusion_layer(features).squeeze(-1)


def build_resnet_reward_model(
    config: ResnetRewConfig,
) -> ResnetRewModel | TaskEmbedResnetRewModel:
    """The ResNet reward model class that `config` describes."""
    if config.task_embedding:
        return TaskEmbedResnetRewModel(config)
    return ResnetRewModel(config)


def rlinf_task_ids(instructions: list[str]) -> list[int]:
    """RLinf's TaskEmbedResnetRewModel id of each task, for a suite's instructions in the
    benchmark's order. RLinf maps an instruction to its task id through its own per-suite
    dictionaries (`instruction_to_task_id` in its DiffSynth fork's reward_model.py), which list
    every suite's tasks in the alphabetical order of their instructions; the published
    `taskemb_resnet_rm.pth` was trained with those ids, not the benchmark's."""
    ranked = sorted(instructions)
    return [ranked.index(text) for text in instructions]


def reorder_task_rows(model: TaskEmbedResnetRewModel, order: list[int], to_benchmark: bool) -> None:
    """Move the task-embedding rows from RLinf's order into the benchmark's (`to_benchmark`),
    or back: benchmark row t is RLinf's row order[t]."""
    weight = model.task_embedding.weight
    if weight.shape[0] != len(order):
        raise WmrlError(
            f"the task-embedding reward model has {weight.shape[0]} task rows, the suite "
            f"{len(order)} tasks: their order cannot be matched"
        )
    with torch.no_grad():
        if to_benchmark:
            weight.copy_(weight[order].clone())
        else:
            rows = torch.empty_like(weight)
            rows[order] = weight
            weight.copy_(rows)
