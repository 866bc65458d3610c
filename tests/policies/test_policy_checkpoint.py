"""wmrl policy checkpoints and LoRA adapters: save -> load gives identical outputs."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.checkpoint import from_pretrained, save_pretrained
from wmrl_cli.policies.config import tiny_config
from wmrl_cli.policies.lora import (
    apply_lora,
    load_lora_adapter,
    lora_active,
    merge_lora,
    save_lora_adapter,
)
from wmrl_cli.policies.normalization import compute_statistics
from wmrl_cli.policies.openvla_oft import OpenVLAOFT
from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

INSTRUCTIONS = ["pick up the red block", "open the drawer", "push the green button"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def tiny_policy(value_head: bool = True) -> OpenVLAOFT:
    torch.manual_seed(0)
    tok = build_word_tokenizer(INSTRUCTIONS)
    cfg = tiny_config(len(tok), value_head=value_head, llm_layers=2)
    acts = np.random.default_rng(0).normal(size=(300, 7))
    stats = {"mw_no_noops": compute_statistics(acts, mask=[True] * 6 + [False])}
    cfg.unnorm_key = "mw"
    return OpenVLAOFT(cfg, tok, stats).eval()


def batch(n: int = 3) -> tuple[np.ndarray, list[str]]:
    images = np.random.default_rng(7).integers(0, 256, size=(n, 64, 64, 3), dtype=np.uint8)
    return images, [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(n)]


def _perturb_lora(policy: OpenVLAOFT) -> None:
    # Fresh adapters are the identity (B = 0); give them weight so the test means something.
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)


def test_save_pretrained_round_trip(tmp_path):
    policy = tiny_policy()
    images, instructions = batch()
    target = tmp_path / "ckpt"
    save_pretrained(policy, target)
    files = {p.name for p in target.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "dataset_statistics.json",
        "tokenizer.json",
    } <= files
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
    loaded = from_pretrained(target).eval()
    assert loaded.config == policy.config
    assert loaded.norm_stats == json.loads((target / "dataset_statistics.json").read_text())
    a = policy.act(images, instructions, sample=False)
    b = loaded.act(images, instructions, sample=False)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    np.testing.assert_array_equal(a.values, b.values)
    # Overwriting an existing checkpoint goes through the same atomic swap.
    save_pretrained(loaded, target)
    assert {p.name for p in tmp_path.iterdir()} == {"ckpt"}


def test_lora_adapter_save_load_is_exact(tmp_path):
    policy = tiny_policy()
    base_dir = tmp_path / "base"
    save_pretrained(policy, base_dir)
    apply_lora(policy)
    assert lora_active(policy)
    assert not any(p.requires_grad for p in policy.vision_towers.parameters())
    assert not policy.llm().model.embed_tokens.weight.requires_grad
    _perturb_lora(policy)
    images, instructions = batch()
    expected = policy(images, instructions).logits
    save_lora_adapter(policy, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()

    fresh = from_pretrained(base_dir).eval()
    load_lora_adapter(fresh, tmp_path / "adapter")
    torch.testing.assert_close(fresh(images, instructions).logits, expected, atol=0, rtol=0)

    # A full checkpoint of a LoRA policy carries the adapter along.
    save_pretrained(policy, tmp_path / "with_lora")
    again = from_pretrained(tmp_path / "with_lora").eval()
    assert lora_active(again) and again.config.lora == policy.config.lora
    torch.testing.assert_close(again(images, instructions).logits, expected, atol=0, rtol=0)

    merge_lora(policy)
    assert not lora_active(policy) and policy.config.lora is None
    torch.testing.assert_close(policy(images, instructions).logits, expected, atol=1e-5, rtol=0)


def test_missing_key_in_a_wmrl_checkpoint(tmp_path):
    policy = tiny_policy()
    save_pretrained(policy, tmp_path / "ckpt")
    weights = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    del weights["projector.fc2.weight"]
    save_file(weights, str(tmp_path / "ckpt" / "model.safetensors"))
    with pytest.raises(WmrlError) as err:
        from_pretrained(tmp_path / "ckpt")
    assert "missing keys: projector.fc2.weight" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_directory_errors(tmp_path):
    with pytest.raises(WmrlError, match="no config.json"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(WmrlError, match="neither"):
        from_pretrained(tmp_path)


def test_single_tower_policy_round_trip(tmp_path):
    tok = build_word_tokenizer(INSTRUCTIONS)
    cfg = tiny_config(len(tok), fused=False, llm_layers=1)
    stats = {"mw": compute_statistics(np.random.default_rng(0).normal(size=(50, 7)))}
    policy = OpenVLAOFT(cfg, tok, stats).eval()
    assert not hasattr(policy.projector, "fc3")
    images, instructions = batch(2)
    save_pretrained(policy, tmp_path / "single")
    loaded = from_pretrained(tmp_path / "single").eval()
    torch.testing.assert_close(
        loaded(images, instructions).logits, policy(images, instructions).logits, atol=0, rtol=0
    )
