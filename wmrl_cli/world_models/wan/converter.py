"""Load published Wan checkpoints into the wmrl Wan world model.

* The DiT: RLinf's `model-00001.safetensors` is a DiffSynth `WanModel` state dict (original Wan
  key names, plus RLinf's `action_mlp1.*` / `action_mlp2.*`), possibly under a `model.` prefix
  and possibly sharded with a `*.safetensors.index.json`. Keys are renamed to diffusers' names:

      time_embedding.{0,2}      -> condition_embedder.time_embedder.linear_{1,2}
      time_projection.1         -> condition_embedder.time_proj
      head.head / head.modulation -> proj_out / scale_shift_table
      blocks.N.self_attn.{q,k,v,o} -> blocks.N.attn1.{to_q,to_k,to_v,to_out.0} (cross_attn: attn2)
      blocks.N.*.norm_{q,k}     -> blocks.N.attn{1,2}.norm_{q,k}
      blocks.N.ffn.{0,2}        -> blocks.N.ffn.net.0.proj / ffn.net.2
      blocks.N.modulation       -> blocks.N.scale_shift_table
      blocks.N.norm3 <-> norm2  (the affine cross-attention norm: norm3 in Wan, norm2 in diffusers)

  `text_embedding.*` is dropped: the world model feeds actions, not text, to cross-attention.
* The VAE: `Wan2.2_VAE.pth` (original Wan layout, read with `torch.load(weights_only=True)` only)
  -> diffusers `AutoencoderKLWan` names. The Wan2.1 layout is delegated to diffusers' converter.

Missing or unexpected keys raise `WmrlError` with one line that lists them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import torch
from diffusers import AutoencoderKLWan

from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.state_dicts import (
    StateDict,
    load_into,
    load_state_dict_file,
    strip_wrapper_prefix,
)
from wmrl_cli.world_models.wan.blocks import (
    WanActionTransformer,
    WanTransformerConfig,
    wan22_vae_config,
)
from wmrl_cli.world_models.wan.model import WanWorldModel, WanWorldModelConfig

_TOP_LEVEL_RENAMES = (
    ("time_embedding.0.", "condition_embedder.time_embedder.linear_1."),
    ("time_embedding.2.", "condition_embedder.time_embedder.linear_2."),
    ("time_projection.1.", "condition_embedder.time_proj."),
    ("head.head.", "proj_out."),
)
_BLOCK_RENAMES = {
    "self_attn.q": "attn1.to_q",
    "self_attn.k": "attn1.to_k",
    "self_attn.v": "attn1.to_v",
    "self_attn.o": "attn1.to_out.0",
    "self_attn.norm_q": "attn1.norm_q",
    "self_attn.norm_k": "attn1.norm_k",
    "cross_attn.q": "attn2.to_q",
    "cross_attn.k": "attn2.to_k",
    "cross_attn.v": "attn2.to_v",
    "cross_attn.o": "attn2.to_out.0",
    "cross_attn.norm_q": "attn2.norm_q",
    "cross_attn.norm_k": "attn2.norm_k",
    "ffn.0": "ffn.net.0.proj",
    "ffn.2": "ffn.net.2",
    "norm3": "norm2",
    "norm2": "norm3",
}
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
_IGNORED_DIFFSYNTH_PREFIXES = ("text_embedding.",)


# ----------------------------------------------------------------------------------------------
# The DiT
# ----------------------------------------------------------------------------------------------


def is_diffsynth_dit(state_dict: Mapping[str, torch.Tensor]) -> bool:
    """Original Wan / DiffSynth names (as opposed to diffusers names)?"""
    return any(
        ".self_attn." in k or k.startswith(("head.", "time_embedding.", "time_projection."))
        for k in state_dict
    )


def diffsynth_to_diffusers_dit(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Rename a DiffSynth/original-Wan DiT state dict to diffusers names (see module doc).

    Keys in no known pattern keep their name (the strict load then reports them).
    """
    state_dict = strip_wrapper_prefix(state_dict)
    out: StateDict = {}
    for key, value in state_dict.items():
        if key.startswith(_IGNORED_DIFFSYNTH_PREFIXES):
            continue
        new = key
        block = _BLOCK_KEY.match(key)
        if key == "head.modulation":
            new = "scale_shift_table"
        elif re.fullmatch(r"blocks\.\d+\.modulation", key):
            new = key.replace("modulation", "scale_shift_table")
        elif block:
            index, module, leaf = block.groups()
            new = f"blocks.{index}.{_BLOCK_RENAMES.get(module, module)}.{leaf}"
        else:
            for old, renamed in _TOP_LEVEL_RENAMES:
                if key.startswith(old):
                    new = renamed + key[len(old) :]
                    break
        out[new] = value
    return out


def diffusers_to_diffsynth_dit(
    state_dict: Mapping[str, torch.Tensor], prefix: str = ""
) -> StateDict:
    """The inverse rename, for exporting a trained DiT to RLinf / DiffSynth."""
    inverse_block = {v: k for k, v in _BLOCK_RENAMES.items()}
    out: StateDict = {}
    for key, value in state_dict.items():
        new = key
        block = _BLOCK_KEY.match(key)
        if key == "scale_shift_table":
            new = "head.modulation"
        elif re.fullmatch(r"blocks\.\d+\.scale_shift_table", key):
            new = key.replace("scale_shift_table", "modulation")
        elif block:
            index, module, leaf = block.groups()
            new = f"blocks.{index}.{inverse_block.get(module, module)}.{leaf}"
        else:
            for old, renamed in _TOP_LEVEL_RENAMES:
                if key.startswith(renamed):
                    new = old + key[len(renamed) :]
                    break
        out[prefix + new] = value
    return out


def infer_transformer_config(
    state_dict: Mapping[str, torch.Tensor], attention_head_dim: int = 128
) -> WanTransformerConfig:
    """Sizes from a diffusers-named DiT state dict. The head count is not in the weights (q/k
    norms span all heads): Wan models use 128-dim heads, pass another size if yours differs."""
    try:
        patch_w = state_dict["patch_embedding.weight"]
        ffn_w = state_dict["blocks.0.ffn.net.0.proj.weight"]
        proj_w = state_dict["proj_out.weight"]
        time_w = state_dict["condition_embedder.time_embedder.linear_1.weight"]
        act_w = state_dict["action_mlp1.0.weight"]
    except KeyError as exc:
        raise WmrlError(f"cannot infer Wan DiT sizes: the checkpoint has no {exc.args[0]}") from exc
    dim = patch_w.shape[0]
    if dim % attention_head_dim:
        raise WmrlError(
            f"DiT width {dim} is not a multiple of attention_head_dim {attention_head_dim}"
        )
    patch = tuple(int(s) for s in patch_w.shape[2:])
    layers = {int(m.group(1)) for k in state_dict if (m := re.match(r"blocks\.(\d+)\.", k))}
    return WanTransformerConfig(
        patch_size=patch,  # type: ignore[arg-type]
        num_attention_heads=dim // attention_head_dim,
        attention_head_dim=attention_head_dim,
        in_channels=patch_w.shape[1],
        out_channels=proj_w.shape[0] // (patch[0] * patch[1] * patch[2]),
        freq_dim=time_w.shape[1],
        ffn_dim=ffn_w.shape[0],
        num_layers=len(layers),
        action_dim=act_w.shape[1],
        cross_attn_norm="blocks.0.norm2.weight" in state_dict,
    )


def read_dit_state_dict(path: str | Path) -> StateDict:
    """A DiT checkpoint in diffusers names, whatever names the file uses."""
    state = strip_wrapper_prefix(load_state_dict_file(path))
    return diffsynth_to_diffusers_dit(state) if is_diffsynth_dit(state) else state


def load_wan_transformer(
    path: str | Path,
    config: WanTransformerConfig | None = None,
    attention_head_dim: int = 128,
) -> WanActionTransformer:
    """Build a `WanActionTransformer` from a DiT checkpoint (sizes inferred when no config)."""
    state = read_dit_state_dict(path)
    config = config or infer_transformer_config(state, attention_head_dim)
    model = WanActionTransformer(config)
    load_into(model, state, what=f"Wan DiT {path}")
    return model


# ----------------------------------------------------------------------------------------------
# The VAE
# ----------------------------------------------------------------------------------------------

_RESNET_RENAMES = (
    ("residual.0.gamma", "norm1.gamma"),
    ("residual.2.", "conv1."),
    ("residual.3.gamma", "norm2.gamma"),
    ("residual.6.", "conv2."),
    ("shortcut.", "conv_shortcut."),
)
_VAE_TOP = re.compile(r"^(encoder|decoder)\.(conv1|head\.0|head\.2|middle\.\d+)\.(.+)$")
_VAE_STAGE = re.compile(
    r"^(encoder\.downsamples|decoder\.upsamples)\.(\d+)\.(?:down|up)samples\.(\d+)\.(.+)$"
)


_VAE_END_MODULES = {"conv_in": "conv1", "norm_out": "head.0", "conv_out": "head.2"}


def _rename_resnet(rest: str) -> str:
    for old, new in _RESNET_RENAMES:
        if rest.startswith(old):
            return new + rest[len(old) :]
    return rest


def is_wan22_vae(state_dict: Mapping[str, torch.Tensor]) -> bool:
    """The Wan2.2 layout nests residual stages (`encoder.downsamples.i.downsamples.j`)."""
    return any(_VAE_STAGE.match(k) for k in state_dict)


def original_to_diffusers_vae(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Rename an original Wan VAE state dict (Wan2.2 layout; Wan2.1 via diffusers) to diffusers."""
    state_dict = strip_wrapper_prefix(state_dict)
    if not is_wan22_vae(state_dict):
        from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

        return convert_wan_vae_to_diffusers(dict(state_dict))
    out: StateDict = {}
    for key, value in state_dict.items():
        new = key
        if key.startswith("conv1."):
            new = "quant_conv." + key[len("conv1.") :]
        elif key.startswith("conv2."):
            new = "post_quant_conv." + key[len("conv2.") :]
        elif stage := _VAE_STAGE.match(key):
            part, i, j, rest = stage.groups()
            side = "encoder.down_blocks" if part.startswith("encoder") else "decoder.up_blocks"
            if rest.startswith(("resample.", "time_conv.")):
                sampler = "downsampler" if part.startswith("encoder") else "upsampler"
                new = f"{side}.{i}.{sampler}.{rest}"
            else:
                new = f"{side}.{i}.resnets.{j}.{_rename_resnet(rest)}"
        elif top := _VAE_TOP.match(key):
            side, module, rest = top.groups()
            if module == "conv1":
                new = f"{side}.conv_in.{rest}"
            elif module == "head.0":
                new = f"{side}.norm_out.{rest}"
            elif module == "head.2":
                new = f"{side}.conv_out.{rest}"
            elif module == "middle.1":
                new = f"{side}.mid_block.attentions.0.{rest}"
            else:  # middle.0 / middle.2 are the two mid-block resnets
                index = {"middle.0": 0, "middle.2": 1}.get(module)
                if index is not None:
                    new = f"{side}.mid_block.resnets.{index}.{_rename_resnet(rest)}"
        out[new] = value
    return out


def diffusers_to_original_vae(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """The inverse rename for the Wan2.2 layout (exports a VAE trained here to Wan's format)."""
    inverse_resnet = tuple((new, old) for old, new in _RESNET_RENAMES)
    resnets_per_stage: dict[str, int] = {}
    for key in state_dict:
        if m := re.match(r"^((?:encoder\.down|decoder\.up)_blocks\.\d+)\.resnets\.(\d+)\.", key):
            resnets_per_stage[m.group(1)] = max(
                resnets_per_stage.get(m.group(1), 0), int(m.group(2)) + 1
            )

    def resnet(rest: str) -> str:
        for new, old in inverse_resnet:
            if rest.startswith(new):
                return old + rest[len(new) :]
        return rest

    out: StateDict = {}
    for key, value in state_dict.items():
        new = key
        if key.startswith("quant_conv."):
            new = "conv1." + key[len("quant_conv.") :]
        elif key.startswith("post_quant_conv."):
            new = "conv2." + key[len("post_quant_conv.") :]
        elif m := re.match(
            r"^(encoder|decoder)\.(down|up)_blocks\.(\d+)\.resnets\.(\d+)\.(.+)$", key
        ):
            side, kind, i, j, rest = m.groups()
            new = f"{side}.{kind}samples.{i}.{kind}samples.{j}.{resnet(rest)}"
        elif m := re.match(
            r"^(encoder|decoder)\.(down|up)_blocks\.(\d+)\.(?:down|up)sampler\.(.+)$", key
        ):
            side, kind, i, rest = m.groups()
            j = resnets_per_stage[f"{side}.{kind}_blocks.{i}"]
            new = f"{side}.{kind}samples.{i}.{kind}samples.{j}.{rest}"
        elif m := re.match(r"^(encoder|decoder)\.(conv_in|norm_out|conv_out)\.(.+)$", key):
            side, module, rest = m.groups()
            new = f"{side}.{_VAE_END_MODULES[module]}.{rest}"
        elif m := re.match(r"^(encoder|decoder)\.mid_block\.attentions\.0\.(.+)$", key):
            new = f"{m.group(1)}.middle.1.{m.group(2)}"
        elif m := re.match(r"^(encoder|decoder)\.mid_block\.resnets\.(\d)\.(.+)$", key):
            new = f"{m.group(1)}.middle.{2 * int(m.group(2))}.{resnet(m.group(3))}"
        out[new] = value
    return out


def read_vae_state_dict(path: str | Path) -> StateDict:
    """A Wan VAE checkpoint in diffusers names, whatever layout the file uses."""
    state = strip_wrapper_prefix(load_state_dict_file(path))
    if any(k.startswith(("encoder.downsamples.", "decoder.upsamples.", "conv1.")) for k in state):
        state = original_to_diffusers_vae(state)
    return state


def load_wan_vae(path: str | Path, vae_config: Mapping | None = None) -> AutoencoderKLWan:
    """`AutoencoderKLWan` from an original Wan VAE file (`Wan2.2_VAE.pth`) or a diffusers one."""
    vae = AutoencoderKLWan(**dict(vae_config or wan22_vae_config()))
    load_into(vae, read_vae_state_dict(path), what=f"Wan VAE {path}")
    return vae


# ----------------------------------------------------------------------------------------------
# The whole world model
# ----------------------------------------------------------------------------------------------


def load_rlinf_wan_world_model(
    dit_path: str | Path,
    vae_path: str | Path,
    config: WanWorldModelConfig | None = None,
    attention_head_dim: int = 128,
) -> WanWorldModel:
    """A `WanWorldModel` from RLinf's published files (`model-00001.safetensors`, `Wan2.2_VAE.pth`).

    Non-weight settings (256x256, 4 + 8 frames, 5 steps, shift 5, velocity output) come from
    `config` (default: the full config); transformer sizes are inferred from the DiT file.
    """
    dit_state = read_dit_state_dict(dit_path)
    base = config or WanWorldModelConfig.full()
    base = replace(
        base,
        transformer=infer_transformer_config(dit_state, attention_head_dim),
        delta_prediction=False,
    )
    state = {f"transformer.{k}": v for k, v in dit_state.items()}
    state.update({f"vae.{k}": v for k, v in read_vae_state_dict(vae_path).items()})
    return WanWorldModel.from_state_dict(
        base, state, what=f"Wan world model {dit_path} + {vae_path}"
    )
