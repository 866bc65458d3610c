"""The 256-bin action tokenizer (OpenVLA, arXiv 2406.09246)."""

import numpy as np
import pytest
import torch

from wmrl_cli.policies.action_tokenizer import ActionTokenizer

HALF_BIN = (2.0 / 255) / 2  # bins = linspace(-1, 1, 256): 255 intervals of width 2/255


def test_llama_vocab_uses_the_last_256_ids():
    tok = ActionTokenizer(32000)
    assert tok.encode(np.array([-1.0]))[0] == 31999
    assert tok.encode(np.array([1.0]))[0] == 31744
    ids = tok.encode(np.linspace(-1, 1, 10_001))
    assert ids.min() == 31744 and ids.max() == 31999
    assert len(np.unique(ids)) == 256


def test_round_trip_error_is_at_most_half_a_bin():
    tok = ActionTokenizer(32000)
    a = np.concatenate([np.linspace(-1, 1, 20_001), np.random.default_rng(0).uniform(-1, 1, 5000)])
    err = np.abs(tok.decode(tok.encode(a)) - a)
    assert err.max() <= HALF_BIN + 1e-6


def test_values_outside_the_range_are_clipped():
    tok = ActionTokenizer(32000)
    assert tok.encode(np.array([-7.0]))[0] == tok.encode(np.array([-1.0]))[0]
    assert tok.encode(np.array([3.0]))[0] == tok.encode(np.array([1.0]))[0]
    np.testing.assert_allclose(tok.decode(np.array([31999, 31744])), tok.bin_centers[[0, 254]])


def test_decode_matches_the_reference_formula():
    tok = ActionTokenizer(32000)
    ids = np.arange(31744, 32000)
    expected = tok.bin_centers[np.clip(32000 - ids - 1, 0, 254)]
    np.testing.assert_allclose(tok.decode(ids), expected.astype(np.float32))


def test_torch_and_numpy_agree():
    tok = ActionTokenizer(300)
    a = np.random.default_rng(1).uniform(-1.2, 1.2, size=(4, 8, 7))
    ids_np = tok.encode(a)
    ids_t = tok.encode(torch.from_numpy(a).float())
    assert ids_t.dtype == torch.long
    np.testing.assert_array_equal(ids_t.numpy(), ids_np)
    np.testing.assert_allclose(tok.decode(ids_t).numpy(), tok.decode(ids_np), atol=1e-7)


def test_restricted_softmax_index_mapping():
    tok = ActionTokenizer(300)
    ids = torch.arange(44, 300)
    index = tok.token_to_index(ids)
    assert index.min() == 0 and index.max() == 255
    assert torch.equal(tok.index_to_token(index), ids)
    assert bool(tok.is_action_token(ids).all())
    assert not bool(tok.is_action_token(torch.tensor([43, 300])).any())


def test_vocab_must_hold_the_action_tokens():
    with pytest.raises(ValueError):
        ActionTokenizer(256)
