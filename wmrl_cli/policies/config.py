"""Configuration of the OpenVLA-OFT family: one schema for every size.

`tiny_config` trains on a 2-core CPU; `full_config` has openvla-7b's sizes (DINOv2 ViT-L/14
with 4 registers + SigLIP SO400M/14 at 224 px, Llama-2-7B). Both build the same class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wmrl_cli.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)
LLAMA_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class VisionTowerConfig(_Strict):
    """One ViT. `num_layers` counts the blocks that run: OpenVLA reads the output of the
    second-to-last block of the pretrained ViT, so this is the pretrained depth minus one
    (the last block and the final norm/pooling head are never built)."""

    kind: Literal["dinov2", "siglip"]
    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    mlp_dim: int = Field(gt=0)
    num_register_tokens: int = Field(0, ge=0)
    layerscale_init: float = 1e-5
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    image_mean: tuple[float, float, float] = IMAGENET_MEAN
    image_std: tuple[float, float, float] = IMAGENET_STD
    timm_id: str | None = Field(None, description="the timm model this tower mirrors, if any")

    @model_validator(mode="after")
    def _check(self) -> VisionTowerConfig:
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} not a multiple of {self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.num_heads}")
        if self.kind == "dinov2" and self.mlp_dim % self.hidden_size:
            raise ValueError("dinov2 towers need mlp_dim to be a multiple of hidden_size")
        if self.kind == "siglip" and self.num_register_tokens:
            raise ValueError("siglip towers have no register tokens")
        return self

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class LlamaSpec(_Strict):
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    embedding_size: int = Field(gt=0, description="rows of the embedding and LM head (padded)")


class LoraSpec(_Strict):
    rank: int = Field(32, ge=1)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(
        default_factory=lambda: list(LLAMA_LORA_TARGETS), validate_default=True
    )

    @field_validator("target_modules")
    @classmethod
    def _as_set(cls, value: list[str]) -> list[str]:
        # A set in peft; kept sorted so saved and reloaded specs compare equal.
        if not value:
            raise ValueError("LoRA needs at least one target module")
        return sorted(set(value))


class OpenVLAOFTConfig(_Strict):
    name: str = "custom"
    vision: list[VisionTowerConfig] = Field(min_length=1, max_length=2)
    llm: LlamaSpec
    vocab_size: int = Field(gt=256, description="action tokens are the 256 ids below this")
    n_action_bins: Literal[256] = 256
    chunk_len: int = Field(8, ge=1)
    action_dim: int = Field(7, ge=1)
    bos_token_id: int = 1
    stop_token_id: int = 2
    pad_token_id: int = 3
    prompt_suffix_token_id: int | None = None
    # prefix_causal: causal over the prompt, the action block (and stop token) attends to the
    # whole prompt and bidirectionally to itself. bidirectional: every token sees every token,
    # as the published OpenVLA-OFT checkpoints were trained (their patched Llama drops the
    # causal mask altogether).
    attention: Literal["prefix_causal", "bidirectional"] = "prefix_causal"
    value_head: bool = False
    value_hidden_size: int = Field(256, gt=0)
    lora: LoraSpec | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    unnorm_key: str | None = None

    @model_validator(mode="after")
    def _check(self) -> OpenVLAOFTConfig:
        rows = self.llm.embedding_size
        if self.vocab_size > rows:
            raise ValueError(f"vocab_size {self.vocab_size} exceeds the LM's {rows} embeddings")
        for name in ("bos_token_id", "stop_token_id", "pad_token_id"):
            tid = getattr(self, name)
            if not 0 <= tid < rows:
                raise ValueError(f"{name} {tid} outside the LM's {rows} embeddings")
            if self.vocab_size - self.n_action_bins <= tid < self.vocab_size:
                raise ValueError(f"{name} {tid} collides with the action tokens")
        if len({v.num_patches for v in self.vision}) != 1:
            raise ValueError("fused vision towers must give the same number of patches")
        return self

    @property
    def num_action_tokens(self) -> int:
        return self.chunk_len * self.action_dim

    @property
    def num_patches(self) -> int:
        return self.vision[0].num_patches

    @property
    def fused(self) -> bool:
        return len(self.vision) == 2

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpenVLAOFTConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "policy config"
            raise ConfigError(f"policy config: {where}: {err['msg']}") from None


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def tiny_config(
    text_vocab_size: int,
    *,
    chunk_len: int = 8,
    action_dim: int = 7,
    image_size: int = 64,
    patch_size: int = 8,
    vision_hidden: int = 64,
    vision_layers: int = 2,
    llm_hidden: int = 128,
    llm_layers: int = 3,
    value_head: bool = False,
    fused: bool = True,
) -> OpenVLAOFTConfig:
    """A CPU-sized member of the family. The 256 action tokens sit on top of the text vocab
    (ids text_vocab_size .. text_vocab_size + 255), so "the last 256 ids" holds as in Llama."""
    heads = max(1, vision_hidden // 16)
    dino = VisionTowerConfig(
        kind="dinov2",
        image_size=image_size,
        patch_size=patch_size,
        hidden_size=vision_hidden,
        num_layers=vision_layers,
        num_heads=heads,
        mlp_dim=4 * vision_hidden,
        num_register_tokens=4,
        image_mean=IMAGENET_MEAN,
        image_std=IMAGENET_STD,
    )
    towers = [dino]
    if fused:
        towers.append(
            dino.model_copy(
                update={
                    "kind": "siglip",
                    "num_register_tokens": 0,
                    "image_mean": SIGLIP_MEAN,
                    "image_std": SIGLIP_STD,
                }
            )
        )
    vocab = text_vocab_size + 256
    return OpenVLAOFTConfig(
        name="tiny",
        vision=towers,
        llm=LlamaSpec(
            hidden_size=llm_hidden,
            intermediate_size=_round_up(int(llm_hidden * 8 / 3), 8),
            num_layers=llm_layers,
            num_heads=max(1, llm_hidden // 32),
            max_position_embeddings=1024,
            embedding_size=_round_up(vocab, 64),
        ),
        vocab_size=vocab,
        chunk_len=chunk_len,
        action_dim=action_dim,
        value_head=value_head,
        value_hidden_size=llm_hidden,
    )


def full_config(*, value_head: bool = False, lora: LoraSpec | None = None) -> OpenVLAOFTConfig:
    """openvla-7b's sizes with the LIBERO chunking of OpenVLA-OFT (8 x 7)."""
    return OpenVLAOFTConfig(
        name="full",
        vision=[
            VisionTowerConfig(
                kind="dinov2",
                image_size=224,
                patch_size=14,
                hidden_size=1024,
                num_layers=23,  # of 24
                num_heads=16,
                mlp_dim=4096,
                num_register_tokens=4,
                image_mean=IMAGENET_MEAN,
                image_std=IMAGENET_STD,
                timm_id="vit_large_patch14_reg4_dinov2.lvd142m",
            ),
            VisionTowerConfig(
                kind="siglip",
                image_size=224,
                patch_size=14,
                hidden_size=1152,
                num_layers=26,  # of 27
                num_heads=16,
                mlp_dim=4304,
                hidden_act="gelu",  # timm's default nn.GELU (OpenVLA overrides no activation)
                image_mean=SIGLIP_MEAN,
                image_std=SIGLIP_STD,
                timm_id="vit_so400m_patch14_siglip_224",
            ),
        ],
        llm=LlamaSpec(
            hidden_size=4096,
            intermediate_size=11008,
            num_layers=32,
            num_heads=32,
            rms_norm_eps=1e-6,  # LlamaConfig's default, which openvla-7b's text_config keeps
            max_position_embeddings=2048,
            embedding_size=32064,
        ),
        vocab_size=32000,
        bos_token_id=1,
        stop_token_id=2,
        pad_token_id=32000,
        prompt_suffix_token_id=29871,
        attention="bidirectional",
        value_head=value_head,
        value_hidden_size=1024,
        lora=lora,
        dtype="bfloat16",
    )
