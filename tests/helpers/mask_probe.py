"""A simulator worker target (sims/workers.py) that reports the signals its process blocks: the
worker imports it by name in its own process (`tests.helpers.mask_probe:MaskProbe`)."""

from __future__ import annotations


class MaskProbe:
    def __init__(self, num_envs: int = 1) -> None:
        pass

    def blocked(self) -> set[int]:
        import signal

        return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())}

    def close(self) -> None:
        pass
