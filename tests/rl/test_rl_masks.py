"""Loss masks: valid up to and including the first done, masked after."""

import torch

from wmrl_cli.rl.masks import chunk_dones, done_flags, token_mask, valid_lengths, valid_step_mask


def test_valid_up_to_and_including_first_done():
    dones = torch.tensor(
        [
            [0, 0, 1, 0, 1],  # first done at t=2: steps 0..2 valid, the later done changes nothing
            [0, 0, 0, 0, 0],  # never done: all valid
            [1, 0, 0, 0, 0],  # done at the first step: only t=0 valid
        ]
    )
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(valid_step_mask(dones), expected)
    assert valid_lengths(expected).tolist() == [3, 5, 1]


def test_done_flags_is_success_or_truncation():
    terminated = torch.tensor([[0, 1, 0], [0, 0, 0]])
    truncated = torch.tensor([[0, 0, 0], [0, 0, 1]])
    assert done_flags(terminated, truncated).int().tolist() == [[0, 1, 0], [0, 0, 1]]


def test_first_done_in_the_middle_of_a_chunk():
    # B=1, T=3 chunk steps of C=4 actions; the episode ends at action 2 of chunk step 1.
    dones = torch.zeros(1, 3, 4, dtype=torch.bool)
    dones[0, 1, 2] = True
    step_dones = chunk_dones(dones)
    assert step_dones.tolist() == [[False, True, False]]
    step_mask = valid_step_mask(step_dones)
    assert step_mask.tolist() == [[True, True, False]]
    tokens = token_mask(step_mask, chunk_size=4, action_dim=7)
    assert tokens.shape == (1, 3, 4, 7)
    # chunk steps 0 and 1: all 28 tokens valid; chunk step 2: none.
    assert tokens[0, :2].all() and not tokens[0, 2].any()
    assert int(tokens.sum()) == 2 * 4 * 7
