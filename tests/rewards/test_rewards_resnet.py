"""ResNet reward models: RLinf's layout at the default size, shapes and frame scoring."""

import pytest
import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.resnet import ResnetRewConfig, ResnetRewModel, TaskEmbedResnetRewModel

TINY = ResnetRewConfig(width=8)
TINY_TASK = ResnetRewConfig(
    width=8, task_embedding=True, num_tasks=3, task_embed_dim=4, hidden_dim=16
)


def _frames(b=2, t=3, h=32, w=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, t, h, w, 3), dtype=torch.uint8, generator=g)


def test_default_is_rlinf_resnet18_layout():
    sd = ResnetRewModel().state_dict()
    assert sd["net.0.0.weight"].shape == (64, 3, 7, 7)  # conv 7x7/2, 64 channels, with bias
    assert "net.0.0.bias" in sd and "net.0.1.running_mean" in sd
    assert sd["net.7.weight"].shape == (1, 512)  # Linear(512, 1) after pool + flatten
    blocks = {k.split(".conv1")[0] for k in sd if k.endswith("conv1.weight")}
    assert len(blocks) == 8  # 4 stages x 2 residual blocks
    # strided 1x1 shortcut convs only in the first block of stages 2..4
    assert sorted({k.rsplit(".", 1)[0] for k in sd if ".conv3." in k}) == [
        "net.2.0.conv3",
        "net.3.0.conv3",
        "net.4.0.conv3",
    ]
    task = TaskEmbedResnetRewModel().state_dict()
    assert task["task_embedding.weight"].shape == (10, 64)
    assert task["fusion_layer.0.weight"].shape == (256, 576)  # 512 features + 64 embedding
    assert task["fusion_layer.3.weight"].shape == (1, 256)
    assert task["visual_encoder.4.1.bn2.weight"].shape == (512,)


def test_predict_shapes_and_range():
    torch.manual_seed(0)
    probs = ResnetRewModel(TINY).predict(_frames().numpy())
    assert probs.shape == (2, 3) and probs.dtype == torch.float32
    assert ((probs > 0) & (probs < 1)).all()
    task_probs = TaskEmbedResnetRewModel(TINY_TASK).predict(_frames(), torch.tensor([0, 2]))
    assert task_probs.shape == (2, 3)


def test_predict_matches_forward_on_scaled_frames():
    torch.manual_seed(0)
    model = TaskEmbedResnetRewModel(TINY_TASK).eval()
    frames = _frames()
    # uint8 -> [-1, 1]: 0 -> -1, 255 -> 1
    images = frames.reshape(6, 32, 32, 3).permute(0, 3, 1, 2).float() / 255 * 2 - 1
    ids = torch.tensor([1, 1, 1, 2, 2, 2])  # each video's id repeated over its 3 frames
    expected = model(images, ids).reshape(2, 3)
    got = model.predict(frames, torch.tensor([1, 2]), batch_size=4)
    assert torch.allclose(got, expected, atol=1e-6)


def test_predict_uses_eval_mode_and_restores_training():
    torch.manual_seed(0)
    model = ResnetRewModel(TINY).train()
    a = model.predict(_frames())
    assert model.training
    b = model.predict(_frames())
    assert torch.equal(a, b)  # BatchNorm ran on running statistics, not on the batch


def test_image_size_resizes_frames():
    model = ResnetRewModel(ResnetRewConfig(width=8, image_size=16))
    assert model.preprocess(_frames(1, 1, 40, 24)[0]).shape == (1, 3, 16, 16)


def test_task_ids_are_checked():
    model = TaskEmbedResnetRewModel(TINY_TASK)
    with pytest.raises(WmrlError, match="task id"):
        model.predict(_frames(), None)
    with pytest.raises(WmrlError, match="one task id per video"):
        model.predict(_frames(), torch.tensor([0, 1, 2]))
    with pytest.raises(WmrlError, match=r"\[0, 3\)"):
        model.predict(_frames(), torch.tensor([0, 3]))


def test_frames_must_be_uint8_bthw3():
    with pytest.raises(WmrlError, match="uint8"):
        ResnetRewModel(TINY).predict(torch.zeros(2, 3, 32, 32, 3))
