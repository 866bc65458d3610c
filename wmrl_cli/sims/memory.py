"""Giving a simulator worker's freed memory back to the system.

Workers rebuild environments when GRPO groups change their task mix. The models they free stay
in glibc's heap as fragments, so a worker's RSS grows step after step unless the heap is
trimmed after an eviction.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once (find_library runs ldconfig); None elsewhere."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_memory() -> None:
    """Collect, then give freed heap back. Without it a Meta-World worker that rebuilt
    environments for changing task mixes grew by about 130 MB per RL step of 16 slots, heap
    fragmentation rather than live objects (measured: flat with this call), until the
    out-of-memory killer took it."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
