"""OpenVLA's 256-bin action tokenizer (OpenVLA, arXiv 2406.09246, section 3; OpenVLA-OFT,
arXiv 2502.19645).

Normalized actions in [-1, 1] map to the last 256 ids of the vocabulary:
token = vocab_size - digitize(clip(a, -1, 1), bins), bins = linspace(-1, 1, 256), so ids run
from vocab_size - 256 (a = +1) to vocab_size - 1 (a = -1). Decoding takes the centre of the
bin the id points at. Policies score only these 256 ids, so a restricted softmax works on
"bin indices" 0..255 with index = id - (vocab_size - 256).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

N_BINS = 256

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


class ActionTokenizer:
    """Maps normalized actions <-> action token ids <-> restricted-softmax indices 0..255."""

    def __init__(self, vocab_size: int, n_bins: int = N_BINS) -> None:
        if vocab_size <= n_bins:
            raise ValueError(f"vocab_size {vocab_size} must exceed the {n_bins} action tokens")
        self.vocab_size = vocab_size
        self.n_bins = n_bins
        self.bins = np.linspace(-1.0, 1.0, n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0
        # First id of the action block; index 0 of the restricted softmax.
        self.first_token_id = vocab_size - n_bins

    def encode(self, actions: ArrayT) -> ArrayT:
        """Normalized actions (any shape) -> token ids (int64, same shape)."""
        if isinstance(actions, torch.Tensor):
            bins = torch.as_tensor(self.bins, dtype=torch.float64, device=actions.device)
            clipped = actions.detach().to(torch.float64).clamp(-1.0, 1.0)
            # np.digitize(x, bins) == number of bin edges <= x == searchsorted(right=True).
            digit = torch.searchsorted(bins, clipped.contiguous(), right=True)
            return (self.vocab_size - digit).to(torch.long)
        digit = np.digitize(np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0), self.bins)
        return (self.vocab_size - digit).astype(np.int64)

    def decode(self, token_ids: ArrayT) -> ArrayT:
        """Token ids -> normalized actions at the bin centres (float32)."""
        last = self.bin_centers.shape[0] - 1
        if isinstance(token_ids, torch.Tensor):
            centers = torch.as_tensor(
                self.bin_centers, dtype=torch.float32, device=token_ids.device
            )
            index = (self.vocab_size - token_ids.to(torch.long) - 1).clamp(0, last)
            return centers[index]
        index = np.clip(self.vocab_size - np.asarray(token_ids, dtype=np.int64) - 1, 0, last)
        return self.bin_centers[index].astype(np.float32)

    def token_to_index(self, token_ids: ArrayT) -> ArrayT:
        """Token ids -> positions 0..255 in the restricted (action-only) softmax."""
        return token_ids - self.first_token_id

    def index_to_token(self, index: ArrayT) -> ArrayT:
        """Positions 0..255 in the restricted softmax -> token ids."""
        return index + self.first_token_id

    def is_action_token(self, token_ids: ArrayT) -> ArrayT:
        return (token_ids >= self.first_token_id) & (token_ids < self.vocab_size)
