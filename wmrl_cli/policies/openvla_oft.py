"""OpenVLA-OFT: vision towers -> projector -> Llama, with parallel action-chunk decoding.

One forward pass scores all C x A action tokens of a chunk: the action slots are zero
embeddings after the prompt (plus a stop token), the logits at the action positions are
restricted to the 256 action-token ids and divided by the temperature. Rollout (`act`) and
training (`__call__`) share `_restricted_logits`, so their log-probs agree exactly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from wmrl_cli.envs.interface import PolicyOutput
from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.action_tokenizer import ActionTokenizer
from wmrl_cli.policies.config import OpenVLAOFTConfig
from wmrl_cli.policies.normalization import action_stats, as_keyed, normalize, unnormalize
from wmrl_cli.policies.sequence import SequenceLayout, build_attention
from wmrl_cli.policies.text_tokenizer import PromptBatch, encode_prompts
from wmrl_cli.policies.vision import PrismaticProjector, VisionTower, images_to_tensor

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ActionChunk(PolicyOutput):
    """`act` result, numpy on the host: actions [B,C,A] float32 in env units, tokens [B,C,A]
    int64 action-token ids, logprobs and entropy [B,C,A] float32 under the sampling
    distribution (temperature, top-k) over the 256 action tokens, values [B] float32 (None
    without a value head)."""

    entropy: np.ndarray | None = None
    normalized_actions: np.ndarray | None = None


@dataclass
class PolicyForward:
    """Training forward: logits [B,C,A,256] (divided by the temperature, -inf outside top-k),
    log_probs / entropy [B,C,A] (log_probs None when no token ids were given), values [B]."""

    logits: torch.Tensor
    log_probs: torch.Tensor | None
    entropy: torch.Tensor
    values: torch.Tensor | None


@dataclass
class BCLoss:
    """loss: mean cross-entropy per action token; token_accuracy: argmax == target bin;
    l1: mean |argmax action - binned target| in normalized units ([-1, 1])."""

    loss: torch.Tensor
    token_accuracy: torch.Tensor
    l1: torch.Tensor


class ValueHead(nn.Module):
    def __init__(self, hidden_size: int, inner: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, inner)
        self.fc2 = nn.Linear(inner, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.fc1.reset_parameters()
        # Start at V = 0 so the first advantages are the returns themselves.
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(hidden))).squeeze(-1)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    # Build big models directly in their dtype instead of float32 then cast (halves peak memory).
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def llama_config(cfg: OpenVLAOFTConfig) -> LlamaConfig:
    spec = cfg.llm
    return LlamaConfig(
        vocab_size=spec.embedding_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads or spec.num_heads,
        rms_norm_eps=spec.rms_norm_eps,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        pad_token_id=cfg.pad_token_id,
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.stop_token_id,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation=cfg.attn_implementation,
    )


class OpenVLAOFT(nn.Module):
    """The OpenVLA-OFT family; a tiny config is a size, never a different code path.

    Holds its text tokenizer and dataset statistics (for actions in env units). LoRA is
    applied explicitly (`wmrl_cli.policies.lora.apply_lora`); `config.lora` records it.
    """

    def __init__(
        self,
        config: OpenVLAOFTConfig,
        tokenizer: PreTrainedTokenizerBase | None = None,
        dataset_statistics: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.name = f"openvla-oft-{config.name}"
        with _default_dtype(DTYPES[config.dtype]):
            self.vision_towers = nn.ModuleList(
                VisionTower(v, config.attn_implementation) for v in config.vision
            )
            vision_dim = sum(v.hidden_size for v in config.vision)
            self.projector = PrismaticProjector(config.fused, vision_dim, config.llm.hidden_size)
            self.language_model: nn.Module = LlamaForCausalLM(llama_config(config))
            self.value_head = (
                ValueHead(config.llm.hidden_size, config.value_hidden_size)
                if config.value_head
                else None
            )
        self.action_tokenizer = ActionTokenizer(config.vocab_size, config.n_action_bins)
        self.tokenizer = tokenizer
        self.norm_stats = as_keyed(dataset_statistics) if dataset_statistics else None
        self._prompt_cache: dict[str, list[int]] = {}
        # Where forward passes run, when not where the parameters are kept: a sharded policy
        # with CPU offload keeps its shards in CPU memory and computes on its GPU
        # (`PolicySharding.prepare_model` sets it)
        self.compute_device: torch.device | None = None

    # --- small accessors ---------------------------------------------------------------
    @property
    def chunk_size(self) -> int:
        return self.config.chunk_len

    @property
    def device(self) -> torch.device:
        """Where inputs, targets and outputs go: the compute device, else the parameters'."""
        return self.compute_device or next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return self.projector.fc1.weight.dtype

    def llm(self) -> LlamaForCausalLM:
        """The Llama model (under its peft wrapper when LoRA is on)."""
        lm = self.language_model
        return lm.get_base_model() if hasattr(lm, "get_base_model") else lm

    def set_dataset_statistics(self, stats: dict[str, Any], unnorm_key: str | None = None) -> None:
        self.norm_stats = as_keyed(stats)
        self.config.unnorm_key = unnorm_key
        self.action_statistics()  # fail now, not at the first rollout

    def action_statistics(self) -> dict[str, Any]:
        if self.norm_stats is None:
            raise WmrlError("the policy has no dataset statistics to map actions to env units")
        stats = action_stats(self.norm_stats, self.config.unnorm_key)
        if len(stats["q01"]) != self.config.action_dim:
            raise WmrlError(
                f"dataset statistics have {len(stats['q01'])} action dims, "
                f"the policy {self.config.action_dim}"
            )
        return stats

    def set_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self._prompt_cache.clear()

    def enable_gradient_checkpointing(self) -> None:
        self.llm().gradient_checkpointing_enable()

    # --- inputs ------------------------------------------------------------------------
    def encode_instructions(self, instructions: Sequence[str]) -> PromptBatch:
        if self.tokenizer is None:
            raise WmrlError("the policy has no text tokenizer; load one from a checkpoint")
        return encode_prompts(
            self.tokenizer,
            instructions,
            pad_token_id=self.config.pad_token_id,
            suffix_token_id=self.config.prompt_suffix_token_id,
            cache=self._prompt_cache,
        )

    def actions_to_tokens(self, actions: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Env-unit actions [..., A] -> action-token ids (normalize, then bin)."""
        stats = self.action_statistics()
        tensor = actions if torch.is_tensor(actions) else torch.from_numpy(np.asarray(actions))
        return self.action_tokenizer.encode(normalize(tensor.double(), stats)).to(self.device)

    def tokens_to_actions(self, token_ids: np.ndarray | torch.Tensor) -> np.ndarray:
        """Action-token ids -> env-unit actions (float32 numpy)."""
        ids = token_ids.detach().cpu().numpy() if torch.is_tensor(token_ids) else token_ids
        normed = self.action_tokenizer.decode(np.asarray(ids))
        return unnormalize(normed, self.action_statistics()).astype(np.float32)

    # --- core --------------------------------------------------------------------------
    def _restricted_logits(
        self, images: np.ndarray | torch.Tensor, prompts: Sequence[str] | PromptBatch
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Unscaled float32 logits [B, C*A, 256] over the action tokens, and values [B]."""
        cfg = self.config
        pixels = images_to_tensor(images, self.device)
        batch = prompts if isinstance(prompts, PromptBatch) else self.encode_instructions(prompts)
        batch = batch.to(self.device)
        if len(batch) != pixels.shape[0]:
            raise WmrlError(f"{pixels.shape[0]} images but {len(batch)} instructions")

        patches = torch.cat([t(t.preprocess(pixels)) for t in self.vision_towers], dim=-1)
        patch_embeds = self.projector(patches)
        lm = self.llm()
        embed = lm.get_input_embeddings()
        b, dev = pixels.shape[0], self.device
        layout = SequenceLayout(cfg.num_patches, batch.ids.shape[1], cfg.num_action_tokens)
        bos = embed(torch.full((b, 1), cfg.bos_token_id, device=dev))
        stop = embed(torch.full((b, 1), cfg.stop_token_id, device=dev))
        text = embed(batch.ids)
        # OpenVLA-OFT feeds empty (zero) embeddings in the action slots.
        slots = text.new_zeros((b, cfg.num_action_tokens, text.shape[-1]))
        inputs = torch.cat([bos, patch_embeds.to(text.dtype), text, slots, stop], dim=1)
        mask, positions = build_attention(layout, batch.mask, cfg.attention, inputs.dtype)
        hidden = lm.model(
            inputs_embeds=inputs, attention_mask=mask, position_ids=positions, use_cache=False
        ).last_hidden_state

        action_hidden = hidden[:, layout.logit_slice]
        head = lm.get_output_embeddings()
        first, last = self.action_tokenizer.first_token_id, cfg.vocab_size
        if isinstance(head, nn.Linear):
            logits = F.linear(action_hidden, head.weight[first:last])
        else:  # e.g. a LoRA-wrapped head: run it whole, then keep the action ids
            logits = head(action_hidden)[..., first:last]
        values = None
        if self.value_head is not None:
            values = self.value_head(hidden[:, layout.value_position]).float()
        return logits.float(), values

    def forward(
        self,
        images: np.ndarray | torch.Tensor,
        prompts: Sequence[str] | PromptBatch,
        action_token_ids: torch.Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
    ) -> PolicyForward:
        """Training forward: per-token log-probs of `action_token_ids` [B,C,A], entropy, values.

        The distribution is softmax(logits / temperature) over the 256 action tokens, cut to
        the `top_k` most likely bins when top_k is set; `act` samples from exactly this one.
        """
        if temperature <= 0:
            raise WmrlError(f"temperature must be positive, got {temperature}")
        cfg = self.config
        logits, values = self._restricted_logits(images, prompts)
        b = logits.shape[0]
        logits = (logits / temperature).view(b, cfg.chunk_len, cfg.action_dim, -1)
        if top_k is not None:
            if not 1 <= top_k <= logits.shape[-1]:
                raise WmrlError(f"top_k must be in 1..{logits.shape[-1]}, got {top_k}")
            kth = logits.topk(top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        log_all = torch.log_softmax(logits, dim=-1)
        probs = log_all.exp()
        # Bins cut by top-k have p = 0 and log p = -inf; they add nothing to the entropy.
        entropy = -torch.where(probs > 0, probs * log_all, torch.zeros_like(probs)).sum(-1)
        log_probs = None
        if action_token_ids is not None:
            ids = action_token_ids.to(logits.device).long()
            if ids.shape != (b, cfg.chunk_len, cfg.action_dim):
                raise WmrlError(
                    f"action tokens must be [{b},{cfg.chunk_len},{cfg.action_dim}], "
                    f"got {list(ids.shape)}"
                )
            if not bool(self.action_tokenizer.is_action_token(ids).all()):
                raise WmrlError("action_token_ids contain ids outside the 256 action tokens")
            index = self.action_tokenizer.token_to_index(ids)
            log_probs = log_all.gather(-1, index[..., None]).squeeze(-1)
        return PolicyForward(logits=logits, log_probs=log_probs, entropy=entropy, values=values)

    @torch.no_grad()
    def act(
        self,
        images: Any,
        instructions: Sequence[str] | PromptBatch | None = None,
        sample: bool = True,
        temperature: float = 1.6,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> ActionChunk:
        """Decode one action chunk per env. `images` may also be an `Obs` (instructions None).

        Sampling draws from the distribution `forward` describes (temperature, top_k); greedy
        takes the argmax. Log-probs and entropy refer to that distribution, so the training
        forward with the same temperature and top_k reproduces them.
        """
        if instructions is None:
            if not hasattr(images, "images") or not hasattr(images, "instructions"):
                raise WmrlError("act() needs instructions, or an Obs with images and instructions")
            images, instructions = images.images, images.instructions
        out = self.forward(images, instructions, temperature=temperature, top_k=top_k)
        if sample:
            probs = torch.softmax(out.logits, dim=-1).reshape(-1, out.logits.shape[-1])
            # Drawn where the generator lives (RL's is on the CPU whatever the model's device),
            # so a seed samples the same tokens on every device.
            draw_device = probs.device if generator is None else generator.device
            index = torch.multinomial(probs.to(draw_device), 1, generator=generator)
            index = index.to(out.logits.device).view(out.logits.shape[:-1])
        else:
            index = out.logits.argmax(dim=-1)
        log_probs = torch.log_softmax(out.logits, dim=-1).gather(-1, index[..., None]).squeeze(-1)
        tokens = self.action_tokenizer.index_to_token(index)
        normalized = self.action_tokenizer.decode(tokens)
        actions = unnormalize(normalized.cpu().numpy(), self.action_statistics())
        return ActionChunk(
            actions=actions.astype(np.float32),
            tokens=tokens.cpu().numpy(),
            logprobs=log_probs.cpu().numpy(),
            values=None if out.values is None else out.values.cpu().numpy(),
            entropy=out.entropy.cpu().numpy(),
            normalized_actions=normalized.cpu().numpy(),
        )

    def bc_loss(
        self,
        images: np.ndarray | torch.Tensor,
        prompts: Sequence[str] | PromptBatch,
        target_actions: np.ndarray | torch.Tensor,
        model: nn.Module | None = None,
    ) -> BCLoss:
        """Behaviour cloning: cross-entropy over the 256 action tokens of the binned targets.

        `model` is what to call for the forward pass (the DDP/Accelerate-wrapped policy, so
        its gradient hooks fire); by default this module itself.
        """
        cfg = self.config
        targets = self.actions_to_tokens(target_actions)
        if targets.shape[-2:] != (cfg.chunk_len, cfg.action_dim):
            raise WmrlError(
                f"target actions must be [B,{cfg.chunk_len},{cfg.action_dim}], "
                f"got {list(targets.shape)}"
            )
        out = (model if model is not None else self)(images, prompts, targets, 1.0)
        index = self.action_tokenizer.token_to_index(targets)
        predicted = out.logits.argmax(-1)
        decode = self.action_tokenizer.decode
        l1 = (
            (decode(self.action_tokenizer.index_to_token(predicted)) - decode(targets)).abs().mean()
        )
        loss = -out.log_probs.mean()
        if out.values is not None:
            # a zero gradient for the value head, not none: DDP reduces every parameter at each
            # backward and stops at the next forward where one had no gradient (RL's anchor)
            loss = loss + 0.0 * out.values.sum()
        return BCLoss(
            loss=loss,
            token_accuracy=(predicted == index).float().mean(),
            l1=l1,
        )
