"""VideoMAE clip classifier: configs, tiny forward, sliding-window scoring."""

import torch

from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig, clip_indices


def test_full_config_is_wmpo_videomae_base_with_8_frames():
    hf = VideoMAERewConfig.full().to_hf()
    assert (hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads) == (768, 12, 12)
    assert (hf.intermediate_size, hf.image_size, hf.patch_size) == (3072, 224, 16)
    assert (hf.tubelet_size, hf.num_frames, hf.num_labels) == (2, 8, 2)
    assert hf.use_mean_pooling is False  # videomae-base classifies the first token


def test_tiny_forward():
    torch.manual_seed(0)
    model = VideoMAERewardModel(VideoMAERewConfig.tiny()).eval()
    pixels = torch.randn(2, 8, 3, 32, 32)
    logits = model.logits(pixels)
    assert logits.shape == (2, 2)
    assert torch.allclose(model(pixels), torch.softmax(logits, -1)[:, 1])
    model.config.score = "sigmoid"  # WMPO's rollout scoring
    assert torch.allclose(model(pixels), torch.sigmoid(logits[:, 1]))


def test_clip_indices():
    # the clip ending at frame t holds frames t-2..t, the first frame repeating before the start
    expected = [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert clip_indices(5, 3).tolist() == expected


def test_predict_scores_the_clip_ending_at_each_frame():
    torch.manual_seed(0)
    model = VideoMAERewardModel(VideoMAERewConfig.tiny())
    frames = torch.randint(0, 256, (2, 10, 40, 48, 3), dtype=torch.uint8)
    probs = model.predict(frames, batch_size=3)
    assert probs.shape == (2, 10) and ((probs > 0) & (probs < 1)).all()
    model.eval()
    pixels = model.preprocess(frames[1])  # non-square 40x48 -> 32x32 (shorter side, crop)
    assert pixels.shape == (10, 3, 32, 32)
    last = model(pixels[2:10][None])  # frames 2..9 end at frame 9
    first = model(pixels[[0] * 8][None])  # frame 0 alone, repeated
    assert torch.allclose(probs[1, 9], last[0], atol=1e-6)
    assert torch.allclose(probs[1, 0], first[0], atol=1e-6)


def test_preprocess_normalizes_with_imagenet_statistics():
    model = VideoMAERewardModel(VideoMAERewConfig.tiny())
    white = torch.full((1, 32, 32, 3), 255, dtype=torch.uint8)
    x = model.preprocess(white)
    # (1 - mean) / std per channel: (1 - 0.485) / 0.229 = 2.248908, ...
    expected = torch.tensor([2.248908, 2.428571, 2.64])
    assert torch.allclose(x[0, :, 0, 0], expected, atol=1e-5)
