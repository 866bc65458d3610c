"""Prompt tokenization for the OpenVLA-OFT family.

Full checkpoints use their own Llama tokenizer files. Tiny configs use a word-level tokenizer
built from the suite's instructions (tokenizers library), wrapped as a transformers fast
tokenizer so both kinds save and load the same way. The action tokens are never produced by
the tokenizer: the model places them by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import (
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from wmrl_cli.errors import WmrlError

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"
UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
# Ids follow Llama's layout (unk 0, bos 1, eos 2) so the stop token is id 2 in both families.
SPECIAL_TOKENS = (UNK, BOS, EOS, PAD)
# SentencePiece's lone word boundary: OpenVLA appends it after "Out:" (id 29871 in Llama-2).
EMPTY_PIECE = "\u2581"


def build_prompt(instruction: str) -> str:
    return PROMPT_TEMPLATE.format(instruction=instruction.strip().lower())


def build_word_tokenizer(instructions: Iterable[str]) -> PreTrainedTokenizerFast:
    """A lower-casing word-level tokenizer whose vocabulary covers the prompts of `instructions`."""
    pre = pre_tokenizers.Whitespace()
    words: set[str] = set()
    for text in [build_prompt(i) for i in instructions] + [PROMPT_TEMPLATE]:
        words.update(piece for piece, _ in pre.pre_tokenize_str(text.lower()))
    vocab = {
        tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *sorted(words - set(SPECIAL_TOKENS))])
    }
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token=UNK, bos_token=BOS, eos_token=EOS, pad_token=PAD
    )


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in a checkpoint directory (never runs remote code)."""
    d = Path(directory)
    if not any((d / f).exists() for f in ("tokenizer.json", "tokenizer.model")):
        raise WmrlError(f"{d}: no tokenizer files (tokenizer.json or tokenizer.model)")
    try:
        # An empty model config keeps AutoTokenizer from parsing config.json (a prismatic
        # "openvla" config is unknown to transformers); tokenizer_config.json decides the class.
        return AutoTokenizer.from_pretrained(
            str(d), config=PretrainedConfig(), trust_remote_code=False
        )
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WmrlError(f"{d}: cannot load the tokenizer ({first})") from None


def empty_piece_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """Id of SentencePiece's empty word piece if the vocabulary has one (Llama: 29871)."""
    return tokenizer.get_vocab().get(EMPTY_PIECE)


@dataclass
class PromptBatch:
    """Prompt ids without BOS, left-padded: ids [B, M] long, mask [B, M] bool (True = token)."""

    ids: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device | str) -> PromptBatch:
        return PromptBatch(self.ids.to(device), self.mask.to(device))

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase,
    instructions: Sequence[str],
    *,
    pad_token_id: int,
    suffix_token_id: int | None,
    cache: dict[str, list[int]] | None = None,
) -> PromptBatch:
    """Tokenize OpenVLA prompts; BOS is dropped (the model places it before the image patches)."""
    if len(instructions) == 0:
        raise WmrlError("no instructions to encode")
    rows = []
    for text in instructions:
        if not isinstance(text, str):
            raise WmrlError(f"instructions must be strings, got {type(text).__name__}")
        ids = cache.get(text) if cache is not None else None
        if ids is None:
            ids = list(tokenizer(build_prompt(text), add_special_tokens=True)["input_ids"])
            if ids and ids[0] == tokenizer.bos_token_id:
                ids = ids[1:]
            if ids and ids[-1] == tokenizer.eos_token_id:
                ids = ids[:-1]
            if suffix_token_id is not None and (not ids or ids[-1] != suffix_token_id):
                ids.append(suffix_token_id)
            if not ids:
                raise WmrlError(f"instruction {text!r} tokenizes to nothing")
            if cache is not None:
                cache[text] = ids
        rows.append(ids)
    width = max(len(r) for r in rows)
    ids_t = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids_t[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = True
    return PromptBatch(ids_t, mask)
