"""LoRA on the policy's language model (peft): apply, save/load adapters, merge for export.

Only the Llama gets adapters (rank, alpha, dropout and target modules from `LoraSpec`); its
base weights freeze, the vision towers freeze by default, and the projector and value head
stay trainable.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.config import LoraSpec
from wmrl_cli.policies.openvla_oft import OpenVLAOFT

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    # peft still calls transformers APIs that v5 deprecates; the warnings are not ours to fix.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def lora_active(model: OpenVLAOFT) -> bool:
    return isinstance(model.language_model, PeftModel)


def apply_lora(model: OpenVLAOFT, spec: LoraSpec | None = None, freeze_vision: bool = True) -> None:
    """Wrap the language model with fresh LoRA adapters (spec defaults to `config.lora`)."""
    if lora_active(model):
        raise WmrlError("LoRA is already applied to this policy")
    spec = spec or model.config.lora or LoraSpec()
    peft_config = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        bias="none",
    )
    try:
        with _quiet_peft():
            model.language_model = get_peft_model(model.language_model, peft_config)
    except ValueError as exc:
        raise WmrlError(f"cannot apply LoRA: {str(exc).splitlines()[0]}") from None
    model.config.lora = spec
    if freeze_vision:
        model.vision_towers.requires_grad_(False)


def save_lora_adapter(model: OpenVLAOFT, directory: str | Path) -> Path:
    """Write adapter_config.json + adapter_model.safetensors (adapter weights only)."""
    if not lora_active(model):
        raise WmrlError("the policy has no LoRA adapters to save")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_peft():
        model.language_model.save_pretrained(str(out), safe_serialization=True)
    return out


def load_lora_adapter(model: OpenVLAOFT, directory: str | Path) -> None:
    """Load adapters saved by `save_lora_adapter` (applying LoRA first if needed)."""
    src = Path(directory)
    if not (src / ADAPTER_CONFIG).is_file() or not (src / ADAPTER_WEIGHTS).is_file():
        raise WmrlError(f"{src}: expected {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}")
    saved = json.loads((src / ADAPTER_CONFIG).read_text())
    spec = LoraSpec(
        rank=saved["r"],
        alpha=saved["lora_alpha"],
        dropout=saved.get("lora_dropout", 0.0),
        target_modules=sorted(saved["target_modules"]),
    )
    if not lora_active(model):
        apply_lora(model, spec, freeze_vision=False)
    weights = load_file(str(src / ADAPTER_WEIGHTS), device=str(model.device))
    result = set_peft_model_state_dict(model.language_model, weights)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        bad = missing + list(result.unexpected_keys)
        raise WmrlError(f"{src}: adapter does not fit this policy ({_short(bad)})")


def merge_lora(model: OpenVLAOFT) -> None:
    """Fold the adapters into the Llama weights (for export); the policy is plain afterwards."""
    if not lora_active(model):
        raise WmrlError("the policy has no LoRA adapters to merge")
    with _quiet_peft():
        model.language_model = model.language_model.merge_and_unload()
    model.config.lora = None


def _short(keys: list[str], limit: int = 5) -> str:
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
