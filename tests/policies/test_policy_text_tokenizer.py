"""Prompt format and the word-level tokenizer of tiny policies."""

import pytest

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.text_tokenizer import (
    build_prompt,
    build_word_tokenizer,
    empty_piece_id,
    encode_prompts,
    load_tokenizer,
)

INSTRUCTIONS = ["Pick up the red block", "open the drawer"]


def test_openvla_prompt_format():
    assert build_prompt("Open The Drawer ") == (
        "In: What action should the robot take to open the drawer?\nOut:"
    )


def test_word_tokenizer_specials_and_coverage():
    tok = build_word_tokenizer(INSTRUCTIONS)
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, 3)
    ids = tok(build_prompt(INSTRUCTIONS[0]))["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.unk_token_id not in ids
    assert empty_piece_id(tok) is None


def test_encode_left_pads_and_drops_bos():
    tok = build_word_tokenizer(INSTRUCTIONS)
    batch = encode_prompts(tok, INSTRUCTIONS, pad_token_id=3, suffix_token_id=None)
    long_len = int(batch.mask[0].sum())
    short_len = int(batch.mask[1].sum())
    assert long_len > short_len and batch.ids.shape == (2, long_len)
    assert not batch.mask[1, : long_len - short_len].any()
    assert (batch.ids[1, : long_len - short_len] == 3).all()
    assert tok.bos_token_id not in batch.ids[batch.mask].tolist()


def test_suffix_token_is_appended_once():
    tok = build_word_tokenizer(INSTRUCTIONS)
    batch = encode_prompts(tok, INSTRUCTIONS[:1], pad_token_id=3, suffix_token_id=7)
    assert batch.ids[0, -1] == 7 and batch.ids[0, -2] != 7


def test_save_and_load(tmp_path):
    tok = build_word_tokenizer(INSTRUCTIONS)
    tok.save_pretrained(str(tmp_path))
    again = load_tokenizer(tmp_path)
    text = build_prompt(INSTRUCTIONS[1])
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    with pytest.raises(WmrlError, match="no tokenizer files"):
        load_tokenizer(tmp_path / "nowhere")
