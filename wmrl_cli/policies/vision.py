"""Vision towers (transformers DINOv2 / SigLIP), image preprocessing and the projector.

OpenVLA featurizes each image with the patch tokens of the second-to-last ViT block, before
any final norm; the towers here build exactly the blocks that feed those features, so every
parameter gets a gradient (no unused-parameter bookkeeping under DDP).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    Dinov2Config,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    SiglipVisionConfig,
    SiglipVisionModel,
)

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.config import VisionTowerConfig


class VisionTower(nn.Module):
    """One ViT: patch features [B, P, D] of its last built block, prefix tokens dropped."""

    def __init__(self, cfg: VisionTowerConfig, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        self.cfg = cfg
        common = dict(
            hidden_size=cfg.hidden_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            image_size=cfg.image_size,
            patch_size=cfg.patch_size,
            hidden_act=cfg.hidden_act,
            layer_norm_eps=cfg.layer_norm_eps,
            attn_implementation=attn_implementation,
        )
        if cfg.kind == "dinov2":
            extra = dict(
                mlp_ratio=cfg.mlp_dim // cfg.hidden_size,
                layerscale_value=cfg.layerscale_init,
                qkv_bias=True,
            )
            if cfg.num_register_tokens:
                model = Dinov2WithRegistersModel(
                    Dinov2WithRegistersConfig(
                        **common, **extra, num_register_tokens=cfg.num_register_tokens
                    )
                )
            else:
                model = Dinov2Model(Dinov2Config(**common, **extra))
            model.layernorm = nn.Identity()
            # Only used for masked-image pretraining; frozen so it never waits for a gradient.
            model.embeddings.mask_token.requires_grad_(False)
            self.num_prefix_tokens = 1 + cfg.num_register_tokens
        else:
            model = SiglipVisionModel(
                SiglipVisionConfig(**common, intermediate_size=cfg.mlp_dim, vision_use_head=False)
            )
            model.post_layernorm = nn.Identity()
            self.num_prefix_tokens = 0
        self.model = model
        # float32 whatever the weights' dtype (a bf16 tower would round 0.485 to 0.484): the
        # normalization runs in float32, as the image processors' does
        for name, values in (("mean", cfg.image_mean), ("std", cfg.image_std)):
            stat = torch.tensor(values, dtype=torch.float32).view(1, 3, 1, 1)
            self.register_buffer(name, stat, persistent=False)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """Float images in [0, 1], [B, 3, H, W] -> this tower's normalized input."""
        size = self.cfg.image_size
        if images.shape[-2:] != (size, size):
            images = F.interpolate(
                images, size=(size, size), mode="bicubic", align_corners=False, antialias=True
            ).clamp(0.0, 1.0)
        return (images.float() - self.mean.float()) / self.std.float()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.model.embeddings(pixel_values)
        if self.cfg.kind == "dinov2":
            hidden = self.model.encoder(hidden).last_hidden_state
        else:
            hidden = self.model.encoder(inputs_embeds=hidden).last_hidden_state
        return hidden[:, self.num_prefix_tokens :]


class PrismaticProjector(nn.Module):
    """Prismatic's MLP projector: fused towers fc1 (D -> 4D), fc2 (4D -> H), fc3 (H -> H) with
    GELUs between; a single tower fc1 (D -> H), fc2 (H -> H)."""

    def __init__(self, fused: bool, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
            self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
            self.fc3 = nn.Linear(llm_dim, llm_dim)
        else:
            self.fc1 = nn.Linear(vision_dim, llm_dim)
            self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        x = self.fc2(F.gelu(self.fc1(patches)))
        return self.fc3(F.gelu(x)) if self.fused else x


def images_to_tensor(images: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 [B, H, W, 3] RGB (numpy or torch) -> float [B, 3, H, W] in [0, 1] on `device`."""
    if isinstance(images, np.ndarray):
        if images.dtype != np.uint8:
            raise WmrlError(f"images must be uint8 [B,H,W,3], got dtype {images.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(images))
    elif isinstance(images, torch.Tensor):
        if images.dtype != torch.uint8:
            raise WmrlError(f"images must be uint8 [B,H,W,3], got dtype {images.dtype}")
        tensor = images
    else:
        raise WmrlError(f"images must be a numpy array or a tensor, got {type(images).__name__}")
    if tensor.ndim != 4 or tensor.shape[-1] != 3:
        raise WmrlError(f"images must be [B,H,W,3], got shape {tuple(tensor.shape)}")
    # contiguous: channels-last views hit a oneDNN convolution bug on CPU (rewards/base.py)
    return tensor.to(device).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
