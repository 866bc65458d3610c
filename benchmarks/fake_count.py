"""Counting the bytes the real code allocates without allocating them: torch's fake tensors
(FakeTensorMode: a shape, a dtype and a device, no memory) run every operation of the same
modules, and `StorageTracker` adds each storage an operation creates, subtracts it when it is
freed, and keeps the peak. So what a full-size run holds can be counted on a machine with
24 GiB. Shared by the memory benchmarks (wm_train_memory.py, wm_flops.py) and the memory plan's
test (tests/memory/test_memory_plan_count.py), which checks the count against real CPU
tensors byte for byte.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GIB = 2**30
META = torch.device("meta")
CPU = torch.device("cpu")


class StorageTracker(TorchDispatchMode):
    """Live bytes of the storages that operations create (and of those `add`ed), and their
    peak. A storage is counted once however many views share it, follows its `resize_` (FSDP
    frees and refills its gathered parameters that way) and leaves the count when it is
    freed. A DTensor counts as its local shard."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def add(self, tensor: torch.Tensor) -> None:
        self._count(getattr(tensor, "_local_tensor", tensor).untyped_storage())

    def _count(self, storage: torch.UntypedStorage) -> None:
        key = storage._cdata
        if key not in self.live:
            self.live[key] = 0
            weakref.finalize(storage, self._freed, key)
        self.now += storage.nbytes() - self.live[key]
        self.live[key] = storage.nbytes()
        self.peak = max(self.peak, self.now)

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def reset_peak(self) -> None:
        self.peak = self.now

    def __enter__(self) -> StorageTracker:
        # a storage's resize_ is not an operation a dispatch mode sees
        self._resize = resize = torch.UntypedStorage.resize_

        def counted_resize(storage: torch.UntypedStorage, size: int) -> Any:
            out = resize(storage, size)
            self._count(storage)
            return out

        torch.UntypedStorage.resize_ = counted_resize
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        torch.UntypedStorage.resize_ = self._resize
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor):
                self.add(leaf)
        return out


def fake_copy(module: torch.nn.Module, mode: Any) -> None:
    """Swap a meta-device module's parameters and buffers, in place, for fake CPU tensors of
    the same shapes and dtypes (shared ones stay shared)."""
    made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (original, fake)

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in made:
            data = t.data if isinstance(t, torch.nn.Parameter) else t
            made[id(t)] = (t, mode.fake_tensor_converter.from_meta_and_device(mode, data, CPU))
        return made[id(t)][1]

    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None:
                sub._parameters[name] = torch.nn.Parameter(fake(param), param.requires_grad)
        for name, buffer in list(sub._buffers.items()):
            if buffer is not None:
                sub._buffers[name] = fake(buffer)


class Counted:
    """Where the tensors live (fake or real CPU) and the tracker counting them."""

    def __init__(self, real: bool) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.real = real
        self.mode = None if real else FakeTensorMode(allow_non_fake_inputs=True)
        self.build_device = CPU if real else META

    def place(self, module: torch.nn.Module) -> None:
        if self.mode is not None:
            fake_copy(module, self.mode)

    def context(self):
        return contextlib.nullcontext() if self.mode is None else self.mode


class Numbers(list):
    """A sampling schedule as plain floats that slices and `tolist`s like a tensor."""

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Numbers(item) if isinstance(index, slice) else item

    def tolist(self) -> list:
        return list(self)


@contextlib.contextmanager
def real_sampling_schedule():
    """The sampling loop reads its noise levels as numbers (`tolist`), which a fake tensor
    has none of: the schedule (a few floats) is computed on real tensors and handed over as
    numbers."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from wmrl_cli.world_models import flow_matching

    schedule = flow_matching.inference_sigmas

    def real(*args: Any, **kwargs: Any) -> Numbers:
        with unset_fake_temporarily():
            return Numbers(schedule(*args, **kwargs).tolist())

    flow_matching.inference_sigmas = real
    try:
        yield
    finally:
        flow_matching.inference_sigmas = schedule


def gib(n: float) -> float:
    return n / GIB


@contextlib.contextmanager
def fake_ranks(ranks: int):
    """A process group of `ranks` whose collectives move nothing (torch's fake backend): this
    process is rank 0 of an FSDP run, its shards and gathers the sizes they would be."""
    if ranks == 1:
        yield
        return
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=ranks)
    try:
        yield
    finally:
        dist.destroy_process_group()
