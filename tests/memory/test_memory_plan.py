"""The memory plan (memory/plan.py): parameter counts of the full-size configs built
on the meta device, the plan's arithmetic, and the refusal of a run that cannot fit."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.train_policy import args
from wmrl_cli.cli.app import app
from wmrl_cli.config import resolve_config
from wmrl_cli.errors import ConfigError
from wmrl_cli.memory.budget import rl_memory_plan
from wmrl_cli.memory.param_counts import (
    full_world_model_params,
    policy_size,
    published_reward_bytes,
)
from wmrl_cli.memory.plan import (
    GIB,
    PlanSettings,
    PlanSizes,
    activation_bytes,
    imagination_cost,
    plan_memory,
)
from wmrl_cli.policies.config import full_config

runner = CliRunner()


@pytest.fixture(scope="module")
def full_policy():
    return policy_size(full_config())


def test_full_size_parameter_counts_match_the_published_models(full_policy) -> None:
    """OpenVLA-OFT 7.5 B (Llama-2-7B 6.74 B + DINOv2 + SigLIP + projector), LoRA rank 32 on
    the Llama's seven projections (80 M) plus the trainable projector (71 M); Wan2.2-TI2V-5B
    (5.0 B DiT + 0.7 B VAE), OpenSora STDiT3-XL/2 without text cross-attention (0.91 B) + the
    SDXL VAE (0.08 B): docs/libero.md's figures."""
    assert full_policy.params == pytest.approx(7.50e9, rel=0.01)
    assert full_policy.params - full_policy.trainable == 1024  # all but DINOv2's mask token
    lora = policy_size(full_config(), lora_rank=32)
    adapters = 32 * 32 * (4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096))
    assert adapters == 79_953_920
    assert lora.trainable == adapters + 71_385_600  # + the projector
    assert lora.params == full_policy.params + adapters
    assert full_world_model_params("wan") == pytest.approx(5.73e9, rel=0.01)
    assert full_world_model_params("opensora") == pytest.approx(0.99e9, rel=0.01)
    # the largest unit FSDP gathers: the root (embeddings, LM head, projector, ...)
    assert 0.3e9 < full_policy.largest_unit < 0.5e9


def test_plan_arithmetic_full_fine_tuning_fsdp_and_pure_bf16(full_policy) -> None:
    p = full_policy.params
    sizes = PlanSizes(full_policy, world_model=full_world_model_params("wan"))
    base = PlanSettings(sequences=32, compute_dtype="bf16", world_model_dtype="bf16")
    plan = plan_memory(sizes, base)
    # float32 master weights: 4 + 4 + 8 bytes per parameter; without checkpointing autograd
    # keeps a bf16 copy of every block's and the projector's weights
    assert plan.row("policy weights")[1] == pytest.approx(4 * p / GIB)
    assert plan.row("gradients")[1] == pytest.approx(4 * p / GIB)
    assert plan.row("AdamW moments")[1] == pytest.approx(8 * p / GIB)
    copies = full_policy.kept_block_params + full_policy.projector_params
    assert plan.row("policy bf16 weight copies") == (0.0, pytest.approx(2 * copies / GIB), 0.0)
    # AdamW's step: no activations, and torch's multi-tensor step's moment-sized temporary
    assert plan.row("AdamW step temporary") == (0.0, 0.0, pytest.approx(4 * p / GIB))
    assert plan.step == pytest.approx(20 * p / GIB + plan.row("world model")[2])
    assert plan.row("world model")[0] == pytest.approx(2 * 5.73e9 / GIB, rel=0.01)
    assert plan.peak > 120  # docs/libero.md before sharding: more than one GPU holds
    fsdp = plan_memory(sizes, replace(base, sharding="fsdp", world_size=8))
    assert fsdp.row("policy weights")[1] == pytest.approx(4 * p / 8 / GIB)
    assert fsdp.row("AdamW moments")[1] == pytest.approx(8 * p / 8 / GIB)
    assert fsdp.row("policy gathered")[0] == pytest.approx(2 * p / GIB)  # bf16, for rollouts
    bf16 = plan_memory(sizes, replace(base, param_dtype="bf16", optimizer_dtype="bf16"))
    assert bf16.row("gradients")[1] == pytest.approx(2 * p / GIB)
    assert bf16.row("AdamW moments")[1] == pytest.approx(4 * p / GIB)
    offloaded = plan_memory(sizes, replace(base, offload_world_model=True))
    assert offloaded.row("world model")[1] == 0.0 < offloaded.row("world model")[0]
    assert offloaded.update == pytest.approx(plan.update - plan.row("world model")[1])
    offload = plan_memory(sizes, replace(base, sharding="fsdp", world_size=8, cpu_offload=True))
    assert offload.row("policy weights") == offload.row("gradients") == (0.0, 0.0, 0.0)


def test_lora_trains_only_the_adapters(full_policy) -> None:
    lora = policy_size(full_config(), lora_rank=32)
    plan = plan_memory(PlanSizes(lora), PlanSettings(lora_rank=32, sequences=32))
    assert plan.row("gradients")[1] == pytest.approx(4 * lora.trainable / GIB)
    assert plan.row("AdamW moments")[1] == pytest.approx(8 * lora.trainable / GIB)
    assert plan.row("policy weights")[1] == pytest.approx(4 * lora.params / GIB)
    # under bf16 compute the frozen base is bf16 (PolicySharding.frozen_dtype): 14.4 GiB, not
    # 28.2 as until 2026-11-29; the KL reference as the policy computes, its base in bf16 too
    bf16 = PlanSettings(lora_rank=32, sequences=32, compute_dtype="bf16", kl_reference=True)
    plan = plan_memory(PlanSizes(lora), bf16)
    frozen = lora.params - lora.trainable
    weights = (4 * lora.trainable + 2 * frozen) / GIB
    assert plan.row("policy weights")[1] == pytest.approx(weights) == pytest.approx(14.40, abs=0.01)
    assert plan.row("KL reference")[1] == pytest.approx(2 * lora.params / GIB)


def test_activations_estimate_and_checkpointing(full_policy) -> None:
    """Per Llama layer and token 16 h + (7 h + 4 i) x 2 bytes in bf16, and the projector's
    linears and GELUs; checkpointing keeps the stack's input and each block's output in the
    residual stream's dtype (float32 under float32 weights) and one block's activations
    (tests/helpers/memory_plan_count.py counts them at full size)."""
    llama = full_policy.stacks[0]
    assert llama.tokens == 1 + 256 + 32 + 56 + 1
    projector = 256 * (2176 + 2 * 8704 + 2 * 4096) * 2  # fused towers: D -> 4D -> H -> H
    one = activation_bytes(full_policy, 1, 2, 2, checkpointing=False)
    per_token = 16 * 4096 + (7 * 4096 + 4 * 11008) * 2
    assert one > llama.layers * llama.tokens * per_token + projector  # + the towers (trained)
    kept = activation_bytes(full_policy, 1, 2, 2, checkpointing=True)
    assert kept < one / 10
    lora = policy_size(full_config(), lora_rank=32)  # frozen towers keep nothing
    frozen = llama.layers * llama.tokens * per_token + projector
    assert activation_bytes(lora, 1, 2, 2, False) == frozen
    inputs = (llama.layers + 1) * llama.tokens * 4096
    one_block = llama.tokens * per_token + projector
    assert activation_bytes(lora, 1, 2, 4, True) == 4 * inputs + one_block


def test_over_budget_names_what_fits() -> None:
    """The seeds' preset with full fine-tuning on one 80 GB GPU: refused in one line naming
    LoRA and FSDP over enough ranks; each named change fits."""
    cfg = resolve_config("wan-spatial-grpo", overrides=["training.memory_budget_gb=79"])
    wan = full_world_model_params("wan")
    with pytest.raises(ConfigError) as err:
        rl_memory_plan(cfg, full_config(), wan, 45_000_000, 1, "cpu")
    message = str(err.value)
    assert "\n" not in message  # 79 less the reserve for what the plan cannot see
    assert "74.0 GiB of training.memory_budget_gb=79 less a 5.0 GiB reserve" in message
    assert "--set training.lora_rank=32" in message
    assert "--set training.sharding=fsdp --num-processes" in message
    lora = resolve_config(cfg_name := "wan-spatial-grpo", overrides=["training.lora_rank=32"])
    lora.training.memory_budget_gb = 79
    assert rl_memory_plan(lora, full_config(), wan, 45_000_000, 1, "cpu").plan.peak < 74
    sharded = resolve_config(cfg_name, overrides=["training.sharding=fsdp"])
    sharded.training.memory_budget_gb = 79
    assert rl_memory_plan(sharded, full_config(), wan, 45_000_000, 8, "cpu").plan.peak < 74


def test_world_model_offload_turns_on_where_the_plan_needs_it() -> None:
    cfg = resolve_config("wan-spatial-grpo", overrides=["training.lora_rank=32"])
    wan = full_world_model_params("wan")
    free = rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu")
    assert not free.offload_world_model and free.budget is None  # a CPU: nothing is checked
    cfg.training.memory_reserve_gb = 0.0  # the budget as it is
    cfg.training.memory_budget_gb = free.plan.peak - 1  # the world model's share frees enough
    tight = rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu")
    assert tight.offload_world_model and tight.plan.peak <= cfg.training.memory_budget_gb
    cfg.world_model.offload_during_update = False
    with pytest.raises(ConfigError, match="world_model.offload_during_update=true"):
        rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu")


def test_train_policy_prints_the_plan_and_refuses_over_budget(assets, tmp_path, monkeypatch):
    """The table before the first step; over budget, one line (exit 2) before the policy or
    anything else loads, and no run directory left behind."""
    ok = runner.invoke(app, args(assets, tmp_path / "ok", 1, algo="grpo"))
    assert ok.exit_code == 0, ok.output
    assert "memory plan per GPU" not in ok.output  # a CPU's run: no GPU phases, no zeros

    def never(*a, **k):
        raise AssertionError("loaded before the memory plan refused")

    monkeypatch.setattr("wmrl_cli.jobs.train_policy.load_policy", never)
    monkeypatch.setattr("wmrl_cli.jobs.train_policy.build_env", never)
    over = runner.invoke(
        app, [*args(assets, tmp_path / "over", 1), "--set", "training.memory_budget_gb=0.0001"]
    )
    assert over.exit_code == 2, over.output
    assert "memory plan needs" in over.output and "Traceback" not in over.output
    assert "GiB of training.memory_budget_gb=0.0001 less a 1.0 GiB reserve" in over.output
    assert not (tmp_path / "over").exists()


def test_sft_refuses_over_budget_without_suggesting_lora(tmp_path) -> None:
    from tests.helpers.resume_check import sft_args

    over = runner.invoke(
        app, [*sft_args(tmp_path / "sft"), "--set", "training.memory_budget_gb=1e-6"]
    )
    assert over.exit_code == 2, over.output
    assert "memory plan needs" in over.output and "lora_rank" not in over.output


def test_counts_of_checkpoint_directories_match_the_loaded_models(assets, tmp_path) -> None:
    """What the plan counts before loading (configs on the meta device, published files by
    their headers) is what the loaders build: wmrl and published (prismatic) policies, wmrl and
    published (RLinf Wan / OpenSora) world models."""
    from tests.helpers.published_layouts import (
        write_opensora_libero,
        write_openvla_oft_sft,
        write_wan_libero,
    )
    from wmrl_cli.memory.param_counts import count, policy_config_of, world_model_params
    from wmrl_cli.policies.checkpoint import from_pretrained
    from wmrl_cli.world_models.factory import load_init_world_model, load_world_model

    cfg = resolve_config(overrides=["simulator.image_size=32"])
    for policy_dir in (assets / "sft" / "policy", write_openvla_oft_sft(tmp_path / "vla")):
        loaded = count(from_pretrained(policy_dir))
        assert policy_size(policy_config_of(policy_dir)).params == loaded, policy_dir
    assert world_model_params(assets / "wm") == count(load_world_model(assets / "wm"))
    for writer in (write_wan_libero, write_opensora_libero):
        folder = writer(tmp_path / writer.__name__, frame_size=32)
        loaded = count(load_init_world_model(folder, 32, 32, cfg))
        # the files hold a few small tensors the model keeps as buffers or drops
        assert world_model_params(folder) == pytest.approx(loaded, rel=1e-3), folder


def test_world_model_dtype_auto_is_bf16_on_a_gpu_and_float32_on_a_cpu(assets) -> None:
    """`world_model.dtype`: auto keeps a CPU's imagination float32 (unchanged) and is bf16 on a
    GPU; bf16 asked for loads the weights, the VAE's too, in bf16 (here on the CPU)."""
    from wmrl_cli.world_models.loading import imagining_dtype, load_imagining_world_model

    cfg = resolve_config(overrides=["simulator.image_size=32"])
    assert imagining_dtype(cfg, "cpu") is None
    assert imagining_dtype(cfg, "cuda:0") == torch.bfloat16
    cfg.world_model.dtype = "fp32"
    assert imagining_dtype(cfg, "cuda:0") is None
    as_before = load_imagining_world_model(assets / "wm", 32, 32, resolve_config(), "cpu")
    assert {p.dtype for p in as_before.parameters()} == {torch.float32}
    cfg.world_model.dtype = "bf16"
    half = load_imagining_world_model(assets / "wm", 32, 32, cfg, "cpu")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}


def test_offload_during_update_moves_the_frozen_models_out_and_back(assets, tmp_path, monkeypatch):
    """world_model.offload_during_update=true: the world model (with its context; the reward
    model beside it) leaves the device before each update and comes back for the next rollout."""
    from wmrl_cli.world_models.interface import WorldModel

    moves: list[str] = []
    offload, onload = WorldModel.offload, WorldModel.onload
    monkeypatch.setattr(WorldModel, "offload", lambda self: moves.append("out") or offload(self))
    monkeypatch.setattr(
        WorldModel, "onload", lambda self, d: moves.append(f"back:{d}") or onload(self, d)
    )
    import wmrl_cli.rl.trainer as trainer

    plans = []
    planned = trainer.env_memory_plan
    monkeypatch.setattr(
        trainer, "env_memory_plan", lambda *a: plans.append(planned(*a)) or plans[-1]
    )
    extra = ["--set", "world_model.offload_during_update=true"]
    result = runner.invoke(app, [*args(assets, tmp_path / "off", 2, algo="grpo"), *extra])
    assert result.exit_code == 0, result.output
    # one update per step; offload itself is onload("cpu"), then back to the run's device
    assert moves == ["out", "back:cpu", "back:cpu"] * 2
    assert plans[0].offload_world_model  # the plan counts it (on a CPU its table is not shown)


def test_imagination_working_set_and_the_vae_batch_where_the_plan_needs_it() -> None:
    """64 envs on one GPU: the VAE decode of all at once holds 43 GiB (Wan, 256x256, counted by
    tests/helpers/memory_plan_count.py); unset, `world_model.vae_batch` becomes 4 where that is
    what fits, and set, it is kept (and named where it does not fit)."""
    cfg = resolve_config("wan-spatial-grpo", overrides=["training.lora_rank=32"])
    wan = full_world_model_params("wan")
    cost = imagination_cost("wan", 256, 256)
    free = rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu", cost)
    working = free.plan.row("rollout working set")
    assert working == (pytest.approx(64 * cost.decode / GIB), 0.0, 0.0)
    assert free.vae_batch is None and cost.decode / GIB == pytest.approx(0.665, abs=0.001)
    assert imagination_cost("wan", 128, 128).decode == pytest.approx(cost.decode / 4, abs=1)
    cfg.training.memory_budget_gb = free.plan.rollout - 30  # fits with 4 envs per decode
    tight = rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu", cost)
    assert tight.vae_batch == 4 and tight.plan.peak <= cfg.training.memory_budget_gb
    assert not tight.offload_world_model  # the update was never over: nothing to offload
    # 64 * 0.0496 GiB to imagine: now the policy's forward of 64 sequences is the larger
    # with autocast's bf16 copies of the trained weights (cached; the frozen base is bf16)
    lora = policy_size(full_config(), lora_rank=32)
    copies = 2 * lora.trainable
    forward = 64 * 346 * (16 * 4096 + (7 * 4096 + 4 * 11008) * 2) + copies
    assert tight.plan.row("rollout working set")[0] == pytest.approx(forward / GIB, rel=0.01)
    cfg.world_model.vae_batch = 64
    with pytest.raises(ConfigError, match="world_model.vae_batch=4"):
        rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu", cost)
    sharded = rl_memory_plan(cfg, full_config(), wan, 0, 8, "cpu", cost)  # 8 envs a rank
    assert sharded.plan.row("rollout working set")[0] == pytest.approx(8 * cost.decode / GIB)


class _World(torch.nn.Module):
    """What the plan reads of an imagining world model: backend, frame size, parameters."""

    backend, height, width, vae_batch = "opensora", 256, 256, None

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))


def test_the_trainers_plan_reads_its_env_and_batches_every_imagining_world_model() -> None:
    """Inside a verified or simulator-judged env, the imagining model's own backend (OpenSora
    here, whatever `world_model.backend` says) sizes the working set, and the resolved
    `world_model.vae_batch` reaches the confirming world models too."""
    from types import SimpleNamespace

    from wmrl_cli.memory.budget import env_memory_plan

    cfg = resolve_config("wan-spatial-grpo", overrides=["training.lora_rank=32"])
    main, confirm = _World(), _World()
    inner = SimpleNamespace(world_model=main, confirm_models=[confirm], reward_model=None)
    env = SimpleNamespace(imagined=inner)
    free = env_memory_plan(cfg, full_config(), env, 1, "cpu")
    decode = imagination_cost("opensora", 256, 256).decode
    assert free.plan.row("rollout working set")[0] == pytest.approx(64 * decode / GIB)
    cfg.training.memory_budget_gb = free.plan.rollout - 30
    tight = env_memory_plan(cfg, full_config(), env, 1, "cpu")
    assert tight.vae_batch == 4 and main.vae_batch == confirm.vae_batch == 4
    assert not tight.offload_world_model


def test_a_per_tensor_adamw_step_counts_copies_of_the_largest_tensor(full_policy) -> None:
    """Moments in another dtype than the weights: wmrl's per-tensor step, whose float32 copies
    of one tensor (the 32064 x 4096 embedding) replace the multi-tensor step's temporary."""
    sizes = PlanSizes(full_policy)
    mixed = PlanSettings(sequences=32, compute_dtype="bf16", optimizer_dtype="bf16")
    plan = plan_memory(sizes, mixed)
    assert full_policy.largest_trainable == 32064 * 4096
    expected = 5 * full_policy.largest_trainable * 4 / GIB
    assert plan.row("AdamW step temporary") == (0.0, 0.0, pytest.approx(expected))


def test_sharding_remedies_give_each_rank_its_share_of_the_envs() -> None:
    """The preset with the whole batch through the VAE on one 80 GB GPU: over 4 ranks each
    imagines 16 envs, not 64, so 4 ranks fit and are named (not only 8)."""
    cfg = resolve_config(
        "wan-spatial-grpo",
        overrides=["world_model.vae_batch=64", "training.memory_budget_gb=79"],
    )
    cost = imagination_cost("wan", 256, 256)
    wan = full_world_model_params("wan")
    with pytest.raises(ConfigError) as err:
        rl_memory_plan(cfg, full_config(), wan, 0, 1, "cpu", cost)
    assert "--set training.sharding=fsdp --num-processes 4" in str(err.value)
    assert rl_memory_plan(cfg, full_config(), wan, 0, 4, "cpu", cost).plan.peak < 79


def test_a_published_world_model_is_planned_at_its_reset_sets_frame_size(assets, tmp_path):
    """A published model imagines at its reset set's size (RLinf's layout or an episode store,
    read from the first entry alone), so the launch plan sizes its decode by that, 256 x 256
    only where the reset set cannot be read."""
    from tests.helpers.published_layouts import write_wan_libero
    from wmrl_cli.data.reset_set import reset_frame_size
    from wmrl_cli.jobs.inputs import Inputs
    from wmrl_cli.memory.budget import check_rl_memory
    from wmrl_cli.memory.param_counts import world_model_geometry

    folder = write_wan_libero(tmp_path / "wan", frame_size=32)
    assert reset_frame_size(folder) == (32, 32)  # RLinf's dataset/trajN.npy
    assert reset_frame_size(assets / "demos") == (32, 32)  # an episode store
    assert reset_frame_size(tmp_path / "missing") is None
    assert world_model_geometry(folder, (32, 32)) == ("wan", 32, 32)
    assert world_model_geometry(folder) == ("wan", 256, 256)

    cfg = resolve_config("wan-spatial-grpo", overrides=["algorithm.num_envs=64"])
    cfg.training.memory_budget_gb = 1e6
    policy = assets / "sft" / "policy"
    known = check_rl_memory(cfg, Inputs(policy, folder, None, folder), 1, "cpu").plan
    unknown = check_rl_memory(cfg, Inputs(policy, folder, None, None), 1, "cpu").plan
    decode_256 = imagination_cost("wan", 256, 256).decode * 64 / GIB
    assert unknown.rollout >= decode_256 > 32 * known.rollout  # (256 / 32)^2 = 64 less decode


def test_plan_flag_plans_a_published_preset_before_any_download(tmp_path, monkeypatch) -> None:
    """`train-policy --plan`: the table and one line, exit 0 where it fits and 2 where it does
    not (the launch's message, the table above it); assets not downloaded count at their
    published size, planned for a GPU (bf16 world model) on this CPU; nothing is written."""
    monkeypatch.chdir(tmp_path)
    assets = tmp_path / "assets"
    plan = ["train-policy", "--preset", "wan-spatial-grpo", "--assets-dir", str(assets), "--plan"]
    budget = ["--set", "training.memory_budget_gb=80"]
    eight = runner.invoke(app, [*plan, "--num-processes", "8", *budget])
    assert eight.exit_code == 0, eight.output
    assert "memory plan per GPU" in eight.output and "fsdp over 8" in eight.output
    assert "openvla-oft-libero-spatial-traj1, wan-libero-spatial" in eight.output
    cfg = resolve_config("wan-spatial-grpo", overrides=["world_model.dtype=bf16"])
    cfg.training.memory_budget_gb = 80
    wan = full_world_model_params("wan")
    cost = imagination_cost("wan", 256, 256)
    reward = published_reward_bytes("resnet")
    expected = rl_memory_plan(cfg, full_config(), wan, reward, 8, "cpu", cost).plan.peak
    assert f"fits: {expected:.1f} of 75.0 GiB per GPU" in eight.output  # less the reserve
    assert re.search(r"world model \+ VAE \([\d.]+ B, bf16", eight.output)  # as on a GPU

    one = runner.invoke(app, [*plan, *budget])  # full fine-tuning on one GPU
    assert one.exit_code == 2, one.output
    assert "memory plan per GPU" in one.output and "Traceback" not in one.output
    assert "error: the memory plan needs" in one.output and "training.lora_rank=32" in one.output
    # LoRA (its frozen base in bf16) on a 40 GB GPU, with the VAE batched
    forty = ["--set", "training.memory_budget_gb=40", "--set", "training.lora_rank=32"]
    lora = runner.invoke(app, [*plan, *forty])
    assert lora.exit_code == 0 and "world_model.vae_batch=4" in lora.output  # turned on
    assert list(tmp_path.iterdir()) == []  # no run directory, no assets folder


def test_plan_flag_reads_inputs_on_disk_and_refuses_a_missing_path(assets, tmp_path) -> None:
    from tests.helpers.train_policy import args

    ok = runner.invoke(app, [*args(assets, tmp_path / "run", 1), "--plan"])
    assert ok.exit_code == 0, ok.output
    assert "published size" not in ok.output and "nothing to check against" in ok.output
    assert not (tmp_path / "run").exists()
    gone = runner.invoke(
        app, [*args(assets, tmp_path / "run", 1), "--plan", "--world-model", "nowhere"]
    )
    assert gone.exit_code == 1 and "nowhere does not exist" in gone.output  # as at launch


def test_the_libero_docs_preset_table_is_the_plans() -> None:
    """docs/libero.md's table of the GRPO presets' peaks per GPU is what the plan says (each
    figure `train-policy --plan` with the world model offloaded during the update, the bracketed
    one with `world_model.vae_batch=4` too): a change to the plan fails here until the table
    follows it."""
    from tests.helpers import ROOT

    text = (ROOT / "docs" / "libero.md").read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| .* \| \d \| \d+ \(\d+", line)]
    assert len(rows) >= 8, "the preset table moved: update this test"
    policy, reward = full_config(), published_reward_bytes("resnet")
    for row in rows:
        settings, ranks, *figures = [cell.strip() for cell in row.strip("|").split("|")]
        overrides = re.findall(r"--set (\S+)", settings.replace("`", " "))
        for backend, cell in zip(("wan", "opensora"), figures, strict=True):
            whole, batched = (int(x) for x in re.findall(r"\d+", cell)[:2])
            cfg = resolve_config(
                f"{backend}-spatial-grpo",
                overrides=[*overrides, "world_model.dtype=bf16"],
            )
            cfg.world_model.offload_during_update = True
            cfg.training.memory_budget_gb = 1e6
            cost = imagination_cost(backend, 256, 256)
            params = full_world_model_params(backend)
            planned = []
            for vae_batch in (None, 4):
                cfg.world_model.vae_batch = vae_batch
                plan = rl_memory_plan(cfg, policy, params, reward, int(ranks), "cpu", cost).plan
                planned.append(round(plan.peak))
            assert planned == [whole, batched], (row, backend, overrides)


def test_a_damaged_weight_file_is_one_line_before_anything_loads(tmp_path) -> None:
    from wmrl_cli.errors import WmrlError
    from wmrl_cli.memory.param_counts import safetensors_shapes

    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)  # no header a reader takes
    with pytest.raises(WmrlError, match="model.safetensors: not a readable safetensors file"):
        safetensors_shapes(tmp_path)


def test_plan_flag_refuses_what_the_launch_refuses(tmp_path, monkeypatch) -> None:
    """An absent asset of the other backend, an incomplete asset (counted only when not there
    at all) and a start under a launcher are refused in one line, as at launch."""
    monkeypatch.chdir(tmp_path)
    assets = tmp_path / "assets"
    plan = ["train-policy", "--preset", "wan-spatial-grpo", "--assets-dir", str(assets), "--plan"]
    other = runner.invoke(app, [*plan, "--world-model", "opensora-libero-spatial"])
    assert other.exit_code == 1 and "holds RLinf's opensora world model" in other.output
    (assets / "wan-libero-spatial").mkdir(parents=True)  # started, never finished
    partial = runner.invoke(app, plan)
    assert partial.exit_code == 1 and "'wan-libero-spatial' is incomplete" in partial.output
    monkeypatch.setenv("LOCAL_RANK", "0")
    launched = runner.invoke(app, plan)
    assert launched.exit_code == 2 and "--plan runs in one process" in launched.output


# tests/helpers/memory_plan_count.py at full size on fake tensors, bf16, 256 x 256 (GiB; the table
# of docs/benchmarks.md): (backend, context frames, chunk) -> the working set of 1 env decoded
# at once, and of 64 envs decoded 4 at a time
COUNTED_WINDOWS = {
    ("wan", 4, 8): (0.665, 3.126),
    ("wan", 4, 4): (0.663, 2.844),
    ("wan", 4, 16): (0.668, 4.665),
    ("wan", 16, 8): (0.672, 5.558),
    ("opensora", 4, 8): (0.751, 7.659),
    ("opensora", 4, 4): (0.375, 5.104),
    ("opensora", 4, 16): (1.501, 12.77),
    ("opensora", 16, 8): (1.259, 15.302),
}


@pytest.mark.parametrize(("backend", "context", "chunk"), list(COUNTED_WINDOWS))
def test_the_imagination_plan_follows_the_windows_frames(backend, context, chunk) -> None:
    """The decode and the denoiser grow with the window's frames in the VAE's own way (Wan's
    causal decode hardly; OpenSora's per-frame decode with the chunk, its encode with the
    context); the plan gives the counts within 3%, never below them by more than 1%."""
    from wmrl_cli.memory.plan import imagination_bytes

    cost = imagination_cost(backend, 256, 256, context, chunk)
    for counted, (envs, vae_batch) in zip(
        COUNTED_WINDOWS[(backend, context, chunk)], ((1, None), (64, 4)), strict=True
    ):
        planned = imagination_bytes(cost, envs, vae_batch) / GIB
        assert 0.99 * counted <= planned <= 1.03 * counted, (envs, planned, counted)


def test_the_plan_reads_the_context_frames_of_the_model_that_imagines(tmp_path) -> None:
    """A loaded world model imagines after its own context frames (a wmrl model's config, in
    the trainer's env and before anything loads), a published one after the run's; the chunk is
    the policy's (`simulator.chunk_size`)."""
    from types import SimpleNamespace

    from tests.helpers.published_layouts import write_wan_libero
    from wmrl_cli.memory.budget import env_memory_plan
    from wmrl_cli.memory.param_counts import world_model_context_frames
    from wmrl_cli.world_models.factory import build_world_model

    cfg = resolve_config("wan-spatial-grpo", overrides=["training.lora_rank=32"])
    world = _World()
    world.num_context_frames = 16  # OpenSora's encode of 16 context frames outgrows the decode
    inner = SimpleNamespace(world_model=world, confirm_models=[], reward_model=None)
    env = SimpleNamespace(imagined=inner)
    working = env_memory_plan(cfg, full_config(), env, 1, "cpu").plan.row("rollout working set")
    assert working[0] == pytest.approx(64 * imagination_cost("opensora", 256, 256, 16).decode / GIB)
    cfg.simulator.chunk_size = 16
    working = env_memory_plan(cfg, full_config(), env, 1, "cpu").plan.row("rollout working set")
    assert working[0] == pytest.approx(
        64 * imagination_cost("opensora", 256, 256, 16, 16).decode / GIB
    )

    small = resolve_config(
        overrides=["world_model.backend=opensora", "world_model.context_frames=8"]
    )
    build_world_model(small, action_dim=4).save_pretrained(tmp_path / "wm" / "world_model")
    assert world_model_context_frames(tmp_path / "wm", 4) == 8
    published = write_wan_libero(tmp_path / "wan", frame_size=32)
    assert world_model_context_frames(published, 12) == 12
