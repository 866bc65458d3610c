"""Token layout and attention mask for parallel chunk decoding (OpenVLA-OFT).

Sequence: [BOS] [P image patches] [M prompt tokens, left-padded] [C*A action slots] [stop].
Padding sits between the patches and the prompt so every row has its action block at the same
indices; pad keys are masked out and position ids skip them, which makes a padded row compute
what the unpadded row would. As in OpenVLA-OFT the logits of action k are read one position
earlier (the usual next-token shift): the last prompt token predicts action 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SequenceLayout:
    num_patches: int
    prompt_len: int
    num_action_tokens: int

    @property
    def prompt_start(self) -> int:
        return 1 + self.num_patches

    @property
    def action_start(self) -> int:
        return self.prompt_start + self.prompt_len

    @property
    def length(self) -> int:
        return self.action_start + self.num_action_tokens + 1

    @property
    def logit_slice(self) -> slice:
        """Positions whose next-token logits are the action tokens."""
        return slice(self.action_start - 1, self.action_start - 1 + self.num_action_tokens)

    @property
    def value_position(self) -> int:
        """The last prompt token: it has seen the whole observation and no action slot."""
        return self.action_start - 1


def token_validity(layout: SequenceLayout, prompt_mask: torch.Tensor) -> torch.Tensor:
    """[B, S] bool: False at padding."""
    b = prompt_mask.shape[0]
    ones_head = prompt_mask.new_ones((b, layout.prompt_start))
    ones_tail = prompt_mask.new_ones((b, layout.num_action_tokens + 1))
    return torch.cat([ones_head, prompt_mask, ones_tail], dim=1)


def build_attention(
    layout: SequenceLayout, prompt_mask: torch.Tensor, mode: str, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive 4D mask [B, 1, S, S] (0 = attend) and position ids [B, S].

    mode "prefix_causal": causal over BOS, patches and prompt; the action slots and the stop
    token attend to the whole prompt and to each other. mode "bidirectional": all to all.
    """
    valid = token_validity(layout, prompt_mask.bool())
    s = layout.length
    device = prompt_mask.device
    if mode == "bidirectional":
        allowed = torch.ones((s, s), dtype=torch.bool, device=device)
    elif mode == "prefix_causal":
        allowed = torch.ones((s, s), dtype=torch.bool, device=device).tril()
        block = torch.arange(s, device=device) >= layout.action_start
        allowed = allowed | (block[:, None] & block[None, :])
    else:
        raise ValueError(f"unknown attention mode {mode!r}")
    allowed = allowed[None] & valid[:, None, :]
    # A pad query row would otherwise see no key at all (NaN softmax); its output is unused.
    allowed = allowed | torch.eye(s, dtype=torch.bool, device=device)[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
    positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
    return mask[:, None], positions
