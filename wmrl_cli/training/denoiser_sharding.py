"""A world model's denoiser sharded over the ranks of `train-wm` (and co-evolve's refinement):
`world_model.sharding: fsdp` with `--num-processes N` (training/world_model_trainer.py).

Replicated (`none`), every rank holds the float32 denoiser, its gradients, AdamW's two moments
and the EMA copy: 96 GiB for Wan2.2-5B before activations (benchmarks/wm_train_memory.py), more
than an 80 GB GPU. Sharded, each holds 1/N of each: torch's FSDP2 (`fully_shard`, as the
policy's `training.sharding`, training/sharding.py), every transformer block one unit and the
rest (patch and condition embeddings, action embedders, output head) the root's. The weights stay
float32 and the model's own autocast computes, as replicated; gradients are averaged over the
ranks (reduce-scatter in float32), as DDP averages them. The frozen VAE is not sharded: it
encodes the windows once before training and decodes only in validation.

The EMA copy is kept as shards like the weights it follows (`ema[name]` has its parameter's
placement). Validation and the saved model need the whole denoiser: validation runs inside
`gathered_units` (one all-gather per unit, then the main process validates alone), the saved
model is gathered to the main process's CPU memory (`full_state`). A checkpoint holds the
gathered model (`model/`, as replicated) and the optimizer's and EMA's shards
(`training_state/sharded/`, training/sharding.py's `save_sharded_state`), which resume on the
same or another number of ranks, or on one; a replicated checkpoint resumes sharded
(`WholeOptimizerState`, `WholeEma`).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from wmrl_cli.training.sharding import local_tensor, shard_like


def denoiser_blocks(transformer: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a denoiser: Wan's `blocks`; OpenSora's spatial and temporal
    blocks."""
    blocks = getattr(transformer, "blocks", None)
    if blocks is not None:
        return list(blocks)
    return [*transformer.spatial_blocks, *transformer.temporal_blocks]


def broadcast_from_main(model: nn.Module) -> None:
    """Every rank's weights and buffers made the main rank's, as DDP's wrapper makes them when
    it is built: a model built, or an autoencoder trained, on each rank (with GPU kernels that
    need not agree to the bit) is one model before it is sharded. Collective."""
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


def shard_denoiser(transformer: nn.Module, accelerator: Any) -> None:
    """`fully_shard` the denoiser over the accelerator's ranks, in place; after it is on its
    device and before the optimizer and the EMA copy are made (sharding replaces the
    parameters)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
    for block in denoiser_blocks(transformer):
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(transformer, mesh=mesh, reshard_after_forward=True)
    # Wan embeds the actions before its forward (its action MLPs and null embeddings are the
    # root's parameters): through the root's hooks, so that they are gathered there too.
    if hasattr(transformer, "embed_actions"):
        register_fsdp_forward_method(transformer, "embed_actions")
    # The denoisers return views (their output patches permuted back into latents); the trainer
    # never writes into them in place, which is what FSDP2 warns about.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")


def full_state(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The world model's state dict with the sharded denoiser gathered, in CPU memory on the main
    process (None on the others); collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return state if torch.distributed.get_rank() == 0 else None


class WholeEma:
    """A replicated checkpoint's EMA copy loaded into a sharded denoiser's: `load_state_dict`
    takes the whole tensors and keeps this rank's shards, in place. Collective."""

    def __init__(self, ema: dict[str, torch.Tensor]) -> None:
        self.ema = ema

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in self.ema.items():
            local_tensor(tensor).copy_(shard_like(state[name], tensor))
