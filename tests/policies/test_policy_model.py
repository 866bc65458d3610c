"""OpenVLAOFT: parallel chunk decoding, rollout/training log-prob agreement, BC loss, sizes."""

import numpy as np
import pytest
import torch

from wmrl_cli.envs.interface import Obs
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.policies.config import OpenVLAOFTConfig, full_config, tiny_config
from wmrl_cli.policies.normalization import compute_statistics
from wmrl_cli.policies.openvla_oft import OpenVLAOFT
from wmrl_cli.policies.sequence import SequenceLayout, build_attention
from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

INSTRUCTIONS = ["pick up the red block and place it in the bin", "open the drawer", "push it"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def tiny_policy(value_head: bool = True, attention: str = "prefix_causal") -> OpenVLAOFT:
    torch.manual_seed(0)
    tok = build_word_tokenizer(INSTRUCTIONS)
    cfg = tiny_config(len(tok), value_head=value_head, llm_layers=2)
    cfg.attention = attention
    acts = np.random.default_rng(0).normal(size=(300, 7))
    stats = {"mw_no_noops": compute_statistics(acts, mask=[True] * 6 + [False])}
    return OpenVLAOFT(cfg, tok, stats).eval()


def batch(n: int = 4, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    images = np.random.default_rng(seed).integers(0, 256, size=(n, 64, 64, 3), dtype=np.uint8)
    return images, [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(n)]


@pytest.mark.parametrize("attention", ["prefix_causal", "bidirectional"])
def test_rollout_and_training_log_probs_agree(attention):
    policy = tiny_policy(attention=attention)
    images, instructions = batch()
    gen = torch.Generator().manual_seed(1)
    chunk = policy.act(images, instructions, sample=True, temperature=1.6, generator=gen)
    assert chunk.actions.shape == (4, 8, 7) and chunk.actions.dtype == np.float32
    assert chunk.tokens.shape == chunk.logprobs.shape == chunk.entropy.shape == (4, 8, 7)
    assert chunk.values.shape == (4,)
    out = policy(images, instructions, torch.from_numpy(chunk.tokens), 1.6)
    assert out.log_probs.shape == out.entropy.shape == (4, 8, 7) and out.values.shape == (4,)
    np.testing.assert_allclose(out.log_probs.detach().numpy(), chunk.logprobs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out.entropy.detach().numpy(), chunk.entropy, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out.values.detach().numpy(), chunk.values, atol=1e-5, rtol=0)
    assert np.all(chunk.logprobs <= 0) and np.all(chunk.entropy <= np.log(256) + 1e-4)


def test_top_k_log_probs_agree_and_stay_in_the_top_k():
    policy = tiny_policy()
    images, instructions = batch()
    gen = torch.Generator().manual_seed(2)
    chunk = policy.act(images, instructions, temperature=1.6, top_k=5, generator=gen)
    out = policy(images, instructions, torch.from_numpy(chunk.tokens), 1.6, top_k=5)
    np.testing.assert_allclose(out.log_probs.detach().numpy(), chunk.logprobs, atol=1e-5, rtol=0)
    assert np.all(np.isfinite(chunk.entropy)) and np.all(chunk.entropy <= np.log(5) + 1e-4)
    full = policy(images, instructions, torch.from_numpy(chunk.tokens), 1.6)
    assert torch.all(out.log_probs >= full.log_probs - 1e-6)  # renormalized over fewer bins


def test_greedy_is_deterministic_and_sampling_follows_the_generator():
    policy = tiny_policy()
    images, instructions = batch()
    a = policy.act(images, instructions, sample=False)
    b = policy.act(images, instructions, sample=False)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.actions, b.actions)
    s1 = policy.act(images, instructions, generator=torch.Generator().manual_seed(5))
    s2 = policy.act(images, instructions, generator=torch.Generator().manual_seed(5))
    np.testing.assert_array_equal(s1.tokens, s2.tokens)
    top1 = policy.act(images, instructions, top_k=1, generator=torch.Generator().manual_seed(9))
    np.testing.assert_array_equal(top1.tokens, a.tokens)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_generator_samples_a_cuda_policy_as_it_samples_a_cpu_one():
    # RL's generator lives on the CPU whatever the policy's device (imagined GRPO on a GPU).
    policy = tiny_policy()
    images, instructions = batch()
    on_cpu = policy.act(images, instructions, generator=torch.Generator().manual_seed(5))
    on_gpu = policy.to("cuda").act(images, instructions, generator=torch.Generator().manual_seed(5))
    assert (np.asarray(on_cpu.tokens) != np.asarray(on_gpu.tokens)).mean() < 0.01


def test_actions_are_in_env_units():
    policy = tiny_policy()
    images, instructions = batch()
    chunk = policy.act(images, instructions, sample=True)
    stats = policy.action_statistics()
    lo, hi = np.array(stats["q01"]), np.array(stats["q99"])
    assert np.all(chunk.actions[..., :6] >= lo[:6] - 1e-5)
    assert np.all(chunk.actions[..., :6] <= hi[:6] + 1e-5)
    np.testing.assert_allclose(chunk.actions[..., 6], chunk.normalized_actions[..., 6])
    np.testing.assert_allclose(policy.tokens_to_actions(chunk.tokens), chunk.actions, atol=1e-5)


def test_padding_does_not_change_a_row():
    policy = tiny_policy()
    images, instructions = batch(3)
    together = policy(images, instructions).logits
    for i in range(3):
        alone = policy(images[i : i + 1], instructions[i : i + 1]).logits
        torch.testing.assert_close(alone[0], together[i], atol=1e-5, rtol=0)


def test_act_accepts_an_obs():
    policy = tiny_policy(value_head=False)
    images, instructions = batch(2)
    obs = Obs(images=images, instructions=instructions, task_ids=np.zeros(2, dtype=np.int64))
    chunk = policy.act(obs, sample=False)
    assert chunk.values is None
    np.testing.assert_array_equal(chunk.tokens, policy.act(images, instructions, False).tokens)
    assert policy.chunk_size == 8


def test_attention_mask_semantics():
    layout = SequenceLayout(num_patches=2, prompt_len=3, num_action_tokens=2)
    prompt_mask = torch.tensor([[False, True, True]])
    mask, pos = build_attention(layout, prompt_mask, "prefix_causal", torch.float32)
    ok = mask[0, 0] == 0
    s = layout.length  # [bos, p, p, pad, t, t, a, a, stop]
    assert s == 9 and pos[0].tolist() == [0, 1, 2, 2, 3, 4, 5, 6, 7]
    assert not ok[:, 3][torch.arange(s) != 3].any()  # nobody attends to the pad
    assert not ok[4, 5] and ok[5, 4]  # causal inside the prompt
    assert ok[6, 7] and ok[7, 8] and ok[8, 6]  # action block is bidirectional
    assert not ok[5, 6]  # the prompt does not see the action slots
    full, _ = build_attention(layout, prompt_mask, "bidirectional", torch.float32)
    assert (full[0, 0] == 0)[5, 6]


def test_bc_loss_learns():
    policy = tiny_policy(value_head=False).train()
    images, instructions = batch(2)
    target = np.random.default_rng(2).normal(size=(2, 8, 7)).astype(np.float32)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(4):
        out = policy.bc_loss(images, instructions, target)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        first = out.loss.item() if first is None else first
    assert out.loss.item() < first
    assert 0.0 <= out.token_accuracy.item() <= 1.0 and out.l1.item() >= 0.0
    assert first == pytest.approx(np.log(256), abs=0.5)  # near-uniform at init


def test_bad_inputs_raise_wmrl_errors():
    policy = tiny_policy()
    images, instructions = batch(2)
    with pytest.raises(WmrlError, match="uint8"):
        policy.act(images.astype(np.float32), instructions)
    with pytest.raises(WmrlError, match="instructions"):
        policy.act(images, instructions[:1])
    with pytest.raises(WmrlError, match="action tokens"):
        policy(images, instructions, torch.zeros(2, 8, 7, dtype=torch.long))
    policy.norm_stats = None
    with pytest.raises(WmrlError, match="statistics"):
        policy.act(images, instructions)


def test_tiny_and_full_sizes():
    tiny = tiny_policy()
    n_tiny = sum(p.numel() for p in tiny.parameters())
    assert n_tiny < 3_000_000
    with torch.device("meta"):
        full = OpenVLAOFT(full_config())
    n_full = sum(p.numel() for p in full.parameters())
    assert 7.3e9 < n_full < 7.7e9
    assert full.config.vocab_size == 32000 and full.config.llm.embedding_size == 32064
    assert full.action_tokenizer.first_token_id == 31744
    assert full.config.num_patches == 256


def test_config_round_trip_and_validation():
    cfg = tiny_policy().config
    assert OpenVLAOFTConfig.from_dict(cfg.to_dict()) == cfg
    bad = cfg.to_dict()
    bad["llm"]["embedding_size"] = 10
    with pytest.raises(ConfigError, match="vocab_size"):
        OpenVLAOFTConfig.from_dict(bad)
    typo = cfg.to_dict() | {"chunk_length": 4}
    with pytest.raises(ConfigError, match="chunk_length"):
        OpenVLAOFTConfig.from_dict(typo)
