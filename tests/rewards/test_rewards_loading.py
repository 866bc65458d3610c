"""Loading reward checkpoints: RLinf's .pth layout, refusal of code-running pickles, key
mismatches, VideoMAE files, and wmrl model directories."""

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from wmrl_cli.errors import UnsafeFileError, WmrlError
from wmrl_cli.rewards.loading import load_reward_model, load_reward_pth, save_reward_model
from wmrl_cli.rewards.resnet import ResnetRewConfig, ResnetRewModel, TaskEmbedResnetRewModel
from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig


# --- A stand-alone statement of RLinf's module layout (diffsynth/models/reward_model.py):
# the "Dive into Deep Learning" ResNet-18 with its attribute names. Written for this test
# only, so the keys our models expect are checked against an independent construction.
class _D2LResidual(nn.Module):
    def __init__(self, cin, cout, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(cout, cout, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(cin, cout, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(cout)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.conv3(x) if self.conv3 else x))


def _d2l_stage(cin, cout, first):
    if first:
        return nn.Sequential(_D2LResidual(cout, cout), _D2LResidual(cout, cout))
    return nn.Sequential(_D2LResidual(cin, cout, True, 2), _D2LResidual(cout, cout))


def _d2l_trunk():
    b1 = nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
    )
    stages = [
        _d2l_stage(64, 64, True),
        _d2l_stage(64, 128, False),
        _d2l_stage(128, 256, False),
        _d2l_stage(256, 512, False),
    ]
    return [b1, *stages, nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten()]


class _RLinfResnetRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(*_d2l_trunk(), nn.Linear(512, 1), nn.Sigmoid())


class _RLinfTaskEmbedRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual_encoder = nn.Sequential(*_d2l_trunk())
        self.task_embedding = nn.Embedding(10, 64)
        self.fusion_layer = nn.Sequential(
            nn.Linear(576, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 1), nn.Sigmoid()
        )

    def forward(self, obs, task_id):
        return self.fusion_layer(
            torch.cat([self.visual_encoder(obs), self.task_embedding(task_id)], dim=1)
        )


def _randomize_bn(module):
    # non-trivial running statistics, so a wrong BN mapping would change the outputs
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return module.eval()


FRAMES = torch.randint(
    0, 256, (2, 2, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
)
IMAGES = FRAMES.reshape(4, 32, 32, 3).permute(0, 3, 1, 2).float() / 255 * 2 - 1


def test_rlinf_resnet_rm_pth_loads(tmp_path):
    torch.manual_seed(0)
    ref = _randomize_bn(_RLinfResnetRM())
    path = tmp_path / "resnet_rm.pth"
    torch.save({"model_state_dict": ref.state_dict(), "threshold": 0.7}, path)
    model = load_reward_pth(path)
    assert isinstance(model, ResnetRewModel) and model.config.width == 64
    assert model.threshold == 0.7
    expected = ref.net(IMAGES).reshape(2, 2)
    assert torch.allclose(model.predict(FRAMES), expected, atol=1e-5)


def test_rlinf_taskemb_pth_loads_with_prefix_and_wrapper(tmp_path):
    torch.manual_seed(0)
    ref = _randomize_bn(_RLinfTaskEmbedRM())
    path = tmp_path / "taskemb_resnet_rm.pth"
    state = {f"module.{k}": v for k, v in ref.state_dict().items()}  # saved from DDP
    torch.save({"state_dict": state, "metrics": {"best_threshold": 0.85}}, path)
    model = load_reward_pth(path)
    assert isinstance(model, TaskEmbedResnetRewModel)
    assert (model.config.num_tasks, model.config.task_embed_dim) == (10, 64)
    assert model.threshold == 0.85
    expected = ref(IMAGES, torch.tensor([3, 3, 7, 7])).reshape(2, 2)
    assert torch.allclose(model.predict(FRAMES, [3, 7]), expected, atol=1e-5)


def test_training_script_reference_is_neutralized(tmp_path, monkeypatch):
    # A checkpoint pickled by a training script that references its __main__.train.
    import __main__

    ran = []

    def train(*args):
        ran.append(args)

    train.__module__, train.__qualname__ = "__main__", "train"
    monkeypatch.setattr(__main__, "train", train, raising=False)
    state = ResnetRewModel(ResnetRewConfig(width=8)).state_dict()
    path = tmp_path / "rm.pth"
    torch.save({"model_state_dict": state, "train_fn": train}, path)
    monkeypatch.delattr(__main__, "train")
    model = load_reward_pth(path)
    assert model.config.width == 8 and ran == []


class _RunsAShellCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"echo pwned > {self.marker}",))


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    state = ResnetRewModel(ResnetRewConfig(width=8)).state_dict()
    torch.save({"model_state_dict": state, "payload": _RunsAShellCommand(marker)}, path)
    with pytest.raises(UnsafeFileError) as err:
        load_reward_pth(path)
    assert not marker.exists()  # the command never ran
    message = str(err.value)
    assert "\n" not in message and "system" in message and str(path) in message
    # the old (non-zip) torch format is refused too
    legacy = tmp_path / "evil_legacy.pth"
    torch.save(
        {"payload": _RunsAShellCommand(marker)}, legacy, _use_new_zipfile_serialization=False
    )
    with pytest.raises(UnsafeFileError):
        load_reward_pth(legacy)
    assert not marker.exists()


def test_mismatched_keys_are_listed_in_one_line(tmp_path):
    state = ResnetRewModel(ResnetRewConfig(width=8)).state_dict()
    del state["net.7.bias"]
    state["net.9.weight"] = torch.zeros(1)
    state["net.7.weight"] = torch.zeros(1, 32)  # the head of another width
    path = tmp_path / "bad.pth"
    torch.save(state, path)
    with pytest.raises(WmrlError) as err:
        load_reward_pth(path)
    message = str(err.value)
    assert "\n" not in message
    assert "missing net.7.bias" in message and "unexpected net.9.weight" in message
    assert "wrong shape net.7.weight (1, 32) vs (1, 64)" in message


def test_unknown_and_unreadable_files(tmp_path):
    path = tmp_path / "other.pth"
    torch.save({"encoder.weight": torch.zeros(2)}, path)
    with pytest.raises(WmrlError, match="not a known reward model"):
        load_reward_pth(path)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(WmrlError, match="not a readable PyTorch checkpoint") as err:
        load_reward_pth(garbage)
    assert not isinstance(err.value, UnsafeFileError)
    with pytest.raises(WmrlError, match="no such file"):
        load_reward_pth(tmp_path / "missing.pth")


def test_videomae_pth_from_transformers_4_loads(tmp_path):
    torch.manual_seed(0)
    ref = VideoMAERewardModel(VideoMAERewConfig.tiny()).eval()
    # transformers 4.x named the query/value biases q_bias / v_bias; WMPO saved HF keys
    state = {}
    for k, v in ref.model.state_dict().items():
        k = k.replace("attention.query.bias", "attention.q_bias")
        state["module." + k.replace("attention.value.bias", "attention.v_bias")] = v
    assert any(k.endswith("q_bias") for k in state)
    path = tmp_path / "videomae_coffee.pth"
    torch.save(state, path)
    model = load_reward_pth(path, videomae_config=VideoMAERewConfig.tiny())
    frames = torch.randint(0, 256, (1, 9, 32, 32, 3), dtype=torch.uint8)
    assert torch.allclose(model.predict(frames), ref.predict(frames), atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ResnetRewModel(ResnetRewConfig(width=8, threshold=0.42)),
        lambda: TaskEmbedResnetRewModel(ResnetRewConfig(width=8, task_embedding=True)),
        lambda: VideoMAERewardModel(VideoMAERewConfig.tiny()),
    ],
)
def test_model_directory_round_trip(tmp_path, make):
    torch.manual_seed(0)
    model = _randomize_bn(make())
    save_reward_model(model, tmp_path / "rm")
    assert sorted(p.name for p in (tmp_path / "rm").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    loaded = load_reward_model(tmp_path / "rm")
    assert type(loaded) is type(model) and loaded.config == model.config
    frames = torch.randint(0, 256, (1, 8, 32, 32, 3), dtype=torch.uint8)
    ids = [1] if isinstance(model, TaskEmbedResnetRewModel) else None
    assert torch.allclose(loaded.predict(frames, ids), model.predict(frames, ids), atol=1e-6)


def test_directory_errors(tmp_path):
    with pytest.raises(WmrlError, match="config.json is missing"):
        load_reward_model(tmp_path)
    save_reward_model(ResnetRewModel(ResnetRewConfig(width=8)), tmp_path / "rm")
    config = tmp_path / "rm" / "config.json"
    config.write_text(config.read_text().replace('"width"', '"depth"'))
    with pytest.raises(WmrlError, match="unknown reward-model config fields depth"):
        load_reward_model(tmp_path / "rm")
